"""Estimator-style train / evaluate / predict loop shared by every runner.

A runner describes its job with a `Task` and an input function, and this module does the rest: distribution
strategy, XLA, mixed precision, gradient accumulation, original-format checkpoints (`model.ckpt-STEP` plus the
`checkpoint` state file) every `save_checkpoints_steps`, automatic resume from `output_dir`, `init_checkpoint`
when starting fresh, TensorBoard summaries and a log line per loop.

Usage:

    import training

    class MyTask(training.Task):
        def build_model(self):                      # called under the strategy scope; variables must exist
            model = MyModel(...); model(dummy_inputs); return model   # model.variables_by_name() required
        def compute_loss(self, model, features, training):
            out = model(features, training=training)
            return out["loss"], {"loss": out["loss"]}
        def eval_metrics(self, model, features):    # name -> (numerator, denominator), summed over batches
            ...
        def predict_outputs(self, model, features): # name -> per-example tensor (batch first)
            ...

    def input_fn(batch_size, input_context):         # per-replica batch size, tf.distribute.InputContext
        return tf.data.Dataset...                    # deterministic (seeded); repeat() for training

    config = training.TrainingConfig.from_flags(FLAGS)        # or TrainingConfig(output_dir=..., ...)
    strategy = training.create_strategy(config)
    training.train(MyTask(), input_fn, config, strategy)       # -> dict with global_step and last losses
    results = training.evaluate(MyTask(), eval_input_fn, config, strategy, max_steps=None)
    for example in training.predict(MyTask(), predict_input_fn, config, strategy): ...

Resume: the input function must be deterministic (seeded); on restart the loop skips the batches already
consumed (one per global step). With `deterministic=True` (--deterministic) it also enables TensorFlow op
determinism and restarts the random streams (dropout) at every checkpoint from the global step, so a run
killed and restarted with the same command ends with exactly the weights of an uninterrupted run (CPU, no
XLA: XLA's random numbers are not reproducible).
"""
import contextlib
import dataclasses
import math
import os
import time

import numpy as np
import tensorflow as tf
from absl import flags
from absl import logging

DISTRIBUTION_STRATEGIES = ("default", "mirrored", "multi_worker_mirrored", "tpu")
DTYPES = ("float32", "bfloat16", "float16")
OPTIMIZERS = ("adamw", "lamb")
EVAL_RESULTS_FILE = "eval_results.txt"


def define_training_flags(include_num_steps=False, flag_values=None, **defaults):
    """Defines the flags every runner shares (original names); `defaults` overrides default values.

    include_num_steps adds num_train_steps and num_warmup_steps (run_pretraining); fine-tuning runners derive
    them from epochs and define their own flags for that. flag_values: absl FlagValues (default flags.FLAGS).
    """
    fv = flag_values if flag_values is not None else flags.FLAGS
    d = dict(bert_config_file=None, init_checkpoint=None, output_dir=None, train_batch_size=32,
             eval_batch_size=8, predict_batch_size=8, learning_rate=5e-5, num_train_steps=100000,
             num_warmup_steps=10000, save_checkpoints_steps=1000, iterations_per_loop=1000, keep_checkpoint_max=5)
    unknown = set(defaults) - set(d)
    if unknown:
        raise ValueError(f"define_training_flags: unknown defaults {sorted(unknown)}")
    d.update(defaults)

    def define(kind, name, default, help_text, *enum_values):
        define_fn = getattr(flags, "DEFINE_" + kind)
        if enum_values:
            return define_fn(name, default, list(enum_values), help_text, flag_values=fv)
        return define_fn(name, default, help_text, flag_values=fv)

    define("string", "bert_config_file", d["bert_config_file"],
           "The config json file corresponding to the pre-trained BERT model.")
    define("string", "init_checkpoint", d["init_checkpoint"],
           "Initial checkpoint (usually from a pre-trained BERT model).")
    define("string", "output_dir", d["output_dir"],
           "The output directory where the model checkpoints will be written.")
    define("integer", "train_batch_size", d["train_batch_size"], "Total batch size for training.")
    define("integer", "eval_batch_size", d["eval_batch_size"], "Total batch size for eval.")
    define("integer", "predict_batch_size", d["predict_batch_size"], "Total batch size for predict.")
    define("float", "learning_rate", d["learning_rate"], "The initial learning rate for Adam.")
    if include_num_steps:
        define("integer", "num_train_steps", d["num_train_steps"], "Number of training steps.")
        define("integer", "num_warmup_steps", d["num_warmup_steps"], "Number of warmup steps.")
    define("integer", "save_checkpoints_steps", d["save_checkpoints_steps"],
           "How often to save the model checkpoint.")
    define("integer", "iterations_per_loop", d["iterations_per_loop"],
           "How many steps to make in each estimator call (one log line per loop).")
    define("bool", "use_tpu", False, "Whether to use TPU or GPU/CPU.")
    define("string", "tpu_name", None, "The Cloud TPU to use for training.")
    define("string", "tpu_zone", None, "GCE zone where the Cloud TPU is located in.")
    define("string", "gcp_project", None, "Project name for the Cloud TPU-enabled project.")
    define("string", "master", None, "TensorFlow master URL.")
    define("integer", "num_tpu_cores", 8, "Only used if `use_tpu` is True. Total number of TPU cores to use.")
    define("enum", "distribution_strategy", "default",
           "default: one device; mirrored: all local GPUs; multi_worker_mirrored: workers from TF_CONFIG; "
           "tpu: a Cloud TPU (also chosen by --use_tpu).", *DISTRIBUTION_STRATEGIES)
    define("bool", "use_xla", False, "Compile the train step with XLA (jit_compile).")
    define("enum", "dtype", "float32",
           "Compute dtype: float32, bfloat16 (mixed), float16 (mixed, dynamic loss scaling).", *DTYPES)
    define("enum", "optimizer", "adamw", "adamw (the original) or lamb.", *OPTIMIZERS)
    define("integer", "gradient_accumulation_steps", 1,
           "Micro-batches per optimizer step; train_batch_size is the batch of one step.")
    define("integer", "keep_checkpoint_max", d["keep_checkpoint_max"], "How many checkpoints to keep.")
    define("bool", "deterministic", False,
           "Enable TensorFlow op determinism (exactly reproducible runs and resumes on CPU).")
    define("integer", "seed", 12345, "Seed of initialisation, dropout, shuffling and dynamic masking.")


def num_train_steps_for(num_examples, train_batch_size, num_train_epochs, warmup_proportion):
    """(num_train_steps, num_warmup_steps) as the original fine-tuning scripts compute them."""
    num_train_steps = int(num_examples / train_batch_size * num_train_epochs)
    return num_train_steps, int(num_train_steps * warmup_proportion)


def define_finetuning_flags(max_seq_length_help, flag_values=None):
    """Defines the flags the fine-tuning runners share (original names, defaults and help)."""
    fv = flag_values if flag_values is not None else flags.FLAGS
    flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.",
                        flag_values=fv)
    flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text. Should be True for uncased "
                      "models and False for cased models.", flag_values=fv)
    flags.DEFINE_integer("max_seq_length", 128, "The maximum total input sequence length after WordPiece "
                         "tokenization. " + max_seq_length_help, flag_values=fv)
    flags.DEFINE_bool("do_train", False, "Whether to run training.", flag_values=fv)
    flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.", flag_values=fv)
    flags.DEFINE_bool("do_predict", False, "Whether to run the model in inference mode on the test set.",
                      flag_values=fv)
    flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.", flag_values=fv)
    flags.DEFINE_float("warmup_proportion", 0.1, "Proportion of training to perform linear learning rate "
                       "warmup for. E.g., 0.1 = 10% of training.", flag_values=fv)


@dataclasses.dataclass
class TrainingConfig:
    """Everything the loop needs; build it from flags (`from_flags`) or directly with keyword arguments."""
    output_dir: str = None
    bert_config_file: str = None
    init_checkpoint: str = None
    train_batch_size: int = 32
    eval_batch_size: int = 8
    predict_batch_size: int = 8
    learning_rate: float = 5e-5
    num_train_steps: int = 0
    num_warmup_steps: int = 0
    save_checkpoints_steps: int = 1000
    iterations_per_loop: int = 1000
    use_tpu: bool = False
    tpu_name: str = None
    tpu_zone: str = None
    gcp_project: str = None
    master: str = None
    num_tpu_cores: int = 8
    distribution_strategy: str = "default"
    use_xla: bool = False
    dtype: str = "float32"
    optimizer: str = "adamw"
    gradient_accumulation_steps: int = 1
    keep_checkpoint_max: int = 5
    deterministic: bool = False
    seed: int = 12345

    def __post_init__(self):
        self.validate()

    def validate(self):
        """Raises ValueError naming the flag whose value is not allowed."""
        if self.distribution_strategy not in DISTRIBUTION_STRATEGIES:
            raise ValueError(f"--distribution_strategy={self.distribution_strategy!r}: expected one of "
                             f"{DISTRIBUTION_STRATEGIES}")
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype={self.dtype!r}: expected one of {DTYPES}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"--optimizer={self.optimizer!r}: expected one of {OPTIMIZERS}")
        for name in ("train_batch_size", "eval_batch_size", "predict_batch_size", "save_checkpoints_steps",
                     "iterations_per_loop", "gradient_accumulation_steps", "keep_checkpoint_max"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"--{name}={getattr(self, name)}: expected a positive integer")
        for name in ("num_train_steps", "num_warmup_steps"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"--{name}={getattr(self, name)}: expected a non-negative integer")
        if self.train_batch_size % self.gradient_accumulation_steps:
            raise ValueError(f"--train_batch_size={self.train_batch_size} is not divisible by "
                             f"--gradient_accumulation_steps={self.gradient_accumulation_steps}")

    @classmethod
    def from_flags(cls, flag_values=None, **overrides):
        """Config from absl flags (the fields that are defined as flags), then keyword overrides."""
        flag_values = flag_values if flag_values is not None else flags.FLAGS
        values = {}
        for field in dataclasses.fields(cls):
            if field.name in flag_values:
                values[field.name] = flag_values[field.name].value
        values.update(overrides)
        return cls(**values)

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
            raise ValueError("--distribution_strategy=multi_worker_mirrored needs the TF_CONFIG environment "
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


def set_precision_policy(dtype):
    """Keras global dtype policy for config.dtype."""
    import keras
    policy = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}[dtype]
    keras.config.set_dtype_policy(policy)


@contextlib.contextmanager
def float32_policy():
    """Keras dtype policy float32 inside the block (exports serve in float32 whatever --dtype trained)."""
    import keras
    policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    try:
        yield
    finally:
        keras.config.set_dtype_policy(policy)


class Task:
    """What a runner supplies. Subclass and override; methods run inside the strategy's replica context.

    The step functions are traced with autograph off (much faster tracing): write tensor-dependent control
    flow with tf.cond / tf.while_loop, or set `autograph = True` on the task.
    """

    autograph = False

    def build_model(self):
        """Returns the model with its variables created (called under the strategy scope).

        The model must offer variables_by_name() -> {original name: variable}.
        """
        raise NotImplementedError

    def compute_loss(self, model, features, training):
        """Returns (loss scalar, {name: scalar} to log) for one (micro-)batch on one replica."""
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

    def final_eval_results(self, results):
        """Hook to derive further results from the accumulated ones (dict of python floats)."""
        return results


# ---------------------------------------------------------------------------------------------------------
# Optimizer and checkpoint glue.


def create_optimizer(config):
    import optimization
    return optimization.create_optimizer(
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


def _model_variables(model):
    return dict(model.variables_by_name())


def _read_global_step(checkpoint_path):
    try:
        return int(tf.train.load_variable(checkpoint_path, "global_step"))
    except (tf.errors.NotFoundError, ValueError):
        return 0


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
        def on_good():
            grow = self.good_steps + 1 >= 2000
            self.scale.assign(tf.where(grow, self.scale * 2.0, self.scale))
            self.good_steps.assign(tf.where(grow, tf.constant(0, tf.int64), self.good_steps + 1))

        def on_bad():
            self.scale.assign(tf.maximum(self.scale / 2.0, 1.0))
            self.good_steps.assign(0)

        tf.cond(finite, on_good, on_bad)


def _apply_gradients(optimizer, grads, variables):
    """Applies micro-batch-averaged gradients; the optimizer averages them over replicas, clips, updates."""
    optimizer.apply_gradients([(g, v) for g, v in zip(grads, variables) if g is not None])


def _global_step_variable(optimizer, state):
    step = getattr(optimizer, "global_step", None)
    if step is None:
        step = state.get("global_step")
    if step is None:
        raise ValueError("the optimizer exposes no global_step variable")
    return step


def _learning_rate(optimizer, step):
    lr = getattr(optimizer, "learning_rate", None)
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
    import checkpoints
    return checkpoints.CheckpointManager(config.output_dir, max_to_keep=config.keep_checkpoint_max)


def _format_eta(seconds):
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _build_replica_step(task, model, optimizer, config, loss_scale, num_replicas):
    k = config.gradient_accumulation_steps
    variables = [v for v in model.variables_by_name().values() if getattr(v, "trainable", True)]

    def micro_grads(features):
        with tf.GradientTape() as tape:
            loss, logs = task.compute_loss(model, features, training=True)
            loss = tf.cast(loss, tf.float32)
            scaled = loss * loss_scale.scale if loss_scale is not None else loss
        grads = tape.gradient(scaled, variables)
        # Variables without a gradient (e.g. an unused pooler) are left alone, as the original does.
        grads = [None if g is None else tf.convert_to_tensor(g) for g in grads]
        logs = {name: tf.cast(value, tf.float32) for name, value in logs.items()}
        logs.setdefault("loss", loss)
        return logs, grads

    def replica_step(features):
        features = task.prepare_batch(features, k)
        if k == 1:
            logs, grads = micro_grads(features)
        else:
            logs, grads = micro_grads(_split_micro_batches(features, k, 0))

            present = [i for i, g in enumerate(grads) if g is not None]

            def accumulate(i, sums, logs):
                micro_logs, micro = micro_grads(_split_micro_batches(features, k, i))
                return (i + 1, [s + micro[j] for s, j in zip(sums, present)],
                        {name: logs[name] + micro_logs[name] for name in logs})

            _, sums, logs = tf.while_loop(lambda i, *_: i < k, accumulate,
                                          (tf.constant(1), [grads[j] for j in present], logs))
            grads = [None] * len(variables)
            for j, total in zip(present, sums):
                grads[j] = total / float(k)
            logs = {name: value / float(k) for name, value in logs.items()}
        if loss_scale is None:
            _apply_gradients(optimizer, grads, variables)
        else:
            grads = [None if g is None else g / loss_scale.scale for g in grads]
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads if g is not None])
            tf.cond(finite, lambda: _apply_gradients(optimizer, grads, variables) or tf.no_op(), tf.no_op)
            loss_scale.update(finite)
            logs["loss_scale"] = tf.identity(loss_scale.scale)
        return logs

    return replica_step


def _make_train_loop(strategy, replica_step, use_xla, autograph=False):
    """tf.function running n steps from the iterator; returns the mean of the logged values.

    Every step runs through the one call site inside the while loop: a stateful random op (dropout) gets one
    kernel per call site, all seeded alike, so a step called before the loop would repeat the masks of a step
    inside it. The loop starts from zeros shaped by a trace of one step that never runs (the step function
    itself is traced once and reused).
    """
    # Autograph is off (Task.autograph) as it triples the tracing time.
    step_fn = tf.function(replica_step, jit_compile=bool(use_xla), autograph=autograph)

    def one_step(iterator):
        logs = strategy.run(step_fn, args=(next(iterator),))
        return {name: strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None)
                for name, value in logs.items()}

    def more_steps(i, total, iterator):
        logs = one_step(iterator)
        return i + 1, {name: total[name] + logs[name] for name in total}

    log_specs = {}

    @tf.function(autograph=False)
    def loop(iterator, n):
        zeros = {name: tf.zeros(shape, dtype) for name, (shape, dtype) in log_specs.items()}
        _, total = tf.while_loop(lambda i, _: i < n, lambda i, t: more_steps(i, t, iterator),
                                 (tf.constant(0), zeros))
        return {name: value / tf.cast(n, tf.float32) for name, value in total.items()}

    def train_loop(iterator, n):
        if not log_specs:
            probe = tf.function(one_step, autograph=False).get_concrete_function(iterator)
            log_specs.update({name: (t.shape, t.dtype) for name, t in probe.structured_outputs.items()})
        return loop(iterator, n)

    return train_loop


def build_training_state(task, config, strategy):
    """Creates model, optimizer (with slots) and loss scale under the strategy scope."""
    with strategy.scope():
        model = task.build_model()
        optimizer = create_optimizer(config)
        optimizer.build(model.variables_by_name())
        loss_scale = _LossScale() if config.dtype == "float16" else None
    state = named_state(model, optimizer, loss_scale.named() if loss_scale is not None else None)
    return model, optimizer, loss_scale, state


def train(task, input_fn, config, strategy=None, max_steps=None):
    """Trains to config.num_train_steps (or max_steps if smaller, like Estimator.train(max_steps)), resuming
    from output_dir; the learning-rate schedule always spans num_train_steps. Returns {"global_step", the
    logged means of the last loop, "examples_per_sec" of the last loop}."""
    if not config.output_dir:
        raise ValueError("--output_dir is required for training")
    if config.num_train_steps < 1:
        raise ValueError(f"--num_train_steps={config.num_train_steps}: expected a positive number of steps")
    _setup_run(config)
    strategy = strategy or create_strategy(config)
    replicas = strategy.num_replicas_in_sync
    k = config.gradient_accumulation_steps
    if config.train_batch_size % (replicas * k):
        raise ValueError(f"--train_batch_size={config.train_batch_size} must be divisible by the "
                         f"{replicas} replicas x --gradient_accumulation_steps={k}")
    per_replica_batch = config.train_batch_size // replicas
    chief = is_chief(strategy)
    tf.io.gfile.makedirs(config.output_dir)

    model, optimizer, loss_scale, state = build_training_state(task, config, strategy)
    global_step = _global_step_variable(optimizer, state)
    manager = _checkpoint_manager(config)
    latest = manager.latest_checkpoint()
    if latest:
        manager.restore(state, latest)
        logging.info("Resumed from %s (global step %d)", latest, int(global_step.numpy()))
    elif config.init_checkpoint:
        import checkpoints
        checkpoints.init_from_checkpoint(model.variables_by_name(), config.init_checkpoint)
    start_step = int(global_step.numpy())
    total_steps = config.num_train_steps if max_steps is None else min(max_steps, config.num_train_steps)
    if start_step >= total_steps:
        logging.info("global step %d >= num_train_steps %d: nothing to train", start_step, total_steps)
        return {"global_step": start_step}
    saved_step = start_step if latest else None
    if not latest and chief:
        manager.save(state, start_step)
        saved_step = start_step

    def dataset_fn(input_context):
        dataset = input_fn(per_replica_batch, input_context)
        if start_step:
            logging.info("Skipping the %d batches consumed before step %d", start_step, start_step)
            dataset = dataset.skip(start_step)
        return dataset

    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
    replica_step = _build_replica_step(task, model, optimizer, config, loss_scale, replicas)
    writer = tf.summary.create_file_writer(config.output_dir) if chief else tf.summary.create_noop_writer()

    step = start_step
    logs = {}
    examples_per_sec = None
    train_loop = None
    run_start = time.time()
    while step < total_steps:
        if train_loop is None or (config.deterministic and step % config.save_checkpoints_steps == 0):
            # Deterministic runs restart the random streams (dropout) at every checkpoint from the global
            # step, so that a resumed run draws what an uninterrupted one draws.
            tf.random.set_seed(config.seed + step)
            train_loop = _make_train_loop(strategy, replica_step, config.use_xla, task.autograph)
        next_save = (step // config.save_checkpoints_steps + 1) * config.save_checkpoints_steps
        n = min(config.iterations_per_loop, next_save - step, total_steps - step)
        loop_start = time.time()
        try:
            logs = train_loop(iterator, tf.constant(n, tf.int32))
        except tf.errors.OutOfRangeError:
            logging.warning("Training input ended at global step %d before num_train_steps %d",
                            int(global_step.numpy()), total_steps)
            step = int(global_step.numpy())
            break
        logs = {name: float(value) for name, value in logs.items()}
        step = int(global_step.numpy())
        elapsed = time.time() - loop_start
        examples_per_sec = n * config.train_batch_size / max(elapsed, 1e-9)
        lr = _learning_rate(optimizer, step)
        eta = (total_steps - step) * elapsed / n
        logging.info("step %d/%d: %s, lr = %.3g, %.1f examples/s, ETA %s", step, total_steps,
                     ", ".join(f"{name} = {value:.5g}" for name, value in sorted(logs.items())), lr,
                     examples_per_sec, _format_eta(eta))
        with writer.as_default(step=step):
            for name, value in logs.items():
                tf.summary.scalar(name, value)
            tf.summary.scalar("learning_rate", lr)
            tf.summary.scalar("examples_per_sec", examples_per_sec)
            tf.summary.scalar("global_step/sec", n / max(elapsed, 1e-9))
        writer.flush()
        if chief and (step % config.save_checkpoints_steps == 0 or step >= total_steps):
            manager.save(state, step)
            saved_step = step
    if chief and saved_step != step:
        manager.save(state, step)
    logging.info("Training done at global step %d in %.1f s", step, time.time() - run_start)
    result = dict(logs)
    result["global_step"] = step
    if examples_per_sec is not None:
        result["examples_per_sec"] = examples_per_sec
    return result


def _restore_for_inference(model, config, checkpoint_path):
    """Loads model weights: the given checkpoint, else the latest in output_dir, else init_checkpoint."""
    import checkpoints
    path = checkpoint_path
    if not path and config.output_dir:
        path = _checkpoint_manager(config).latest_checkpoint()
    if not path:
        path = config.init_checkpoint
    if not path:
        logging.warning("No checkpoint in --output_dir and no --init_checkpoint: using random weights")
        return None, 0
    checkpoints.init_from_checkpoint(model.variables_by_name(), path)
    return path, _read_global_step(path)


def evaluate(task, input_fn, config, strategy=None, max_steps=None, checkpoint_path=None,
             results_file=EVAL_RESULTS_FILE):
    """One deterministic pass (at most max_steps batches); returns results and writes `key = value` lines."""
    set_precision_policy(config.dtype)
    strategy = strategy or create_strategy(config)
    with strategy.scope():
        model = task.build_model()
    path, global_step = _restore_for_inference(model, config, checkpoint_path)
    dataset = input_fn(config.eval_batch_size, None)
    if max_steps is not None:
        dataset = dataset.take(max_steps)
    dist = strategy.experimental_distribute_dataset(dataset)

    def replica_eval(features):
        loss, metrics = task.evaluate_batch(model, features)
        return tf.cast(loss, tf.float32), {name: (tf.cast(num, tf.float64), tf.cast(den, tf.float64))
                                           for name, (num, den) in metrics.items()}

    @tf.function(autograph=task.autograph, reduce_retracing=True)
    def eval_step(features):
        loss, metrics = strategy.run(replica_eval, args=(features,))
        loss = strategy.reduce(tf.distribute.ReduceOp.MEAN, loss, axis=None)
        metrics = {name: (strategy.reduce(tf.distribute.ReduceOp.SUM, num, axis=None),
                          strategy.reduce(tf.distribute.ReduceOp.SUM, den, axis=None))
                   for name, (num, den) in metrics.items()}
        return loss, metrics

    loss_sum, batches, sums = 0.0, 0, {}
    for features in dist:
        loss, metrics = eval_step(features)
        loss_sum += float(loss)
        batches += 1
        for name, (num, den) in metrics.items():
            acc = sums.setdefault(name, [0.0, 0.0])
            acc[0] += float(num)
            acc[1] += float(den)
    if not batches:
        raise ValueError("evaluation input is empty")
    results = {name: (num / den if den else float("nan")) for name, (num, den) in sums.items()}
    results["loss"] = loss_sum / batches
    results = task.final_eval_results(results)
    results["global_step"] = global_step
    logging.info("Eval of %s on %d batches: %s", path, batches, results)
    if results_file and config.output_dir and is_chief(strategy):
        write_eval_results(os.path.join(config.output_dir, results_file), results)
    return results


def write_eval_results(path, results):
    """Writes sorted `key = value` lines like the original (floats as float32, integers as integers)."""
    tf.io.gfile.makedirs(os.path.dirname(path) or ".")
    with tf.io.gfile.GFile(path, "w") as writer:
        logging.info("***** Eval results *****")
        for key in sorted(results):
            value = results[key]
            text = str(value) if isinstance(value, (int, np.integer)) else str(np.float32(value))
            logging.info("  %s = %s", key, text)
            writer.write(f"{key} = {text}\n")


def predict(task, input_fn, config, strategy=None, checkpoint_path=None):
    """Yields one {name: numpy value} per example, in input order."""
    set_precision_policy(config.dtype)
    strategy = strategy or create_strategy(config)
    with strategy.scope():
        model = task.build_model()
    _restore_for_inference(model, config, checkpoint_path)
    dist = strategy.experimental_distribute_dataset(input_fn(config.predict_batch_size, None))

    @tf.function(autograph=task.autograph, reduce_retracing=True)
    def predict_step(features):
        return strategy.run(lambda f: task.predict_outputs(model, f), args=(features,))

    for features in dist:
        outputs = predict_step(features)
        columns = {}
        for name, value in outputs.items():
            parts = [np.asarray(v) for v in strategy.experimental_local_results(value)]
            columns[name] = np.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]
        size = len(next(iter(columns.values()))) if columns else 0
        for i in range(size):
            yield {name: column[i] for name, column in columns.items()}
