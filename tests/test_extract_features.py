"""extract_features.py: input reading, features, rounding, and the MiniLM-L6 reference outputs."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import cli
import conversions
import extract_features as ef
import runner
import tokenization
import training
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


# ---------------------------------------------------------------------------------------------------------
# Real weights: MiniLM-L6 (HF safetensors) converted to an original-format checkpoint by conversions.py.
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    from tests.shared_data import minilm_dir
    hf_dir = minilm_dir()
    out = str(tmp_path_factory.mktemp("minilm"))
    prefix = conversions.hf_to_original(hf_dir, out)
    config_file = os.path.join(out, "bert_config.json")
    with open(config_file, encoding="utf-8") as f:
        assert json.load(f)["hidden_act"] == "gelu_exact"
    return {"init_checkpoint": prefix, "bert_config_file": config_file,
            "vocab_file": os.path.join(out, "vocab.txt")}


def _reference_features(reference):
    features = []
    for i in range(len(reference["input_ids"])):
        n = int(reference["input_mask"][i].sum())
        features.append(ef.InputFeatures(unique_id=i, tokens=["t"] * n,
                                         input_ids=reference["input_ids"][i].tolist(),
                                         input_mask=reference["input_mask"][i].tolist(),
                                         input_type_ids=reference["segment_ids"][i].tolist()))
    return features


def test_minilm_layers_and_sentence_vectors_equal_reference(minilm, reference):
    import encoder
    config = encoder.BertConfig.from_json_file(minilm["bert_config_file"])
    features = _reference_features(reference)
    masks = reference["input_mask"].astype(bool)
    for sentence_vector in ("pooled", "mean"):
        task = ef.ExtractFeaturesTask(config, [-1, -4, 0], sentence_vector)
        outputs = runner.predict_arrays(task, ef.feature_arrays(features),
                                        training.TrainingConfig(predict_batch_size=4),
                                        checkpoint_path=minilm["init_checkpoint"])
        assert outputs["unique_id"].tolist() == list(range(6))
        for i, feature in enumerate(features):
            result = {name: value[i] for name, value in outputs.items()}
            m = masks[i]
            last = result["layer_output_0"][m]
            np.testing.assert_allclose(last, reference["sequence_output"][i][m], atol=1e-4, rtol=0)
            if i < 3:  # all_encoder_layers is stored for the first three examples
                np.testing.assert_allclose(result["layer_output_1"][m], reference["all_encoder_layers"][2, i][m],
                                           atol=1e-4, rtol=0)
                np.testing.assert_allclose(result["layer_output_2"][m], reference["all_encoder_layers"][0, i][m],
                                           atol=1e-4, rtol=0)
            if sentence_vector == "pooled":
                expected = reference["pooled_output"][i]
            else:
                expected = reference["sequence_output"][i][m].astype(np.float64).mean(axis=0)
            np.testing.assert_allclose(result["sentence_vector"], expected, atol=1e-4, rtol=0)
            line = json.loads(ef.feature_json(feature, result, [-1, -4, 0]))
            assert list(line) == ["linex_index", "features", "sentence_vector"]
            assert line["sentence_vector"] == [round(float(x), 6) for x in result["sentence_vector"]]
            assert [layer["index"] for layer in line["features"][0]["layers"]] == [-1, -4, 0]


@pytest.mark.slow
def test_cli_on_mrpc_pairs_matches_reference(reference, tmp_path):
    """The real-run commands: convert_checkpoint.py (HF -> original), then extract_features.py."""
    from tests.shared_data import minilm_dir
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    ckpt_dir = tmp_path / "minilm"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "convert_checkpoint.py"), "--mode=hf_to_original",
                           f"--hf_dir={minilm_dir()}", f"--output_dir={ckpt_dir}"],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    minilm = {"vocab_file": str(ckpt_dir / "vocab.txt"), "bert_config_file": str(ckpt_dir / "bert_config.json"),
              "init_checkpoint": str(ckpt_dir / "bert_model.ckpt")}
    input_file = tmp_path / "input.txt"
    input_file.write_text("\n".join(mrpc_lines()) + "\n", encoding="utf-8")
    output_file = tmp_path / "output.jsonl"
    cmd = [sys.executable, os.path.join(ROOT, "extract_features.py"), f"--input_file={input_file}",
           f"--output_file={output_file}", f"--vocab_file={minilm['vocab_file']}",
           f"--bert_config_file={minilm['bert_config_file']}", f"--init_checkpoint={minilm['init_checkpoint']}",
           "--layers=-1,-2", "--max_seq_length=64", "--batch_size=4", "--do_lower_case=True"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = output_file.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 6
    tokenizer = tokenization.FullTokenizer(minilm["vocab_file"], do_lower_case=True)
    for i, line in enumerate(lines):
        obj = json.loads(line)
        assert list(obj) == ["linex_index", "features"] and obj["linex_index"] == i
        tokens = [f["token"] for f in obj["features"]]
        assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
        assert [list(f) for f in obj["features"]] == [["token", "layers"]] * len(tokens)
        assert all([layer["index"] for layer in f["layers"]] == [-1, -2] for f in obj["features"])
        values = np.array([f["layers"][0]["values"] for f in obj["features"]])
        assert values.shape == (len(tokens), 384)
        # Values are the original's round(float(x), 6): at most 6 decimals.
        assert all(v == round(v, 6) for v in values[0])
        if i == 0:
            continue  # the reference clips this over-long pair differently (see test_features_equal_reference_ids)
        assert tokenizer.convert_tokens_to_ids(tokens) == reference["input_ids"][i][:len(tokens)].tolist()
        expected = np.round(reference["sequence_output"][i][:len(tokens)].astype(np.float64), 6)
        np.testing.assert_allclose(values, expected, atol=1e-4, rtol=0)
        if i < 3:  # layer -2 of six = all_encoder_layers[4], stored for the first three examples
            expected = np.round(reference["all_encoder_layers"][4, i][:len(tokens)].astype(np.float64), 6)
            np.testing.assert_allclose(np.array([f["layers"][1]["values"] for f in obj["features"]]),
                                       expected, atol=1e-4, rtol=0)
    assert "*** Example ***" in proc.stderr


def test_bad_flags_are_clear_errors(minilm, tmp_path):
    input_file = tmp_path / "input.txt"
    input_file.write_text("hello world\n", encoding="utf-8")
    args = dict(input_file=str(input_file), output_file=str(tmp_path / "o.jsonl"),
                bert_config_file=minilm["bert_config_file"], init_checkpoint=minilm["init_checkpoint"],
                vocab_file=minilm["vocab_file"])
    with pytest.raises(ValueError, match="--layers: index 6"):
        ef.run(cli.build_options(ef.ExtractFeaturesOptions, layers="-1,6", **args))
    with pytest.raises(ValueError, match="--max_seq_length=1024: cannot use sequence length 1024 because the BERT "
                                         "model was only trained up to sequence length 512"):
        ef.run(cli.build_options(ef.ExtractFeaturesOptions, max_seq_length=1024, **args))
    with pytest.raises(ValueError, match="--init_checkpoint is required"):
        ef.run(cli.build_options(ef.ExtractFeaturesOptions, **dict(args, init_checkpoint=None)))
    with pytest.raises(FileNotFoundError, match="--input_file=.*missing.txt: no such file"):
        ef.run(cli.build_options(ef.ExtractFeaturesOptions, **dict(args, input_file=str(tmp_path / "missing.txt"))))
    assert not (tmp_path / "o.jsonl").exists()
