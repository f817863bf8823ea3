"""The BERT encoder in Keras 3, with the original release's maths and variable names: what every runner trains,
evaluates and exports.

  BertConfig(vocab_size, hidden_size=768, ...): the original's config (from_dict, from_json_file, to_dict,
    to_json_string, to_json_file; no checks at construction); BertConfig.load(json_file) and validate(source)
    check the values for the scripts (a cli.UserError naming the file and key). hidden_act: "gelu" (the
    original's tanh approximation), "gelu_exact" (erf), "relu", "tanh", "linear", or a function.
  BertEncoder(config, name="bert", use_one_hot_embeddings=False, elementwise_dtype="float32"):
    call(input_ids, input_mask=None, token_type_ids=None, training=False, dropout_seed=None) ->
    {"sequence_output", "pooled_output", "all_encoder_layers", "embedding_output"}; `embedding_table`;
    `variables_by_name()` -> {original name: variable}, e.g. "bert/pooler/dense/kernel".
  PretrainingModel(config): call(features, training=False, dropout_seed=None) -> {"mlm_log_probs", "mlm_loss",
    "mlm_example_loss", "nsp_log_probs", "nsp_loss", "nsp_example_loss", "total_loss", "sequence_output",
    "pooled_output"}; `bert`; `variables_by_name()` (bert/... and cls/...).
  ClassifierModel(config, num_labels, per_token=False): the fine-tuning output layer on the pooled output
    (run_classifier) or on every position (run_ner); SquadModel(config): the SQuAD start/end layer.
  The layers they are made of: Embeddings, TransformerLayer, Dense, LayerNorm, MaskedLMHead, NextSentenceHead,
    OutputLayer; the losses masked_lm_loss, next_sentence_loss; the arithmetic they share with the original's
    functions (modeling.py): gelu, gelu_exact, get_activation, create_initializer, apply_layer_norm,
    gather_indexes, lookup_embeddings, add_embeddings, attention_context.
  NamedLayer: a Keras layer whose `add_named_weight(original_name, shape, initializer)` registers a weight under
    its original name; `variables_by_name()` merges its own weights with those of the NamedLayer children added
    through `track_named(prefix, layer)`; `use_weight_source(source)` lets a caller supply the weights of a
    layer tree (modeling.py's namespace does; join_names spells a name below a scope). The models' Keras
    variables carry their original name as `original_name` (tag_original_names). create_variable(layer,
    original_name, shape, ...): one named weight with the original initializer on any Keras layer.

Dropout: a model called with `dropout_seed` (int [2] tensor) draws each mask from that seed folded with the
mask's place in the order of the call's dropouts (DropoutStream), with stateless random ops: a training step's
masks are a function of its seed alone (training.py derives it from --seed and the global step), so a run
resumed at any step draws what an uninterrupted one draws, also under XLA. Without it, dropout uses TensorFlow's
stateful random ops.

Mixed precision: layers follow the Keras dtype policy (e.g. "mixed_bfloat16"); variables stay float32, matmuls
run in the compute dtype, and softmax, LayerNorm, residual sums, log-softmax and losses run in float32. The
elementwise work around the matmuls follows the models' `elementwise_dtype` (ELEMENTWISE_DTYPES), chosen by the
device (device_setup.py): "float32" (a CPU's, the default: elementwise bfloat16 is slow there) runs the dropouts
and attention's scale in float32, and under bfloat16 the dense layers' bias and activation too; "compute" (a
GPU's or TPU's) runs them in the compute dtype.
"""
import collections
import copy
import functools
import json
import math

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from cli import MissingFileError, UserError

LAYER_NORM_EPSILON = 1e-12  # tf.contrib.layers.layer_norm, as used by the original
ATTENTION_MASK_ADDER = -10000.0

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
            raise UserError(f"{json_file}: required key(s) {', '.join(f'`{k}`' for k in missing)} missing")
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
        return f"BertConfig({', '.join(f'{key}={value!r}' for key, value in self.to_dict().items())})"


ELEMENTWISE_DTYPES = ("float32", "compute")


def check_elementwise_dtype(elementwise_dtype):
    """`elementwise_dtype` if it is one of ELEMENTWISE_DTYPES, else a ValueError."""
    if elementwise_dtype not in ELEMENTWISE_DTYPES:
        raise ValueError(f"elementwise dtype {elementwise_dtype!r}: expected one of {ELEMENTWISE_DTYPES}")
    return elementwise_dtype


def work_dtype(elementwise_dtype, compute_dtype):
    """The dtype of the elementwise work of a layer computing in compute_dtype."""
    return tf.float32 if elementwise_dtype == "float32" else compute_dtype


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
        raise ValueError(f"The hidden size ({int(hidden_size)}) is not a multiple of the number of attention heads "
                         f"({int(num_attention_heads)})")


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
    LayerNorm layer's arithmetic; the original's layer_norm(input_tensor, name) is modeling.py's)."""
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


def join_names(path, name):
    """An original name below a scope: "path/name", or the one of them that is not empty."""
    return f"{path}/{name}" if path and name else path or name


class NamedLayer(keras.layers.Layer):
    """A Keras layer whose weights carry original (slash-separated) names."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._named_weights = collections.OrderedDict()
        self._named_children = []
        self._weight_source = None  # (source, this layer's path below the layer given it): use_weight_source

    def add_named_weight(self, original_name, shape, initializer="zeros", trainable=True, dtype=None,
                         autocast=True):
        make = functools.partial(self.add_weight, name=_sanitize(original_name), shape=tuple(shape),
                                 initializer=initializer, trainable=trainable, dtype=dtype or self.variable_dtype,
                                 autocast=autocast)
        if self._weight_source is None:
            variable = make()
        else:
            source, path = self._weight_source
            variable = source(join_names(path, original_name), tuple(shape), make)
        self._named_weights[original_name] = variable
        return variable

    def use_weight_source(self, source, path=""):
        """Has the weights this layer and its named children (those tracked so far) add from now on made by
        `source(name, shape, make)`: `name` is the weight's original name below this layer (e.g.
        "encoder/layer_0/output/dense/kernel"), make() adds it as this layer would; source returns the
        variable (make()'s, called as the source sees fit). Call it before the layer is built."""
        self._weight_source = (source, path)
        for prefix, child in self._named_children:
            child.use_weight_source(source, join_names(path, prefix))

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
    """Dense layer with "kernel" [in, out] and "bias" [out], as tf.layers.dense; under bfloat16 with an
    activation, the bias and activation run in the elementwise dtype (ELEMENTWISE_DTYPES)."""

    def __init__(self, units, activation=None, initializer_range=0.02, elementwise_dtype="float32", **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.activation = get_activation(activation)
        self.initializer_range = initializer_range
        self.elementwise_dtype = check_elementwise_dtype(elementwise_dtype)

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
            y = tf.cast(y, work_dtype(self.elementwise_dtype, output_dtype))
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


class DropoutStream:
    """The dropout masks of one model call, drawn in turn: the n-th from `seed` (int [2] tensor) folded with n,
    with stateless random ops. A model call given a `dropout_seed` makes one and passes it to its layers, so
    each mask is a function of the seed and its place in the order of the call's dropouts."""

    def __init__(self, seed):
        self.seed = seed
        self.count = 0

    @classmethod
    def of(cls, dropout_seed):
        """The stream of a call's `dropout_seed`: None (stateful dropout), a seed, or a stream (a caller's)."""
        if dropout_seed is None or isinstance(dropout_seed, cls):
            return dropout_seed
        return cls(dropout_seed)

    def dropout(self, x, rate):
        seed = tf.random.experimental.stateless_fold_in(self.seed, self.count)
        self.count += 1
        return tf.nn.experimental.stateless_dropout(x, rate=rate, seed=seed)


def apply_dropout(x, rate, training, stream=None):
    """Dropout of `x` at `rate` when training (nothing drawn otherwise, or at rate 0): the next mask of `stream`
    (a DropoutStream), or TensorFlow's stateful dropout without one."""
    if not training or not rate:
        return x
    if stream is None:
        return tf.nn.dropout(x, rate=rate)
    return stream.dropout(x, rate)


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
    """Word + token-type + position embeddings, then LayerNorm and dropout; use_one_hot_embeddings: the word
    embeddings by a one-hot matmul (the original's option on TPU)."""

    def __init__(self, config, use_one_hot_embeddings=False, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.use_one_hot_embeddings = bool(use_one_hot_embeddings)
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

    def call(self, input_ids, token_type_ids, training=False, dropout_seed=None):
        words = lookup_embeddings(self.word_embeddings, input_ids, self.use_one_hot_embeddings)
        output = add_embeddings(words, self.token_type_embeddings, token_type_ids, self.position_embeddings)
        output = self.layer_norm(output)
        return apply_dropout(output, self.config.hidden_dropout_prob, training, DropoutStream.of(dropout_seed))


def attention_context(query, key, value, attention_adder, dropout_prob, training, elementwise_dtype="float32",
                      dropout_stream=None):
    """Multi-head attention's arithmetic: softmax(query key^T / sqrt(H) + adder) value, the matmuls in the dtype of
    the inputs (the compute dtype), the softmax in float32, the scale and the dropout (dropout_stream's next mask,
    apply_dropout) in the elementwise dtype (ELEMENTWISE_DTYPES). query [B, N, F, H], key and value
    [B, N, T, H], attention_adder broadcastable to [B, N, F, T] (None: no mask) -> [B, N, F, H]."""
    work = work_dtype(elementwise_dtype, value.dtype)
    scores = tf.cast(tf.matmul(query, key, transpose_b=True), work) * tf.cast(
        1.0 / math.sqrt(float(query.shape[-1])), work)
    scores = tf.cast(scores, tf.float32)
    if attention_adder is not None:
        scores = scores + tf.cast(attention_adder, tf.float32)
    probs = tf.nn.softmax(scores)
    probs = apply_dropout(tf.cast(probs, work), dropout_prob, training, dropout_stream)
    return tf.matmul(tf.cast(probs, value.dtype), value)


class TransformerLayer(NamedLayer):
    """One encoder block with the original sub-scope names (attention/self, attention/output, ...)."""

    def __init__(self, config, elementwise_dtype="float32", **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.elementwise_dtype = check_elementwise_dtype(elementwise_dtype)
        c = config
        r = c.initializer_range
        h = c.hidden_size
        self.query = self.track_named("attention/self/query", Dense(h, None, r, name="query"))
        self.key = self.track_named("attention/self/key", Dense(h, None, r, name="key"))
        self.value = self.track_named("attention/self/value", Dense(h, None, r, name="value"))
        self.attention_output = self.track_named("attention/output/dense", Dense(h, None, r, name="attn_out"))
        self.attention_norm = self.track_named("attention/output/LayerNorm", LayerNorm(name="attn_norm"))
        self.intermediate = self.track_named(
            "intermediate/dense", Dense(c.intermediate_size, c.hidden_act, r, elementwise_dtype, name="intermediate"))
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

    def call(self, hidden, attention_adder, training=False, dropout_seed=None):
        c = self.config
        stream = DropoutStream.of(dropout_seed)
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
        work = work_dtype(self.elementwise_dtype, compute_dtype)
        context = attention_context(q, k, v, attention_adder, c.attention_probs_dropout_prob, training,
                                    self.elementwise_dtype, stream)
        context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [-1, c.hidden_size])

        # Residual sums and LayerNorm in float32; the dropouts in the elementwise dtype.
        attention = apply_dropout(tf.cast(self.attention_output(context), work), c.hidden_dropout_prob, training,
                                  stream)
        attention = self.attention_norm(tf.cast(attention, tf.float32) + tf.cast(x, tf.float32))

        intermediate = self.intermediate(tf.cast(attention, compute_dtype))
        out = apply_dropout(tf.cast(self.output_dense(intermediate), work), c.hidden_dropout_prob, training, stream)
        out = self.output_norm(tf.cast(out, tf.float32) + attention)
        return tf.reshape(out, [batch_size, seq_length, c.hidden_size])


class BertEncoder(NamedLayer):
    """The BERT encoder with embeddings and pooler; variables named "bert/..." as the original. Its variables are
    made at construction, unless a subclass's build_all gives them a source first (use_weight_source)."""

    def __init__(self, config, name="bert", use_one_hot_embeddings=False, elementwise_dtype="float32", **kwargs):
        if not isinstance(config, BertConfig):
            raise TypeError(f"BertEncoder expects a BertConfig, got {type(config).__name__}")
        check_attention_heads(config.hidden_size, config.num_attention_heads)
        super().__init__(name=name, **kwargs)
        self.config = copy.deepcopy(config)
        self.elementwise_dtype = check_elementwise_dtype(elementwise_dtype)
        self.embeddings = self.track_named(
            "embeddings", Embeddings(self.config, use_one_hot_embeddings, name="embeddings"))
        self.encoder_layers = [
            self.track_named(f"encoder/layer_{i}",
                             TransformerLayer(self.config, elementwise_dtype, name=f"layer_{i}"))
            for i in range(self.config.num_hidden_layers)]
        self.pooler = self.track_named(
            "pooler/dense", Dense(self.config.hidden_size, "tanh", self.config.initializer_range, elementwise_dtype,
                                  name="pooler"))
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

    def call(self, input_ids, input_mask=None, token_type_ids=None, training=False, dropout_seed=None):
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

        stream = DropoutStream.of(dropout_seed)
        embedding_output = self.embeddings(input_ids, token_type_ids, training=training, dropout_seed=stream)
        # [batch, 1, 1, seq]; expand_dims and gather rather than strided slices with new or shrunk axes, which
        # LiteRT cannot convert at a dynamic sequence length (litert_export.py).
        mask = tf.expand_dims(tf.expand_dims(tf.cast(input_mask, tf.float32), 1), 1)
        adder = (1.0 - mask) * ATTENTION_MASK_ADDER

        hidden = embedding_output
        all_layers = []
        for layer in self.encoder_layers:
            hidden = layer(hidden, adder, training=training, dropout_seed=stream)
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

    def __init__(self, config, elementwise_dtype="float32", **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.transform = self.track_named(
            "transform/dense", Dense(config.hidden_size, config.hidden_act, config.initializer_range,
                                     elementwise_dtype, name="transform"))
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


# The features PretrainingModel reads: those of records.py's pre-training format.
PRETRAINING_FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
                        "masked_lm_weights", "next_sentence_labels")


class PretrainingModel(keras.Model):
    """BertEncoder + the original masked-LM and next-sentence heads and losses."""

    def __init__(self, config, name="pretraining_model", elementwise_dtype="float32", **kwargs):
        super().__init__(name=name, **kwargs)
        self.config = copy.deepcopy(config)
        self.bert = BertEncoder(self.config, name="bert", elementwise_dtype=elementwise_dtype)
        self.mlm_head = MaskedLMHead(self.config, elementwise_dtype, name="predictions")
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

    def call(self, features, training=False, dropout_seed=None):
        """The original's heads and losses (run_pretraining.PretrainingTask normalizes micro-batches)."""
        missing = [k for k in PRETRAINING_FEATURES if k not in features]
        if missing:
            raise ValueError(f"PretrainingModel: features are missing {missing}")
        outputs = self.bert(features["input_ids"], features["input_mask"], features["segment_ids"],
                            training=training, dropout_seed=dropout_seed)
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

    def call(self, hidden, training=False, dropout_seed=None):
        """[..., hidden] -> float32 logits [..., num_outputs]."""
        hidden = apply_dropout(hidden, self.dropout, training, DropoutStream.of(dropout_seed))
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
                 name="classifier", elementwise_dtype="float32", **kwargs):
        super().__init__(name=name, **kwargs)
        self.bert_config = bert_config
        self.num_labels = num_labels
        self.per_token = per_token
        self.head_scope = head_scope
        self.bert = BertEncoder(bert_config, name="bert", elementwise_dtype=elementwise_dtype)
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

    def call(self, features, training=False, dropout_seed=None):
        stream = DropoutStream.of(dropout_seed)
        outputs = self.bert(features["input_ids"], features["input_mask"], features["segment_ids"],
                            training=training, dropout_seed=stream)
        return self.head(outputs["sequence_output" if self.per_token else "pooled_output"], training=training,
                         dropout_seed=stream)


class SquadModel(ClassifierModel):
    """BertEncoder + the original SQuAD layer "cls/squad/output_weights" [2, hidden] / "output_bias" [2] on every
    position, no dropout: call(features) -> float32 (start_logits, end_logits), each [batch, seq]."""

    def __init__(self, bert_config, name="squad", elementwise_dtype="float32", **kwargs):
        super().__init__(bert_config, 2, per_token=True, head_scope="cls/squad/", dropout=0.0, name=name,
                         elementwise_dtype=elementwise_dtype, **kwargs)

    def call(self, features, training=False, dropout_seed=None):
        start_logits, end_logits = tf.unstack(super().call(features, training=training, dropout_seed=dropout_seed),
                                              num=2, axis=-1)
        return start_logits, end_logits

