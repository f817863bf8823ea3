# coding=utf-8
"""BERT fine-tuning runner for named-entity recognition on CoNLL-format data (CoNLL-2003).

Data: `train.txt`, `dev.txt`, `test.txt` in --data_dir, one token per line (`word POS chunk tag`, or any
number of columns with the word first and the tag last, the same number on every line of a file), blank lines
between sentences, `-DOCSTART-` lines between documents. Tags may be IOB1 or IOB2; they are converted to IOB2
(an `I-X` that follows `O` or another type becomes `B-X`). The label list is taken from the training data.

Features (token classification as in the BERT paper): each word is WordPiece-tokenized with the exact
tokenizer; the label of a word sits on its first sub-token, other sub-tokens, [CLS], [SEP] and padding get
label weight 0 and are left out of the loss and the metrics. A word the tokenizer turns into nothing
(e.g. only control characters) is fed as [UNK] (logged), so every word gets exactly one prediction.

Long sentences: a sentence with more than max_seq_length - 2 sub-tokens is split into windows of
max_seq_length - 2 sub-tokens that start every --doc_stride sub-tokens (at most a window apart; the original
run_squad.py's sliding window); the last window ends at the sentence end. Each word is predicted in exactly one window: the one where
its first sub-token has the most context (the original's max-context rule, min(left, right) + 0.01 * window
length). No word is dropped and no sub-token is truncated.

Document context (--document_context): a sentence that fits is surrounded by sub-tokens of the neighbouring
sentences of its document (half the free room before it, half after; one side's unused room goes to the
other) as context with label weight 0.

Outputs in --output_dir: eval_results.txt (entity-level precision, recall and F1 overall and per type, from
conlleval.py, plus eval_loss and token accuracy), eval_predictions.txt / test_predictions.txt (`word gold
pred`, blank line between sentences: conlleval input), eval_conlleval.txt / test_conlleval.txt (conlleval's
report), label_list.txt. --export_dir: a SavedModel whose `serving_default` signature maps input_ids,
input_mask, segment_ids [batch, seq] to per-token label probabilities `probabilities` [batch, seq, labels]
(the label list is in assets/label_list.txt).
"""

import dataclasses
import os

from absl import logging
import numpy as np

import tokenization

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
        raise ValueError("%s line %d: tag %r is not IOB (expected O, B-TYPE or I-TYPE)" % (path, line_number, tag))


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
    """Reads a CoNLL file into Sentences (tags converted to IOB2); raises ValueError on malformed input."""
    if not os.path.isfile(path):
        raise FileNotFoundError("CoNLL file not found: %s (expected a file in --data_dir)" % path)
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

    with open(path, encoding="utf-8") as f:
        for line_number, line in enumerate(f, start=1):
            fields = line.split()
            if not fields:
                flush()
                continue
            if num_columns is None:
                if len(fields) < 2:
                    raise ValueError("%s line %d: expected at least 2 columns (word ... tag), found %d: %r"
                                     % (path, line_number, len(fields), line.rstrip("\n")))
                num_columns = len(fields)
            elif len(fields) != num_columns:
                raise ValueError("%s line %d: expected %d columns (word ... tag, as on the file's first line), "
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
        raise ValueError("%s: no sentences found (expected CoNLL lines 'word ... tag' with blank lines between "
                         "sentences)" % path)
    if converted:
        logging.info("%s: %d IOB1 tags converted to IOB2", path, converted)
    logging.info("%s: %d sentences, %d words, %d documents", path, len(sentences),
                 sum(len(s.words) for s in sentences), document + 1)
    return sentences


def get_labels(train_sentences):
    """The label list taken from the training data: "O" first, then the other tags sorted."""
    tags = set()
    for sentence in train_sentences:
        tags.update(sentence.labels)
    return [OUTSIDE] + sorted(tags - {OUTSIDE})


def write_label_list(labels, path):
    with open(path, "w", encoding="utf-8") as f:
        for label in labels:
            f.write(label + "\n")


def read_label_list(path):
    with open(path, encoding="utf-8") as f:
        labels = [line.strip() for line in f if line.strip()]
    if not labels:
        raise ValueError("%s: empty label list" % path)
    return labels


def check_labels(sentences, label_list):
    """Raises ValueError naming the file and line of the first tag that is not in label_list."""
    known = set(label_list)
    for sentence in sentences:
        for tag, line_number in zip(sentence.labels, sentence.line_numbers):
            if tag not in known:
                raise ValueError("%s line %d: tag %r is not in the label list taken from the training data %s"
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


def window_spans(num_tokens, max_tokens, doc_stride):
    """(start, length) windows of at most max_tokens over num_tokens, starting every doc_stride tokens."""
    spans = []
    start = 0
    while True:
        length = min(max_tokens, num_tokens - start)
        spans.append((start, length))
        if start + length >= num_tokens:
            return spans
        start += min(length, doc_stride)


def best_span_for(position, spans):
    """Index of the span where `position` has maximum context (the original _check_is_max_context score)."""
    best, best_score = None, None
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best, best_score = index, score
    return best


def _sentence_pieces(sentence, word_tokenizer):
    tokens, word_starts = [], []
    for word in sentence.words:
        word_starts.append(len(tokens))
        tokens.extend(word_tokenizer(word))
    return tokens, word_starts


def convert_sentences_to_features(sentences, label_list, max_seq_length, tokenizer, doc_stride=64,
                                  document_context=False):
    """Sentences -> InputFeatures (one or more windows each); every word is scored in exactly one window."""
    if max_seq_length < 3:
        raise ValueError("--max_seq_length=%d: expected at least 3 ([CLS] word [SEP])" % max_seq_length)
    max_tokens = max_seq_length - 2
    if doc_stride < 1:
        raise ValueError("--doc_stride=%d: expected a positive number of sub-tokens" % doc_stride)
    check_labels(sentences, label_list)
    label_map = {label: i for i, label in enumerate(label_list)}
    word_tokenizer = tokenizer if isinstance(tokenizer, WordTokenizer) else WordTokenizer(tokenizer)
    full_tokenizer = word_tokenizer.tokenizer
    pieces = [_sentence_pieces(s, word_tokenizer) for s in sentences]
    features = []
    num_split = 0
    for index, sentence in enumerate(sentences):
        tokens, word_starts = pieces[index]
        word_at = {start: i for i, start in enumerate(word_starts)}
        if len(tokens) <= max_tokens:
            left, right = [], []
            if document_context:
                left, right = _document_context(sentences, pieces, index, max_tokens - len(tokens))
            window = left + tokens + right
            scored = [(1 + len(left) + start, i) for i, start in enumerate(word_starts)]
            features.append(_make_feature(index, window, scored, sentence, label_map, max_seq_length,
                                          full_tokenizer))
            continue
        num_split += 1
        spans = window_spans(len(tokens), max_tokens, doc_stride)
        owner = {start: best_span_for(start, spans) for start in word_starts}
        for span_index, (start, length) in enumerate(spans):
            scored = [(1 + p - start, word_at[p]) for p in range(start, start + length)
                      if p in word_at and owner[p] == span_index]
            features.append(_make_feature(index, tokens[start:start + length], scored, sentence, label_map,
                                          max_seq_length, full_tokenizer))
    if num_split:
        logging.info("%d of %d sentences are longer than %d sub-tokens and were split into windows "
                     "(doc_stride %d)", num_split, len(sentences), max_tokens, doc_stride)
    if word_tokenizer.unk_words:
        logging.info("%d distinct words were fed as [UNK]", word_tokenizer.unk_words)
    return features


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


def _make_feature(sentence_index, window_tokens, scored, sentence, label_map, max_seq_length, tokenizer):
    tokens = ["[CLS]"] + window_tokens + ["[SEP]"]
    input_ids = tokenizer.convert_tokens_to_ids(tokens)
    input_mask = [1] * len(input_ids)
    label_ids = [0] * len(input_ids)
    label_weights = [0.0] * len(input_ids)
    for position, word_index in scored:
        label_ids[position] = label_map[sentence.labels[word_index]]
        label_weights[position] = 1.0
    padding = max_seq_length - len(input_ids)
    input_ids += [0] * padding
    input_mask += [0] * padding
    label_ids += [0] * padding
    label_weights += [0.0] * padding
    return InputFeatures(sentence_index, input_ids, input_mask, [0] * max_seq_length, label_ids, label_weights,
                         scored)


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


def write_predictions(path, triples):
    """`word gold pred` lines, blank line after each sentence."""
    with open(path, "w", encoding="utf-8") as f:
        for sentence in triples:
            for word, gold, pred in sentence:
                f.write("%s %s %s\n" % (word, gold, pred))
            f.write("\n")
