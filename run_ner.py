"""BERT fine-tuning runner for named-entity recognition on CoNLL-format data (CoNLL-2003).

    python run_ner.py --do_train --do_eval --do_predict --data_dir=conll2003 \
      --vocab_file=vocab.txt --bert_config_file=bert_config.json --init_checkpoint=bert_model.ckpt \
      --do_lower_case=False --max_seq_length=128 --train_batch_size=32 --learning_rate=5e-5 \
      --num_train_epochs=3 --output_dir=out/ner --export_dir=out/ner/saved_model

Training, evaluation and prediction run on the shared loop in training.py (its flags: strategy, XLA, dtype,
optimizer, gradient accumulation, checkpoints). --output_dropout_prob sets the output layer's dropout (0.1, the
classifier's). --export_onnx=FILE [--onnx_quantize] and --export_tflite=FILE [--tflite_quantize] write the
SavedModel's serving_default (token ids in, per-token probabilities out) as an ONNX or LiteRT model, in float32 or
int8 (onnx_export.py, litert_export.py).

Data: `train.txt`, `dev.txt`, `test.txt` in --data_dir, one token per line (`word POS chunk tag`, or any
number of columns with the word first and the tag last, the same number on every line of a file), blank lines
between sentences, `-DOCSTART-` lines between documents. Tags may be IOB1 or IOB2; they are converted to IOB2
(an `I-X` that follows `O` or another type becomes `B-X`). The label list is taken from the training data: "O"
and B-/I- of each entity type found there; a dev/test tag outside it is an error naming file and line.

Features (token classification as in the BERT paper): each word is WordPiece-tokenized with the exact
tokenizer; the label of a word sits on its first sub-token, other sub-tokens, [CLS], [SEP] and padding get
label weight 0 and are left out of the loss and the metrics. A word the tokenizer turns into nothing
(e.g. only control characters) is fed as [UNK] (logged), so every word gets exactly one prediction.

Long sentences: a sentence with more than max_seq_length - 2 sub-tokens is split into windows of
max_seq_length - 2 sub-tokens that start every --doc_stride sub-tokens (at most a window apart; the original
run_squad.py's sliding window); the last window ends at the sentence end. Each word is predicted in exactly one
window: the one where its first sub-token has the most context (the original's max-context rule,
min(left, right) + 0.01 * window length); a window that predicts no word is left out (logged). No word is
dropped and no sub-token is truncated.

Document context (--document_context): a sentence that fits is surrounded by sub-tokens of the neighbouring
sentences of its document (half the free room before it, half after; one side's unused room goes to the
other) as context with label weight 0.

Outputs in --output_dir: eval_results.txt (entity-level precision, recall and F1 overall and per type, from
conlleval.py, plus eval_loss and token accuracy), eval_predictions.txt / test_predictions.txt (`word gold
pred`, blank line between sentences: conlleval input), eval_conlleval.txt / test_conlleval.txt (conlleval's
report), label_list.txt. --export_dir: a SavedModel whose `serving_text` signature tags raw sentences
(words split at whitespace -> one tag per word, windowed by packing.ner_windows as the records are) and whose
`serving_default` maps input_ids, input_mask, segment_ids [batch, seq] to per-token label probabilities
`probabilities` [batch, seq, labels] (the label of each column is in assets.extra/labels.txt); see
serving.NerServing.

Evaluation (--do_eval on dev.txt, --do_predict on test.txt) is one prediction pass through training.predict
(the shared loop); eval_results.txt / test_results.txt hold eval_precision, eval_recall, eval_f1 (entity
level, as fractions, from conlleval.py), the same per type (eval_LOC_f1, ...), eval_token_accuracy,
eval_loss (mean cross entropy over the scored tokens) and global_step (test_results.txt: test_ prefix).
"""

import cli  # first: quiets TensorFlow's start-up logging
import dataclasses
import os

import numpy as np
import tensorflow as tf
from absl import logging

import conlleval
import encoder
import filesystem
import packing
import runner
import serving
import tokenization
import training
from model_options import ModelOptions

DOCSTART = "-DOCSTART-"
OUTSIDE = "O"
LABEL_LIST_FILE = "label_list.txt"
DATA_FILES = {"train": "train.txt", "dev": "dev.txt", "test": "test.txt"}


@dataclasses.dataclass
class Sentence:
    """One sentence of a CoNLL file: words, IOB2 tags, its document and where each word came from."""
    guid: str
    words: list
    labels: list
    document: int
    source: str
    line_numbers: list


def _check_tag(tag, path, line_number):
    if tag == OUTSIDE:
        return
    prefix, _, type_ = tag.partition("-")
    if prefix not in ("B", "I") or not type_:
        raise cli.UserError("%s line %d: tag %r is not IOB (expected O, B-TYPE or I-TYPE)" % (path, line_number, tag))


def to_iob2(tags):
    """IOB1 (or IOB2) tags of one sentence -> IOB2: an I-X not preceded by B-X/I-X becomes B-X."""
    out = []
    previous = OUTSIDE
    for tag in tags:
        if tag.startswith("I-") and (previous == OUTSIDE or previous[2:] != tag[2:]):
            tag = "B-" + tag[2:]
        out.append(tag)
        previous = tag
    return out


def read_conll(path, set_type=None):
    """Reads a CoNLL file into Sentences (tags converted to IOB2); raises cli.UserError on malformed input."""
    if not tf.io.gfile.exists(path) or tf.io.gfile.isdir(path):
        raise cli.MissingFileError("CoNLL file not found: %s (expected a file in --data_dir)" % path)
    set_type = set_type or os.path.splitext(os.path.basename(path))[0]
    sentences = []
    num_columns = None
    document = 0
    converted = 0
    words, tags, line_numbers = [], [], []

    def flush():
        nonlocal converted
        if words:
            iob2 = to_iob2(tags)
            converted += sum(1 for a, b in zip(tags, iob2) if a != b)
            sentences.append(Sentence("%s-%d" % (set_type, len(sentences)), list(words), iob2, document, path,
                                      list(line_numbers)))
            words.clear()
            tags.clear()
            line_numbers.clear()

    with tf.io.gfile.GFile(path, "rb") as f:
        for line_number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise cli.UserError("%s line %d: not valid UTF-8 (%s)" % (path, line_number, err.reason)) from None
            fields = line.split()
            if not fields:
                flush()
                continue
            if num_columns is None:
                if len(fields) < 2:
                    raise cli.UserError("%s line %d: expected at least 2 columns (word ... tag), found %d: %r"
                                     % (path, line_number, len(fields), line.rstrip("\n")))
                num_columns = len(fields)
            elif len(fields) != num_columns:
                raise cli.UserError("%s line %d: expected %d columns (word ... tag, as on the file's first line), "
                                 "found %d: %r" % (path, line_number, num_columns, len(fields),
                                                   line.rstrip("\n")))
            if fields[0] == DOCSTART:
                flush()
                if sentences:
                    document += 1
                continue
            _check_tag(fields[-1], path, line_number)
            words.append(fields[0])
            tags.append(fields[-1])
            line_numbers.append(line_number)
    flush()
    if not sentences:
        raise cli.UserError("%s: no sentences found (expected CoNLL lines 'word ... tag' with blank lines between "
                         "sentences)" % path)
    if converted:
        logging.info("%s: %d IOB1 tags converted to IOB2", path, converted)
    logging.info("%s: %d sentences, %d words, %d documents", path, len(sentences),
                 sum(len(s.words) for s in sentences), document + 1)
    return sentences


def get_labels(train_sentences):
    """The label list taken from the training data: "O", then B-TYPE and I-TYPE of every entity type seen in
    training (both, so that a type's tags are complete even where training has no multi-word entity), sorted."""
    types = set()
    for sentence in train_sentences:
        types.update(tag[2:] for tag in sentence.labels if tag != OUTSIDE)
    return [OUTSIDE] + sorted(prefix + "-" + t for t in types for prefix in ("B", "I"))


def read_label_list(path):
    with tf.io.gfile.GFile(path, "r") as f:
        labels = [line.strip() for line in f if line.strip()]
    if not labels:
        raise cli.UserError("%s: empty label list" % path)
    return labels


def check_labels(sentences, label_list):
    """Raises cli.UserError naming the file and line of the first tag that is not in label_list."""
    known = set(label_list)
    for sentence in sentences:
        for tag, line_number in zip(sentence.labels, sentence.line_numbers):
            if tag not in known:
                raise cli.UserError("%s line %d: tag %r is not in the label list taken from the training data %s"
                                 % (sentence.source, line_number, tag, label_list))


@dataclasses.dataclass
class InputFeatures:
    """One window: model inputs, per-position label ids and weights, and which word each scored position is."""
    sentence_index: int
    input_ids: list
    input_mask: list
    segment_ids: list
    label_ids: list
    label_weights: list
    scored: list  # (position in input_ids, word index in the sentence)


class WordTokenizer:
    """FullTokenizer applied word by word, with a cache; empty results become [UNK] (logged)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.cache = {}
        self.unk_words = 0

    def __call__(self, word):
        pieces = self.cache.get(word)
        if pieces is None:
            pieces = self.tokenizer.tokenize(word)
            if not pieces:
                logging.warning("word %r gives no WordPiece tokens; it is fed as [UNK]", word)
                pieces = [tokenization.UNK_TOKEN]
                self.unk_words += 1
            self.cache[word] = pieces
        return pieces


def _sentence_pieces(sentence, word_tokenizer):
    tokens, word_starts = [], []
    for word in sentence.words:
        word_starts.append(len(tokens))
        tokens.extend(word_tokenizer(word))
    return tokens, word_starts


def convert_sentences_to_features(sentences, label_list, max_seq_length, tokenizer, doc_stride=64,
                                  document_context=False):
    """Sentences -> InputFeatures (one or more windows each, packed by packing.ner_windows); every word is
    scored in exactly one window."""
    if max_seq_length < 3:
        raise cli.UserError("--max_seq_length=%d: expected at least 3 ([CLS] word [SEP])" % max_seq_length)
    if doc_stride < 1:
        raise cli.UserError("--doc_stride=%d: expected a positive number of sub-tokens" % doc_stride)
    check_labels(sentences, label_list)
    label_map = {label: i for i, label in enumerate(label_list)}
    word_tokenizer = tokenizer if isinstance(tokenizer, WordTokenizer) else WordTokenizer(tokenizer)
    full_tokenizer = word_tokenizer.tokenizer
    vocab = full_tokenizer.vocab
    pieces = [_sentence_pieces(s, word_tokenizer) for s in sentences]
    left = right = None
    if document_context:
        contexts = [_document_context(sentences, pieces, i, max_seq_length - 2 - len(pieces[i][0]))
                    if len(pieces[i][0]) <= max_seq_length - 2 else ([], []) for i in range(len(sentences))]
        left = packing.ragged_ids([full_tokenizer.convert_tokens_to_ids(c[0]) for c in contexts])
        right = packing.ragged_ids([full_tokenizer.convert_tokens_to_ids(c[1]) for c in contexts])
    word_ids = [[full_tokenizer.convert_tokens_to_ids(word_tokenizer(w)) for w in s.words] for s in sentences]
    packed = packing.ner_windows(packing.ragged_word_ids(word_ids), packing.Windowing(max_seq_length, doc_stride),
                                 packing.SpecialIds.of(vocab), (left, right) if document_context else None)
    packed = {name: value.numpy() for name, value in packed.items()}
    features = []
    for k, index in enumerate(packed["sentence_index"]):
        sentence = sentences[index]
        scored = [(int(p), int(w)) for p, w in enumerate(packed["scored_word"][k]) if w >= 0]
        label_ids = [0] * max_seq_length
        label_weights = [0.0] * max_seq_length
        for position, word_index in scored:
            label_ids[position] = label_map[sentence.labels[word_index]]
            label_weights[position] = 1.0
        features.append(InputFeatures(int(index), packed["input_ids"][k].tolist(), packed["input_mask"][k].tolist(),
                                      packed["segment_ids"][k].tolist(), label_ids, label_weights, scored))
    for feature in features[:3]:
        _log_feature(feature, sentences[feature.sentence_index], full_tokenizer)
    num_split = sum(len(p[0]) > max_seq_length - 2 for p in pieces)
    if num_split:
        logging.info("%d of %d sentences are longer than %d sub-tokens and were split into windows "
                     "(doc_stride %d)", num_split, len(sentences), max_seq_length - 2, doc_stride)
    if word_tokenizer.unk_words:
        logging.info("%d distinct words were fed as [UNK]", word_tokenizer.unk_words)
    return features


def _log_feature(feature, sentence, tokenizer):
    length = sum(feature.input_mask)
    tokens = tokenizer.convert_ids_to_tokens(feature.input_ids[:length])
    labels = dict((position, sentence.labels[word]) for position, word in feature.scored)
    logging.info("*** Example ***")
    logging.info("guid: %s", sentence.guid)
    logging.info("tokens: %s", " ".join(tokenization.printable_text(t) + ("/" + labels[i] if i in labels else "")
                                        for i, t in enumerate(tokens)))
    logging.info("input_ids: %s", " ".join(str(x) for x in feature.input_ids))
    logging.info("label_ids: %s", " ".join(str(x) for x in feature.label_ids))


def _document_context(sentences, pieces, index, room):
    """Sub-tokens of the neighbouring sentences of the same document: up to `room` in all, split evenly."""
    document = sentences[index].document
    before, after = [], []
    i = index - 1
    while i >= 0 and sentences[i].document == document and len(before) < room:
        before = pieces[i][0] + before
        i -= 1
    i = index + 1
    while i < len(sentences) and sentences[i].document == document and len(after) < room:
        after = after + pieces[i][0]
        i += 1
    left = min(len(before), room // 2)
    right = min(len(after), room - left)
    left = min(len(before), room - right)
    return before[len(before) - left:], after[:right]


FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids", "label_ids", "label_weights")


def features_to_arrays(features, max_seq_length):
    """{name: numpy array [num_features, max_seq_length]} for tf.data."""
    arrays = {}
    for name in FEATURE_NAMES:
        dtype = np.float32 if name == "label_weights" else np.int32
        arrays[name] = np.array([getattr(f, name) for f in features], dtype=dtype).reshape(-1, max_seq_length)
    return arrays


def decode_predictions(sentences, features, predicted_ids, label_list):
    """Per-sentence predicted tags from per-feature [seq] label ids; checks each word is predicted once."""
    if len(predicted_ids) != len(features):
        raise ValueError("got predictions for %d features, expected %d" % (len(predicted_ids), len(features)))
    tags = [[None] * len(s.words) for s in sentences]
    for feature, ids in zip(features, predicted_ids):
        sentence_tags = tags[feature.sentence_index]
        for position, word_index in feature.scored:
            if sentence_tags[word_index] is not None:
                raise ValueError("word %d of %s was predicted twice" % (word_index, sentences[
                    feature.sentence_index].guid))
            sentence_tags[word_index] = label_list[int(ids[position])]
    for sentence, sentence_tags in zip(sentences, tags):
        if any(t is None for t in sentence_tags):
            raise ValueError("%s: %d words without a prediction" % (sentence.guid,
                                                                   sum(t is None for t in sentence_tags)))
    return tags


def prediction_triples(sentences, predicted_tags):
    """[[(word, gold, pred), ...], ...] for conlleval and the predictions file."""
    return [list(zip(s.words, s.labels, tags)) for s, tags in zip(sentences, predicted_tags)]


def format_predictions(triples):
    """`word gold pred` lines, blank line after each sentence (conlleval's input)."""
    return "".join("".join("%s %s %s\n" % triple for triple in sentence) + "\n" for sentence in triples)


# ----------------------------------------------------------------------------------------------
# Model: encoder.ClassifierModel(per_token=True): the classifier's dropout and output_weights /
# output_bias on every position.


def token_losses(logits, label_ids):
    """Per-position softmax cross entropy [batch, seq]."""
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot = tf.one_hot(tf.cast(label_ids, tf.int32), depth=tf.shape(logits)[-1], dtype=tf.float32)
    return -tf.reduce_sum(one_hot * log_probs, axis=-1)


MICRO_BATCH_WEIGHT = "label_weight_per_micro_batch"


class NerTask(training.Task):
    """Token classification for training.py: loss = weighted token cross entropy / scored tokens."""

    def __init__(self, bert_config, num_labels, output_dropout=encoder.CLASSIFIER_DROPOUT):
        self.bert_config = bert_config
        self.num_labels = num_labels
        self.output_dropout = output_dropout

    sequence_outputs = ("predicted_ids", "token_loss")

    def build_model(self, elementwise_dtype="float32"):
        return encoder.ClassifierModel(self.bert_config, self.num_labels, per_token=True, dropout=self.output_dropout,
                                       name="ner", elementwise_dtype=elementwise_dtype)

    def prepare_batch(self, features, num_micro_batches):
        # Normalise every micro-batch by the scored tokens of the whole batch, so that accumulation over
        # micro-batches gives the loss and gradients of the whole batch.
        features = dict(features)
        total = tf.reduce_sum(tf.cast(features["label_weights"], tf.float32))
        features[MICRO_BATCH_WEIGHT] = total / float(num_micro_batches)
        return features

    def compute_loss(self, model, features, training, dropout_seed=None):
        logits = model(features, training=training, dropout_seed=dropout_seed)
        weights = tf.cast(features["label_weights"], tf.float32)
        numerator = tf.reduce_sum(token_losses(logits, features["label_ids"]) * weights)
        denominator = features.get(MICRO_BATCH_WEIGHT)
        if denominator is None:
            denominator = tf.reduce_sum(weights)
        loss = numerator / tf.maximum(denominator, 1e-5)
        return loss, {"loss": loss}

    def predict_outputs(self, model, features):
        logits = model(features, training=False)
        weights = tf.cast(features["label_weights"], tf.float32)
        return {"predicted_ids": tf.argmax(logits, axis=-1, output_type=tf.int32),
                "token_loss": token_losses(logits, features["label_ids"]) * weights}


# ----------------------------------------------------------------------------------------------
# Runner.


def load_label_list(data_dir, output_dir, train_sentences=None):
    """Labels of the training data (data_dir/train.txt, or train_sentences when already read), checked
    against output_dir/label_list.txt when both exist; else the saved list."""
    train_path = os.path.join(data_dir, DATA_FILES["train"]) if data_dir else None
    saved_path = os.path.join(output_dir, LABEL_LIST_FILE) if output_dir else None
    saved = read_label_list(saved_path) if saved_path and tf.io.gfile.exists(saved_path) else None
    if train_sentences is not None or (train_path and tf.io.gfile.exists(train_path)):
        labels = get_labels(train_sentences if train_sentences is not None else read_conll(train_path, "train"))
        if saved is not None and saved != labels:
            raise cli.UserError("%s lists %s but the training data %s gives %s" % (saved_path, saved, train_path,
                                                                               labels))
        return labels
    if saved is not None:
        return saved
    raise cli.UserError("no label list: neither %s nor %s exists" % (train_path, saved_path))


def sentence_tags(sentences, features, outputs, label_list):
    """(per-sentence predicted tags, token loss sum) from the model's outputs over the windows `features` (the
    first len(features) rows of outputs: a TPU's padding rows after them are dropped)."""
    num_features = len(features)
    predicted_ids = list(outputs["predicted_ids"][:num_features])
    loss_sum = float(np.sum(outputs["token_loss"][:num_features]))
    return decode_predictions(sentences, features, predicted_ids, label_list), loss_sum


def entity_results(counts, prefix="eval_"):
    """eval_results entries from conlleval counts: entity-level precision/recall/F1 (fractions), per type."""
    m = conlleval.metrics(counts)
    results = {prefix + "precision": m["precision"] / 100, prefix + "recall": m["recall"] / 100,
               prefix + "f1": m["f1"] / 100, prefix + "token_accuracy": m["accuracy"] / 100,
               prefix + "num_phrases": m["phrases"], prefix + "num_found": m["found"],
               prefix + "num_correct": m["correct"]}
    for name, t in m["per_type"].items():
        for key in ("precision", "recall", "f1"):
            results["%s%s_%s" % (prefix, name, key)] = t[key] / 100
    return results


@dataclasses.dataclass
class NerOptions(runner.FinetuningOptions):
    """run_ner.py's flags: the fine-tuning runners' (runner.FinetuningOptions) and the windowing ones."""
    model: ModelOptions = cli.nested(ModelOptions, required=("bert_config_file", "vocab_file"), help_texts={
        "max_seq_length": "The maximum total input sequence length after WordPiece tokenization. Longer sentences "
                          "are split into windows, shorter ones padded."})
    data_dir: str = cli.option(None, "The input data dir with train.txt, dev.txt and test.txt (CoNLL format).",
                               required=True)
    doc_stride: int = cli.option(64, "When a sentence is longer than the maximum length, how many sub-tokens its "
                                 "windows start apart.")
    document_context: bool = cli.option(False, "Fill each window with sub-tokens of the neighbouring sentences "
                                        "of the same document (context only, not scored).")
    output_dropout_prob: float = runner.output_dropout_option()

    def __post_init__(self):
        runner.check_output_dropout(self.output_dropout_prob)


class Job(runner.Job):
    """One run_ner.py invocation: CoNLL reading, windows, conlleval scoring and outputs on runner.Job's steps."""

    def __init__(self, options):
        super().__init__(options)
        filesystem.require_dir(options.data_dir, "--data_dir")
        self.word_tokenizer = WordTokenizer(self.tokenizer)
        self.splits = {}

    def read_data(self):
        options = self.options
        if options.do_train:
            self.splits["train"] = read_conll(os.path.join(options.data_dir, DATA_FILES["train"]), "train")
        self.labels = load_label_list(options.data_dir, self.config.output_dir, self.splits.get("train"))
        for enabled, name in ((options.do_eval, "dev"), (options.do_predict, "test")):
            if enabled:
                self.splits[name] = read_conll(os.path.join(options.data_dir, DATA_FILES[name]), name)
        self.task = NerTask(self.bert_config, len(self.labels), options.output_dropout_prob)

    def start(self):
        self.write_output(LABEL_LIST_FILE, "".join(label + "\n" for label in self.labels))
        logging.info("Labels: %s", self.labels)

    def features(self, sentences, what):
        options = self.options
        features = convert_sentences_to_features(sentences, self.labels, self.model.max_seq_length,
                                                 self.word_tokenizer, options.doc_stride, options.document_context)
        logging.info("%s: %d sentences, %d words -> %d features", what, len(sentences),
                     sum(len(s.words) for s in sentences), len(features))
        return features

    def train(self):
        features = self.features(self.splits["train"], "train")
        config = self.finetuning_config(len(features), what="features")
        input_fn = runner.array_input_fn(features_to_arrays(features, self.model.max_seq_length), True,
                                         seed=config.seed, trim=runner.uses_real_lengths(config))
        return self.train_loop(input_fn, config)

    def evaluate(self):
        """dev.txt: eval_predictions.txt, eval_conlleval.txt, eval_results.txt; returns the results."""
        return self.tag_split("dev", "eval", runner.EVAL_RESULTS_FILE, self.config.eval_batch_size)

    def predict(self):
        """test.txt: test_predictions.txt, test_conlleval.txt, test_results.txt; returns the results."""
        return self.tag_split("test", "test", "test_results.txt", self.config.predict_batch_size)

    def tag_split(self, split, set_name, results_file, batch_size):
        """Tags a labelled split, writes its predictions, conlleval report and results; returns the results."""
        sentences = self.splits[split]
        features = self.features(sentences, set_name)
        arrays = features_to_arrays(features, self.model.max_seq_length)
        if self.config.use_tpu:
            # Whole batches only: zero-weight padding rows, whose predictions sentence_tags drops.
            padding = -len(features) % batch_size
            arrays = {name: np.concatenate([a, np.zeros((padding,) + a.shape[1:], a.dtype)])
                      for name, a in arrays.items()}
        outputs = self.predict_arrays(arrays, batch_size, what="evaluation" if set_name == "eval" else "prediction")
        tags, loss_sum = sentence_tags(sentences, features, outputs, self.labels)
        triples = prediction_triples(sentences, tags)
        self.write_output("%s_predictions.txt" % set_name, format_predictions(triples))
        counts = conlleval.evaluate_sentences(triples)
        report = conlleval.format_report(counts)
        self.write_output("%s_conlleval.txt" % set_name, report)
        logging.info("%s (conlleval):\n%s", set_name, report)
        prefix = "eval_" if set_name == "eval" else set_name + "_"
        results = entity_results(counts, prefix)
        num_scored = sum(len(f.scored) for f in features)
        results[prefix + "loss"] = loss_sum / max(num_scored, 1)
        results["global_step"] = self.inference_checkpoint()[1]
        return self.write_results(results_file, results)

    def serving(self, model):
        return serving.NerServing(model, self.model, self.options.doc_stride, self.labels)


def run(options):
    """The whole job for NerOptions; returns {"train", "eval", "predict", "export"} for what ran."""
    return Job(options).run()


if __name__ == "__main__":
    cli.main(NerOptions, run)
