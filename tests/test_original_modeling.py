"""The original release's modeling API on TensorFlow 2: what its modeling_test.py asserts, BertModel inside a user's
own model loading the original's checkpoint by the assignment map (outputs of the original's code), the TF1-style
functions composed as the original's BertModel, and variables made once per name, eagerly and under tf.function."""
import collections
import json
import os
import random
import re

import numpy as np
import pytest
import tensorflow as tf

import modeling
import optimization
from tests.shared_data import shared_path

pytestmark = pytest.mark.usefixtures("modeling_defaults")  # the original's API: a fresh namespace

TINY = ("reference", "original_checkpoint_tiny")
MODES = ["eager", "tf.function"]


def _run(mode, fn, *args):
    return fn(*args) if mode == "eager" else tf.function(fn)(*args)


def _ids_tensor(shape, vocab_size, rng):
    """modeling_test.py's ids_tensor: random int32 ids in [0, vocab_size)."""
    values = [rng.randint(0, vocab_size - 1) for _ in range(int(np.prod(shape)))]
    return tf.constant(values, dtype=tf.int32, shape=shape)


def _tiny():
    folder = shared_path(*TINY)
    ref = np.load(os.path.join(folder, "reference_outputs.npz"))
    return folder, os.path.join(folder, "model.ckpt-30"), ref


@pytest.mark.parametrize("mode", MODES)
def test_modeling_test_default(mode):
    """modeling_test.BertModelTest.test_default: batch 13, length 7, 5 layers of 32 with 4 heads, intermediate 37,
    training, a random input mask and token types."""
    rng = random.Random(7)
    input_ids = _ids_tensor([13, 7], 99, rng)
    input_mask = _ids_tensor([13, 7], 2, rng)
    token_type_ids = _ids_tensor([13, 7], 16, rng)
    config = modeling.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=5, num_attention_heads=4,
                                 intermediate_size=37, hidden_act="gelu", hidden_dropout_prob=0.1,
                                 attention_probs_dropout_prob=0.1, max_position_embeddings=512, type_vocab_size=16,
                                 initializer_range=0.02)

    def create_model(input_ids, input_mask, token_type_ids):
        model = modeling.BertModel(config=config, is_training=True, input_ids=input_ids, input_mask=input_mask,
                                   token_type_ids=token_type_ids, scope=None)
        return {"embedding_output": model.get_embedding_output(), "sequence_output": model.get_sequence_output(),
                "pooled_output": model.get_pooled_output(), "all_encoder_layers": model.get_all_encoder_layers()}

    result = _run(mode, create_model, input_ids, input_mask, token_type_ids)
    assert result["embedding_output"].shape == (13, 7, 32)
    assert result["sequence_output"].shape == (13, 7, 32)
    assert result["pooled_output"].shape == (13, 32)
    assert [layer.shape for layer in result["all_encoder_layers"]] == [(13, 7, 32)] * 5
    np.testing.assert_array_equal(result["all_encoder_layers"][-1], result["sequence_output"])


def _unreachable_ops(graph, outputs):
    """modeling_test.py's get_unreachable_ops: the ops of `graph` with a tensor not reachable from `outputs`
    (walking back through the ops' inputs)."""
    output_to_op = collections.defaultdict(list)
    op_to_all = collections.defaultdict(list)
    for op in graph.get_operations():
        op_to_all[op.name].extend(x.name for x in op.inputs)
        for y in op.outputs:
            output_to_op[y.name].append(op.name)
            op_to_all[op.name].append(y.name)
    seen = set()
    stack = [t.name for t in outputs]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        for op_name in output_to_op.get(name, ()):
            stack.extend(n for n in op_to_all[op_name] if n not in seen)
    return [op for op in graph.get_operations()
            if any(t.name not in seen for t in list(op.inputs) + list(op.outputs))]


def test_all_tensors_reachable_in_the_traced_graph():
    """modeling_test.py's assert_all_tensors_reachable, on the graph of a tf.function: BertModel adds no op that its
    outputs do not use (the original's ignore patterns, plus the function's own output identities)."""
    config = modeling.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=37)

    @tf.function
    def outputs(input_ids, input_mask, token_type_ids):
        model = modeling.BertModel(config, True, input_ids, input_mask, token_type_ids)
        return [model.get_embedding_output(), model.get_sequence_output(), model.get_pooled_output()]

    rng = random.Random(3)
    concrete = outputs.get_concrete_function(_ids_tensor([4, 7], 99, rng), _ids_tensor([4, 7], 2, rng),
                                             _ids_tensor([4, 7], 16, rng))
    graph = concrete.graph
    ignore = [re.compile(p) for p in ("^.*/assert_less_equal/.*$", "^.*/dilation_rate$", "^.*/Tensordot/concat$",
                                      "^.*/Tensordot/concat/axis$", "^testing/.*$", "^Identity(_\\d+)?$",
                                      "^NoOp$")]
    unreachable = [op.name for op in _unreachable_ops(graph, graph.outputs)
                   if not any(r.match(op.name) for r in ignore)]
    assert unreachable == []


def test_config_as_the_original():
    """modeling_test.test_config_to_json_string, positional construction, a released config's extra keys, and the
    heads check when a model is built."""
    config = modeling.BertConfig(vocab_size=99, hidden_size=37)
    obj = json.loads(config.to_json_string())
    assert obj["vocab_size"] == 99 and obj["hidden_size"] == 37
    positional = modeling.BertConfig(30522, 768, 12, 12, 3072)
    assert positional == modeling.BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                                             num_attention_heads=12, intermediate_size=3072)
    released = {"attention_probs_dropout_prob": 0.1, "directionality": "bidi", "hidden_act": "gelu",
                "hidden_dropout_prob": 0.1, "hidden_size": 768, "initializer_range": 0.02,
                "intermediate_size": 3072, "max_position_embeddings": 512, "num_attention_heads": 12,
                "num_hidden_layers": 12, "pooler_fc_size": 768, "pooler_num_attention_heads": 12,
                "pooler_num_fc_layers": 3, "pooler_size_per_head": 128, "pooler_type": "first_token_transform",
                "type_vocab_size": 2, "vocab_size": 119547}
    from_dict = modeling.BertConfig.from_dict(released)
    assert from_dict.directionality == "bidi" and from_dict.pooler_fc_size == 768
    assert from_dict.to_dict() == released
    assert json.loads(from_dict.to_json_string()) == released
    with pytest.raises(ValueError, match=re.escape("The hidden size (37) is not a multiple of the number of "
                                                   "attention heads (12)")):
        modeling.BertModel(config, False, tf.constant([[1, 2, 3]]))


def test_config_files_keep_every_key(tmp_path):
    path = tmp_path / "bert_config.json"
    values = dict(json.load(open(os.path.join(shared_path(*TINY), "bert_config.json"))), directionality="bidi")
    path.write_text(json.dumps(values))
    for config in (modeling.BertConfig.from_json_file(str(path)), modeling.BertConfig.load(str(path))):
        assert config.to_dict() == values
        assert json.loads(config.to_json_string()) == values


def _user_model(config, is_training, input_ids, input_mask, token_type_ids):
    """A user's classifier as modeling.py's docstring shows it: BertModel, then the user's own variables."""
    model = modeling.BertModel(config=config, is_training=is_training, input_ids=input_ids, input_mask=input_mask,
                               token_type_ids=token_type_ids)
    label_embeddings = modeling.get_variable("label_embeddings", [config.hidden_size, 2],
                                             initializer=modeling.create_initializer(0.02))
    pooled_output = model.get_pooled_output()
    logits = tf.matmul(pooled_output, label_embeddings)
    return model, logits


def _original_names(folder, prefix):
    """The names (with ":0") of the model variables under `prefix` the original code made, in its order."""
    return [name for name in json.load(open(os.path.join(folder, "variable_names.json")))
            if name.startswith(prefix) and not name.endswith(("/adam_m:0", "/adam_v:0"))]


def _check_reference_outputs(outputs, ref):
    for key in ("embedding_output", "sequence_output", "pooled_output"):
        np.testing.assert_allclose(outputs[key], ref["out_" + key], atol=1e-5, rtol=0, err_msg=key)


def _expected_assignment_map(folder, ckpt):
    """What the original's get_assignment_map_from_checkpoint gives for its BertModel's variables: every bert/
    variable of the checkpoint, in the checkpoint's (sorted) order."""
    names = {name[:-2] for name in _original_names(folder, "bert/")}
    return [name for name, _ in tf.train.list_variables(ckpt) if name in names]


def test_user_model_loads_the_original_checkpoint_eagerly():
    """Built first, loaded after (as code written for the original does): get_*() read the loaded weights, of a
    model read before loading too (as TF1's tensors read the variables' values of the moment)."""
    folder, ckpt, ref = _tiny()
    config = modeling.BertConfig.from_json_file(os.path.join(folder, "bert_config.json"))
    inputs = (ref["in_input_ids"], ref["in_input_mask"], ref["in_segment_ids"])
    model, logits = _user_model(config, False, *inputs)
    built_before_loading = modeling.BertModel(config, False, *inputs)
    assert logits.shape == (8, 2)
    tvars = model.trainable_variables
    assert [v.name for v in tvars] == _original_names(folder, "bert/")
    assert tvars[5].name == "bert/encoder/layer_0/attention/self/query/kernel:0"
    before = model.get_pooled_output().numpy()
    assert np.abs(before - ref["out_pooled_output"]).max() > 1e-2

    all_tvars = modeling.trainable_variables()
    assert [v.name for v in all_tvars] == [v.name for v in tvars] + ["label_embeddings:0"]
    assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(all_tvars, ckpt)
    assert list(assignment_map) == _expected_assignment_map(folder, ckpt) and len(assignment_map) == 39
    assert all(assignment_map[name] == name for name in assignment_map)
    assert set(initialized) == set(assignment_map) | {name + ":0" for name in assignment_map}
    assert modeling.init_from_checkpoint(ckpt, assignment_map) == list(assignment_map)

    np.testing.assert_allclose(model.get_pooled_output(), ref["out_pooled_output"], atol=1e-5)  # read before
    model = built_before_loading
    assert model.trainable_variables == tvars
    _check_reference_outputs({"embedding_output": model.get_embedding_output(),
                              "sequence_output": model.get_sequence_output(),
                              "pooled_output": model.get_pooled_output()}, ref)
    assert model.get_embedding_table() is tvars[0]
    np.testing.assert_array_equal(model.get_embedding_table().numpy(),
                                  tf.train.load_checkpoint(ckpt).get_tensor("bert/embeddings/word_embeddings"))


def test_user_model_loads_the_original_checkpoint_under_tf_function():
    """The same model inside a tf.function: made on the first trace, loaded after, its outputs the original's;
    a retrace (other shapes) finds the same variables."""
    folder, ckpt, ref = _tiny()
    config = modeling.BertConfig.from_json_file(os.path.join(folder, "bert_config.json"))

    @tf.function
    def user_model(input_ids, input_mask, token_type_ids):
        model, logits = _user_model(config, False, input_ids, input_mask, token_type_ids)
        return {"embedding_output": model.get_embedding_output(), "sequence_output": model.get_sequence_output(),
                "pooled_output": model.get_pooled_output(), "logits": logits}

    inputs = (ref["in_input_ids"], ref["in_input_mask"], ref["in_segment_ids"])
    user_model(*inputs)
    tvars = modeling.trainable_variables()
    assert len(tvars) == 40 and tvars[-1].name == "label_embeddings:0"
    assignment_map, _ = modeling.get_assignment_map_from_checkpoint(tvars, ckpt)
    modeling.init_from_checkpoint(ckpt, assignment_map)
    _check_reference_outputs(user_model(*inputs), ref)
    short = user_model(*(x[:3, :40] for x in inputs))
    assert short["sequence_output"].shape == (3, 40, 128) and len(modeling.trainable_variables()) == 40


def test_tf1_functions_compose_the_original_bert_model():
    """The original's BertModel written with the functions (embedding_lookup, embedding_postprocessor,
    create_attention_mask_from_input_mask, transformer_model, dense) under tf.compat.v1.variable_scope: the
    original's variable names, and the original's outputs from its checkpoint."""
    folder, ckpt, ref = _tiny()
    config = modeling.BertConfig.from_json_file(os.path.join(folder, "bert_config.json"))
    input_ids, input_mask, token_type_ids = (tf.constant(ref[k]) for k in ("in_input_ids", "in_input_mask",
                                                                         "in_segment_ids"))

    def bert():
        with tf.compat.v1.variable_scope("bert"):
            with tf.compat.v1.variable_scope("embeddings"):
                embedding_output, table = modeling.embedding_lookup(
                    input_ids, config.vocab_size, config.hidden_size, config.initializer_range)
                embedding_output = modeling.embedding_postprocessor(
                    embedding_output, use_token_type=True, token_type_ids=token_type_ids,
                    token_type_vocab_size=config.type_vocab_size, initializer_range=config.initializer_range,
                    max_position_embeddings=config.max_position_embeddings, dropout_prob=0.0)
            with tf.compat.v1.variable_scope("encoder"):
                attention_mask = modeling.create_attention_mask_from_input_mask(input_ids, input_mask)
                layers = modeling.transformer_model(
                    embedding_output, attention_mask, config.hidden_size, config.num_hidden_layers,
                    config.num_attention_heads, config.intermediate_size, modeling.get_activation(config.hidden_act),
                    0.0, 0.0, config.initializer_range, do_return_all_layers=True)
            with tf.compat.v1.variable_scope("pooler"):
                pooled = modeling.dense(tf.squeeze(layers[-1][:, 0:1, :], axis=1), config.hidden_size,
                                        activation=tf.tanh, initializer_range=config.initializer_range)
        return {"embedding_output": embedding_output, "sequence_output": layers[-1], "pooled_output": pooled}

    bert()
    tvars = modeling.trainable_variables()
    assert [v.name for v in tvars] == _original_names(folder, "bert/")
    modeling.init_from_checkpoint(ckpt, modeling.get_assignment_map_from_checkpoint(tvars, ckpt)[0])
    _check_reference_outputs(bert(), ref)
    _check_reference_outputs(tf.function(bert)(), ref)
    assert len(modeling.trainable_variables()) == len(tvars)


def test_variables_are_made_once_per_name():
    config = modeling.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=32, type_vocab_size=2)
    ids = tf.constant([[5, 6, 7, 0]])
    first = modeling.BertModel(config, False, ids)
    second = modeling.BertModel(config, True, tf.constant([[8, 9]]))
    assert [id(v) for v in first.variables] == [id(v) for v in second.variables]
    other = modeling.BertModel(config, False, ids, scope="other")
    assert other.trainable_variables[0].name == "other/embeddings/word_embeddings:0"
    with tf.compat.v1.variable_scope("outer"):
        nested = modeling.BertModel(config, False, ids)
    assert nested.trainable_variables[-1].name == "outer/bert/pooler/dense/bias:0"
    assert len(modeling.trainable_variables()) == 3 * len(first.trainable_variables)
    assert len(modeling.trainable_variables("other/")) == len(first.trainable_variables)
    deeper = modeling.BertConfig(**dict(config.to_dict(), hidden_size=32))
    with pytest.raises(ValueError, match="Trying to share variable bert/embeddings/word_embeddings, but specified "
                                         "shape \\[50, 32\\] and found shape \\[50, 16\\]"):
        modeling.BertModel(deeper, False, ids)

    x = tf.random.stateless_normal([3, 16], seed=[1, 2])
    norms = [modeling.layer_norm(x), modeling.layer_norm(x * 2.0)]
    with tf.compat.v1.variable_scope("cls"):
        modeling.layer_norm(x, name="norm")
    assert [v.name for v in modeling.trainable_variables("LayerNorm|cls")] == [
        "LayerNorm/beta:0", "LayerNorm/gamma:0", "cls/norm/beta:0", "cls/norm/gamma:0"]
    np.testing.assert_allclose(norms[0], norms[1], atol=1e-5)
    np.testing.assert_allclose(tf.reduce_mean(norms[0], -1), 0.0, atol=1e-6)

    step = tf.function(lambda t: modeling.layer_norm(modeling.dense(t, 4, name="proj"), name="proj_norm"))
    step(x)
    step(tf.ones([5, 16]))  # a retrace finds the variables of the first
    assert [v.name for v in modeling.trainable_variables("proj")] == ["proj/kernel:0", "proj/bias:0",
                                                                     "proj_norm/beta:0", "proj_norm/gamma:0"]
    weights = modeling.get_variable("w", [2, 3])
    assert modeling.get_variable("w", [2, 3]) is weights and weights.name == "w:0"


def test_dropout_eagerly_one_draw_per_model_and_none_when_not_training():
    """is_training=False zeroes both dropout probabilities; with dropout, the getters of one model share one draw
    of the masks (the pooled output is the pooler on the sequence output's first token)."""
    config = modeling.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=32, type_vocab_size=2, hidden_dropout_prob=0.3,
                                 attention_probs_dropout_prob=0.3)
    ids = tf.constant([[5, 6, 7, 8, 9, 10]])
    evaluation = modeling.BertModel(config, False, ids)
    np.testing.assert_array_equal(evaluation.get_sequence_output(), evaluation.get_sequence_output())
    training = modeling.BertModel(config, True, ids)
    sequence = training.get_sequence_output()
    np.testing.assert_array_equal(sequence, training.get_sequence_output())
    assert np.abs(sequence.numpy() - evaluation.get_sequence_output().numpy()).max() > 1e-3
    by_name = training.variables_by_name()
    pooler = tf.tanh(tf.matmul(sequence[:, 0], by_name["bert/pooler/dense/kernel"]) + by_name["bert/pooler/dense/bias"])
    np.testing.assert_allclose(training.get_pooled_output(), pooler, atol=1e-6)
    assert np.abs(modeling.BertModel(config, True, ids).get_sequence_output().numpy() - sequence.numpy()).max() > 1e-3


def test_one_hot_embeddings_same_values_dense_gradient():
    config = modeling.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=32, type_vocab_size=2)
    ids = tf.constant([[5, 6, 5, 8]])
    grads = {}
    outputs = {}
    for one_hot in (False, True):
        with tf.GradientTape() as tape:
            model = modeling.BertModel(config, False, ids, use_one_hot_embeddings=one_hot)
            outputs[one_hot] = model.get_sequence_output()
            loss = tf.reduce_sum(outputs[one_hot] ** 2)
        grads[one_hot] = tape.gradient(loss, model.get_embedding_table())
    np.testing.assert_allclose(outputs[True], outputs[False], atol=1e-6)
    assert isinstance(grads[False], tf.IndexedSlices) and not isinstance(grads[True], tf.IndexedSlices)
    np.testing.assert_allclose(tf.convert_to_tensor(grads[False]), grads[True], atol=1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_attention_layer_is_the_originals_formula(mode):
    """Cross-attention (from 3 positions to 5), query/key/value activations, a mask, both output ranks and the
    matrix inputs: softmax(q k^T / sqrt(H) - 10000 (1 - mask)) v, per head, with the layer's own variables."""
    rng = np.random.RandomState(0)
    from_tensor = tf.constant(rng.randn(2, 3, 6), tf.float32)
    to_tensor = tf.constant(rng.randn(2, 5, 6), tf.float32)
    mask = rng.randint(0, 2, size=[2, 3, 5]).astype(np.int32)
    mask[:, :, 0] = 1
    mask = tf.constant(mask)

    def attend(from_tensor, to_tensor, mask):
        with tf.compat.v1.variable_scope("attention"):
            three = modeling.attention_layer(from_tensor, to_tensor, mask, num_attention_heads=2, size_per_head=4,
                                             query_act=tf.tanh, value_act="relu")
            two = modeling.attention_layer(tf.reshape(from_tensor, [6, 6]), tf.reshape(to_tensor, [10, 6]), mask,
                                           num_attention_heads=2, size_per_head=4, query_act=tf.tanh,
                                           value_act="relu", do_return_2d_tensor=True, batch_size=2,
                                           from_seq_length=3, to_seq_length=5)
        return three, two

    three, two = _run(mode, attend, from_tensor, to_tensor, mask)
    w = {v.name[len("attention/"):-2]: v.numpy() for v in modeling.trainable_variables("attention/")}
    assert sorted(w) == sorted(f"{p}/{k}" for p in ("query", "key", "value") for k in ("kernel", "bias"))
    q = np.tanh(from_tensor.numpy() @ w["query/kernel"] + w["query/bias"])
    k = to_tensor.numpy() @ w["key/kernel"] + w["key/bias"]
    v = np.maximum(to_tensor.numpy() @ w["value/kernel"] + w["value/bias"], 0.0)
    heads = lambda t: t.reshape(2, -1, 2, 4).transpose(0, 2, 1, 3)
    scores = heads(q) @ heads(k).transpose(0, 1, 3, 2) / 2.0 - 10000.0 * (1.0 - mask.numpy()[:, None])
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    expected = (probs @ heads(v)).transpose(0, 2, 1, 3).reshape(2, 3, 8)
    np.testing.assert_allclose(three, expected, atol=1e-5)
    np.testing.assert_allclose(two, expected.reshape(6, 8), atol=1e-5)
    with pytest.raises(ValueError, match="must all be specified"):
        modeling.attention_layer(tf.zeros([6, 6]), tf.zeros([10, 6]))


def test_helpers_as_the_original():
    assert modeling.get_activation("") is None and modeling.get_activation(None) is None
    assert modeling.get_activation("linear") is None and modeling.get_activation("Linear") is None
    assert modeling.get_activation("gelu") is modeling.gelu and modeling.get_activation("relu") is tf.nn.relu
    assert modeling.get_activation(tf.tanh) is tf.tanh
    with pytest.raises(ValueError, match="Unsupported activation: swish"):
        modeling.get_activation("swish")

    x = tf.zeros([2, 3, 4])
    assert modeling.get_shape_list(x, expected_rank=3) == [2, 3, 4]
    with pytest.raises(ValueError, match="For the tensor `x` in scope ``, the actual rank `3` \\(shape = \\(2, 3, "
                                         "4\\)\\) is not equal to the expected rank `\\[2\\]`"):
        modeling.assert_rank(x, [2], name="x")
    with tf.compat.v1.variable_scope("outer"), pytest.raises(ValueError, match="in scope `outer`"):
        modeling.get_shape_list(x, expected_rank=2)

    @tf.function(input_signature=[tf.TensorSpec([None, 3, 4])])
    def dynamic(t):
        shape = modeling.get_shape_list(t)
        assert isinstance(shape[0], tf.Tensor) and shape[1:] == [3, 4]
        matrix = modeling.reshape_to_matrix(t)
        assert matrix.shape.as_list() == [None, 4]
        return modeling.reshape_from_matrix(matrix, shape)

    np.testing.assert_array_equal(dynamic(tf.ones([5, 3, 4])), tf.ones([5, 3, 4]))
    assert modeling.reshape_to_matrix(x).shape == (6, 4)
    assert modeling.reshape_from_matrix(tf.zeros([6, 7]), [2, 3, 4]).shape == (2, 3, 7)
    with pytest.raises(ValueError, match="at least rank 2"):
        modeling.reshape_to_matrix(tf.zeros([3]))

    mask = modeling.create_attention_mask_from_input_mask(tf.zeros([2, 3], tf.int32), tf.constant([[1, 1, 0, 0],
                                                                                                 [1, 0, 0, 0]]))
    np.testing.assert_array_equal(mask, np.repeat(np.array([[[1, 1, 0, 0]], [[1, 0, 0, 0]]], np.float32), 3, axis=1))

    ones = tf.ones([1000])
    assert modeling.dropout(ones, 0.0) is ones and modeling.dropout(ones, None) is ones
    dropped = modeling.dropout(ones, 0.4).numpy()
    assert set(np.unique(dropped)) <= {0.0, np.float32(1 / 0.6)} and 300 < (dropped == 0).sum() < 500
    normed = modeling.layer_norm_and_dropout(tf.constant([[1.0, 2.0, 3.0]]), 0.0, name="ln")
    np.testing.assert_allclose(normed, [[-1.2247448, 0.0, 1.2247448]], atol=1e-5)
    assert isinstance(modeling.create_initializer(0.5)(shape=[2, 2]), tf.Tensor)
    x = tf.constant([-1.0, 0.0, 2.0])
    np.testing.assert_allclose(modeling.gelu(x), 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
                               atol=1e-6)


def test_embedding_functions_as_the_original():
    ids = tf.constant([[[1, 2], [3, 4], [0, 1]]])  # [batch, seq, num_inputs]
    output, table = modeling.embedding_lookup(ids, vocab_size=6, embedding_size=5, word_embedding_name="words")
    assert table.name == "words:0" and output.shape == (1, 3, 10)
    np.testing.assert_array_equal(output[0, 1], np.concatenate([table.numpy()[3], table.numpy()[4]]))
    one_hot, _ = modeling.embedding_lookup(ids, 6, 5, word_embedding_name="words", use_one_hot_embeddings=True)
    np.testing.assert_allclose(one_hot, output, atol=1e-7)
    flat, _ = modeling.embedding_lookup(tf.constant([[1, 2, 3]]), 6, 5, word_embedding_name="words")
    assert flat.shape == (1, 3, 5)
    post = modeling.embedding_postprocessor(flat, use_token_type=True, token_type_ids=tf.constant([[0, 1, 1]]),
                                            token_type_vocab_size=2, max_position_embeddings=8, dropout_prob=0.0)
    by_name = {v.name: v.numpy() for v in modeling.trainable_variables()}
    assert sorted(by_name) == ["LayerNorm/beta:0", "LayerNorm/gamma:0", "position_embeddings:0",
                               "token_type_embeddings:0", "words:0"]
    summed = flat.numpy() + by_name["token_type_embeddings:0"][[0, 1, 1]] + by_name["position_embeddings:0"][:3]
    normalized = (summed - summed.mean(-1, keepdims=True)) / np.sqrt(summed.var(-1, keepdims=True) + 1e-12)
    np.testing.assert_allclose(post, normalized, atol=1e-5)
    with pytest.raises(ValueError, match="`token_type_ids` must be specified"):
        modeling.embedding_postprocessor(flat, use_token_type=True)
    with pytest.raises(ValueError, match="exceeds max_position_embeddings 2"):
        modeling.embedding_postprocessor(flat, max_position_embeddings=2)


def test_init_from_checkpoint_errors():
    _, ckpt, _ = _tiny()
    weights = modeling.get_variable("bert/pooler/dense/bias", [128])
    assert modeling.init_from_checkpoint(ckpt, [("bert/pooler/dense/bias", weights)]) == ["bert/pooler/dense/bias"]
    np.testing.assert_array_equal(weights.numpy(), tf.train.load_checkpoint(ckpt).get_tensor("bert/pooler/dense/bias"))
    with pytest.raises(ValueError, match="Tensor bert/nothing is not found in"):
        modeling.init_from_checkpoint(ckpt, {"bert/nothing": "bert/nothing"})
    with pytest.raises(ValueError, match="bert/pooler/dense/kernel is not a variable of modeling's"):
        modeling.init_from_checkpoint(ckpt, {"bert/pooler/dense/kernel": "bert/pooler/dense/kernel"})
    wrong = modeling.get_variable("bert/pooler/dense/kernel", [3, 3])
    with pytest.raises(ValueError, match="Shape mismatch .* bert/pooler/dense/kernel: model \\[3, 3\\] vs checkpoint"):
        modeling.init_from_checkpoint(ckpt, {"bert/pooler/dense/kernel": wrong})


def test_init_from_checkpoint_inside_tf_function_restores_once_per_python_call(tmp_path):
    """As TF1's set the initial values once: inside a tf.function the checkpoint is loaded while the function is
    traced (each call of the Python function), not on every execution of the traced graph."""
    counter = modeling.get_variable("counter", [], initializer=tf.zeros_initializer())
    counter.assign(5.0)
    prefix = modeling.save_checkpoint(str(tmp_path / "five.ckpt"), var_list=[counter])
    counter.assign(0.0)

    @tf.function
    def restore_and_add(x):
        modeling.init_from_checkpoint(prefix, {"counter": "counter"})
        counter.assign_add(tf.reduce_sum(x))
        return counter.read_value()

    assert [float(restore_and_add(tf.constant(1.0))) for _ in range(3)] == [6.0, 7.0, 8.0]
    assert float(restore_and_add(tf.constant([1.0, 1.0]))) == 7.0  # another shape: traced (and loaded) again
    assert float(restore_and_add(tf.constant(1.0))) == 8.0
    assert modeling.init_from_checkpoint(prefix, [("counter", counter)]) == ["counter"]
    assert float(counter.numpy()) == 5.0


def test_model_fn_loads_the_original_checkpoint_inside_tf_function():
    """The original's model_fn pattern in one traced function: BertModel, the assignment map, init_from_checkpoint,
    then the outputs: the original's, on the first call and on the next ones."""
    folder, ckpt, ref = _tiny()
    config = modeling.BertConfig.from_json_file(os.path.join(folder, "bert_config.json"))

    @tf.function
    def model_fn(input_ids, input_mask, token_type_ids):
        model = modeling.BertModel(config, False, input_ids, input_mask, token_type_ids)
        assignment_map, _ = modeling.get_assignment_map_from_checkpoint(model.trainable_variables, ckpt)
        modeling.init_from_checkpoint(ckpt, assignment_map)
        return {"embedding_output": model.get_embedding_output(), "sequence_output": model.get_sequence_output(),
                "pooled_output": model.get_pooled_output()}

    inputs = (ref["in_input_ids"], ref["in_input_mask"], ref["in_segment_ids"])
    _check_reference_outputs(model_fn(*inputs), ref)
    _check_reference_outputs(model_fn(*inputs), ref)


@pytest.mark.parametrize("mode", MODES)
def test_getters_share_one_forward_pass_computed_when_first_read(mode, monkeypatch):
    """get_pooled_output, get_sequence_output, get_all_encoder_layers, get_embedding_output of one BertModel: one
    run of the encoder, when the first of them is called (a value assigned after construction is used)."""
    config = modeling.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=32, type_vocab_size=2)
    calls = []
    encoder_call = modeling.BertEncoder.call
    monkeypatch.setattr(modeling.BertEncoder, "call", lambda self, *a, **k: calls.append(1) or encoder_call(
        self, *a, **k))

    def outputs(ids):
        del calls[:]  # a tf.function that makes variables is traced twice
        model = modeling.BertModel(config, False, ids)
        assert calls == []
        model.get_embedding_table().assign(tf.zeros([50, 16]))
        out = [model.get_pooled_output(), model.get_sequence_output(), model.get_all_encoder_layers(),
               model.get_embedding_output(), model.get_pooled_output()]
        assert len(calls) == 1
        return out

    pooled, sequence, layers, embedding, again = _run(mode, outputs, tf.constant([[5, 6, 7, 8]]))
    np.testing.assert_array_equal(pooled, again)
    np.testing.assert_array_equal(layers[-1], sequence)
    position_only = modeling.BertModel(config, False, tf.constant([[9, 10, 11, 12]])).get_embedding_output()
    np.testing.assert_allclose(embedding, position_only, atol=1e-6)  # the word embeddings read as zeros


def test_eager_getters_compute_again_after_a_training_step():
    """A BertModel read eagerly, then trained by the original's create_optimizer step (eagerly or in a
    tf.function): its get_*() read the trained values, as TF1's tensors would, in one forward pass again."""
    config = modeling.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=32, type_vocab_size=2)
    ids = tf.constant([[5, 6, 7, 8]])
    model = modeling.BertModel(config, False, ids)
    first = model.get_pooled_output().numpy()
    np.testing.assert_array_equal(model.get_pooled_output(), first)

    def loss():
        return tf.reduce_sum(modeling.BertModel(config, False, ids).get_pooled_output())

    train_op = optimization.create_optimizer(loss, 0.1, 10, 0, False)
    for step in (train_op, tf.function(train_op)):
        step()
        trained = model.get_pooled_output().numpy()
        assert np.abs(trained - first).max() > 1e-3
        np.testing.assert_allclose(trained, modeling.BertModel(config, False, ids).get_pooled_output(), atol=1e-6)
        first = trained
