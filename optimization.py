"""The original BERT optimizer (AdamWeightDecay), LAMB and the learning-rate schedule, as Keras optimizers, and
the original release's optimization API.

Public API (stable):
  LinearWarmupDecay(init_lr, num_train_steps, num_warmup_steps): a Keras LearningRateSchedule, callable(global_step)
    -> float32 lr, the original's polynomial (power 1) decay to 0 with linear warm-up.
  make_optimizer(init_lr, num_train_steps, num_warmup_steps, optimizer_type="adamw"|"lamb", global_step=None,
    **settings) -> AdamWeightDecay or Lamb with that schedule (the scripts' optimizer; training.py builds it).
  WeightDecaySettings: the hyperparameters (weight_decay_rate=0.01, beta_1, beta_2, epsilon=1e-6,
    exclude_from_weight_decay, clip_norm=1.0, lr_step_offset=1, increment_global_step=True); AdamWeightDecay and
    Lamb take them as keywords.
  AdamWeightDecay(learning_rate, fused_update=True, global_step=None, name=None, **settings),
  Lamb(learning_rate, exclude_from_layer_adaptation=None, **settings): keras.optimizers.Optimizer subclasses.
    learning_rate: a float, a Keras LearningRateSchedule or a callable of the global step (LinearWarmupDecay).
    - As Keras optimizers: `model.compile(optimizer=optimization.make_optimizer(2e-5, steps, warmup))`, then
      `fit`: the original's update, clipping and schedule (variables named by their `original_name`, which the
      project's models give theirs, else by their name or Keras path, for the weight-decay exclusions).
    - In the project's loop: optimizer.build(variables_by_name) creates `global_step` (unless one was given) and
      the slots NAME/adam_m, NAME/adam_v for each trainable variable; call it under the distribution strategy's
      scope. optimizer.apply_gradients(grads_and_vars, row_squares=None, apply_if=None): in replica context
      (plain code, tf.function, XLA, or inside strategy.run) all-reduces the gradients (mean over replicas),
      clips them to global norm `clip_norm`, applies the update (learning rate: see below), then increments
      global_step, as the original train_op; where `apply_if` (a boolean, the same on every replica) is false,
      nothing changes. Returns the global norm before clipping (see "Global norm" below). Under the default
      strategy it can sit inside a jit_compile function; under a mirrored strategy (even on one device)
      jit-compile the gradient computation and call apply_gradients outside that function (its update is a
      merge_call, which a nested function cannot hold).
    optimizer.variables_by_name() -> {"global_step", "NAME/adam_m", "NAME/adam_v", ...} (original order);
    optimizer.global_step (also Keras's `iterations`); optimizer.schedule(step) (the learning rate at a step);
    optimizer.current_learning_rate() (the rate the next apply_gradients uses; Keras's `learning_rate`).
  occurrence_squares(indexed_slices): a gathered table's share of the global norm, for row_squares.
  The original's: AdamWeightDecayOptimizer(learning_rate, weight_decay_rate=0.0, beta_1=0.9, beta_2=0.999,
    epsilon=1e-6, exclude_from_weight_decay=None, name="AdamWeightDecayOptimizer") with
    apply_gradients(grads_and_vars, global_step=None, name=None); create_optimizer(loss, init_lr, num_train_steps,
    num_warmup_steps, use_tpu, var_list=None), which in TensorFlow 2 takes the loss as a function and returns the
    step function (see its docstring).
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
import dataclasses
import re
from typing import NamedTuple

import keras
import tensorflow as tf
from absl import logging

import modeling

DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")
LR_STEP_OFFSET = 1  # the original's train_op reads the rate of the incremented step (module docstring)


@keras.saving.register_keras_serializable(package="bert")
class LinearWarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
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

    def get_config(self):
        return {"init_lr": self.init_lr, "num_train_steps": self.num_train_steps,
                "num_warmup_steps": self.num_warmup_steps, "end_learning_rate": self.end_learning_rate}


@dataclasses.dataclass
class WeightDecaySettings:
    """The hyperparameters of AdamWeightDecay and Lamb, with the original create_optimizer's values."""
    weight_decay_rate: float = 0.01
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-6
    exclude_from_weight_decay: tuple = DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY  # regexes searched in variable names
    clip_norm: float = 1.0  # global-norm clipping; None or 0: none
    lr_step_offset: int = LR_STEP_OFFSET
    increment_global_step: bool = True

    def __post_init__(self):
        self.exclude_from_weight_decay = tuple(self.exclude_from_weight_decay or ())


class AdamHyper(NamedTuple):
    """One variable's constants of the AdamWeightDecay update (weight_decay_rate 0 where it is excluded)."""
    beta_1: float
    beta_2: float
    epsilon: float
    weight_decay_rate: float


variable_name = modeling.variable_name  # a variable's name for weight-decay patterns and slots


def _decays(name, weight_decay_rate, exclude_from_weight_decay):
    """Whether the variable `name` takes weight decay (the original's _do_use_weight_decay)."""
    if not weight_decay_rate:
        return False
    return not any(re.search(pattern, name) is not None for pattern in exclude_from_weight_decay or ())


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


class _Slots:
    """Per trainable variable its name and (variable, adam_m, adam_v), in build order: plain Python, so that
    neither Keras nor TensorFlow tracking rewraps it."""

    def __init__(self):
        self.names = {}
        self.by_name = collections.OrderedDict()


class _WeightDecayOptimizer(keras.optimizers.Optimizer):
    """Shared machinery: slots, global step, all-reduce, clipping, distributed update; a Keras optimizer."""

    def __init__(self, learning_rate, global_step=None, name=None, **settings):
        if isinstance(learning_rate, (int, float)) and not isinstance(learning_rate, bool):
            learning_rate = float(learning_rate)
        super().__init__(learning_rate=learning_rate, name=name)
        self.settings = WeightDecaySettings(**settings)
        self.global_step = global_step
        self._state = _Slots()
        self.built = False

    def _do_use_weight_decay(self, name):
        return _decays(name, self.settings.weight_decay_rate, self.settings.exclude_from_weight_decay)

    def build(self, variables):
        """Creates global_step (if needed) and zero slots NAME/adam_m, NAME/adam_v for the trainable variables:
        `variables` is {original name: variable} (the project's loop) or a list (Keras: variable_name names
        them)."""
        if self.built:
            return
        named = variables.items() if isinstance(variables, dict) else [(variable_name(v), v) for v in variables]
        if self.global_step is None:
            self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                           aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        for name, variable in named:
            if not getattr(variable, "trainable", True):
                continue
            self._state.names[id(variable)] = name
            self._state.names[id(_tf_variable(variable))] = name
            shape = tuple(int(d) for d in variable.shape)
            with tf.init_scope():
                m = tf.Variable(tf.zeros(shape, tf.float32), trainable=False, name=name.replace("/", "__") + "__m")
                v = tf.Variable(tf.zeros(shape, tf.float32), trainable=False, name=name.replace("/", "__") + "__v")
            self._state.by_name[name] = (variable, m, v)
        self.built = True

    def schedule(self, step):
        """The learning rate at global step `step`."""
        lr = self._learning_rate
        if isinstance(lr, keras.Variable):
            return tf.convert_to_tensor(lr)
        return lr(step) if callable(lr) else lr

    def current_learning_rate(self):
        """The learning rate the next apply_gradients uses."""
        step = self.global_step.read_value() if self.global_step is not None else 0
        return self.schedule(step + self.settings.lr_step_offset)

    def _get_current_learning_rate(self):  # Keras's `learning_rate`
        return self.current_learning_rate()

    @property
    def iterations(self):
        return self.global_step if self.global_step is not None else self._iterations

    @property
    def variables(self):
        """Keras's own variables, then global_step and the slots (what Keras saves with a model)."""
        own = [] if self.global_step is None else [self.global_step]
        return super().variables + own + [s for _, m, v in self._state.by_name.values() for s in (m, v)]

    def variables_by_name(self):
        """{"global_step": ..., "NAME/adam_m": ..., "NAME/adam_v": ...}."""
        out = collections.OrderedDict()
        if self.global_step is not None:
            out["global_step"] = self.global_step
        for name, (_, m, v) in self._state.by_name.items():
            out[name + "/adam_m"] = m
            out[name + "/adam_v"] = v
        return out

    def _name_of(self, variable):
        name = self._state.names.get(id(variable))
        if name is None:
            raise ValueError(f"Variable {getattr(variable, 'path', getattr(variable, 'name', variable))} was not "
                             f"passed to optimizer.build()")
        return name

    def scale_loss(self, loss):
        """Keras's fit divides the loss by the number of replicas for optimizers that sum the replicas'
        gradients; apply_gradients averages them, so the loss is multiplied back."""
        loss = super().scale_loss(loss)
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        return loss * float(replicas) if replicas > 1 else loss

    def apply(self, grads, trainable_variables=None):
        """Keras's entry point: apply_gradients(zip(grads, trainable_variables)) (building on them first)."""
        if trainable_variables is None:
            trainable_variables = [variable for variable, _, _ in self._state.by_name.values()]
        trainable_variables = list(trainable_variables)
        self.build(trainable_variables)
        return self.apply_gradients(zip(grads, trainable_variables))

    def apply_gradients(self, grads_and_vars, row_squares=None, apply_if=None):
        """All-reduce (mean), clip to global norm, update, increment global_step; returns the global norm.

        row_squares: {variable name: sum of squares of its gradient's rows}, counted in the global norm in place
        of that variable's dense gradient (module docstring, "Global norm"); IndexedSlices gradients count their
        rows without it. Built by Keras from the variables if needed.
        apply_if: a boolean scalar, the same on every replica (dynamic loss scaling's "the gradients are finite"):
        where false, neither the variables, the slots nor global_step change. The condition is taken in the
        cross-replica update, as a mirrored strategy's merge_call cannot sit inside a replica's tf.cond."""
        grads_and_vars = [(g, v) for g, v in grads_and_vars]
        if not self.built:
            if isinstance(grads_and_vars[0][1], keras.Variable):
                self.build([v for _, v in grads_and_vars])
            else:
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
        clip_norm = self.settings.clip_norm
        if rows:
            # tf.linalg.global_norm's sum of half squares, with the rows' in place of their dense gradients'.
            row_of = dict(zip(row_names, rows))
            half_squares = [0.5 * row_of[name] if name in row_of else tf.nn.l2_loss(g) for g, name in zip(grads, names)]
            global_norm = tf.sqrt(tf.reduce_sum(tf.stack(half_squares)) * 2.0)
            if clip_norm:
                grads, _ = tf.clip_by_global_norm(grads, clip_norm=clip_norm, use_norm=global_norm)
        elif clip_norm:
            grads, global_norm = tf.clip_by_global_norm(grads, clip_norm=clip_norm)
        else:
            global_norm = tf.linalg.global_norm(grads)
        ctx.merge_call(self._apply_cross_replica, args=(grads, names, apply_if))
        return global_norm

    def _apply_cross_replica(self, strategy, grads, names, apply_if=None):
        if apply_if is None:
            return self._update_all(strategy, grads, names)
        apply_if = strategy.experimental_local_results(apply_if)[0]  # the same on every replica

        def update():
            with tf.control_dependencies([self._update_all(strategy, grads, names)]):
                return tf.constant(True)

        return tf.cond(apply_if, update, lambda: tf.constant(False))

    def _update_all(self, strategy, grads, names):
        lr = self.schedule(self.global_step.read_value() + self.settings.lr_step_offset)
        updates = []
        for grad, name in zip(grads, names):
            variable, m, v = self._state.by_name[name]
            updates.append(strategy.extended.update(
                _tf_variable(variable), self._update_one, args=(grad, m, v, lr, name), group=True))
        with tf.control_dependencies(updates):
            if self.settings.increment_global_step:
                return self.global_step.assign_add(1)
            return tf.no_op()

    def _update_one(self, param, grad, m, v, lr, name):
        raise NotImplementedError

    def get_config(self):
        lr = self._learning_rate
        lr = float(lr.numpy()) if isinstance(lr, keras.Variable) else keras.saving.serialize_keras_object(lr)
        return {"name": self.name, "learning_rate": lr, **dataclasses.asdict(self.settings)}


def _adam_weight_decay_math(param, grad, m, v, lr, hyper):
    """The original update arithmetic -> (next_param, next_m, next_v); hyper: AdamHyper."""
    next_m = tf.multiply(hyper.beta_1, m) + tf.multiply(1.0 - hyper.beta_1, grad)
    next_v = tf.multiply(hyper.beta_2, v) + tf.multiply(1.0 - hyper.beta_2, tf.square(grad))
    update = next_m / (tf.sqrt(next_v) + hyper.epsilon)
    if hyper.weight_decay_rate:
        update += hyper.weight_decay_rate * param
    return param - lr * update, next_m, next_v


def _assign_update(param, grad, m, v, lr, hyper):
    """Writes the update; returns a value that exists only once the three writes are done."""
    next_param, next_m, next_v = _adam_weight_decay_math(
        param.read_value(), grad, m.read_value(), v.read_value(), lr, hyper)
    with tf.control_dependencies([param.assign(next_param), m.assign(next_m), v.assign(next_v)]):
        return tf.constant(True)


@keras.saving.register_keras_serializable(package="bert")
class AdamWeightDecay(_WeightDecayOptimizer):
    """The original AdamWeightDecayOptimizer's update (Adam without bias correction, decoupled weight decay) with
    the original create_optimizer's clipping and step, as a Keras optimizer.

    fused_update=True (default) runs each variable's elementwise update as one XLA-compiled kernel, the same
    operations in the same order (about half the time without XLA elsewhere); False, and any
    tf.distribute strategy (MirroredStrategy on one device too), runs them as separate TensorFlow ops.
    """

    def __init__(self, learning_rate, fused_update=True, global_step=None, name=None, **settings):
        super().__init__(learning_rate, global_step=global_step, name=name, **settings)
        self.fused_update = fused_update
        # The same arithmetic fused by XLA into one kernel per variable (no intermediate tensors in memory). One
        # function per optimizer: a variable made inside a trace (Keras builds its optimizer in the train step)
        # is captured by the trace, and traces shared between optimizers would outlive their variables.
        self._state.fused_assign_update = tf.function(_assign_update, jit_compile=True)

    def _update_one(self, param, grad, m, v, lr, name):
        s = self.settings
        hyper = AdamHyper(s.beta_1, s.beta_2, s.epsilon, s.weight_decay_rate if self._do_use_weight_decay(name) else 0.0)
        # Under any tf.distribute strategy but the default one, even with one replica, the slots are mirrored: the
        # XLA-fused update then writes no slot (adam_m / adam_v stayed zero), so it runs without a strategy only.
        fused = self.fused_update and not tf.distribute.has_strategy()
        fn = self._state.fused_assign_update if fused else _assign_update
        # global_step's increment waits on this: an input that ends inside a step then leaves it uncounted.
        return fn(param, _dense(grad), m, v, lr, hyper)

    def get_config(self):
        return dict(super().get_config(), fused_update=self.fused_update)


@keras.saving.register_keras_serializable(package="bert")
class Lamb(_WeightDecayOptimizer):
    """LAMB (You et al. 2019): bias-corrected Adam direction scaled by the trust ratio ||w|| / ||update||."""

    def __init__(self, learning_rate, exclude_from_layer_adaptation=None, **settings):
        super().__init__(learning_rate, **settings)
        self.exclude_from_layer_adaptation = tuple(
            exclude_from_layer_adaptation if exclude_from_layer_adaptation is not None
            else self.settings.exclude_from_weight_decay)

    def _update_one(self, param, grad, m, v, lr, name):
        s = self.settings
        grad = _dense(grad)
        t = tf.cast(self.global_step.read_value() + 1, tf.float32)
        next_m = tf.multiply(s.beta_1, m) + tf.multiply(1.0 - s.beta_1, grad)
        next_v = tf.multiply(s.beta_2, v) + tf.multiply(1.0 - s.beta_2, tf.square(grad))
        m_hat = next_m / (1.0 - tf.pow(s.beta_1, t))
        v_hat = next_v / (1.0 - tf.pow(s.beta_2, t))
        update = m_hat / (tf.sqrt(v_hat) + s.epsilon)
        if self._do_use_weight_decay(name):
            update += s.weight_decay_rate * param
        ratio = 1.0
        if not any(re.search(p, name) is not None for p in self.exclude_from_layer_adaptation):
            w_norm = tf.norm(param)
            u_norm = tf.norm(update)
            ratio = tf.where(w_norm > 0.0, tf.where(u_norm > 0.0, w_norm / u_norm, 1.0), 1.0)
        next_param = param - ratio * lr * update
        return tf.group(param.assign(next_param), m.assign(next_m), v.assign(next_v))

    def get_config(self):
        return dict(super().get_config(), exclude_from_layer_adaptation=list(self.exclude_from_layer_adaptation))


OPTIMIZERS = {"adamw": AdamWeightDecay, "lamb": Lamb}


def make_optimizer(init_lr, num_train_steps, num_warmup_steps, optimizer_type="adamw", global_step=None,
                   **settings):
    """The scripts' optimizer: LinearWarmupDecay(init_lr, num_train_steps, num_warmup_steps) with AdamWeightDecay
    (the original's) or Lamb; settings: WeightDecaySettings' fields. The project's loop calls .build() on it
    next; Keras's compile / fit take it as it is."""
    if optimizer_type not in OPTIMIZERS:
        raise ValueError(f"optimizer_type must be 'adamw' or 'lamb', got {optimizer_type!r}")
    schedule = LinearWarmupDecay(init_lr, num_train_steps, num_warmup_steps)
    return OPTIMIZERS[optimizer_type](schedule, global_step=global_step, **settings)


# ----------------------------------------------------------------------------------------------
# The original release's API.


class AdamWeightDecayOptimizer(tf.compat.v1.train.Optimizer):
    """The original's optimizer: Adam without bias correction, with "correct" L2 weight decay, as a TensorFlow
    (compat.v1) optimizer that runs eagerly and under tf.function.

    apply_gradients(grads_and_vars, global_step=None, name=None) updates each variable as the original, with no
    clipping and no global step increment (the original's create_optimizer adds them). learning_rate: a number, a
    tensor, a variable or a function of no arguments (TensorFlow 2's way to give a rate that changes:
    create_optimizer passes its schedule so). Weight decay applies where weight_decay_rate is set and no regex of
    exclude_from_weight_decay is found in the variable's name. minimize(loss_function) works too
    (tf.compat.v1's).

    Slots: each optimizer owns its own, NAME/adam_m and NAME/adam_v (NAME: modeling.variable_name, the
    variable's checkpoint name), zero when made (on the first step that updates NAME, or by build(var_list)) and
    kept by the optimizer: a second optimizer of the same variable starts from zero moments, as a new one of
    TF1's. get_slot(var, "adam_m"), variables() and variables_by_name() ({"NAME/adam_m": ...}) return them;
    modeling.save_checkpoint writes them under those names (and refuses to write two optimizers' slots of one
    variable under one name). Two different variables of one name are an error: their slots would share it.
    """

    def __init__(self, learning_rate, weight_decay_rate=0.0, beta_1=WeightDecaySettings.beta_1,
                 beta_2=WeightDecaySettings.beta_2, epsilon=WeightDecaySettings.epsilon, exclude_from_weight_decay=None,
                 name="AdamWeightDecayOptimizer"):
        super().__init__(False, name)
        self.learning_rate = learning_rate
        self.weight_decay_rate = weight_decay_rate
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.exclude_from_weight_decay = exclude_from_weight_decay
        self.name = name
        self._adam_slots = collections.OrderedDict()  # NAME -> (variable, adam_m, adam_v), in creation order
        modeling.track_saveable(self)

    def _slots_of(self, param):
        """(adam_m, adam_v) of `param`, made (zeros, outside any trace) the first time."""
        param_name = self._get_variable_name(variable_name(param))
        known = self._adam_slots.get(param_name)
        if known is not None:
            if _tf_variable(known[0]) is not _tf_variable(param):
                raise ValueError(f"{self.name}: two different variables are named {param_name}; their slots "
                                 f"{param_name}/adam_m would share one name: give each variable its own name")
            return known[1], known[2]
        shape = [int(d) for d in param.shape]
        with tf.init_scope(), tf.compat.v1.name_scope(None):
            m, v = (tf.Variable(tf.zeros(shape, tf.float32), trainable=False, name=f"{param_name}/{slot}")
                    for slot in self.get_slot_names())
        self._adam_slots[param_name] = (param, m, v)
        return m, v

    def build(self, var_list):
        """Makes the (zero) slots of the variables of var_list that have none yet, as the first step would: to
        load them from a checkpoint (modeling.init_from_checkpoint(ckpt, optimizer.variables_by_name())) before
        it."""
        for param in var_list:
            self._slots_of(param)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """One update of every variable with a gradient; returns the grouped assignments (None eagerly)."""
        lr = self.learning_rate() if callable(self.learning_rate) else self.learning_rate
        assignments = []
        for grad, param in grads_and_vars:
            if grad is None or param is None:
                continue
            param_name = self._get_variable_name(variable_name(param))
            m, v = self._slots_of(param)
            hyper = AdamHyper(self.beta_1, self.beta_2, self.epsilon,
                              self.weight_decay_rate if self._do_use_weight_decay(param_name) else 0.0)
            assignments.append(_assign_update(_tf_variable(param), _dense(grad), m, v, lr, hyper))
        if tf.executing_eagerly():
            modeling.note_assigned()
        return tf.group(*assignments, name=name)

    def get_slot_names(self):
        return ["adam_m", "adam_v"]

    def get_slot(self, var, name):
        """This optimizer's slot `name` ("adam_m" or "adam_v") of `var`, or None before its first update."""
        known = self._adam_slots.get(self._get_variable_name(variable_name(var)))
        if known is None or _tf_variable(known[0]) is not _tf_variable(var) or name not in self.get_slot_names():
            return None
        return known[1 + self.get_slot_names().index(name)]

    def variables(self):
        """The slots, in the order they were made."""
        return list(self.variables_by_name().values())

    def variables_by_name(self):
        """{"NAME/adam_m": slot, "NAME/adam_v": slot, ...}: the slots under their checkpoint names."""
        out = collections.OrderedDict()
        for param_name, (_, m, v) in self._adam_slots.items():
            out[param_name + "/adam_m"] = m
            out[param_name + "/adam_v"] = v
        return out

    def _do_use_weight_decay(self, param_name):
        """Whether to use L2 weight decay for `param_name`."""
        return _decays(param_name, self.weight_decay_rate, self.exclude_from_weight_decay)

    def _get_variable_name(self, param_name):
        """The variable name from the tensor name (without ":0")."""
        m = re.match("^(.*):\\d+$", param_name)
        return m.group(1) if m is not None else param_name


class TrainStep:
    """What create_optimizer returns in TensorFlow 2: call it with the loss function's arguments to train one
    step; `optimizer` (AdamWeightDecayOptimizer), `global_step`, `learning_rate()`, `trained_variables` (those
    of the last step) and `variables_by_name()` (what modeling.save_checkpoint writes of it) are its parts."""

    def __init__(self, loss, schedule, var_list=None, settings=None):
        self.loss = loss
        self.var_list = var_list
        self.global_step = modeling.get_or_create_global_step()
        self.schedule = schedule
        self.settings = settings or WeightDecaySettings()
        s = self.settings
        self.optimizer = AdamWeightDecayOptimizer(
            learning_rate=self.learning_rate, weight_decay_rate=s.weight_decay_rate, beta_1=s.beta_1,
            beta_2=s.beta_2, epsilon=s.epsilon, exclude_from_weight_decay=list(s.exclude_from_weight_decay))
        self.trained_variables = []
        modeling.track_saveable(self)

    def learning_rate(self):
        """The rate of the next step (that of the incremented global step, as the original's train_op)."""
        return self.schedule(self.global_step.read_value() + self.settings.lr_step_offset)

    def __call__(self, *args, **kwargs):
        with tf.GradientTape() as tape:
            loss = self.loss(*args, **kwargs)
        # The original's tf.trainable_variables(): every trainable variable of the graph, which in TensorFlow 2
        # is every one the loss read (the tape watches them all, in the order they were made).
        tvars = list(self.var_list) if self.var_list is not None else list(tape.watched_variables())
        grads = tape.gradient(loss, tvars)
        # This is how the model was pre-trained.
        grads, _ = tf.clip_by_global_norm(grads, clip_norm=self.settings.clip_norm)
        self.optimizer.apply_gradients(zip(grads, tvars), global_step=self.global_step)
        self.global_step.assign_add(1)
        self.trained_variables = tvars
        return loss

    def variables_by_name(self):
        """{checkpoint name: variable}: the global step, the variables the last step trained, the slots."""
        out = collections.OrderedDict(global_step=self.global_step)
        for variable in self.trained_variables:
            out.setdefault(variable_name(variable), variable)
        out.update(self.optimizer.variables_by_name())
        return out


def create_optimizer(loss, init_lr, num_train_steps, num_warmup_steps, use_tpu, var_list=None):
    """The original's training op, in TensorFlow 2 a function: there is no graph to add an op to.

    `loss` is a function that computes the loss (building the model as the original's model_fn does, with
    modeling.BertModel and modeling.get_variable, and any layers or variables of the user's own); what comes back
    is `train_op`, a TrainStep: each `train_op(*args, **kwargs)` computes loss(*args, **kwargs) under a
    GradientTape and takes the gradients of every trainable variable the loss read (what the tape watched:
    TensorFlow 2's tf.trainable_variables() of the original's graph, modeling's variables, a Keras layer's and a
    tf.Variable alike, in the order they were made; or of var_list), clips them to global norm 1.0, applies
    AdamWeightDecayOptimizer (the original's warm-up and linear decay from init_lr over num_train_steps, and
    WeightDecaySettings' defaults: weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
    exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"]), increments the global step
    (modeling.get_or_create_global_step()) and returns the loss. Call it eagerly, or wrap it in tf.function
    (`step = tf.function(train_op)`). use_tpu: TensorFlow 2 has no CrossShardOptimizer; True is an error (the
    scripts train on TPUs with --use_tpu).
    """
    if use_tpu:
        raise ValueError("create_optimizer(use_tpu=True): TensorFlow 2 has no CrossShardOptimizer; train on a TPU "
                         "with the scripts' --use_tpu (training.py's loop under a TPUStrategy)")
    if not callable(loss):
        raise TypeError(f"create_optimizer: in TensorFlow 2 `loss` is a function that computes the loss (there is "
                        f"no graph to add the training op to), got {type(loss).__name__}")
    return TrainStep(loss, LinearWarmupDecay(init_lr, num_train_steps, num_warmup_steps), var_list)
