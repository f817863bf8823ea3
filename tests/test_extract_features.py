"""extract_features.py: input reading, features, rounding, and the MiniLM-L6 reference outputs."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import extract_features as ef
import tokenization
from tests.shared_data import shared_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The reference's six MRPC training pairs are train.tsv data rows 100..105; the third and sixth single-segment.
MRPC_ROWS = range(100, 106)
SINGLE = (2, 5)
SEQ = 64


def mrpc_lines():
    path = shared_path("data", "glue", "MRPC", "train.tsv")
    with open(path, encoding="utf-8-sig") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    lines = []
    for i, row in enumerate(rows[MRPC_ROWS.start:MRPC_ROWS.stop]):
        lines.append(row[3] if i in SINGLE else row[3] + " ||| " + row[4])
    return lines


@pytest.fixture(scope="module")
def reference():
    return dict(np.load(shared_path("reference", "minilm", "minilm_hf_gelu_exact.npz")))


@pytest.fixture(scope="module")
def uncased_tokenizer():
    return tokenization.FullTokenizer(shared_path("vocab", "uncased", "vocab.txt"), do_lower_case=True)


def test_read_examples_pairs_and_singles(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("Hello world.\na ||| b\n  x ||| y ||| z  \n\nno|||split\n", encoding="utf-8")
    examples = ef.read_examples(str(path))
    got = [(e.unique_id, e.text_a, e.text_b) for e in examples]
    assert got == [(0, "Hello world.", None), (1, "a", "b"), (2, "x ||| y", "z"), (3, "", None),
                   (4, "no|||split", None)]


def test_features_equal_reference_ids(tmp_path, reference, uncased_tokenizer):
    path = tmp_path / "in.txt"
    path.write_text("\n".join(mrpc_lines()) + "\n", encoding="utf-8")
    features = ef.convert_examples_to_features(ef.read_examples(str(path)), SEQ, uncased_tokenizer)
    assert len(features) == 6
    for i in range(1, 6):
        assert features[i].input_ids == reference["input_ids"][i].tolist(), i
        assert features[i].input_mask == reference["input_mask"][i].tolist(), i
        assert features[i].input_type_ids == reference["segment_ids"][i].tolist(), i
        assert len(features[i].tokens) == int(reference["input_mask"][i].sum())
    # The first pair is longer than 64 tokens: the reference clips [CLS] a [SEP] b [SEP] at 64 positions,
    # the original extract_features pops tokens from the longer segment and keeps the final [SEP].
    f0, ids0 = features[0], reference["input_ids"][0].tolist()
    ref_sep = ids0.index(102)
    sep = f0.tokens.index("[SEP]")
    assert f0.tokens[-1] == "[SEP]" and len(f0.tokens) == SEQ and ids0[-1] != 102
    assert f0.input_ids[:sep] == ids0[:sep] and sep < ref_sep
    n_b = SEQ - 2 - sep
    n_common = min(n_b, SEQ - 1 - ref_sep)
    assert f0.input_ids[sep + 1:sep + 1 + n_common] == ids0[ref_sep + 1:ref_sep + 1 + n_common]
    assert f0.input_type_ids == [0] * (sep + 1) + [1] * (n_b + 1)


def test_truncation_pops_longer_segment(uncased_tokenizer):
    examples = [ef.InputExample(0, "one two three four five six", "seven eight"),
                ef.InputExample(1, "one two three four five six seven eight nine", None)]
    f = ef.convert_examples_to_features(examples, 8, uncased_tokenizer)
    assert f[0].tokens == ["[CLS]", "one", "two", "three", "[SEP]", "seven", "eight", "[SEP]"]
    assert f[0].input_type_ids == [0, 0, 0, 0, 0, 1, 1, 1]
    assert f[1].tokens == ["[CLS]", "one", "two", "three", "four", "five", "six", "[SEP]"]
    with pytest.raises(ValueError, match="max_seq_length"):
        ef.convert_examples_to_features(examples, 2, uncased_tokenizer)


def test_rounding_equals_python_round():
    rng = np.random.default_rng(0)
    values = np.concatenate([
        rng.standard_normal(200000).astype(np.float32) * np.float32(3),
        rng.standard_normal(20000).astype(np.float32) * np.float32(1e-5),
        # exact ties at the 6th decimal (x * 1e6 = k + 0.5): rounded half to even by Python
        np.array([0.0078125, -0.0078125, 0.0234375, 2.0 ** -7 * 3, 1.5e-6, 2.5e-6, 0.0, -0.0, 1e-7,
                  123456.78125, -7.0000005], dtype=np.float32),
    ])
    expected = [round(float(x), 6) for x in values]
    got = ef.round_like_original(values)
    assert got == expected
    assert json.dumps(got) == json.dumps(expected)
    assert ef.round_like_original(np.array([0.0078125], np.float32)) == [0.007812]
    as_f64 = np.array([0.1234565, 2.0000005], np.float64)
    assert ef.round_like_original(as_f64) == [round(float(x), 6) for x in as_f64]


def test_parse_layers():
    assert ef.parse_layers("-1,-2,-3,-4", 6) == [-1, -2, -3, -4]
    assert ef.parse_layers("0,5", 6) == [0, 5]
    with pytest.raises(ValueError, match="--layers: index 6"):
        ef.parse_layers("6", 6)
    with pytest.raises(ValueError, match="--layers: index -7"):
        ef.parse_layers("-7", 6)
    with pytest.raises(ValueError, match="comma-separated integers"):
        ef.parse_layers("-1;-2", 6)
