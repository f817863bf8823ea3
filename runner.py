"""The shared steps of a fine-tuning or inference job; each run_*.py supplies only its task.

  Flags: define_training_flags(), define_finetuning_flags(), training_config(FLAGS).
  Checks, before anything is written: check_job() (required flags, BERT config, sequence length, vocab and its
    special tokens, casing, init_checkpoint); then make_output_dir().
  Training: finetuning_config() (the original's step counts), write_records() / record_input_fn() (feature
    TFRecords with the original's feature names), tokenize_in_processes().
  Inference: predict_arrays() runs a Task over in-memory features with real-length batches.
A job's SavedModel is written by serving.export_saved_model, from checkpoints.checkpoint_for_inference.
"""
import collections
import dataclasses
import multiprocessing
import re

import numpy as np
import tensorflow as tf
from absl import flags
from absl import logging

import checkpoints
import cli
import modeling
import packing
import tokenization
import training

STEP_COUNT_FLAGS = ("num_train_steps", "num_warmup_steps")


# ---------------------------------------------------------------------------------------------------------
# Flags.


def define_training_flags(with_step_counts=False, flag_values=None):
    """Defines a flag for every field of training.TrainingConfig (original names, defaults and help).

    with_step_counts adds num_train_steps and num_warmup_steps (run_pretraining); fine-tuning runners derive
    them from epochs (finetuning_config).
    """
    fv = flag_values if flag_values is not None else flags.FLAGS
    kinds = {str: flags.DEFINE_string, int: flags.DEFINE_integer, float: flags.DEFINE_float,
             bool: flags.DEFINE_bool}
    for field in dataclasses.fields(training.TrainingConfig):
        if field.name in STEP_COUNT_FLAGS and not with_step_counts:
            continue
        help_text = field.metadata["help"]
        if field.metadata.get("enum"):
            flags.DEFINE_enum(field.name, field.default, list(field.metadata["enum"]), help_text, flag_values=fv)
        else:
            kinds[field.type](field.name, field.default, help_text, flag_values=fv)


def define_finetuning_flags(max_seq_length=128, sequence_help="Longer sequences are truncated, shorter ones "
                            "padded.", do_eval=True, do_predict_help="Whether to run the model in inference mode "
                            "on the test set.", flag_values=None):
    """Defines the flags the fine-tuning runners share (original names, defaults and help)."""
    fv = flag_values if flag_values is not None else flags.FLAGS
    flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.",
                        flag_values=fv)
    flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text. Should be True for uncased "
                      "models and False for cased models.", flag_values=fv)
    flags.DEFINE_integer("max_seq_length", max_seq_length, "The maximum total input sequence length after "
                         "WordPiece tokenization. " + sequence_help, flag_values=fv)
    flags.DEFINE_bool("do_train", False, "Whether to run training.", flag_values=fv)
    if do_eval:
        flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.", flag_values=fv)
    flags.DEFINE_bool("do_predict", False, do_predict_help, flag_values=fv)
    flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.", flag_values=fv)
    flags.DEFINE_float("warmup_proportion", 0.1, "Proportion of training to perform linear learning rate "
                       "warmup for. E.g., 0.1 = 10% of training.", flag_values=fv)
    flags.DEFINE_string("export_dir", None, "Write a SavedModel here (see the script's docstring for its "
                        "signatures) from the newest checkpoint in output_dir, else init_checkpoint.",
                        flag_values=fv)


def training_config(flag_values=None, **overrides):
    """training.TrainingConfig from the flags that define its fields, then keyword overrides."""
    fv = flag_values if flag_values is not None else flags.FLAGS
    values = {field.name: fv[field.name].value for field in dataclasses.fields(training.TrainingConfig)
              if field.name in fv}
    values.update(overrides)
    return training.TrainingConfig(**values)


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
    cli.require_file(path, "--bert_config_file")
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
    return cli.make_dir(config.output_dir, "--output_dir")


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
# Feature records (tf.train.Example, the original's feature names).


class RecordWriter:
    """Writes tf.train.Example records of named features: write({name: values}) in the dict's order; names
    in float_names are float lists, the rest int64 lists."""

    def __init__(self, path, float_names=()):
        self.path = path
        self.float_names = frozenset(float_names)
        self.count = 0
        self._writer = tf.io.TFRecordWriter(path)

    def write(self, features):
        proto = collections.OrderedDict()
        for name, values in features.items():
            values = np.ravel(values).tolist()
            if name in self.float_names:
                proto[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
            else:
                proto[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        example = tf.train.Example(features=tf.train.Features(feature=proto))
        self._writer.write(example.SerializeToString(deterministic=True))
        self.count += 1

    def close(self):
        self._writer.close()


def write_records(path, arrays, float_names=()):
    """Writes one record per row of `arrays` ({name: array [rows, ...]}); returns the number of records."""
    writer = RecordWriter(path, float_names)
    rows = len(next(iter(arrays.values()))) if arrays else 0
    for i in range(rows):
        writer.write({name: values[i] for name, values in arrays.items()})
    writer.close()
    return rows


def decode_record(record, spec):
    """Parses one serialized tf.train.Example of `spec` ({name: (length or None, dtype)}); int64 -> int32."""
    parsed = tf.io.parse_single_example(
        record, {name: tf.io.FixedLenFeature([length] if length else [], dtype)
                 for name, (length, dtype) in spec.items()})
    return {name: tf.cast(value, tf.int32) if value.dtype == tf.int64 else value for name, value in parsed.items()}


def record_input_fn(path, spec, is_training, drop_remainder, seed=None, shuffle_buffer=100):
    """An input function for training.py over a feature TFRecord file: records sharded across input
    pipelines, repeated and shuffled (buffer 100, as the original) when training, decoded, batched."""

    def input_fn(batch_size, input_context=None):
        d = tf.data.TFRecordDataset(path)
        if input_context is not None and input_context.num_input_pipelines > 1:
            d = d.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        if is_training:
            d = d.repeat().shuffle(buffer_size=shuffle_buffer, seed=seed)
        d = d.map(lambda record: decode_record(record, spec), num_parallel_calls=tf.data.AUTOTUNE)
        return d.batch(batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)

    return input_fn


def tf_error_message(err):
    """A TensorFlow error's message without the op and function names TensorFlow wraps it in."""
    message = getattr(err, "message", str(err))
    message = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", message)
    message = re.sub(r"\s*\[Op:[^\]]*\].*$", "", message, flags=re.S)
    message = re.sub(r"\b(truncated|corrupted) record at (\d+)'?( failed with)?", r"\1 record at byte \2:", message)
    return " ".join(message.split()).rstrip(":")


def find_corrupt_record(files):
    """(file, number of records read before the damage, TensorFlow's message) of the first damaged TFRecord
    file, or None."""
    for path in files:
        count = 0
        try:
            for _ in tf.data.TFRecordDataset(path):
                count += 1
        except tf.errors.DataLossError as err:
            return path, count, tf_error_message(err)
    return None


def naming_corrupt_records(files, action):
    """Runs action(); a DataLossError of the TFRecord input becomes a cli.UserError naming the file and
    record (training stops there; its checkpoints so far are kept)."""
    try:
        return action()
    except tf.errors.DataLossError:
        damaged = find_corrupt_record(files)
        if damaged is None:
            raise
        path, count, message = damaged
        raise cli.UserError(f"{path}: corrupt or truncated TFRecord data after record {count} ({message}); "
                            f"stopped, checkpoints written so far are kept: repair or remove the file and run "
                            f"again to resume") from None


_WORKER_TOKENIZER = []


def _tokenize_chunk(texts):
    tokenizer = _WORKER_TOKENIZER[0]
    return [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text)) if text else [] for text in texts]


def tokenize_in_processes(texts, tokenizer, num_workers=1, chunk_size=2000):
    """WordPiece ids of every text (None or "" -> []), in order; num_workers > 1 tokenizes chunks in that
    many processes (forked: no TensorFlow ops run in them). The ids are the same for any number."""
    texts = list(texts)
    _WORKER_TOKENIZER[:] = [tokenizer]
    if num_workers <= 1 or len(texts) <= chunk_size:
        return _tokenize_chunk(texts)
    chunks = [texts[i:i + chunk_size] for i in range(0, len(texts), chunk_size)]
    logging.info("Tokenizing %d texts with %d worker processes", len(texts), num_workers)
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with context.Pool(num_workers) as pool:
        return [ids for chunk in pool.map(_tokenize_chunk, chunks) for ids in chunk]


PACK_CHUNK = 8192  # rows packed per packing.pack_pair call


def pack_pairs(tokenizer, ids_a, ids_b, max_seq_length):
    """{"input_ids", "input_mask", "segment_ids": int32 array [rows, max_seq_length]} of [CLS] a [SEP] (b [SEP])
    (packing.pack_pair) for lists of id lists (an empty b: a single sequence)."""
    cls_id, sep_id = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
    parts = [[], [], []]
    for start in range(0, len(ids_a), PACK_CHUNK):
        end = start + PACK_CHUNK
        tensors = packing.pack_pair(packing.ragged_ids(ids_a[start:end]), packing.ragged_ids(ids_b[start:end]),
                                    max_seq_length, cls_id, sep_id)
        for part, tensor in zip(parts, tensors):
            part.append(tensor.numpy())
    return {name: np.concatenate(part) if part else np.zeros([0, max_seq_length], np.int32)
            for name, part in zip(("input_ids", "input_mask", "segment_ids"), parts)}


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

    def input_fn(size, input_context=None):
        d = tf.data.Dataset.from_tensor_slices(ordered).batch(size)
        if real_lengths:
            d = d.map(trim_batch)
        return d.prefetch(tf.data.AUTOTUNE)

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
