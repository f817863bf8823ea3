"""BERT model in TensorFlow 2 / Keras 3 with the original release's maths and variable names.

Public API (stable):
  BertConfig(vocab_size, hidden_size=768, ...): from_dict, from_json_file (a file must give the REQUIRED_KEYS),
    to_dict, to_json_string, to_json_file. hidden_act: "gelu" (original tanh approximation), "gelu_exact" (erf),
    "relu", "tanh", "linear".
  BertEncoder(config, name="bert"): the Keras encoder; call(input_ids, input_mask=None, token_type_ids=None, training=False) ->
    {"sequence_output", "pooled_output", "all_encoder_layers", "embedding_output"}; `embedding_table`;
    `variables_by_name()` -> {original name: variable}, e.g. "bert/pooler/dense/kernel".
  PretrainingModel(config): call(features, training=False) ->
    {"mlm_log_probs", "mlm_loss", "mlm_example_loss", "nsp_log_probs", "nsp_loss", "nsp_example_loss",
    "total_loss", "sequence_output", "pooled_output"}; `bert`; `variables_by_name()` (bert/... and cls/...).
  ClassifierModel(config, num_labels, per_token=False): the fine-tuning output layer on the pooled output
    (run_classifier) or on every position (run_ner); SquadModel(config): the SQuAD start/end layer.
  NamedLayer: a keras Layer whose `add_named_weight(original_name, shape, initializer)` registers a weight
    under its original name; `variables_by_name()` merges its own weights with those of NamedLayer children
    added through `track_named(prefix, layer)`. Fine-tuning heads subclass it (or call `create_variable`).
  create_initializer(initializer_range): the original truncated-normal initializer.
  create_variable(layer, original_name, shape, initializer_range=0.02, initializer=None): one named weight
    with the original initializer on any Keras layer/model; returns the variable.
  get_activation(name), gelu(x), gelu_exact(x), layer_norm(x, gamma, beta), gather_indexes(seq, positions).
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
import json
import math
import threading

import keras
import numpy as np
import tensorflow as tf
from absl import logging

import records
from cli import MissingFileError, UserError

LAYER_NORM_EPSILON = 1e-12  # tf.contrib.layers.layer_norm, as used by the original
ATTENTION_MASK_ADDER = -10000.0

_CONFIG_DEFAULTS = collections.OrderedDict([
    ("vocab_size", None),
    ("hidden_size", 768),
    ("num_hidden_layers", 12),
    ("num_attention_heads", 12),
    ("intermediate_size", 3072),
    ("hidden_act", "gelu"),
    ("hidden_dropout_prob", 0.1),
    ("attention_probs_dropout_prob", 0.1),
    ("max_position_embeddings", 512),
    ("type_vocab_size", 16),
    ("initializer_range", 0.02),
])
CONFIG_KEYS = tuple(_CONFIG_DEFAULTS)  # every key of a bert_config.json, in the original's order

ACTIVATIONS = ("gelu", "gelu_exact", "relu", "tanh", "linear")
# Keys a bert_config.json must give: a default would build another model than the checkpoint's, silently
# (heads have no variable of their own; missing layers would start from random weights). A wrong default for
# the other sizes fails the checkpoint's shape check.
REQUIRED_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


class BertConfig:
    """Configuration of a BERT model, with the original keys and defaults (_CONFIG_DEFAULTS)."""

    def __init__(self, vocab_size, **kwargs):
        unknown = sorted(set(kwargs) - set(_CONFIG_DEFAULTS))
        if unknown:
            raise TypeError(f"BertConfig: unknown argument(s) {unknown}")
        for key, default in _CONFIG_DEFAULTS.items():
            setattr(self, key, vocab_size if key == "vocab_size" else kwargs.get(key, default))
        self.validate()

    def validate(self, source="BertConfig"):
        """Raises ValueError naming the field when a value is invalid."""
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

    @property
    def size_per_head(self):
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, json_object, source="BertConfig", required=("vocab_size",)):
        """Builds a config from a dict; keys in `required` must be present, unknown keys are ignored with a
        warning, the others default to the original's values."""
        if not isinstance(json_object, dict):
            raise UserError(f"{source}: expected a JSON object, got {type(json_object).__name__}")
        missing = [key for key in required if key not in json_object]
        if missing:
            raise UserError(f"{source}: required key(s) {', '.join('`%s`' % k for k in missing)} missing")
        for key in json_object:
            if key not in _CONFIG_DEFAULTS:
                logging.warning("%s: ignoring unknown key %r", source, key)
        defaulted = [key for key in _CONFIG_DEFAULTS if key not in json_object]
        if defaulted:
            logging.info("%s: using the original's defaults for %s", source, ", ".join(defaulted))
        values = {key: value for key, value in json_object.items() if key in _CONFIG_DEFAULTS}
        config = cls.__new__(cls)
        for key, default in _CONFIG_DEFAULTS.items():
            setattr(config, key, values.get(key, default))
        config.validate(source)
        return config

    @classmethod
    def from_json_file(cls, json_file):
        """Reads a bert_config.json; the REQUIRED_KEYS must be present."""
        if not tf.io.gfile.exists(json_file):
            raise MissingFileError(f"BERT config file not found: {json_file}")
        with tf.io.gfile.GFile(json_file, "r") as reader:
            text = reader.read()
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise UserError(f"BERT config file {json_file} is not valid JSON: {e}") from None
        return cls.from_dict(data, source=json_file, required=REQUIRED_KEYS)

    def to_dict(self):
        return collections.OrderedDict((key, copy.deepcopy(getattr(self, key))) for key in _CONFIG_DEFAULTS)

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


def gelu(x):
    """The original's GELU: tanh approximation."""
    cdf = 0.5 * (1.0 + tf.tanh(np.sqrt(2 / np.pi).astype(np.float32) * (x + 0.044715 * tf.pow(x, 3))))
    return x * cdf


def gelu_exact(x):
    """Exact GELU with erf (HF "gelu")."""
    return x * 0.5 * (1.0 + tf.math.erf(x / math.sqrt(2.0)))


def get_activation(name):
    """Maps an activation name to a function (None for "linear")."""
    if name is None or callable(name):
        return name
    act = name.lower()
    table = {"linear": None, "gelu": gelu, "gelu_exact": gelu_exact, "relu": tf.nn.relu, "tanh": tf.tanh}
    if act not in table:
        raise ValueError(f"Unsupported activation: {name!r} (expected one of {ACTIVATIONS})")
    return table[act]


def create_initializer(initializer_range=0.02):
    """The original truncated-normal initializer (cut at two standard deviations)."""
    return keras.initializers.TruncatedNormal(stddev=initializer_range)


def layer_norm(x, gamma, beta, epsilon=LAYER_NORM_EPSILON):
    """tf.contrib.layers.layer_norm over the last axis, computed in float32."""
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


class NamedLayer(keras.layers.Layer):
    """A Keras layer whose weights carry original (slash-separated) names."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._named_weights = collections.OrderedDict()
        self._named_children = []

    def add_named_weight(self, original_name, shape, initializer="zeros", trainable=True, dtype=None,
                         autocast=True):
        variable = self.add_weight(name=_sanitize(original_name), shape=tuple(shape), initializer=initializer,
                                   trainable=trainable, dtype=dtype or self.variable_dtype, autocast=autocast)
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
        return layer_norm(x, self.gamma, self.beta)


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


class Embeddings(NamedLayer):
    """Word + token-type + position embeddings, then LayerNorm and dropout."""

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
        seq_length = tf.shape(input_ids)[1]
        words = tf.gather(self.word_embeddings, input_ids)
        # One-hot matmul as the original: the same values as a gather, and a dense gradient, which the
        # original's global-norm clipping counts differently from gathered (IndexedSlices) rows.
        type_one_hot = tf.one_hot(token_type_ids, depth=self.config.type_vocab_size, dtype=tf.float32)
        types = tf.einsum("btv,vh->bth", type_one_hot, tf.convert_to_tensor(self.token_type_embeddings))
        positions = tf.slice(self.position_embeddings, [0, 0], [seq_length, -1])
        output = words + types
        output = output + tf.expand_dims(positions, 0)
        output = self.layer_norm(output)
        output = _dropout(output, self.config.hidden_dropout_prob, training)
        return output


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
        scores = tf.cast(tf.matmul(q, k, transpose_b=True), work) * tf.cast(1.0 / math.sqrt(float(d)), work)
        probs = tf.nn.softmax(tf.cast(scores, tf.float32) + tf.cast(attention_adder, tf.float32))
        probs = _dropout(tf.cast(probs, work), c.attention_probs_dropout_prob, training)
        context = tf.matmul(tf.cast(probs, compute_dtype), v)
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
        mask = tf.cast(input_mask, tf.float32)[:, tf.newaxis, tf.newaxis, :]
        adder = (1.0 - mask) * ATTENTION_MASK_ADDER

        hidden = embedding_output
        all_layers = []
        for layer in self.encoder_layers:
            hidden = layer(hidden, adder, training=training)
            all_layers.append(hidden)
        sequence_output = all_layers[-1]
        first_token = tf.cast(sequence_output[:, 0, :], self.compute_dtype)
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

    def call(self, hidden, embedding_table):
        x = self.transform(tf.cast(hidden, self.compute_dtype))
        x = self.transform_norm(x)
        logits = tf.matmul(tf.cast(x, self.compute_dtype), tf.cast(embedding_table, self.compute_dtype),
                           transpose_b=True)
        logits = tf.nn.bias_add(tf.cast(logits, tf.float32), self.output_bias)
        return tf.nn.log_softmax(logits, axis=-1)


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
        logits = super().call(features, training=training)
        return logits[:, :, 0], logits[:, :, 1]
