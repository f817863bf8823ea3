"""encoder.py: config handling, original names, and the forward pass against the original's outputs."""
import json
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import encoder
from tests.shared_data import shared_path

TINY = ("reference", "original_checkpoint_tiny")


def _tiny_config(**overrides):
    values = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=64, type_vocab_size=2)
    values.update(overrides)
    return encoder.BertConfig(**values)


def _reference_model():
    folder = shared_path(*TINY)
    config = encoder.BertConfig.from_json_file(os.path.join(folder, "bert_config.json"))
    config.hidden_dropout_prob = 0.0
    config.attention_probs_dropout_prob = 0.0
    model = encoder.PretrainingModel(config)
    reader = tf.train.load_checkpoint(os.path.join(folder, "model.ckpt-30"))
    for name, var in model.variables_by_name().items():
        var.assign(reader.get_tensor(name))
    ref = np.load(os.path.join(folder, "reference_outputs.npz"))
    features = {k[3:]: ref[k] for k in ref.files if k.startswith("in_")}
    return model, features, ref


def test_config_roundtrip_defaults_and_extra_keys(tmp_path):
    config = encoder.BertConfig.from_dict({"vocab_size": 10, "some_new_key": 1})
    assert config.some_new_key == 1 and config.to_dict()["some_new_key"] == 1
    assert config.hidden_size == 768 and config.type_vocab_size == 16 and config.hidden_act == "gelu"
    path = str(tmp_path / "bert_config.json")
    config.to_json_file(path)
    assert encoder.BertConfig.from_json_file(path) == config
    assert json.loads(config.to_json_string())["intermediate_size"] == 3072


@pytest.mark.parametrize("bad,needle", [
    ({"hidden_size": 100, "num_attention_heads": 12}, "num_attention_heads"),
    ({"hidden_size": 0}, "hidden_size"),
    ({"num_hidden_layers": -1}, "num_hidden_layers"),
    ({"hidden_act": "swish"}, "hidden_act"),
    ({"hidden_dropout_prob": 1.5}, "hidden_dropout_prob"),
])
def test_config_rejects_bad_values(tmp_path, bad, needle):
    values = dict(vocab_size=10, hidden_size=12, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)
    values.update(bad)
    encoder.BertConfig.from_dict(values)  # the original's constructors check nothing
    with pytest.raises(ValueError, match=needle):
        encoder.BertConfig.from_dict(values).validate()
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(values))
    with pytest.raises(ValueError, match=re.escape(str(path)) + ": .*" + needle):
        encoder.BertConfig.load(str(path))


def test_config_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        encoder.BertConfig.from_json_file(str(tmp_path / "nope.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        encoder.BertConfig.from_json_file(str(bad))
    missing = tmp_path / "missing.json"
    missing.write_text('{"hidden_size": 8}')
    assert encoder.BertConfig.from_json_file(str(missing)).vocab_size is None
    with pytest.raises(ValueError, match="vocab_size"):
        encoder.BertConfig.load(str(missing))


def test_variable_names_and_shapes_match_the_original():
    folder = shared_path(*TINY)
    config = encoder.BertConfig.from_json_file(os.path.join(folder, "bert_config.json"))
    model = encoder.PretrainingModel(config)
    names = [n[:-2] for n in json.load(open(os.path.join(folder, "variable_names.json")))]
    model_names = [n for n in names if n != "global_step" and not n.endswith(("/adam_m", "/adam_v"))]
    ours = model.variables_by_name()
    assert list(ours) == model_names
    reader = tf.train.load_checkpoint(os.path.join(folder, "model.ckpt-30"))
    shapes = reader.get_variable_to_shape_map()
    for name, var in ours.items():
        assert list(var.shape) == shapes[name], name
    assert model.bert.embedding_table is ours["bert/embeddings/word_embeddings"]


def test_forward_pass_matches_original_outputs():
    model, features, ref = _reference_model()
    out = model(features, training=False)
    bert = model.bert(features["input_ids"], features["input_mask"], features["segment_ids"])
    tol = 1e-5
    np.testing.assert_allclose(bert["embedding_output"], ref["out_embedding_output"], atol=tol, rtol=0)
    np.testing.assert_allclose(bert["sequence_output"], ref["out_sequence_output"], atol=tol, rtol=0)
    np.testing.assert_allclose(bert["pooled_output"], ref["out_pooled_output"], atol=tol, rtol=0)
    np.testing.assert_allclose(out["mlm_log_probs"][:, :1000], ref["out_mlm_log_probs__vocab0_1000"],
                               atol=tol, rtol=0)
    for key in ("mlm_loss", "mlm_example_loss", "nsp_loss", "nsp_example_loss", "nsp_log_probs", "total_loss"):
        np.testing.assert_allclose(out[key], ref["out_" + key], atol=tol, rtol=0, err_msg=key)


def test_jit_compiled_forward_matches_eager():
    model, features, ref = _reference_model()
    fn = tf.function(lambda f: model(f, training=False), jit_compile=True)
    out = fn({k: tf.constant(v) for k, v in features.items()})
    np.testing.assert_allclose(out["total_loss"], ref["out_total_loss"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(out["sequence_output"], ref["out_sequence_output"], atol=1e-5, rtol=0)


def test_defaults_mask_and_types_and_padding_invariance():
    config = _tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = encoder.BertEncoder(config)
    ids = np.array([[5, 6, 7, 8, 0, 0]], np.int32)
    mask = np.array([[1, 1, 1, 1, 0, 0]], np.int32)
    full = model(ids)
    explicit = model(ids, np.ones_like(ids), np.zeros_like(ids))
    np.testing.assert_array_equal(full["sequence_output"], explicit["sequence_output"])
    padded = model(ids, mask)["sequence_output"].numpy()
    short = model(ids[:, :4])["sequence_output"].numpy()
    np.testing.assert_allclose(padded[:, :4], short, atol=1e-5)
    assert len(full["all_encoder_layers"]) == 2
    assert full["pooled_output"].shape == (1, 32)


def test_dropout_only_in_training():
    model = encoder.BertEncoder(_tiny_config())
    ids = np.arange(1, 17, dtype=np.int32).reshape(2, 8)
    a = model(ids, training=False)["sequence_output"]
    b = model(ids, training=False)["sequence_output"]
    c = model(ids, training=True)["sequence_output"]
    np.testing.assert_array_equal(a, b)
    assert np.abs(a.numpy() - c.numpy()).max() > 1e-3


def test_initializer_is_truncated_normal():
    model = encoder.BertEncoder(_tiny_config(vocab_size=4000, hidden_size=64), name="bert")
    table = model.embedding_table.numpy()
    assert abs(table.std() - 0.02 * 0.88) < 0.002  # std of N(0, s) truncated at 2s is 0.88 s
    assert np.abs(table).max() <= 0.04 + 1e-6
    names = model.variables_by_name()
    np.testing.assert_array_equal(names["bert/encoder/layer_1/output/LayerNorm/gamma"].numpy(), 1.0)
    np.testing.assert_array_equal(names["bert/pooler/dense/bias"].numpy(), 0.0)


def test_activations():
    x = tf.constant([-3.0, -1.0, 0.0, 0.5, 2.0])
    expected_tanh = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(encoder.gelu(x), expected_tanh, atol=1e-6)
    from math import erf
    expected_erf = [v * 0.5 * (1 + erf(v / np.sqrt(2))) for v in x.numpy()]
    np.testing.assert_allclose(encoder.gelu_exact(x), expected_erf, atol=1e-6)
    assert encoder.get_activation("linear") is None
    with pytest.raises(ValueError, match="swish"):
        encoder.get_activation("swish")


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_keeps_variables_and_losses_float32(policy):
    model, features, ref = _reference_model()
    weights = {k: v.numpy() for k, v in model.variables_by_name().items()}
    keras.mixed_precision.set_global_policy(policy)
    try:
        mixed = encoder.PretrainingModel(model.config)
        for name, var in mixed.variables_by_name().items():
            assert var.dtype == "float32", name
            var.assign(weights[name])
        out = mixed(features)
        assert out["total_loss"].dtype == tf.float32
        assert out["mlm_log_probs"].dtype == tf.float32
        assert out["sequence_output"].dtype == tf.float32
        # bf16 keeps ~3 significant digits; losses must still be close to the float32 reference
        np.testing.assert_allclose(out["total_loss"], ref["out_total_loss"], rtol=0.02)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_bfloat16_dense_runs_bias_and_activation_in_float32():
    """Under mixed_bfloat16 only the matmul is bf16: bias and GELU see float32 (precision, and CPU speed)."""
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        dense = encoder.Dense(16, "gelu", name="d")
        x = tf.random.stateless_normal([4, 8], seed=[1, 2])
        dense.build((None, 8))
        dense.bias.assign(tf.random.stateless_normal([16], seed=[3, 4]) * 0.37)
        got = dense(tf.cast(x, tf.bfloat16))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert dense.bias.dtype == "float32" and got.dtype == tf.bfloat16
    product = tf.cast(tf.matmul(tf.cast(x, tf.bfloat16), tf.cast(dense.kernel, tf.bfloat16)), tf.float32)
    expected = tf.cast(encoder.gelu(product + tf.convert_to_tensor(dense.bias)), tf.bfloat16)
    np.testing.assert_array_equal(got.numpy().astype(np.float32), expected.numpy().astype(np.float32))


def test_classifier_model_pooled_and_per_token():
    config = encoder.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=32, type_vocab_size=2)
    ids = tf.constant([[5, 6, 7, 0], [8, 9, 0, 0]])
    features = {"input_ids": ids, "input_mask": tf.cast(ids > 0, tf.int32), "segment_ids": tf.zeros_like(ids)}
    pooled = encoder.ClassifierModel(config, 3)
    per_token = encoder.ClassifierModel(config, 3, per_token=True, name="ner")
    assert pooled(features).shape == (2, 3) and per_token(features).shape == (2, 4, 3)
    names = sorted(per_token.variables_by_name())
    assert names == sorted(pooled.variables_by_name())
    assert "output_weights" in names and "output_bias" in names and "bert/pooler/dense/kernel" in names


def test_gather_indexes():
    seq = tf.reshape(tf.range(2 * 4 * 3, dtype=tf.float32), [2, 4, 3])
    got = encoder.gather_indexes(seq, tf.constant([[1, 3], [0, 2]]))
    np.testing.assert_array_equal(got, seq.numpy()[[0, 0, 1, 1], [1, 3, 0, 2]])


def test_create_variable_helper_on_a_plain_model():
    class Head(encoder.NamedLayer):
        def build(self, input_shape):
            encoder.create_variable(self, "output_weights", (3, 8), initializer_range=0.02)
            encoder.create_variable(self, "output_bias", (3,), initializer="zeros")

    head = Head(name="head")
    head.build(None)
    names = head.variables_by_name()
    assert list(names) == ["output_weights", "output_bias"]
    assert names["output_weights"].shape == (3, 8)
    assert np.abs(names["output_weights"].numpy()).max() <= 0.04 + 1e-6


def test_pretraining_features_are_those_of_the_records():
    import records
    assert encoder.PRETRAINING_FEATURES == tuple(records.names(records.pretraining(None, None)))


def test_a_call_draws_its_dropout_masks_from_its_seed_in_call_order():
    """One stream for the whole call: the encoder's masks, then the output layer's; the same seed draws the same
    masks, another seed others; no seed: stateful draws."""
    config = _tiny_config(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3)
    model = encoder.ClassifierModel(config, 3, dropout=0.5)
    ids = tf.constant(np.arange(1, 17, dtype=np.int32).reshape(2, 8))
    features = {"input_ids": ids, "input_mask": tf.ones_like(ids), "segment_ids": tf.zeros_like(ids)}
    seed = tf.constant([7, 11], tf.int64)
    logits = model(features, training=True, dropout_seed=seed).numpy()
    np.testing.assert_array_equal(model(features, training=True, dropout_seed=seed), logits)
    stream = encoder.DropoutStream(seed)
    pooled = model.bert(ids, features["input_mask"], features["segment_ids"], training=True,
                        dropout_seed=stream)["pooled_output"]
    assert stream.count == 1 + 3 * config.num_hidden_layers
    np.testing.assert_array_equal(model.head(pooled, training=True, dropout_seed=stream), logits)
    other = model(features, training=True, dropout_seed=tf.constant([7, 12], tf.int64)).numpy()
    assert np.abs(other - logits).max() > 1e-3
    assert np.abs(model(features, training=True).numpy() - logits).max() > 1e-3


def test_a_weight_source_supplies_the_weights_of_a_layer_tree():
    """use_weight_source: each weight asked of the source by its name below the layer given it, in creation
    order."""
    asked = []

    def source(name, shape, make):
        asked.append((name, shape))
        return make()

    layer = encoder.TransformerLayer(_tiny_config(), name="layer_0")
    layer.use_weight_source(source)
    layer.build((None, None, 32))
    assert asked[0] == ("attention/self/query/kernel", (32, 32))
    assert [name for name, _ in asked] == list(layer.variables_by_name())
