"""Estimator-style train / evaluate / predict loop shared by every runner.

A runner describes its job with a `Task` and an input function, and this module does the rest: distribution
strategy, XLA, mixed precision, gradient accumulation, original-format checkpoints (`model.ckpt-STEP` plus the
`checkpoint` state file) every `save_checkpoints_steps`, automatic resume from `output_dir`, `init_checkpoint`
when starting fresh, TensorBoard summaries every `save_summary_steps` and a progress line at least every
`log_step_count_steps` steps and `log_every_secs` seconds (evaluation and prediction: every `log_every_secs`).

Usage:

    import training

    class MyTask(training.Task):
        def build_model(self, elementwise_dtype="float32"):  # under the strategy scope; variables must exist
            return MyModel(..., elementwise_dtype=elementwise_dtype)  # model.variables_by_name() required
        def compute_loss(self, model, features, training, dropout_seed=None):
            out = model(features, training=training, dropout_seed=dropout_seed)
            return out["loss"], {"loss": out["loss"]}
        def eval_metrics(self, model, features):    # name -> (numerator, denominator), summed over batches
            ...
        def predict_outputs(self, model, features): # name -> per-example tensor (batch first)
            ...
        sequence_outputs = ("logits",)              # outputs with a sequence axis (runner.predict_arrays)

    def input_fn(batch_size, input_context):         # per-replica batch size, tf.distribute.InputContext
        return tf.data.Dataset...                    # deterministic (seeded); repeat() for training

    config = training.TrainingConfig(output_dir=..., ...)   # a script's: options.training
    strategy = training.create_strategy(config)              # a script's runner.Job makes it, first
    training.train(MyTask(), input_fn, config, strategy, init_checkpoint)  # -> dict: global_step, last losses
    checkpoint = checkpoints.checkpoint_for_inference(config.output_dir, init_checkpoint)
    results = training.evaluate(MyTask(), eval_input_fn, config, strategy, checkpoint)
    for example in training.predict(MyTask(), predict_input_fn, config, strategy, checkpoint): ...

The loop neither makes strategies nor writes result files: runner.Job does both, once per job.

Resume: the input function must be deterministic (seeded); on restart the loop skips the batches already
consumed (one per global step). Each step's dropout masks are drawn from --seed and the global step
(the models' `dropout_seed`, encoder.py), so a resumed run draws what an uninterrupted one draws. With
`deterministic=True` (--deterministic) it also enables TensorFlow op determinism, so a run killed (or preempted:
preemption.py) and restarted with the same command ends with exactly the weights of an uninterrupted run (on CPU).

Stopping early: a SIGTERM during training saves a checkpoint after the step in progress and ends the run with
preemption.Preempted; under a multi-worker strategy a lost worker ends the others with preemption.WorkerLost.
"""
import collections
import contextlib
import dataclasses
import math
import os
import threading
import time

import numpy as np
import tensorflow as tf
from absl import logging

import checkpoints
import cli
import device_setup
import encoder
import optimization
import preemption
from cli import UserError

DISTRIBUTION_STRATEGIES = ("default", "mirrored", "multi_worker_mirrored", "tpu")
LOG_EVERY_SECS = 30.0
LOG_EVERY_SECS_HELP = ("A progress line at least every this many seconds: in training (with "
                       "--log_step_count_steps, whichever comes first), evaluation and prediction (examples done / "
                       "total, ETA).")
DTYPES = ("float32", "bfloat16", "float16")
OPTIMIZERS = ("adamw", "lamb")


@dataclasses.dataclass
class TrainingConfig:
    """The loop's settings, one field per flag (the original's names and defaults): where it writes, batches,
    schedule, devices, precision, checkpoints. A script's options hold it as cli.nested(TrainingConfig), so these
    fields are its flags; the model the loop trains is the script's (model_options.ModelOptions)."""
    output_dir: str = cli.option(None, "The output directory where the model checkpoints will be written.")
    train_batch_size: int = cli.option(32, "Total batch size for training.")
    eval_batch_size: int = cli.option(8, "Total batch size for eval.")
    predict_batch_size: int = cli.option(8, "Total batch size for predict.")
    learning_rate: float = cli.option(5e-5, "The initial learning rate for Adam.")
    num_train_steps: int = cli.option(100000, "Number of training steps.")
    num_warmup_steps: int = cli.option(10000, "Number of warmup steps.")
    save_checkpoints_steps: int = cli.option(1000, "How often to save the model checkpoint.")
    iterations_per_loop: int = cli.option(1000, "How many steps to make in each estimator call: the most steps "
                                          "one device loop makes without returning to the host (a loop also "
                                          "ends at each checkpoint, progress line and summary).")
    log_step_count_steps: int = cli.option(100, "A progress line (global step / total, loss, learning rate, "
                                           "examples/s, elapsed, ETA) at least every this many steps.")
    log_every_secs: float = cli.option(LOG_EVERY_SECS, LOG_EVERY_SECS_HELP)
    save_summary_steps: int = cli.option(100, "Save TensorBoard summaries (losses, learning rate, examples/s) "
                                         "every this many steps.")
    use_tpu: bool = cli.option(False, "Whether to use TPU or GPU/CPU.")
    tpu_name: str = cli.option(None, "The Cloud TPU to use for training.")
    tpu_zone: str = cli.option(None, "GCE zone where the Cloud TPU is located in.")
    gcp_project: str = cli.option(None, "Project name for the Cloud TPU-enabled project.")
    master: str = cli.option(None, "TensorFlow master URL.")
    num_tpu_cores: int = cli.option(8, "Only used if `use_tpu` is True. Total number of TPU cores to use.")
    distribution_strategy: str = cli.option(
        "default", "default: one device; mirrored: all local GPUs; multi_worker_mirrored: workers from "
        "TF_CONFIG; tpu: a Cloud TPU (also chosen by --use_tpu).", DISTRIBUTION_STRATEGIES)
    use_xla: bool = cli.option(None, "Compile the train step, evaluation, prediction and exported signatures with "
                               "XLA (jit_compile). Not given: on where the job runs on a GPU or TPU, off on a CPU "
                               "(where XLA slows training down); on a GPU the project sets the XLA options that make "
                               "its compile finish unless XLA_FLAGS sets them (device_setup.py).")
    dtype: str = cli.option("float32", "Compute dtype: float32, bfloat16 (mixed), float16 (mixed, dynamic loss "
                            "scaling).", DTYPES)
    elementwise_dtype: str = cli.option(
        "auto", "Under a mixed --dtype, where the elementwise work around the matmuls runs (the dropouts, "
        "attention's scale, the dense layers' bias and activation): float32 (elementwise bfloat16 is slow on a "
        "CPU), compute (the mixed dtype itself), auto: float32 on a CPU, compute on a GPU or TPU. Softmax, residual "
        "sums and LayerNorm run in float32 either way.", ("auto",) + encoder.ELEMENTWISE_DTYPES)
    optimizer: str = cli.option("adamw", "adamw (the original) or lamb.", OPTIMIZERS)
    gradient_accumulation_steps: int = cli.option(1, "Micro-batches per optimizer step; train_batch_size is the "
                                                  "batch of one step.")
    keep_checkpoint_max: int = cli.option(5, "How many checkpoints to keep.")
    deterministic: bool = cli.option(False, "Enable TensorFlow op determinism (exactly reproducible runs and "
                                     "resumes on CPU).")
    seed: int = cli.option(12345, "Seed of initialisation, dropout, shuffling and dynamic masking.")
    profile_loop: int = cli.option(0, "Trace the Nth training loop of this run (up to the next progress line, "
                                   "summary or checkpoint, at most iterations_per_loop steps; 1 is the first, with "
                                   "its tracing and compiling) with tf.profiler into output_dir/plugins/profile, "
                                   "for TensorBoard's Profile tab; 0: off.")

    def __post_init__(self):
        self.validate()

    def validate(self):
        """Raises cli.UserError naming the flag whose value is not allowed."""
        if self.distribution_strategy not in DISTRIBUTION_STRATEGIES:
            raise UserError(f"--distribution_strategy={self.distribution_strategy!r}: expected one of "
                            f"{DISTRIBUTION_STRATEGIES}")
        if self.dtype not in DTYPES:
            raise UserError(f"--dtype={self.dtype!r}: expected one of {DTYPES}")
        if self.optimizer not in OPTIMIZERS:
            raise UserError(f"--optimizer={self.optimizer!r}: expected one of {OPTIMIZERS}")
        if self.elementwise_dtype not in ("auto",) + encoder.ELEMENTWISE_DTYPES:
            raise UserError(f"--elementwise_dtype={self.elementwise_dtype!r}: expected auto or one of "
                            f"{encoder.ELEMENTWISE_DTYPES}")
        for name in ("train_batch_size", "eval_batch_size", "predict_batch_size", "save_checkpoints_steps",
                     "iterations_per_loop", "log_step_count_steps", "save_summary_steps",
                     "gradient_accumulation_steps", "keep_checkpoint_max"):
            if int(getattr(self, name)) < 1:
                raise UserError(f"--{name}={getattr(self, name)}: expected a positive integer")
        for name in ("num_train_steps", "num_warmup_steps", "profile_loop"):
            if int(getattr(self, name)) < 0:
                raise UserError(f"--{name}={getattr(self, name)}: expected a non-negative integer")
        if not self.log_every_secs >= 0:
            raise UserError(f"--log_every_secs={self.log_every_secs}: expected a non-negative number of seconds")
        if self.train_batch_size % self.gradient_accumulation_steps:
            raise UserError(f"--train_batch_size={self.train_batch_size} is not divisible by "
                            f"--gradient_accumulation_steps={self.gradient_accumulation_steps}")

    @property
    def strategy_name(self):
        return "tpu" if self.use_tpu else self.distribution_strategy


def create_strategy(config):
    """tf.distribute strategy named by config.distribution_strategy (or --use_tpu)."""
    name = config.strategy_name
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker_mirrored":
        if not os.environ.get("TF_CONFIG"):
            raise UserError("--distribution_strategy=multi_worker_mirrored needs the TF_CONFIG environment "
                            "variable (cluster and task of this worker)")
        return tf.distribute.MultiWorkerMirroredStrategy()
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
        tpu=config.tpu_name or config.master, zone=config.tpu_zone, project=config.gcp_project)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def is_chief(strategy):
    """True on the worker that writes checkpoints, summaries and results."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or isinstance(strategy, tf.distribute.TPUStrategy):
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type in (None, "chief"):
        return True
    cluster = resolver.cluster_spec().as_dict()
    return task_type == "worker" and task_id == 0 and "chief" not in cluster


def local_strategy(strategy):
    """The strategy inference runs under on the chief: its own devices (all local GPUs when it has several)
    in place of a multi-worker strategy, whose collectives would wait for workers that run no inference."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return strategy
    if len(tf.config.list_logical_devices("GPU")) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def end_together(strategy):
    """Under a multi-worker strategy, waits until every worker gets here (the chief runs inference after
    training while the others wait), so that no worker leaves the cluster while another still needs it."""
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        barrier = tf.function(  # traced: eagerly, the strategy warns of its overhead at the end of every job
            lambda: strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None),
            autograph=False)
        try:
            barrier()
        except tf.errors.OpError as err:
            preemption.raise_lost_worker(err, strategy, "at the end of the job")


def set_precision_policy(dtype):
    """Keras global dtype policy for config.dtype (the models take config.elementwise_dtype: Task.build_model)."""
    import keras
    policy = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}[dtype]
    keras.config.set_dtype_policy(policy)



class Task:
    """What a runner supplies. Subclass and override; methods run inside the strategy's replica context.

    The step functions are traced with autograph off (much faster tracing): write tensor-dependent control
    flow with tf.cond / tf.while_loop, or set `autograph = True` on the task.
    """

    autograph = False
    # Names of predict_outputs with a sequence axis after the batch axis (runner.predict_arrays pads them back
    # to full length after real-length batches).
    sequence_outputs = ()

    def build_model(self, elementwise_dtype="float32"):
        """Returns the model with its variables created (called under the strategy scope), its elementwise work
        in `elementwise_dtype` (the config's, decided for the device).

        The model must offer variables_by_name() -> {original name: variable}.
        """
        raise NotImplementedError

    def compute_loss(self, model, features, training, dropout_seed=None):
        """Returns (loss scalar, {name: scalar} to log) for one (micro-)batch on one replica; in training, the
        model's dropout masks are drawn from `dropout_seed` (pass it to the model's call)."""
        raise NotImplementedError

    def prepare_batch(self, features, num_micro_batches):
        """Hook called once per step and replica on the whole per-replica batch before it is split into
        micro-batches (e.g. to add normalisers computed over the global batch). Scalars added here are passed
        unchanged to every micro-batch."""
        return features

    def eval_metrics(self, model, features):
        """Returns {name: (numerator, denominator)}; evaluate() reports sum(numerator) / sum(denominator)."""
        return {}

    def evaluate_batch(self, model, features):
        """Returns (loss, eval_metrics) for one eval batch; override to share one forward pass."""
        loss, _ = self.compute_loss(model, features, training=False)
        return loss, self.eval_metrics(model, features)

    def predict_outputs(self, model, features):
        """Returns {name: tensor with the batch as first dimension}."""
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------------------
# Optimizer and checkpoint glue.


def create_optimizer(config):
    return optimization.make_optimizer(
        config.learning_rate, config.num_train_steps, config.num_warmup_steps, optimizer_type=config.optimizer)


def named_state(model, optimizer, extra=None):
    """{original name: variable} of everything a training checkpoint holds."""
    state = dict(model.variables_by_name())
    if optimizer is not None:
        for name, var in optimizer.variables_by_name().items():
            state.setdefault(name, var)
    if extra:
        state.update(extra)
    return state


def _split_micro_batches(features, k, i):
    """Micro-batch i of k: tensors with a batch dimension are sliced, scalars are kept."""
    out = {}
    for key, value in features.items():
        if value.shape.rank == 0:
            out[key] = value
        else:
            size = tf.shape(value)[0] // k
            out[key] = value[i * size:(i + 1) * size]
    return out


class _LossScale:
    """Dynamic loss scaling for float16: halve on overflow (step skipped), double after 2000 good steps."""

    def __init__(self):
        self.scale = tf.Variable(2.0 ** 15, trainable=False, dtype=tf.float32, name="loss_scale",
                                 synchronization=tf.VariableSynchronization.ON_WRITE,
                                 aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self.good_steps = tf.Variable(0, trainable=False, dtype=tf.int64, name="loss_scale_good_steps",
                                      synchronization=tf.VariableSynchronization.ON_WRITE,
                                      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    def named(self):
        return {"loss_scale": self.scale, "loss_scale_good_steps": self.good_steps}

    def update(self, finite):
        """After a step whose gradients were finite (or not). Plain assignments, no tf.cond: a mirrored variable's
        assignment in a replica is a merge_call, which a cond's branch cannot hold."""
        good = self.good_steps + 1
        grow = tf.logical_and(finite, good >= 2000)
        scale = tf.where(finite, tf.where(grow, self.scale * 2.0, self.scale), tf.maximum(self.scale / 2.0, 1.0))
        self.scale.assign(scale)
        self.good_steps.assign(tf.where(tf.logical_and(finite, tf.logical_not(grow)), good, tf.constant(0, tf.int64)))


def _all_finite(grads):
    """Whether every replica's gradients are finite (the same answer on every replica: if one overflowed, each
    skips the step)."""
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads if g is not None])
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return finite
    overflows = context.all_reduce(tf.distribute.ReduceOp.SUM, tf.cast(tf.logical_not(finite), tf.float32))
    return overflows < 0.5


def _apply_gradients(optimizer, grads, variables, row_squares, apply_if=None):
    """Applies micro-batch-averaged gradients; the optimizer averages them over replicas, clips, updates (where
    apply_if, when given, is true)."""
    optimizer.apply_gradients([(g, v) for g, v in zip(grads, variables) if g is not None], row_squares=row_squares,
                              apply_if=apply_if)


def _global_step_variable(optimizer, state):
    step = getattr(optimizer, "global_step", None)
    if step is None:
        step = state.get("global_step")
    if step is None:
        raise ValueError("the optimizer exposes no global_step variable")
    return step


def _learning_rate(optimizer, step):
    lr = getattr(optimizer, "schedule", None)
    if lr is None:
        return float("nan")
    if callable(lr):
        lr = lr(step)
    return float(np.asarray(lr))


def _setup_run(config):
    """Dtype policy, op determinism and seeds (fresh runs initialise identically for the same seed)."""
    import keras
    set_precision_policy(config.dtype)
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(config.seed)


def _checkpoint_manager(config):
    return checkpoints.CheckpointManager(config.output_dir, max_to_keep=config.keep_checkpoint_max)


def _format_duration(seconds):
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _dropout_seed(seed, global_step, micro_batch):
    """The seed of one micro-batch's dropout masks on this replica (a model call's dropout_seed): --seed, the step
    being taken, the replica and the micro-batch, so that every step draws its own masks whatever ran before."""
    context = tf.distribute.get_replica_context()
    replica = context.replica_id_in_sync_group if context is not None else 0
    step = tf.stack([tf.constant(seed, tf.int64), tf.cast(global_step, tf.int64) + 1])
    step = tf.random.experimental.stateless_fold_in(step, tf.cast(replica, tf.int64))
    return tf.random.experimental.stateless_fold_in(step, tf.cast(micro_batch, tf.int64))


def _build_replica_step(task, model, optimizer, config, loss_scale, num_replicas):
    """One step on one replica. Gradient clipping counts a gathered table's gradient (the word embeddings of a
    fine-tuning model) per token occurrence, as the original's on CPU/GPU (optimization.py, "Global norm"): each
    micro-batch's sum of squared rows, scaled as its gradient is, so that accumulation (and the optimizer's mean
    over replicas) gives the rows of the whole batch. On a TPU (--use_tpu) the original looks the embeddings up
    with a one-hot matmul: the norm counts the dense gradient."""
    k = config.gradient_accumulation_steps
    named = [(name, v) for name, v in model.variables_by_name().items() if getattr(v, "trainable", True)]
    names = [name for name, _ in named]
    variables = [v for _, v in named]
    per_occurrence = config.strategy_name != "tpu"

    def micro_grads(features, micro_batch=0):
        with tf.GradientTape() as tape:
            loss, logs = task.compute_loss(model, features, training=True,
                                           dropout_seed=_dropout_seed(config.seed, optimizer.global_step, micro_batch))
            loss = tf.cast(loss, tf.float32)
            scaled = loss * loss_scale.scale if loss_scale is not None else loss
        grads = tape.gradient(scaled, variables)
        rows = {}
        if per_occurrence:
            rows = {j: optimization.occurrence_squares(g) for j, g in enumerate(grads)
                    if isinstance(g, tf.IndexedSlices)}
        # Variables without a gradient (e.g. an unused pooler) are left alone, as the original does.
        grads = [None if g is None else tf.convert_to_tensor(g) for g in grads]
        logs = {name: tf.cast(value, tf.float32) for name, value in logs.items()}
        logs.setdefault("loss", loss)
        return logs, grads, rows

    def prepare(features):
        return task.prepare_batch(features, k)  # may all-reduce over the replicas: outside an XLA function

    def gradients(features):
        """(logs, gradients, row squares by name) of this replica's prepared batch, averaged over its
        micro-batches."""
        if k == 1:
            logs, grads, rows = micro_grads(features)
        else:
            logs, grads, rows = micro_grads(_split_micro_batches(features, k, 0))

            present = [i for i, g in enumerate(grads) if g is not None]
            row_keys = sorted(rows)

            def accumulate(i, sums, row_sums, logs):
                micro_logs, micro, micro_rows = micro_grads(_split_micro_batches(features, k, i), i)
                return (i + 1, [s + micro[j] for s, j in zip(sums, present)],
                        [s + micro_rows[j] for s, j in zip(row_sums, row_keys)],
                        {name: logs[name] + micro_logs[name] for name in logs})

            _, sums, row_sums, logs = tf.while_loop(
                lambda i, *_: i < k, accumulate,
                (tf.constant(1), [grads[j] for j in present], [rows[j] for j in row_keys], logs))
            grads = [None] * len(variables)
            for j, total in zip(present, sums):
                grads[j] = total / float(k)
            # A micro-batch's rows are k times those of the same tokens in the whole batch.
            rows = {j: total / float(k * k) for j, total in zip(row_keys, row_sums)}
            logs = {name: value / float(k) for name, value in logs.items()}
        if loss_scale is not None:
            grads = [None if g is None else g / loss_scale.scale for g in grads]
            rows = {j: total / tf.square(loss_scale.scale) for j, total in rows.items()}
        return logs, grads, {names[j]: total for j, total in rows.items()}

    def update(logs, grads, row_squares):
        """Applies the gradients (the optimizer all-reduces them; under dynamic loss scaling only where every
        replica's are finite, and updates the scale), returns the step's logs."""
        logs = dict(logs)
        if loss_scale is None:
            _apply_gradients(optimizer, grads, variables, row_squares)
        else:
            finite = _all_finite(grads)
            _apply_gradients(optimizer, grads, variables, row_squares, apply_if=finite)
            loss_scale.update(finite)
            logs["loss_scale"] = tf.identity(loss_scale.scale)
        return logs

    def replica_step(features):
        return update(*gradients(prepare(features)))

    replica_step.prepare, replica_step.gradients, replica_step.update = prepare, gradients, update
    return replica_step


_MIRRORED = (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)


LoopResult = collections.namedtuple("LoopResult", "steps logs noticed due")
LoopResult.__doc__ = """What one training loop returns: steps run, the mean of the logged values over them, the
preemption notice the workers agreed on and whether the time of a progress line came (agreed too)."""


class LineClock:
    """A flag (a float32 variable) that a thread of this process sets to 1 when the time of the next progress
    line comes (`set(deadline)`, seconds since the epoch as time.time(), before each loop): the training loop
    reads it after every step with no host round trip. A clock read in the graph (tf.timestamp) is refused under
    op determinism (--deterministic); a variable read is not. Use as a context manager (the thread ends with it)."""

    def __init__(self):
        self.flag = tf.Variable(0.0, trainable=False, name="progress_line_due")
        self._changed = threading.Condition()
        self._deadline = math.inf
        self._open = False
        self._thread = None

    def __enter__(self):
        self._open = True
        self._thread = threading.Thread(target=self._run, name="progress-line-clock", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        with self._changed:
            self._open = False
            self._changed.notify()
        self._thread.join(timeout=5)

    def set(self, deadline):
        """Clears the flag (sets it at once if `deadline` has passed) and sets it again at `deadline`."""
        with self._changed:
            self._deadline = math.inf if deadline is None else deadline
            self.flag.assign(1.0 if time.time() >= self._deadline else 0.0)
            self._changed.notify()

    def _run(self):
        with self._changed:
            while self._open:
                left = self._deadline - time.time()
                if left <= 0:
                    self.flag.assign(1.0)  # the main thread may be inside a loop, which reads it after each step
                    self._deadline = math.inf
                else:
                    self._changed.wait(timeout=min(left, 3600.0))


def _make_train_loop(strategy, replica_step, use_xla, notice, autograph=False, clock=None):
    """tf.function train_loop(iterator, n) running at most n steps from the iterator; returns a LoopResult.

    After every step the workers agree, in one all-reduce (PreemptionNotice.agreed), on the preemption notice and
    on whether the time of a progress line has come on any of them (`clock`, a LineClock; none: never): the loop
    ends after the first step at which a worker has a notice or a line due, so every worker stops at the same
    step. The loop starts from zeros shaped by a trace of one step that never runs (the step function itself is
    traced once and reused); it runs outside the XLA-compiled step.
    """
    # Autograph is off (Task.autograph) as it triples the tracing time.
    if use_xla and isinstance(strategy, _MIRRORED):
        # A mirrored strategy's all-reduces and update (a merge_call) cannot sit in a nested XLA function (on
        # GPUs TensorFlow runs a jit_compile step as its own function): XLA compiles the gradients; the batch's
        # preparation (the task may all-reduce there) and the update run outside it (optimization.py's module
        # docstring).
        compiled = tf.function(replica_step.gradients, jit_compile=True, autograph=autograph)

        def step_fn(features):
            return replica_step.update(*compiled(replica_step.prepare(features)))
    else:
        step_fn = tf.function(replica_step, jit_compile=bool(use_xla), autograph=autograph)

    def one_step(iterator):
        logs = strategy.run(step_fn, args=(next(iterator),))
        logs = {name: strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None) for name, value in logs.items()}
        with tf.control_dependencies(list(logs.values())):
            due = clock.flag.read_value() if clock is not None else tf.constant(0.0)
        noticed, due = notice.agreed(strategy, also=due)
        return logs, noticed, due

    def more_steps(i, total, iterator):
        logs, noticed, due = one_step(iterator)
        return i + 1, {name: total[name] + logs[name] for name in total}, noticed, due

    log_specs = {}

    @tf.function(autograph=False)
    def loop(iterator, n):
        zeros = {name: tf.zeros(shape, dtype) for name, (shape, dtype) in log_specs.items()}
        steps, total, noticed, due = tf.while_loop(
            lambda i, _, noticed, due: tf.logical_and(tf.logical_and(i < n, tf.reduce_all(noticed == 0.0)),
                                                      due <= 0.0),
            lambda i, t, _, __: more_steps(i, t, iterator),
            (tf.constant(0), zeros, notice.none(), tf.constant(0.0)))
        return LoopResult(steps, {name: value / tf.cast(steps, tf.float32) for name, value in total.items()},
                          noticed, due > 0.0)

    def train_loop(iterator, n):
        if not log_specs:
            probe = tf.function(one_step, autograph=False).get_concrete_function(iterator)
            log_specs.update({name: (t.shape, t.dtype) for name, t in probe.structured_outputs[0].items()})
        return loop(iterator, tf.convert_to_tensor(n, tf.int32))

    return train_loop


def build_training_state(task, config, strategy):
    """Creates model, optimizer (with slots) and loss scale under the strategy scope."""
    with strategy.scope():
        model = task.build_model(config.elementwise_dtype)
        optimizer = create_optimizer(config)
        optimizer.build(model.variables_by_name())
        loss_scale = _LossScale() if config.dtype == "float16" else None
    state = named_state(model, optimizer, loss_scale.named() if loss_scale is not None else None)
    return model, optimizer, loss_scale, state


def train(task, input_fn, config, strategy=None, init_checkpoint=None, max_steps=None):
    """Trains to config.num_train_steps (or max_steps if smaller, like Estimator.train(max_steps)) under
    `strategy` (the default one when None), resuming from output_dir, else starting from init_checkpoint; the
    learning-rate schedule always spans num_train_steps. Returns {"global_step", the logged means of the last
    progress line, "examples_per_sec" of the loops after the first (tracing and compiling left out), "compile_s":
    the first loop's tracing (and XLA compiling) time, when a later loop ran}. --use_xla and --elementwise_dtype
    left to the device are decided here when the caller did not (decide_for_device).

    Progress (_ProgressLog): a loop runs on the device without returning to the host until the next checkpoint,
    multiple of --log_step_count_steps or --save_summary_steps, or --iterations_per_loop steps, and ends early
    once the time of the next progress line (--log_every_secs after the last) has come (LineClock, agreed between
    the workers: _make_train_loop); the host then logs a line and writes summaries where they are due."""
    if config.num_train_steps < 1:
        raise UserError(f"--num_train_steps={config.num_train_steps}: expected a positive number of steps")
    config = decide_for_device(config)
    device_setup.make_cache_dir()
    _setup_run(config)
    strategy = strategy or tf.distribute.get_strategy()
    replicas = strategy.num_replicas_in_sync
    per_replica_batch = _per_replica_batch(config, replicas)
    chief = is_chief(strategy)

    # From here on a SIGTERM is a preemption notice: even during the start (restore, the first save, the trace)
    # it ends the run with a checkpoint after one step.
    notice = preemption.PreemptionNotice(strategy)
    with notice.watch(), LineClock() as clock:
        model, optimizer, loss_scale, state = build_training_state(task, config, strategy)
        global_step = _global_step_variable(optimizer, state)
        manager = _checkpoint_manager(config)
        latest = _restore_or_initialize(manager, state, model, config.output_dir, init_checkpoint, chief)
        start_step = int(global_step.numpy())
        total_steps = config.num_train_steps if max_steps is None else min(max_steps, config.num_train_steps)
        if start_step >= total_steps:
            logging.info("global step %d >= num_train_steps %d: nothing to train", start_step, total_steps)
            return {"global_step": start_step}
        saved_step = start_step if latest else None
        if not latest and chief:
            manager.save(state, start_step)
            saved_step = start_step

        iterator = iter(strategy.distribute_datasets_from_function(
            lambda input_context: _resumed_input(input_fn, per_replica_batch, input_context, start_step)))
        replica_step = _build_replica_step(task, model, optimizer, config, loss_scale, replicas)
        writer = tf.summary.create_file_writer(config.output_dir) if chief else tf.summary.create_noop_writer()
        train_loop = _make_train_loop(strategy, replica_step, config.use_xla, notice, task.autograph, clock)
        step = start_step
        loops = 0
        start_clock = _StartClock(config.use_xla)
        run_start = time.time()
        progress = _ProgressLog(writer, config, total_steps, run_start)
        while step < total_steps:
            next_save = (step // config.save_checkpoints_steps + 1) * config.save_checkpoints_steps
            n = min(config.iterations_per_loop, next_save - step, total_steps - step, progress.steps_to_next(step))
            loops += 1
            clock.set(progress.line_due)
            loop_start = time.time()
            try:
                with _profiling(config, chief and loops == config.profile_loop, loops, step, n):
                    result = train_loop(iterator, n)
                logs = {name: float(value) for name, value in result.logs.items()}
                elapsed = time.time() - loop_start
            except tf.errors.OutOfRangeError:
                logging.warning("Training input ended at global step %d before num_train_steps %d",
                                int(global_step.numpy()), total_steps)
                step = int(global_step.numpy())
                break
            except tf.errors.OpError as err:
                newest = f"model.ckpt-{saved_step}" if chief and saved_step is not None else None
                preemption.raise_lost_worker(err, strategy, f"after global step {step}", newest)
            step = int(global_step.numpy())
            noticed = bool(result.noticed.numpy().any())
            progress.loop(step, int(result.steps), logs, elapsed, bool(result.due), _learning_rate(optimizer, step),
                          last=noticed or step >= total_steps)
            start_clock.loop(elapsed, int(result.steps))
            if chief and (step % config.save_checkpoints_steps == 0 or step >= total_steps):
                manager.save(state, step)
                saved_step = step
            if noticed:
                break
        if chief and saved_step != step:
            manager.save(state, step)
        # The flags stay set: agreed again, they end a loop the notice stopped and a run it reached after the last
        # step's agreement (training done and saved) alike.
        noticed = tf.function(lambda: notice.agreed(strategy), autograph=False)().numpy()
        if noticed.any():
            raise preemption.preempted(noticed, strategy, step, saved=chief)
    if chief and config.profile_loop > loops:
        logging.warning("--profile_loop=%d: this run made %d training loops; nothing was traced",
                        config.profile_loop, loops)
    logging.info("Training done at global step %d in %.1f s", step, time.time() - run_start)
    result = dict(progress.last_logs)
    result["global_step"] = step
    if progress.examples_per_sec() is not None:
        result["examples_per_sec"] = progress.examples_per_sec()
    if start_clock.end() is not None:
        result["compile_s"] = start_clock.seconds
    return result


def decide_for_device(config):
    """The config with --use_xla and --elementwise_dtype decided for the device (device_setup.setup) where they
    were left to it. runner.Job decides them at start-up, before the strategy; a config decided is kept."""
    if config.use_xla is not None and config.elementwise_dtype != "auto":
        return config
    return device_setup.setup(config)


class _StartClock:
    """How long the first training loop spent tracing (and with XLA compiling) the step: its time less its steps
    at the speed of the loops after it (as many steps as it made, or 10 s of them, or all there are at the end).
    Logged once; `seconds` is None until a later loop ran."""

    MEASURE_S = 10.0

    def __init__(self, xla):
        self.what = "tracing and XLA compiling" if xla else "tracing"
        self.first = None
        self.later = [0.0, 0]
        self.seconds = None

    def loop(self, elapsed, steps):
        if self.first is None:
            self.first = (elapsed, steps)
            return
        if self.seconds is not None:
            return
        self.later[0] += elapsed
        self.later[1] += steps
        if self.later[1] >= self.first[1] or self.later[0] >= self.MEASURE_S:
            self._estimate()

    def _estimate(self):
        first_elapsed, first_steps = self.first
        later_elapsed, later_steps = self.later
        self.seconds = max(0.0, first_elapsed - first_steps * later_elapsed / max(later_steps, 1))
        logging.info("The first loop's %s took about %.1f s (the loop took %.1f s: less its %d steps at the "
                     "speed of the %d steps after it)", self.what, self.seconds, first_elapsed, first_steps,
                     later_steps)

    def end(self):
        """At the end of training: logs the first loop's time (estimated from the steps after it where there are
        any); returns `seconds`."""
        if self.first is not None and self.seconds is None:
            if self.later[1]:
                self._estimate()
            else:
                logging.info("The first loop (%s included, %d steps) took %.1f s", self.what, self.first[1],
                             self.first[0])
        return self.seconds


def _resumed_input(input_fn, batch_size, input_context, start_step):
    """The input of a run resumed at start_step: the batches consumed before it skipped (input is seeded)."""
    dataset = input_fn(batch_size, input_context)
    if start_step:
        logging.info("Skipping the %d batches consumed before step %d", start_step, start_step)
        dataset = dataset.skip(start_step)
    return dataset


def _restore_or_initialize(manager, state, model, output_dir, init_checkpoint, chief):
    """Resumes from the newest readable checkpoint of output_dir (returned), else loads init_checkpoint; never
    starts over checkpoints of the run's own that fail to read."""
    if chief:
        manager.clean_up()
    latest = manager.latest_checkpoint()
    if latest:
        step = manager.restore(state, latest)
        logging.info("Resumed from %s (global step %d)", latest, step)
    elif manager.has_checkpoints():
        raise UserError(f"--output_dir={output_dir} holds checkpoints of its own but none reads back whole "
                        f"(see the warnings above): not starting again from --init_checkpoint over them; remove "
                        f"or repair them")
    elif init_checkpoint:
        checkpoints.init_from_checkpoint(model.variables_by_name(), init_checkpoint)
    return latest


def _per_replica_batch(config, replicas):
    """--train_batch_size split over the replicas (an error unless replicas x accumulation steps divide it)."""
    k = config.gradient_accumulation_steps
    if config.train_batch_size % (replicas * k):
        raise UserError(f"--train_batch_size={config.train_batch_size} must be divisible by the "
                        f"{replicas} replicas x --gradient_accumulation_steps={k}")
    return config.train_batch_size // replicas


@contextlib.contextmanager
def _profiling(config, enabled, loop, first_step, n):
    """Traces one loop with tf.profiler into --output_dir when enabled (--profile_loop) and says where."""
    if not enabled:
        yield
        return
    tf.profiler.experimental.start(config.output_dir)
    try:
        yield
    finally:
        tf.profiler.experimental.stop()  # after the loop's results are back on the host
        logging.info("Traced training loop %d (steps %d-%d) into %s (TensorBoard's Profile tab; "
                     "benchmarks/profile_summary.py prints where the time went)", loop, first_step + 1,
                     first_step + n, os.path.join(config.output_dir, "plugins", "profile"))


class _Interval:
    """The steps since a progress line or summary: how many, their loops' time and the sums of their logged
    values; the run's first loop (tracing, maybe compiling) counted apart, so that the speed leaves it out where
    later loops were measured."""

    def __init__(self):
        self.steps, self.seconds, self.sums = 0, 0.0, {}
        self.first_loop = None

    def add(self, steps, seconds, logs, first_loop=False):
        self.steps += steps
        self.seconds += seconds
        for name, value in logs.items():
            self.sums[name] = self.sums.get(name, 0.0) + value * steps
        if first_loop:
            self.first_loop = (steps, seconds)

    def means(self):
        return {name: value / self.steps for name, value in self.sums.items()}

    def steps_per_sec(self):
        steps, seconds = self.steps, self.seconds
        if self.first_loop is not None and steps > self.first_loop[0]:
            steps, seconds = steps - self.first_loop[0], seconds - self.first_loop[1]
        return steps / max(seconds, 1e-9)


class _ProgressLog:
    """A training run's progress: a log line at least every --log_step_count_steps steps and every
    --log_every_secs seconds (whichever comes first) and TensorBoard summaries every --save_summary_steps steps,
    each over the steps since the one before (mean losses, examples/s), and both at the run's last step."""

    def __init__(self, writer, config, total_steps, run_start):
        self.writer, self.total_steps, self.run_start = writer, total_steps, run_start
        self.batch_size = config.train_batch_size
        self.line_steps, self.summary_steps = config.log_step_count_steps, config.save_summary_steps
        self.every_secs = config.log_every_secs
        self.line_due = run_start + self.every_secs
        self.since_line, self.since_summary = _Interval(), _Interval()
        self.run = _Interval()  # the run's speed: its loops after the first where there are any
        self.last_logs = {}

    def steps_to_next(self, step):
        """Steps from `step` to the next multiple of --log_step_count_steps or --save_summary_steps."""
        return min(every - step % every for every in (self.line_steps, self.summary_steps))

    def loop(self, step, steps, logs, seconds, due, lr, last):
        """Counts a loop of `steps` steps ending at `step` (`due`: it ended as the line's time came), then logs
        the line and writes the summaries due (`last`: the run's last step)."""
        first_loop = not self.run.steps
        for interval in (self.since_line, self.since_summary):
            interval.add(steps, seconds, logs, first_loop)
        self.run.add(steps, seconds, {}, first_loop)
        now = time.time()
        if last or due or now >= self.line_due or step % self.line_steps == 0:
            self._line(step, lr, now)
        if last or step % self.summary_steps == 0:
            self._summaries(step, lr)

    def _line(self, step, lr, now):
        interval, self.since_line = self.since_line, _Interval()
        self.line_due = now + self.every_secs
        self.last_logs = interval.means()
        steps_per_sec = interval.steps_per_sec()
        logging.info("step %d/%d: %s, lr = %.3g, %.1f examples/s, elapsed %s, ETA %s", step, self.total_steps,
                     ", ".join(f"{name} = {value:.5g}" for name, value in sorted(self.last_logs.items())), lr,
                     steps_per_sec * self.batch_size, _format_duration(now - self.run_start),
                     _format_duration((self.total_steps - step) / steps_per_sec))

    def _summaries(self, step, lr):
        interval, self.since_summary = self.since_summary, _Interval()
        steps_per_sec = interval.steps_per_sec()
        with self.writer.as_default(step=step):
            for name, value in interval.means().items():
                tf.summary.scalar(name, value)
            tf.summary.scalar("learning_rate", lr)
            tf.summary.scalar("examples_per_sec", steps_per_sec * self.batch_size)
            tf.summary.scalar("global_step/sec", steps_per_sec)
        self.writer.flush()

    def examples_per_sec(self):
        """The run's speed: that of its loops after the first, else of the first; None before a loop ran."""
        return self.run.steps_per_sec() * self.batch_size if self.run.steps else None


def _restore_for_inference(model, checkpoint_path):
    """Loads the weights of checkpoint_path (chosen by the caller: checkpoints.checkpoint_for_inference);
    returns its global step. None: the model keeps its random initial weights (logged)."""
    if not checkpoint_path:
        logging.warning("No checkpoint in --output_dir and no --init_checkpoint: using random weights")
        return 0
    checkpoints.init_from_checkpoint(model.variables_by_name(), checkpoint_path)
    return checkpoints.global_step_of(checkpoint_path)


def _replica_function(fn, config, task):
    """An inference step's per-replica function: compiled with XLA under --use_xla (each replica's part; the
    strategy's run and reductions stay outside, as in training)."""
    if not config.use_xla:
        return fn
    return tf.function(fn, jit_compile=True, autograph=task.autograph, reduce_retracing=True)


class _PassProgress:
    """An evaluation or prediction pass's progress: a log line at least every --log_every_secs seconds with the
    examples done (of `total` where known, with the ETA; `bound`: total is an upper bound, say why) and their
    speed, and one at the end."""

    def __init__(self, what, every_secs, total=None, bound=None):
        self.what, self.every_secs, self.total, self.bound = what, every_secs, total, bound
        self.start = time.time()
        self.due = self.start + every_secs
        self.done = 0

    def add(self, examples):
        self.done += examples
        now = time.time()
        if now >= self.due:
            self.due = now + self.every_secs
            elapsed = now - self.start
            rate = self.done / max(elapsed, 1e-9)
            if self.total:
                done = f"{self.done:,}/{self.total:,} examples ({100.0 * self.done / self.total:.0f}%"
                done += f"; {self.bound})" if self.bound else ")"
                eta = f", ETA {_format_duration(max(self.total - self.done, 0) / max(rate, 1e-9))}"
            else:
                done, eta = f"{self.done:,} examples", ""
            logging.info("%s: %s, %.1f examples/s, elapsed %s%s", self.what, done, rate, _format_duration(elapsed),
                         eta)

    def end(self):
        elapsed = time.time() - self.start
        logging.info("%s: %s examples in %s (%.1f examples/s)", self.what, f"{self.done:,}",
                     _format_duration(elapsed), self.done / max(elapsed, 1e-9))


def _batch_size(features, strategy):
    """The examples of a (distributed) batch, over this worker's replicas."""
    first = tf.nest.flatten(features, expand_composites=False)[0]
    return sum(int(tf.shape(part)[0]) for part in strategy.experimental_local_results(first))


def evaluate(task, input_fn, config, strategy=None, checkpoint_path=None, max_steps=None, total_examples=None):
    """One deterministic pass (at most max_steps batches) under `strategy` (the default one when None) with the
    weights of checkpoint_path; returns the results (the job writes them: runner.format_eval_results). Under XLA
    each replica's batch is compiled (once per input shape). Progress lines (_PassProgress) count the examples
    against total_examples, when the caller knows it, else against max_steps batches."""
    config = decide_for_device(config)
    set_precision_policy(config.dtype)
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        model = task.build_model(config.elementwise_dtype)
    global_step = _restore_for_inference(model, checkpoint_path)
    dataset = input_fn(config.eval_batch_size, None)
    if max_steps is not None:
        dataset = dataset.take(max_steps)
    dist = strategy.experimental_distribute_dataset(dataset)

    def replica_eval(features):
        loss, metrics = task.evaluate_batch(model, features)
        return tf.cast(loss, tf.float32), {name: (tf.cast(num, tf.float64), tf.cast(den, tf.float64))
                                           for name, (num, den) in metrics.items()}

    replica_step = _replica_function(replica_eval, config, task)

    @tf.function(autograph=task.autograph, reduce_retracing=True)
    def eval_step(features):
        loss, metrics = strategy.run(replica_step, args=(features,))
        loss = strategy.reduce(tf.distribute.ReduceOp.MEAN, loss, axis=None)
        metrics = {name: (strategy.reduce(tf.distribute.ReduceOp.SUM, num, axis=None),
                          strategy.reduce(tf.distribute.ReduceOp.SUM, den, axis=None))
                   for name, (num, den) in metrics.items()}
        return loss, metrics

    loss_sum, batches, sums = 0.0, 0, {}
    progress = _PassProgress("evaluation", config.log_every_secs, total_examples)
    if total_examples is None and max_steps is not None:
        progress = _PassProgress("evaluation", config.log_every_secs, max_steps * config.eval_batch_size,
                                 bound=f"at most {max_steps} batches")
    for features in dist:
        loss, metrics = eval_step(features)
        progress.add(_batch_size(features, strategy))
        loss_sum += float(loss)
        batches += 1
        for name, (num, den) in metrics.items():
            acc = sums.setdefault(name, [0.0, 0.0])
            acc[0] += float(num)
            acc[1] += float(den)
    if not batches:
        raise ValueError("evaluation input is empty")
    progress.end()
    results = {name: (num / den if den else float("nan")) for name, (num, den) in sums.items()}
    results["loss"] = loss_sum / batches
    results["global_step"] = global_step
    logging.info("Eval of %s on %d batches: %s", checkpoint_path, batches, results)
    return results


def predict(task, input_fn, config, strategy=None, checkpoint_path=None, total_examples=None, what="prediction"):
    """Yields one {name: numpy value} per example, in input order, under `strategy` (the default one when None)
    with the weights of checkpoint_path. Under XLA each replica's batch is compiled (once per input shape:
    runner.predict_arrays gives a few, bucketed). Progress lines (_PassProgress, starting with `what`) count the
    examples against total_examples when the caller knows it."""
    config = decide_for_device(config)
    set_precision_policy(config.dtype)
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        model = task.build_model(config.elementwise_dtype)
    _restore_for_inference(model, checkpoint_path)
    dist = strategy.experimental_distribute_dataset(input_fn(config.predict_batch_size, None))
    replica_step = _replica_function(lambda f: task.predict_outputs(model, f), config, task)

    @tf.function(autograph=task.autograph, reduce_retracing=True)
    def predict_step(features):
        return strategy.run(replica_step, args=(features,))

    progress = _PassProgress(what, config.log_every_secs, total_examples)
    for features in dist:
        outputs = predict_step(features)
        columns = {}
        for name, value in outputs.items():
            parts = [np.asarray(v) for v in strategy.experimental_local_results(value)]
            columns[name] = np.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]
        size = len(next(iter(columns.values()))) if columns else 0
        progress.add(size)
        for i in range(size):
            yield {name: column[i] for name, column in columns.items()}
    progress.end()
