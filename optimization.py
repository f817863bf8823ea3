"""The original BERT optimizer (AdamWeightDecay), LAMB and the learning-rate schedule.

Public API (stable):
  LinearWarmupDecay(init_lr, num_train_steps, num_warmup_steps): callable(global_step) -> float32 lr,
    the original's polynomial (power 1) decay to 0 with linear warm-up.
  create_optimizer(init_lr, num_train_steps, num_warmup_steps, optimizer_type="adamw"|"lamb",
    weight_decay_rate=0.01, clip_norm=1.0, global_step=None, ...) -> AdamWeightDecay or Lamb.
  optimizer.build(variables_by_name): creates `global_step` (unless one was given) and the slots
    NAME/adam_m, NAME/adam_v for each trainable variable; call it under the distribution strategy's scope.
  optimizer.apply_gradients(grads_and_vars, row_squares=None): in replica context (plain code, tf.function, XLA,
    or inside strategy.run) all-reduces the gradients (mean over replicas), clips them to global norm
    `clip_norm`, applies the update (learning rate: see below), then increments global_step, as the original
    train_op. Returns the global norm before clipping (see "Global norm" below). With one device it can sit
    inside a jit_compile function; under a multi-device strategy jit-compile the gradient computation and call
    apply_gradients outside that function (XLA cannot compile the cross-replica update).
  optimizer.variables_by_name() -> {"global_step", "NAME/adam_m", "NAME/adam_v", ...} (original order);
    optimizer.global_step; optimizer.learning_rate(step) (the schedule); optimizer.current_learning_rate()
    (the rate the next apply_gradients uses).
  occurrence_squares(indexed_slices): a gathered table's share of the global norm, for row_squares.
Gradient accumulation (--gradient_accumulation_steps) is done by training.py's step before apply_gradients.

Global norm: as the original's tf.clip_by_global_norm over the gradients it is given. A gradient given as
tf.IndexedSlices (a gathered embedding table: the original's word embeddings on CPU/GPU, use_one_hot_embeddings
False) counts each of its rows, one per token occurrence, so a token that occurs twice adds two squared rows,
not the square of their sum; the update itself is dense (duplicate rows summed), as the original's.
`row_squares` ({variable name: sum of squares of its rows}) gives that count for gradients already made dense
(training.py accumulates micro-batches densely): the value of each replica's share of the step, as its
gradient is; over R replicas the norm takes their mean divided by R (the rows of one batch R times larger, each
1/R as large). A dense gradient (one-hot lookup, or a table also used densely, as the pre-training output layer)
counts its summed squares.

Learning-rate step: the original train_op groups the update with `global_step.assign(global_step + 1)` and
reads global_step for the schedule without ordering the two; the original's recorded step (reference
checkpoint, global_step 30 -> 31) used the rate of the incremented step, lr(31). `lr_step_offset=1` (default)
reproduces that; `lr_step_offset=0` uses the rate of the step before the increment.
"""
import collections
import re

import keras
import tensorflow as tf
from absl import logging

DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")


class LinearWarmupDecay:
    """Original learning rate: linear warm-up for num_warmup_steps, then linear decay to 0 at num_train_steps."""

    def __init__(self, init_lr, num_train_steps, num_warmup_steps=0, end_learning_rate=0.0):
        if num_train_steps is None or num_train_steps <= 0:
            raise ValueError(f"num_train_steps must be positive, got {num_train_steps}")
        if num_warmup_steps is None or num_warmup_steps < 0:
            raise ValueError(f"num_warmup_steps must be >= 0, got {num_warmup_steps}")
        if init_lr <= 0:
            raise ValueError(f"init_lr (learning_rate) must be positive, got {init_lr}")
        self.init_lr = float(init_lr)
        self.num_train_steps = int(num_train_steps)
        self.num_warmup_steps = int(num_warmup_steps)
        self.end_learning_rate = float(end_learning_rate)

    def __call__(self, global_step):
        step = tf.cast(global_step, tf.float32)
        decay_steps = tf.constant(float(self.num_train_steps), tf.float32)
        p = tf.minimum(step, decay_steps) / decay_steps
        lr = tf.constant(self.init_lr - self.end_learning_rate, tf.float32) * tf.pow(1.0 - p, 1.0) + \
            self.end_learning_rate
        if self.num_warmup_steps:
            steps_int = tf.cast(global_step, tf.int32)
            warmup_int = tf.constant(self.num_warmup_steps, tf.int32)
            warmup_lr = self.init_lr * (tf.cast(steps_int, tf.float32) / tf.cast(warmup_int, tf.float32))
            is_warmup = tf.cast(steps_int < warmup_int, tf.float32)
            lr = (1.0 - is_warmup) * lr + is_warmup * warmup_lr
        return lr


def _tf_variable(variable):
    """The tf.Variable (possibly distributed) behind a Keras variable."""
    if isinstance(variable, keras.Variable):
        return variable.value
    return variable


def _dense(grad):
    if isinstance(grad, tf.IndexedSlices):
        return tf.convert_to_tensor(grad)
    return grad


def occurrence_squares(grad):
    """The sum of squares of a gathered table's gradient (tf.IndexedSlices) counted row by row, one row per token
    occurrence: its share of the global norm (module docstring, "Global norm")."""
    return tf.reduce_sum(tf.square(grad.values))


class _WeightDecayOptimizer:
    """Shared machinery: slots, global step, all-reduce, clipping, distributed update."""

    def __init__(self, learning_rate, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                 exclude_from_weight_decay=DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY, clip_norm=1.0, global_step=None,
                 increment_global_step=True, lr_step_offset=1):
        self.learning_rate = learning_rate if callable(learning_rate) else (lambda step, lr=learning_rate: lr)
        self.weight_decay_rate = weight_decay_rate
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.exclude_from_weight_decay = list(exclude_from_weight_decay or [])
        self.clip_norm = clip_norm
        self.increment_global_step = increment_global_step
        self.lr_step_offset = int(lr_step_offset)
        self.global_step = global_step
        self._names = {}
        self._slots = collections.OrderedDict()
        self.built = False

    def _do_use_weight_decay(self, name):
        if not self.weight_decay_rate:
            return False
        return not any(re.search(pattern, name) is not None for pattern in self.exclude_from_weight_decay)

    def build(self, variables_by_name):
        """Creates global_step (if needed) and zero slots NAME/adam_m, NAME/adam_v for trainable variables."""
        if self.built:
            return
        if self.global_step is None:
            self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                           aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        for name, variable in variables_by_name.items():
            if not getattr(variable, "trainable", True):
                continue
            self._names[id(variable)] = name
            self._names[id(_tf_variable(variable))] = name
            shape = tuple(int(d) for d in variable.shape)
            with tf.init_scope():
                m = tf.Variable(tf.zeros(shape, tf.float32), trainable=False, name=name.replace("/", "__") + "__m")
                v = tf.Variable(tf.zeros(shape, tf.float32), trainable=False, name=name.replace("/", "__") + "__v")
            self._slots[name] = (variable, m, v)
        self.built = True

    def current_learning_rate(self):
        """The learning rate the next apply_gradients uses."""
        return self.learning_rate(self.global_step.read_value() + self.lr_step_offset)

    def variables_by_name(self):
        """{"global_step": ..., "NAME/adam_m": ..., "NAME/adam_v": ...}."""
        out = collections.OrderedDict()
        if self.global_step is not None:
            out["global_step"] = self.global_step
        for name, (_, m, v) in self._slots.items():
            out[name + "/adam_m"] = m
            out[name + "/adam_v"] = v
        return out

    def _name_of(self, variable):
        name = self._names.get(id(variable))
        if name is None:
            raise ValueError(f"Variable {getattr(variable, 'path', getattr(variable, 'name', variable))} was not "
                             f"passed to optimizer.build()")
        return name

    def apply_gradients(self, grads_and_vars, row_squares=None):
        """All-reduce (mean), clip to global norm, update, increment global_step; returns the global norm.

        row_squares: {variable name: sum of squares of its gradient's rows}, counted in the global norm in place
        of that variable's dense gradient (module docstring, "Global norm"); IndexedSlices gradients count their
        rows without it."""
        grads_and_vars = [(g, v) for g, v in grads_and_vars]
        if not self.built:
            raise ValueError("Call optimizer.build(variables_by_name) (under the strategy scope) first")
        missing = [self._name_of(v) for g, v in grads_and_vars if g is None]
        if missing:
            logging.warning("No gradient for %s", missing)
        grads_and_vars = [(g, v) for g, v in grads_and_vars if g is not None]
        names = [self._name_of(v) for _, v in grads_and_vars]
        squares = dict(row_squares or {})
        unknown = sorted(set(squares) - set(names))
        if unknown:
            raise ValueError(f"row_squares names no gradient of this step: {unknown}")
        grads = []
        for (grad, _), name in zip(grads_and_vars, names):
            if isinstance(grad, tf.IndexedSlices):
                if name not in squares:
                    squares[name] = occurrence_squares(grad)
                grad = tf.convert_to_tensor(grad)
            grads.append(grad)
        ctx = tf.distribute.get_replica_context()
        if ctx is None:
            raise ValueError("apply_gradients must run in replica context (inside strategy.run or plain code)")
        row_names = [name for name in names if name in squares]
        rows = [tf.cast(squares[name], tf.float32) for name in row_names]
        replicas = ctx.num_replicas_in_sync
        if replicas > 1:
            grads = ctx.all_reduce(tf.distribute.ReduceOp.MEAN, grads)
            if rows:
                rows = [total / float(replicas) for total in ctx.all_reduce(tf.distribute.ReduceOp.MEAN, rows)]
        if rows:
            # tf.linalg.global_norm's sum of half squares, with the rows' in place of their dense gradients'.
            row_of = dict(zip(row_names, rows))
            half_squares = [0.5 * row_of[name] if name in row_of else tf.nn.l2_loss(g) for g, name in zip(grads, names)]
            global_norm = tf.sqrt(tf.reduce_sum(tf.stack(half_squares)) * 2.0)
            if self.clip_norm:
                grads, _ = tf.clip_by_global_norm(grads, clip_norm=self.clip_norm, use_norm=global_norm)
        elif self.clip_norm:
            grads, global_norm = tf.clip_by_global_norm(grads, clip_norm=self.clip_norm)
        else:
            global_norm = tf.linalg.global_norm(grads)
        ctx.merge_call(self._apply_cross_replica, args=(grads, names))
        return global_norm

    def _apply_cross_replica(self, strategy, grads, names):
        lr = self.learning_rate(self.global_step.read_value() + self.lr_step_offset)
        updates = []
        for grad, name in zip(grads, names):
            variable, m, v = self._slots[name]
            updates.append(strategy.extended.update(
                _tf_variable(variable), self._update_one, args=(grad, m, v, lr, name), group=True))
        with tf.control_dependencies(updates):
            if self.increment_global_step:
                return self.global_step.assign_add(1)
            return tf.no_op()

    def _update_one(self, param, grad, m, v, lr, name):
        raise NotImplementedError


def _adam_weight_decay_math(param, grad, m, v, lr, beta_1, beta_2, epsilon, weight_decay_rate):
    """The original update arithmetic -> (next_param, next_m, next_v)."""
    next_m = tf.multiply(beta_1, m) + tf.multiply(1.0 - beta_1, grad)
    next_v = tf.multiply(beta_2, v) + tf.multiply(1.0 - beta_2, tf.square(grad))
    update = next_m / (tf.sqrt(next_v) + epsilon)
    if weight_decay_rate:
        update += weight_decay_rate * param
    return param - lr * update, next_m, next_v


def _assign_update(param, grad, m, v, lr, beta_1, beta_2, epsilon, weight_decay_rate):
    """Writes the update; returns a value that exists only once the three writes are done."""
    next_param, next_m, next_v = _adam_weight_decay_math(
        param.read_value(), grad, m.read_value(), v.read_value(), lr, beta_1, beta_2, epsilon, weight_decay_rate)
    with tf.control_dependencies([param.assign(next_param), m.assign(next_m), v.assign(next_v)]):
        return tf.constant(True)


# The same arithmetic fused by XLA into one kernel per variable (no intermediate tensors in memory).
_fused_assign_update = tf.function(_assign_update, jit_compile=True)


class AdamWeightDecay(_WeightDecayOptimizer):
    """The original AdamWeightDecayOptimizer: Adam without bias correction, decoupled weight decay.

    fused_update=True (default) runs each variable's elementwise update as one XLA-compiled kernel, the same
    operations in the same order (about half the time without XLA elsewhere); False, and any
    tf.distribute strategy (MirroredStrategy on one device too), runs them as separate TensorFlow ops.
    """

    def __init__(self, learning_rate, fused_update=True, **kwargs):
        super().__init__(learning_rate, **kwargs)
        self.fused_update = fused_update

    def _update_one(self, param, grad, m, v, lr, name):
        decay = self.weight_decay_rate if self._do_use_weight_decay(name) else 0.0
        # Under any tf.distribute strategy but the default one, even with one replica, the slots are mirrored: the
        # XLA-fused update then writes no slot (adam_m / adam_v stayed zero), so it runs without a strategy only.
        fused = self.fused_update and not tf.distribute.has_strategy()
        fn = _fused_assign_update if fused else _assign_update
        # global_step's increment waits on this: an input that ends inside a step then leaves it uncounted.
        return fn(param, _dense(grad), m, v, lr, self.beta_1, self.beta_2, self.epsilon, decay)


class Lamb(_WeightDecayOptimizer):
    """LAMB (You et al. 2019): bias-corrected Adam direction scaled by the trust ratio ||w|| / ||update||."""

    def __init__(self, learning_rate, exclude_from_layer_adaptation=None, **kwargs):
        super().__init__(learning_rate, **kwargs)
        self.exclude_from_layer_adaptation = list(
            exclude_from_layer_adaptation if exclude_from_layer_adaptation is not None
            else self.exclude_from_weight_decay)

    def _update_one(self, param, grad, m, v, lr, name):
        grad = _dense(grad)
        t = tf.cast(self.global_step.read_value() + 1, tf.float32)
        next_m = tf.multiply(self.beta_1, m) + tf.multiply(1.0 - self.beta_1, grad)
        next_v = tf.multiply(self.beta_2, v) + tf.multiply(1.0 - self.beta_2, tf.square(grad))
        m_hat = next_m / (1.0 - tf.pow(self.beta_1, t))
        v_hat = next_v / (1.0 - tf.pow(self.beta_2, t))
        update = m_hat / (tf.sqrt(v_hat) + self.epsilon)
        if self._do_use_weight_decay(name):
            update += self.weight_decay_rate * param
        ratio = 1.0
        if not any(re.search(p, name) is not None for p in self.exclude_from_layer_adaptation):
            w_norm = tf.norm(param)
            u_norm = tf.norm(update)
            ratio = tf.where(w_norm > 0.0, tf.where(u_norm > 0.0, w_norm / u_norm, 1.0), 1.0)
        next_param = param - ratio * lr * update
        return tf.group(param.assign(next_param), m.assign(next_m), v.assign(next_v))


def create_optimizer(init_lr, num_train_steps, num_warmup_steps, optimizer_type="adamw", weight_decay_rate=0.01,
                     clip_norm=1.0, global_step=None, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                     exclude_from_weight_decay=DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY, lr_step_offset=1):
    """The original optimizer setup (schedule + AdamWeightDecay, or LAMB); call .build() on it next."""
    schedule = LinearWarmupDecay(init_lr, num_train_steps, num_warmup_steps)
    kwargs = dict(weight_decay_rate=weight_decay_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                  exclude_from_weight_decay=exclude_from_weight_decay, clip_norm=clip_norm, global_step=global_step,
                  lr_step_offset=lr_step_offset)
    if optimizer_type == "adamw":
        return AdamWeightDecay(schedule, **kwargs)
    if optimizer_type == "lamb":
        return Lamb(schedule, **kwargs)
    raise ValueError(f"optimizer_type must be 'adamw' or 'lamb', got {optimizer_type!r}")
