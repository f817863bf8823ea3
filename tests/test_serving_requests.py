"""Served models that no request knocks over (serving.py), on the exports of every task made by the runners'
command lines: the model over at most --export_rows_per_step rows of a call at a time, in bounded memory; every
malformed request refused in one InvalidArgumentError naming its input; generated requests in a child process
(tests/serving_probe.py). That a call in steps answers as before: the export tests of each runner send more rows
(SQuAD: windows) than a step holds and compare with the runner's predictions (test_classifier_export.py,
test_ner.py, test_squad.py)."""
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import modeling
import packing
from tests.shared_data import shared_path
from tests.test_faults import assert_user_error, run_script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "tests", "serving_probe.py")


def test_windows_max_context_is_the_original_rule_for_every_window_layout():
    """_Windows.has_max_context (a token's best window among two full candidates and the last one, in memory
    constant per token) against the original's rule over every window (packing.max_context_span), for rows of
    every length and windows of every size and stride up to a few, and random larger ones."""
    rng = random.Random(5)
    layouts = [(n, size, stride) for n in range(0, 24) for size in range(1, 8) for stride in range(1, 9)]
    layouts += [(rng.randint(0, 400), rng.randint(1, 60), rng.randint(1, 80)) for _ in range(40)]
    for stride in sorted({layout[2] for layout in layouts}):
        rows = [layout for layout in layouts if layout[2] == stride]
        windows = packing._Windows(tf.constant([n for n, _, _ in rows], tf.int64),
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


# ---------------------------------------------------------------------------------------------------------
# The runners' exports, against generated requests in a child process.


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """A tiny random checkpoint exported by run_classifier.py (MRPC, float32), run_ner.py (bfloat16) and
    run_squad.py (XLA), each with --export_rows_per_step=3 and --do_train=false."""
    work = tmp_path_factory.mktemp("exports")
    config = modeling.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64, max_position_embeddings=512, type_vocab_size=2)
    config.to_json_file(str(work / "bert_config.json"))
    tf.keras.utils.set_random_seed(1)
    bert = modeling.BertEncoder(config)
    bert(tf.ones([1, 4], tf.int32), tf.ones([1, 4], tf.int32), tf.zeros([1, 4], tf.int32))
    checkpoints.CheckpointManager(str(work / "ckpt")).save(bert.variables_by_name(), 0)
    common = [f"--vocab_file={shared_path('vocab', 'uncased', 'vocab.txt')}",
              f"--bert_config_file={work / 'bert_config.json'}", f"--init_checkpoint={work / 'ckpt' / 'model.ckpt-0'}",
              "--do_train=false", "--export_rows_per_step=3"]
    jobs = {"classifier": ("run_classifier.py", "--task_name=MRPC", f"--data_dir={shared_path('data', 'glue', 'MRPC')}",
                           "--max_seq_length=64"),
            "ner": ("run_ner.py", f"--data_dir={shared_path('data', 'conll2003')}", "--max_seq_length=32",
                    "--export_dtype=bfloat16"),
            "squad": ("run_squad.py", "--max_seq_length=64", "--doc_stride=16", "--max_query_length=12",
                      "--version_2_with_negative", "--use_xla=true")}
    out = {}
    for name, (script, *flags) in jobs.items():
        export_dir = work / name
        proc = run_script(script, *common, *flags, f"--output_dir={work / (name + '_run')}",
                          f"--export_dir={export_dir}")
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "the model over at most 3 rows at a time" in proc.stderr
        out[name] = str(export_dir)
    return out


def _probe(export_dir, seed, count):
    proc = subprocess.run([sys.executable, "-I", PROBE, export_dir, f"--seed={seed}", f"--count={count}",
                           "--max_rows=9"], capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-3000:]  # no crash, no hang
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return lines[:-1], lines[-1]


@pytest.mark.slow
def test_generated_requests_are_answered_or_refused_by_every_export(exports):
    """tests/serving_probe.py in a fresh process per export (the project not importable there): valid, odd
    (empty, control characters, invalid UTF-8, long texts, no rows) and malformed requests (unequal rows, rows of
    no or too many positions, ids, masks and segments out of range, unequal shapes) against both signatures of
    each task's export: each answered with its own rows and finite, normalised probabilities, or refused by an
    InvalidArgumentError naming an input; nothing else."""
    for seed, (name, export_dir) in enumerate(sorted(exports.items())):
        records, summary = _probe(export_dir, seed, 70)
        wrong = [r for r in records if r["outcome"] == "wrong"]
        assert not wrong, (name, wrong[:5])
        print(name, summary)
        for signature in ("serving_default", "serving_text"):
            outcomes = {r["outcome"] for r in records if r["signature"] == signature}
            assert "answered" in outcomes, (name, signature, outcomes)
            if signature == "serving_default" or name != "ner":  # NER's one text input has no pair to mismatch
                assert "refused" in outcomes, (name, signature, outcomes)
        assert any(r["rows"] > 3 and r["outcome"] == "answered" for r in records), name  # calls in steps


MEMORY_CHILD = r"""
import json, re, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401

def status(name):
    with open("/proc/self/status") as f:
        return int(re.search(name + r":\s+(\d+) kB", f.read()).group(1)) / 1024

export_dir, pairs = sys.argv[1], int(sys.argv[2])
serve = tf.saved_model.load(export_dir).signatures["serving_text"]
text = " ".join(["the quick brown fox jumps over the lazy dog"] * 12)
serve(text_a=tf.constant([text]), text_b=tf.constant([text]))
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
out = serve(text_a=tf.constant([text] * pairs), text_b=tf.constant([text] * pairs))
print(json.dumps({"rows": int(out["label"].shape[0]), "growth_mb": status("VmHWM") - before}))
"""


@pytest.mark.slow
def test_a_big_request_runs_in_bounded_memory(exports):
    """4,000 max-length pairs to the classifier's serving_text, in a fresh process: answered whole, the peak
    memory growing by far less than the model's activations over 4,000 rows at once would take."""
    proc = subprocess.run([sys.executable, "-c", MEMORY_CHILD, exports["classifier"], "4000"], capture_output=True,
                          text=True, timeout=900, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["rows"] == 4000
    assert result["growth_mb"] < 150, result


REFUSALS_CHILD = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401

exports = json.loads(sys.argv[1])
out = {}

def ask(key, function, **inputs):
    try:
        answer = function(**inputs)
        out[key] = {name: list(value.shape) for name, value in answer.items()}
    except tf.errors.InvalidArgumentError as err:
        out[key] = err.message

for name, path in exports.items():
    loaded = tf.saved_model.load(path)
    ids, text = loaded.signatures["serving_default"], loaded.signatures["serving_text"]
    out[name + "/rows_per_step"] = int(loaded.rows_per_step.numpy())
    ones = tf.ones([2, 5], tf.int32)
    for case, inputs in {"no_position": [tf.zeros([2, 0], tf.int32)] * 3, "too_wide": [tf.ones([1, 513], tf.int32)] * 3,
                         "mask_2": [ones, ones * 2, ones * 0], "mask_negative": [ones, -ones, ones * 0],
                         "shapes": [ones, tf.ones([3, 5], tf.int32), ones]}.items():
        ask(f"{name}/{case}", ids, **dict(zip(("input_ids", "input_mask", "segment_ids"), inputs)))
    for width in (0, 3, 600):
        empty = tf.zeros([0, width], tf.int32)
        ask(f"{name}/empty_{width}", ids, input_ids=empty, input_mask=empty, segment_ids=empty)
    names = [spec.name for spec in text.structured_input_signature[1].values()]
    one, two = tf.constant(["the dog ran"]), tf.constant(["the dog ran", "a cat"])
    if len(names) == 2:
        first, second = sorted(text.structured_input_signature[1])
        for case, (a, b) in {"1_and_2": (one, two), "2_and_1": (two, one), "2_and_0": (two, two[:0])}.items():
            ask(f"{name}/text_{case}", text, **{first: a, second: b})
        ask(f"{name}/text_empty", text, **{first: two[:0], second: two[:0]})
    else:
        ask(f"{name}/text_empty", text, sentence=two[:0])
        ask(f"{name}/text_ragged", text, sentence=tf.constant([" ".join(["dog"] * 5000)] + [""] * 1000))
print(json.dumps(out))
"""


@pytest.mark.slow
def test_malformed_requests_are_refused_naming_the_input(exports, tmp_path):
    """In a fresh process, each export: one InvalidArgumentError naming the input and the rule for rows of no
    position or of more than max_position_embeddings, an input_mask other than 0 and 1, unequal shapes, unequal
    rows of serving_text's two inputs (never broadcast), NER sentences whose dense answer would exceed
    serving.MAX_NER_TAGS; an empty batch of any width answered with no rows. --export_rows_per_step is recorded
    (loaded.rows_per_step), and a negative one is one error line before anything is written."""
    proc = subprocess.run([sys.executable, "-c", REFUSALS_CHILD, json.dumps(exports)], capture_output=True, text=True,
                          timeout=900, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in exports:
        assert out[f"{name}/rows_per_step"] == 3
        for case, message in (("no_position", "input_ids must have at least 1 position per row"),
                              ("too_wide", "input_ids must have at most max_position_embeddings 512 positions"),
                              ("mask_2", "input_mask must be 0 (padding) or 1 (a token)"),
                              ("mask_negative", "input_mask must be 0 (padding) or 1 (a token)"),
                              ("shapes", "input_mask must have the shape of input_ids")):
            assert message in out[f"{name}/{case}"], (name, case, out[f"{name}/{case}"])
        for width in (0, 3, 600):
            assert all(shape[0] == 0 for shape in out[f"{name}/empty_{width}"].values()), (name, width)
        assert all(shape[0] == 0 for shape in out[f"{name}/text_empty"].values()), (name, out[f"{name}/text_empty"])
    for name, first, second in (("classifier", "text_a", "text_b"), ("squad", "question", "context")):
        for case in ("1_and_2", "2_and_1", "2_and_0"):
            assert f"{second} must have as many rows as {first}" in out[f"{name}/text_{case}"], (name, case)
    assert "sentence: the answer has a row per sentence" in out["ner/text_ragged"]
    assert_user_error(run_script("run_classifier.py", "--task_name=MRPC", f"--data_dir={tmp_path}",
                                 f"--vocab_file={shared_path('vocab', 'uncased', 'vocab.txt')}",
                                 f"--bert_config_file={os.path.join(os.path.dirname(exports['squad']), 'bert_config.json')}",
                                 f"--output_dir={tmp_path / 'out'}", f"--export_dir={tmp_path / 'export'}",
                                 "--export_rows_per_step=-1"),
                      "--export_rows_per_step=-1: expected a number of rows (0: whole calls)")
    assert not (tmp_path / "out").exists()
