"""optimization.py: one original AdamWeightDecay step against the reference, schedule, LAMB, accumulation,
checkpoint round trip of weights + slots + step, and MirroredStrategy equivalence."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import encoder
import optimization
from tests.shared_data import shared_path

TINY = ("reference", "original_checkpoint_tiny")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _setup(folder, optimizer_type="adamw"):
    config = encoder.BertConfig.from_json_file(os.path.join(folder, "bert_config.json"))
    config.hidden_dropout_prob = 0.0
    config.attention_probs_dropout_prob = 0.0
    model = encoder.PretrainingModel(config)
    variables = model.variables_by_name()
    optimizer = optimization.make_optimizer(1e-3, 100, 10, optimizer_type=optimizer_type)
    optimizer.build(variables)
    everything = dict(variables)
    everything.update(optimizer.variables_by_name())
    return model, variables, optimizer, everything


def _features(folder):
    ref = np.load(os.path.join(folder, "reference_outputs.npz"))
    return {k[3:]: tf.constant(ref[k]) for k in ref.files if k.startswith("in_")}, ref


def _train_step(model, variables, optimizer, loss_key="total_loss", jit_compile=False):
    trainable = list(variables.values())

    @tf.function(jit_compile=jit_compile)
    def step(features):
        with tf.GradientTape() as tape:
            loss = model(features, training=True)[loss_key]
        grads = tape.gradient(loss, trainable)
        return optimizer.apply_gradients(zip(grads, trainable))
    return step


def _check_against_reference(everything, ref, tol=1e-6):
    checked = 0
    for key in ref.files:
        if not key.startswith("step_"):
            continue
        name = key[len("step_"):].replace("__rows0_500", "").replace("__", "/")
        value = everything[name].numpy()
        if key.endswith("__rows0_500"):
            value = value[:500]
        np.testing.assert_allclose(value, ref[key], atol=tol, rtol=0, err_msg=name)
        checked += 1
    assert checked == len([k for k in ref.files if k.startswith("step_")]) == 95


@pytest.mark.parametrize("jit_compile", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_one_step_matches_original(jit_compile):
    folder = shared_path(*TINY)
    model, variables, optimizer, everything = _setup(folder)
    loaded, new, unused = checkpoints.init_from_checkpoint(everything, folder)
    assert new == [] and unused == []
    assert int(optimizer.global_step.numpy()) == 30
    features, ref = _features(folder)
    _train_step(model, variables, optimizer, jit_compile=jit_compile)(features)
    assert int(optimizer.global_step.numpy()) == int(ref["step_global_step"]) == 31
    _check_against_reference(everything, ref)


@pytest.mark.slow
def test_checkpoint_after_step_has_original_names_and_resumes_exactly(tmp_path):
    folder = shared_path(*TINY)
    model, variables, optimizer, everything = _setup(folder)
    checkpoints.init_from_checkpoint(everything, folder)
    features, ref = _features(folder)
    step = _train_step(model, variables, optimizer)
    step(features)
    manager = checkpoints.CheckpointManager(str(tmp_path), max_to_keep=2)
    prefix = manager.save(everything, optimizer.global_step)
    assert os.path.basename(prefix) == "model.ckpt-31"

    original_names = [n[:-2] for n in json.load(open(os.path.join(folder, "variable_names.json")))]
    assert list(everything) == original_names  # creation order too
    written = tf.train.load_checkpoint(prefix)
    original = tf.train.load_checkpoint(folder)
    assert written.get_variable_to_shape_map() == original.get_variable_to_shape_map()
    assert written.get_variable_to_dtype_map() == original.get_variable_to_dtype_map()
    for name, var in everything.items():
        np.testing.assert_array_equal(written.get_tensor(name), var.numpy(), err_msg=name)

    step(features)
    after_two = {n: v.numpy() for n, v in everything.items()}

    model2, variables2, optimizer2, everything2 = _setup(folder)
    assert checkpoints.CheckpointManager(str(tmp_path)).restore(everything2) == 31
    for name, var in everything2.items():
        np.testing.assert_array_equal(var.numpy(), written.get_tensor(name), err_msg=name)
    _train_step(model2, variables2, optimizer2)(features)
    for name, var in everything2.items():
        np.testing.assert_array_equal(var.numpy(), after_two[name], err_msg=name)


def test_schedule_warmup_and_decay():
    schedule = optimization.LinearWarmupDecay(1e-3, num_train_steps=100, num_warmup_steps=10)
    for step, expected in [(0, 0.0), (1, 1e-4), (5, 5e-4), (9, 9e-4), (10, 9e-4), (30, 7e-4), (99, 1e-5),
                           (100, 0.0), (150, 0.0)]:
        assert abs(float(schedule(step)) - expected) < 1e-9, step
    no_warmup = optimization.LinearWarmupDecay(2e-5, num_train_steps=10, num_warmup_steps=0)
    assert abs(float(no_warmup(0)) - 2e-5) < 1e-12
    with pytest.raises(ValueError, match="num_train_steps"):
        optimization.LinearWarmupDecay(1e-3, 0, 0)
    with pytest.raises(ValueError, match="optimizer_type"):
        optimization.make_optimizer(1e-3, 10, 1, optimizer_type="sgd")


def test_update_rule_weight_decay_exclusions_and_clipping():
    names = {"layer/dense/kernel": tf.Variable(np.full([2, 2], 0.5, np.float32)),
             "layer/dense/bias": tf.Variable(np.full([2], 0.5, np.float32)),
             "layer/LayerNorm/gamma": tf.Variable(np.full([2], 0.5, np.float32))}
    optimizer = optimization.AdamWeightDecay(learning_rate=0.1, clip_norm=1.0)
    optimizer.build(names)
    grads = [tf.fill([2, 2], 3.0), tf.fill([2], 3.0), tf.fill([2], 3.0)]
    norm = optimizer.apply_gradients(zip(grads, names.values()))
    assert abs(float(norm) - 3.0 * np.sqrt(8)) < 1e-5
    g = 3.0 / (3.0 * np.sqrt(8))  # clipped to global norm 1
    m, v = 0.1 * g, 0.001 * g * g
    adam = m / (np.sqrt(v) + 1e-6)
    np.testing.assert_allclose(names["layer/dense/kernel"].numpy(), 0.5 - 0.1 * (adam + 0.01 * 0.5), rtol=1e-6)
    np.testing.assert_allclose(names["layer/dense/bias"].numpy(), 0.5 - 0.1 * adam, rtol=1e-6)
    np.testing.assert_allclose(names["layer/LayerNorm/gamma"].numpy(), 0.5 - 0.1 * adam, rtol=1e-6)
    slots = optimizer.variables_by_name()
    np.testing.assert_allclose(slots["layer/dense/kernel/adam_m"].numpy(), m, rtol=1e-6)
    np.testing.assert_allclose(slots["layer/dense/kernel/adam_v"].numpy(), v, rtol=1e-6)
    assert int(optimizer.global_step.numpy()) == 1
    unbuilt = optimization.AdamWeightDecay(learning_rate=0.1)
    with pytest.raises(ValueError, match="build"):
        unbuilt.apply_gradients(zip(grads, names.values()))


def test_global_norm_counts_gathered_rows_as_the_originals_clipping():
    """An IndexedSlices gradient (a gathered table) counts one squared row per occurrence, as tf.clip_by_global_norm
    does in the original's train op; the update is dense, duplicate rows summed."""
    table = tf.Variable(np.zeros([3, 2], np.float32))
    bias = tf.Variable(np.zeros([1], np.float32))
    rows = tf.IndexedSlices(values=tf.constant([[3.0, 0.0], [3.0, 0.0]]), indices=tf.constant([1, 1]),
                            dense_shape=tf.constant([3, 2]))
    dense = tf.constant([4.0])
    _, original = tf.clip_by_global_norm([rows, dense], clip_norm=1.0)
    optimizer = optimization.AdamWeightDecay(learning_rate=0.1, clip_norm=1.0)
    optimizer.build({"table": table, "bias": bias})
    norm = optimizer.apply_gradients([(rows, table), (dense, bias)])
    assert abs(float(norm) - np.sqrt(9 + 9 + 16)) < 1e-5  # the summed row would give sqrt(36 + 16)
    assert abs(float(norm) - float(original)) < 1e-6
    moved = table.numpy()
    assert not moved[[0, 2]].any() and moved[1, 0] < 0 and moved[1, 1] == 0
    m = optimizer.variables_by_name()["table/adam_m"].numpy()
    np.testing.assert_allclose(m[1, 0], 0.1 * 6.0 / float(norm), rtol=1e-6)  # the summed row, clipped

    # The same count given for a gradient already made dense (training.py's accumulation).
    table, bias = tf.Variable(np.zeros([3, 2], np.float32)), tf.Variable(np.zeros([1], np.float32))
    again = optimization.AdamWeightDecay(learning_rate=0.1, clip_norm=1.0)
    again.build({"table": table, "bias": bias})
    norm = again.apply_gradients([(tf.convert_to_tensor(rows), table), (dense, bias)],
                                 row_squares={"table": tf.constant(18.0)})
    assert abs(float(norm) - np.sqrt(34)) < 1e-5
    np.testing.assert_allclose(table.numpy(), moved, rtol=1e-6)
    with pytest.raises(ValueError, match="row_squares names no gradient"):
        again.apply_gradients([(dense, bias)], row_squares={"table": tf.constant(1.0)})


def test_lamb_step_matches_formula():
    w0 = np.array([[0.3, -0.2], [0.1, 0.4]], np.float32)
    names = {"dense/kernel": tf.Variable(w0), "dense/bias": tf.Variable(np.array([0.5, 0.5], np.float32))}
    optimizer = optimization.Lamb(learning_rate=0.01, clip_norm=None)
    optimizer.build(names)
    g = np.array([[0.2, -0.1], [0.05, 0.3]], np.float32)
    optimizer.apply_gradients(zip([tf.constant(g), tf.constant([0.1, 0.1])], names.values()))
    m_hat = (0.1 * g) / (1 - 0.9)
    v_hat = (0.001 * g * g) / (1 - 0.999)
    update = m_hat / (np.sqrt(v_hat) + 1e-6) + 0.01 * w0
    ratio = np.linalg.norm(w0) / np.linalg.norm(update)
    np.testing.assert_allclose(names["dense/kernel"].numpy(), w0 - 0.01 * ratio * update, rtol=1e-5)
    # bias: no weight decay, no layer adaptation
    np.testing.assert_allclose(names["dense/bias"].numpy(), 0.5 - 0.01 * 1.0, rtol=1e-5)


@pytest.mark.slow
def test_lamb_trains_the_reference_model():
    folder = shared_path(*TINY)
    model, variables, optimizer, everything = _setup(folder, optimizer_type="lamb")
    checkpoints.init_from_checkpoint(variables, folder)
    features, _ = _features(folder)
    before = float(model(features)["total_loss"])
    step = _train_step(model, variables, optimizer)
    for _ in range(3):
        step(features)
    assert float(model(features)["total_loss"]) < before


_MIRRORED_SCRIPT = textwrap.dedent("""
    import os, sys
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    sys.path.insert(0, sys.argv[1])
    import encoder, optimization
    rng = np.random.RandomState(0)
    batch, seq, vocab = 8, 32, 300
    mask = (np.arange(seq)[None, :] < rng.randint(10, seq, size=[batch, 1])).astype(np.int32)
    features = {
        "input_ids": rng.randint(1, vocab, size=[batch, seq]).astype(np.int32) * mask,
        "input_mask": mask,
        "segment_ids": (np.arange(seq)[None, :] >= 6).astype(np.int32) * mask,
        "masked_lm_positions": rng.randint(0, 10, size=[batch, 4]).astype(np.int32),
        "masked_lm_ids": rng.randint(1, vocab, size=[batch, 4]).astype(np.int32),
        "masked_lm_weights": np.ones([batch, 4], np.float32),
        "next_sentence_labels": rng.randint(0, 2, size=[batch, 1]).astype(np.int32),
    }
    config = encoder.BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
                                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    initial = {}

    def run(strategy, jit, apply_if=None):
        with strategy.scope():
            model = encoder.PretrainingModel(config)
            variables = model.variables_by_name()
            optimizer = optimization.make_optimizer(1e-3, 100, 10)
            optimizer.build(variables)
        everything = dict(variables, **optimizer.variables_by_name())
        if not initial:
            initial.update({n: v.numpy() for n, v in everything.items()})
        for name, var in everything.items():
            var.assign(initial[name])
        optimizer.global_step.assign(30)
        trainable = list(variables.values())

        # XLA compiles the per-replica gradients; the cross-replica update runs outside the cluster.
        @tf.function(jit_compile=jit)
        def replica_grads(batch):
            with tf.GradientTape() as tape:
                loss = model(batch, training=True)["nsp_loss"]
            return tape.gradient(loss, trainable)

        def replica_step(batch):
            condition = None if apply_if is None else tf.constant(apply_if)
            return optimizer.apply_gradients(zip(replica_grads(batch), trainable), apply_if=condition)

        @tf.function
        def step(batch):
            return strategy.run(replica_step, args=(batch,))

        dataset = tf.data.Dataset.from_tensors(features)
        batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
        step(batch)
        return {n: v.numpy() for n, v in everything.items()}

    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert mirrored.num_replicas_in_sync == 2
    single = run(tf.distribute.get_strategy(), False)
    assert np.abs(single["bert/pooler/dense/kernel"] - initial["bert/pooler/dense/kernel"]).max() > 1e-5
    for jit in (False, True):
        multi = run(mirrored, jit)
        worst = max(float(np.abs(multi[n].astype(np.float64) - single[n]).max()) for n in single)
        assert int(multi["global_step"]) == 31, multi["global_step"]
        print("jit", jit, "max difference", worst)
        assert worst < 1e-6, worst
    # apply_if (dynamic loss scaling's "finite"), taken in the cross-replica update: true applies, false leaves
    # every variable, slot and global_step as they were.
    applied = run(mirrored, True, apply_if=True)
    assert max(float(np.abs(applied[n].astype(np.float64) - single[n]).max()) for n in single) < 1e-6
    skipped = run(mirrored, True, apply_if=False)
    assert int(skipped["global_step"]) == 30, skipped["global_step"]
    for name, value in skipped.items():
        if name != "global_step":
            np.testing.assert_array_equal(value, initial[name], err_msg=name)
    print("OK")
""")


@pytest.mark.slow
def test_mirrored_strategy_two_replicas_equals_single_device(tmp_path):
    script = tmp_path / "mirrored.py"
    script.write_text(_MIRRORED_SCRIPT)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, str(script), ROOT], capture_output=True, text=True,
                            timeout=600, env=env)
    assert result.returncode == 0 and "OK" in result.stdout, result.stdout[-3000:] + result.stderr[-5000:]
