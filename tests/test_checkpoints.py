"""checkpoints.py: original checkpoints in and out, keep-N state file, HF safetensors import/export."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import conversions
import tokenization
import modeling
from tests.shared_data import minilm_dir, shared_path

TINY = ("reference", "original_checkpoint_tiny")


def _tiny_folder():
    return shared_path(*TINY)


def _reference_config(folder):
    config = modeling.BertConfig.from_json_file(os.path.join(folder, "bert_config.json"))
    config.hidden_dropout_prob = 0.0
    config.attention_probs_dropout_prob = 0.0
    return config


def _original_names(folder):
    return [n[:-2] for n in json.load(open(os.path.join(folder, "variable_names.json")))]


def test_init_from_checkpoint_reproduces_reference_outputs():
    folder = _tiny_folder()
    model = modeling.PretrainingModel(_reference_config(folder))
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
    folder = _tiny_folder()
    model = modeling.BertEncoder(_reference_config(folder))
    head = tf.Variable(tf.zeros([2, 128]), name="output_weights")
    variables = dict(model.variables_by_name(), output_weights=head)
    loaded, new, unused = checkpoints.init_from_checkpoint(variables, os.path.join(folder, "model.ckpt-30"))
    assert new == ["output_weights"]
    assert "cls/predictions/output_bias" in unused
    np.testing.assert_array_equal(
        model.variables_by_name()["bert/encoder/layer_1/output/dense/kernel"].numpy(),
        tf.train.load_checkpoint(folder).get_tensor("bert/encoder/layer_1/output/dense/kernel"))


def test_shape_mismatch_and_missing_checkpoint_errors(tmp_path):
    folder = _tiny_folder()
    config = _reference_config(folder)
    config.vocab_size = 1000
    model = modeling.BertEncoder(config)
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
    return {name: tf.Variable(reader.get_tensor(name)) for name in _original_names(folder)}


def test_written_checkpoint_has_original_names_shapes_and_exact_values(tmp_path):
    folder = _tiny_folder()
    variables = _variables_from(folder)
    manager = checkpoints.CheckpointManager(str(tmp_path), max_to_keep=3)
    prefix = manager.save(variables, step=30)
    assert prefix == str(tmp_path / "model.ckpt-30")
    assert os.path.exists(prefix + ".index") and os.path.exists(prefix + ".data-00000-of-00001")
    original = tf.train.load_checkpoint(folder)
    ours = tf.train.load_checkpoint(prefix)
    assert ours.get_variable_to_shape_map() == original.get_variable_to_shape_map()
    assert ours.get_variable_to_dtype_map() == original.get_variable_to_dtype_map()
    assert sorted(_original_names(folder)) == sorted(ours.get_variable_to_shape_map())
    for name in _original_names(folder):
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
    folder = _tiny_folder()
    shapes = checkpoints.list_checkpoint(folder)
    assert shapes["bert/embeddings/word_embeddings"] == [30522, 128]
    values = checkpoints.load_checkpoint(folder, ["global_step"])
    assert int(values["global_step"]) == 30
    with pytest.raises(KeyError, match="no_such"):
        checkpoints.load_checkpoint(folder, ["no_such"])


def _compare_minilm(model, ref, tol=1e-4):
    out = model(ref["input_ids"], ref["input_mask"], ref["segment_ids"])
    mask = ref["input_mask"].astype(bool)
    np.testing.assert_allclose(out["sequence_output"].numpy()[mask], ref["sequence_output"][mask], atol=tol, rtol=0)
    np.testing.assert_allclose(out["pooled_output"], ref["pooled_output"], atol=tol, rtol=0)
    n = ref["embedding_output"].shape[0]
    np.testing.assert_allclose(out["embedding_output"].numpy()[:n][mask[:n]], ref["embedding_output"][mask[:n]],
                               atol=tol, rtol=0)
    for i, layer in enumerate(out["all_encoder_layers"]):
        np.testing.assert_allclose(layer.numpy()[:n][mask[:n]], ref["all_encoder_layers"][i][mask[:n]],
                                   atol=tol, rtol=0, err_msg=f"layer {i}")


def test_minilm_hf_import_matches_hf_and_original(tmp_path):
    hf_dir = minilm_dir()
    ref_hf = np.load(shared_path("reference", "minilm", "minilm_hf_gelu_exact.npz"))
    ref_orig = np.load(shared_path("reference", "minilm", "minilm_original_gelu_tanh.npz"))

    config, weights = conversions.read_hf(hf_dir)
    assert config.hidden_act == "gelu_exact" and config.num_hidden_layers == 6
    model = modeling.BertEncoder(config)
    for name, var in model.variables_by_name().items():
        var.assign(weights[name])
    _compare_minilm(model, ref_hf)

    out_dir = str(tmp_path / "original")
    prefix = conversions.hf_to_original(hf_dir, out_dir)
    assert sorted(os.listdir(out_dir)) == sorted([
        "bert_config.json", "vocab.txt", "bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001",
        "tokenizer_config.json"])
    config2 = modeling.BertConfig.from_json_file(os.path.join(out_dir, "bert_config.json"))
    config2.hidden_act = "gelu"
    model2 = modeling.BertEncoder(config2)
    loaded, new, unused = checkpoints.init_from_checkpoint(model2.variables_by_name(), prefix)
    assert new == [] and unused == []
    _compare_minilm(model2, ref_orig)


def test_hf_export_round_trip(tmp_path):
    from safetensors.numpy import load_file
    hf_dir = minilm_dir()
    out_dir = str(tmp_path / "original")
    conversions.hf_to_original(hf_dir, out_dir)
    hf_out = str(tmp_path / "hf")
    conversions.original_to_hf(out_dir, os.path.join(out_dir, "bert_config.json"),
                               os.path.join(out_dir, "vocab.txt"), hf_out)
    source = load_file(os.path.join(hf_dir, "model.safetensors"))
    exported = load_file(os.path.join(hf_out, "model.safetensors"))
    source.pop("embeddings.position_ids")
    assert sorted(source) == sorted(exported)
    for name in source:
        np.testing.assert_array_equal(source[name], exported[name], err_msg=name)
    hf_config = json.load(open(os.path.join(hf_out, "config.json")))
    assert hf_config["hidden_act"] == "gelu" and hf_config["hidden_size"] == 384
    config, _ = conversions.read_hf(hf_out)
    assert config.hidden_act == "gelu_exact"


def test_hf_export_with_pretraining_heads(tmp_path):
    from safetensors.numpy import load_file
    folder = _tiny_folder()
    conversions.original_to_hf(folder, os.path.join(folder, "bert_config.json"),
                               shared_path("vocab", "uncased", "vocab.txt"), str(tmp_path))
    state = load_file(str(tmp_path / "model.safetensors"))
    assert "bert.embeddings.word_embeddings.weight" in state
    assert state["cls.seq_relationship.weight"].shape == (2, 128)
    assert not any(k.endswith(("adam_m", "adam_v")) or "global_step" in k for k in state)
    back = conversions.hf_to_original_weights(state)
    reader = tf.train.load_checkpoint(folder)
    names = [n for n in _original_names(folder) if n != "global_step" and not n.endswith(("adam_m", "adam_v"))]
    assert list(back) == names
    for name in names:
        np.testing.assert_array_equal(back[name], reader.get_tensor(name), err_msg=name)


def test_bad_hf_and_vocab_inputs(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        conversions.read_hf(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 10, "hidden_size": 8,
                                                      "num_attention_heads": 2}))
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        conversions.read_hf(str(tmp_path))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(f"tok{i}" for i in range(12)) + "\n")
    config = modeling.BertConfig(vocab_size=10)
    with pytest.raises(ValueError, match="vocab.txt has 12 tokens but the config's vocab_size is 10"):
        tokenization.check_vocab_size(str(vocab), config.vocab_size)
    with pytest.raises(ValueError, match="hidden_act"):
        conversions.hf_config_to_bert_config({"vocab_size": 10, "hidden_act": "swish"})
    with pytest.raises(ValueError, match="no BERT counterpart"):
        conversions.hf_to_original_weights({"encoder.layer.0.crossattention.weight": np.zeros(2)})


def test_hf_config_keys_left_out_take_hf_defaults(monkeypatch):
    infos = []
    monkeypatch.setattr(conversions.logging, "info", lambda msg, *args: infos.append(msg % args))
    full = json.load(open(os.path.join(minilm_dir(), "config.json")))
    config = conversions.hf_config_to_bert_config(full)
    assert (config.hidden_size, config.num_hidden_layers, config.type_vocab_size) == (384, 6, 2)
    # A complete config gets no line about defaults (it used to read "using the original's defaults for
    # hidden_size, num_hidden_layers, ..." on every conversion).
    assert not [m for m in infos if "defaults" in m]
    partial = {k: v for k, v in full.items() if k not in ("type_vocab_size", "max_position_embeddings")}
    config = conversions.hf_config_to_bert_config(partial)
    assert (config.type_vocab_size, config.max_position_embeddings) == (2, 512)  # HF's defaults; the original's is 16
    assert infos == ["HF config: using HF's defaults for max_position_embeddings, type_vocab_size"]


def test_hf_weights_not_matching_config(tmp_path):
    hf_dir = minilm_dir()
    config = json.load(open(os.path.join(hf_dir, "config.json")))
    config["vocab_size"] = 30000
    (tmp_path / "config.json").write_text(json.dumps(config))
    os.symlink(os.path.join(hf_dir, "model.safetensors"), str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"bert/embeddings/word_embeddings: .* \[30522, 384\] vs config "
                                         r"\[30000, 384\]"):
        conversions.read_hf(str(tmp_path))


@pytest.mark.slow
def test_convert_checkpoint_cli_round_trip(tmp_path):
    import subprocess
    import sys
    from safetensors.numpy import load_file
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    folder = _tiny_folder()
    vocab = shared_path("vocab", "uncased", "vocab.txt")
    hf_out, orig_out = str(tmp_path / "hf"), str(tmp_path / "orig")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    script = os.path.join(root, "convert_checkpoint.py")
    subprocess.run([sys.executable, script, "--mode=original_to_hf", f"--init_checkpoint={folder}",
                    f"--bert_config_file={os.path.join(folder, 'bert_config.json')}", f"--vocab_file={vocab}",
                    f"--output_dir={hf_out}"], check=True, env=env, cwd=root, capture_output=True)
    import convert_checkpoint
    convert_checkpoint.run(convert_checkpoint.ConvertOptions("hf_to_original", output_dir=orig_out, hf_dir=hf_out))
    assert "cls.predictions.bias" in load_file(os.path.join(hf_out, "model.safetensors"))
    back = tf.train.load_checkpoint(os.path.join(orig_out, "bert_model.ckpt"))
    original = tf.train.load_checkpoint(folder)
    names = [n for n in _original_names(folder) if n != "global_step" and not n.endswith(("adam_m", "adam_v"))]
    assert sorted(back.get_variable_to_shape_map()) == sorted(names)
    for name in names:
        np.testing.assert_array_equal(back.get_tensor(name), original.get_tensor(name), err_msg=name)
    assert modeling.BertConfig.from_json_file(os.path.join(orig_out, "bert_config.json")) == \
        modeling.BertConfig.from_json_file(os.path.join(folder, "bert_config.json"))
    with pytest.raises(ValueError, match="--init_checkpoint, --bert_config_file"):
        convert_checkpoint.run(convert_checkpoint.ConvertOptions("original_to_hf", output_dir=hf_out, vocab_file=vocab))


@pytest.mark.tf_models
def test_tf_models_official_encoder_import(tmp_path):
    import tf_keras
    from official.nlp.modeling import networks
    encoder = networks.BertEncoderV2(
        vocab_size=99, hidden_size=32, num_layers=2, num_attention_heads=4, inner_dim=64, type_vocab_size=2,
        max_sequence_length=64, output_dropout=0.0, attention_dropout=0.0,
        inner_activation=lambda x: tf_keras.activations.gelu(x, approximate=True))
    rng = np.random.RandomState(1)
    mask = np.array([[1] * 12 + [0] * 4, [1] * 16], np.int32)
    ids = rng.randint(1, 99, size=[2, 16]).astype(np.int32) * mask
    types = (np.arange(16)[None, :] >= 7).astype(np.int32) * mask
    peer = encoder({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types})
    saved = tf.train.Checkpoint(encoder=encoder).save(str(tmp_path / "tfm" / "ckpt"))

    import convert_checkpoint
    prefix = convert_checkpoint.run(convert_checkpoint.ConvertOptions(
        "tfm_to_original", output_dir=str(tmp_path / "original"), init_checkpoint=saved))
    config = modeling.BertConfig.from_json_file(str(tmp_path / "original" / "bert_config.json"))
    assert (config.num_hidden_layers, config.num_attention_heads, config.intermediate_size) == (2, 4, 64)
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
    model = modeling.BertEncoder(config)
    loaded, new, unused = checkpoints.init_from_checkpoint(model.variables_by_name(), prefix)
    assert new == [] and unused == []
    ours = model(ids, mask, types)
    keep = mask.astype(bool)
    np.testing.assert_allclose(ours["sequence_output"].numpy()[keep], peer["sequence_output"].numpy()[keep],
                               atol=1e-5, rtol=0)
    np.testing.assert_allclose(ours["pooled_output"], peer["pooled_output"], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="expected one tf-models-official BertEncoder"):
        conversions.tfm_to_original_weights(_tiny_folder())
