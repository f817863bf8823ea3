# coding=utf-8
"""BERT fine-tuning runner for sentence (pair) classification and regression.

GLUE (CoLA, SST-2, MRPC, QQP, STS-B, MNLI, QNLI, RTE, WNLI), XNLI and a user's own TSV/CSV, with the
original release's reading rules, feature conversion, classifier variables and output files; a SavedModel
export with a tensor signature and a raw-string signature.
"""

import collections
import csv
import math
import os
import sys

from absl import app
from absl import flags
from absl import logging
import keras
import numpy as np
import tensorflow as tf

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

    def get_train_examples(self, data_dir):
        raise NotImplementedError()

    def get_dev_examples(self, data_dir):
        raise NotImplementedError()

    def get_test_examples(self, data_dir):
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
            raise ValueError("%s line %d: expected at least %d %s-separated columns, found %d: %r" % (
                    path, line_number, min_columns, "tab", len(line), line))

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

    def get_train_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, "train.tsv"), "train")

    def get_dev_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, self.dev_file), self.dev_set)

    def get_test_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, self.test_file), self.test_set, test=True)

    def get_labels(self):
        return ["contradiction", "entailment", "neutral"]

    def _create_examples(self, path, set_type, test=False):
        return self._examples(path, set_type, (8, 9, None if test else -1), skip_header=True,
                              guid_column=0)


class MnliMismatchedProcessor(MnliProcessor):
    """MultiNLI (GLUE version), mismatched dev/test."""

    dev_file, test_file = "dev_mismatched.tsv", "test_mismatched.tsv"
    dev_set, test_set = "dev_mismatched", "test_mismatched"


class MrpcProcessor(DataProcessor):
    """MRPC (GLUE version)."""

    metric_names = ("accuracy", "f1")

    def get_train_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, "train.tsv"), "train")

    def get_dev_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, "dev.tsv"), "dev")

    def get_test_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, "test.tsv"), "test")

    def get_labels(self):
        return ["0", "1"]

    def _create_examples(self, path, set_type):
        label_col = None if set_type == "test" else 0
        return self._examples(path, set_type, (3, 4, label_col), skip_header=True)


class ColaProcessor(DataProcessor):
    """CoLA (GLUE version): train/dev have no header, the test set has one."""

    is_pair = False
    metric_names = ("mcc", "accuracy")

    def get_train_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, "train.tsv"), "train")

    def get_dev_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, "dev.tsv"), "dev")

    def get_test_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, "test.tsv"), "test")

    def get_labels(self):
        return ["0", "1"]

    def _create_examples(self, path, set_type):
        if set_type == "test":
            return self._examples(path, set_type, (1, None, None), skip_header=True)
        return self._examples(path, set_type, (3, None, 1), skip_header=False)


class Sst2Processor(DataProcessor):
    """SST-2 (GLUE version): sentence, label; the test set is index, sentence."""

    is_pair = False

    def get_train_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, "train.tsv"), "train")

    def get_dev_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, "dev.tsv"), "dev")

    def get_test_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, "test.tsv"), "test")

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

    def get_train_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, "train.tsv"), "train")

    def get_dev_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, "dev.tsv"), "dev")

    def get_test_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, "test.tsv"), "test")

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
        self.delimiter = delimiter
        self.has_header = has_header
        self.is_regression = is_regression
        self.is_pair = self.text_b_column is not None
        self.metric_names = ("pearson", "spearman") if is_regression else ("accuracy",)
        self.files = {"train": train_file, "dev": dev_file, "test": test_file}
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
            path = os.path.join(self.data_dir, self.files["train"])
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

    def get_train_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, self.files["train"]), "train")

    def get_dev_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, self.files["dev"]), "dev")

    def get_test_examples(self, data_dir):
        return self._create_examples(os.path.join(data_dir, self.files["test"]), "test")


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


def _truncate_seq_pair(tokens_a, tokens_b, max_length):
    """Truncates a sequence pair in place, always popping from the longer one (ties: from b)."""
    while True:
        total_length = len(tokens_a) + len(tokens_b)
        if total_length <= max_length:
            break
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


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

    if tokens_b:
        _truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
    elif len(tokens_a) > max_seq_length - 2:
        tokens_a = tokens_a[0:(max_seq_length - 2)]

    tokens = ["[CLS]"] + tokens_a + ["[SEP]"]
    segment_ids = [0] * len(tokens)
    if tokens_b:
        tokens += tokens_b + ["[SEP]"]
        segment_ids += [1] * (len(tokens_b) + 1)

    input_ids = tokenizer.convert_tokens_to_ids(tokens)
    input_mask = [1] * len(input_ids)
    padding = max_seq_length - len(input_ids)
    input_ids += [0] * padding
    input_mask += [0] * padding
    segment_ids += [0] * padding

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


def file_based_convert_examples_to_features(examples, label_list, max_seq_length, tokenizer,
                                            output_file):
    """Converts `InputExample`s to a TFRecord file (the original's feature names)."""
    with tf.io.TFRecordWriter(output_file) as writer:
        for ex_index, example in enumerate(examples):
            if ex_index % 10000 == 0:
                logging.info("Writing example %d of %d", ex_index, len(examples))
            feature = convert_single_example(ex_index, example, label_list, max_seq_length, tokenizer)
            features = collections.OrderedDict()
            features["input_ids"] = _int_feature(feature.input_ids)
            features["input_mask"] = _int_feature(feature.input_mask)
            features["segment_ids"] = _int_feature(feature.segment_ids)
            if label_list is None:
                features["label_ids"] = _float_feature([feature.label_id])
            else:
                features["label_ids"] = _int_feature([feature.label_id])
            features["is_real_example"] = _int_feature([int(feature.is_real_example)])
            tf_example = tf.train.Example(features=tf.train.Features(feature=features))
            writer.write(tf_example.SerializeToString())


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


# ----------------------------------------------------------------------------------------------
# The original classifier: dropout 0.1 on the pooled output, then output_weights / output_bias.

CLASSIFIER_DROPOUT = 0.1


class ClassifierHead(modeling.NamedLayer):
    """"output_weights" [num_labels, hidden] (truncated normal, stddev 0.02), "output_bias" [num_labels]."""

    def __init__(self, num_labels, hidden_size, **kwargs):
        super().__init__(**kwargs)
        self.num_labels = num_labels
        self.hidden_size = hidden_size

    def build(self, input_shape=None):
        self.output_weights = self.add_named_weight(
            "output_weights", (self.num_labels, self.hidden_size), modeling.create_initializer(0.02))
        self.output_bias = self.add_named_weight("output_bias", (self.num_labels,), "zeros", autocast=False)
        self.built = True

    def call(self, pooled, training=False):
        if training:
            pooled = tf.nn.dropout(pooled, rate=CLASSIFIER_DROPOUT)
        logits = tf.matmul(tf.cast(pooled, self.compute_dtype),
                           tf.cast(self.output_weights, self.compute_dtype), transpose_b=True)
        return tf.nn.bias_add(tf.cast(logits, tf.float32), self.output_bias)


class ClassifierModel(keras.Model):
    """BertModel + the original classification head; call(features) -> float32 logits [batch, num_labels]."""

    def __init__(self, bert_config, num_labels, name="classifier", **kwargs):
        super().__init__(name=name, **kwargs)
        self.bert_config = bert_config
        self.num_labels = num_labels
        self.bert = modeling.BertModel(bert_config, name="bert")
        self.head = ClassifierHead(num_labels, bert_config.hidden_size, name="output")
        self.head.build()

    def variables_by_name(self):
        out = self.bert.variables_by_name()
        out.update(self.head.variables_by_name())
        return out

    def call(self, features, training=False):
        outputs = self.bert(features["input_ids"], features["input_mask"], features["segment_ids"],
                            training=training)
        return self.head(outputs["pooled_output"], training=training)


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
        model = ClassifierModel(self.bert_config, self.num_labels)
        dummy = tf.zeros([1, 2], tf.int32)
        model({"input_ids": dummy, "input_mask": dummy, "segment_ids": dummy})
        return model

    def compute_loss(self, model, features, training):
        logits = model(features, training=training)
        loss, _ = classifier_loss(logits, features["label_ids"], self.is_regression)
        return loss, {"loss": loss}

    def eval_metrics(self, model, features):
        logits = model(features, training=False)
        _, per_example_loss = classifier_loss(logits, features["label_ids"], self.is_regression)
        weights = tf.cast(features["is_real_example"], tf.float32)
        count = tf.reduce_sum(weights)
        result = {"eval_loss": (tf.reduce_sum(per_example_loss * weights), count)}
        if self.is_regression:
            x, y = logits[:, 0], tf.cast(features["label_ids"], tf.float32)
            # Moments for Pearson; Spearman needs every prediction and is added from a prediction pass.
            for name, value in (("x", x), ("y", y), ("xx", x * x), ("yy", y * y), ("xy", x * y)):
                result["moment_" + name] = (tf.reduce_sum(value * weights), count)
            return result
        predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
        labels = tf.cast(features["label_ids"], tf.int32)
        correct = tf.cast(tf.equal(predictions, labels), tf.float32)
        result["eval_accuracy"] = (tf.reduce_sum(correct * weights), count)
        if self.num_labels == 2:
            p, l = tf.cast(predictions == 1, tf.float32), tf.cast(labels == 1, tf.float32)
            for name, value in (("tp", p * l), ("fp", p * (1 - l)), ("fn", (1 - p) * l),
                                ("tn", (1 - p) * (1 - l))):
                result["confusion_" + name] = (tf.reduce_sum(value * weights), count)
        return result

    def final_eval_results(self, results):
        results = dict(results)
        moments = {k[len("moment_"):]: results.pop(k) for k in list(results) if k.startswith("moment_")}
        confusion = {k[len("confusion_"):]: results.pop(k) for k in list(results) if k.startswith("confusion_")}
        if "f1" in self.metric_names and confusion:
            tp, fp, fn = confusion["tp"], confusion["fp"], confusion["fn"]
            results["eval_f1"] = 2 * tp / (2 * tp + fp + fn) if tp > 0 else 0.0
        if "mcc" in self.metric_names and confusion:
            tp, fp, fn, tn = confusion["tp"], confusion["fp"], confusion["fn"], confusion["tn"]
            denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
            results["eval_mcc"] = (tp * tn - fp * fn) / denominator if denominator else 0.0
        if moments:
            var_x = moments["xx"] - moments["x"] ** 2
            var_y = moments["yy"] - moments["y"] ** 2
            cov = moments["xy"] - moments["x"] * moments["y"]
            results["eval_pearson"] = cov / math.sqrt(var_x * var_y) if var_x > 0 and var_y > 0 else 0.0
        return results

    def predict_outputs(self, model, features):
        outputs = model_outputs(model(features, training=False), self.is_regression)
        outputs["is_real_example"] = features["is_real_example"]
        return outputs


# ----------------------------------------------------------------------------------------------
# In-graph packing: the same truncation and layout as convert_single_example, for the export.


def pack_inputs(ids_a, ids_b, max_seq_length, cls_id, sep_id):
    """Packs ragged token ids [batch, (tokens)] into dense int32 input_ids, input_mask, segment_ids.

    Equal to convert_single_example: [CLS] a [SEP] b [SEP] with _truncate_seq_pair (a row whose b is empty
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
    # _truncate_seq_pair pops from the longer sequence (from b on ties) until the pair fits.
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
