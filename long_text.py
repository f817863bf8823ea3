"""How a classifier reads a text longer than one window (run_classifier.py --long_text), in its records, its
training and evaluation, and its export's serving_text alike.

  truncate (the original's): [CLS] a [SEP] (b [SEP]) cut to max_seq_length, a's first tokens kept.
  head_tail: the same length, but a cut text_a keeps its first head_tokens tokens (default half) and then its
    last ones (Sun et al., "How to Fine-Tune BERT for Text Classification?", 2019: head and tail ahead of the head
    alone; benchmarks/LONG_TEXT.md measures the split).
  windows: text_a read in windows that start every doc_stride tokens (text_b, if any, whole in every window; cut to
    half a window when longer), at most max_windows per document (the first ones); the document's logits are its
    windows' logits pooled (mean or max per class), in the loss as in the predictions, so that a label learnt
    from any one window is the document's.

A windowed document's features are its windows side by side: input_ids, input_mask and segment_ids
[documents, max_windows * max_seq_length] (by_document), a window present where its [CLS] slot is (input_mask 1);
the model reads the present windows alone (WindowedLogits). pack_documents packs documents as any of the three
modes reads them (the records and --predict_input).
"""
import dataclasses

import tensorflow as tf

import cli
import packing

MODES = ("truncate", "head_tail", "windows")
POOLINGS = ("mean", "max")


@dataclasses.dataclass(frozen=True)
class LongText:
    """--long_text and its settings (run_classifier.py's flags): the mode (MODES); for head_tail, head_tokens; for
    windows, doc_stride, window_pooling (POOLINGS) and max_windows_per_document."""
    long_text: str = cli.option("truncate", "How a text_a longer than max_seq_length is read: truncate (the "
                                "original's: its first tokens), head_tail (its first --head_tokens and its last "
                                "tokens), windows (all of it, in windows every --doc_stride tokens, the document's "
                                "logits pooled over them by --window_pooling).", enum=MODES)
    head_tokens: int = cli.option(None, "--long_text=head_tail: how many of the kept tokens come from the head of "
                                  "a cut text_a (default: half of max_seq_length - 2, for evidence as likely at "
                                  "either end; more tail where the end decides, as a review's verdict).")
    doc_stride: int = cli.option(128, "--long_text=windows: a new window every this many tokens of text_a.")
    window_pooling: str = cli.option("mean", "--long_text=windows: how a document's logits come from its "
                                     "windows': their mean, or their maximum per class.", enum=POOLINGS)
    max_windows_per_document: int = cli.option(16, "--long_text=windows: the most windows read of a document "
                                               "(its first ones; the log says how many documents were cut).")

    @property
    def windows(self):
        return self.long_text == "windows"

    def check(self, max_seq_length):
        """A cli.UserError naming the flag of a setting out of its range."""
        if self.long_text not in MODES:
            raise cli.UserError(f"--long_text={self.long_text}: expected one of {', '.join(MODES)}")
        if self.window_pooling not in POOLINGS:
            raise cli.UserError(f"--window_pooling={self.window_pooling}: expected one of {', '.join(POOLINGS)}")
        if self.doc_stride < 1:
            raise cli.UserError(f"--doc_stride={self.doc_stride}: expected a positive number of tokens")
        if self.max_windows_per_document < 1:
            raise cli.UserError(f"--max_windows_per_document={self.max_windows_per_document}: expected at least 1")
        if self.head_tokens is not None and not 0 <= self.head_tokens <= max_seq_length - 2:
            raise cli.UserError(f"--head_tokens={self.head_tokens}: expected 0 to max_seq_length - 2 = "
                                f"{max_seq_length - 2}")
        if self.windows and max_seq_length < 5:
            raise cli.UserError(f"--long_text=windows: --max_seq_length={max_seq_length} leaves no room for text_a "
                                f"beside [CLS], text_b and two [SEP]s (expected at least 5)")

    def head_tokens_for(self, max_seq_length):
        """The head a cut text_a keeps under head_tail (packing.pack_pair's head); None for the other modes."""
        if self.long_text != "head_tail":
            return None
        return (max_seq_length - 2) // 2 if self.head_tokens is None else self.head_tokens


def windows(ids_a, ids_b, max_seq_length, long_text, special_ids):
    """The windows of documents: ids_a, ids_b ragged [documents, (ids)] (ids_b None: single texts).

    Returns a dict, one row per window kept: document, window [K] int32 (its document's row, its index there);
    input_ids, input_mask, segment_ids [K, max_seq_length] int32 (packing.pack_spans); and num_windows
    [documents] int32, each document's windows before the max_windows bound. A document whose text_a has no
    token has one window ([CLS] [SEP] (b [SEP]))."""
    ids_a = tf.cast(ids_a, tf.int32).with_row_splits_dtype(tf.int64)
    splits_a = ids_a.row_splits
    len_a = splits_a[1:] - splits_a[:-1]
    if ids_b is None:
        flat_b, splits_b = tf.zeros([0], tf.int32), tf.zeros_like(splits_a)
    else:
        ids_b = tf.cast(ids_b, tf.int32).with_row_splits_dtype(tf.int64)
        flat_b, splits_b = ids_b.flat_values, ids_b.row_splits
    # text_b whole in every window, cut to half of the tokens a window holds beside [CLS] and two [SEP]s.
    keep_b = tf.minimum(splits_b[1:] - splits_b[:-1], (max_seq_length - 3) // 2)
    room = max_seq_length - 2 - tf.cast(keep_b > 0, tf.int64) - keep_b
    spans = packing.Windows(tf.maximum(len_a, 1), room, long_text.doc_stride)
    kept = spans.index < long_text.max_windows_per_document
    document, index, start = (tf.boolean_mask(values, kept) for values in (spans.row, spans.index, spans.start))
    length = tf.maximum(tf.minimum(tf.boolean_mask(spans.length, kept), tf.gather(len_a, document) - start), 0)
    input_ids, input_mask, segment_ids = packing.pack_spans(
        (ids_a.flat_values, tf.cast(tf.gather(splits_a, document) + start, tf.int32), tf.cast(length, tf.int32)),
        (flat_b, tf.cast(tf.gather(splits_b, document), tf.int32), tf.cast(tf.gather(keep_b, document), tf.int32)),
        max_seq_length, special_ids)
    return {"document": tf.cast(document, tf.int32), "window": tf.cast(index, tf.int32), "input_ids": input_ids,
            "input_mask": input_mask, "segment_ids": segment_ids,
            "num_windows": tf.cast(spans.row_splits[1:] - spans.row_splits[:-1], tf.int32)}


def by_document(packed, num_documents, max_windows):
    """windows()' rows side by side per document: {feature: int32 [documents, max_windows * max_seq_length]},
    absent windows all zeros."""
    indices = tf.stack([packed["document"], packed["window"]], axis=1)
    out = {}
    for name in packing.INPUT_NAMES:
        rows = packed[name]
        shape = tf.stack([tf.cast(num_documents, tf.int32), max_windows, tf.shape(rows)[1]])
        dense = tf.scatter_nd(indices, rows, shape)
        out[name] = tf.reshape(dense, [shape[0], -1])
    return out


def pack_documents(ids_a, ids_b, max_seq_length, long_text, special_ids):
    """{input name: int32 [documents, width]} of documents, ids_a and ids_b ragged [documents, (ids)] (ids_b
    None: single texts), as `long_text` (a LongText) reads them: one packed window each (truncate, head_tail:
    packing.pack_pair with its head), or with windows their windows side by side (by_document, width
    max_windows_per_document * max_seq_length) and num_windows [documents] (windows')."""
    if not long_text.windows:
        packed = packing.pack_pair(ids_a, ids_b, max_seq_length, special_ids.cls, special_ids.sep,
                                   long_text.head_tokens_for(max_seq_length))
        return dict(zip(packing.INPUT_NAMES, packed))
    packed = windows(ids_a, ids_b, max_seq_length, long_text, special_ids)
    out = by_document(packed, ids_a.nrows(), long_text.max_windows_per_document)
    out["num_windows"] = packed["num_windows"]
    return out


def pool(logits, document, num_documents, pooling, present=None):
    """Each document's logits [documents, C] from its windows' logits [K, C] (document [K]: the window's
    document; present [K] bool: the windows that count, default all): their mean, or their maximum per class.
    A document without windows gets zeros."""
    logits = tf.cast(logits, tf.float32)
    if present is None:
        present = tf.ones_like(document, tf.bool)
    weight = tf.cast(present, tf.float32)[:, tf.newaxis]
    count = tf.math.unsorted_segment_sum(weight, document, num_documents)
    if pooling == "mean":
        pooled = tf.math.unsorted_segment_sum(logits * weight, document, num_documents) / tf.maximum(count, 1.0)
    else:
        masked = tf.where(present[:, tf.newaxis], logits, tf.float32.min)
        pooled = tf.math.unsorted_segment_max(masked, document, num_documents)
    return tf.where(count > 0, pooled, 0.0)


class WindowedLogits:
    """The document logits of a classifier model over by_document features: the present windows through the
    model (cut to their longest one; all windows at one static shape where `static` (XLA, TPU)), pooled; in
    training, dropout drawn from dropout_seed as a model call draws it (encoder.py)."""

    def __init__(self, max_seq_length, long_text, static=False):
        self.max_seq_length = max_seq_length
        self.long_text = long_text
        self.static = static

    def __call__(self, model, features, training, dropout_seed=None):
        length = self.max_seq_length
        rows = {name: tf.reshape(features[name], [-1, length]) for name in packing.INPUT_NAMES}
        num_documents = tf.shape(features["input_ids"])[0]
        document = tf.range(tf.shape(rows["input_ids"])[0]) // self.long_text.max_windows_per_document
        present = rows["input_mask"][:, 0] > 0
        if self.static:
            logits = model(rows, training=training, dropout_seed=dropout_seed)
            return pool(logits, document, num_documents, self.long_text.window_pooling, present)
        where = tf.where(present)[:, 0]
        rows = {name: tf.gather(value, where) for name, value in rows.items()}
        width = packing.real_length(rows["input_mask"])
        logits = model({name: value[:, :width] for name, value in rows.items()}, training=training,
                       dropout_seed=dropout_seed)
        return pool(logits, tf.gather(document, where), num_documents, self.long_text.window_pooling)
