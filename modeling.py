"""The original release's modeling.py API on TensorFlow 2, over the project's Keras BERT (encoder.py).

Public API (stable). The original's, with its parameters (code written for the original runs unchanged, eagerly
and under tf.function; the section "The original release's API" below says how):
  BertConfig(vocab_size, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
    hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, max_position_embeddings=512,
    type_vocab_size=16, initializer_range=0.02): encoder.py's (from_dict, from_json_file, to_dict,
    to_json_string, to_json_file; BertConfig.load and validate, the scripts' checks).
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
    save_checkpoint), output_layer (the fine-tuning scripts' output layer), ModeKeys and EstimatorSpec (what the
    scripts' model_fn takes and returns), namespace_layer (a layer of encoder.py made once per variable scope).
  set_elementwise_dtype(ELEMENTWISE_DTYPES) / elementwise_dtype(): the elementwise dtype of mixed precision for
    BertModel and the functions above (encoder.py's module docstring says what it does); default "float32".
  dropout_seed(seed): a context in which the dropout masks of BertModel and the functions above, traced inside,
    are drawn from `seed` (int [2]) and each mask's place in call order (encoder.DropoutStream); elsewhere
    dropout draws from TensorFlow's stateful random streams.
The project's Keras classes and helpers (BertEncoder, PretrainingModel, ClassifierModel, SquadModel, the layers,
losses, CONFIG_KEYS, gelu_exact, apply_layer_norm, gather_indexes, ...) are encoder.py's, importable from here
too; they take their elementwise dtype as a constructor argument and their dropout seed as a call argument, not
from the two settings above.
"""
import collections
import contextlib
import copy
import gc
import json
import re
import threading
import weakref

import keras
import tensorflow as tf

import checkpoints
import encoder
from encoder import (  # noqa: F401  (the Keras classes and helpers, importable from here as before)
    ACTIVATIONS,
    ATTENTION_MASK_ADDER,
    CLASSIFIER_DROPOUT,
    CONFIG_KEYS,
    ELEMENTWISE_DTYPES,
    LAYER_NORM_EPSILON,
    PRETRAINING_FEATURES,
    REQUIRED_KEYS,
    BertConfig,
    BertEncoder,
    ClassifierModel,
    Dense,
    Embeddings,
    LayerNorm,
    MaskedLMHead,
    NamedLayer,
    NextSentenceHead,
    OutputLayer,
    PretrainingModel,
    SquadModel,
    TransformerLayer,
    add_embeddings,
    apply_layer_norm,
    check_attention_heads,
    create_initializer,
    create_variable,
    gather_indexes,
    gelu,
    gelu_exact,
    get_activation,
    lookup_embeddings,
    masked_lm_loss,
    next_sentence_loss,
    tag_original_names,
)

_ELEMENTWISE = ["float32"]


def set_elementwise_dtype(elementwise):
    """Where BertModel and the original's functions run the elementwise work of mixed precision
    (ELEMENTWISE_DTYPES, encoder.py), for those made or traced from now on."""
    _ELEMENTWISE[0] = encoder.check_elementwise_dtype(elementwise)


def elementwise_dtype():
    """The elementwise dtype set for the original's API (ELEMENTWISE_DTYPES)."""
    return _ELEMENTWISE[0]


_DROPOUT = threading.local()  # .stream: the DropoutStream of the innermost dropout_seed context


@contextlib.contextmanager
def dropout_seed(seed):
    """Within: every dropout mask of BertModel and the original's functions traced draws from `seed` (int [2]
    tensor) folded with the mask's place in the order of their dropout calls, with stateless random ops
    (encoder.DropoutStream)."""
    previous = getattr(_DROPOUT, "stream", None)
    _DROPOUT.stream = encoder.DropoutStream(seed)
    try:
        yield
    finally:
        _DROPOUT.stream = previous


def _dropout_stream():
    """The stream of the innermost dropout_seed context, None outside any."""
    return getattr(_DROPOUT, "stream", None)


def _dropout(x, rate, training):
    return encoder.apply_dropout(x, rate, training, _dropout_stream())


def _attention_adder(attention_mask):
    """The additive attention mask [batch_size, 1, from_seq_length, to_seq_length] of the original's
    attention_mask [batch_size, from_seq_length, to_seq_length] (1: attend)."""
    return (1.0 - tf.cast(tf.expand_dims(attention_mask, axis=[1]), tf.float32)) * ATTENTION_MASK_ADDER


def attention_context(query, key, value, attention_adder, dropout_prob, training):
    """encoder.attention_context with the elementwise dtype set here and the dropout_seed context's stream."""
    return encoder.attention_context(query, key, value, attention_adder, dropout_prob, training,
                                     elementwise_dtype(), _dropout_stream())


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


def _scoped(name):
    """`name` under the current tf.compat.v1.variable_scope."""
    return encoder.join_names(tf.compat.v1.get_variable_scope().name, name)


def _scope_name(scope, default):
    """A model's scope as tf.variable_scope(scope, default_name=default) names it (without "_1" suffixes)."""
    if isinstance(scope, tf.compat.v1.VariableScope):
        return scope.name
    return _scoped(scope or default)


def _namespace_source(scope, created):
    """A weight source (encoder.NamedLayer.use_weight_source) that makes each weight `name` of a layer tree the
    namespace's variable `scope/name`: made once, by the layer's own make() under that name, then the same one;
    each is recorded in `created` {full name: variable}."""

    def source(name, shape, make):
        full = encoder.join_names(scope, name)

        def creator(next_creator, **kwargs):
            variable = _NAMESPACE.variable(full, shape, lambda: next_creator(**dict(kwargs, name=full)))
            created[full] = variable
            return variable

        with tf.variable_creator_scope(creator):
            return make()

    return source


def namespace_layer(scope, key, make, input_shape):
    """The NamedLayer make() of the namespace at `scope` (one per scope and key), built with `input_shape`
    the first time, its weights the namespace's variables under `scope`: how the original's functions (here and
    run_pretraining's heads) make a layer once per variable scope."""
    layer = _NAMESPACE.layers.get((scope, key))
    if layer is None:
        layer = make()
        layer.use_weight_source(_namespace_source(scope, {}))
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

    def __init__(self, config, scope, use_one_hot_embeddings=False, elementwise="float32"):
        self.namespace_scope = scope
        super().__init__(config, name=_last(scope), use_one_hot_embeddings=use_one_hot_embeddings,
                         elementwise_dtype=elementwise)

    def build_all(self):
        if self.built:
            return
        created = collections.OrderedDict()
        self.use_weight_source(_namespace_source(self.namespace_scope, created))
        super().build_all()
        self.namespace_variables = created


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
        key = ("BertModel", json.dumps(config.to_dict(), sort_keys=True, default=repr), bool(use_one_hot_embeddings),
               elementwise_dtype())
        self._encoder = _NAMESPACE.layers.get((self.scope, key))
        if self._encoder is None:
            self._encoder = _NamespaceEncoder(config, self.scope, use_one_hot_embeddings, elementwise_dtype())
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
            return self._encoder(*self._inputs, training=self._training, dropout_seed=_dropout_stream())

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
    elementwise = elementwise_dtype()
    layer = namespace_layer(scope, ("Dense", units, width, activation, initializer_range, elementwise),
                             lambda: Dense(units, activation, initializer_range, elementwise, name=_last(scope)),
                             (None, width))
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
        adder = _attention_adder(attention_mask)
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
        adder = _attention_adder(attention_mask)
    elementwise = elementwise_dtype()
    key = ("TransformerLayer", json.dumps(config.to_dict(), sort_keys=True, default=repr), elementwise)
    outputs = []
    hidden = input_tensor
    for i in range(num_hidden_layers):
        scope = _scoped(f"layer_{i}")
        layer = namespace_layer(scope, key,
                                lambda scope=scope: TransformerLayer(config, elementwise, name=_last(scope)),
                                (None, None, hidden_size))
        hidden = layer(hidden, adder, training=True, dropout_seed=_dropout_stream())
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
    return layer(input_tensor, training=bool(is_training), dropout_seed=_dropout_stream())


class ModeKeys:
    """tf.estimator.ModeKeys's values (TensorFlow 2.16+ has no tf.estimator), for the scripts' model_fn."""
    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"


# What the scripts' model_fn returns in TensorFlow 2: the fields of the original's TPUEstimatorSpec it fills.
EstimatorSpec = collections.namedtuple("EstimatorSpec", ["mode", "predictions", "loss", "train_op"])
