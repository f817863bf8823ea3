"""records.py: each record format is what its writer writes and its reader reads; the numpy serializer and framing
write the bytes of TensorFlow's writer (CRCs included); the training input shuffles as a Shuffle says."""
import os

import numpy as np
import pytest
import tensorflow as tf

import create_pretraining_data
import records
from tests.shared_data import glue

NAMES = create_pretraining_data.FEATURE_NAMES


def test_a_record_format_is_what_its_writer_writes_and_its_reader_reads(tmp_path):
    record_format = records.classifier(4, is_regression=True)
    row = {"input_ids": [101, 7, 102, 0], "input_mask": [1, 1, 1, 0], "segment_ids": [0, 0, 0, 0],
           "label_ids": [2.5], "is_real_example": [1]}
    path = str(tmp_path / "x.tf_record")
    writer = records.RecordFile(path, record_format)
    writer.write(row)
    with pytest.raises(ValueError, match="are not the record format's"):
        writer.write({name: row[name] for name in reversed(row)})
    writer.close()
    parsed = next(iter(tf.data.TFRecordDataset(path).map(lambda r: records.decode(r, record_format))))
    assert parsed["label_ids"].dtype == tf.float32 and float(parsed["label_ids"]) == 2.5
    assert parsed["input_ids"].dtype == tf.int32 and parsed["input_ids"].numpy().tolist() == row["input_ids"]
    example = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(path))).numpy()).features.feature
    assert [example[name].WhichOneof("kind") for name in record_format] == [
        "float_list" if kind == records.FLOAT else "int64_list" for _, kind in record_format.values()]


@pytest.mark.parametrize("record_format", [records.classifier(32, False), records.classifier(32, True),
                                           records.squad(64, True), records.squad(64, False)])
def test_record_files_are_the_bytes_of_tensorflows_writer(tmp_path, record_format):
    """records.RecordFile (numpy) writes what tf.io.TFRecordWriter writes for tf.train.Example with TensorFlow's
    deterministic serialization, record by record and by columns, over several blocks."""
    rng = np.random.default_rng(0)
    rows = 2 * records.RecordFile.BLOCK + 3
    arrays = {}
    for name, (length, kind) in record_format.items():
        shape = (rows, length) if length else (rows,)
        arrays[name] = (rng.standard_normal(shape).astype(np.float32) if kind == records.FLOAT else
                        rng.integers(0, 1 << 40 if name == "unique_ids" else 30522, shape))
    expected = str(tmp_path / "tf.tf_record")
    with tf.io.TFRecordWriter(expected) as writer:
        for i in range(rows):
            feature = {name: tf.train.Feature(float_list=tf.train.FloatList(value=np.ravel(values[i]).tolist()))
                       if record_format[name][1] == records.FLOAT else
                       tf.train.Feature(int64_list=tf.train.Int64List(value=np.ravel(values[i]).tolist()))
                       for name, values in arrays.items()}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(
                deterministic=True))
    by_columns = str(tmp_path / "columns.tf_record")
    assert records.write_file(by_columns, arrays, record_format) == rows
    by_rows = records.RecordFile(str(tmp_path / "rows.tf_record"), record_format)
    for i in range(rows):
        by_rows.write({name: values[i] for name, values in arrays.items()})
    by_rows.close()
    want = open(expected, "rb").read()
    assert open(by_columns, "rb").read() == want and open(by_rows.path, "rb").read() == want


def _training_order(path, record_format, rows, **shuffle):
    """The rows (input_ids[0]) of the first two passes' training batches of 32 over `rows` records, as one list."""
    batches = 2 * rows // 32 + 1
    dataset = records.input_fn(path, record_format, True, True, records.Shuffle(seed=1, **shuffle))(32).take(batches)
    return [row for batch in dataset.as_numpy_iterator() for row in batch["input_ids"][:, 0].tolist()]


def test_shuffle_buffer_0_mixes_a_sorted_training_file(tmp_path):
    # CoLA's train.tsv is sorted by source (17 of them): the original's 100-record buffer fills each batch from
    # one or two of them; shuffling all records draws every batch from across the file, a new order each pass.
    lines = open(os.path.join(glue("CoLA"), "train.tsv"), encoding="utf-8").read().splitlines()
    sources = [line.split("\t")[0] for line in lines]
    n = len(sources)
    assert len(set(sources)) == 17
    record_format = records.classifier(2, is_regression=False)
    path = str(tmp_path / "train.tf_record")
    writer = records.RecordFile(path, record_format)
    for row in range(n):
        writer.write({"input_ids": [row, 0], "input_mask": [1, 0], "segment_ids": [0, 0], "label_ids": [0],
                      "is_real_example": [1]})
    writer.close()

    def sources_per_batch(order):
        return np.mean([len({sources[row] for row in order[i:i + 32]}) for i in range(0, n - 31, 32)])

    assert sources_per_batch(_training_order(path, record_format, n)) < 2.5
    shuffled = _training_order(path, record_format, n, buffer=0, num_records=n)
    assert sources_per_batch(shuffled) > 9
    first, second = shuffled[:n], shuffled[n:2 * n]
    assert sorted(first) == sorted(second) == list(range(n)) and first != second  # a new permutation each pass
    with pytest.raises(ValueError, match="needs num_records"):
        records.input_fn(path, record_format, True, True, records.Shuffle(buffer=0))


def test_writer_bytes_equal_tensorflow_writer(tmp_path):
    rng = np.random.default_rng(0)
    batch, width, pred = 37, 512, 80
    features = {
        "input_ids": rng.integers(0, 119547, (batch, width)),
        "input_mask": rng.integers(0, 2, (batch, width)),
        "segment_ids": rng.integers(0, 2, (batch, width)),
        "masked_lm_positions": rng.integers(0, width, (batch, pred)),
        "masked_lm_ids": rng.integers(0, 3 << 28, (batch, pred)),
        "masked_lm_weights": rng.random((batch, pred)).astype(np.float32),
        "next_sentence_labels": rng.integers(0, 2, (batch, 1)),
    }
    matrix, lengths = records.serialize(features, records.pretraining(None, None))
    serialized = [matrix[row, records.DATA_OFFSET:records.DATA_OFFSET + lengths[row]].tobytes()
                  for row in range(batch)]
    path = str(tmp_path / "tf.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for row in range(batch):
            example = tf.train.Example.FromString(serialized[row])
            for name in NAMES:
                feature = example.features.feature[name]
                got = feature.float_list.value if name == "masked_lm_weights" else feature.int64_list.value
                np.testing.assert_array_equal(np.array(got), features[name][row])
            writer.write(serialized[row])
    with open(path, "rb") as f:
        assert f.read() == records.record_bytes(*records.frame_records(matrix, lengths))


def test_crc32c_known_values():
    data = np.frombuffer(b"123456789" + b"\0" * 3, np.uint8).reshape(1, 12)
    assert int(records.crc32c_rows(data, [9])[0]) == 0xE3069283
    assert int(records.crc32c_rows(np.zeros((1, 4), np.uint8), [0])[0]) == 0
