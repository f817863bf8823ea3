"""checkpoints.py: original checkpoints in and out, by name, the keep-N state file (conversions to and from HF and
tf-models-official: tests/test_conversions.py)."""
import os

import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import encoder
from tests import tiny

def _reference_config(folder):
    config = encoder.BertConfig.from_json_file(os.path.join(folder, "bert_config.json"))
    config.hidden_dropout_prob = 0.0
    config.attention_probs_dropout_prob = 0.0
    return config


def test_init_from_checkpoint_reproduces_reference_outputs():
    folder = tiny.original_dir()
    model = encoder.PretrainingModel(_reference_config(folder))
    loaded, new, unused = checkpoints.init_from_checkpoint(model.variables_by_name(), folder)
    assert new == [] and len(loaded) == len(model.variables_by_name())
    assert "global_step" in unused and "bert/pooler/dense/kernel/adam_m" in unused
    ref = np.load(os.path.join(folder, "reference_outputs.npz"))
    features = {k[3:]: ref[k] for k in ref.files if k.startswith("in_")}
    out = model(features, training=False)
    bert = model.bert(features["input_ids"], features["input_mask"], features["segment_ids"])
    for key in ("embedding_output", "sequence_output", "pooled_output"):
        np.testing.assert_allclose(bert[key], ref["out_" + key], atol=1e-5, rtol=0, err_msg=key)
    np.testing.assert_allclose(out["mlm_log_probs"][:, :1000], ref["out_mlm_log_probs__vocab0_1000"], atol=1e-5,
                               rtol=0)
    for key in ("mlm_loss", "mlm_example_loss", "nsp_loss", "nsp_example_loss", "nsp_log_probs", "total_loss"):
        np.testing.assert_allclose(out[key], ref["out_" + key], atol=1e-5, rtol=0, err_msg=key)


def test_init_from_checkpoint_keeps_new_variables_and_accepts_a_prefix():
    folder = tiny.original_dir()
    model = encoder.BertEncoder(_reference_config(folder))
    head = tf.Variable(tf.zeros([2, 128]), name="output_weights")
    variables = dict(model.variables_by_name(), output_weights=head)
    loaded, new, unused = checkpoints.init_from_checkpoint(variables, os.path.join(folder, "model.ckpt-30"))
    assert new == ["output_weights"]
    assert "cls/predictions/output_bias" in unused
    np.testing.assert_array_equal(
        model.variables_by_name()["bert/encoder/layer_1/output/dense/kernel"].numpy(),
        tf.train.load_checkpoint(folder).get_tensor("bert/encoder/layer_1/output/dense/kernel"))


def test_shape_mismatch_and_missing_checkpoint_errors(tmp_path):
    folder = tiny.original_dir()
    config = _reference_config(folder)
    config.vocab_size = 1000
    model = encoder.BertEncoder(config)
    with pytest.raises(ValueError) as err:
        checkpoints.init_from_checkpoint(model.variables_by_name(), folder)
    message = str(err.value)
    assert "bert/embeddings/word_embeddings" in message and "[1000, 128]" in message and "[30522, 128]" in message
    with pytest.raises(FileNotFoundError, match="nothing_here"):
        checkpoints.init_from_checkpoint(model.variables_by_name(), str(tmp_path / "nothing_here"))
    with pytest.raises(FileNotFoundError, match="no checkpoint found in the folder"):
        checkpoints.init_from_checkpoint(model.variables_by_name(), str(tmp_path))


def _variables_from(folder):
    """Fresh variables holding every tensor of the reference checkpoint, in original creation order."""
    reader = tf.train.load_checkpoint(folder)
    return {name: tf.Variable(reader.get_tensor(name)) for name in tiny.original_names()}


def test_written_checkpoint_has_original_names_shapes_and_exact_values(tmp_path):
    folder = tiny.original_dir()
    variables = _variables_from(folder)
    manager = checkpoints.CheckpointManager(str(tmp_path), max_to_keep=3)
    prefix = manager.save(variables, step=30)
    assert prefix == str(tmp_path / "model.ckpt-30")
    assert os.path.exists(prefix + ".index") and os.path.exists(prefix + ".data-00000-of-00001")
    original = tf.train.load_checkpoint(folder)
    ours = tf.train.load_checkpoint(prefix)
    assert ours.get_variable_to_shape_map() == original.get_variable_to_shape_map()
    assert ours.get_variable_to_dtype_map() == original.get_variable_to_dtype_map()
    assert sorted(tiny.original_names()) == sorted(ours.get_variable_to_shape_map())
    for name in tiny.original_names():
        np.testing.assert_array_equal(ours.get_tensor(name), original.get_tensor(name), err_msg=name)
    assert tf.train.latest_checkpoint(str(tmp_path)) == prefix  # TF reads our state file


def test_manager_keeps_newest_and_restores_exactly(tmp_path):
    step = tf.Variable(0, dtype=tf.int64)
    weight = tf.Variable(tf.random.normal([3, 4]))
    slot = tf.Variable(tf.random.normal([3, 4]))
    variables = {"global_step": step, "w": weight, "w/adam_m": slot}
    manager = checkpoints.CheckpointManager(str(tmp_path), max_to_keep=2)
    saved = {}
    for s in (1, 2, 3, 4):
        step.assign(s)
        weight.assign_add(tf.ones_like(weight) / 3.0)
        manager.save(variables, step=s)
        saved[s] = weight.numpy()
    assert [os.path.basename(p) for p in manager.checkpoints] == ["model.ckpt-3", "model.ckpt-4"]
    assert not tf.io.gfile.glob(str(tmp_path / "model.ckpt-1.*"))
    assert not tf.io.gfile.glob(str(tmp_path / "model.ckpt-2.*"))
    state = (tmp_path / "checkpoint").read_text()
    assert 'model_checkpoint_path: "model.ckpt-4"' in state and "model.ckpt-2" not in state
    assert manager.latest_checkpoint() == str(tmp_path / "model.ckpt-4")

    weight.assign(tf.zeros_like(weight))
    step.assign(0)
    fresh = checkpoints.CheckpointManager(str(tmp_path), max_to_keep=2)
    assert fresh.checkpoints == manager.checkpoints
    assert fresh.restore(variables) == 4
    assert step.numpy() == 4
    np.testing.assert_array_equal(weight.numpy(), saved[4])
    assert fresh.restore(variables, checkpoint=str(tmp_path / "model.ckpt-3")) == 3
    np.testing.assert_array_equal(weight.numpy(), saved[3])
    with pytest.raises(ValueError, match="lacks variable"):
        fresh.restore(dict(variables, extra=tf.Variable(1.0)))
    with pytest.raises(ValueError, match=r"w/adam_m: model shape \[5\]"):
        fresh.restore(dict(variables, **{"w/adam_m": tf.Variable(tf.zeros([5]))}))


def test_load_and_list_checkpoint():
    folder = tiny.original_dir()
    shapes = checkpoints.list_checkpoint(folder)
    assert shapes["bert/embeddings/word_embeddings"] == [30522, 128]
    values = checkpoints.load_checkpoint(folder, ["global_step"])
    assert int(values["global_step"]) == 30
    with pytest.raises(KeyError, match="no_such"):
        checkpoints.load_checkpoint(folder, ["no_such"])


