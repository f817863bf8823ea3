"""linear_ragged.py: the ragged operations serving_text uses, against TensorFlow's own, in linear memory."""
import numpy as np
import pytest
import tensorflow as tf

import linear_ragged


def _random_rows(rng):
    """Row lengths with empty rows first, last and between, and rows of very different lengths."""
    lengths = rng.choice([0, 0, 1, 2, 3, 7, 40], size=rng.integers(0, 30)).tolist()
    if lengths and rng.random() < 0.5:
        lengths[rng.integers(len(lengths))] = int(rng.integers(100, 1000))
    return lengths


@pytest.mark.parametrize("seed", range(20))
def test_every_operation_equals_tensorflows_ragged_one(seed):
    rng = np.random.default_rng(seed)
    lengths = _random_rows(rng)
    values = tf.constant(rng.integers(-5, 6, size=sum(lengths)), tf.int64)
    ragged = tf.RaggedTensor.from_row_lengths(values, tf.constant(lengths, tf.int64))
    splits = ragged.row_splits
    np.testing.assert_array_equal(linear_ragged.splits_from_lengths(tf.constant(lengths, tf.int32)), splits)
    np.testing.assert_array_equal(linear_ragged.row_ids(splits), ragged.value_rowids())
    np.testing.assert_array_equal(linear_ragged.row_sums(values, splits), tf.reduce_sum(ragged, axis=1))
    flags = values > 2
    np.testing.assert_array_equal(linear_ragged.row_any(flags, splits),
                                  tf.reduce_any(ragged.with_flat_values(flags), axis=1))
    np.testing.assert_array_equal(linear_ragged.row_cumsum(values, splits), tf.cumsum(ragged, axis=1).flat_values)
    np.testing.assert_array_equal(linear_ragged.row_cumsum(values, splits, ragged.value_rowids()),
                                  tf.cumsum(ragged, axis=1).flat_values)
    masked = tf.ragged.boolean_mask(ragged, ragged.with_flat_values(flags))
    kept, kept_splits = linear_ragged.boolean_mask(values, splits, flags)
    np.testing.assert_array_equal(kept, masked.flat_values)
    np.testing.assert_array_equal(kept_splits, masked.row_splits)
    counts = tf.constant(rng.integers(0, 4, size=len(lengths)), tf.int64)
    table = tf.range(len(lengths)) * 10
    np.testing.assert_array_equal(linear_ragged.repeat(table, counts), tf.repeat(table, counts))


def test_a_long_row_beside_a_million_empty_ones_takes_memory_of_its_values_alone():
    """TensorFlow's value_rowids() would tile 1,000,001 rows x 10,000,000 values (80 TB); these take the
    values' own size."""
    splits = tf.concat([tf.zeros([1_000_001], tf.int64), [10_000_000]], 0)
    ids = linear_ragged.row_ids(splits)
    assert ids.shape == [10_000_000]
    assert int(tf.reduce_min(ids)) == int(tf.reduce_max(ids)) == 1_000_000
    assert linear_ragged.row_sums(tf.ones([10_000_000], tf.int64), splits)[-1].numpy() == 10_000_000
    repeated = linear_ragged.repeat(tf.constant([7, 8]), tf.constant([10_000_000, 0]))
    assert repeated.shape == [10_000_000] and int(tf.reduce_max(repeated)) == 7
