"""Operations on ragged rows (flat values and their row_splits) whose memory and time are linear in the values.

TensorFlow's RaggedTensor.value_rowids(), tf.repeat with per-row counts, and the ragged reductions, cumsum and
boolean_mask built on them first make a dense [rows x longest row] tensor (ragged_util.repeat): a serving_text
request whose rows hold one very long word beside many short ones would need words x longest word cells
(tens of GB for a request of a few hundred KB). serving.py, packing.py and fast_tokenization.py use these
instead wherever a request's rows are ragged. Splits are int64 [rows + 1] with splits[0] == 0, as
RaggedTensor.row_splits.
"""
import tensorflow as tf


def splits_from_lengths(lengths):
    """Row splits (int64 [rows + 1]) of rows of these lengths."""
    return tf.concat([tf.zeros([1], tf.int64), tf.cumsum(tf.cast(lengths, tf.int64))], 0)


def row_ids(splits):
    """The row of each value, int64 [splits[-1]] (RaggedTensor.value_rowids() without its dense tile): a mark at
    each later row's first value, summed along the values."""
    splits = tf.cast(splits, tf.int64)
    size = splits[-1]
    starts = splits[1:-1]  # where rows 1.. begin; empty rows repeat a value, a trailing one may equal size
    marks = tf.math.unsorted_segment_sum(tf.ones_like(starts), starts, size + 1)[:size]
    return tf.cumsum(marks)


def repeat(values, counts):
    """values[i] counts[i] times, in order, along the first axis (tf.repeat without its dense tile)."""
    return tf.gather(values, row_ids(splits_from_lengths(counts)))


def row_sums(values, splits):
    """The sum of each row's values (integer values: exact)."""
    totals = tf.concat([tf.zeros([1], values.dtype), tf.cumsum(values)], 0)
    return tf.gather(totals, splits[1:]) - tf.gather(totals, splits[:-1])


def row_any(flags, splits):
    """bool [rows]: whether any value of the row is True."""
    return row_sums(tf.cast(flags, tf.int64), splits) > 0


def row_cumsum(values, splits, ids=None):
    """The running sum of the values within each row (tf.cumsum(ragged, axis=1)), flat like the values; ids:
    row_ids(splits) where the caller has them already."""
    totals = tf.cumsum(values)
    before_row = tf.gather(tf.concat([tf.zeros([1], values.dtype), totals], 0), splits[:-1])
    return totals - tf.gather(before_row, row_ids(splits) if ids is None else ids)


def boolean_mask(values, splits, mask):
    """The values where mask (bool, flat like the values) is True and their row splits: every row kept, empty
    or not (tf.ragged.boolean_mask of a ragged mask)."""
    return tf.boolean_mask(values, mask), splits_from_lengths(row_sums(tf.cast(mask, tf.int64), splits))
