"""BERT fine-tuning runner for sentence (pair) classification and regression.

GLUE (CoLA, SST-2, MRPC, QQP, STS-B, MNLI, QNLI, RTE, WNLI), XNLI and a user's own TSV/CSV, with the
original release's reading rules, feature conversion, classifier variables ("output_weights",
"output_bias") and output files (train.tf_record, eval_results.txt, test_results.tsv); training,
evaluation and prediction run on the shared loop in training.py (its flags: strategy, XLA, dtype, optimizer,
gradient accumulation, checkpoints).

    python run_classifier.py --task_name=MRPC --do_train --do_eval --do_predict --data_dir=glue/MRPC \
      --vocab_file=vocab.txt --bert_config_file=bert_config.json --init_checkpoint=bert_model.ckpt \
      --max_seq_length=128 --train_batch_size=32 --learning_rate=2e-5 --num_train_epochs=3 \
      --output_dir=out/mrpc --export_dir=out/mrpc/saved_model

--export_dir writes a SavedModel: "serving_default" takes int32 input_ids, input_mask, segment_ids and
"serving_text" takes raw strings text_a (and text_b for pair tasks), tokenized in the graph; both return
{"probabilities"} ({"score"} for regression). Load it with `import tensorflow_text` and
tf.saved_model.load. --export_onnx=FILE writes an ONNX model of "serving_default" (onnx_export.py; every
fine-tuning runner has the flag; --onnx_quantize: int8). --export_tflite=FILE writes a LiteRT model with the
tokenizer inside (raw text in; litert_classifier.py; --tflite_quantize: int8). --predict_input=FILE or - (stdin) predicts line after line (text_a, or text_a<TAB>text_b)
with the model loaded once. --task_name=custom reads a user's TSV/CSV (--text_a_column, --text_b_column,
--label_column, --label_list, --delimiter, --has_header, --regression). --processor_class=module.Class runs your own
DataProcessor subclass, written as the original's README says. --output_dropout_prob sets the output layer's
dropout (the original's fixed 0.1). --long_text reads a text_a longer than max_seq_length by its head and tail, or
whole in windows pooled per document (long_text.py; the default, truncate, is the original's).

The original's Python API is here too: the processors (DataProcessor._read_tsv returns a list of field lists),
InputExample, PaddingInputExample, InputFeatures, convert_single_example, convert_examples_to_features,
file_based_convert_examples_to_features, file_based_input_fn_builder and input_fn_builder (input_fn(params) ->
tf.data.Dataset), over this script's own conversion (packing.pack_pair) and records (records.py).
"""

import cli  # first: quiets TensorFlow's start-up logging
import collections
import csv
import dataclasses
import importlib.util
import io
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf
from absl import logging

import encoder
import filesystem
import glue_evaluation
import litert_classifier
import long_text
import modeling
import original_model_fn
import packing
import records
import runner
import serving
import tokenization
import training

@dataclasses.dataclass
class InputExample:
    """A single training/test example for simple sequence classification."""
    guid: str
    text_a: str
    text_b: str = None
    label: object = None


class PaddingInputExample:
    """Fake example so the number of examples is a multiple of a fixed batch size."""


class TsvLines(list):
    """The rows of a TSV or CSV file: what the original's DataProcessor._read_tsv returns (a list of field lists),
    knowing the file (`path`) and each row's line number in it (`line_numbers`), for error messages."""

    def __init__(self, rows=(), path=None, line_numbers=None):
        super().__init__(rows)
        self.path = path
        self.line_numbers = line_numbers


def _line_of(lines, i):
    """(file, line number) of row i of `lines` (TsvLines, or any list of rows a processor made itself)."""
    numbers = getattr(lines, "line_numbers", None)
    number = numbers[i] if numbers is not None and i < len(numbers) else i + 1
    return getattr(lines, "path", None) or "<rows>", number


class DataProcessor:
    """Base class for data converters for sequence classification data sets (the original's).

    A task's processor gives `InputExample`s from get_train_examples / get_dev_examples / get_test_examples(data_dir)
    and its labels from get_labels(). Written as the original's README says (a class like MrpcProcessor, reading
    with `self._read_tsv(path)`, a list of field lists), one runs with run_classifier.py --processor_class. By
    default get_*_examples read train_file / dev_file / test_file of data_dir (_read_file: TSV, quoting off) into
    _create_examples(lines, set_type).
    """

    # Subclasses may set these.
    is_regression = False
    is_pair = None  # None: a pair task when its examples have a text_b
    # Metrics reported next to eval_loss, as GLUE reports them for the task.
    metric_names = ("accuracy",)

    # Files in data_dir, and the guid prefixes of the dev and test sets.
    train_file, dev_file, test_file = "train.tsv", "dev.tsv", "test.tsv"
    dev_set, test_set = "dev", "test"

    def get_train_examples(self, data_dir):
        """Gets a collection of `InputExample`s for the train set."""
        return self._create_examples(self._read_file(os.path.join(data_dir, self.train_file)), "train")

    def get_dev_examples(self, data_dir):
        """Gets a collection of `InputExample`s for the dev set."""
        return self._create_examples(self._read_file(os.path.join(data_dir, self.dev_file)), self.dev_set)

    def get_test_examples(self, data_dir):
        """Gets a collection of `InputExample`s for prediction."""
        return self._create_examples(self._read_file(os.path.join(data_dir, self.test_file)), self.test_set)

    def get_labels(self):
        """The label strings in id order; None for regression."""
        raise NotImplementedError()

    def _create_examples(self, lines, set_type):
        """`InputExample`s of a file's rows (the original's processors have one)."""
        raise NotImplementedError()

    def _read_file(self, path):
        """The rows of one of the task's files: TSV with quoting off, as the original reads them."""
        return self._read_tsv(path)

    @classmethod
    def _read_tsv(cls, input_file, quotechar=None, delimiter="\t"):
        """Reads a tab separated value file (quoting off unless quotechar is given): a list of field lists, as the
        original's (TsvLines: it also knows the file and each row's line number)."""
        if not tf.io.gfile.exists(input_file) or tf.io.gfile.isdir(input_file):
            raise cli.MissingFileError("%s: data file not found: %s (check --data_dir)" % (cls.__name__, input_file))
        with tf.io.gfile.GFile(input_file, "rb") as f:
            data = f.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            line_number = data.count(b"\n", 0, err.start) + 1
            raise cli.UserError("%s line %d: not valid UTF-8 (%s at byte %d)" % (
                input_file, line_number, err.reason, err.start)) from None
        quoting = csv.QUOTE_NONE if quotechar is None else csv.QUOTE_MINIMAL
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quotechar=quotechar,
                            quoting=quoting)
        rows, line_numbers = [], []
        for line in reader:
            rows.append(line)
            line_numbers.append(reader.line_num)
        return TsvLines(rows, input_file, line_numbers)

    def _check(self, lines, i, min_columns):
        line = lines[i]
        if len(line) < min_columns:
            separator = {"\t": "tab", ",": "comma"}.get(getattr(self, "delimiter", "\t"), "separator")
            raise cli.UserError("%s line %d: expected at least %d %s-separated columns, found %d: %r" % (
                    *_line_of(lines, i), min_columns, separator, len(line), line))

    def _check_label(self, lines, i, label):
        if self.is_regression:
            try:
                return float(label)
            except ValueError:
                raise cli.UserError("%s line %d: label %r is not a number (regression task)" %
                                    (*_line_of(lines, i), label)) from None
        labels = self.get_labels()
        if label not in labels:
            raise cli.UserError("%s line %d: label %r is not in the task's label list %s" %
                                (*_line_of(lines, i), label, labels))
        return label

    def _test_label(self):
        """The dummy label the original gives unlabeled test examples (the first label)."""
        return 0.0 if self.is_regression else self.get_labels()[0]

    def _examples(self, lines, set_type, columns, skip_header, guid_column=None):
        """Builds examples from `columns` = (text_a, text_b or None, label or None) indices."""
        a_col, b_col, label_col = columns
        needed = max(c if c is not None and c >= 0 else 0 for c in columns) + 1
        if guid_column is not None:
            needed = max(needed, guid_column + 1)
        examples = []
        for i, line in enumerate(lines):
            if skip_header and i == 0:
                continue
            self._check(lines, i, needed)
            if guid_column is None:
                guid = "%s-%s" % (set_type, i)
            else:
                guid = "%s-%s" % (set_type, line[guid_column])
            text_a = line[a_col]
            text_b = None if b_col is None else line[b_col]
            if label_col is None:
                label = self._test_label()
            else:
                label = self._check_label(lines, i, line[label_col])
            examples.append(InputExample(guid=guid, text_a=text_a, text_b=text_b, label=label))
        return examples


class XnliProcessor(DataProcessor):
    """XNLI: trains on the machine-translated MultiNLI of one language, evaluates on that language."""

    is_pair = True

    def __init__(self, language="zh"):
        self.language = language

    def get_train_examples(self, data_dir):
        lines = self._read_file(os.path.join(data_dir, "multinli", "multinli.train.%s.tsv" % self.language))
        examples = []
        for i, line in enumerate(lines):
            if i == 0:
                continue
            self._check(lines, i, 3)
            label = line[2]
            if label == "contradictory":
                label = "contradiction"
            examples.append(InputExample(guid="train-%d" % i, text_a=line[0], text_b=line[1],
                                         label=self._check_label(lines, i, label)))
        return examples

    def _create_examples(self, lines, set_type):
        """The XNLI dev and test files: the rows of this language."""
        examples = []
        for i, line in enumerate(lines):
            if i == 0:
                continue
            self._check(lines, i, 8)
            if line[0] != self.language:
                continue
            examples.append(InputExample(guid="%s-%d" % (set_type, i), text_a=line[6], text_b=line[7],
                                         label=self._check_label(lines, i, line[1])))
        return examples

    def get_dev_examples(self, data_dir):
        return self._create_examples(self._read_file(os.path.join(data_dir, "xnli.dev.tsv")), "dev")

    def get_test_examples(self, data_dir):
        return self._create_examples(self._read_file(os.path.join(data_dir, "xnli.test.tsv")), "test")

    def get_labels(self):
        return ["contradiction", "entailment", "neutral"]


class MnliProcessor(DataProcessor):
    """MultiNLI (GLUE version), matched dev/test."""

    is_pair = True
    dev_file, test_file = "dev_matched.tsv", "test_matched.tsv"
    dev_set, test_set = "dev_matched", "test"

    def get_labels(self):
        return ["contradiction", "entailment", "neutral"]

    def _create_examples(self, lines, set_type):
        test = set_type.startswith("test")
        return self._examples(lines, set_type, (8, 9, None if test else -1), skip_header=True, guid_column=0)


class MnliMismatchedProcessor(MnliProcessor):
    """MultiNLI (GLUE version), mismatched dev/test."""

    dev_file, test_file = "dev_mismatched.tsv", "test_mismatched.tsv"
    dev_set, test_set = "dev_mismatched", "test_mismatched"


class MrpcProcessor(DataProcessor):
    """MRPC (GLUE version)."""

    is_pair = True
    metric_names = ("accuracy", "f1")

    def get_labels(self):
        return ["0", "1"]

    def _create_examples(self, lines, set_type):
        label_col = None if set_type == "test" else 0
        return self._examples(lines, set_type, (3, 4, label_col), skip_header=True)


class ColaProcessor(DataProcessor):
    """CoLA (GLUE version): train/dev have no header, the test set has one."""

    is_pair = False
    metric_names = ("mcc", "accuracy")

    def get_labels(self):
        return ["0", "1"]

    def _create_examples(self, lines, set_type):
        if set_type == "test":
            return self._examples(lines, set_type, (1, None, None), skip_header=True)
        return self._examples(lines, set_type, (3, None, 1), skip_header=False)


class Sst2Processor(DataProcessor):
    """SST-2 (GLUE version): sentence, label; the test set is index, sentence."""

    is_pair = False

    def get_labels(self):
        return ["0", "1"]

    def _create_examples(self, lines, set_type):
        if set_type == "test":
            return self._examples(lines, set_type, (1, None, None), skip_header=True)
        return self._examples(lines, set_type, (0, None, 1), skip_header=True)


class _GlueIndexedPairProcessor(DataProcessor):
    """GLUE files whose first column is an index: guid = set-index."""

    is_pair = True
    # (text_a, text_b, label) for train/dev and (text_a, text_b) for test.
    columns = None
    test_columns = None

    def _create_examples(self, lines, set_type):
        if set_type == "test":
            columns = tuple(self.test_columns) + (None,)
        else:
            columns = self.columns
        return self._examples(lines, set_type, columns, skip_header=True, guid_column=0)


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


@dataclasses.dataclass
class CustomTask:
    """The flags of --task_name=custom: a user's own TSV or CSV."""
    text_a_column: str = cli.option(None, "custom task: the text column (header name or 0-based index).")
    text_b_column: str = cli.option(None, "custom task: the optional second text column.")
    label_column: str = cli.option(None, "custom task: the label column.")
    label_list: list = cli.option(None, "custom task: the labels in id order (default: sorted labels of the train "
                                  "file).")
    delimiter: str = cli.option("\t", "custom task: the field separator (',' reads CSV with quoting).")
    has_header: bool = cli.option(True, "custom task: whether the first line is a header.")
    regression: bool = cli.option(False, "custom task: the label is a number (one output, squared error).")
    train_file: str = cli.option("train.tsv", "custom task: training file in data_dir.")
    dev_file: str = cli.option("dev.tsv", "custom task: evaluation file in data_dir.")
    test_file: str = cli.option("test.tsv", "custom task: prediction file in data_dir.")


class CustomProcessor(DataProcessor):
    """A user's own TSV or CSV (CustomTask): columns chosen by name (with a header) or by 0-based index.

    The label list is `label_list` when given, otherwise the sorted distinct labels of the train file.
    """

    def __init__(self, task, data_dir=None):
        if task.text_a_column is None or str(task.text_a_column) == "":
            raise cli.UserError("--text_a_column must name the text column of the custom task")
        self.text_a_column = str(task.text_a_column)
        self.text_b_column = None if task.text_b_column in (None, "") else str(task.text_b_column)
        self.label_column = None if task.label_column in (None, "") else str(task.label_column)
        delimiter = {"tab": "\t", "\\t": "\t", "comma": ","}.get(task.delimiter, task.delimiter)
        if not isinstance(delimiter, str) or len(delimiter) != 1:
            raise cli.UserError("--delimiter=%r: expected one character (or 'tab', 'comma')" % (delimiter,))
        self.delimiter = delimiter
        self.has_header = task.has_header
        self.is_regression = task.regression
        self.is_pair = self.text_b_column is not None
        self.metric_names = ("pearson", "spearman") if task.regression else ("accuracy",)
        self.train_file, self.dev_file, self.test_file = task.train_file, task.dev_file, task.test_file
        self.data_dir = data_dir
        self._labels = list(task.label_list) if task.label_list else None

    def _read_file(self, path):
        quotechar = '"' if self.delimiter == "," else None
        return self._read_tsv(path, quotechar=quotechar, delimiter=self.delimiter)

    def _resolve(self, path, header, column, flag):
        if column is None:
            return None
        if self.has_header and column in header:
            return header.index(column)
        if column.lstrip("-").isdigit():
            return int(column)
        raise cli.UserError("%s: --%s=%r is neither a column of the header %s nor a column index" % (
                path, flag, column, header))

    def get_labels(self):
        if self.is_regression:
            return None
        if self._labels is None:
            if self.label_column is None:
                raise cli.UserError("custom task: give --label_column or --label_list")
            if self.data_dir is None:
                raise cli.UserError("custom task: --label_list is needed when there is no train file")
            path = os.path.join(self.data_dir, self.train_file)
            labels = set()
            for ex in self._create_examples(self._read_file(path), "train", check_labels=False):
                labels.add(ex.label)
            self._labels = sorted(labels)
            logging.info("custom task: label list from %s: %s", path, self._labels)
        return self._labels

    def _create_examples(self, lines, set_type, check_labels=True):
        path = _line_of(lines, 0)[0]
        header = lines[0] if (self.has_header and lines) else []
        a_col = self._resolve(path, header, self.text_a_column, "text_a_column")
        b_col = self._resolve(path, header, self.text_b_column, "text_b_column")
        label_col = None
        if set_type != "test" or (self.label_column is not None and self.label_column in header):
            label_col = self._resolve(path, header, self.label_column, "label_column")
        if set_type != "test" and label_col is None:
            raise cli.UserError("custom task: --label_column is needed to read %s" % path)
        needed = max(c if c >= 0 else 0 for c in (a_col, b_col, label_col) if c is not None) + 1
        examples = []
        for i, line in enumerate(lines):
            if self.has_header and i == 0:
                continue
            self._check(lines, i, needed)
            label = self._test_label() if label_col is None else line[label_col]
            if check_labels and label_col is not None:
                label = self._check_label(lines, i, label)
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


# The options (flags) a processor may read: the custom task's, and XNLI's language.
def get_processor(task_name, data_dir=None, xnli_language="zh", processor_class=None, **custom):
    """The processor for `task_name` (case-insensitive); XNLI reads xnli_language, the custom task its data_dir
    and `custom` (CustomTask's flags). processor_class (--processor_class) names a user's own DataProcessor
    subclass instead (user_processor_class), made without arguments."""
    if processor_class:
        return user_processor_class(processor_class)()
    name = (task_name or "").lower()
    name = _ALIASES.get(name, name)
    if name not in PROCESSORS:
        raise cli.UserError("Task not found: %r (--task_name); valid tasks: %s; or give your own DataProcessor "
                            "subclass with --processor_class" % (task_name, ", ".join(PROCESSORS)))
    if name == "custom":
        return CustomProcessor(CustomTask(**custom), data_dir)
    if name == "xnli":
        return XnliProcessor(language=xnli_language or "zh")
    return PROCESSORS[name]()


def user_processor_class(spec):
    """The DataProcessor subclass that --processor_class names: `module.Class` or `module:Class` (a module found
    from the current folder or sys.path) or `path/to/file.py:Class`.

    The user's module imports run_classifier (for DataProcessor, InputExample): run as a script, this module is
    registered under that name first, so that it gets this very module rather than a second copy.
    """
    flag = "--processor_class=%s" % spec
    module_name, _, class_name = spec.rpartition(":") if ":" in spec else spec.rpartition(".")
    if not module_name or not class_name:
        raise cli.UserError("%s: expected module.Class, module:Class or path/to/file.py:Class" % flag)
    sys.modules.setdefault("run_classifier", sys.modules[__name__])
    try:
        if module_name.endswith(".py"):
            filesystem.require_file(module_name, "--processor_class")
            folder = os.path.dirname(os.path.abspath(module_name))
            if folder not in sys.path:
                sys.path.append(folder)
            module_spec = importlib.util.spec_from_file_location(
                os.path.splitext(os.path.basename(module_name))[0], module_name)
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:
                sys.path.append(os.getcwd())
            module = importlib.import_module(module_name)
    except (ImportError, SyntaxError) as err:
        raise cli.UserError("%s: cannot import %s: %s" % (flag, module_name, cli.one_line(err))) from None
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, DataProcessor)):
        raise cli.UserError("%s: %s has no DataProcessor subclass %r (found %r); write your processor as a "
                            "subclass of run_classifier.DataProcessor" % (flag, module_name, class_name, cls))
    logging.info("Task processor: %s.%s (--processor_class)", module.__name__, cls.__name__)
    return cls


# ----------------------------------------------------------------------------------------------
# Features: [CLS] a [SEP] b [SEP], packed by packing.pack_pair (as the exported serving_text packs).


FEATURE_NAMES = records.names(records.classifier(None, False))


def examples_to_arrays(examples, label_list, max_seq_length, tokenizer, num_workers=1, log_examples=5,
                       reading=None):
    """{feature name: array} of `InputExample`s, in the original's layout and feature names.

    Texts are tokenized with the exact tokenizer (in num_workers processes when > 1) and packed as `reading` (a
    long_text.LongText; default truncate: packing.pack_pair, the original's truncation) reads them
    (long_text.pack_documents: with windows, each example's side by side, [examples, max_windows_per_document *
    max_seq_length]).
    `label_list` None means regression (float labels). `PaddingInputExample`s become all-zero rows with
    is_real_example 0.
    """
    reading = reading or long_text.LongText()
    real = [not isinstance(example, PaddingInputExample) for example in examples]
    texts_a = [example.text_a if is_real else "" for example, is_real in zip(examples, real)]
    texts_b = [(example.text_b or "") if is_real else "" for example, is_real in zip(examples, real)]
    ids = tokenization.tokenize_in_processes(texts_a + texts_b, tokenizer, num_workers)
    special_ids = packing.SpecialIds.of(tokenizer.vocab)
    chunk = packing.PACK_CHUNK // reading.max_windows_per_document if reading.windows else packing.PACK_CHUNK
    arrays = packing.pack_in_chunks(
        lambda a, b: long_text.pack_documents(a, b, max_seq_length, reading, special_ids),
        ids[:len(examples)], ids[len(examples):], max(chunk, 1))
    if reading.windows:
        _log_windows(arrays.pop("num_windows"), max_seq_length, reading)
        log_examples = 0
    is_real = np.asarray(real, np.int64)
    for name in FEATURE_NAMES[:3]:
        arrays[name] = arrays[name] * is_real[:, np.newaxis].astype(np.int32)
    arrays["label_ids"] = label_ids(examples, label_list)
    arrays["is_real_example"] = is_real
    for ex_index in range(min(log_examples, len(examples))):
        if real[ex_index]:
            _log_example(examples[ex_index], arrays, ex_index, label_list, tokenizer)
    return arrays


def _log_windows(num_windows, max_seq_length, reading):
    """Logs how many windows the texts were read in, and how many texts the max_windows_per_document bound cut
    (num_windows: each text's windows before the bound)."""
    bound = reading.max_windows_per_document
    cut = int(np.sum(num_windows > bound))
    logging.info("--long_text=windows: %d texts in %d windows of %d tokens (a new one every %d tokens of text_a)",
                 len(num_windows), int(np.minimum(num_windows, bound).sum()), max_seq_length, reading.doc_stride)
    if cut:
        logging.warning("--max_windows_per_document=%d: %d of %d texts have more windows (up to %d): only their "
                        "first %d are read", bound, cut, len(num_windows), int(num_windows.max()), bound)


def label_ids(examples, label_list):
    """Label ids (int64), or float32 scores when label_list is None; padding examples get 0."""
    if label_list is None:
        return np.asarray([0.0 if isinstance(e, PaddingInputExample) else float(e.label) for e in examples],
                          np.float32)
    label_map = {label: i for i, label in enumerate(label_list)}
    out = np.zeros([len(examples)], np.int64)
    for i, example in enumerate(examples):
        if isinstance(example, PaddingInputExample):
            continue
        if example.label not in label_map:
            raise cli.UserError("example %s: label %r is not in the label list %s" %
                                (example.guid, example.label, label_list))
        out[i] = label_map[example.label]
    return out


def _log_example(example, arrays, i, label_list, tokenizer):
    length = int(arrays["input_mask"][i].sum())
    tokens = tokenizer.convert_ids_to_tokens(arrays["input_ids"][i][:length].tolist())
    logging.info("*** Example ***")
    logging.info("guid: %s", example.guid)
    logging.info("tokens: %s", " ".join(tokenization.printable_text(x) for x in tokens))
    for name in ("input_ids", "input_mask", "segment_ids"):
        logging.info("%s: %s", name, " ".join(str(x) for x in arrays[name][i]))
    if label_list is None:
        logging.info("label: %s (score = %g)", example.label, arrays["label_ids"][i])
    else:
        logging.info("label: %s (id = %d)", example.label, arrays["label_ids"][i])


# The original's feature API, on the same conversion.


@dataclasses.dataclass
class InputFeatures:
    """A single set of features of data."""
    input_ids: list
    input_mask: list
    segment_ids: list
    label_id: object
    is_real_example: bool = True


def features_from_arrays(arrays):
    """`InputFeatures` of the rows of examples_to_arrays' arrays."""
    return [InputFeatures(input_ids=arrays["input_ids"][i].tolist(), input_mask=arrays["input_mask"][i].tolist(),
                          segment_ids=arrays["segment_ids"][i].tolist(), label_id=arrays["label_ids"][i].item(),
                          is_real_example=bool(arrays["is_real_example"][i]))
            for i in range(len(arrays["input_ids"]))]


def convert_single_example(ex_index, example, label_list, max_seq_length, tokenizer):
    """Converts a single `InputExample` into a single `InputFeatures` (logged when ex_index < 5, as the
    original)."""
    arrays = examples_to_arrays([example], label_list, max_seq_length, tokenizer, log_examples=int(ex_index < 5))
    return features_from_arrays(arrays)[0]


def convert_examples_to_features(examples, label_list, max_seq_length, tokenizer):
    """Convert a set of `InputExample`s to a list of `InputFeatures`."""
    return features_from_arrays(examples_to_arrays(examples, label_list, max_seq_length, tokenizer))


def file_based_convert_examples_to_features(examples, label_list, max_seq_length, tokenizer, output_file,
                                            num_workers=1):
    """Convert a set of `InputExample`s to a TFRecord file (any file system): the original's features, one
    record per example; num_workers processes tokenize. Returns the number of records."""
    arrays = examples_to_arrays(examples, label_list, max_seq_length, tokenizer, num_workers)
    return records.write_file(output_file, arrays, records.classifier(max_seq_length, label_list is None))


def file_based_input_fn_builder(input_file, seq_length, is_training, drop_remainder):
    """The original's `input_fn(params)` over a file of file_based_convert_examples_to_features:
    input_fn({"batch_size": n}) is a tf.data.Dataset of batches (int32 features); when training, repeated and
    shuffled in a buffer of 100 records."""
    make = records.input_fn(input_file, records.classifier(seq_length, False), is_training, drop_remainder)
    return lambda params: make(params["batch_size"])


def input_fn_builder(features, seq_length, is_training, drop_remainder):
    """The original's in-memory `input_fn(params)` over `InputFeatures`: input_fn({"batch_size": n}) is a
    tf.data.Dataset of batches of int32 input_ids, input_mask, segment_ids [n, seq_length] and label_ids [n]."""
    labels = np.asarray([f.label_id for f in features])
    arrays = {name: np.asarray([getattr(f, name) for f in features], np.int32).reshape(-1, seq_length)
              for name in ("input_ids", "input_mask", "segment_ids")}
    arrays["label_ids"] = labels.astype(np.float32 if labels.dtype.kind == "f" else np.int32)
    return runner.original_input_fn(arrays, is_training, drop_remainder)


def pad_examples(examples, batch_size):
    """Appends `PaddingInputExample`s until len(examples) is a multiple of batch_size."""
    examples = list(examples)
    while len(examples) % batch_size != 0:
        examples.append(PaddingInputExample())
    return examples


def eval_results(metric_names, outputs, labels, is_regression, batch_size):
    """eval_results.txt entries from predictions over the eval set (padding examples included, flagged by
    is_real_example): the task's metrics and eval_loss over real examples, and `loss`, the mean over the
    batches of eval_batch_size of each batch's mean loss (the Estimator's `loss`)."""
    real = np.asarray(outputs["is_real_example"]) == 1
    predictions = outputs["score"] if is_regression else np.argmax(outputs["probabilities"], axis=-1)
    results = glue_evaluation.compute_metrics(metric_names, predictions[real], np.asarray(labels)[real])
    losses = np.asarray(outputs["per_example_loss"], np.float64)
    results["eval_loss"] = float(np.mean(losses[real]))
    results["loss"] = float(np.mean([losses[i:i + batch_size].mean() for i in range(0, len(losses), batch_size)]))
    return results


# ----------------------------------------------------------------------------------------------
# The task: the original classifier's loss and outputs for training.py.


def classifier_loss(logits, labels, is_regression):
    """(mean loss, per-example loss): cross entropy of the softmax, or squared error for regression."""
    if is_regression:
        per_example_loss = tf.square(logits[:, 0] - tf.cast(labels, tf.float32))
    else:
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        one_hot = tf.one_hot(tf.cast(labels, tf.int32), depth=tf.shape(logits)[-1], dtype=tf.float32)
        per_example_loss = -tf.reduce_sum(one_hot * log_probs, axis=-1)
    return tf.reduce_mean(per_example_loss), per_example_loss


class ClassifierTask(training.Task):
    """The classifier job for training.py: loss, and per-example outputs (probabilities or score, loss).

    windows (a long_text.WindowedLogits): the examples are documents read in windows (long_text.by_document), a
    document's logits pooled over its windows, in the loss as in the outputs."""

    def __init__(self, bert_config, num_labels, is_regression=False, output_dropout=encoder.CLASSIFIER_DROPOUT,
                 windows=None):
        self.bert_config = bert_config
        self.num_labels = 1 if is_regression else num_labels
        self.is_regression = is_regression
        self.output_dropout = output_dropout
        self.windows = windows

    def build_model(self, elementwise_dtype="float32"):
        return encoder.ClassifierModel(self.bert_config, self.num_labels, dropout=self.output_dropout,
                                       elementwise_dtype=elementwise_dtype)

    def logits(self, model, features, training, dropout_seed=None):
        if self.windows is None:
            return model(features, training=training, dropout_seed=dropout_seed)
        return self.windows(model, features, training, dropout_seed)

    def compute_loss(self, model, features, training, dropout_seed=None):
        logits = self.logits(model, features, training, dropout_seed)
        loss, _ = classifier_loss(logits, features["label_ids"], self.is_regression)
        return loss, {"loss": loss}

    def predict_outputs(self, model, features):
        logits = self.logits(model, features, False)
        if self.is_regression:
            outputs = {"score": logits[:, 0]}
        else:
            outputs = {"probabilities": tf.nn.softmax(logits, axis=-1)}
        if "label_ids" in features:
            outputs["per_example_loss"] = classifier_loss(logits, features["label_ids"], self.is_regression)[1]
        outputs["is_real_example"] = features["is_real_example"]
        return outputs


def format_prediction(prediction, is_regression):
    """One test_results.tsv row: class probabilities (or the score) tab separated, as the original."""
    if is_regression:
        return str(prediction["score"])
    return "\t".join(str(p) for p in prediction["probabilities"])


# ----------------------------------------------------------------------------------------------
# The job.


@dataclasses.dataclass
class ClassifierOptions(runner.RecordFinetuningOptions):
    """run_classifier.py's flags: the fine-tuning runners' (runner.RecordFinetuningOptions) and its own."""
    data_dir: str = cli.option(None, "The input data dir. Should contain the .tsv files (or other data files) for "
                               "the task.")
    task_name: str = cli.option(None, "The name of the task to train: " + ", ".join(PROCESSORS) + ".",
                                required=True)
    predict_input: str = cli.option(None, "Predict every line of this file ('-': stdin), text_a or "
                                    "text_a<TAB>text_b, with the model loaded once.")
    predict_output: str = cli.option(None, "Where --predict_input rows go (default: stdout).")
    num_workers: int = cli.option(1, "Processes converting examples to feature TFRecords (the files are the same "
                                  "for any number).")
    xnli_language: str = cli.option("zh", "XNLI: the language to train and evaluate on.")
    processor_class: str = cli.option(None, "Your own DataProcessor subclass, written as the original's README "
                                      "says (a class like MrpcProcessor): module.Class, module:Class (found from "
                                      "the current folder) or path/to/file.py:Class. It reads the task's data "
                                      "instead of --task_name's processor; --task_name then only names the task.")
    custom: CustomTask = cli.nested(CustomTask)
    output_dropout_prob: float = runner.output_dropout_option()
    reading: long_text.LongText = cli.nested(long_text.LongText)

    def __post_init__(self):
        super().__post_init__()
        runner.check_output_dropout(self.output_dropout_prob)
        self.reading.check(self.model.max_seq_length)
        mode = self.reading.long_text
        for flag, what in (("export_onnx", "The ONNX model takes token ids"),
                           ("export_tflite", "The LiteRT model packs text")):
            if mode != "truncate" and getattr(self, flag):
                raise cli.UserError(f"--{flag} with --long_text={mode}: {what} cut to one window of "
                                    f"--max_seq_length tokens and cannot read text as trained; export a SavedModel "
                                    f"(--export_dir), whose serving_text reads long texts with --long_text={mode}")

    def processor(self):
        """The task's DataProcessor, configured by these options (get_processor)."""
        return get_processor(self.task_name, self.data_dir, self.xnli_language, self.processor_class,
                             **dataclasses.asdict(self.custom))


class Job(runner.Job):
    """One run_classifier.py invocation: the task's data, features, metrics and outputs on runner.Job's steps."""

    def __init__(self, options):
        super().__init__(options)
        if options.do_train or options.do_eval or options.do_predict:
            filesystem.require_dir(options.data_dir, "--data_dir")
        self.processor = options.processor()
        self.label_list = self.processor.get_labels()
        self.labels = self.label_list
        self.is_regression = self.processor.is_regression
        num_labels = 1 if self.is_regression else len(self.label_list)
        self.reading = options.reading
        windows = None
        if self.reading.windows:
            windows = long_text.WindowedLogits(self.model.max_seq_length, self.reading)
        self.task = ClassifierTask(self.bert_config, num_labels, self.is_regression, options.output_dropout_prob,
                                   windows)
        self.splits = {}
        self.is_pair = self.processor.is_pair

    # runner.Job's, with the streamed predictions after predict; the LiteRT model comes last: it is made from
    # the SavedModel of --export_dir when there is one.
    steps = runner.Job.steps[:3] + (("streamed", "predict_input", "predict_stream"),) + runner.Job.steps[3:]

    def read_data(self):
        options = self.options
        for enabled, split, read in ((options.do_train, "train", self.processor.get_train_examples),
                                     (options.do_eval, "dev", self.processor.get_dev_examples),
                                     (options.do_predict, "test", self.processor.get_test_examples)):
            if enabled:
                self.splits[split] = runner.require_examples(read(options.data_dir), f"--data_dir={options.data_dir}",
                                                             split + " examples")
        if options.predict_input and options.predict_input != "-":
            filesystem.require_file(options.predict_input, "--predict_input")
        if self.is_pair is None:  # a processor that does not say: a pair task when its examples have a text_b
            examples = [example for split in self.splits.values() for example in split]
            self.is_pair = not examples or any(example.text_b for example in examples)
            logging.info("%s: a %s task (its examples)", type(self.processor).__name__,
                         "sentence-pair" if self.is_pair else "single-sentence")

    def start(self):
        if self.task.windows is not None:  # one static shape where XLA or a TPU compiles the step
            self.task.windows.static = not runner.uses_real_lengths(self.config)

    def features(self, examples):
        """The feature arrays of `examples` (with --long_text=windows, each example's windows side by side)."""
        return examples_to_arrays(examples, self.label_list, self.model.max_seq_length, self.tokenizer,
                                  self.options.num_workers, reading=self.reading)

    def train(self):
        examples = self.splits["train"]
        config = self.finetuning_config(len(examples), "documents" if self.reading.windows else "examples")
        width = self.model.max_seq_length * (self.reading.max_windows_per_document if self.reading.windows else 1)
        record_format = records.classifier(width, self.is_regression)
        records.write_file(self.record_path("train.tf_record"), self.features(examples), record_format)
        input_fn = self.train_input_fn(self.record_path("train.tf_record"), record_format, len(examples),
                                       config.seed)
        return self.train_loop(input_fn, config)

    def _predict(self, examples, name, batch_size):
        num_actual = len(examples)
        if self.config.use_tpu:
            examples = pad_examples(examples, batch_size)
        arrays = self.features(examples)
        logging.info("***** Running %s *****", "evaluation" if name == "eval" else "prediction")
        logging.info("  Num examples = %d (%d actual, %d padding)", len(examples), num_actual,
                     len(examples) - num_actual)
        logging.info("  Batch size = %d", batch_size)
        # Windows side by side are cut to their longest inside the task (WindowedLogits), not as rows here.
        real_lengths = False if self.reading.windows else None
        return arrays, self.predict_arrays(arrays, batch_size, real_lengths,
                                           what="evaluation" if name == "eval" else "prediction")

    def evaluate(self):
        """Writes eval_results.txt; returns the results."""
        batch_size = self.config.eval_batch_size
        arrays, outputs = self._predict(self.splits["dev"], "eval", batch_size)
        results = eval_results(self.processor.metric_names, outputs, arrays["label_ids"], self.is_regression,
                               batch_size)
        results["global_step"] = self.inference_checkpoint()[1]
        return self.write_results(runner.EVAL_RESULTS_FILE, results)

    def predict(self):
        """Writes test_results.tsv (one row per real example); returns the rows."""
        _, outputs = self._predict(self.splits["test"], "predict", self.config.predict_batch_size)
        real = np.flatnonzero(outputs["is_real_example"] == 1)
        rows = [format_prediction({name: value[i] for name, value in outputs.items()}, self.is_regression)
                for i in real]
        logging.info("***** Predict results *****")
        self.write_output("test_results.tsv", "".join(row + "\n" for row in rows))
        return rows

    def predict_stream(self, stdin=None, stdout=None):
        """--predict_input: predicts every line with the model loaded once; returns the number of rows."""
        options = self.options
        source = "<stdin>" if options.predict_input == "-" else options.predict_input
        reader = (stdin or sys.stdin) if options.predict_input == "-" else tf.io.gfile.GFile(options.predict_input, "r")
        to_stdout = not options.predict_output or options.predict_output == "-"
        writer = (stdout or sys.stdout) if to_stdout else tf.io.gfile.GFile(options.predict_output, "w")
        try:
            count = self.predict_lines(read_prediction_lines(reader, self.is_pair, source), writer)
        finally:
            if options.predict_input != "-":
                reader.close()
            if not to_stdout:
                writer.close()
        logging.info("Predicted %d inputs from %s", count, source)
        return count

    def predict_lines(self, lines, writer):
        """Predicts every (text_a, text_b) of `lines`; writes a row per input as soon as its batch is done
        (--predict_batch_size=1 for interactive use). Returns the number of rows."""
        errors = []
        tokenizer = self.tokenizer

        def generate():
            # An error inside tf.data would come back wrapped; keep it, end the input, raise it afterwards.
            try:
                for text_a, text_b in lines:
                    yield (tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text_a)),
                           tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text_b or "")))
            except Exception as err:  # pylint: disable=broad-except
                errors.append(err)

        special_ids, length, reading = packing.SpecialIds.of(tokenizer.vocab), self.model.max_seq_length, self.reading

        def pack(ids_a, ids_b):
            packed = long_text.pack_documents(ids_a, ids_b, length, reading, special_ids)
            packed.pop("num_windows", None)
            packed["is_real_example"] = tf.ones_like(packed["input_ids"][:, 0])
            return packed

        def input_fn(batch_size, input_context=None):
            spec = tf.TensorSpec([None], tf.int32)
            dataset = tf.data.Dataset.from_generator(generate, output_signature=(spec, spec))
            return dataset.ragged_batch(batch_size).map(pack)

        count = 0
        for prediction in training.predict(self.task, input_fn, self.config, self.inference_strategy,
                                           self.inference_checkpoint()[0]):
            writer.write(format_prediction(prediction, self.is_regression) + "\n")
            writer.flush()
            count += 1
        if errors:
            raise errors[0]
        return count

    def serving(self, model):
        return serving.ClassifierServing(model, self.model, self.is_regression, self.is_pair,
                                         self.label_list, self.reading)

    def export_tflite(self):
        """Writes the LiteRT model (litert_classifier.py) of the SavedModel in --export_dir (exported to a scratch
        folder first when there is none, or when it is not a plain float32 one of whole calls: --export_dtype, XLA,
        --export_rows_per_step)."""
        options = self.options
        with tempfile.TemporaryDirectory() as scratch:
            export_dir = options.export_dir
            if (not export_dir or options.export_dtype != "float32" or self.config.use_xla
                    or options.export_rows_per_step):
                export_dir = serving.export_saved_model(os.path.join(scratch, "saved_model"), self.build_model,
                                                        self.inference_checkpoint()[0], self.serving,
                                                        self.labels, serving.ExportSettings(rows_per_step=None))
            litert_classifier.export(options.export_tflite, export_dir, self.model, self.is_pair,
                                     options.tflite_quantize)
        logging.info("Wrote the LiteRT model %s%s", options.export_tflite,
                     " (dynamic-range int8)" if options.tflite_quantize else "")
        return options.export_tflite


def read_prediction_lines(stream, is_pair, source="<stdin>"):
    """Yields (text_a, text_b) from lines `text_a` or `text_a<TAB>text_b`; a bad line is an error."""
    line_number = 0
    try:
        for line_number, line in enumerate(stream, 1):
            fields = line.rstrip("\r\n").split("\t")
            if is_pair and len(fields) != 2:
                raise cli.UserError("%s line %d: expected text_a<TAB>text_b for a sentence-pair task, found %d "
                                    "field(s)" % (source, line_number, len(fields)))
            if not is_pair and len(fields) != 1:
                raise cli.UserError("%s line %d: expected one text without tabs for a single-sentence task, "
                                    "found %d fields" % (source, line_number, len(fields)))
            yield fields[0], (fields[1] if is_pair else None)
    except UnicodeDecodeError as err:
        raise cli.UserError("%s line %d: not valid UTF-8 (%s)" % (source, line_number + 1, err.reason)) from None


# ----------------------------------------------------------------------------------------------
# The original's create_model and model_fn_builder, on TensorFlow 2 (modeling's original API).


def create_model(bert_config, is_training, input_ids, input_mask, segment_ids, labels, num_labels,
                 use_one_hot_embeddings):
    """The original's classification model, eagerly or in a tf.function: modeling.BertModel, the output layer
    (variables `output_weights` [num_labels, hidden_size] and `output_bias` [num_labels], as the original's; 0.1
    dropout before it when training) on the pooled output, and the softmax cross-entropy of `labels` ->
    (loss, per_example_loss, logits, probabilities). The variables are modeling's, made once per name:
    modeling.trainable_variables() (TensorFlow 2's tf.trainable_variables()) lists them."""
    model = modeling.BertModel(config=bert_config, is_training=is_training, input_ids=input_ids,
                               input_mask=input_mask, token_type_ids=segment_ids,
                               use_one_hot_embeddings=use_one_hot_embeddings)
    logits = modeling.output_layer(model.get_pooled_output(), num_labels, is_training)
    with tf.compat.v1.variable_scope("loss"):
        probabilities = tf.nn.softmax(logits, axis=-1)
        loss, per_example_loss = classifier_loss(logits, labels, is_regression=False)
    return loss, per_example_loss, logits, probabilities


def model_fn_builder(bert_config, num_labels, init_checkpoint, learning_rate, num_train_steps, num_warmup_steps,
                     use_tpu, use_one_hot_embeddings):
    """The original's model_fn_builder. TensorFlow 2.16+ has no tf.estimator to run a model_fn: call the model_fn
    it returns yourself, eagerly or in a tf.function, `model_fn(features, labels=None, mode, params=None)` on a
    batch of features (input_ids, input_mask, segment_ids; label_ids, and is_real_example for EVAL) ->
    modeling.EstimatorSpec:
      mode PREDICT (the default): predictions {"probabilities"}, and the loss of label_ids when given;
      mode TRAIN: loss and train_op, a function: train_op() runs one step of optimization.create_optimizer on
        this batch (one optimizer for every call of this builder's model_fn, as the original's graph had one) and
        returns the loss;
      mode EVAL: loss and, in predictions, what the original's metric_fn read (per_example_loss, label_ids,
        logits, is_real_example; run_classifier.py --do_eval computes the task's metrics).
    Its first call loads init_checkpoint into the model's variables by the assignment map, as the original's
    model_fn did (a fine-tuned checkpoint: output_weights and output_bias too; original_model_fn)."""
    loader = original_model_fn.CheckpointLoader(init_checkpoint)

    def outputs(features, is_training):
        label_ids = features.get("label_ids")
        if label_ids is None:
            label_ids = tf.zeros_like(features["input_ids"][:, 0])
        return create_model(bert_config, is_training, features["input_ids"], features["input_mask"],
                            features["segment_ids"], label_ids, num_labels, use_one_hot_embeddings)

    train_op = original_model_fn.TrainOp(lambda features: outputs(features, True)[0], learning_rate,
                                         num_train_steps, num_warmup_steps, use_tpu)

    def model_fn(features, labels=None, mode=modeling.ModeKeys.PREDICT, params=None):
        is_training = mode == modeling.ModeKeys.TRAIN
        total_loss, per_example_loss, logits, probabilities = original_model_fn.load_once(
            loader, lambda: outputs(features, is_training))
        if is_training:
            return modeling.EstimatorSpec(mode=mode, predictions=None, loss=total_loss,
                                          train_op=train_op.for_batch(features))
        if mode == modeling.ModeKeys.EVAL:
            is_real_example = features.get("is_real_example")
            if is_real_example is None:
                is_real_example = tf.ones_like(per_example_loss)
            predictions = {"per_example_loss": per_example_loss, "label_ids": features["label_ids"],
                           "logits": logits, "is_real_example": tf.cast(is_real_example, tf.float32)}
            return modeling.EstimatorSpec(mode=mode, predictions=predictions, loss=total_loss, train_op=None)
        return modeling.EstimatorSpec(mode=mode, predictions={"probabilities": probabilities}, loss=total_loss,
                                      train_op=None)

    return model_fn
# ----------------------------------------------------------------------------------------------


def run(options):
    """The whole job for ClassifierOptions; returns {"train", "eval", "predict" (rows), "streamed" (count),
    "export", "export_tflite"} for what ran."""
    return Job(options).run()


if __name__ == "__main__":
    cli.main(ClassifierOptions, run)
