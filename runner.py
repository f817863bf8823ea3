"""The shared steps of a fine-tuning or inference job; each run_*.py supplies only its task.

  Options: FinetuningOptions, the flags every fine-tuning runner has (cli.define_flags makes them flags);
    RecordFinetuningOptions adds --shuffle_buffer_size for the runners that train from feature TFRecords.
  The job: Job, one shape for every runner: checks before anything is written (check_job: required flags, BERT
    config, sequence length, vocab and its special tokens, casing, init_checkpoint; then the runner's data),
    --output_dir made once, then train / evaluate / predict / export, outputs written once by the chief, and
    the one inference checkpoint (Job.inference_checkpoint).
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
import filesystem
import modeling
import packing
import records
import serving
import tokenization
import training

STEP_COUNT_FLAGS = ("num_train_steps", "num_warmup_steps")
TrainingConfig = training.TrainingConfig


# ---------------------------------------------------------------------------------------------------------
# Options.


@dataclasses.dataclass
class FinetuningOptions:
    """The flags every fine-tuning runner has (the original's names, defaults and help): the loop's
    (training.TrainingConfig, without the step counts, which come from epochs) and the job's. A runner's options
    subclass this and add its own; cli.define_flags makes them the script's flags."""
    training: TrainingConfig = cli.nested(TrainingConfig, exclude=STEP_COUNT_FLAGS,
                                          required=("bert_config_file", "output_dir"))
    vocab_file: str = cli.option(None, "The vocabulary file that the BERT model was trained on.", required=True)
    do_lower_case: bool = cli.option(True, "Whether to lower case the input text. Should be True for uncased "
                                     "models and False for cased models.")
    max_seq_length: int = cli.option(128, "The maximum total input sequence length after WordPiece tokenization. "
                                     "Longer sequences are truncated, shorter ones padded.")
    do_train: bool = cli.option(False, "Whether to run training.")
    do_eval: bool = cli.option(False, "Whether to run eval on the dev set.")
    do_predict: bool = cli.option(False, "Whether to run the model in inference mode on the test set.")
    num_train_epochs: float = cli.option(3.0, "Total number of training epochs to perform.")
    warmup_proportion: float = cli.option(0.1, "Proportion of training to perform linear learning rate warmup "
                                          "for. E.g., 0.1 = 10% of training.")
    export_dir: str = cli.option(None, "Write a SavedModel here (see the script's docstring for its signatures) "
                                 "from the newest checkpoint in output_dir, else init_checkpoint.")


def output_dropout_option():
    """The --output_dropout_prob flag of the runners whose output layer has dropout (run_classifier.py, run_ner.py)."""
    return cli.option(modeling.CLASSIFIER_DROPOUT, "Dropout probability on the output layer's input when training "
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


# ---------------------------------------------------------------------------------------------------------
# Checks before anything is written.


def check_job(config, vocab_file, do_lower_case, max_seq_length, min_seq_length=3,
              special_tokens=("[CLS]", "[SEP]")):
    """Every check of a runner's job that needs no data: returns (BertConfig, FullTokenizer) or raises
    cli.UserError."""
    for flag, value in (("--bert_config_file", config.bert_config_file), ("--vocab_file", vocab_file),
                        ("--output_dir", config.output_dir)):
        if not value:
            raise cli.UserError(f"{flag} is required")
    return check_model_inputs(config.bert_config_file, vocab_file, do_lower_case, max_seq_length,
                              config.init_checkpoint, min_seq_length, special_tokens)


def check_model_inputs(bert_config_file, vocab_file, do_lower_case, max_seq_length, init_checkpoint=None,
                       min_seq_length=3, special_tokens=("[CLS]", "[SEP]")):
    """The BERT config (and --max_seq_length against it), the vocab (its special tokens and size against the
    config), the casing against a known checkpoint name, and init_checkpoint: (BertConfig, FullTokenizer)."""
    tokenization.validate_case_matches_checkpoint(do_lower_case, init_checkpoint)
    bert_config = load_bert_config(bert_config_file, max_seq_length, min_seq_length)
    tokenizer = tokenization.FullTokenizer(vocab_file=vocab_file, do_lower_case=do_lower_case)
    tokenization.check_special_tokens(tokenizer.vocab, vocab_file, special_tokens)
    tokenization.check_vocab_size(vocab_file, bert_config.vocab_size)
    if init_checkpoint:
        checkpoints.resolve_checkpoint(init_checkpoint, flag="--init_checkpoint")
    return bert_config, tokenizer


def load_bert_config(path, max_seq_length=None, min_seq_length=1):
    """The BertConfig of --bert_config_file, checked against --max_seq_length."""
    filesystem.require_file(path, "--bert_config_file")
    bert_config = modeling.BertConfig.from_json_file(path)
    if max_seq_length is not None:
        check_seq_length(bert_config, max_seq_length, min_seq_length, path)
    return bert_config


def check_seq_length(bert_config, max_seq_length, min_seq_length=1, source="--bert_config_file"):
    """--max_seq_length must fit the model's position embeddings and hold min_seq_length tokens."""
    if max_seq_length > bert_config.max_position_embeddings:
        raise cli.UserError(f"--max_seq_length={max_seq_length}: cannot use sequence length {max_seq_length} "
                            f"because the BERT model was only trained up to sequence length "
                            f"{bert_config.max_position_embeddings} ({source})")
    if max_seq_length < min_seq_length:
        raise cli.UserError(f"--max_seq_length={max_seq_length}: expected at least {min_seq_length}")


def make_output_dir(config):
    """Creates --output_dir (after the checks: a failed check leaves no folder behind)."""
    return filesystem.make_dir(config.output_dir, "--output_dir")


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


# ---------------------------------------------------------------------------------------------------------
# The job.


class Job:
    """A fine-tuning runner's job, one shape for every task.

    Construction checks what needs no data (flags, BERT config, vocab and its special tokens, casing,
    init_checkpoint); run() then reads and checks the data the flags ask for (read_data), and only then creates
    --output_dir and runs the steps the flags ask for, in order: train, evaluate, predict, (the runner's own,)
    export. Every output is written once, by the chief (write_output, write_results; feature records through
    record_path); evaluation, prediction and export run on the chief alone, on its own devices, from the one
    inference checkpoint (inference_checkpoint).

    A runner subclasses it with its options (a FinetuningOptions) and supplies `task` (a training.Task, set in
    read_data or __init__), read_data(), train(), evaluate(), predict(), serving(model) (the SavedModel's module,
    serving.py) and `labels` (assets.extra/labels.txt, or None); extra_steps() adds steps of its own.
    """

    labels = None
    task = None

    def __init__(self, options):
        self.options = options
        self.config = options.training
        self.bert_config, self.tokenizer = check_job(self.config, options.vocab_file, options.do_lower_case,
                                                     options.max_seq_length)
        self.strategy = None
        self.chief = True
        self._checkpoint = None
        self._scratch_dir = None

    def steps(self):
        """[(result name, flag name, flag value, step)] in the order they run."""
        o = self.options
        return ([("train", "do_train", o.do_train, self.train), ("eval", "do_eval", o.do_eval, self.evaluate),
                 ("predict", "do_predict", o.do_predict, self.predict)] + self.extra_steps()
                + [("export", "export_dir", o.export_dir, self.export)])

    def extra_steps(self):
        """A runner's own steps, run after predict and before export (same tuples as steps())."""
        return []

    def run(self):
        """The whole job; returns {result name: what the step returned} for the steps that ran."""
        flag_names = {field.name for field, _ in cli.flag_fields(type(self.options))}
        steps = [step for step in self.steps() if step[1] in flag_names]
        if not any(enabled for _, _, enabled, _ in steps):
            names = [f"`{flag}`" for _, flag, _, _ in steps]
            raise cli.UserError(f"At least one of {', '.join(names[:-1])} or {names[-1]} must be set.")
        # Before the first TensorFlow op (reading the data may run some): a multi-worker strategy must configure
        # the runtime's collectives at start-up.
        self.strategy = training.create_strategy(self.config)
        self.chief = training.is_chief(self.strategy)
        self.read_data()
        make_output_dir(self.config)
        self.start()
        results = {}
        for name, _, enabled, step in steps:
            if not enabled:
                continue
            if name != "train" and not self.chief:
                logging.info("%s: runs on the chief; this worker has no more to do", name)
                continue
            results[name] = step()
        training.end_together(self.strategy)
        if self._scratch_dir:
            shutil.rmtree(self._scratch_dir, ignore_errors=True)
        return results

    def read_data(self):
        """Reads and checks the data the flags ask for (before anything is written); sets self.task."""
        raise NotImplementedError

    def start(self):
        """What a runner writes once --output_dir exists and the strategy is made, before its steps."""

    def train(self):
        raise NotImplementedError

    def evaluate(self):
        raise NotImplementedError

    def predict(self):
        raise NotImplementedError

    def serving(self, model):
        """The tf.Module the SavedModel saves (serving.py) around the model with the checkpoint's weights."""
        raise NotImplementedError

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
        return records.input_fn(path, record_format, is_training=True, drop_remainder=True, seed=seed,
                               shuffle_buffer=buffer, num_records=num_records)

    def inference_checkpoint(self):
        """(path, global step) of the checkpoint evaluation, prediction and export use: the newest readable one
        of --output_dir, else --init_checkpoint; chosen once, after training (an error when there is none)."""
        if self._checkpoint is None:
            path = checkpoints.checkpoint_for_inference(self.config.output_dir, self.config.init_checkpoint)
            self._checkpoint = (path, checkpoints.global_step_of(path))
        return self._checkpoint

    def predict_arrays(self, arrays, batch_size, real_lengths=None):
        """predict_arrays() of the task from the inference checkpoint, on the chief's own devices."""
        return predict_arrays(self.task, arrays, self.config, training.local_strategy(self.strategy),
                              self.inference_checkpoint()[0], batch_size, real_lengths)

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
        """Writes `key = value` lines (training.format_eval_results) to --output_dir/name; returns results."""
        logging.info("***** Eval results (%s) *****", name)
        self.write_output(name, training.format_eval_results(results))
        return results

    def export(self):
        """Writes the SavedModel to --export_dir from the inference checkpoint (serving.export_saved_model)."""
        return serving.export_saved_model(self.options.export_dir, self.task.build_model,
                                          self.inference_checkpoint()[0], self.serving, labels=self.labels)


# ---------------------------------------------------------------------------------------------------------
# In-memory input.


def array_input_fn(arrays, is_training, seed=None, trim=True):
    """An input function for training.py over in-memory feature arrays ({name: array [rows, ...]}): sharded
    across input pipelines, shuffled whole and repeated when training (whole batches only), batched in order
    otherwise; trim cuts each batch to its longest sequence (trim_batch; off for XLA and TPU, which want one
    static shape)."""

    def input_fn(batch_size, input_context=None):
        d = tf.data.Dataset.from_tensor_slices(arrays)
        if input_context is not None and input_context.num_input_pipelines > 1:
            d = d.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        if is_training:
            d = d.shuffle(len(next(iter(arrays.values()))), seed=seed, reshuffle_each_iteration=True).repeat()
        d = d.batch(batch_size, drop_remainder=is_training)
        if trim:
            d = d.map(trim_batch)
        return d.prefetch(tf.data.AUTOTUNE)

    return input_fn


# ---------------------------------------------------------------------------------------------------------
# Inference.


def trim_batch(batch):
    """Cuts a batch's padding columns beyond its longest sequence (packing.real_length)."""
    length = packing.real_length(batch["input_mask"])
    return {name: value[:, :length] if value.shape.rank == 2 else value for name, value in batch.items()}


def uses_real_lengths(config):
    """Real-length batches everywhere but XLA and TPU, which want one static shape."""
    return not (config.use_xla or config.use_tpu)


def predict_arrays(task, arrays, config, strategy=None, checkpoint_path=None, batch_size=None, real_lengths=None):
    """Runs task.predict_outputs over in-memory features ({name: array [n, ...]}, input_mask included);
    returns {output name: array [n, ...]} in input order.

    Off XLA and TPU the features are sorted by length and each batch is cut to its longest sequence (rounded
    up to a multiple of packing.LENGTH_MULTIPLE); the task's sequence_outputs are padded back to full length with
    zeros. Padding is masked out of attention, so the results are those of full-length batches (up to float
    rounding, as between batch sizes), with the work of the real lengths. real_lengths=False keeps full-length
    batches in input order.
    """
    n = len(arrays["input_ids"])
    if not n:
        return {}
    batch_size = batch_size or config.predict_batch_size
    real_lengths = uses_real_lengths(config) if real_lengths is None else real_lengths and uses_real_lengths(config)
    order = np.arange(n)
    if real_lengths:
        order = np.argsort(-np.asarray(arrays["input_mask"]).sum(axis=1), kind="stable")
    ordered = {name: np.asarray(value)[order] for name, value in arrays.items()}
    full_width = ordered["input_ids"].shape[1]
    input_fn = array_input_fn(ordered, is_training=False, trim=real_lengths)
    config = dataclasses.replace(config, predict_batch_size=batch_size)
    columns = collections.defaultdict(list)
    for example in training.predict(task, input_fn, config, strategy, checkpoint_path=checkpoint_path):
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
