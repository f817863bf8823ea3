"""One shape for every script's job (run_*.py, extract_features.py); each script supplies only its task.

  Options: FinetuningOptions, the flags every fine-tuning runner has (cli.define_flags makes them flags): the
    model's (model_options.ModelOptions), the loop's (training.TrainingConfig) and the job's;
    RecordFinetuningOptions adds --shuffle_buffer_size for the runners that train from feature TFRecords.
  The job: Job. Construction checks what needs no data (required flags, the model: BERT config, sequence length,
    vocab and its special tokens, casing, init_checkpoint); run() makes the strategy first (before any TensorFlow
    op), reads and checks the data, makes the output folder, then runs the steps the flags ask for, in the order
    of Job.steps: outputs and results written once, by the chief; inference on the chief alone, on its own
    devices (Job.inference_strategy), from the one inference checkpoint (Job.inference_checkpoint).
  Training: finetuning_config() (the original's step counts), Job.train_input_fn() (feature TFRecords through
    records.py), array_input_fn() (in-memory features).
  Inference: predict_arrays() runs a Task over in-memory features with real-length batches.
"""
import collections
import dataclasses
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf
from absl import logging

import checkpoints
import cli
import device_setup
import encoder
import filesystem
import litert_export
import onnx_export
import packing
import records
import serving
import training
from model_options import ModelOptions

STEP_COUNT_FLAGS = ("num_train_steps", "num_warmup_steps")
EVAL_RESULTS_FILE = "eval_results.txt"
TrainingConfig = training.TrainingConfig


# ---------------------------------------------------------------------------------------------------------
# Options.


@dataclasses.dataclass
class FinetuningOptions:
    """The flags every fine-tuning runner has (the original's names, defaults and help): the model's, the loop's
    (training.TrainingConfig, without the step counts, which come from epochs) and the job's. A runner's options
    subclass this and add its own; cli.define_flags makes them the script's flags."""
    model: ModelOptions = cli.nested(ModelOptions, required=("bert_config_file", "vocab_file"))
    training: TrainingConfig = cli.nested(TrainingConfig, exclude=STEP_COUNT_FLAGS, required=("output_dir",))
    do_train: bool = cli.option(False, "Whether to run training.")
    do_eval: bool = cli.option(False, "Whether to run eval on the dev set.")
    do_predict: bool = cli.option(False, "Whether to run the model in inference mode on the test set.")
    num_train_epochs: float = cli.option(3.0, "Total number of training epochs to perform.")
    warmup_proportion: float = cli.option(0.1, "Proportion of training to perform linear learning rate warmup "
                                          "for. E.g., 0.1 = 10% of training.")
    export_dir: str = cli.option(None, "Write a SavedModel here (see the script's docstring for its signatures) "
                                 "from the newest checkpoint in output_dir, else init_checkpoint.")
    export_dtype: str = cli.option("float32", "The precision the SavedModel serves in: float32, or mixed bfloat16 / "
                                   "float16 (matmuls in half precision; variables and outputs float32). Under XLA "
                                   "(--use_xla) its model is compiled at a few padded shapes.", serving.EXPORT_DTYPES)
    export_rows_per_step: int = cli.option(
        serving.ROWS_PER_STEP, "The most rows (SQuAD: windows of a context) the SavedModel's model runs at once: a "
        "request of more rows runs in steps of this many, one after the other, so that a call's memory is bounded "
        "by the export whatever the request (recorded in it as rows_per_step); 0: the model over every row of a "
        "call at once (memory grows with the request).")
    export_onnx: str = cli.option(None, "Write an ONNX model of the token-ids signature (the SavedModel's "
                                  "serving_default: int32 input_ids, input_mask, segment_ids in, the task's outputs "
                                  "out; float32) here, for ONNX Runtime (see onnx_export.py); needs tf2onnx.")
    onnx_quantize: bool = cli.option(False, "--export_onnx in int8: ONNX Runtime's dynamic quantization of the "
                                     "matmuls' weights (about 4x smaller, 2-3x faster on CPUs); needs onnxruntime.")
    export_tflite: str = cli.option(None, "Write a LiteRT (TFLite) model here: run_classifier.py's takes raw text "
                                    "(the tokenizer inside, litert_classifier.py), the other runners' the token ids "
                                    "of the SavedModel's serving_default (litert_export.py).")
    tflite_quantize: bool = cli.option(False, "--export_tflite with dynamic-range int8 weights (about 4x "
                                       "smaller).")


def output_dropout_option():
    """The --output_dropout_prob flag of the runners whose output layer has dropout (run_classifier.py, run_ner.py)."""
    return cli.option(encoder.CLASSIFIER_DROPOUT, "Dropout probability on the output layer's input when training "
                      "(the original's fixed keep_prob=0.9, i.e. 0.1; the BERT config's dropout probabilities do not "
                      "reach it). 0 turns it off.")


def check_output_dropout(value):
    """--output_dropout_prob must be a probability in [0, 1)."""
    if not 0.0 <= value < 1.0:
        raise cli.UserError(f"--output_dropout_prob={value}: expected a probability in [0, 1)")


@dataclasses.dataclass
class RecordFinetuningOptions(FinetuningOptions):
    """The flags of the runners that train from a feature TFRecord file (run_classifier.py, run_squad.py)."""
    shuffle_buffer_size: int = cli.option(
        records.ORIGINAL_SHUFFLE_BUFFER, "Training records the input draws from at random (the original's 100). A "
        "training file in an order, e.g. by source, label or length (CoLA's train.tsv is sorted by source), "
        "trains worse with a small buffer: 0 shuffles all training records anew every pass (they are held in "
        "memory).")

    def __post_init__(self):
        if self.shuffle_buffer_size < 0:
            raise cli.UserError(f"--shuffle_buffer_size={self.shuffle_buffer_size}: expected 0 (all training "
                                f"records) or a positive number of records")


def finetuning_config(config, num_examples, num_train_epochs, warmup_proportion, what="examples"):
    """The config with the original fine-tuning step counts (epochs x examples / batch, warm-up share)."""
    num_train_steps = int(num_examples / config.train_batch_size * num_train_epochs)
    num_warmup_steps = int(num_train_steps * warmup_proportion)
    if num_train_steps < 1:
        raise cli.UserError(f"{num_examples} training {what} x --num_train_epochs={num_train_epochs} / "
                            f"--train_batch_size={config.train_batch_size} give no training step")
    logging.info("***** Running training *****")
    logging.info("  Num %s = %d", what, num_examples)
    logging.info("  Batch size = %d", config.train_batch_size)
    logging.info("  Num steps = %d", num_train_steps)
    return dataclasses.replace(config, num_train_steps=num_train_steps, num_warmup_steps=num_warmup_steps)


def require_examples(examples, path, what="examples"):
    """An error naming the file when it yields nothing to train on, evaluate or predict."""
    if not examples:
        raise cli.UserError(f"{path}: no {what} found")
    return examples


def format_eval_results(results):
    """Sorted `key = value` lines like the original's eval_results.txt (floats as float32, integers as integers);
    each is logged."""
    lines = []
    for key in sorted(results):
        value = results[key]
        text = str(value) if isinstance(value, (int, np.integer)) else str(np.float32(value))
        logging.info("  %s = %s", key, text)
        lines.append(f"{key} = {text}\n")
    return "".join(lines)


# ---------------------------------------------------------------------------------------------------------
# The job.


class Job:
    """A script's job, one shape for every script.

    Construction checks what needs no data (required flags, the model's flags: ModelOptions.check); run() then
    makes the strategy, reads and checks the data the flags ask for (read_data), makes the output folder, and runs
    the steps of `steps` whose flag is set, in order. Every output is written once, by the chief (write_output,
    write_results; feature records through record_path); steps other than training run on the chief alone, on
    its own devices (inference_strategy), from the one inference checkpoint (inference_checkpoint).

    A script subclasses it with its options (holding `model`, a ModelOptions, and `training`, a TrainingConfig)
    and supplies `task` (a training.Task, set in read_data or __init__), read_data(), the methods its steps name,
    serving(model) (the SavedModel's module, serving.py) and `labels` (assets.extra/labels.txt, or None).
    """

    # (result name, the flag that asks for the step, or None: always, the method), in the order they run.
    steps = (("train", "do_train", "train"), ("eval", "do_eval", "evaluate"), ("predict", "do_predict", "predict"),
             ("export", "export_dir", "export"), ("export_onnx", "export_onnx", "export_onnx"),
             ("export_tflite", "export_tflite", "export_tflite"))
    labels = None
    task = None
    needs_vocab = True  # the job tokenizes text (a vocab and its special tokens are required)
    needs_checkpoint = True  # inference without a checkpoint of --output_dir or --init_checkpoint is an error
    output_is_file = False  # the output flag names a file (its folder is made), not a folder

    def __init__(self, options):
        self.options = options
        self.model = options.model
        self.config = self.loop_config()
        self.model.require(vocab=self.needs_vocab)
        flag, value = self.output_flag()
        if not value:
            raise cli.UserError(f"{flag} is required")
        self.bert_config, self.tokenizer = self.model.check(vocab=self.needs_vocab)
        for flag, quantize in (("export_onnx", "onnx_quantize"), ("export_tflite", "tflite_quantize")):
            path = getattr(options, flag, None)
            if getattr(options, quantize, False) and not path:
                raise cli.UserError(f"--{quantize} quantizes the model of --{flag}, which is not given")
            if path and filesystem.isdir(path):
                raise cli.UserError(f"--{flag}={path}: is a folder, expected a file name")
        if getattr(options, "export_onnx", None):
            onnx_export.require_converter(quantize=options.onnx_quantize)
        if getattr(options, "export_rows_per_step", 0) < 0:
            raise cli.UserError(f"--export_rows_per_step={options.export_rows_per_step}: expected a number of rows "
                                "(0: whole calls)")
        self.strategy = self.inference_strategy = None
        self.chief = True
        self._checkpoint = None
        self._scratch_dir = None

    def loop_config(self):
        """The loop's settings (training.TrainingConfig): the options' own by default."""
        return self.options.training

    def output_flag(self):
        """(flag, value) of the output folder (or file: output_is_file), made after the checks (a failed check
        leaves no folder behind)."""
        return "--output_dir", self.config.output_dir

    def run(self):
        """The whole job; returns {result name: what the step returned} for the steps that ran."""
        flag_names = {flag.name for flag in cli.flag_fields(type(self.options))}
        steps = [(name, flag, method) for name, flag, method in self.steps if flag is None or flag in flag_names]
        flagged = [flag for _, flag, _ in steps if flag is not None]
        if flagged and not any(getattr(self.options, flag) for flag in flagged):
            names = [f"`{flag}`" for flag in flagged]
            raise cli.UserError(f"At least one of {', '.join(names[:-1])} or {names[-1]} must be set.")
        # First, before any TensorFlow op (reading the data may run some): XLA decided for the device and its
        # options in the environment before the strategy makes the devices; a multi-worker strategy must configure
        # the runtime's collectives at start-up.
        self.config = device_setup.setup(self.config)
        self.strategy = training.create_strategy(self.config)
        self.chief = training.is_chief(self.strategy)
        self.inference_strategy = training.local_strategy(self.strategy)
        self.read_data()
        flag, path = self.output_flag()
        filesystem.make_output_dir(path, flag, is_file=self.output_is_file)
        device_setup.make_cache_dir()
        self.start()
        results = {}
        for name, flag, method in steps:
            if flag is not None and not getattr(self.options, flag):
                continue
            if name != "train" and not self.chief:
                logging.info("%s: runs on the chief; this worker has no more to do", name)
                continue
            results[name] = getattr(self, method)()
        training.end_together(self.strategy)
        if self._scratch_dir:
            shutil.rmtree(self._scratch_dir, ignore_errors=True)
        return results

    def read_data(self):
        """Reads and checks the data the flags ask for (before anything is written); sets self.task."""
        raise NotImplementedError

    def start(self):
        """What a runner writes once --output_dir exists and the strategy is made, before its steps."""

    def serving(self, model):
        """The tf.Module the SavedModel saves (serving.py) around the model with the checkpoint's weights."""
        raise NotImplementedError

    def train_loop(self, input_fn, config=None):
        """training.train of the task under the job's strategy, from --init_checkpoint unless --output_dir holds
        a checkpoint."""
        return training.train(self.task, input_fn, config or self.config, self.strategy, self.model.init_checkpoint)

    def finetuning_config(self, num_examples, what="examples"):
        """The loop's config with the original's step counts for num_examples (finetuning_config)."""
        return finetuning_config(self.config, num_examples, self.options.num_train_epochs,
                                 self.options.warmup_proportion, what)

    def train_input_fn(self, path, record_format, num_records, seed):
        """The training input over the feature TFRecord file `path` of num_records records, shuffled as
        --shuffle_buffer_size says (RecordFinetuningOptions)."""
        buffer = self.options.shuffle_buffer_size
        if buffer == 0:
            logging.info("Shuffling all %d training records anew every pass (--shuffle_buffer_size=0)", num_records)
        return records.input_fn(path, record_format, is_training=True, drop_remainder=True,
                                shuffle=records.Shuffle(buffer, seed, num_records))

    def inference_checkpoint(self):
        """(path, global step) of the checkpoint evaluation, prediction and export use: the newest readable one
        of --output_dir, else --init_checkpoint; chosen once, after training (an error when there is none and
        the job needs_checkpoint; else (None, 0): random weights, logged)."""
        if self._checkpoint is None:
            path = checkpoints.checkpoint_for_inference(self.config.output_dir, self.model.init_checkpoint,
                                                        required=self.needs_checkpoint)
            self._checkpoint = (path, checkpoints.global_step_of(path) if path else 0)
        return self._checkpoint

    def predict_arrays(self, arrays, batch_size, real_lengths=None, what="prediction"):
        """predict_arrays() of the task from the inference checkpoint, on the chief's own devices (`what`: the
        pass its progress lines name, "prediction" or "evaluation")."""
        return predict_arrays(self.task, arrays, dataclasses.replace(self.config, predict_batch_size=batch_size),
                              self.inference_strategy, self.inference_checkpoint()[0], real_lengths, what)

    def record_path(self, name):
        """Where the feature records `name` go: --output_dir on the chief (as the original); a local scratch
        folder on any other worker, which reads its own copy (nothing it writes lands in --output_dir; the folder
        is removed at the end of the job)."""
        if self.chief:
            return os.path.join(self.config.output_dir, name)
        if self._scratch_dir is None:
            self._scratch_dir = tempfile.mkdtemp(prefix="bert-worker-")
        return os.path.join(self._scratch_dir, name)

    def write_output(self, name, text):
        """Writes --output_dir/name (on the chief; other workers write nothing); returns the path."""
        path = os.path.join(self.config.output_dir, name)
        if self.chief:
            with tf.io.gfile.GFile(path, "w") as writer:
                writer.write(text)
            logging.info("Wrote %s", path)
        return path

    def write_results(self, name, results):
        """Writes `key = value` lines (format_eval_results) to --output_dir/name; returns results."""
        logging.info("***** Eval results (%s) *****", name)
        self.write_output(name, format_eval_results(results))
        return results

    def build_model(self):
        """The task's model for an export, its elementwise work where the job's device decided
        (--elementwise_dtype)."""
        return self.task.build_model(self.config.elementwise_dtype)

    def export(self):
        """Writes the SavedModel to --export_dir from the inference checkpoint (serving.export_saved_model), in
        --export_dtype; under XLA its model is compiled at the bucketed widths of --max_seq_length (and up to
        max_position_embeddings, for serving_default's wider ids)."""
        widths = None
        if self.config.use_xla:
            widths = packing.bucket_widths(self.model.max_seq_length, self.bert_config.max_position_embeddings)
        settings = serving.ExportSettings(self.options.export_dtype, widths, self.options.export_rows_per_step)
        return serving.export_saved_model(self.options.export_dir, self.build_model,
                                          self.inference_checkpoint()[0], self.serving, self.labels, settings)

    def float32_module(self):
        """The SavedModel's module (self.serving) of the inference checkpoint in float32, without XLA: what the
        ONNX and LiteRT exports convert."""
        with serving.float32_policy():
            return serving.build_module(self.build_model, self.inference_checkpoint()[0], self.serving)

    def export_onnx(self):
        """Writes the ONNX model of the SavedModel's serving_default to --export_onnx (onnx_export.export), from
        the inference checkpoint, in float32 (int8 with --onnx_quantize)."""
        return onnx_export.export(self.options.export_onnx, self.float32_module(),
                                  quantize=self.options.onnx_quantize)

    def export_tflite(self):
        """Writes the LiteRT model of the SavedModel's serving_default to --export_tflite (litert_export.export),
        from the inference checkpoint, in float32 (dynamic-range int8 with --tflite_quantize)."""
        return litert_export.export(self.options.export_tflite, self.float32_module(),
                                    quantize=self.options.tflite_quantize)


# ---------------------------------------------------------------------------------------------------------
# In-memory input.


def array_input_fn(arrays, is_training, seed=None, trim=True, buckets=None):
    """An input function for training.py over in-memory feature arrays ({name: array [rows, ...]}): sharded
    across input pipelines, shuffled whole and repeated when training (whole batches only), batched in order
    otherwise; trim cuts each batch to its longest sequence (trim_batch; off for XLA and TPU, which want one
    static shape), or with `buckets` (packing.bucket_widths) to the bucket of its longest sequence."""

    def input_fn(batch_size, input_context=None):
        d = tf.data.Dataset.from_tensor_slices(arrays)
        if input_context is not None and input_context.num_input_pipelines > 1:
            d = d.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        if is_training:
            d = d.shuffle(len(next(iter(arrays.values()))), seed=seed, reshuffle_each_iteration=True).repeat()
        d = d.batch(batch_size, drop_remainder=is_training)
        if trim:
            d = d.map(lambda batch: trim_batch(batch, buckets))
        return d.prefetch(tf.data.AUTOTUNE)

    return input_fn


def original_input_fn(arrays, is_training=False, drop_remainder=False):
    """The original's in-memory `input_fn(params)` (run_classifier's and extract_features' input_fn_builder, made
    for TPUEstimator, which passed params["batch_size"]): input_fn({"batch_size": n}) is a tf.data.Dataset of
    batches of `arrays` ({name: array [rows, ...]}), in order; when training, repeated and shuffled in a buffer of
    100 rows, as the original."""

    def input_fn(params):
        d = tf.data.Dataset.from_tensor_slices(arrays)
        if is_training:
            d = d.repeat().shuffle(buffer_size=records.ORIGINAL_SHUFFLE_BUFFER)
        return d.batch(params["batch_size"], drop_remainder=drop_remainder)

    return input_fn


# ---------------------------------------------------------------------------------------------------------
# Inference.


def trim_batch(batch, buckets=None):
    """Cuts a batch's padding columns beyond its longest sequence (packing.real_length), or beyond the bucket of
    its longest sequence (packing.bucket_length) when `buckets` are given."""
    mask = batch["input_mask"]
    length = packing.real_length(mask) if buckets is None else packing.bucket_length(mask, buckets)
    return {name: value[:, :length] if value.shape.rank == 2 else value for name, value in batch.items()}


def uses_real_lengths(config):
    """Real-length batches everywhere but XLA and TPU, which want one static shape."""
    return not (config.use_xla or config.use_tpu)


def predict_arrays(task, arrays, config, strategy=None, checkpoint_path=None, real_lengths=None, what="prediction"):
    """Runs task.predict_outputs over in-memory features ({name: array [n, ...]}, input_mask included) in batches
    of config.predict_batch_size; returns {output name: array [n, ...]} in input order.

    Off TPU the features are sorted by length and each batch is cut to its longest sequence (rounded up to a
    multiple of packing.LENGTH_MULTIPLE; under XLA, to a bucket of packing.bucket_widths, so that a few shapes
    are compiled); the task's sequence_outputs are padded back to full length with zeros. Padding is masked out
    of attention, so the results are those of full-length batches (up to float rounding, as between batch sizes),
    with the work of the real lengths. real_lengths=False keeps full-length batches in input order. Progress lines
    (training.predict) start with `what` and count the n examples.
    """
    n = len(arrays["input_ids"])
    if not n:
        return {}
    config = training.decide_for_device(config)
    cut = real_lengths is not False and not config.use_tpu
    order = np.arange(n)
    if cut:
        order = np.argsort(-np.asarray(arrays["input_mask"]).sum(axis=1), kind="stable")
    ordered = {name: np.asarray(value)[order] for name, value in arrays.items()}
    full_width = ordered["input_ids"].shape[1]
    buckets = packing.bucket_widths(full_width) if cut and config.use_xla else None
    input_fn = array_input_fn(ordered, is_training=False, trim=cut, buckets=buckets)
    columns = collections.defaultdict(list)
    for example in training.predict(task, input_fn, config, strategy, checkpoint_path=checkpoint_path,
                                    total_examples=n, what=what):
        for name, value in example.items():
            if name in task.sequence_outputs and value.shape[0] < full_width:
                value = np.pad(value, [(0, full_width - value.shape[0])] + [(0, 0)] * (value.ndim - 1))
            columns[name].append(value)
    outputs = {}
    for name, values in columns.items():
        stacked = np.stack(values)
        outputs[name] = np.empty_like(stacked)
        outputs[name][order] = stacked
    return outputs
