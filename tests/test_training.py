"""training.py: config and flags, gradient accumulation, LAMB, mixed precision, summaries, eval, predict."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from absl import flags

import checkpoints
import encoder
import preemption
import run_pretraining as rp
import run_squad
import runner
import serving
import training
from tests.event_files import summary_scalars
from tests import tiny
from tests.shared_data import pretraining_records, shared_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


pytestmark = pytest.mark.usefixtures("float32_policy")


# ---------------------------------------------------------------------------------------------------------
# Config and flags.


def test_config_from_flags_and_keywords():
    import cli
    import run_pretraining
    fv = flags.FlagValues()
    cli.define_flags(run_pretraining.PretrainingOptions, flag_values=fv)
    fv(["prog", "--output_dir=/tmp/x", "--dtype=bfloat16", "--optimizer=lamb", "--train_batch_size=64",
        "--gradient_accumulation_steps=4", "--distribution_strategy=mirrored", "--use_xla", "--learning_rate=1e-3",
        "--input_file=x.tfrecord", "--bert_config_file=c.json"])
    options = cli.options_from_flags(run_pretraining.PretrainingOptions, fv)
    config = options.training
    assert (config.train_batch_size, config.dtype, config.optimizer, config.gradient_accumulation_steps) == (
        64, "bfloat16", "lamb", 4)
    assert config.use_xla and config.learning_rate == 1e-3 and config.num_train_steps == 100000
    assert config.strategy_name == "mirrored" and options.input_file == "x.tfrecord"
    assert training.TrainingConfig(use_tpu=True).strategy_name == "tpu"
    with pytest.raises(flags.IllegalFlagValueError):
        fv(["prog", "--dtype=float64"])
    fine_tuning = flags.FlagValues()
    cli.define_flags(runner.FinetuningOptions, flag_values=fine_tuning)
    assert "num_train_steps" not in fine_tuning and "learning_rate" in fine_tuning
    assert fine_tuning["train_batch_size"].default == 32 and fine_tuning["eval_batch_size"].default == 8
    with pytest.raises(flags.IllegalFlagValueError, match="--bert_config_file must have a value"):
        fine_tuning(["prog", "--vocab_file=vocab.txt", "--output_dir=out"])  # required by the runners


@pytest.mark.parametrize("kwargs, message", [
    (dict(dtype="float64"), "--dtype='float64'"),
    (dict(optimizer="sgd"), "--optimizer='sgd'"),
    (dict(distribution_strategy="parameter_server"), "--distribution_strategy"),
    (dict(train_batch_size=30, gradient_accumulation_steps=4), "--train_batch_size=30 .*--gradient_accumul"),
    (dict(save_checkpoints_steps=0), "--save_checkpoints_steps=0"),
])
def test_config_errors_name_the_flag(kwargs, message):
    with pytest.raises(ValueError, match=message):
        training.TrainingConfig(**kwargs)


def test_multi_worker_strategy_needs_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="TF_CONFIG"):
        training.create_strategy(training.TrainingConfig(distribution_strategy="multi_worker_mirrored"))


def test_float32_policy_restores_the_training_policy():
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        with serving.float32_policy():
            assert keras.config.dtype_policy().name == "float32"
        assert keras.config.dtype_policy().name == "mixed_bfloat16"
        with pytest.raises(RuntimeError):
            with serving.float32_policy():
                raise RuntimeError("export failed")
        assert keras.config.dtype_policy().name == "mixed_bfloat16"
    finally:
        keras.config.set_dtype_policy("float32")


def test_fine_tuning_steps_as_the_original():
    config = runner.finetuning_config(training.TrainingConfig(train_batch_size=32), 3668, 3.0, 0.1)
    assert (config.num_train_steps, config.num_warmup_steps) == (343, 34)
    with pytest.raises(ValueError, match="10 training examples x --num_train_epochs=1.0 / --train_batch_size=32 "
                                         "give no training step"):
        runner.finetuning_config(training.TrainingConfig(train_batch_size=32), 10, 1.0, 0.1)


def test_eval_results_format():
    text = runner.format_eval_results({"loss": 5.123456789, "global_step": 300, "masked_lm_accuracy": 0.25})
    assert text == "global_step = 300\nloss = 5.123457\nmasked_lm_accuracy = 0.25\n"


# ---------------------------------------------------------------------------------------------------------
# Training.


@pytest.mark.slow
def test_gradient_accumulation_4x8_equals_batch_32(tmp_path):
    one = str(tmp_path / "one")
    tiny.train_pretraining(one, gradient_accumulation_steps=1)
    init = os.path.join(one, "model.ckpt-0")
    four = str(tmp_path / "four")
    tiny.train_pretraining(four, gradient_accumulation_steps=4, init_checkpoint=init)
    a = checkpoints.load_checkpoint(os.path.join(one, "model.ckpt-3"))
    b = checkpoints.load_checkpoint(os.path.join(four, "model.ckpt-3"))
    start = checkpoints.load_checkpoint(init)
    moved = 0
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6, err_msg=name)
        moved += not np.array_equal(a[name], start[name])
    assert moved == len(a)  # every variable (and slot, and global_step) changed


def _loss_falls(output_dir, **kwargs):
    result = tiny.train_pretraining(output_dir, steps=30, save_summary_steps=10, save_checkpoints_steps=30, **kwargs)
    losses = [value for _, value in summary_scalars(output_dir)["loss"]]
    assert len(losses) == 3 and all(np.isfinite(losses))
    assert losses[0] > losses[1] > losses[2] and losses[2] < losses[0] - 0.2, losses
    assert result["global_step"] == 30
    return result


@pytest.mark.slow
def test_lamb_with_dynamic_masking_trains(tmp_path):
    masker = rp.DynamicMasker(shared_path("vocab", "uncased", "vocab.txt"), 30522, 20)
    _loss_falls(str(tmp_path / "lamb"), optimizer="lamb", learning_rate=2e-2, masker=masker)


@pytest.mark.slow
def test_bfloat16_trains(tmp_path):
    _loss_falls(str(tmp_path / "bf16"), dtype="bfloat16")
    names = checkpoints.list_checkpoint(str(tmp_path / "bf16"))
    assert "bert/embeddings/word_embeddings" in names


@pytest.mark.slow
def test_float16_trains_with_dynamic_loss_scaling(tmp_path):
    output_dir = str(tmp_path / "fp16")
    result = _loss_falls(output_dir, dtype="float16", train_batch_size=8)  # float16 is slow on CPU
    assert result["loss_scale"] >= 1.0
    saved = checkpoints.load_checkpoint(output_dir)
    assert saved["loss_scale"] >= 1.0 and "loss_scale_good_steps" in saved


def test_mirrored_strategy_on_one_device_trains_like_the_default_strategy(tmp_path):
    """Every variable and slot after 3 steps, from the same start; the fused XLA update once left the mirrored
    adam_m / adam_v at zero, so each step restarted Adam."""
    default = str(tmp_path / "default")
    tiny.train_pretraining(default)
    mirrored = str(tmp_path / "mirrored")
    tiny.train_pretraining(mirrored, distribution_strategy="mirrored", init_checkpoint=os.path.join(default, "model.ckpt-0"))
    a = checkpoints.load_checkpoint(os.path.join(default, "model.ckpt-3"))
    b = checkpoints.load_checkpoint(os.path.join(mirrored, "model.ckpt-3"))
    assert np.abs(a["bert/pooler/dense/kernel/adam_m"]).sum() > 0
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-7, err_msg=name)


def test_loss_scale_halves_on_overflow_and_doubles_after_2000_good_steps():
    scale = training._LossScale()
    scale.update(tf.constant(True))
    assert (float(scale.scale), int(scale.good_steps)) == (2.0 ** 15, 1)
    scale.update(tf.constant(False))
    assert (float(scale.scale), int(scale.good_steps)) == (2.0 ** 14, 0)
    scale.good_steps.assign(1999)
    scale.update(tf.constant(True))
    assert (float(scale.scale), int(scale.good_steps)) == (2.0 ** 15, 0)
    scale.scale.assign(1.0)
    scale.update(tf.constant(False))
    assert float(scale.scale) == 1.0


_FINITE_SCRIPT = textwrap.dedent("""
    import sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    sys.path.insert(0, sys.argv[1])
    import training
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

    @tf.function
    def agreed(bad_replica):
        def replica():
            replica_id = tf.distribute.get_replica_context().replica_id_in_sync_group
            value = tf.where(tf.equal(replica_id, bad_replica), float("inf"), 1.0)
            return training._all_finite([tf.fill([3], value), None])
        return strategy.experimental_local_results(strategy.run(replica))

    print([bool(x) for x in agreed(1)], [bool(x) for x in agreed(-1)])
""")


def test_every_replica_skips_the_float16_step_when_one_overflowed(tmp_path):
    script = tmp_path / "finite.py"
    script.write_text(_FINITE_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), ROOT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[-2] == "[False, False] [True, True]", proc.stdout


@pytest.mark.slow
def test_run_pretraining_mirrored_with_xla_and_float16_equals_the_default_strategy(tmp_path):
    """run_pretraining.py --distribution_strategy=mirrored with --use_xla=true and --dtype=float16: every variable,
    slot, loss-scale variable and global_step after 3 steps equal the default strategy's. Both once ended in
    "merge_call called while defining a new graph": the mirrored update inside the XLA step (the split step now
    compiles the gradients only) and inside dynamic loss scaling's tf.cond (now the optimizer's apply_if)."""
    config = tmp_path / "bert_config.json"
    tiny.pretraining_config().to_json_file(str(config))

    def run(name, *flags):
        out = tmp_path / name
        proc = subprocess.run(
            [sys.executable, os.path.join(ROOT, "run_pretraining.py"),
             "--do_train", f"--input_file={pretraining_records()}", f"--output_dir={out}", f"--bert_config_file={config}",
             "--train_batch_size=8", "--max_seq_length=128", "--max_predictions_per_seq=20", "--num_train_steps=3",
             "--num_warmup_steps=0", "--learning_rate=1e-3", "--iterations_per_loop=3", "--use_xla=true",
             "--dtype=float16", *flags],
            capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return checkpoints.load_checkpoint(str(out / "model.ckpt-3"))

    default = run("default")
    mirrored = run("mirrored", "--distribution_strategy=mirrored")
    assert int(mirrored["global_step"]) == 3 and float(mirrored["loss_scale"]) == 2.0 ** 15
    assert int(mirrored["loss_scale_good_steps"]) == 3
    assert set(default) == set(mirrored)
    for name in default:
        np.testing.assert_allclose(default[name], mirrored[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_summaries_checkpoints_resume_and_init(tmp_path):
    output_dir = str(tmp_path / "run")
    tiny.train_pretraining(output_dir, steps=4, train_batch_size=8, save_checkpoints_steps=2, save_summary_steps=1,
           keep_checkpoint_max=2)
    scalars = summary_scalars(output_dir)
    for tag in ("loss", "masked_lm_loss", "next_sentence_loss", "learning_rate", "examples_per_sec"):
        assert [step for step, _ in scalars[tag]] == [1, 2, 3, 4], tag
    assert [round(v, 7) for _, v in scalars["learning_rate"]] == [7.5e-4, 5e-4, 2.5e-4, 0.0]
    manager = checkpoints.CheckpointManager(output_dir)
    assert [os.path.basename(p) for p in manager.checkpoints] == ["model.ckpt-2", "model.ckpt-4"]
    # Finished: a second call trains nothing.
    assert tiny.train_pretraining(output_dir, steps=4, train_batch_size=8) == {"global_step": 4}
    # A fresh run with init_checkpoint starts from those weights, with a new global step.
    fresh = str(tmp_path / "fresh")
    tiny.train_pretraining(fresh, steps=1, train_batch_size=8, learning_rate=1e-9, init_checkpoint=output_dir + "/model.ckpt-4")
    before = checkpoints.load_checkpoint(output_dir + "/model.ckpt-4")
    after = checkpoints.load_checkpoint(fresh + "/model.ckpt-0")
    assert int(after["global_step"]) == 0
    np.testing.assert_array_equal(after["bert/pooler/dense/kernel"], before["bert/pooler/dense/kernel"])
    assert not after["bert/pooler/dense/kernel/adam_m"].any()


_CLIPPING_SCRIPT = textwrap.dedent("""
    import os, sys
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    root, out = sys.argv[1], sys.argv[2]
    sys.path.insert(0, root)
    import keras
    import checkpoints, encoder, run_squad, runner, training

    rng = np.random.RandomState(0)
    rows, seq, vocab = 48, 16, 6  # six tokens: every token occurs many times in a batch
    arrays = {"input_ids": rng.randint(1, vocab, (rows, seq)).astype(np.int32),
              "input_mask": np.ones((rows, seq), np.int32), "segment_ids": np.zeros((rows, seq), np.int32),
              "start_positions": rng.randint(0, seq, rows).astype(np.int32),
              "end_positions": rng.randint(0, seq, rows).astype(np.int32)}
    config = encoder.BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=64, max_position_embeddings=seq, type_vocab_size=2,
                                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    task = run_squad.SquadTask(config)
    keras.utils.set_random_seed(1)
    model = task.build_model()
    # A large output layer: the encoder's gradients, the word embeddings' among them, dominate the norm.
    model.head.output_weights.assign(model.head.output_weights * 100.0)
    with tf.GradientTape() as tape:
        loss, _ = task.compute_loss(model, {k: v[:16] for k, v in arrays.items()}, training=True)
    grads = [g for g in tape.gradient(loss, list(model.variables_by_name().values())) if g is not None]
    rows_squared = sum(float(tf.reduce_sum(tf.square(g.values if isinstance(g, tf.IndexedSlices) else g)))
                       for g in grads)
    dense_squared = sum(float(tf.reduce_sum(tf.square(tf.convert_to_tensor(g)))) for g in grads)
    print("norm of the first batch: per occurrence %.4g, dense %.4g" % (rows_squared ** 0.5, dense_squared ** 0.5))
    init = checkpoints.CheckpointManager(os.path.join(out, "init")).save(model.variables_by_name(), 0)

    def train(name, strategy=None, **kwargs):
        cfg = training.TrainingConfig(output_dir=os.path.join(out, name), train_batch_size=16, learning_rate=1e-3,
                                      num_train_steps=3, num_warmup_steps=0, iterations_per_loop=3, **kwargs)
        training.train(task, runner.array_input_fn(arrays, is_training=False, trim=False), cfg,
                       strategy or tf.distribute.get_strategy(), init_checkpoint=init)
        return checkpoints.load_checkpoint(os.path.join(out, name, "model.ckpt-3"))

    def mirrored():
        return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

    one = train("one")
    runs = {"accumulated_4": train("accumulated_4", gradient_accumulation_steps=4),
            "replicas_2": train("replicas_2", mirrored()),
            "replicas_2_accumulated_2": train("replicas_2_accumulated_2", mirrored(), gradient_accumulation_steps=2),
            "xla": train("xla", use_xla=True),
            "tpu_path": train("tpu_path", use_tpu=True)}
    for name, got in runs.items():
        print(name, max(float(np.abs(got[n] - one[n]).max()) for n in one))
""")


@pytest.mark.slow
def test_clipping_counts_token_occurrences_consistently_with_one_larger_batch(tmp_path):
    """A fine-tuning model's word-embedding gradient is clipped per token occurrence, as the original's on CPU/GPU:
    three steps of batch 16 end with the same weights as micro-batches of 4 accumulated, two replicas of 8, two
    replicas of two accumulated micro-batches of 4, and XLA; the TPU path (--use_tpu: the original's one-hot
    lookup) counts the dense gradient and ends elsewhere."""
    script = tmp_path / "clipping.py"
    script.write_text(_CLIPPING_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TF_CONFIG")}
    proc = subprocess.run([sys.executable, str(script), ROOT, str(tmp_path / "runs")], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-5000:]
    lines = proc.stdout.splitlines()
    norms = [float(x) for x in lines[0].split("per occurrence ")[1].split(", dense ")]
    lines = dict(line.rsplit(" ", 1) for line in lines[1:])
    assert norms[0] > 10.0 and abs(norms[1] / norms[0] - 1.0) > 0.1, norms  # clipped, and the two counts differ
    for name in ("accumulated_4", "replicas_2", "replicas_2_accumulated_2", "xla"):
        assert float(lines[name]) < 2e-6, (name, proc.stdout)
    assert float(lines["tpu_path"]) > 1e-3, proc.stdout


# ---------------------------------------------------------------------------------------------------------
# Evaluate and predict.


def _stored_batch_input_fn(batch):
    def input_fn(batch_size, input_context):
        return tf.data.Dataset.from_tensor_slices(batch).batch(batch_size)
    return input_fn


@pytest.mark.slow
def test_predict_yields_examples_in_order_and_evaluate_is_deterministic(tmp_path):
    ref = np.load(os.path.join(tiny.original_dir(), "reference_outputs.npz"))
    batch = {name: ref["in_" + name] for name in rp.FEATURE_NAMES}
    bert_config = encoder.BertConfig.from_json_file(os.path.join(tiny.original_dir(), "bert_config.json"))
    config = training.TrainingConfig(output_dir=str(tmp_path / "out"), predict_batch_size=3, eval_batch_size=3)
    checkpoint = os.path.join(tiny.original_dir(), "model.ckpt-30")
    task = rp.PretrainingTask(bert_config)
    outputs = list(training.predict(task, _stored_batch_input_fn(batch), config, checkpoint_path=checkpoint))
    assert len(outputs) == 8
    got = np.stack([o["nsp_log_probs"] for o in outputs])
    np.testing.assert_allclose(got, ref["out_nsp_log_probs"], rtol=1e-5, atol=1e-6)
    first = training.evaluate(task, _stored_batch_input_fn(batch), config, checkpoint_path=checkpoint)
    second = training.evaluate(task, _stored_batch_input_fn(batch), config, checkpoint_path=checkpoint)
    assert first == second and first["global_step"] == 30
    np.testing.assert_allclose(first["next_sentence_loss"], ref["out_nsp_loss"], rtol=1e-5)
    limited = training.evaluate(task, _stored_batch_input_fn(batch), config, max_steps=1,
                                checkpoint_path=checkpoint)
    assert limited["next_sentence_loss"] != first["next_sentence_loss"]
    assert not os.path.exists(config.output_dir)  # the loop writes no result file: the job does


# ---------------------------------------------------------------------------------------------------------
# Train loop.


def test_each_step_draws_its_own_dropout_masks_from_the_seed_and_the_step():
    """A training step's masks are a function of --seed, the global step, the replica and the micro-batch (so
    a run resumed at any step draws what an uninterrupted one draws); each dropout call of a step has its own."""
    x = tf.ones([4, 64])

    def masks(seed, step, micro_batch=0):
        stream = encoder.DropoutStream(training._dropout_seed(seed, tf.constant(step, tf.int64), micro_batch))
        return [(encoder.apply_dropout(x, 0.5, True, stream).numpy() > 0).tobytes() for _ in range(2)]

    first = masks(1, 5)
    assert masks(1, 5) == first and first[0] != first[1]
    others = masks(1, 6) + masks(2, 5) + masks(1, 5, micro_batch=1)
    assert len(set(first + others)) == 8
    assert (encoder.apply_dropout(x, 0.5, training=False).numpy() == 1).all()
    assert encoder.apply_dropout(x, 0.5, training=True).numpy().tobytes() not in first  # no stream: stateful draws


def test_the_loop_logs_means_and_a_due_line_or_a_preemption_notice_ends_it_after_the_step_in_progress():
    strategy = tf.distribute.get_strategy()
    counter = tf.Variable(0.0)

    def replica_step(features):
        counter.assign_add(1.0)
        return {"count": tf.identity(counter)}

    notice = preemption.PreemptionNotice(strategy)
    with training.LineClock() as clock:
        loop = training._make_train_loop(strategy, replica_step, False, notice, clock=clock)
        iterator = iter(tf.data.Dataset.from_tensors(tf.ones([1])).repeat())
        clock.set(None)
        result = loop(iterator, 4)
        assert int(result.steps) == 4 and float(result.logs["count"]) == (1 + 2 + 3 + 4) / 4
        assert not result.noticed.numpy().any() and not result.due
        # The time of the next progress line has passed: the loop ends after the step in progress.
        clock.set(time.time() - 1.0)
        result = loop(iterator, 4)
        assert int(result.steps) == 1 and float(result.logs["count"]) == 5 and result.due
        clock.set(time.time() + 600.0)
        result = loop(iterator, 4)
        assert int(result.steps) == 4 and not result.due
        # The clock's thread sets the flag when the time comes.
        clock.set(time.time() + 0.2)
        assert float(clock.flag) == 0.0
        time.sleep(1.0)
        assert float(clock.flag) == 1.0
        clock.set(None)
        notice._notice()
        result = loop(iterator, 4)
        assert int(result.steps) == 1 and float(result.logs["count"]) == 10
        assert result.noticed.numpy().tolist() == [1.0] and not result.due
    assert not clock._thread.is_alive()


@pytest.mark.parametrize("when, stopped_at", [("while the model is built", 1), ("after the last step", 3)])
def test_a_sigterm_from_the_start_of_train_to_its_end_saves_and_stops(tmp_path, monkeypatch, when, stopped_at):
    """While building the model (no step run yet): one step, then the stop; after the last step's agreement:
    the run is done and saved, and still stops (a SIGTERM means the process should end)."""
    target, name = {"while the model is built": (training, "build_training_state"),
                    "after the last step": (training._ProgressLog, "loop")}[when]
    original = getattr(target, name)

    def with_a_sigterm(*args, **kwargs):
        result = original(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1.0)  # the notice's thread sets the flag (in a few ms; a loaded machine gets time)
        return result

    monkeypatch.setattr(target, name, with_a_sigterm)
    output_dir = str(tmp_path / "run")
    with pytest.raises(preemption.Preempted, match=f"stopped at global step {stopped_at} and saved "
                                                   f"model.ckpt-{stopped_at} in --output_dir"):
        tiny.train_pretraining(output_dir, steps=3)  # one loop of 3 steps
    assert checkpoints.CheckpointManager(output_dir).latest_checkpoint().endswith(f"model.ckpt-{stopped_at}")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.parametrize("iterations_per_loop", [1, 4])
def test_an_input_that_ends_early_leaves_global_step_at_the_updates_made(tmp_path, iterations_per_loop):
    """96 rows in batches of 16 are 6 updates: the run stops there with global step 6 and model.ckpt-6. The
    increment of global_step once ran beside the fused update instead of after it, so the step that found the
    input ended was counted too (7)."""
    rng = np.random.default_rng(0)
    rows = 96
    arrays = {"input_ids": rng.integers(1, 100, (rows, 16)).astype(np.int32),
              "input_mask": np.ones((rows, 16), np.int32), "segment_ids": np.zeros((rows, 16), np.int32),
              "start_positions": rng.integers(0, 16, rows).astype(np.int32),
              "end_positions": rng.integers(0, 16, rows).astype(np.int32)}
    config = encoder.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=64)
    output_dir = str(tmp_path / "run")
    result = training.train(
        run_squad.SquadTask(config), runner.array_input_fn(arrays, is_training=False),
        training.TrainingConfig(output_dir=output_dir, train_batch_size=16, learning_rate=1e-3, num_train_steps=60,
                                num_warmup_steps=0, iterations_per_loop=iterations_per_loop,
                                save_checkpoints_steps=1000))
    assert result["global_step"] == 6
    assert [os.path.basename(p) for p in checkpoints.CheckpointManager(output_dir).checkpoints] == \
        ["model.ckpt-0", "model.ckpt-6"]
    assert int(checkpoints.load_checkpoint(os.path.join(output_dir, "model.ckpt-6"))["global_step"]) == 6
