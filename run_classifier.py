# coding=utf-8
"""BERT fine-tuning runner for sentence (pair) classification and regression.

GLUE (CoLA, SST-2, MRPC, QQP, STS-B, MNLI, QNLI, RTE, WNLI), XNLI and a user's own TSV/CSV, with the
original release's reading rules, feature conversion, classifier variables ("output_weights",
"output_bias") and output files (train/eval/predict.tf_record, eval_results.txt, test_results.tsv); training,
evaluation and prediction run on the shared loop in training.py (its flags: strategy, XLA, dtype, optimizer,
gradient accumulation, checkpoints).

    python run_classifier.py --task_name=MRPC --do_train --do_eval --do_predict --data_dir=glue/MRPC \
      --vocab_file=vocab.txt --bert_config_file=bert_config.json --init_checkpoint=bert_model.ckpt \
      --max_seq_length=128 --train_batch_size=32 --learning_rate=2e-5 --num_train_epochs=3 \
      --output_dir=out/mrpc --export_dir=out/mrpc/saved_model

--export_dir writes a SavedModel: "serving_default" takes int32 input_ids, input_mask, segment_ids and
"serving_text" takes raw strings text_a (and text_b for pair tasks), tokenized in the graph; both return
{"probabilities"} ({"score"} for regression). Load it with `import tensorflow_text` and
tf.saved_model.load. --predict_input=FILE or - (stdin) predicts line after line (text_a, or text_a<TAB>text_b)
with the model loaded once. --task_name=custom reads a user's TSV/CSV (--text_a_column, --text_b_column,
--label_column, --label_list, --delimiter, --has_header, --regression).
"""

import collections
import dataclasses
import csv
import math
import os
import sys

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf

import checkpoints
import fast_tokenization
import modeling
import tokenization
import training

FLAGS = flags.FLAGS


class InputExample(object):
    """A single training/test example for simple sequence classification."""

    def __init__(self, guid, text_a, text_b=None, label=None):
        self.guid = guid
        self.text_a = text_a
        self.text_b = text_b
        self.label = label

    def __repr__(self):
        return "InputExample(guid=%r, text_a=%r, text_b=%r, label=%r)" % (
                self.guid, self.text_a, self.text_b, self.label)


class PaddingInputExample(object):
    """Fake example so the number of examples is a multiple of a fixed batch size."""


class InputFeatures(object):
    """A single set of features of data."""

    def __init__(self, input_ids, input_mask, segment_ids, label_id, is_real_example=True):
        self.input_ids = input_ids
        self.input_mask = input_mask
        self.segment_ids = segment_ids
        self.label_id = label_id
        self.is_real_example = is_real_example


class DataProcessor(object):
    """Reads a task's train/dev/test files into `InputExample`s."""

    # Subclasses set these.
    is_regression = False
    is_pair = True
    # Metrics reported next to eval_loss, as GLUE reports them for the task.
    metric_names = ("accuracy",)

    # Files in data_dir, and the guid prefixes of the dev and test sets.
    train_file, dev_file, test_file = "train.tsv", "dev.tsv", "test.tsv"
    dev_set, test_set = "dev", "test"

    def get_train_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, self.train_file), "train")

    def get_dev_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, self.dev_file), self.dev_set)

    def get_test_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, self.test_file), self.test_set)

    def _create_examples(self, path, set_type):
        raise NotImplementedError()

    def get_labels(self):
        """The label strings in id order; None for regression."""
        raise NotImplementedError()

    @classmethod
    def _read_tsv(cls, input_file, quotechar=None, delimiter="\t"):
        """Reads a tab separated file with quoting off; returns [(line_number, fields)]."""
        if not os.path.isfile(input_file):
            raise FileNotFoundError("%s: data file not found: %s (check --data_dir)" %
                                    (cls.__name__, input_file))
        quoting = csv.QUOTE_NONE if quotechar is None else csv.QUOTE_MINIMAL
        rows = []
        with open(input_file, "r", encoding="utf-8", newline="") as f:
            reader = csv.reader(f, delimiter=delimiter, quotechar=quotechar, quoting=quoting)
            for line in reader:
                rows.append((reader.line_num, line))
        return rows

    def _check(self, path, line_number, line, min_columns):
        if len(line) < min_columns:
            separator = {"\t": "tab", ",": "comma"}.get(getattr(self, "delimiter", "\t"), "separator")
            raise ValueError("%s line %d: expected at least %d %s-separated columns, found %d: %r" % (
                    path, line_number, min_columns, separator, len(line), line))

    def _check_label(self, path, line_number, label):
        if self.is_regression:
            try:
                return float(label)
            except ValueError:
                raise ValueError("%s line %d: label %r is not a number (regression task)" %
                                 (path, line_number, label)) from None
        labels = self.get_labels()
        if label not in labels:
            raise ValueError("%s line %d: label %r is not in the task's label list %s" %
                             (path, line_number, label, labels))
        return label

    def _test_label(self):
        """The dummy label the original gives unlabeled test examples (the first label)."""
        return 0.0 if self.is_regression else self.get_labels()[0]

    def _examples(self, path, set_type, columns, skip_header, guid_column=None):
        """Builds examples from `columns` = (text_a, text_b or None, label or None) indices."""
        a_col, b_col, label_col = columns
        needed = max(c if c is not None and c >= 0 else 0 for c in columns) + 1
        if guid_column is not None:
            needed = max(needed, guid_column + 1)
        examples = []
        for i, (line_number, line) in enumerate(self._read_tsv(path)):
            if skip_header and i == 0:
                continue
            self._check(path, line_number, line, needed)
            if guid_column is None:
                guid = "%s-%s" % (set_type, i)
            else:
                guid = "%s-%s" % (set_type, tokenization.convert_to_unicode(line[guid_column]))
            text_a = tokenization.convert_to_unicode(line[a_col])
            text_b = None if b_col is None else tokenization.convert_to_unicode(line[b_col])
            if label_col is None:
                label = self._test_label()
            else:
                label = self._check_label(path, line_number, tokenization.convert_to_unicode(line[label_col]))
            examples.append(InputExample(guid=guid, text_a=text_a, text_b=text_b, label=label))
        return examples


class XnliProcessor(DataProcessor):
    """XNLI: trains on the machine-translated MultiNLI of one language, evaluates on that language."""

    def __init__(self, language="zh"):
        self.language = language

    def get_train_examples(self, data_dir):
        path = os.path.join(data_dir, "multinli", "multinli.train.%s.tsv" % self.language)
        examples = []
        for i, (line_number, line) in enumerate(self._read_tsv(path)):
            if i == 0:
                continue
            self._check(path, line_number, line, 3)
            label = tokenization.convert_to_unicode(line[2])
            if label == "contradictory":
                label = "contradiction"
            examples.append(InputExample(
                    guid="train-%d" % i, text_a=tokenization.convert_to_unicode(line[0]),
                    text_b=tokenization.convert_to_unicode(line[1]),
                    label=self._check_label(path, line_number, label)))
        return examples

    def _xnli_eval(self, path, set_type):
        examples = []
        for i, (line_number, line) in enumerate(self._read_tsv(path)):
            if i == 0:
                continue
            self._check(path, line_number, line, 8)
            if tokenization.convert_to_unicode(line[0]) != self.language:
                continue
            examples.append(InputExample(
                    guid="%s-%d" % (set_type, i), text_a=tokenization.convert_to_unicode(line[6]),
                    text_b=tokenization.convert_to_unicode(line[7]),
                    label=self._check_label(path, line_number, tokenization.convert_to_unicode(line[1]))))
        return examples

    def get_dev_examples(self, data_dir):
        return self._xnli_eval(os.path.join(data_dir, "xnli.dev.tsv"), "dev")

    def get_test_examples(self, data_dir):
        return self._xnli_eval(os.path.join(data_dir, "xnli.test.tsv"), "test")

    def get_labels(self):
        return ["contradiction", "entailment", "neutral"]


class MnliProcessor(DataProcessor):
    """MultiNLI (GLUE version), matched dev/test."""

    dev_file, test_file = "dev_matched.tsv", "test_matched.tsv"
    dev_set, test_set = "dev_matched", "test"

    def get_labels(self):
        return ["contradiction", "entailment", "neutral"]

    def _create_examples(self, path, set_type):
        test = set_type.startswith("test")
        return self._examples(path, set_type, (8, 9, None if test else -1), skip_header=True,
                              guid_column=0)


class MnliMismatchedProcessor(MnliProcessor):
    """MultiNLI (GLUE version), mismatched dev/test."""

    dev_file, test_file = "dev_mismatched.tsv", "test_mismatched.tsv"
    dev_set, test_set = "dev_mismatched", "test_mismatched"


class MrpcProcessor(DataProcessor):
    """MRPC (GLUE version)."""

    metric_names = ("accuracy", "f1")

    def get_labels(self):
        return ["0", "1"]

    def _create_examples(self, path, set_type):
        label_col = None if set_type == "test" else 0
        return self._examples(path, set_type, (3, 4, label_col), skip_header=True)


class ColaProcessor(DataProcessor):
    """CoLA (GLUE version): train/dev have no header, the test set has one."""

    is_pair = False
    metric_names = ("mcc", "accuracy")

    def get_labels(self):
        return ["0", "1"]

    def _create_examples(self, path, set_type):
        if set_type == "test":
            return self._examples(path, set_type, (1, None, None), skip_header=True)
        return self._examples(path, set_type, (3, None, 1), skip_header=False)


class Sst2Processor(DataProcessor):
    """SST-2 (GLUE version): sentence, label; the test set is index, sentence."""

    is_pair = False

    def get_labels(self):
        return ["0", "1"]

    def _create_examples(self, path, set_type):
        if set_type == "test":
            return self._examples(path, set_type, (1, None, None), skip_header=True)
        return self._examples(path, set_type, (0, None, 1), skip_header=True)


class _GlueIndexedPairProcessor(DataProcessor):
    """GLUE files whose first column is an index: guid = set-index."""

    # (text_a, text_b, label) for train/dev and (text_a, text_b) for test.
    columns = None
    test_columns = None

    def _create_examples(self, path, set_type):
        if set_type == "test":
            columns = tuple(self.test_columns) + (None,)
        else:
            columns = self.columns
        return self._examples(path, set_type, columns, skip_header=True, guid_column=0)


class QqpProcessor(_GlueIndexedPairProcessor):
    """QQP (GLUE version)."""

    columns, test_columns = (3, 4, 5), (1, 2)
    metric_names = ("accuracy", "f1")

    def get_labels(self):
        return ["0", "1"]


class QnliProcessor(_GlueIndexedPairProcessor):
    """QNLI (GLUE version)."""

    columns, test_columns = (1, 2, -1), (1, 2)

    def get_labels(self):
        return ["entailment", "not_entailment"]


class RteProcessor(QnliProcessor):
    """RTE (GLUE version)."""


class WnliProcessor(_GlueIndexedPairProcessor):
    """WNLI (GLUE version)."""

    columns, test_columns = (1, 2, -1), (1, 2)

    def get_labels(self):
        return ["0", "1"]


class StsbProcessor(_GlueIndexedPairProcessor):
    """STS-B (GLUE version): regression on a 0-5 similarity score."""

    columns, test_columns = (7, 8, -1), (7, 8)
    is_regression = True
    metric_names = ("pearson", "spearman")

    def get_labels(self):
        return None


class CustomProcessor(DataProcessor):
    """A user's own TSV or CSV: columns chosen by name (with a header) or by 0-based index.

    The label list is `label_list` when given, otherwise the sorted distinct labels of the train file.
    """

    def __init__(self, text_a_column, label_column, text_b_column=None, delimiter="\t",
                 has_header=True, label_list=None, is_regression=False,
                 train_file="train.tsv", dev_file="dev.tsv", test_file="test.tsv", data_dir=None):
        if text_a_column is None or str(text_a_column) == "":
            raise ValueError("--text_a_column must name the text column of the custom task")
        self.text_a_column = str(text_a_column)
        self.text_b_column = None if text_b_column in (None, "") else str(text_b_column)
        self.label_column = None if label_column in (None, "") else str(label_column)
        delimiter = {"tab": "\t", "\\t": "\t", "comma": ","}.get(delimiter, delimiter)
        if not isinstance(delimiter, str) or len(delimiter) != 1:
            raise ValueError("--delimiter=%r: expected one character (or 'tab', 'comma')" % (delimiter,))
        self.delimiter = delimiter
        self.has_header = has_header
        self.is_regression = is_regression
        self.is_pair = self.text_b_column is not None
        self.metric_names = ("pearson", "spearman") if is_regression else ("accuracy",)
        self.train_file, self.dev_file, self.test_file = train_file, dev_file, test_file
        self.data_dir = data_dir
        self._labels = list(label_list) if label_list else None

    def _read(self, path):
        quotechar = '"' if self.delimiter == "," else None
        return self._read_tsv(path, quotechar=quotechar, delimiter=self.delimiter)

    def _resolve(self, path, header, column, flag):
        if column is None:
            return None
        if self.has_header and column in header:
            return header.index(column)
        if column.lstrip("-").isdigit():
            return int(column)
        raise ValueError("%s: --%s=%r is neither a column of the header %s nor a column index" % (
                path, flag, column, header))

    def get_labels(self):
        if self.is_regression:
            return None
        if self._labels is None:
            if self.label_column is None:
                raise ValueError("custom task: give --label_column or --label_list")
            if self.data_dir is None:
                raise ValueError("custom task: --label_list is needed when there is no train file")
            path = os.path.join(self.data_dir, self.train_file)
            labels = set()
            for ex in self._create_examples(path, "train", check_labels=False):
                labels.add(ex.label)
            self._labels = sorted(labels)
            logging.info("custom task: label list from %s: %s", path, self._labels)
        return self._labels

    def _create_examples(self, path, set_type, check_labels=True):
        rows = self._read(path)
        header = rows[0][1] if (self.has_header and rows) else []
        a_col = self._resolve(path, header, self.text_a_column, "text_a_column")
        b_col = self._resolve(path, header, self.text_b_column, "text_b_column")
        label_col = None
        if set_type != "test" or (self.label_column is not None and self.label_column in header):
            label_col = self._resolve(path, header, self.label_column, "label_column")
        if set_type != "test" and label_col is None:
            raise ValueError("custom task: --label_column is needed to read %s" % path)
        needed = max(c if c >= 0 else 0 for c in (a_col, b_col, label_col) if c is not None) + 1
        examples = []
        for i, (line_number, line) in enumerate(rows):
            if self.has_header and i == 0:
                continue
            self._check(path, line_number, line, needed)
            label = self._test_label() if label_col is None else line[label_col]
            if check_labels and label_col is not None:
                label = self._check_label(path, line_number, label)
            examples.append(InputExample(
                    guid="%s-%d" % (set_type, i), text_a=line[a_col],
                    text_b=None if b_col is None else line[b_col], label=label))
        return examples


PROCESSORS = collections.OrderedDict([
        ("cola", ColaProcessor),
        ("mnli", MnliProcessor),
        ("mnli-mm", MnliMismatchedProcessor),
        ("mrpc", MrpcProcessor),
        ("qnli", QnliProcessor),
        ("qqp", QqpProcessor),
        ("rte", RteProcessor),
        ("sst-2", Sst2Processor),
        ("sts-b", StsbProcessor),
        ("wnli", WnliProcessor),
        ("xnli", XnliProcessor),
        ("custom", CustomProcessor),
])

_ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "mnli_mm": "mnli-mm", "mnli-mismatched": "mnli-mm"}


def get_processor(task_name, **custom_args):
    """The processor for `task_name` (case-insensitive); custom_args configure the custom task."""
    name = (task_name or "").lower()
    name = _ALIASES.get(name, name)
    if name not in PROCESSORS:
        raise ValueError("Task not found: %r (--task_name); valid tasks: %s" %
                         (task_name, ", ".join(PROCESSORS)))
    if name == "custom":
        return CustomProcessor(**custom_args)
    if name == "xnli":
        return XnliProcessor(language=custom_args.get("xnli_language", "zh"))
    return PROCESSORS[name]()


def convert_single_example(ex_index, example, label_list, max_seq_length, tokenizer):
    """Converts one `InputExample` into `InputFeatures` ([CLS] a [SEP] b [SEP], zero padding).

    `label_list` None means regression: the label is kept as a float.
    """
    if isinstance(example, PaddingInputExample):
        return InputFeatures(input_ids=[0] * max_seq_length, input_mask=[0] * max_seq_length,
                             segment_ids=[0] * max_seq_length,
                             label_id=0.0 if label_list is None else 0, is_real_example=False)

    tokens_a = tokenizer.tokenize(example.text_a)
    tokens_b = None
    if example.text_b:
        tokens_b = tokenizer.tokenize(example.text_b)

    tokens, input_ids, input_mask, segment_ids = tokenization.pack_sequence_pair(
            tokenizer, tokens_a, tokens_b, max_seq_length)

    if label_list is None:
        label_id = float(example.label)
    else:
        label_map = {label: i for i, label in enumerate(label_list)}
        if example.label not in label_map:
            raise ValueError("example %s: label %r is not in the label list %s" %
                             (example.guid, example.label, label_list))
        label_id = label_map[example.label]

    if ex_index < 5:
        logging.info("*** Example ***")
        logging.info("guid: %s", example.guid)
        logging.info("tokens: %s", " ".join(tokenization.printable_text(x) for x in tokens))
        logging.info("input_ids: %s", " ".join(str(x) for x in input_ids))
        logging.info("input_mask: %s", " ".join(str(x) for x in input_mask))
        logging.info("segment_ids: %s", " ".join(str(x) for x in segment_ids))
        if label_list is None:
            logging.info("label: %s (score = %g)", example.label, label_id)
        else:
            logging.info("label: %s (id = %d)", example.label, label_id)

    return InputFeatures(input_ids=input_ids, input_mask=input_mask, segment_ids=segment_ids,
                         label_id=label_id, is_real_example=True)


def convert_examples_to_features(examples, label_list, max_seq_length, tokenizer):
    """Converts `InputExample`s to a list of `InputFeatures`."""
    features = []
    for ex_index, example in enumerate(examples):
        if ex_index % 10000 == 0:
            logging.info("Writing example %d of %d", ex_index, len(examples))
        features.append(convert_single_example(ex_index, example, label_list, max_seq_length,
                                               tokenizer))
    return features


def pad_examples(examples, batch_size):
    """Appends `PaddingInputExample`s until len(examples) is a multiple of batch_size."""
    examples = list(examples)
    while len(examples) % batch_size != 0:
        examples.append(PaddingInputExample())
    return examples


def _int_feature(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def _float_feature(values):
    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def serialize_feature(feature, is_regression):
    """One tf.train.Example (the original's feature names) as bytes."""
    features = collections.OrderedDict()
    features["input_ids"] = _int_feature(feature.input_ids)
    features["input_mask"] = _int_feature(feature.input_mask)
    features["segment_ids"] = _int_feature(feature.segment_ids)
    if is_regression:
        features["label_ids"] = _float_feature([feature.label_id])
    else:
        features["label_ids"] = _int_feature([feature.label_id])
    features["is_real_example"] = _int_feature([int(feature.is_real_example)])
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString(deterministic=True)


_WORKER = {}


def _init_worker(tokenizer, label_list, max_seq_length):
    _WORKER.update(tokenizer=tokenizer, label_list=label_list, max_seq_length=max_seq_length)


def _convert_chunk(chunk):
    start, examples = chunk
    return [serialize_feature(convert_single_example(start + i, example, _WORKER["label_list"],
                                                     _WORKER["max_seq_length"], _WORKER["tokenizer"]),
                              _WORKER["label_list"] is None)
            for i, example in enumerate(examples)]


def file_based_convert_examples_to_features(examples, label_list, max_seq_length, tokenizer,
                                            output_file, num_workers=1, chunk_size=2000):
    """Converts `InputExample`s to a TFRecord file (the original's feature names).

    num_workers > 1 converts chunks in that many processes; the file is the same byte for byte.
    """
    is_regression = label_list is None
    examples = list(examples)
    with tf.io.TFRecordWriter(output_file) as writer:
        if num_workers <= 1 or len(examples) <= chunk_size:
            for ex_index, example in enumerate(examples):
                if ex_index % 10000 == 0:
                    logging.info("Writing example %d of %d", ex_index, len(examples))
                feature = convert_single_example(ex_index, example, label_list, max_seq_length, tokenizer)
                writer.write(serialize_feature(feature, is_regression))
            return
        import multiprocessing
        # The first chunk here, so that its first examples are logged as the original does.
        _init_worker(tokenizer, label_list, max_seq_length)
        for record in _convert_chunk((0, examples[:chunk_size])):
            writer.write(record)
        chunks = [(i, examples[i:i + chunk_size]) for i in range(chunk_size, len(examples), chunk_size)]
        logging.info("Converting %d examples with %d worker processes", len(examples), num_workers)
        # Workers only tokenize and serialize protocol buffers (no TensorFlow ops), so forking is safe and
        # avoids importing TensorFlow again in every worker.
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        with context.Pool(num_workers, initializer=_init_worker,
                          initargs=(tokenizer, label_list, max_seq_length)) as pool:
            for (start, _), records in zip(chunks, pool.imap(_convert_chunk, chunks)):
                logging.info("Writing example %d of %d", start, len(examples))
                for record in records:
                    writer.write(record)


def file_based_dataset(input_file, seq_length, is_training, batch_size, drop_remainder,
                       is_regression=False, shuffle_buffer=100, seed=None):
    """A tf.data pipeline over a feature TFRecord file: int32 features, batched.

    Training repeats and shuffles with a buffer of 100, as the original does.
    """
    name_to_features = {
            "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
            "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
            "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
            "label_ids": tf.io.FixedLenFeature([], tf.float32 if is_regression else tf.int64),
            "is_real_example": tf.io.FixedLenFeature([], tf.int64),
    }

    def decode(record):
        example = tf.io.parse_single_example(record, name_to_features)
        return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t
                for name, t in example.items()}

    d = tf.data.TFRecordDataset(input_file)
    if is_training:
        d = d.repeat()
        d = d.shuffle(buffer_size=shuffle_buffer, seed=seed)
    d = d.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    d = d.batch(batch_size, drop_remainder=drop_remainder)
    return d.prefetch(tf.data.AUTOTUNE)


# ----------------------------------------------------------------------------------------------
# Metrics, as GLUE reports them.


def accuracy(predictions, labels):
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    return float(np.mean(predictions == labels)) if labels.size else 0.0


def f1_score(predictions, labels, positive=1):
    """Binary F1 of the positive class (0.0 when there are no true positives)."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    tp = float(np.sum((predictions == positive) & (labels == positive)))
    fp = float(np.sum((predictions == positive) & (labels != positive)))
    fn = float(np.sum((predictions != positive) & (labels == positive)))
    if tp == 0.0:
        return 0.0
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    return 2.0 * precision * recall / (precision + recall)


def matthews_corrcoef(predictions, labels):
    """Matthews correlation of binary predictions (0.0 when undefined, as scikit-learn)."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    tp = float(np.sum((predictions == 1) & (labels == 1)))
    tn = float(np.sum((predictions != 1) & (labels != 1)))
    fp = float(np.sum((predictions == 1) & (labels != 1)))
    fn = float(np.sum((predictions != 1) & (labels == 1)))
    denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    if denominator == 0.0:
        return 0.0
    return (tp * tn - fp * fn) / denominator


def pearson_corrcoef(x, y):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    xm, ym = x - x.mean(), y - y.mean()
    denominator = math.sqrt(float(np.sum(xm * xm)) * float(np.sum(ym * ym)))
    return float(np.sum(xm * ym)) / denominator if denominator else 0.0


def _average_ranks(x):
    """1-based ranks with ties given their average rank."""
    x = np.asarray(x, np.float64)
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    boundaries = np.concatenate([[True], sorted_x[1:] != sorted_x[:-1], [True]])
    starts = np.flatnonzero(boundaries)
    ranks_sorted = np.empty(len(x), np.float64)
    for begin, end in zip(starts[:-1], starts[1:]):
        ranks_sorted[begin:end] = (begin + 1 + end) / 2.0
    ranks = np.empty(len(x), np.float64)
    ranks[order] = ranks_sorted
    return ranks


def spearman_corrcoef(x, y):
    return pearson_corrcoef(_average_ranks(x), _average_ranks(y))


def compute_metrics(metric_names, predictions, labels):
    """{"eval_<name>": value} for the task's metrics over real examples only."""
    functions = {"accuracy": accuracy, "f1": f1_score, "mcc": matthews_corrcoef,
                 "pearson": pearson_corrcoef, "spearman": spearman_corrcoef}
    result = collections.OrderedDict()
    for name in metric_names:
        result["eval_" + name] = functions[name](predictions, labels)
    if "pearson" in metric_names and "spearman" in metric_names:
        result["eval_corr"] = (result["eval_pearson"] + result["eval_spearman"]) / 2.0
    return result


def classifier_loss(logits, labels, is_regression):
    """(mean loss, per-example loss): cross entropy of the softmax, or squared error for regression."""
    if is_regression:
        per_example_loss = tf.square(logits[:, 0] - tf.cast(labels, tf.float32))
    else:
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        one_hot = tf.one_hot(tf.cast(labels, tf.int32), depth=tf.shape(logits)[-1], dtype=tf.float32)
        per_example_loss = -tf.reduce_sum(one_hot * log_probs, axis=-1)
    return tf.reduce_mean(per_example_loss), per_example_loss


def model_outputs(logits, is_regression):
    """What prediction and the SavedModel return: probabilities, or the score for regression."""
    if is_regression:
        return {"score": logits[:, 0]}
    return {"probabilities": tf.nn.softmax(logits, axis=-1)}


class ClassifierTask(training.Task):
    """The classifier job for training.py: loss, evaluation sums and prediction outputs."""

    def __init__(self, bert_config, num_labels, is_regression=False, metric_names=("accuracy",)):
        self.bert_config = bert_config
        self.num_labels = 1 if is_regression else num_labels
        self.is_regression = is_regression
        self.metric_names = tuple(metric_names)

    def build_model(self):
        model = modeling.ClassifierModel(self.bert_config, self.num_labels)
        dummy = tf.zeros([1, 2], tf.int32)
        model({"input_ids": dummy, "input_mask": dummy, "segment_ids": dummy})
        return model

    def compute_loss(self, model, features, training):
        logits = model(features, training=training)
        loss, _ = classifier_loss(logits, features["label_ids"], self.is_regression)
        return loss, {"loss": loss}

    def evaluate_batch(self, model, features):
        logits = model(features, training=False)
        loss, per_example_loss = classifier_loss(logits, features["label_ids"], self.is_regression)
        weights = tf.cast(features["is_real_example"], tf.float32)
        count = tf.reduce_sum(weights)
        result = {"eval_loss": (tf.reduce_sum(per_example_loss * weights), count)}
        if self.is_regression:
            # Pearson and Spearman need every prediction: evaluate_on_examples adds them.
            return loss, result
        predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
        labels = tf.cast(features["label_ids"], tf.int32)
        correct = tf.cast(tf.equal(predictions, labels), tf.float32)
        result["eval_accuracy"] = (tf.reduce_sum(correct * weights), count)
        if self.num_labels == 2:
            p, t = tf.cast(predictions == 1, tf.float32), tf.cast(labels == 1, tf.float32)
            for name, value in (("tp", p * t), ("fp", p * (1 - t)), ("fn", (1 - p) * t),
                                ("tn", (1 - p) * (1 - t))):
                result["confusion_" + name] = (tf.reduce_sum(value * weights), count)
        return loss, result

    def eval_metrics(self, model, features):
        return self.evaluate_batch(model, features)[1]

    def final_eval_results(self, results):
        results = dict(results)
        confusion = {k[len("confusion_"):]: results.pop(k) for k in list(results) if k.startswith("confusion_")}
        if confusion:
            tp, fp, fn, tn = confusion["tp"], confusion["fp"], confusion["fn"], confusion["tn"]
            if "f1" in self.metric_names:
                results["eval_f1"] = 2 * tp / (2 * tp + fp + fn) if tp > 0 else 0.0
            if "mcc" in self.metric_names:
                denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
                results["eval_mcc"] = (tp * tn - fp * fn) / denominator if denominator else 0.0
        return results

    def predict_outputs(self, model, features):
        outputs = model_outputs(model(features, training=False), self.is_regression)
        outputs["is_real_example"] = features["is_real_example"]
        return outputs


# ----------------------------------------------------------------------------------------------
# In-graph packing: the same truncation and layout as convert_single_example, for the export.


def pack_inputs(ids_a, ids_b, max_seq_length, cls_id, sep_id):
    """Packs ragged token ids [batch, (tokens)] into dense int32 input_ids, input_mask, segment_ids.

    Equal to convert_single_example: [CLS] a [SEP] b [SEP] with tokenization.truncate_seq_pair (a row whose b is empty
    is a single sequence cut to max_seq_length - 2), zero padding to max_seq_length.
    """
    ids_a = tf.cast(ids_a, tf.int32).with_row_splits_dtype(tf.int64)
    len_a = ids_a.row_lengths()
    if ids_b is None:
        ids_b = tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int32), tf.zeros_like(len_a))
    ids_b = tf.cast(ids_b, tf.int32).with_row_splits_dtype(tf.int64)
    len_b = ids_b.row_lengths()
    has_b = tf.cast(len_b > 0, tf.int64)
    budget = max_seq_length - 2 - has_b
    # truncate_seq_pair pops from the longer sequence (from b on ties) until the pair fits.
    keep_a = tf.minimum(len_a, tf.maximum(budget - len_b, (budget + 1) // 2))
    keep_b = tf.minimum(len_b, tf.maximum(budget - len_a, budget // 2))
    ids_a = tf.ragged.boolean_mask(ids_a, tf.ragged.range(len_a) < keep_a[:, tf.newaxis])
    ids_b = tf.ragged.boolean_mask(ids_b, tf.ragged.range(len_b) < keep_b[:, tf.newaxis])
    batch = tf.shape(len_a)[0]
    cls = tf.RaggedTensor.from_tensor(tf.fill([batch, 1], cls_id), row_splits_dtype=tf.int64)
    sep_a = tf.RaggedTensor.from_tensor(tf.fill([batch, 1], sep_id), row_splits_dtype=tf.int64)
    sep_b = tf.RaggedTensor.from_row_lengths(tf.fill([tf.reduce_sum(has_b)], sep_id), has_b)
    tokens = tf.concat([cls, ids_a, sep_a, ids_b, sep_b], axis=1)
    segments = tf.concat([tf.zeros_like(cls), tf.zeros_like(ids_a), tf.zeros_like(sep_a),
                          tf.ones_like(ids_b), tf.ones_like(sep_b)], axis=1)
    shape = [None, max_seq_length]
    input_ids = tokens.to_tensor(default_value=0, shape=shape)
    input_mask = tf.ones_like(tokens).to_tensor(default_value=0, shape=shape)
    segment_ids = segments.to_tensor(default_value=0, shape=shape)
    return input_ids, input_mask, segment_ids


# ----------------------------------------------------------------------------------------------
# Runner: train / eval / predict through training.py, streaming prediction, SavedModel export.


def dataset_fn_builder(input_file, seq_length, is_training, drop_remainder, is_regression, seed=None):
    """An input function for training.py: (per-replica batch size, input context) -> tf.data.Dataset."""

    def input_fn(batch_size, input_context=None):
        d = file_based_dataset(input_file, seq_length, is_training, batch_size, drop_remainder,
                               is_regression=is_regression, seed=seed)
        if input_context is not None and input_context.num_input_pipelines > 1:
            d = d.unbatch().shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
            d = d.batch(batch_size, drop_remainder=drop_remainder)
        return d

    return input_fn


def _feature_file(examples, label_list, max_seq_length, tokenizer, path, num_workers=1):
    file_based_convert_examples_to_features(examples, label_list, max_seq_length, tokenizer, path,
                                            num_workers=num_workers)
    return path


def evaluate_on_examples(task, examples, label_list, max_seq_length, tokenizer, config, strategy,
                         output_dir, metric_names, checkpoint_path=None, num_workers=1):
    """Writes eval.tf_record, evaluates through training.py and writes eval_results.txt; returns results."""
    num_actual = len(examples)
    if config.use_tpu:
        examples = pad_examples(examples, config.eval_batch_size)
    eval_file = _feature_file(examples, label_list, max_seq_length, tokenizer,
                              os.path.join(output_dir, "eval.tf_record"), num_workers)
    logging.info("***** Running evaluation *****")
    logging.info("  Num examples = %d (%d actual, %d padding)", len(examples), num_actual,
                 len(examples) - num_actual)
    logging.info("  Batch size = %d", config.eval_batch_size)
    is_regression = label_list is None
    input_fn = dataset_fn_builder(eval_file, max_seq_length, False, config.use_tpu, is_regression)
    result = training.evaluate(task, input_fn, config, strategy, checkpoint_path=checkpoint_path,
                               results_file=None)
    if is_regression:
        scores, labels = [], []
        for prediction, example in zip(
                training.predict(task, input_fn, _predict_config(config, config.eval_batch_size), strategy,
                                 checkpoint_path=checkpoint_path), examples):
            if prediction["is_real_example"]:
                scores.append(float(prediction["score"]))
                labels.append(float(example.label))
        result.update(compute_metrics(metric_names, scores, labels))
    if training.is_chief(strategy):
        training.write_eval_results(os.path.join(output_dir, "eval_results.txt"), result)
    return result


def _predict_config(config, batch_size):
    return dataclasses.replace(config, predict_batch_size=batch_size)


def format_prediction(prediction, is_regression):
    """One test_results.tsv row: class probabilities (or the score) tab separated, as the original."""
    if is_regression:
        return str(prediction["score"])
    return "\t".join(str(p) for p in prediction["probabilities"])


def predict_on_examples(task, examples, label_list, max_seq_length, tokenizer, config, strategy,
                        output_dir, checkpoint_path=None, num_workers=1):
    """Writes predict.tf_record and test_results.tsv (one row per real example); returns the rows."""
    num_actual = len(examples)
    if config.use_tpu:
        examples = pad_examples(examples, config.predict_batch_size)
    predict_file = _feature_file(examples, label_list, max_seq_length, tokenizer,
                                 os.path.join(output_dir, "predict.tf_record"), num_workers)
    logging.info("***** Running prediction*****")
    logging.info("  Num examples = %d (%d actual, %d padding)", len(examples), num_actual,
                 len(examples) - num_actual)
    logging.info("  Batch size = %d", config.predict_batch_size)
    is_regression = label_list is None
    input_fn = dataset_fn_builder(predict_file, max_seq_length, False, config.use_tpu, is_regression)
    rows = []
    output_path = os.path.join(output_dir, "test_results.tsv")
    with tf.io.gfile.GFile(output_path, "w") as writer:
        logging.info("***** Predict results *****")
        for i, prediction in enumerate(training.predict(task, input_fn, config, strategy,
                                                        checkpoint_path=checkpoint_path)):
            if i >= num_actual:
                break
            row = format_prediction(prediction, is_regression)
            writer.write(row + "\n")
            rows.append(row)
    if len(rows) != num_actual:
        raise RuntimeError("%s: wrote %d rows for %d test examples" % (output_path, len(rows), num_actual))
    return rows


def read_prediction_lines(stream, is_pair, source="<stdin>"):
    """Yields (text_a, text_b) from lines `text_a` or `text_a<TAB>text_b`; a bad line is an error."""
    for line_number, line in enumerate(stream, 1):
        line = tokenization.convert_to_unicode(line).rstrip("\r\n")
        fields = line.split("\t")
        if is_pair and len(fields) != 2:
            raise ValueError("%s line %d: expected text_a<TAB>text_b for a sentence-pair task, found %d "
                             "field(s)" % (source, line_number, len(fields)))
        if not is_pair and len(fields) != 1:
            raise ValueError("%s line %d: expected one text without tabs for a single-sentence task, found "
                             "%d fields" % (source, line_number, len(fields)))
        yield fields[0], (fields[1] if is_pair else None)


def predict_stream(task, lines, max_seq_length, tokenizer, config, strategy, writer,
                   checkpoint_path=None):
    """Predicts every (text_a, text_b) of `lines` with the model loaded once; writes a row per input as soon
    as its batch is done (use --predict_batch_size=1 for interactive use). Returns the number of rows."""
    is_regression = task.is_regression

    errors = []

    def generate():
        # An error inside tf.data would come back wrapped; keep it, end the input, raise it afterwards.
        try:
            for ex_index, (text_a, text_b) in enumerate(lines):
                example = InputExample("input-%d" % (ex_index + 1), text_a, text_b,
                                       0.0 if is_regression else "0")
                feature = convert_single_example(ex_index, example, None if is_regression else ["0"],
                                                 max_seq_length, tokenizer)
                yield {"input_ids": feature.input_ids, "input_mask": feature.input_mask,
                       "segment_ids": feature.segment_ids, "is_real_example": 1}
        except Exception as err:  # pylint: disable=broad-except
            errors.append(err)

    signature = {name: tf.TensorSpec([max_seq_length], tf.int32)
                 for name in ("input_ids", "input_mask", "segment_ids")}
    signature["is_real_example"] = tf.TensorSpec([], tf.int32)

    def input_fn(batch_size, input_context=None):
        return tf.data.Dataset.from_generator(generate, output_signature=signature).batch(batch_size)

    count = 0
    for prediction in training.predict(task, input_fn, config, strategy, checkpoint_path=checkpoint_path):
        writer.write(format_prediction(prediction, is_regression) + "\n")
        writer.flush()
        count += 1
    if errors:
        raise errors[0]
    return count


SERVING_TEXT = "serving_text"


class ClassifierExport(tf.Module):
    """What the SavedModel holds: the classifier, the in-graph tokenizer and two serving functions.

    serving_default(input_ids, input_mask, segment_ids: int32 [batch, seq]) and serving_text(text_a[, text_b]:
    string [batch]) both return {"probabilities": [batch, num_labels]} (or {"score": [batch]} for
    regression).
    """

    def __init__(self, model, vocab_file, do_lower_case, max_seq_length, is_regression, is_pair):
        super().__init__(name="classifier_export")
        self.model = model
        self.tokenizer = fast_tokenization.FastBertTokenizer(vocab_file, do_lower_case)
        vocab = tokenization.load_vocab(vocab_file)
        for token in ("[CLS]", "[SEP]"):
            if token not in vocab:
                raise ValueError("vocab_file %s has no %s token" % (vocab_file, token))
        self.cls_id, self.sep_id = vocab["[CLS]"], vocab["[SEP]"]
        self.max_seq_length = max_seq_length
        self.is_regression = is_regression
        self.is_pair = is_pair
        self.max_seq_length_value = tf.constant(max_seq_length, tf.int32)
        ids_spec = tf.TensorSpec([None, None], tf.int32)
        self.serve_ids = tf.function(self._serve_ids, input_signature=[ids_spec] * 3)
        text_spec = tf.TensorSpec([None], tf.string)
        if is_pair:
            self.serve_text = tf.function(self._serve_pair, input_signature=[text_spec, text_spec])
        else:
            self.serve_text = tf.function(self._serve_single, input_signature=[text_spec])

    def _outputs(self, input_ids, input_mask, segment_ids):
        logits = self.model({"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids},
                            training=False)
        return model_outputs(logits, self.is_regression)

    def _serve_ids(self, input_ids, input_mask, segment_ids):
        return self._outputs(input_ids, input_mask, segment_ids)

    def _pack(self, text_a, text_b):
        ids_a = self.tokenizer.tokenize(text_a)
        ids_b = None if text_b is None else self.tokenizer.tokenize(text_b)
        return pack_inputs(ids_a, ids_b, self.max_seq_length, self.cls_id, self.sep_id)

    def _serve_single(self, text_a):
        return self._outputs(*self._pack(text_a, None))

    def _serve_pair(self, text_a, text_b):
        return self._outputs(*self._pack(text_a, text_b))


def export_saved_model(export_dir, bert_config, num_labels, is_regression, is_pair, vocab_file,
                       do_lower_case, max_seq_length, checkpoint_path, label_list=None):
    """Writes a SavedModel with serving_default (token ids) and serving_text (raw strings) signatures.

    Loading it needs TensorFlow and `import tensorflow_text` (for the tokenizer's ops), not this code.
    """
    with training.float32_policy():
        model = ClassifierTask(bert_config, num_labels, is_regression).build_model()
        checkpoints.init_from_checkpoint(model.variables_by_name(), checkpoint_path)
        module = ClassifierExport(model, vocab_file, do_lower_case, max_seq_length, is_regression, is_pair)
        signatures = {"serving_default": module.serve_ids.get_concrete_function(),
                      SERVING_TEXT: module.serve_text.get_concrete_function()}
        tf.saved_model.save(module, export_dir, signatures=signatures)
    if label_list is not None:
        tf.io.gfile.makedirs(os.path.join(export_dir, "assets.extra"))
        with tf.io.gfile.GFile(os.path.join(export_dir, "assets.extra", "labels.txt"), "w") as f:
            f.write("".join("%s\n" % label for label in label_list))
    logging.info("Exported %s to %s (signatures: serving_default, %s)", checkpoint_path, export_dir,
                 SERVING_TEXT)
    return export_dir


def run(task_name, data_dir, vocab_file, config, do_lower_case=True, max_seq_length=128, do_train=False,
        do_eval=False, do_predict=False, num_train_epochs=3.0, warmup_proportion=0.1, export_dir=None,
        predict_input=None, predict_output=None, processor_args=None, num_workers=1, stdin=None,
        stdout=None):
    """The whole job; `config` is a training.TrainingConfig (output_dir, bert_config_file, batch sizes, ...).

    Returns {"train": ..., "eval": ..., "predict": rows, "export": dir, "streamed": count} for what ran.
    """
    tokenization.validate_case_matches_checkpoint(do_lower_case, config.init_checkpoint)
    if not (do_train or do_eval or do_predict or export_dir or predict_input):
        raise ValueError("At least one of `do_train`, `do_eval`, `do_predict`, `export_dir` or `predict_input` "
                         "must be set.")
    for flag, value in (("bert_config_file", config.bert_config_file), ("vocab_file", vocab_file),
                        ("output_dir", config.output_dir)):
        if not value:
            raise ValueError("--%s is required" % flag)
    if (do_train or do_eval or do_predict) and not data_dir:
        raise ValueError("--data_dir is required for do_train, do_eval and do_predict")
    bert_config = modeling.BertConfig.from_json_file(config.bert_config_file)
    if max_seq_length > bert_config.max_position_embeddings:
        raise ValueError("Cannot use sequence length %d because the BERT model was only trained up to sequence "
                         "length %d" % (max_seq_length, bert_config.max_position_embeddings))
    if max_seq_length < 3:
        raise ValueError("--max_seq_length=%d: expected at least 3 ([CLS] a [SEP] b [SEP])" % max_seq_length)
    tf.io.gfile.makedirs(config.output_dir)

    processor_args = dict(processor_args or {})
    if (task_name or "").lower() == "custom":
        processor_args.setdefault("data_dir", data_dir)
    processor = get_processor(task_name, **processor_args)
    label_list = processor.get_labels()
    num_labels = 1 if processor.is_regression else len(label_list)
    tokenizer = tokenization.FullTokenizer(vocab_file=vocab_file, do_lower_case=do_lower_case)
    task = ClassifierTask(bert_config, num_labels, processor.is_regression, processor.metric_names)
    strategy = training.create_strategy(config)
    results = {}

    if do_train:
        train_examples = processor.get_train_examples(data_dir)
        num_train_steps, num_warmup_steps = training.num_train_steps_for(
            len(train_examples), config.train_batch_size, num_train_epochs, warmup_proportion)
        config = dataclasses.replace(config, num_train_steps=num_train_steps, num_warmup_steps=num_warmup_steps)
        train_file = _feature_file(train_examples, label_list, max_seq_length, tokenizer,
                                   os.path.join(config.output_dir, "train.tf_record"), num_workers)
        logging.info("***** Running training *****")
        logging.info("  Num examples = %d", len(train_examples))
        logging.info("  Batch size = %d", config.train_batch_size)
        logging.info("  Num steps = %d", num_train_steps)
        input_fn = dataset_fn_builder(train_file, max_seq_length, True, True, processor.is_regression,
                                      seed=config.seed)
        results["train"] = training.train(task, input_fn, config, strategy)

    if do_eval:
        results["eval"] = evaluate_on_examples(
            task, processor.get_dev_examples(data_dir), label_list, max_seq_length, tokenizer, config, strategy,
            config.output_dir, processor.metric_names, num_workers=num_workers)

    if do_predict:
        results["predict"] = predict_on_examples(
            task, processor.get_test_examples(data_dir), label_list, max_seq_length, tokenizer, config,
            strategy, config.output_dir, num_workers=num_workers)

    if predict_input:
        source = "<stdin>" if predict_input == "-" else predict_input
        reader = (stdin or sys.stdin) if predict_input == "-" else open(predict_input, encoding="utf-8")
        writer = (stdout or sys.stdout) if not predict_output or predict_output == "-" else \
            open(predict_output, "w", encoding="utf-8")
        try:
            results["streamed"] = predict_stream(
                task, read_prediction_lines(reader, processor.is_pair, source), max_seq_length, tokenizer,
                config, strategy, writer)
        finally:
            if reader is not (stdin or sys.stdin):
                reader.close()
            if writer is not (stdout or sys.stdout):
                writer.close()
        logging.info("Predicted %d inputs from %s", results["streamed"], source)

    if export_dir:
        results["export"] = export_saved_model(
            export_dir, bert_config, num_labels, processor.is_regression, processor.is_pair, vocab_file,
            do_lower_case, max_seq_length,
            checkpoints.checkpoint_for_inference(config.output_dir, config.init_checkpoint), label_list)
    return results


def define_flags():
    """The original's flags (shared ones from training.py) plus export, streaming and custom-task flags."""
    training.define_training_flags(train_batch_size=32, eval_batch_size=8, predict_batch_size=8,
                                   learning_rate=5e-5, save_checkpoints_steps=1000, iterations_per_loop=1000)
    flags.DEFINE_string("data_dir", None, "The input data dir. Should contain the .tsv files (or other data "
                        "files) for the task.")
    flags.DEFINE_string("task_name", None, "The name of the task to train: " + ", ".join(PROCESSORS) + ".")
    training.define_finetuning_flags("Longer sequences are truncated, shorter ones padded.")
    flags.DEFINE_string("export_dir", None, "Write a SavedModel here (serving_default on token ids, "
                        "serving_text on raw strings) from the newest checkpoint in output_dir.")
    flags.DEFINE_string("predict_input", None, "Predict every line of this file ('-': stdin), text_a or "
                        "text_a<TAB>text_b, with the model loaded once.")
    flags.DEFINE_string("predict_output", None, "Where --predict_input rows go (default: stdout).")
    flags.DEFINE_integer("num_workers", 1, "Processes converting examples to feature TFRecords (the files are "
                         "the same for any number).")
    flags.DEFINE_string("xnli_language", "zh", "XNLI: the language to train and evaluate on.")
    flags.DEFINE_string("text_a_column", None, "custom task: the text column (header name or 0-based index).")
    flags.DEFINE_string("text_b_column", None, "custom task: the optional second text column.")
    flags.DEFINE_string("label_column", None, "custom task: the label column.")
    flags.DEFINE_list("label_list", None, "custom task: the labels in id order (default: sorted labels of "
                      "the train file).")
    flags.DEFINE_string("delimiter", "\t", "custom task: the field separator (',' reads CSV with quoting).")
    flags.DEFINE_bool("has_header", True, "custom task: whether the first line is a header.")
    flags.DEFINE_bool("regression", False, "custom task: the label is a number (one output, squared error).")
    flags.DEFINE_string("train_file", "train.tsv", "custom task: training file in data_dir.")
    flags.DEFINE_string("dev_file", "dev.tsv", "custom task: evaluation file in data_dir.")
    flags.DEFINE_string("test_file", "test.tsv", "custom task: prediction file in data_dir.")


def main(_):
    logging.set_verbosity(logging.INFO)
    processor_args = {}
    if (FLAGS.task_name or "").lower() == "custom":
        processor_args = dict(
            text_a_column=FLAGS.text_a_column, text_b_column=FLAGS.text_b_column,
            label_column=FLAGS.label_column, label_list=FLAGS.label_list, delimiter=FLAGS.delimiter,
            has_header=FLAGS.has_header, is_regression=FLAGS.regression, train_file=FLAGS.train_file,
            dev_file=FLAGS.dev_file, test_file=FLAGS.test_file)
    elif (FLAGS.task_name or "").lower() == "xnli":
        processor_args = {"xnli_language": FLAGS.xnli_language}
    run(FLAGS.task_name, FLAGS.data_dir, FLAGS.vocab_file, training.TrainingConfig.from_flags(FLAGS),
        do_lower_case=FLAGS.do_lower_case, max_seq_length=FLAGS.max_seq_length, do_train=FLAGS.do_train,
        do_eval=FLAGS.do_eval, do_predict=FLAGS.do_predict, num_train_epochs=FLAGS.num_train_epochs,
        warmup_proportion=FLAGS.warmup_proportion, export_dir=FLAGS.export_dir,
        predict_input=FLAGS.predict_input, predict_output=FLAGS.predict_output, processor_args=processor_args,
        num_workers=FLAGS.num_workers)


if __name__ == "__main__":
    define_flags()
    flags.mark_flag_as_required("task_name")
    flags.mark_flag_as_required("vocab_file")
    flags.mark_flag_as_required("bert_config_file")
    flags.mark_flag_as_required("output_dir")
    app.run(main)
