"""How each task packs WordPiece ids into model inputs, as TensorFlow ops.

One definition per task serves both the feature records a runner writes (ids from tokenization.FullTokenizer,
the original's exact tokens) and the raw-text signatures of the SavedModels it exports (ids from
fast_tokenization.FastBertTokenizer, in the graph), so training and serving cannot pack differently.

  pack_pair(ids_a, ids_b, max_seq_length, cls_id, sep_id): [CLS] a [SEP] (b [SEP]) with the original's pair
    truncation (classifier, extract_features).
  squad_windows(query_ids, doc_pieces, windowing, special_ids): the original run_squad.py's windows over a
    context, with the "max context" flags and, for training, the answer's start/end positions (max_context_span:
    that rule for one token, in plain Python, as the original's per-token helper).
  ner_windows(word_pieces, windowing, special_ids): windows over a sentence in which every word is scored
    exactly once.
A Windowing (max_seq_length, doc_stride, max_query_length) says how a long text is read in windows (Windows: the
windows' places per row, which long_text.py reads a classifier's texts in too), SpecialIds the vocabulary's [CLS],
[SEP] and [UNK] ids; INPUT_NAMES the packed inputs' names.

Inputs are ragged int tensors ([batch, (ids)] or [batch, (words), (pieces)]); ragged_ids and ragged_word_ids
make them from Python lists. Outputs are dense int32 tensors, one row per packed sequence; pack_pairs(tokenizer,
ids_a, ids_b, max_seq_length) packs Python lists of ids into numpy arrays, chunk by chunk (pack_in_chunks: any
packer's).
"""
import dataclasses
import itertools

import numpy as np
import tensorflow as tf

import linear_ragged


@dataclasses.dataclass(frozen=True)
class SpecialIds:
    """The ids of a vocabulary's [CLS], [SEP] and [UNK] (unk: None where a packer needs none)."""
    cls: int
    sep: int
    unk: int = None

    @classmethod
    def of(cls, vocab):
        """The special ids of a vocabulary (token -> id)."""
        return cls(vocab["[CLS]"], vocab["[SEP]"], vocab.get("[UNK]"))


@dataclasses.dataclass(frozen=True)
class Windowing:
    """How a text longer than one window is read: windows of max_seq_length positions, a new one every doc_stride
    pieces; SQuAD's questions cut to max_query_length pieces."""
    max_seq_length: int
    doc_stride: int
    max_query_length: int = None


# The packed inputs a model reads, in the order the packers return them.
INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")


def ragged_ids(rows):
    """[[id, ...], ...] -> int64 RaggedTensor [len(rows), (ids)]."""
    lengths = [len(row) for row in rows]
    flat = np.fromiter(itertools.chain.from_iterable(rows), np.int64, count=sum(lengths))
    return tf.RaggedTensor.from_row_lengths(flat, np.asarray(lengths, np.int64), validate=False)


def ragged_word_ids(rows):
    """[[[id, ...] per word] per row] -> int64 RaggedTensor [len(rows), (words), (ids)]."""
    inner = ragged_ids(list(itertools.chain.from_iterable(rows)))
    return tf.RaggedTensor.from_row_lengths(inner, np.asarray([len(row) for row in rows], np.int64),
                                            validate=False)


def _ragged_int(ids):
    """Ragged int32 ids with int64 row splits (the layout the ops below expect)."""
    ids = tf.cast(ids, tf.int32)
    return ids.with_row_splits_dtype(tf.int64)


def pack_pair(ids_a, ids_b, max_seq_length, cls_id, sep_id, head=None):
    """Packs ragged ids [batch, (ids)] into dense int32 input_ids, input_mask, segment_ids [batch, max_seq_length].

    [CLS] a [SEP] b [SEP], as the original run_classifier.py and extract_features.py: a pair is truncated by
    popping from the longer sequence (from b on ties) until it fits max_seq_length - 3 (b's [SEP] only when b
    keeps a token); a row whose b is empty (or ids_b None) is a single sequence cut to max_seq_length - 2;
    zero padding. head (run_classifier's --long_text=head_tail): a cut a keeps its first `head` tokens and then
    its last ones instead of its first only. The work is pack_pair_flat's.
    """
    def flat(ids):
        return tf.cast(ids.flat_values, tf.int32), tf.cast(ids.row_splits, tf.int32)

    return pack_pair_flat(flat(ids_a), flat(ids_b) if ids_b is not None else None, max_seq_length,
                          SpecialIds(cls_id, sep_id), head)


def pack_pair_flat(a, b, max_seq_length, special_ids, head=None):
    """pack_pair from flat int32 ids and row splits, a and b each (ids, splits) (b None for single sequences),
    with dense ops only (TFLite builtins: the LiteRT model packs with it too)."""
    ids_a, splits_a = a
    start_a = splits_a[:-1]
    if b is None:
        b = (tf.zeros([0], tf.int32), tf.zeros_like(splits_a))
    ids_b, splits_b = b
    start_b = splits_b[:-1]
    return pack_spans((ids_a, start_a, splits_a[1:] - start_a), (ids_b, start_b, splits_b[1:] - start_b),
                      max_seq_length, special_ids, head)


def pack_spans(a, b, max_seq_length, special_ids, head=None):
    """pack_pair of spans of flat int32 ids: a and b each (ids, start [rows], length [rows]), spans that may
    overlap (run_classifier's windows read one text in several). Dense ops only."""
    (ids_a, start_a, len_a), (ids_b, start_b, len_b) = a, b
    cls_id, sep_id = special_ids.cls, special_ids.sep
    has_b = tf.cast(len_b > 0, tf.int32)
    budget = max_seq_length - 2 - has_b
    # Popping from the longer (b on ties) until the pair fits keeps these many of each.
    keep_a = tf.minimum(len_a, tf.maximum(budget - len_b, (budget + 1) // 2))[:, tf.newaxis]
    keep_b = tf.minimum(len_b, tf.maximum(budget - len_a, budget // 2))[:, tf.newaxis]
    positions = tf.range(max_seq_length, dtype=tf.int32)[tf.newaxis, :]
    # Slot p of a holds a's token p - 1: with a head, past the head a's tokens from its end.
    a_index = positions - 1
    if head is not None:
        a_index = tf.where(a_index < tf.minimum(head, keep_a), a_index, a_index + len_a[:, tf.newaxis] - keep_a)
    b_first = keep_a + 2
    # As the original, b's [SEP] only follows a b that keeps a token (at max_seq_length 3 or 4 it may not).
    sep_b = tf.cast(keep_b > 0, tf.int32)
    length = b_first + keep_b + sep_b
    in_a = (positions >= 1) & (positions <= keep_a)
    in_b = (positions >= b_first) & (positions < b_first + keep_b)
    is_sep = tf.equal(positions, keep_a + 1) | (tf.equal(positions, b_first + keep_b) & (sep_b > 0))

    def tokens(ids, index):
        ids = tf.concat([ids, tf.zeros([1], tf.int32)], 0)  # a gather never reads an empty tensor
        return tf.gather(ids, tf.clip_by_value(index, 0, tf.size(ids) - 1))

    zeros = tf.zeros_like(positions + keep_a)
    input_ids = tf.where(in_a, tokens(ids_a, start_a[:, tf.newaxis] + a_index),
                         tf.where(in_b, tokens(ids_b, start_b[:, tf.newaxis] + positions - b_first), zeros))
    input_ids = tf.where(tf.equal(positions, 0), zeros + cls_id, input_ids)
    input_ids = tf.where(is_sep, zeros + sep_id, input_ids)
    input_mask = tf.cast(positions < length, tf.int32)
    segment_ids = tf.cast((positions >= b_first) & (positions < length), tf.int32)
    return input_ids, input_mask, segment_ids


LENGTH_MULTIPLE = 8  # real-length batches are cut to a multiple of this many positions


def real_length(input_mask):
    """The width a batch can be cut to: its longest sequence (input_mask [batch, seq]) rounded up to
    LENGTH_MULTIPLE, at most seq. Attention masks the padding, so outputs at real positions do not change."""
    width = tf.shape(input_mask)[1]
    longest = tf.reduce_max(tf.reduce_sum(input_mask, axis=1))
    return tf.minimum(width, tf.maximum(-(-longest // LENGTH_MULTIPLE) * LENGTH_MULTIPLE, LENGTH_MULTIPLE))


SMALLEST_BUCKET = 32  # the narrowest width XLA batches are padded or cut to


def bucket_widths(max_width, limit=None):
    """The sequence widths of XLA-compiled batches (one compile each): powers of two from SMALLEST_BUCKET below
    max_width, then max_width; with a limit (e.g. max_position_embeddings, for ids wider than max_width), powers of
    two above max_width below the limit, then the limit."""
    widths = {max_width}
    width = SMALLEST_BUCKET
    while width < max(max_width, limit or 0):
        if width < max_width or limit:
            widths.add(width)
        width *= 2
    if limit and limit > max_width:
        widths.add(limit)
    return sorted(w for w in widths if w <= max(max_width, limit or 0))


def bucket(value, buckets):
    """The smallest of the sorted `buckets` (a list of ints) >= value (an int32 scalar tensor), or value itself
    beyond the largest."""
    table = tf.constant(buckets, tf.int32)
    index = tf.searchsorted(table, tf.reshape(tf.cast(value, tf.int32), [1]), side="left")[0]
    return tf.where(index < len(buckets), tf.gather(table, tf.minimum(index, len(buckets) - 1)),
                    tf.cast(value, tf.int32))


def bucket_length(input_mask, buckets):
    """The width a batch is cut to under XLA: the bucket of its longest sequence, at most the batch's width
    (real_length's rule, with a few widths instead of every multiple of LENGTH_MULTIPLE)."""
    longest = tf.reduce_max(tf.reduce_sum(tf.cast(input_mask, tf.int32), axis=1))
    return tf.minimum(tf.shape(input_mask)[1], bucket(longest, buckets))


# ---------------------------------------------------------------------------------------------------------
# Windows over long inputs (the original run_squad.py's doc spans and "max context" rule).


class Windows:
    """Sliding windows of at most `max_tokens` tokens starting every min(max_tokens, stride) tokens, per row
    (the original's doc spans: the last window ends at the row's end; a row without tokens has none).

    Per window: row, index (within its row), start, length; row_splits group the windows by row.
    """

    def __init__(self, num_tokens, max_tokens, stride):
        num_tokens = tf.cast(num_tokens, tf.int64)
        max_tokens = tf.cast(tf.broadcast_to(max_tokens, tf.shape(num_tokens)), tf.int64)
        step = tf.minimum(max_tokens, tf.cast(stride, tf.int64))
        extra = tf.maximum(num_tokens - max_tokens, 0)
        num_windows = tf.where(num_tokens == 0, tf.zeros_like(num_tokens), (extra + step - 1) // step + 1)
        ranges = tf.ragged.range(num_windows)
        self.row_splits = ranges.row_splits
        self.row = linear_ragged.row_ids(self.row_splits)
        self.index = ranges.flat_values
        self.start = self.index * tf.gather(step, self.row)
        self.length = tf.minimum(tf.gather(max_tokens, self.row), tf.gather(num_tokens, self.row) - self.start)
        # Per window, its row's tokens, window size, step and number of windows (has_max_context).
        self._row = [tf.gather(values, self.row)[:, tf.newaxis]
                     for values in (num_tokens, max_tokens, step, num_windows)]

    def has_max_context(self, doc_position):
        """[windows, slots] bool: the window is the first of its row's windows where the token at
        `doc_position` [windows, slots] has the best min(left, right) + 0.01 * length (and holds it).

        In constant memory per slot, whatever the number of windows: every window but a row's last holds
        max_tokens tokens, and among those that hold a token the score min(left, right) falls away on both sides
        of the window centred on it, so the best full window is one of the two whose starts bracket that centre
        (clamped to the windows that hold the token); the row's last window, maybe shorter, is the third
        candidate. Equal to max_context_window over all the row's windows."""
        position = tf.cast(doc_position, tf.int64)
        tokens, size, step, count = self._row
        # Full windows holding the token: k in [lowest, highest], k < count - 1 (the last is a candidate apart).
        lowest = tf.maximum(-((size - 1 - position) // step), 0)  # ceil((position - size + 1) / step)
        highest = tf.minimum(position // step, count - 2)
        below = (2 * position - size + 1) // (2 * step)  # the window starting at or below the centred one
        candidates = [tf.clip_by_value(below, lowest, tf.maximum(highest, lowest)),
                      tf.clip_by_value(below + 1, lowest, tf.maximum(highest, lowest)),
                      tf.broadcast_to(count - 1, tf.shape(position))]
        best_score, best_window = None, None
        for k in candidates:  # in window order: a later candidate wins only with a higher score
            start = k * step
            length = tf.where(k < count - 1, size, tf.minimum(size, tokens - start))
            end = start + length - 1
            holds = (k >= 0) & (position >= start) & (position <= end) & (length > 0)
            score = tf.where(holds, tf.cast(tf.minimum(position - start, end - position), tf.float64)
                             + 0.01 * tf.cast(length, tf.float64), -1.0)
            if best_score is None:
                best_score, best_window = score, tf.where(holds, k, -1)
            else:
                better = score > best_score
                best_score, best_window = tf.where(better, score, best_score), tf.where(better, k, best_window)
        return best_window == self.index[:, tf.newaxis]


def max_context_span(spans, position):
    """The original run_squad.py's "max context" rule on Python ints: the index of the first of `spans`
    ((start, length) pairs) where the token at `position` has the best min(left, right) + 0.01 * length; None
    where no span holds it. Plain Python, as the original's per-token helper (fast on lists, usable while a
    tf.function is traced); max_context_window is its vectorised form."""
    best_score, best_index = None, None
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if start <= position <= end:
            score = min(position - start, end - position) + 0.01 * length
            if best_score is None or score > best_score:
                best_score, best_index = score, index
    return best_index


def max_context_window(window_starts, window_lengths, position):
    """The original run_squad.py's "max context" rule: the index of the first window (window_starts,
    window_lengths [..., W] int64; a length 0 is no window) where the token at `position` [...] (broadcast
    against the windows' leading axes) has the best min(left, right) + 0.01 * length, int64.max where no window
    holds it."""
    w_end = window_starts + window_lengths - 1
    token = tf.cast(position, tf.int64)[..., tf.newaxis]
    contains = (window_lengths > 0) & (token >= window_starts) & (token <= w_end)
    score = (tf.cast(tf.minimum(token - window_starts, w_end - token), tf.float64)
             + 0.01 * tf.cast(window_lengths, tf.float64))
    score = tf.where(contains, score, tf.constant(-1e9, tf.float64))
    best_score = tf.reduce_max(score, axis=-1, keepdims=True)
    window_ids = tf.range(tf.shape(score, out_type=tf.int64)[-1])
    return tf.reduce_min(tf.where(contains & (score == best_score), window_ids, tf.int64.max), axis=-1)


def squad_windows(query_ids, doc_pieces, windowing, special_ids, answers=None):
    """Windows of (question, context) pairs, as the original run_squad.py's convert_examples_to_features.

    query_ids: ragged [batch, (ids)] of the question (cut to windowing.max_query_length here); doc_pieces: ragged
    [batch, (words), (ids)] of the context's whitespace-separated words, each tokenized on its own.
    Each window is [CLS] question [SEP] context piece window [SEP], zero padded; windows of at most
    max_seq_length - len(question) - 3 pieces start every doc_stride pieces (a Windowing; special_ids: SpecialIds).

    Returns a dict, one row per window: example_index, doc_span_index [K] int32; input_ids, input_mask,
    segment_ids, token_to_orig (context word index, -1 elsewhere), token_to_piece (index of the piece among
    the context's pieces, -1 elsewhere) [K, max_seq_length] int32; token_is_max_context [K, max_seq_length] bool.
    With answers = (answer_start, answer_end) ([batch] piece positions of the answer in the context, -1 for
    none) also start_positions/end_positions [K] int32: the answer's slots in a window that holds all of it, else
    0 (the [CLS] slot), as the original labels training windows.
    """
    max_seq_length, doc_stride, max_query_length = (windowing.max_seq_length, windowing.doc_stride,
                                                    windowing.max_query_length)
    cls_id, sep_id = special_ids.cls, special_ids.sep
    query = _ragged_int(query_ids)[:, :max_query_length]
    query_len = query.row_lengths()
    doc_pieces = _ragged_int(doc_pieces)
    words = doc_pieces.row_splits
    pieces = doc_pieces.values  # [total words, (pieces)]
    doc_splits = tf.gather(pieces.row_splits, words)
    doc_ids = pieces.flat_values
    # Index of each piece's word within its own context.
    piece_example = linear_ragged.row_ids(doc_splits)
    piece_word = linear_ragged.row_ids(pieces.row_splits) - tf.gather(words, piece_example)

    num_tokens = doc_splits[1:] - doc_splits[:-1]
    windows = Windows(num_tokens, max_seq_length - query_len - 3, doc_stride)
    example = windows.row

    positions = tf.range(max_seq_length, dtype=tf.int64)[tf.newaxis, :]
    q_len = tf.gather(query_len, example)[:, tf.newaxis]
    doc_offset = q_len + 2
    length = windows.length[:, tf.newaxis]
    is_query = (positions >= 1) & (positions <= q_len)
    is_doc = (positions >= doc_offset) & (positions < doc_offset + length)
    is_last_sep = positions == doc_offset + length

    query_dense = query.to_tensor(default_value=0, shape=[None, max_query_length])
    query_rows = tf.gather(query_dense, example)
    query_pos = tf.clip_by_value(positions - 1, 0, max_query_length - 1)
    query_tokens = tf.gather(query_rows, tf.broadcast_to(query_pos, tf.shape(is_query)), batch_dims=1)

    doc_pos = windows.start[:, tf.newaxis] + positions - doc_offset
    flat_pos = tf.gather(doc_splits, example)[:, tf.newaxis] + doc_pos
    flat_pos = tf.where(is_doc, flat_pos, tf.zeros_like(flat_pos))
    doc_tokens = tf.cast(tf.gather(doc_ids, flat_pos), tf.int64)
    doc_words = tf.gather(piece_word, flat_pos)

    zeros = tf.zeros_like(is_doc, tf.int64)
    input_ids = tf.where(positions == 0, tf.cast(cls_id, tf.int64), zeros)
    input_ids = tf.where(is_query, tf.cast(query_tokens, tf.int64), input_ids)
    input_ids = tf.where((positions == q_len + 1) | is_last_sep, tf.cast(sep_id, tf.int64), input_ids)
    input_ids = tf.where(is_doc, doc_tokens, input_ids)

    out = {
        "example_index": tf.cast(example, tf.int32),
        "doc_span_index": tf.cast(windows.index, tf.int32),
        "input_ids": tf.cast(input_ids, tf.int32),
        "input_mask": tf.cast(positions <= doc_offset + length, tf.int32),
        "segment_ids": tf.cast(is_doc | is_last_sep, tf.int32),
        "token_to_orig": tf.cast(tf.where(is_doc, doc_words, -tf.ones_like(doc_words)), tf.int32),
        "token_to_piece": tf.cast(tf.where(is_doc, doc_pos, -tf.ones_like(doc_pos)), tf.int32),
        "token_is_max_context": is_doc & windows.has_max_context(doc_pos),
    }
    if answers is not None:
        answer_start, answer_end = answers
        start = tf.gather(tf.cast(answer_start, tf.int64), example)
        end = tf.gather(tf.cast(answer_end, tf.int64), example)
        inside = (start >= 0) & (start >= windows.start) & (end <= windows.start + windows.length - 1)
        offset = windows.start - doc_offset[:, 0]
        out["start_positions"] = tf.cast(tf.where(inside, start - offset, 0), tf.int32)
        out["end_positions"] = tf.cast(tf.where(inside, end - offset, 0), tf.int32)
    return out


def ner_windows(word_pieces, windowing, special_ids, context=None):
    """Windows of sentences for token classification, every word scored in exactly one window.

    word_pieces: ragged [batch, (words), (ids)]; a word without pieces is fed as [UNK] (special_ids.unk). A
    sentence of at most max_seq_length - 2 pieces is one window [CLS] left sentence right [SEP] (context: None,
    or (left, right), each ragged [batch, (ids)] of context pieces, not scored). A longer one is split into
    windows of max_seq_length - 2 pieces starting every doc_stride pieces (windowing; no context), and each word
    is scored in the window where its first piece has the most context (the original run_squad.py's rule);
    windows that score no word are left out.

    Returns a dict, one row per window: sentence_index [K] int32; input_ids, input_mask, segment_ids and
    scored_word (the index in its sentence of the word scored at that slot, -1 elsewhere)
    [K, max_seq_length] int32.
    """
    max_seq_length, doc_stride = windowing.max_seq_length, windowing.doc_stride
    cls_id, sep_id, unk_id = special_ids.cls, special_ids.sep, special_ids.unk
    left_context, right_context = context if context is not None else (None, None)
    max_tokens = max_seq_length - 2
    word_pieces = _ragged_int(word_pieces)
    pieces = word_pieces.values  # [total words, (pieces)]
    keep = tf.maximum(pieces.row_lengths(), 1)
    unk = tf.RaggedTensor.from_tensor(tf.fill([tf.shape(keep)[0], 1], tf.cast(unk_id, tf.int32)),
                                      row_splits_dtype=tf.int64)
    pieces = tf.concat([pieces, unk], axis=1)
    piece_rows = linear_ragged.row_ids(pieces.row_splits)
    in_keep = tf.ragged.range(pieces.row_lengths()).flat_values < tf.gather(keep, piece_rows)
    pieces = tf.RaggedTensor.from_row_splits(
        *linear_ragged.boolean_mask(pieces.flat_values, pieces.row_splits, in_keep), validate=False)
    sentence_splits = tf.gather(pieces.row_splits, word_pieces.row_splits)  # piece offsets of sentences
    flat = pieces.flat_values
    piece_sentence = linear_ragged.row_ids(sentence_splits)
    piece_word = linear_ragged.row_ids(pieces.row_splits) - tf.gather(word_pieces.row_splits, piece_sentence)
    is_word_start = tf.scatter_nd(pieces.row_starts()[:, tf.newaxis], tf.ones_like(keep, tf.bool),
                                  tf.shape(flat, out_type=tf.int64))

    num_tokens = sentence_splits[1:] - sentence_splits[:-1]
    windows = Windows(num_tokens, max_tokens, doc_stride)
    sentence = windows.row
    fits = tf.gather(num_tokens, sentence) <= max_tokens

    def context_for(context):
        if context is None:
            return tf.zeros_like(windows.row), None
        context = _ragged_int(context)
        return tf.where(fits, tf.gather(context.row_lengths(), sentence), 0), context

    left_len, left = context_for(left_context)
    right_len, right = context_for(right_context)

    slots = tf.range(max_seq_length, dtype=tf.int64)[tf.newaxis, :]
    left_len2, right_len2 = left_len[:, tf.newaxis], right_len[:, tf.newaxis]
    length = windows.length[:, tf.newaxis]
    in_left = (slots >= 1) & (slots <= left_len2)
    in_sentence = (slots > left_len2) & (slots <= left_len2 + length)
    in_right = (slots > left_len2 + length) & (slots <= left_len2 + length + right_len2)
    last = left_len2 + length + right_len2 + 1

    doc_pos = windows.start[:, tf.newaxis] + slots - 1 - left_len2
    flat_pos = tf.gather(sentence_splits, sentence)[:, tf.newaxis] + doc_pos
    flat_pos = tf.where(in_sentence, flat_pos, tf.zeros_like(flat_pos))
    ids = tf.where(in_sentence, tf.gather(flat, flat_pos), 0)
    for context, inside, first in ((left, in_left, 1), (right, in_right, 1 + left_len2 + length)):
        if context is not None:
            position = tf.gather(context.row_splits, sentence)[:, tf.newaxis] + slots - first
            position = tf.where(inside, position, tf.zeros_like(position))
            ids = tf.where(inside, tf.gather(context.flat_values, position), ids)
    ids = tf.where(slots == 0, tf.cast(cls_id, tf.int32), ids)
    ids = tf.where(slots == last, tf.cast(sep_id, tf.int32), ids)

    scored = in_sentence & tf.gather(is_word_start, flat_pos) & windows.has_max_context(doc_pos)
    scored_word = tf.where(scored, tf.gather(piece_word, flat_pos), -1)
    used = tf.reduce_any(scored, axis=1)
    out = {
        "sentence_index": tf.cast(sentence, tf.int32),
        "input_ids": ids,
        "input_mask": tf.cast(slots <= last, tf.int32),
        "segment_ids": tf.zeros_like(ids),
        "scored_word": tf.cast(scored_word, tf.int32),
    }
    return {name: tf.boolean_mask(value, used) for name, value in out.items()}


PACK_CHUNK = 8192  # rows packed per call of a packer (pack_in_chunks)


def pack_in_chunks(pack, ids_a, ids_b, chunk=PACK_CHUNK):
    """{name: numpy array} of pack(ragged ids_a, ragged ids_b) -> {name: tensor, one row per pair} over lists of
    id lists, `chunk` pairs a call, concatenated (no pairs: one call with none, for the arrays' shapes)."""
    parts = {}
    for start in range(0, max(len(ids_a), 1), chunk):
        end = start + chunk
        for name, tensor in pack(ragged_ids(ids_a[start:end]), ragged_ids(ids_b[start:end])).items():
            parts.setdefault(name, []).append(tensor.numpy())
    return {name: np.concatenate(part) for name, part in parts.items()}


def pack_pairs(tokenizer, ids_a, ids_b, max_seq_length):
    """{"input_ids", "input_mask", "segment_ids": int32 array [rows, max_seq_length]} of [CLS] a [SEP] (b [SEP])
    (pack_pair) for lists of id lists (an empty b: a single sequence)."""
    cls_id, sep_id = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
    return pack_in_chunks(lambda a, b: dict(zip(INPUT_NAMES, pack_pair(a, b, max_seq_length, cls_id, sep_id))),
                          ids_a, ids_b)
