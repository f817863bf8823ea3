"""The project's TFRecord files: every record format declared once, and the one codec that writes, reads and
checks them.

A format is an ordered {feature name: (length, kind)}: `length` values per record (None: one value, read back
as a scalar), `kind` INT64 or FLOAT (tf.train.Example's int64_list / float_list).

Writing (numpy, no TensorFlow: create_pretraining_data.py runs without it): serialize() turns a batch of feature
arrays into tf.train.Example wire bytes, frame_records() adds the TFRecord framing (length, CRC32C), and
RecordWriters (round-robin over several files, as the original's pre-training writer) or RecordFile (one file,
record by record, as the fine-tuning runners write their features) put them in files on any file system.
RecordFile orders each record's features by name, as TensorFlow's deterministic serialization does, so its files
are those tf.io.TFRecordWriter would write.

Reading and checking (TensorFlow, imported when first needed): decode() parses a record (int64 -> int32),
input_fn() is the fine-tuning runners' input over a feature file, check_first_record() compares a file's first
record with the format a script expects, and naming_corrupt_records() turns TensorFlow's DataLossError into an
error naming the file and record.
"""
import collections
import dataclasses
import re

import numpy as np
from absl import logging

import cli
import filesystem

INT64 = "int64"
FLOAT = "float"


def pretraining(max_seq_length, max_predictions_per_seq):
    """The original's pre-training records (create_pretraining_data.py -> run_pretraining.py)."""
    return collections.OrderedDict([
        ("input_ids", (max_seq_length, INT64)),
        ("input_mask", (max_seq_length, INT64)),
        ("segment_ids", (max_seq_length, INT64)),
        ("masked_lm_positions", (max_predictions_per_seq, INT64)),
        ("masked_lm_ids", (max_predictions_per_seq, INT64)),
        ("masked_lm_weights", (max_predictions_per_seq, FLOAT)),
        ("next_sentence_labels", (1, INT64)),
    ])


def classifier(max_seq_length, is_regression):
    """run_classifier.py's train.tf_record (a float label for regression)."""
    return collections.OrderedDict([
        ("input_ids", (max_seq_length, INT64)),
        ("input_mask", (max_seq_length, INT64)),
        ("segment_ids", (max_seq_length, INT64)),
        ("label_ids", (None, FLOAT if is_regression else INT64)),
        ("is_real_example", (None, INT64)),
    ])


def squad(max_seq_length, is_training):
    """run_squad.py's train.tf_record (with the answer; without: the features of a prediction)."""
    features = collections.OrderedDict([
        ("unique_ids", (None, INT64)),
        ("input_ids", (max_seq_length, INT64)),
        ("input_mask", (max_seq_length, INT64)),
        ("segment_ids", (max_seq_length, INT64)),
    ])
    if is_training:
        features.update([("start_positions", (None, INT64)), ("end_positions", (None, INT64)),
                         ("is_impossible", (None, INT64))])
    return features


def names(record_format):
    """The feature names of a format, in order."""
    return tuple(record_format)


def check(record_format, features, where):
    """Raises ValueError unless `features` ({name: values per record, or [records, values]}) are the format's,
    in its order."""
    if tuple(features) != names(record_format):
        raise ValueError(f"{where}: features {tuple(features)} are not the record format's {names(record_format)}")


# ---------------------------------------------------------------------------------------------------------
# Writing: tf.train.Example serialization and TFRecord framing with numpy.

_VARINT_TABLE = {}


def _varint_table(size):
    """Varint bytes (3 slots) and slot validity of every value below `size` (<= 2**21), for gathers."""
    size = max(1 << 16, 1 << (int(size) - 1).bit_length())
    if size not in _VARINT_TABLE:
        values = np.arange(size, dtype=np.uint32)[:, None]
        shifts = np.array([0, 7, 14], np.uint32)[None, :]
        valid = np.ones((size, 3), bool)
        valid[:, 1:] = values >= (np.uint32(1) << shifts[:, 1:])
        more = np.zeros((size, 3), bool)
        more[:, :2] = valid[:, 1:]
        data = (((values >> shifts) & 0x7F) | (more * 0x80)).astype(np.uint8)
        _VARINT_TABLE[size] = (data, valid)
    return _VARINT_TABLE[size]


def _varint_slots(values):
    """Protobuf varints of a [B, K] array of non-negative ints as byte slots.

    Returns (bytes [B, K * slots] uint8, valid [B, K * slots] bool, or None when every slot is used,
    encoded length per row).
    """
    values = np.asarray(values)
    batch, width = values.shape
    if values.size and values.min() < 0:
        raise ValueError("negative value in an int64 feature; expected token ids, positions or labels")
    top = int(values.max()) if values.size else 0
    slots = 1
    while top >= 1 << (7 * slots):
        slots += 1
    if slots == 1:
        return values.astype(np.uint8), None, np.full(batch, width, np.int64)
    if slots == 3 and width > 1:
        table, table_valid = _varint_table(top + 1)
        out = table[values]
        valid = table_valid[values]
    else:
        values = values.astype(np.uint64 if slots > 4 else np.uint32)
        out = np.empty((batch, width, slots), np.uint8)
        valid = np.empty((batch, width, slots), bool)
        valid[..., 0] = True
        for k in range(slots):
            if k + 1 < slots:
                valid[..., k + 1] = values >= (1 << (7 * (k + 1)))
                out[..., k] = ((values >> (7 * k)) & 0x7F) | (valid[..., k + 1] * np.uint8(0x80))
            else:
                out[..., k] = (values >> (7 * k)) & 0x7F
    valid = valid.reshape(batch, width * slots)
    if valid.all():
        return out.reshape(batch, width * slots), None, np.full(batch, width * slots, np.int64)
    return out.reshape(batch, width * slots), valid, valid.sum(axis=1)


def _varint_len(values):
    values = np.asarray(values, np.int64)
    out = np.ones(values.shape, np.int64)
    for k in range(1, 10):
        more = values >= (1 << (7 * k))
        if not more.any():
            break
        out += more
    return out


def _fixed(piece):
    return isinstance(piece, bytes) or piece[1] is None


def _block(piece, batch):
    if isinstance(piece, bytes):
        return np.broadcast_to(np.frombuffer(piece, np.uint8), (batch, len(piece)))
    return piece[0]


# Serialized records sit in their matrix rows after DATA_OFFSET bytes left free for the TFRecord header
# (length and its CRC), with at least DATA_PAD free bytes after them (the data CRC, rounding for the CRC).
DATA_OFFSET = 12
DATA_PAD = 8


def serialize(features, record_format, by_name=False):
    """tf.train.Example wire bytes of a batch of feature arrays ({name: array [B] or [B, length]} of the format).

    Returns (matrix [B, W] uint8, lengths): record i is matrix[i, DATA_OFFSET:DATA_OFFSET + lengths[i]].
    Map entries whose bytes have the same length in every row go first (a protobuf map's order is free), so
    only the rest needs compacting row by row; by_name writes them in name order instead, as TensorFlow's
    deterministic serialization does.
    """
    batch = len(next(iter(features.values())))
    entries = []
    body_len = np.zeros(batch, np.int64)
    for name in (sorted(record_format) if by_name else record_format):
        values = np.asarray(features[name]).reshape(batch, -1)
        if record_format[name][1] == FLOAT:
            payload = (values.astype("<f4").view(np.uint8).reshape(batch, -1), None,
                       np.full(batch, 4 * values.shape[1], np.int64))
            kind_tag = b"\x12"  # Feature.float_list
        else:
            payload = _varint_slots(values)
            kind_tag = b"\x1a"  # Feature.int64_list
        packed_len = payload[2]
        list_len = 1 + _varint_len(packed_len) + packed_len                    # Int64List / FloatList
        feature_len = 1 + _varint_len(list_len) + list_len                      # Feature
        key = name.encode("ascii")
        entry_len = 2 + len(key) + 1 + _varint_len(feature_len) + feature_len  # map entry <string, Feature>
        body_len += 1 + _varint_len(entry_len) + entry_len
        entries.append([
            b"\x0a", _varint_slots(entry_len[:, None]),
            b"\x0a" + bytes([len(key)]) + key + b"\x12", _varint_slots(feature_len[:, None]),
            kind_tag, _varint_slots(list_len[:, None]),
            b"\x0a", _varint_slots(packed_len[:, None]),
            payload,
        ])
    header = [b"\x0a", _varint_slots(body_len[:, None])]
    lead, tail = [], []
    if all(_fixed(piece) for piece in header) and not by_name:
        lead.extend(header)
        for entry in entries:
            (lead if all(_fixed(piece) for piece in entry) else tail).extend(entry)
    else:
        tail = header + [piece for entry in entries for piece in entry]
    lead_blocks = [_block(piece, batch) for piece in lead]
    lead_width = sum(block.shape[1] for block in lead_blocks)
    if tail:
        tail_big = np.concatenate([_block(piece, batch) for piece in tail], axis=1)
        tail_valid = np.concatenate([np.ones((batch, len(piece)), bool) if isinstance(piece, bytes) else
                                     (np.ones(piece[0].shape, bool) if piece[1] is None else piece[1])
                                     for piece in tail], axis=1)
        tail_len = tail_valid.sum(axis=1)
    else:
        tail_len = np.zeros(batch, np.int64)
    lengths = lead_width + tail_len
    width = DATA_OFFSET + -(-(int(lengths.max()) + DATA_PAD) // 4) * 4
    matrix = np.zeros((batch, width), np.uint8)
    if lead_blocks:
        matrix[:, DATA_OFFSET:DATA_OFFSET + lead_width] = np.concatenate(lead_blocks, axis=1)
    if tail:
        start = DATA_OFFSET + lead_width
        keep = np.arange(width - start)[None, :] < tail_len[:, None]
        matrix[:, start:][keep] = tail_big[tail_valid]
    return matrix, lengths


_CRC_TABLES = None


def _crc_tables():
    """CRC32C (Castagnoli) tables: the byte table and two 16-bit tables for 4-bytes-at-a-time steps."""
    global _CRC_TABLES
    if _CRC_TABLES is None:
        table = np.arange(256, dtype=np.uint32)
        for _ in range(8):
            table = np.where(table & 1, (table >> 1) ^ np.uint32(0x82F63B78), table >> 1).astype(np.uint32)
        t1 = (table >> 8) ^ table[table & 0xFF]
        t2 = (t1 >> 8) ^ table[t1 & 0xFF]
        t3 = (t2 >> 8) ^ table[t2 & 0xFF]
        low = np.arange(1 << 16, dtype=np.uint32)
        table_low = t3[low & 0xFF] ^ t2[low >> 8]
        table_high = t1[low & 0xFF] ^ table[low >> 8]
        _CRC_TABLES = (table, table_low, table_high)
    return _CRC_TABLES


def crc32c_rows(matrix, lengths, offset=0):
    """CRC32C of bytes offset .. offset + lengths[i] of each row of a [B, W] uint8 matrix (vectorized over rows)."""
    table, table_low, table_high = _crc_tables()
    lengths = np.asarray(lengths, np.int64)
    batch = len(lengths)
    if batch == 0:
        return np.zeros(0, np.uint32)
    order = np.argsort(-lengths, kind="stable")
    sorted_len = lengths[order]
    width = -(-max(int(sorted_len[0]), 1) // 4) * 4
    rows = np.zeros((batch, width), np.uint8)
    available = min(width, matrix.shape[1] - offset)
    rows[:, :available] = matrix[order, offset:offset + available]
    words = np.ascontiguousarray(rows.view("<u4").T)
    num_words = sorted_len // 4
    crc = np.full(batch, 0xFFFFFFFF, np.uint32)
    active_counts = np.searchsorted(-num_words, -np.arange(int(num_words[0])), side="left")
    for w, active in enumerate(active_counts.tolist()):
        if active == batch:
            c = crc ^ words[w]
            crc = table_low[c & 0xFFFF] ^ table_high[c >> 16]
        else:
            c = crc[:active] ^ words[w, :active]
            crc[:active] = table_low[c & 0xFFFF] ^ table_high[c >> 16]
    tail_start = num_words * 4
    for t in range(3):
        tail_rows = np.nonzero(sorted_len - tail_start > t)[0]
        if tail_rows.size == 0:
            break
        byte = rows[tail_rows, tail_start[tail_rows] + t].astype(np.uint32)
        c = crc[tail_rows]
        crc[tail_rows] = table[(c ^ byte) & 0xFF] ^ (c >> 8)
    crc ^= np.uint32(0xFFFFFFFF)
    out = np.empty(batch, np.uint32)
    out[order] = crc
    return out


def _masked_crc(crc):
    crc = crc.astype(np.uint64)
    return (((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF).astype(np.uint32)


def frame_records(matrix, lengths):
    """TFRecord framing, in place: length (uint64) and its masked CRC32C go in the DATA_OFFSET bytes before
    each record, the masked CRC32C of the data right after it. Returns (matrix, framed lengths)."""
    lengths = np.asarray(lengths, np.int64)
    batch = len(lengths)
    length_bytes = lengths.astype("<u8").view(np.uint8).reshape(batch, 8)
    matrix[:, :8] = length_bytes
    matrix[:, 8:12] = _masked_crc(crc32c_rows(length_bytes, np.full(batch, 8))).astype("<u4").view(
        np.uint8).reshape(batch, 4)
    data_crc = _masked_crc(crc32c_rows(matrix, lengths, DATA_OFFSET))
    at = DATA_OFFSET + lengths[:, None] + np.arange(4)[None, :]
    np.put_along_axis(matrix, at, data_crc.astype("<u4").view(np.uint8).reshape(batch, 4), axis=1)
    return matrix, lengths + DATA_OFFSET + 4


def record_bytes(framed, lengths, rows=None):
    """The framed records (all, or the given rows in order) as one bytes object."""
    if rows is not None:
        framed = framed[rows]
        lengths = lengths[rows]
    keep = np.arange(framed.shape[1])[None, :] < lengths[:, None]
    return framed[keep].tobytes()


class RecordWriters:
    """Output files, opened up front; records go round-robin over them, as in the original."""

    def __init__(self, paths):
        if not paths:
            raise cli.UserError("--output_file is required: comma-separated TFRecord paths")
        self.paths = list(paths)
        self.counts = [0] * len(self.paths)
        self._files = []
        self._opened = []
        self._next = 0
        for path in self.paths:
            try:
                filesystem.make_parent_dir(path, "--output_file")
                self._files.append(filesystem.open_file(path, "wb"))
                self._opened.append(path)
            except Exception as err:  # OSError locally, tf errors remotely, cli.UserError for a bad folder
                self.abort()
                if isinstance(err, cli.UserError):
                    raise
                raise cli.UserError("--output_file %s cannot be opened for writing: %s" % (path, cli.one_line(err))) \
                    from None

    def write(self, framed, lengths):
        """Writes framed records ([B, W] rows with lengths) in order, round-robin over the files."""
        lengths = np.asarray(lengths, np.int64)
        batch = len(lengths)
        if batch == 0:
            return
        num_files = len(self._files)
        if num_files == 1:
            self._files[0].write(record_bytes(framed, lengths))
            self.counts[0] += batch
            return
        which = (self._next + np.arange(batch)) % num_files
        for f in range(num_files):
            rows = np.nonzero(which == f)[0]
            if rows.size:
                self._files[f].write(record_bytes(framed, lengths, rows))
                self.counts[f] += rows.size
        self._next = (self._next + batch) % num_files

    def close(self):
        for handle in self._files:
            handle.close()
        self._files = []

    def abort(self):
        """Closes and deletes the files written so far (after an error), so no partial output is left."""
        for handle in self._files:
            try:
                handle.close()
            except Exception:  # pylint: disable=broad-except
                pass
        self._files = []
        for path in self._opened:
            try:
                if filesystem.remove_file(path):
                    logging.info("removed incomplete output %s", path)
            except Exception:  # pylint: disable=broad-except
                logging.warning("could not remove incomplete output %s", path)


class RecordFile:
    """One TFRecord file of records of a format, written record by record (write: {name: value or list} in the
    format's order) or by columns (write_arrays: {name: array [rows, ...]}); the bytes are those of
    tf.io.TFRecordWriter with TensorFlow's deterministic serialization. Rows are serialized BLOCK at a time."""

    BLOCK = 4096

    def __init__(self, path, record_format):
        self.path = path
        self.record_format = record_format
        self.count = 0
        self._rows = []
        self._file = filesystem.open_file(path, "wb")

    def write(self, features):
        check(self.record_format, features, self.path)
        self._rows.append(features)
        self.count += 1
        if len(self._rows) >= self.BLOCK:
            self._write_block({name: np.stack([np.ravel(row[name]) for row in self._rows])
                               for name in self.record_format})
            self._rows = []

    def write_arrays(self, arrays):
        check(self.record_format, arrays, self.path)
        rows = len(next(iter(arrays.values())))
        for start in range(0, rows, self.BLOCK):
            self._write_block({name: np.asarray(values[start:start + self.BLOCK]) for name, values in arrays.items()})
        self.count += rows

    def _write_block(self, columns):
        framed, lengths = frame_records(*serialize(columns, self.record_format, by_name=True))
        self._file.write(record_bytes(framed, lengths))

    def close(self):
        if self._rows:
            self._write_block({name: np.stack([np.ravel(row[name]) for row in self._rows])
                               for name in self.record_format})
            self._rows = []
        self._file.close()
        logging.info("Wrote %d records to %s", self.count, self.path)


def write_file(path, arrays, record_format):
    """Writes one record of record_format per row of `arrays` ({name: array [rows, ...]}, the format's order);
    returns the number of records."""
    writer = RecordFile(path, record_format)
    if arrays:
        writer.write_arrays(arrays)
    writer.close()
    return writer.count


# ---------------------------------------------------------------------------------------------------------
# Reading and checking (TensorFlow).


def decode(record, record_format):
    """Parses one serialized tf.train.Example of a record format; int64 -> int32."""
    import tensorflow as tf
    parsed = tf.io.parse_single_example(
        record, {name: tf.io.FixedLenFeature([length] if length else [], tf.float32 if kind == FLOAT else tf.int64)
                 for name, (length, kind) in record_format.items()})
    return {name: tf.cast(value, tf.int32) if value.dtype == tf.int64 else value for name, value in parsed.items()}


ORIGINAL_SHUFFLE_BUFFER = 100  # training records the original's input functions shuffle among


@dataclasses.dataclass(frozen=True)
class Shuffle:
    """How training draws the records of a file: from a buffer of `buffer` records over the repeated file (the
    original's 100), or with buffer 0 a new permutation of all `num_records` records every pass; `seed` None
    draws differently every run."""
    buffer: int = ORIGINAL_SHUFFLE_BUFFER
    seed: int = None
    num_records: int = None


def input_fn(path, record_format, is_training, drop_remainder, shuffle=Shuffle()):
    """An input function for training.py over a feature TFRecord file: records sharded across input
    pipelines, decoded, batched; when training, repeated and shuffled as `shuffle` (a Shuffle) says."""
    import tensorflow as tf
    if is_training and shuffle.buffer == 0 and not shuffle.num_records:
        raise ValueError("a full shuffle (Shuffle.buffer 0) needs num_records")

    def make(batch_size, input_context=None):
        d = tf.data.TFRecordDataset(path)
        if input_context is not None and input_context.num_input_pipelines > 1:
            d = d.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        if is_training and shuffle.buffer == 0:
            d = d.shuffle(shuffle.num_records, seed=shuffle.seed, reshuffle_each_iteration=True).repeat()
        elif is_training:
            d = d.repeat().shuffle(buffer_size=shuffle.buffer, seed=shuffle.seed)
        d = d.map(lambda record: decode(record, record_format), num_parallel_calls=tf.data.AUTOTUNE)
        return d.batch(batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)

    return make


def check_first_record(path, record_format, flag_of_feature=None):
    """Checks the first record of `path` against the format (a cli.UserError naming the file, the feature and,
    from flag_of_feature {name: flag or None}, the flag that sets its length); returns whether the file holds a
    record."""
    import tensorflow as tf
    try:
        first = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
    except tf.errors.OpError as e:
        raise cli.UserError(f"{path}: cannot read TFRecords ({tf_error_message(e)})") from None
    if first is None:
        logging.warning("%s holds no records", path)
        return False
    feats = tf.train.Example.FromString(first.numpy()).features.feature
    for name, (length, value_kind) in record_format.items():
        if name not in feats:
            raise cli.UserError(f"{path}: record has no feature {name!r} (expected {length} x {value_kind}); "
                                f"is it a pre-training file written by create_pretraining_data.py?")
        feat = feats[name]
        kind = feat.WhichOneof("kind")
        values = feat.float_list.value if kind == "float_list" else feat.int64_list.value
        want_kind = "float_list" if value_kind == FLOAT else "int64_list"
        if kind != want_kind:
            raise cli.UserError(f"{path}: feature {name!r} is {kind}, expected {want_kind}")
        if len(values) != (length or 1):
            flag = (flag_of_feature or {}).get(name)
            hint = f" (does {flag}={length} match the data generation?)" if flag else ""
            raise cli.UserError(f"{path}: feature {name!r} has {len(values)} values, expected {length}{hint}")
    return True


def tf_error_message(err):
    """A TensorFlow error's message without the op and function names TensorFlow wraps it in."""
    message = getattr(err, "message", str(err))
    message = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", message)
    message = re.sub(r"\s*\[Op:[^\]]*\].*$", "", message, flags=re.S)
    message = re.sub(r"\b(truncated|corrupted) record at (\d+)'?( failed with)?", r"\1 record at byte \2:", message)
    return " ".join(message.split()).rstrip(":")


def find_corrupt_record(files):
    """(file, number of records read before the damage, TensorFlow's message) of the first damaged TFRecord
    file, or None."""
    import tensorflow as tf
    for path in files:
        count = 0
        try:
            for _ in tf.data.TFRecordDataset(path):
                count += 1
        except tf.errors.DataLossError as err:
            return path, count, tf_error_message(err)
    return None


def naming_corrupt_records(files, action):
    """Runs action(); a DataLossError of the TFRecord input becomes a cli.UserError naming the file and
    record (training stops there; its checkpoints so far are kept)."""
    import tensorflow as tf
    try:
        return action()
    except tf.errors.DataLossError:
        damaged = find_corrupt_record(files)
        if damaged is None:
            raise
        path, count, message = damaged
        raise cli.UserError(f"{path}: corrupt or truncated TFRecord data after record {count} ({message}); "
                            f"stopped, checkpoints written so far are kept: repair or remove the file and run "
                            f"again to resume") from None
