"""BERT model in TensorFlow 2 / Keras 3 with the original release's maths and variable names.

Public API (stable). The original's, with its parameters (code written for the original runs unchanged, eagerly
and under tf.function; the section "The original release's API" below says how):
  BertConfig(vocab_size, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
    hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, max_position_embeddings=512,
    type_vocab_size=16, initializer_range=0.02): from_dict, from_json_file, to_dict, to_json_string (every key
    kept), to_json_file; no checks at construction. Ours: BertConfig.load(json_file) (the REQUIRED_KEYS present
    and every value valid, else a cli.UserError naming the file and key), validate(source). hidden_act: "gelu"
    (original tanh approximation), "gelu_exact" (erf), "relu", "tanh", "linear", or a function.
  BertModel(config, is_training, input_ids, input_mask=None, token_type_ids=None, use_one_hot_embeddings=False,
    scope=None): get_pooled_output(), get_sequence_output(), get_all_encoder_layers(), get_embedding_output(),
    get_embedding_table() (one forward pass, computed when the first of them is called, again eagerly after
    the variables were loaded or trained); `trainable_variables`
    (tf.Variables named "bert/...:0"), `variables_by_name()`.
  get_assignment_map_from_checkpoint(tvars, init_checkpoint) -> (assignment_map, initialized_variable_names);
    init_from_checkpoint(ckpt_dir_or_file, assignment_map): tf.train.init_from_checkpoint's stand-in, assigning
    once when called (eagerly, or inside a tf.function while it is traced).
  gelu, get_activation, create_initializer, dropout, layer_norm(input_tensor, name=None), layer_norm_and_dropout,
    get_shape_list, assert_rank, reshape_to_matrix, reshape_from_matrix, create_attention_mask_from_input_mask,
    embedding_lookup, embedding_postprocessor, attention_layer, transformer_model.
  TensorFlow 2 stand-ins for what the original took from TF1: get_variable(name, shape, ...) (tf.get_variable),
    trainable_variables(scope=None) (tf.trainable_variables), dense(input_tensor, units, activation=None,
    initializer_range=0.02, name="dense") (tf.layers.dense), get_or_create_global_step(), reset_variables()
    (tf.reset_default_graph for these variables), save_checkpoint(save_path, var_list=None, global_step=None)
    (tf.compat.v1.train.Saver().save: these variables and the optimizers' slots under their checkpoint names);
    tf.compat.v1.variable_scope names them as tf.variable_scope did. variable_name(variable) (a variable's
    checkpoint name), track_saveable(owner) (optimization.py's optimizers register their slots for
    save_checkpoint).
The project's Keras layers:
  BertEncoder(config, name="bert"): the Keras encoder; call(input_ids, input_mask=None, token_type_ids=None,
    training=False) -> {"sequence_output", "pooled_output", "all_encoder_layers", "embedding_output"};
    `embedding_table`; `variables_by_name()` -> {original name: variable}, e.g. "bert/pooler/dense/kernel".
  PretrainingModel(config): call(features, training=False) ->
    {"mlm_log_probs", "mlm_loss", "mlm_example_loss", "nsp_log_probs", "nsp_loss", "nsp_example_loss",
    "total_loss", "sequence_output", "pooled_output"}; `bert`; `variables_by_name()` (bert/... and cls/...).
  ClassifierModel(config, num_labels, per_token=False): the fine-tuning output layer on the pooled output
    (run_classifier) or on every position (run_ner); SquadModel(config): the SQuAD start/end layer.
  NamedLayer: a keras Layer whose `add_named_weight(original_name, shape, initializer)` registers a weight
    under its original name; `variables_by_name()` merges its own weights with those of NamedLayer children
    added through `track_named(prefix, layer)`. Fine-tuning heads subclass it (or call `create_variable`).
    The models' Keras variables carry their original name as `original_name` (tag_original_names).
  create_variable(layer, original_name, shape, initializer_range=0.02, initializer=None): one named weight
    with the original initializer on any Keras layer/model; returns the variable.
  gelu_exact(x), apply_layer_norm(x, gamma, beta), gather_indexes(seq, positions), lookup_embeddings,
    add_embeddings, attention_context (the layers' arithmetic, which the original's functions share).
  dropout_seed(seed): a context in which the dropout masks of the model calls traced inside are drawn from
    `seed` (int [2]) and each mask's place in the model; elsewhere dropout draws from TensorFlow's stateful
    random streams.

Mixed precision: layers follow the Keras dtype policy (e.g. "mixed_bfloat16"); variables stay float32,
matmuls run in the compute dtype, and softmax, LayerNorm, residual sums, log-softmax and losses run in float32.
The elementwise work around the matmuls follows set_elementwise_dtype(ELEMENTWISE_DTYPES), chosen by the device
(device_setup.py): "float32" (a CPU's, the default: elementwise bfloat16 is slow there) runs the dropouts and
attention's scale in float32, and under bfloat16 the dense layers' bias and activation too; "compute" (a GPU's
or TPU's) runs them in the compute dtype.
"""
import collections
import contextlib
import copy
import gc
import json
import math
import re
import threading
import weakref

import keras
import numpy as np
import tensorflow as tf
from absl import logging

import checkpoints
import records
from cli import MissingFileError, UserError

LAYER_NORM_EPSILON = 1e-12  # tf.contrib.layers.layer_norm, as used by the original
ATTENTION_MASK_ADDER = -10000.0

# Every key of a bert_config.json the model reads, in the original's order (BertConfig's parameters).
CONFIG_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
               "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
               "type_vocab_size", "initializer_range")

ACTIVATIONS = ("gelu", "gelu_exact", "relu", "tanh", "linear")
# Keys a bert_config.json must give: a default would build another model than the checkpoint's, silently
# (heads have no variable of their own; missing layers would start from random weights). A wrong default for
# the other sizes fails the checkpoint's shape check.
REQUIRED_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


class BertConfig:
    """Configuration of a BERT model: the original's class, as lenient as it is.

    Positional or keyword construction with the original's parameters and defaults; from_dict / from_json_file
    keep every key of the dict or file as an attribute (a released config's `directionality`, `pooler_fc_size`,
    ... included) and to_dict / to_json_string give them all back. Nothing is checked at construction: a model
    checks what it needs when it is built (BertEncoder, BertModel, transformer_model: the original's "The hidden
    size (..) is not a multiple of the number of attention heads (..)"). The scripts check more, each failure a
    cli.UserError naming the file and key: `BertConfig.load(json_file)` (REQUIRED_KEYS present, every value
    valid) and `validate(source)`.
    """

    def __init__(self, vocab_size, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1, max_position_embeddings=512, type_vocab_size=16,
                 initializer_range=0.02):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range

    def validate(self, source="BertConfig"):
        """The scripts' checks of the values: raises cli.UserError naming `source` and the key; returns self."""
        for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                    "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                raise UserError(f"{source}: `{key}` must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads != 0:
            raise UserError(
                f"{source}: `hidden_size` ({self.hidden_size}) is not a multiple of "
                f"`num_attention_heads` ({self.num_attention_heads})")
        if self.hidden_act not in ACTIVATIONS:
            raise UserError(f"{source}: `hidden_act` must be one of {ACTIVATIONS}, got {self.hidden_act!r}")
        for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, key)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise UserError(f"{source}: `{key}` must be a number in [0, 1), got {value!r}")
        if not isinstance(self.initializer_range, (int, float)) or self.initializer_range <= 0:
            raise UserError(f"{source}: `initializer_range` must be positive, got {self.initializer_range!r}")
        return self

    @property
    def size_per_head(self):
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, json_object):
        """A config from a dict, as the original: every key becomes an attribute, missing ones keep the defaults
        (vocab_size None)."""
        config = cls(vocab_size=None)
        for key, value in json_object.items():
            setattr(config, key, value)
        return config

    @classmethod
    def from_json_file(cls, json_file):
        """A config from a bert_config.json, as the original (from_dict of its object); a missing file or one
        that is not a JSON object is a cli.UserError naming it."""
        return cls.from_dict(_read_json_object(json_file))

    @classmethod
    def load(cls, json_file):
        """The scripts' reader of --bert_config_file: from_json_file, with the REQUIRED_KEYS present (a default
        would build another model than the checkpoint's) and every value valid, else a cli.UserError naming the
        file and the key. Keys the model does not use are kept, as the original keeps them."""
        data = _read_json_object(json_file)
        missing = [key for key in REQUIRED_KEYS if key not in data]
        if missing:
            raise UserError(f"{json_file}: required key(s) {', '.join('`%s`' % k for k in missing)} missing")
        unused = [key for key in data if key not in CONFIG_KEYS]
        if unused:
            logging.info("%s: keeping key(s) the model does not use: %s", json_file, ", ".join(unused))
        defaulted = [key for key in CONFIG_KEYS if key not in data]
        if defaulted:
            logging.info("%s: using the original's defaults for %s", json_file, ", ".join(defaulted))
        return cls.from_dict(data).validate(json_file)

    def to_dict(self):
        """Every attribute (the original's keys first, then any other key the config was given)."""
        return collections.OrderedDict((key, copy.deepcopy(value)) for key, value in vars(self).items())

    def to_json_string(self):
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def to_json_file(self, json_file):
        with tf.io.gfile.GFile(json_file, "w") as writer:
            writer.write(self.to_json_string())

    def __eq__(self, other):
        return isinstance(other, BertConfig) and self.to_dict() == other.to_dict()

    def __repr__(self):
        return "BertConfig(%s)" % ", ".join("%s=%r" % kv for kv in self.to_dict().items())


ELEMENTWISE_DTYPES = ("float32", "compute")
_ELEMENTWISE = ["float32"]


def set_elementwise_dtype(elementwise):
    """Where a mixed-precision model runs its elementwise work (ELEMENTWISE_DTYPES; see the module docstring), for
    the models called (traced) from now on."""
    if elementwise not in ELEMENTWISE_DTYPES:
        raise ValueError(f"elementwise dtype {elementwise!r}: expected one of {ELEMENTWISE_DTYPES}")
    _ELEMENTWISE[0] = elementwise


def elementwise_dtype():
    """The elementwise dtype set (ELEMENTWISE_DTYPES)."""
    return _ELEMENTWISE[0]


def _elementwise_dtype(compute_dtype):
    """The dtype of the elementwise work of a layer computing in compute_dtype."""
    return tf.float32 if _ELEMENTWISE[0] == "float32" else compute_dtype


def _read_json_object(json_file):
    """The JSON object of a file; a missing file, invalid JSON or another JSON value is a cli.UserError."""
    if not tf.io.gfile.exists(json_file):
        raise MissingFileError(f"BERT config file not found: {json_file}")
    with tf.io.gfile.GFile(json_file, "r") as reader:
        text = reader.read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"BERT config file {json_file} is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise UserError(f"{json_file}: expected a JSON object, got {type(data).__name__}")
    return data


def check_attention_heads(hidden_size, num_attention_heads):
    """The original's check when a model is built: ValueError unless the heads divide the hidden size."""
    if hidden_size % num_attention_heads != 0:
        raise ValueError("The hidden size (%d) is not a multiple of the number of attention heads (%d)" %
                         (hidden_size, num_attention_heads))


def gelu(x):
    """The original's GELU: tanh approximation, spelled as the original (x * cdf). tf.nn.gelu(approximate=True),
    the form TensorFlow's CPU remapper fuses with the MatMul before it, rounds differently: it moved
    pre-training's curve past the original's own spread, for little speed (benchmarks/SPEED.md)."""
    cdf = 0.5 * (1.0 + tf.tanh(np.sqrt(2 / np.pi).astype(np.float32) * (x + 0.044715 * tf.pow(x, 3))))
    return x * cdf


def gelu_exact(x):
    """Exact GELU with erf (HF "gelu")."""
    return x * 0.5 * (1.0 + tf.math.erf(x / math.sqrt(2.0)))


def get_activation(activation_string):
    """Maps an activation name to a function, as the original: None for None, "" and "linear"; anything that is
    not a string (a function) is returned as it is; "gelu_exact" is ours (erf GELU)."""
    if not isinstance(activation_string, str):
        return activation_string
    if not activation_string:
        return None
    act = activation_string.lower()
    table = {"linear": None, "gelu": gelu, "gelu_exact": gelu_exact, "relu": tf.nn.relu, "tanh": tf.tanh}
    if act not in table:
        raise ValueError(f"Unsupported activation: {act} (expected one of {ACTIVATIONS})")
    return table[act]


def create_initializer(initializer_range=0.02):
    """The original truncated-normal initializer (cut at two standard deviations)."""
    return keras.initializers.TruncatedNormal(stddev=initializer_range)


def apply_layer_norm(x, gamma, beta, epsilon=LAYER_NORM_EPSILON):
    """tf.contrib.layers.layer_norm over the last axis with the given gamma and beta, computed in float32 (the
    LayerNorm layer's arithmetic; the original's layer_norm(input_tensor, name) is further down)."""
    x = tf.cast(x, tf.float32)
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    variance = tf.reduce_mean(tf.math.squared_difference(x, tf.stop_gradient(mean)), axis=-1, keepdims=True)
    inv = tf.math.rsqrt(variance + epsilon) * gamma
    return x * inv + (beta - mean * inv)


def gather_indexes(sequence_tensor, positions):
    """Gathers the vectors at `positions` [B, P] of `sequence_tensor` [B, T, W] -> [B*P, W]."""
    shape = tf.shape(sequence_tensor)
    batch_size, seq_length, width = shape[0], shape[1], sequence_tensor.shape[-1]
    positions = tf.cast(positions, tf.int32)
    flat_offsets = tf.reshape(tf.range(0, batch_size, dtype=tf.int32) * seq_length, [-1, 1])
    flat_positions = tf.reshape(positions + flat_offsets, [-1])
    flat_sequence = tf.reshape(sequence_tensor, [-1, width])
    return tf.gather(flat_sequence, flat_positions)


def _sanitize(name):
    return name.replace("/", "__")


_ADDING = threading.local()  # the NamedLayer weight being added: (layer, original name, shape)


class NamedLayer(keras.layers.Layer):
    """A Keras layer whose weights carry original (slash-separated) names."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._named_weights = collections.OrderedDict()
        self._named_children = []

    def add_named_weight(self, original_name, shape, initializer="zeros", trainable=True, dtype=None,
                         autocast=True):
        _ADDING.weight = (self, original_name, tuple(shape))  # for _namespace_variables
        try:
            variable = self.add_weight(name=_sanitize(original_name), shape=tuple(shape), initializer=initializer,
                                       trainable=trainable, dtype=dtype or self.variable_dtype, autocast=autocast)
        finally:
            _ADDING.weight = None
        self._named_weights[original_name] = variable
        return variable

    def track_named(self, prefix, layer):
        """Registers a NamedLayer child whose names get `prefix/` in front."""
        self._named_children.append((prefix, layer))
        return layer

    def variables_by_name(self):
        """Ordered {original name: variable}, own weights then children in registration order."""
        out = collections.OrderedDict()
        out.update(self._named_weights)
        for prefix, child in self._named_children:
            for name, var in child.variables_by_name().items():
                out[f"{prefix}/{name}" if prefix else name] = var
        return out


def tag_original_names(variables_by_name):
    """Gives each (Keras) variable its original name as `original_name`, which optimization.AdamWeightDecay's
    weight-decay exclusions read when Keras builds it from a model's variables (their Keras paths say
    "attn_norm", not "LayerNorm")."""
    for name, variable in variables_by_name.items():
        variable.original_name = name


def create_variable(layer, original_name, shape, initializer_range=0.02, initializer=None, trainable=True):
    """Adds a weight to `layer` with the original truncated-normal (or given) initializer; returns it.

    Keep the returned variable in your own {original_name: variable} dict (NamedLayer does that for you).
    """
    if initializer is None:
        initializer = create_initializer(initializer_range)
    if isinstance(layer, NamedLayer):
        return layer.add_named_weight(original_name, shape, initializer, trainable=trainable)
    return layer.add_weight(name=_sanitize(original_name), shape=tuple(shape), initializer=initializer,
                            trainable=trainable)


class Dense(NamedLayer):
    """Dense layer with "kernel" [in, out] and "bias" [out], as tf.layers.dense."""

    def __init__(self, units, activation=None, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.activation = get_activation(activation)
        self.initializer_range = initializer_range

    def build(self, input_shape):
        self.kernel = self.add_named_weight("kernel", (input_shape[-1], self.units),
                                            create_initializer(self.initializer_range))
        self.bias = self.add_named_weight("bias", (self.units,), "zeros", autocast=False)

    def call(self, x):
        y = tf.matmul(x, tf.cast(self.kernel, x.dtype)) if x.shape.rank == 2 else \
            tf.einsum("...i,io->...o", x, tf.cast(self.kernel, x.dtype))
        output_dtype = y.dtype
        if self.activation is not None and output_dtype == tf.bfloat16:
            # Bias and activation in float32 under the "float32" elementwise dtype: more precise, and several
            # times faster than bfloat16 elementwise arithmetic on CPU.
            y = tf.cast(y, _elementwise_dtype(output_dtype))
        y = tf.nn.bias_add(y, tf.cast(self.bias, y.dtype))
        if self.activation is not None:
            y = self.activation(y)
        return tf.cast(y, output_dtype)


class LayerNorm(NamedLayer):
    """LayerNorm with "beta" and "gamma", always in float32 (output float32)."""

    def __init__(self, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)

    def build(self, input_shape):
        self.beta = self.add_named_weight("beta", (input_shape[-1],), "zeros", autocast=False)
        self.gamma = self.add_named_weight("gamma", (input_shape[-1],), "ones", autocast=False)

    def call(self, x):
        return apply_layer_norm(x, self.gamma, self.beta)


_DROPOUT_SEED = threading.local()


@contextlib.contextmanager
def dropout_seed(seed):
    """Within: every dropout mask traced draws from `seed` (int [2] tensor) folded with the mask's place in the
    order of the model's dropout calls, with stateless random ops. The masks of a training step are then a
    function of its seed alone (training.py derives it from --seed and the global step), whatever ran before:
    a run resumed at any step draws what an uninterrupted one draws, also under XLA."""
    previous = getattr(_DROPOUT_SEED, "state", None)
    _DROPOUT_SEED.state = [seed, 0]
    try:
        yield
    finally:
        _DROPOUT_SEED.state = previous


def _dropout(x, rate, training):
    if not training or not rate:
        return x
    state = getattr(_DROPOUT_SEED, "state", None)
    if state is None:
        return tf.nn.dropout(x, rate=rate)
    seed = tf.random.experimental.stateless_fold_in(state[0], state[1])
    state[1] += 1
    return tf.nn.experimental.stateless_dropout(x, rate=rate, seed=seed)


def lookup_embeddings(table, ids, use_one_hot_embeddings=False):
    """The rows of `table` [V, W] at `ids` -> ids' shape + [W]: gathered (a gradient of IndexedSlices), or with
    use_one_hot_embeddings a one-hot matmul (a dense gradient), as the original's embedding_lookup."""
    if not use_one_hot_embeddings:
        return tf.gather(table, ids)
    flat = tf.one_hot(tf.reshape(ids, [-1]), depth=table.shape[0], dtype=table.dtype)
    rows = tf.matmul(flat, tf.convert_to_tensor(table))
    return tf.reshape(rows, tf.concat([tf.shape(ids), [table.shape[-1]]], axis=0))


def add_embeddings(embeddings, token_type_table=None, token_type_ids=None, position_table=None):
    """[B, T, W] embeddings + the token-type embeddings (a one-hot matmul as the original: the same values as a
    gather, and a dense gradient, which the original's global-norm clipping counts differently from gathered
    rows) + the first T position embeddings; a table left None adds nothing."""
    output = embeddings
    if token_type_table is not None:
        type_one_hot = tf.one_hot(token_type_ids, depth=token_type_table.shape[0], dtype=tf.float32)
        output = output + tf.einsum("btv,vh->bth", type_one_hot, tf.convert_to_tensor(token_type_table))
    if position_table is not None:
        positions = tf.slice(position_table, [0, 0], [tf.shape(embeddings)[1], -1])
        output = output + tf.expand_dims(positions, 0)
    return output


class Embeddings(NamedLayer):
    """Word + token-type + position embeddings, then LayerNorm and dropout."""

    use_one_hot_embeddings = False  # True: the word embeddings by a one-hot matmul (BertModel's option)

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.layer_norm = self.track_named("LayerNorm", LayerNorm(name="LayerNorm"))

    def build(self, input_shape):
        c = self.config
        init = create_initializer(c.initializer_range)
        # Embeddings are summed and normalised in float32 under any policy.
        self.word_embeddings = self.add_named_weight("word_embeddings", (c.vocab_size, c.hidden_size), init,
                                                     autocast=False)
        self.token_type_embeddings = self.add_named_weight(
            "token_type_embeddings", (c.type_vocab_size, c.hidden_size), init, autocast=False)
        self.position_embeddings = self.add_named_weight(
            "position_embeddings", (c.max_position_embeddings, c.hidden_size), init, autocast=False)
        self.layer_norm.build((None, None, c.hidden_size))

    def call(self, input_ids, token_type_ids, training=False):
        words = lookup_embeddings(self.word_embeddings, input_ids, self.use_one_hot_embeddings)
        output = add_embeddings(words, self.token_type_embeddings, token_type_ids, self.position_embeddings)
        output = self.layer_norm(output)
        output = _dropout(output, self.config.hidden_dropout_prob, training)
        return output


def attention_context(query, key, value, attention_adder, dropout_prob, training):
    """Multi-head attention's arithmetic: softmax(query key^T / sqrt(H) + adder) value, the matmuls in the dtype of
    the inputs (the compute dtype), the softmax in float32, the scale and the dropout in the elementwise dtype
    (set_elementwise_dtype: float32 unless "compute"). query [B, N, F, H], key and
    value [B, N, T, H], attention_adder broadcastable to [B, N, F, T] (None: no mask) -> [B, N, F, H]."""
    work = _elementwise_dtype(value.dtype)
    scores = tf.cast(tf.matmul(query, key, transpose_b=True), work) * tf.cast(
        1.0 / math.sqrt(float(query.shape[-1])), work)
    scores = tf.cast(scores, tf.float32)
    if attention_adder is not None:
        scores = scores + tf.cast(attention_adder, tf.float32)
    probs = tf.nn.softmax(scores)
    probs = _dropout(tf.cast(probs, work), dropout_prob, training)
    return tf.matmul(tf.cast(probs, value.dtype), value)


class TransformerLayer(NamedLayer):
    """One encoder block with the original sub-scope names (attention/self, attention/output, ...)."""

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        c = config
        r = c.initializer_range
        h = c.hidden_size
        self.query = self.track_named("attention/self/query", Dense(h, None, r, name="query"))
        self.key = self.track_named("attention/self/key", Dense(h, None, r, name="key"))
        self.value = self.track_named("attention/self/value", Dense(h, None, r, name="value"))
        self.attention_output = self.track_named("attention/output/dense", Dense(h, None, r, name="attn_out"))
        self.attention_norm = self.track_named("attention/output/LayerNorm", LayerNorm(name="attn_norm"))
        self.intermediate = self.track_named(
            "intermediate/dense", Dense(c.intermediate_size, c.hidden_act, r, name="intermediate"))
        self.output_dense = self.track_named("output/dense", Dense(h, None, r, name="out"))
        self.output_norm = self.track_named("output/LayerNorm", LayerNorm(name="out_norm"))

    def build(self, input_shape):
        h = self.config.hidden_size
        for layer in (self.query, self.key, self.value, self.attention_output):
            layer.build((None, h))
        self.attention_norm.build((None, h))
        self.intermediate.build((None, h))
        self.output_dense.build((None, self.config.intermediate_size))
        self.output_norm.build((None, h))

    def call(self, hidden, attention_adder, training=False):
        c = self.config
        batch_size, seq_length = tf.shape(hidden)[0], tf.shape(hidden)[1]
        n, d = c.num_attention_heads, c.size_per_head
        compute_dtype = self.compute_dtype
        x = tf.reshape(tf.cast(hidden, compute_dtype), [-1, c.hidden_size])

        def heads(t):
            t = tf.reshape(t, [batch_size, seq_length, n, d])
            return tf.transpose(t, [0, 2, 1, 3])

        q = heads(self.query(x))
        k = heads(self.key(x))
        v = heads(self.value(x))
        work = _elementwise_dtype(compute_dtype)
        context = attention_context(q, k, v, attention_adder, c.attention_probs_dropout_prob, training)
        context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [-1, c.hidden_size])

        # Residual sums and LayerNorm in float32; the dropouts in the elementwise dtype.
        attention = _dropout(tf.cast(self.attention_output(context), work), c.hidden_dropout_prob, training)
        attention = self.attention_norm(tf.cast(attention, tf.float32) + tf.cast(x, tf.float32))

        intermediate = self.intermediate(tf.cast(attention, compute_dtype))
        out = _dropout(tf.cast(self.output_dense(intermediate), work), c.hidden_dropout_prob, training)
        out = self.output_norm(tf.cast(out, tf.float32) + attention)
        return tf.reshape(out, [batch_size, seq_length, c.hidden_size])


class BertEncoder(NamedLayer):
    """The BERT encoder with embeddings and pooler; variables named "bert/..." as the original."""

    def __init__(self, config, name="bert", **kwargs):
        if not isinstance(config, BertConfig):
            raise TypeError(f"BertEncoder expects a BertConfig, got {type(config).__name__}")
        check_attention_heads(config.hidden_size, config.num_attention_heads)
        super().__init__(name=name, **kwargs)
        self.config = copy.deepcopy(config)
        self.embeddings = self.track_named("embeddings", Embeddings(self.config, name="embeddings"))
        self.encoder_layers = [
            self.track_named(f"encoder/layer_{i}", TransformerLayer(self.config, name=f"layer_{i}"))
            for i in range(self.config.num_hidden_layers)]
        self.pooler = self.track_named(
            "pooler/dense", Dense(self.config.hidden_size, "tanh", self.config.initializer_range, name="pooler"))
        self.build_all()

    def build_all(self):
        """Creates every variable now (original creation order)."""
        if self.built:
            return
        self.embeddings.build((None, None))
        for layer in self.encoder_layers:
            layer.build((None, None, self.config.hidden_size))
        self.pooler.build((None, self.config.hidden_size))
        self.built = True
        tag_original_names(self.variables_by_name())

    def build(self, input_shape):
        self.build_all()

    @property
    def embedding_table(self):
        return self.embeddings.word_embeddings

    def variables_by_name(self):
        return collections.OrderedDict((f"{self.name}/{k}", v) for k, v in super().variables_by_name().items())

    def call(self, input_ids, input_mask=None, token_type_ids=None, training=False):
        input_ids = tf.convert_to_tensor(input_ids)
        if input_ids.dtype not in (tf.int32, tf.int64):
            raise ValueError(f"input_ids must be an integer tensor, got {input_ids.dtype.name}")
        input_ids = tf.cast(input_ids, tf.int32)
        if input_mask is None:
            input_mask = tf.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = tf.zeros_like(input_ids)
        token_type_ids = tf.cast(token_type_ids, tf.int32)
        static_len = input_ids.shape[1]
        if static_len is not None and static_len > self.config.max_position_embeddings:
            raise ValueError(f"sequence length {static_len} exceeds max_position_embeddings "
                             f"{self.config.max_position_embeddings}")

        embedding_output = self.embeddings(input_ids, token_type_ids, training=training)
        # [batch, 1, 1, seq]; expand_dims and gather rather than strided slices with new or shrunk axes, which
        # LiteRT cannot convert at a dynamic sequence length (litert_export.py).
        mask = tf.expand_dims(tf.expand_dims(tf.cast(input_mask, tf.float32), 1), 1)
        adder = (1.0 - mask) * ATTENTION_MASK_ADDER

        hidden = embedding_output
        all_layers = []
        for layer in self.encoder_layers:
            hidden = layer(hidden, adder, training=training)
            all_layers.append(hidden)
        sequence_output = all_layers[-1]
        first_token = tf.cast(tf.gather(sequence_output, 0, axis=1), self.compute_dtype)
        pooled_output = self.pooler(first_token)
        return {
            "sequence_output": sequence_output,
            "pooled_output": pooled_output,
            "all_encoder_layers": all_layers,
            "embedding_output": embedding_output,
        }


class MaskedLMHead(NamedLayer):
    """"cls/predictions": transform dense + act + LayerNorm, decoder tied to the word embeddings."""

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.transform = self.track_named(
            "transform/dense", Dense(config.hidden_size, config.hidden_act, config.initializer_range,
                                     name="transform"))
        self.transform_norm = self.track_named("transform/LayerNorm", LayerNorm(name="transform_norm"))

    def build(self, input_shape):
        self.transform.build((None, self.config.hidden_size))
        self.transform_norm.build((None, self.config.hidden_size))
        self.output_bias = self.add_named_weight("output_bias", (self.config.vocab_size,), "zeros",
                                                 autocast=False)

    def variables_by_name(self):
        out = collections.OrderedDict()
        for prefix, child in self._named_children:
            for name, var in child.variables_by_name().items():
                out[f"{prefix}/{name}"] = var
        out.update(self._named_weights)
        return out

    def logits(self, hidden, embedding_table):
        """The masked-LM logits (float32 [N, vocab]) of hidden states [N, H]: what call's log-softmax reads."""
        x = self.transform(tf.cast(hidden, self.compute_dtype))
        x = self.transform_norm(x)
        logits = tf.matmul(tf.cast(x, self.compute_dtype), tf.cast(embedding_table, self.compute_dtype),
                           transpose_b=True)
        return tf.nn.bias_add(tf.cast(logits, tf.float32), self.output_bias)

    def call(self, hidden, embedding_table):
        return tf.nn.log_softmax(self.logits(hidden, embedding_table), axis=-1)


class NextSentenceHead(NamedLayer):
    """"cls/seq_relationship": output_weights [2, H], output_bias [2]."""

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        self.config = config

    def build(self, input_shape):
        self.output_weights = self.add_named_weight(
            "output_weights", (2, self.config.hidden_size), create_initializer(self.config.initializer_range))
        self.output_bias = self.add_named_weight("output_bias", (2,), "zeros", autocast=False)

    def call(self, pooled):
        logits = tf.matmul(tf.cast(pooled, self.compute_dtype), tf.cast(self.output_weights, self.compute_dtype),
                           transpose_b=True)
        logits = tf.nn.bias_add(tf.cast(logits, tf.float32), self.output_bias)
        return tf.nn.log_softmax(logits, axis=-1)


def masked_lm_loss(log_probs, label_ids, label_weights):
    """Original run_pretraining.py masked-LM loss -> (loss, per_example_loss)."""
    label_ids = tf.reshape(tf.cast(label_ids, tf.int32), [-1])
    label_weights = tf.reshape(tf.cast(label_weights, tf.float32), [-1])
    one_hot = tf.one_hot(label_ids, depth=tf.shape(log_probs)[-1], dtype=tf.float32)
    per_example_loss = -tf.reduce_sum(log_probs * one_hot, axis=[-1])
    numerator = tf.reduce_sum(label_weights * per_example_loss)
    denominator = tf.reduce_sum(label_weights) + 1e-5
    return numerator / denominator, per_example_loss


def next_sentence_loss(log_probs, labels):
    """Original run_pretraining.py next-sentence loss -> (loss, per_example_loss)."""
    labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
    one_hot = tf.one_hot(labels, depth=2, dtype=tf.float32)
    per_example_loss = -tf.reduce_sum(one_hot * log_probs, axis=-1)
    return tf.reduce_mean(per_example_loss), per_example_loss


PRETRAINING_FEATURES = records.names(records.pretraining(None, None))


class PretrainingModel(keras.Model):
    """BertEncoder + the original masked-LM and next-sentence heads and losses."""

    def __init__(self, config, name="pretraining_model", **kwargs):
        super().__init__(name=name, **kwargs)
        self.config = copy.deepcopy(config)
        self.bert = BertEncoder(self.config, name="bert")
        self.mlm_head = MaskedLMHead(self.config, name="predictions")
        self.nsp_head = NextSentenceHead(self.config, name="seq_relationship")
        self.mlm_head.build(None)
        self.nsp_head.build(None)
        tag_original_names(self.variables_by_name())

    def variables_by_name(self):
        out = self.bert.variables_by_name()
        for name, var in self.mlm_head.variables_by_name().items():
            out["cls/predictions/" + name] = var
        for name, var in self.nsp_head.variables_by_name().items():
            out["cls/seq_relationship/" + name] = var
        return out

    def call(self, features, training=False):
        """The original's heads and losses (run_pretraining.PretrainingTask normalizes micro-batches)."""
        missing = [k for k in PRETRAINING_FEATURES if k not in features]
        if missing:
            raise ValueError(f"PretrainingModel: features are missing {missing}")
        outputs = self.bert(features["input_ids"], features["input_mask"], features["segment_ids"],
                            training=training)
        masked = gather_indexes(outputs["sequence_output"], features["masked_lm_positions"])
        mlm_log_probs = self.mlm_head(masked, self.bert.embedding_table)
        mlm_loss, mlm_example_loss = masked_lm_loss(mlm_log_probs, features["masked_lm_ids"],
                                                    features["masked_lm_weights"])
        nsp_log_probs = self.nsp_head(outputs["pooled_output"])
        nsp_loss, nsp_example_loss = next_sentence_loss(nsp_log_probs, features["next_sentence_labels"])
        return {
            "mlm_log_probs": mlm_log_probs,
            "mlm_loss": mlm_loss,
            "mlm_example_loss": mlm_example_loss,
            "nsp_log_probs": nsp_log_probs,
            "nsp_loss": nsp_loss,
            "nsp_example_loss": nsp_example_loss,
            "total_loss": mlm_loss + nsp_loss,
            "sequence_output": outputs["sequence_output"],
            "pooled_output": outputs["pooled_output"],
        }


# ----------------------------------------------------------------------------------------------
# Fine-tuning: the original's "one output layer": output_weights / output_bias on the pooled output
# (run_classifier), on every position (NER) or on every position with two outputs (run_squad).

CLASSIFIER_DROPOUT = 0.1


class OutputLayer(NamedLayer):
    """"output_weights" [num_outputs, hidden] (truncated normal, stddev 0.02 as the original fine-tuning
    scripts) and "output_bias" [num_outputs], after dropout when training; float32 logits."""

    def __init__(self, num_outputs, hidden_size, dropout=CLASSIFIER_DROPOUT, **kwargs):
        super().__init__(**kwargs)
        self.num_outputs = num_outputs
        self.hidden_size = hidden_size
        self.dropout = dropout

    def build(self, input_shape=None):
        self.output_weights = self.add_named_weight(
            "output_weights", (self.num_outputs, self.hidden_size), create_initializer(0.02))
        self.output_bias = self.add_named_weight("output_bias", (self.num_outputs,), "zeros", autocast=False)
        self.built = True

    def call(self, hidden, training=False):
        """[..., hidden] -> float32 logits [..., num_outputs]."""
        hidden = _dropout(hidden, self.dropout, training)
        shape = tf.shape(hidden)
        flat = tf.reshape(tf.cast(hidden, self.compute_dtype), [-1, self.hidden_size])
        logits = tf.matmul(flat, tf.cast(self.output_weights, self.compute_dtype), transpose_b=True)
        logits = tf.nn.bias_add(tf.cast(logits, tf.float32), self.output_bias)
        return tf.reshape(logits, tf.concat([shape[:-1], [self.num_outputs]], axis=0))


class ClassifierModel(keras.Model):
    """BertEncoder + the original output layer: on the pooled output, call(features) -> float32 logits
    [batch, num_labels]; with per_token, on every position of the sequence output -> [batch, seq, num_labels].
    The layer's variables are named `head_scope` + "output_weights" / "output_bias"."""

    def __init__(self, bert_config, num_labels, per_token=False, head_scope="", dropout=CLASSIFIER_DROPOUT,
                 name="classifier", **kwargs):
        super().__init__(name=name, **kwargs)
        self.bert_config = bert_config
        self.num_labels = num_labels
        self.per_token = per_token
        self.head_scope = head_scope
        self.bert = BertEncoder(bert_config, name="bert")
        self.head = OutputLayer(num_labels, bert_config.hidden_size, dropout, name="output")
        self.head.build()
        tag_original_names(self.variables_by_name())

    def variables_by_name(self):
        out = self.bert.variables_by_name()
        for name, variable in self.head.variables_by_name().items():
            out[self.head_scope + name] = variable
        return out

    @property
    def _default_save_signature(self):
        # Keras would trace a float-input signature; serving.py defines the serving functions.
        return None

    def call(self, features, training=False):
        outputs = self.bert(features["input_ids"], features["input_mask"], features["segment_ids"],
                            training=training)
        return self.head(outputs["sequence_output" if self.per_token else "pooled_output"], training=training)


class SquadModel(ClassifierModel):
    """BertEncoder + the original SQuAD layer "cls/squad/output_weights" [2, hidden] / "output_bias" [2] on every
    position, no dropout: call(features) -> float32 (start_logits, end_logits), each [batch, seq]."""

    def __init__(self, bert_config, name="squad", **kwargs):
        super().__init__(bert_config, 2, per_token=True, head_scope="cls/squad/", dropout=0.0, name=name,
                         **kwargs)

    def call(self, features, training=False):
        start_logits, end_logits = tf.unstack(super().call(features, training=training), num=2, axis=-1)
        return start_logits, end_logits


# ----------------------------------------------------------------------------------------------
# The original release's API: BertModel, the checkpoint assignment map and the TF1-style functions, thin entry
# points over the layers above. Their variables live in a namespace of full original names, as they lived in
# TF1's graph: the same name under the same tf.compat.v1.variable_scope is the same variable, created once
# (eagerly, or on a tf.function's first trace) and found by name afterwards.


class _Namespace:
    """{full original name: tf.Variable}, in creation order, and the layers built over them per scope."""

    def __init__(self):
        self.variables = collections.OrderedDict()
        self.layers = {}
        self.owners = []  # weak references to objects whose variables_by_name() save_checkpoint also writes
        self.generation = 0  # moved by note_assigned(): BertModel's eager outputs are computed again after it

    def variable(self, name, shape, create):
        """The variable `name`: made by create() the first time (outside any trace, under no name scope), then
        the same one; another shape is the original's ValueError."""
        variable = self.variables.get(name)
        if variable is None:
            with tf.init_scope(), tf.compat.v1.name_scope(None):
                variable = create()
            self.variables[name] = variable
        elif shape is not None and [int(d) for d in variable.shape] != [int(d) for d in shape]:
            raise ValueError(f"Trying to share variable {name}, but specified shape {list(shape)} and found "
                             f"shape {[int(d) for d in variable.shape]} (modeling.reset_variables() forgets it)")
        return variable


_NAMESPACE = _Namespace()


def _join(scope, name):
    return f"{scope}/{name}" if scope and name else scope or name


def _scoped(name):
    """`name` under the current tf.compat.v1.variable_scope."""
    return _join(tf.compat.v1.get_variable_scope().name, name)


def _scope_name(scope, default):
    """A model's scope as tf.variable_scope(scope, default_name=default) names it (without "_1" suffixes)."""
    if isinstance(scope, tf.compat.v1.VariableScope):
        return scope.name
    return _scoped(scope or default)


@contextlib.contextmanager
def _namespace_variables(root, scope, created):
    """Within: the weights that NamedLayer `root` and its named children add are the namespace's variables
    `scope/<original name>` (made once); each is appended to `created` as (full name, variable)."""
    scopes = {}

    def walk(layer, path):
        scopes[id(layer)] = path
        for prefix, child in layer._named_children:
            walk(child, _join(path, prefix))

    walk(root, scope)

    def creator(next_creator, **kwargs):
        adding = getattr(_ADDING, "weight", None)
        if adding is None or id(adding[0]) not in scopes:
            return next_creator(**kwargs)
        layer, name, shape = adding
        full = _join(scopes[id(layer)], name)
        variable = _NAMESPACE.variable(full, shape, lambda: next_creator(**dict(kwargs, name=full)))
        created.append((full, variable))
        return variable

    with tf.variable_creator_scope(creator):
        yield


def namespace_layer(scope, key, make, input_shape):
    """The NamedLayer make() of the namespace at `scope` (one per scope and key), built with `input_shape`
    the first time, its weights the namespace's variables under `scope`: how the original's functions (here and
    run_pretraining's heads) make a layer once per variable scope."""
    layer = _NAMESPACE.layers.get((scope, key))
    if layer is None:
        layer = make()
        with _namespace_variables(layer, scope, []):
            layer.build(input_shape)
        _NAMESPACE.layers[(scope, key)] = layer
    return layer


def _last(scope):
    return scope.rsplit("/", 1)[-1]


def get_variable(name, shape=None, dtype=tf.float32, initializer=None, trainable=True):
    """TensorFlow 2's stand-in for the original's tf.get_variable(name, shape, initializer=...): the variable
    `name` under the current tf.compat.v1.variable_scope, created once (eagerly, or on a tf.function's first
    trace) and the same variable on every later call, named as TF1 named it (`output_weights:0`).
    initializer: a callable(shape, dtype=...) (a tf.compat.v1 or Keras initializer); default Glorot uniform for
    floats and zeros otherwise, as tf.get_variable."""
    dtype = tf.as_dtype(dtype)
    if initializer is None:
        initializer = keras.initializers.GlorotUniform() if dtype.is_floating else keras.initializers.Zeros()
    full = _scoped(name)
    return _NAMESPACE.variable(full, shape, lambda: tf.Variable(
        lambda: initializer(list(shape), dtype=dtype), name=full, dtype=dtype, trainable=trainable))


def trainable_variables(scope=None):
    """TensorFlow 2's stand-in for the original's tf.trainable_variables(scope): the trainable variables made
    through this module (BertModel, the functions below, get_variable), in creation order; `scope` keeps those
    whose name matches it from the start (re.match), as TF1's."""
    return [v for name, v in _NAMESPACE.variables.items() if v.trainable and (scope is None or re.match(scope, name))]


def reset_variables():
    """TensorFlow 2's stand-in for tf.reset_default_graph() for this module's variables: forgets them, so that
    the next BertModel (or function) makes new ones."""
    _NAMESPACE.variables.clear()
    _NAMESPACE.layers.clear()
    del _NAMESPACE.owners[:]
    note_assigned()


def note_assigned():
    """Says that variables were assigned eagerly (a checkpoint loaded, an optimizer's update): a BertModel's
    get_*() read eagerly after it compute the forward pass again, from the new values."""
    _NAMESPACE.generation += 1


def _variables_state():
    """What an eager BertModel's cached outputs depend on: note_assigned()'s count and the global step's value
    (a create_optimizer step run inside a tf.function moves it)."""
    step = _NAMESPACE.variables.get("global_step")
    return _NAMESPACE.generation, (None if step is None else int(step.numpy()))


def variable_name(variable):
    """A variable's name in checkpoints, for weight-decay patterns and slots: its `original_name` (the project's
    layers give their Keras variables one), else a tf.Variable's name without ":0", else a Keras variable's
    path."""
    name = getattr(variable, "original_name", None)
    if name:
        return name
    if isinstance(variable, keras.Variable):
        return variable.path
    return re.sub(":\\d+$", "", variable.name)


def track_saveable(owner):
    """save_checkpoint also writes owner.variables_by_name() ({checkpoint name: variable}: an optimizer's slots,
    the variables a create_optimizer step trained) while `owner` lives, until reset_variables()."""
    _NAMESPACE.owners[:] = [ref for ref in _NAMESPACE.owners if ref() is not None] + [weakref.ref(owner)]


def _saveable_sources():
    """(owner description, {name: variable}) of the namespace and of every owner still alive."""
    sources = [("modeling", _NAMESPACE.variables)]
    for ref in _NAMESPACE.owners:
        owner = ref()
        if owner is not None:
            sources.append((getattr(owner, "name", None) or type(owner).__name__, owner.variables_by_name()))
    return sources


def _merge_saveable(sources):
    """{name: variable} of `sources`, each variable once; the names two different variables would both be
    written under -> [(name, owner descriptions)]."""
    merged, owner_of, clashes = collections.OrderedDict(), {}, []
    for owner, by_name in sources:
        for name, variable in by_name.items():
            if name not in merged:
                merged[name], owner_of[name] = variable, owner
            elif merged[name] is not variable:
                clashes.append((name, (owner_of[name], owner)))
    return merged, clashes


def save_checkpoint(save_path, var_list=None, global_step=None):
    """TensorFlow 2's stand-in for tf.compat.v1.train.Saver(var_list).save(sess, save_path, global_step): writes
    the variables under their checkpoint names (the format the original's Saver wrote, which
    init_from_checkpoint and the scripts' --init_checkpoint read) to `save_path` (`save_path-STEP` with
    global_step, an int or a variable); returns that prefix.

    var_list: {checkpoint name: variable}, or variables (named as get_assignment_map_from_checkpoint names
    them); default every variable of this module (BertModel, get_variable, the global step), the slots of every
    optimization.AdamWeightDecayOptimizer and the other variables a create_optimizer step trained. Two
    different variables under one name (the slots of two optimizers of the same variable: a TF1 graph could not
    hold both) are an error naming it: nothing is written."""
    if var_list is None:
        variables, clashes = _merge_saveable(_saveable_sources())
        if clashes:
            gc.collect()  # owners dropped but not yet collected save nothing
            variables, clashes = _merge_saveable(_saveable_sources())
        if clashes:
            name, owners = clashes[0]
            raise ValueError(
                f"save_checkpoint: two different variables would be saved as {name} (from {owners[0]} and "
                f"{owners[1]}; {len(clashes)} name(s) in all): pass var_list={{name: variable}} to choose, e.g. "
                f"optimizer.variables_by_name() of one optimizer, or call modeling.reset_variables() between "
                f"unrelated models")
    elif isinstance(var_list, dict):
        variables = collections.OrderedDict(var_list)
    else:
        variables = collections.OrderedDict()
        for variable in var_list:
            name = variable_name(variable)
            if name in variables and variables[name] is not variable:
                raise ValueError(f"save_checkpoint: two variables of var_list are named {name}")
            variables[name] = variable
    if global_step is not None:
        save_path = f"{save_path}-{int(global_step)}"
    return checkpoints.save_checkpoint(save_path, variables)


class _NamespaceEncoder(BertEncoder):
    """BertEncoder whose variables are the namespace's under `scope` (BertModel's encoder)."""

    def __init__(self, config, scope, use_one_hot_embeddings=False):
        self.namespace_scope = scope
        super().__init__(config, name=_last(scope))
        self.embeddings.use_one_hot_embeddings = bool(use_one_hot_embeddings)

    def build_all(self):
        if self.built:
            return
        created = []
        with _namespace_variables(self, self.namespace_scope, created):
            super().build_all()
        self.namespace_variables = collections.OrderedDict(created)


class BertModel:
    """BERT ("Bidirectional Encoder Representations from Transformers"): the original's class, over BertEncoder.

    Example usage (the original's, in TensorFlow 2; eagerly or inside a tf.function):

    ```python
    input_ids = tf.constant([[31, 51, 99], [15, 5, 0]])
    input_mask = tf.constant([[1, 1, 1], [1, 1, 0]])
    token_type_ids = tf.constant([[0, 0, 1], [0, 2, 0]])
    config = modeling.BertConfig(vocab_size=32000, hidden_size=512,
      num_hidden_layers=8, num_attention_heads=8, intermediate_size=1024)
    model = modeling.BertModel(config=config, is_training=True,
      input_ids=input_ids, input_mask=input_mask, token_type_ids=token_type_ids)
    label_embeddings = modeling.get_variable("label_embeddings", [512, 2])
    pooled_output = model.get_pooled_output()
    logits = tf.matmul(pooled_output, label_embeddings)
    ```

    Variables: `model.trainable_variables` (TensorFlow 2's stand-in for tf.trainable_variables(), this model's;
    modeling.trainable_variables() adds those of get_variable and the functions) are tf.Variables named as the
    original's (`bert/encoder/layer_0/attention/self/query/kernel:0`), in its order. They belong to the
    module's namespace (see get_variable): a second BertModel with the same scope (each batch's, or each trace
    of a tf.function) uses the same variables. Load a checkpoint of the original into them with

        assignment_map, _ = modeling.get_assignment_map_from_checkpoint(model.trainable_variables, init_checkpoint)
        modeling.init_from_checkpoint(init_checkpoint, assignment_map)

    at any time after construction: the get_*() outputs of one model come from one forward pass, computed when
    the first of them is called (eagerly, from the variables' values then, and again when one is read after a
    checkpoint was loaded, an optimizer updated the variables or the global step moved; inside a tf.function,
    reading the variables when the function runs), so one model's outputs share one draw of dropout masks; a
    model built eagerly and read inside a tf.function (or a branch of one) computes its pass again there.
    is_training=False sets both dropout
    probabilities to 0, as the original. use_one_hot_embeddings looks the word embeddings up with a one-hot
    matmul (the same values; a dense gradient, as the original on TPU). scope: as the original's variable
    scope (default "bert", under the current tf.compat.v1.variable_scope).
    """

    def __init__(self, config, is_training, input_ids, input_mask=None, token_type_ids=None,
                 use_one_hot_embeddings=False, scope=None):
        config = copy.deepcopy(config)
        if not is_training:
            config.hidden_dropout_prob = 0.0
            config.attention_probs_dropout_prob = 0.0
        input_ids = tf.convert_to_tensor(input_ids)
        batch_size, seq_length = get_shape_list(input_ids, expected_rank=2)
        if input_mask is None:
            input_mask = tf.ones(shape=[batch_size, seq_length], dtype=tf.int32)
        if token_type_ids is None:
            token_type_ids = tf.zeros(shape=[batch_size, seq_length], dtype=tf.int32)
        self.scope = _scope_name(scope, "bert")
        key = ("BertModel", json.dumps(config.to_dict(), sort_keys=True, default=repr), bool(use_one_hot_embeddings))
        self._encoder = _NAMESPACE.layers.get((self.scope, key))
        if self._encoder is None:
            self._encoder = _NamespaceEncoder(config, self.scope, use_one_hot_embeddings)
            _NAMESPACE.layers[(self.scope, key)] = self._encoder
        self._inputs = (input_ids, input_mask, token_type_ids)
        self._training = bool(is_training)
        self._dropout_seed = None
        self._outputs = None  # ((graph, or the variables' state eagerly), the forward pass's outputs)
        if tf.executing_eagerly() and self._training and (
                config.hidden_dropout_prob or config.attention_probs_dropout_prob):
            self._dropout_seed = tf.random.uniform([2], maxval=tf.int64.max, dtype=tf.int64)

    def _forward(self):
        with contextlib.ExitStack() as stack:
            if self._dropout_seed is not None:
                stack.enter_context(dropout_seed(self._dropout_seed))
            return self._encoder(*self._inputs, training=self._training)

    def _output(self, key):
        """An output of the model's one forward pass: in a graph, computed when first read there; eagerly,
        computed when first read and again after the variables were assigned (note_assigned: a checkpoint
        loaded, an optimizer's update, the global step moved), as TF1's tensors read the values of the moment."""
        key_now = (_variables_state(),) if tf.executing_eagerly() else (tf.compat.v1.get_default_graph(),)
        if self._outputs is None or self._outputs[0] != key_now:
            self._outputs = (key_now, self._forward())
        return self._outputs[1][key]

    @property
    def trainable_variables(self):
        """This model's trainable tf.Variables, named and ordered as the original's."""
        return [v for v in self._encoder.namespace_variables.values() if v.trainable]

    @property
    def variables(self):
        return list(self._encoder.namespace_variables.values())

    def variables_by_name(self):
        """{original name (no ":0"): variable}, as the project's models."""
        return collections.OrderedDict(self._encoder.namespace_variables)

    def get_pooled_output(self):
        """[batch_size, hidden_size]: the pooler's tanh layer on the first token's final hidden state."""
        return self._output("pooled_output")

    def get_sequence_output(self):
        """[batch_size, seq_length, hidden_size]: the final hidden layer of the encoder."""
        return self._output("sequence_output")

    def get_all_encoder_layers(self):
        """The output of every encoder layer, each [batch_size, seq_length, hidden_size]."""
        return self._output("all_encoder_layers")

    def get_embedding_output(self):
        """[batch_size, seq_length, hidden_size]: the sum of the word, position and token-type embeddings after
        LayerNorm (and dropout): the input of the encoder."""
        return self._output("embedding_output")

    def get_embedding_table(self):
        """The word-embedding variable [vocab_size, hidden_size]."""
        return self._encoder.namespace_variables[self.scope + "/embeddings/word_embeddings"]


def _tensor_name(tensor, name):
    if name is not None:
        return name
    try:
        return tensor.name
    except AttributeError:  # an eager tensor has no name
        return f"<tensor of shape {tensor.shape}>"


def get_shape_list(tensor, expected_rank=None, name=None):
    """The shape of `tensor` as a list, static dimensions as Python ints, dynamic ones as scalar tensors;
    with expected_rank (an int or a list of ints), assert_rank first."""
    if expected_rank is not None:
        assert_rank(tensor, expected_rank, name)
    shape = tensor.shape.as_list()
    dynamic = [index for index, dim in enumerate(shape) if dim is None]
    if not dynamic:
        return shape
    dyn_shape = tf.shape(tensor)
    for index in dynamic:
        shape[index] = dyn_shape[index]
    return shape


def assert_rank(tensor, expected_rank, name=None):
    """ValueError (the original's message) unless the rank of `tensor` is `expected_rank` (an int or a list)."""
    expected = {expected_rank} if isinstance(expected_rank, int) else set(expected_rank)
    actual_rank = tensor.shape.ndims
    if actual_rank not in expected:
        scope_name = tf.compat.v1.get_variable_scope().name
        raise ValueError(
            "For the tensor `%s` in scope `%s`, the actual rank `%d` (shape = %s) is not equal to the expected "
            "rank `%s`" % (_tensor_name(tensor, name), scope_name, actual_rank, str(tensor.shape),
                           str(expected_rank)))


def reshape_to_matrix(input_tensor):
    """A tensor of rank >= 2 as a matrix [-1, width]."""
    ndims = input_tensor.shape.ndims
    if ndims < 2:
        raise ValueError("Input tensor must have at least rank 2. Shape = %s" % (input_tensor.shape))
    if ndims == 2:
        return input_tensor
    return tf.reshape(input_tensor, [-1, input_tensor.shape[-1]])


def reshape_from_matrix(output_tensor, orig_shape_list):
    """A matrix back to the shape `orig_shape_list` (a get_shape_list) with its own width."""
    if len(orig_shape_list) == 2:
        return output_tensor
    width = get_shape_list(output_tensor)[-1]
    return tf.reshape(output_tensor, orig_shape_list[0:-1] + [width])


def create_attention_mask_from_input_mask(from_tensor, to_mask):
    """The float attention mask [batch_size, from_seq_length, to_seq_length] of `to_mask` [batch_size,
    to_seq_length] (1: attend, 0: do not), the same for every position of `from_tensor`."""
    from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
    batch_size, from_seq_length = from_shape[0], from_shape[1]
    to_seq_length = get_shape_list(to_mask, expected_rank=2)[1]
    to_mask = tf.cast(tf.reshape(to_mask, [batch_size, 1, to_seq_length]), tf.float32)
    return tf.ones(shape=[batch_size, from_seq_length, 1], dtype=tf.float32) * to_mask


def dropout(input_tensor, dropout_prob):
    """Dropout with the probability of dropping (not keeping) a value; None or 0 returns `input_tensor`."""
    if dropout_prob is None or dropout_prob == 0.0:
        return input_tensor
    return _dropout(input_tensor, dropout_prob, True)


def layer_norm(input_tensor, name=None):
    """LayerNorm over the last dimension (tf.contrib.layers.layer_norm, epsilon 1e-12) with the variables
    `<scope>/<name or "LayerNorm">/beta` and `/gamma`; the LayerNorm layer's arithmetic, in float32."""
    width = input_tensor.shape[-1]
    scope = _scoped(name or "LayerNorm")
    layer = namespace_layer(scope, ("LayerNorm", width), lambda: LayerNorm(name=_last(scope)), (None, width))
    return layer(input_tensor)


def layer_norm_and_dropout(input_tensor, dropout_prob, name=None):
    """layer_norm, then dropout."""
    return dropout(layer_norm(input_tensor, name), dropout_prob)


def dense(input_tensor, units, activation=None, initializer_range=0.02, name="dense"):
    """TensorFlow 2's stand-in for the original's tf.layers.dense(input_tensor, units, activation=...,
    kernel_initializer=create_initializer(initializer_range), name=name): the Dense layer with the variables
    `<scope>/<name>/kernel` and `/bias`, made once. activation: a function or a name (get_activation)."""
    width = input_tensor.shape[-1]
    scope = _scoped(name)
    layer = namespace_layer(scope, ("Dense", units, width, activation, initializer_range),
                             lambda: Dense(units, activation, initializer_range, name=_last(scope)), (None, width))
    return layer(input_tensor)


def embedding_lookup(input_ids, vocab_size, embedding_size=128, initializer_range=0.02,
                     word_embedding_name="word_embeddings", use_one_hot_embeddings=False):
    """The word embeddings of `input_ids` [batch_size, seq_length] (or [..., num_inputs]) from the variable
    `<scope>/<word_embedding_name>` [vocab_size, embedding_size] -> (output [batch_size, seq_length,
    num_inputs * embedding_size], embedding_table), gathered or, with use_one_hot_embeddings, by a one-hot
    matmul."""
    input_ids = tf.convert_to_tensor(input_ids)
    if input_ids.shape.ndims == 2:
        input_ids = tf.expand_dims(input_ids, axis=[-1])
    embedding_table = get_variable(word_embedding_name, [vocab_size, embedding_size],
                                   initializer=create_initializer(initializer_range))
    output = lookup_embeddings(embedding_table, input_ids, use_one_hot_embeddings)
    input_shape = get_shape_list(input_ids)
    output = tf.reshape(output, input_shape[0:-1] + [input_shape[-1] * embedding_size])
    return output, embedding_table


def embedding_postprocessor(input_tensor, use_token_type=False, token_type_ids=None, token_type_vocab_size=16,
                            token_type_embedding_name="token_type_embeddings", use_position_embeddings=True,
                            position_embedding_name="position_embeddings", initializer_range=0.02,
                            max_position_embeddings=512, dropout_prob=0.1):
    """`input_tensor` [batch_size, seq_length, width] plus the token-type embeddings of `token_type_ids` and
    the position embeddings (variables `<scope>/<token_type_embedding_name>` [token_type_vocab_size, width] and
    `<scope>/<position_embedding_name>` [max_position_embeddings, width]), then layer_norm_and_dropout: the
    embeddings of BertEncoder."""
    input_shape = get_shape_list(input_tensor, expected_rank=3)
    seq_length, width = input_shape[1], input_shape[2]
    token_type_table = position_table = None
    if use_token_type:
        if token_type_ids is None:
            raise ValueError("`token_type_ids` must be specified if`use_token_type` is True.")
        token_type_table = get_variable(token_type_embedding_name, [token_type_vocab_size, width],
                                        initializer=create_initializer(initializer_range))
    if use_position_embeddings:
        if isinstance(seq_length, int) and seq_length > max_position_embeddings:
            raise ValueError(f"sequence length {seq_length} exceeds max_position_embeddings "
                             f"{max_position_embeddings}")
        tf.debugging.assert_less_equal(seq_length, max_position_embeddings)
        position_table = get_variable(position_embedding_name, [max_position_embeddings, width],
                                      initializer=create_initializer(initializer_range))
    output = add_embeddings(input_tensor, token_type_table, token_type_ids, position_table)
    return layer_norm_and_dropout(output, dropout_prob)


def attention_layer(from_tensor, to_tensor, attention_mask=None, num_attention_heads=1, size_per_head=512,
                    query_act=None, key_act=None, value_act=None, attention_probs_dropout_prob=0.0,
                    initializer_range=0.02, do_return_2d_tensor=False, batch_size=None, from_seq_length=None,
                    to_seq_length=None):
    """Multi-headed attention from `from_tensor` [batch_size, from_seq_length, from_width] to `to_tensor`
    [batch_size, to_seq_length, to_width] (or both as matrices, with batch_size and the two lengths given), as
    the original: the dense layers `<scope>/query`, `/key`, `/value` (with query_act, key_act, value_act), then
    BertEncoder's attention arithmetic (attention_context) under `attention_mask` [batch_size,
    from_seq_length, to_seq_length] (1: attend) -> [batch_size, from_seq_length, num_attention_heads *
    size_per_head] (a matrix with do_return_2d_tensor)."""
    from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
    to_shape = get_shape_list(to_tensor, expected_rank=[2, 3])
    if len(from_shape) != len(to_shape):
        raise ValueError("The rank of `from_tensor` must match the rank of `to_tensor`.")
    if len(from_shape) == 3:
        batch_size, from_seq_length, to_seq_length = from_shape[0], from_shape[1], to_shape[1]
    elif batch_size is None or from_seq_length is None or to_seq_length is None:
        raise ValueError("When passing in rank 2 tensors to attention_layer, the values for `batch_size`, "
                         "`from_seq_length`, and `to_seq_length` must all be specified.")
    width = num_attention_heads * size_per_head
    query = dense(reshape_to_matrix(from_tensor), width, query_act, initializer_range, name="query")
    key = dense(reshape_to_matrix(to_tensor), width, key_act, initializer_range, name="key")
    value = dense(reshape_to_matrix(to_tensor), width, value_act, initializer_range, name="value")

    def heads(t, seq_length):
        t = tf.reshape(t, [batch_size, seq_length, num_attention_heads, size_per_head])
        return tf.transpose(t, [0, 2, 1, 3])

    adder = None
    if attention_mask is not None:
        adder = (1.0 - tf.cast(tf.expand_dims(attention_mask, axis=[1]), tf.float32)) * ATTENTION_MASK_ADDER
    context = attention_context(heads(query, from_seq_length), heads(key, to_seq_length),
                                heads(value, to_seq_length), adder, attention_probs_dropout_prob, True)
    context = tf.transpose(context, [0, 2, 1, 3])
    if do_return_2d_tensor:
        return tf.reshape(context, [batch_size * from_seq_length, width])
    return tf.reshape(context, [batch_size, from_seq_length, width])


def transformer_model(input_tensor, attention_mask=None, hidden_size=768, num_hidden_layers=12,
                      num_attention_heads=12, intermediate_size=3072, intermediate_act_fn=gelu,
                      hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, initializer_range=0.02,
                      do_return_all_layers=False):
    """The Transformer encoder of BertEncoder on `input_tensor` [batch_size, seq_length, hidden_size] under
    `attention_mask` [batch_size, seq_length, seq_length] (1: attend), its layers' variables under
    `<scope>/layer_<i>/` as the original -> the final layer's output, or every layer's with
    do_return_all_layers (each [batch_size, seq_length, hidden_size])."""
    check_attention_heads(hidden_size, num_attention_heads)
    input_width = get_shape_list(input_tensor, expected_rank=3)[2]
    if input_width != hidden_size:
        raise ValueError("The width of the input tensor (%d) != hidden size (%d)" % (input_width, hidden_size))
    config = BertConfig(None, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
                        intermediate_act_fn, hidden_dropout_prob, attention_probs_dropout_prob,
                        initializer_range=initializer_range)
    adder = 0.0
    if attention_mask is not None:
        adder = (1.0 - tf.cast(tf.expand_dims(attention_mask, axis=[1]), tf.float32)) * ATTENTION_MASK_ADDER
    key = ("TransformerLayer", json.dumps(config.to_dict(), sort_keys=True, default=repr))
    outputs = []
    hidden = input_tensor
    for i in range(num_hidden_layers):
        scope = _scoped(f"layer_{i}")
        layer = namespace_layer(scope, key, lambda: TransformerLayer(config, name=_last(scope)),
                                 (None, None, hidden_size))
        hidden = layer(hidden, adder, training=True)
        outputs.append(hidden)
    return outputs if do_return_all_layers else outputs[-1]


def get_assignment_map_from_checkpoint(tvars, init_checkpoint):
    """The original's: the variables of `tvars` whose name (without ":0"; a Keras variable of ours by its
    `original_name`) the checkpoint holds -> (assignment_map {name: name} in the checkpoint's order,
    initialized_variable_names {name: 1, name + ":0": 1})."""
    name_to_variable = collections.OrderedDict()
    for var in tvars:
        name = getattr(var, "original_name", None) or var.name
        m = re.match("^(.*):\\d+$", name)
        if m is not None:
            name = m.group(1)
        name_to_variable[name] = var
    assignment_map = collections.OrderedDict()
    initialized_variable_names = {}
    for name, _ in tf.train.list_variables(init_checkpoint):
        if name not in name_to_variable:
            continue
        assignment_map[name] = name
        initialized_variable_names[name] = 1
        initialized_variable_names[name + ":0"] = 1
    return assignment_map, initialized_variable_names


def init_from_checkpoint(ckpt_dir_or_file, assignment_map):
    """TensorFlow 2's stand-in for tf.train.init_from_checkpoint(ckpt_dir_or_file, assignment_map), which only
    runs in graph mode: assigns each checkpoint variable named by a key of `assignment_map` (a dict or (key,
    value) pairs) to the variable its value names (one of this module's variables, as
    get_assignment_map_from_checkpoint's map names them) or is (a variable). A name the checkpoint lacks, an
    unknown variable name or a shape that differs is an error; returns the checkpoint names loaded.

    The values are assigned once, when it is called, as TF1's set them once at initialisation: eagerly, or,
    inside a tf.function, while the function is traced (out of the graph, as tf.init_scope): each call of the
    Python function (each trace) loads the checkpoint once, and the traced graph's executions load nothing (a
    variable restored to 5 and incremented in the function reads 6, then 7)."""
    prefix = checkpoints.resolve_checkpoint(ckpt_dir_or_file)
    in_checkpoint = dict(tf.train.list_variables(prefix))
    pairs = assignment_map.items() if isinstance(assignment_map, dict) else assignment_map
    targets = collections.OrderedDict()
    for checkpoint_name, target in pairs:
        if checkpoint_name not in in_checkpoint:
            raise ValueError(f"Tensor {checkpoint_name} is not found in {prefix} checkpoint")
        if isinstance(target, str):
            name = re.sub(":\\d+$", "", target)
            if name not in _NAMESPACE.variables:
                raise ValueError(f"init_from_checkpoint: {target} is not a variable of modeling's (BertModel, "
                                 f"get_variable, the modeling functions): pass the variable itself")
            target = _NAMESPACE.variables[name]
        targets[checkpoint_name] = target
    with tf.init_scope():
        loaded, _, _ = checkpoints.init_from_checkpoint(targets, prefix, required=None)
    note_assigned()
    return loaded


def get_or_create_global_step():
    """TensorFlow 2's stand-in for tf.train.get_or_create_global_step(): the int64 variable `global_step` of
    this module's namespace (optimization.create_optimizer's)."""
    return _NAMESPACE.variable("global_step", [], lambda: tf.Variable(
        0, dtype=tf.int64, trainable=False, name="global_step"))


def output_layer(input_tensor, num_outputs, is_training, dropout_prob=CLASSIFIER_DROPOUT):
    """The fine-tuning scripts' output layer (OutputLayer) on `input_tensor` [..., width]: dropout when training,
    then the variables `output_weights` [num_outputs, width] and `output_bias` [num_outputs] under the current
    tf.compat.v1.variable_scope (the original run_classifier's at the top, run_squad's under "cls/squad"), made
    once -> float32 logits [..., num_outputs]."""
    width = input_tensor.shape[-1]
    scope = tf.compat.v1.get_variable_scope().name
    layer = namespace_layer(scope, ("OutputLayer", num_outputs, width, dropout_prob),
                             lambda: OutputLayer(num_outputs, width, dropout_prob, name="output_layer"), None)
    return layer(input_tensor, training=bool(is_training))


class ModeKeys:
    """tf.estimator.ModeKeys's values (TensorFlow 2.16+ has no tf.estimator), for the scripts' model_fn."""
    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"


# What the scripts' model_fn returns in TensorFlow 2: the fields of the original's TPUEstimatorSpec it fills.
EstimatorSpec = collections.namedtuple("EstimatorSpec", ["mode", "predictions", "loss", "train_op"])
