"""packing.py: the task inputs as TensorFlow ops against the original's procedures (tests/original_algorithms.py):
a pair's layout and truncation, the sliding windows' max-context rule in Python and as ops."""
import random

import numpy as np
import pytest
import tensorflow as tf

import packing
import run_classifier as rc
import tokenization
from tests.original_algorithms import original_is_max_context, original_packing
from tests.shared_data import glue, vocab


@pytest.fixture(scope="module")
def tokenizer():
    return tokenization.FullTokenizer(vocab(), do_lower_case=True)


def test_windows_max_context_is_the_original_rule_for_every_window_layout():
    """Windows.has_max_context (a token's best window among two full candidates and the last one, in memory
    constant per token) against the original's rule over every window (packing.max_context_span), for rows of
    every length and windows of every size and stride up to a few, and random larger ones."""
    rng = random.Random(5)
    layouts = [(n, size, stride) for n in range(0, 24) for size in range(1, 8) for stride in range(1, 9)]
    layouts += [(rng.randint(0, 400), rng.randint(1, 60), rng.randint(1, 80)) for _ in range(40)]
    for stride in sorted({layout[2] for layout in layouts}):
        rows = [layout for layout in layouts if layout[2] == stride]
        windows = packing.Windows(tf.constant([n for n, _, _ in rows], tf.int64),
                                   tf.constant([size for _, size, _ in rows], tf.int64), stride)
        slots = max(size for _, size, _ in rows) + 2
        positions = windows.start[:, None] + tf.range(-1, slots - 1, dtype=tf.int64)[None, :]
        got = windows.has_max_context(positions).numpy()
        row, index = windows.row.numpy(), windows.index.numpy()
        spans = {}
        for r, start, length in zip(row, windows.start.numpy(), windows.length.numpy()):
            spans.setdefault(r, []).append((start, length))
        for w in range(len(row)):
            expected = [packing.max_context_span(spans[row[w]], p) == index[w] for p in positions[w].numpy()]
            assert got[w].tolist() == expected, (rows[row[w]], index[w])


def test_features_pack_as_the_original(tokenizer):
    """Feature conversion (tokenizer + packing.pack_pair) lays out every MRPC dev pair, and edge cases, as the
    original's procedure does, at lengths that truncate most pairs and at 128."""
    examples = rc.MrpcProcessor().get_dev_examples(glue("MRPC"))
    examples += [rc.InputExample("e-1", "short", "", "0"), rc.InputExample("e-2", "a b c", " ", "1"),
                 rc.InputExample("e-3", "x " * 40, "y " * 3, "0"), rc.InputExample("e-4", "x", "y " * 50, "0")]
    for max_seq_length in (24, 25, 128):
        arrays = rc.examples_to_arrays(examples, ["0", "1"], max_seq_length, tokenizer)
        for i, example in enumerate(examples):
            tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
            tokens, segments = original_packing(tokenizer.tokenize(example.text_a), tokens_b, max_seq_length)
            ids = tokenizer.convert_tokens_to_ids(tokens)
            assert arrays["input_ids"][i].tolist() == ids + [0] * (max_seq_length - len(ids))
            assert arrays["input_mask"][i].tolist() == [1] * len(ids) + [0] * (max_seq_length - len(ids))
            assert arrays["segment_ids"][i].tolist() == segments
    rng = np.random.default_rng(1)
    lengths = rng.integers(0, 12, size=(400, 2))
    a_rows = [list(range(1, 1 + la)) for la, _ in lengths]
    b_rows = [list(range(200, 200 + lb)) for _, lb in lengths]
    for max_seq_length in (3, 4, 9, 10):
        got = packing.pack_pair(packing.ragged_ids(a_rows), packing.ragged_ids(b_rows), max_seq_length, 101,
                                102)[0].numpy()
        for row, a, b in zip(got, a_rows, b_rows):
            tokens, _ = original_packing(a, b, max_seq_length)
            want = [101 if t == "[CLS]" else 102 if t == "[SEP]" else t for t in tokens]
            assert row.tolist() == want + [0] * (max_seq_length - len(want))
    single = packing.pack_pair(packing.ragged_ids(a_rows[:5]), None, 6, 101, 102)[2].numpy()
    assert (single == 0).all()


def test_max_context_rule_in_python_and_as_tensorflow_ops_agree():
    rng = random.Random(3)
    for _ in range(30):
        spans = [(rng.randrange(0, 20), rng.randrange(0, 9)) for _ in range(rng.randrange(1, 6))]
        positions = list(range(-1, 30))
        windows = packing.max_context_window(tf.constant([[s for s, _ in spans]] * len(positions), tf.int64),
                                             tf.constant([[n for _, n in spans]] * len(positions), tf.int64),
                                             tf.constant(positions)).numpy().tolist()
        for position, window in zip(positions, windows):
            best = packing.max_context_span(spans, position)
            assert (window if window < len(spans) else None) == best, (spans, position)
            assert all((best == i) == original_is_max_context(spans, i, position) for i in range(len(spans)))
