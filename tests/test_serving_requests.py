"""Served models that no request knocks over (serving.py): the model over at most --export_rows_per_step rows of a
call at a time, with the answers of a whole call; every malformed request refused in one InvalidArgumentError
naming its input; the exports of every task, made by the runners' command lines, against generated requests in a
child process (tests/serving_probe.py); one big request in bounded memory."""
import json
import os
import random
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import modeling
import packing
import serving
from model_options import ModelOptions
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


def _config():
    return modeling.BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=32, max_position_embeddings=48, type_vocab_size=2)


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    words = "the a of and to in is was for on that with as by it he said new market year dog cat run ##s ##ed"
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words.split() + list(".,!?")
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(tokens + [f"w{i}" for i in range(60 - len(tokens))]) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def modules(vocab_file):
    """Classifier (pair), NER and SQuAD modules over one random model each: (whole calls, in steps of 3 rows)."""
    return _modules(vocab_file, 3)


def _modules(vocab_file, rows_per_step):
    config = _config()
    options = ModelOptions(vocab_file=str(vocab_file), max_seq_length=24)
    out = {}
    for name, build, make in (
            ("classifier", lambda: modeling.ClassifierModel(config, 3),
             lambda m: serving.ClassifierServing(m, options, False, True, ["x", "y", "z"])),
            ("ner", lambda: modeling.ClassifierModel(config, 4, per_token=True),
             lambda m: serving.NerServing(m, options, 8, ["O", "B", "I", "X"])),
            ("squad", lambda: modeling.SquadModel(config),
             lambda m: serving.SquadServing(m, options, serving.SquadAnswering(doc_stride=5, max_query_length=6)))):
        tf.keras.utils.set_random_seed(11)
        model = build()
        whole, stepped = make(model), make(model)
        stepped.run_in_steps(rows_per_step)
        out[name] = (whole, stepped)
    return out


def _text_requests(rng, name, rows):
    words = "the a of and to in is was for on that with as by it he said new market year dog cat runs".split()

    def text(low, high):
        return " ".join(rng.choice(words) for _ in range(rng.randint(low, high)))
    if name == "classifier":
        return [[text(0, 20) for _ in range(rows)], [text(0, 20) for _ in range(rows)]]
    if name == "ner":
        return [[text(0, 40) for _ in range(rows)]]
    return [[text(1, 8) for _ in range(rows)], [text(0, 60) for _ in range(rows)]]


@pytest.mark.slow
def test_a_call_in_steps_answers_as_a_whole_call(modules):
    """run_in_steps(3): calls of 0 to 11 rows (SQuAD: up to dozens of windows) answer serving_default and
    serving_text as a whole call does, to float rounding; no rows: no rows."""
    rng = random.Random(3)
    np_rng = np.random.default_rng(3)
    for name, (whole, stepped) in modules.items():
        for rows in (0, 1, 3, 4, 7, 11):
            width = int(np_rng.integers(1, 40))
            ids = np_rng.integers(0, 60, [rows, width]).astype(np.int32)
            mask = (np.arange(width)[None, :] < np_rng.integers(1, width + 1, [rows, 1])).astype(np.int32)
            inputs = [tf.constant(ids), tf.constant(mask), tf.constant(np.zeros_like(ids))]
            texts = [tf.constant(t, tf.string) for t in _text_requests(rng, name, rows)]
            for call in ("serve_ids", "serve_text"):
                args = inputs if call == "serve_ids" else texts
                expected = getattr(whole, call)(*args) if rows else None
                got = getattr(stepped, call)(*args)
                windows = name == "squad" and call == "serve_text"  # its window outputs: a row per window
                for key, value in got.items():
                    if not windows or key in ("answer", "start", "end", "score", "null_score_diff"):
                        assert value.shape[0] == rows, (name, call, key, value.shape)
                    if expected is not None:
                        want = expected[key].numpy()
                        if value.dtype.is_floating:
                            np.testing.assert_allclose(value.numpy(), want, rtol=1e-5, atol=1e-5,
                                                       err_msg=f"{name} {call} {key}")
                        else:
                            np.testing.assert_array_equal(value.numpy(), want, err_msg=f"{name} {call} {key}")


@pytest.mark.slow
def test_malformed_requests_are_refused_naming_the_input(modules):
    """One InvalidArgumentError naming the input and the rule: unequal rows of text inputs (never broadcast), rows
    of no position or more than max_position_embeddings, an input_mask other than 0 and 1, NER sentences whose
    dense answer (rows x the longest sentence's words) would exceed serving.MAX_NER_TAGS; an empty batch of any
    width is answered with no rows."""
    classifier, squad = modules["classifier"][1], modules["squad"][1]
    strings = tf.constant(["the dog", "a cat"])
    for module, names in ((classifier, ("text_a", "text_b")), (squad, ("question", "context"))):
        for first, second in ((strings[:1], strings), (strings, strings[:1]), (strings, strings[:0]),
                              (strings[:0], strings)):
            with pytest.raises(tf.errors.InvalidArgumentError,
                               match=f"{names[1]} must have as many rows as {names[0]}"):
                module.serve_text(first, second)
    ner = modules["ner"][1]
    long_sentence = " ".join(["dog"] * 5000)
    assert ner.serve_text(tf.constant([long_sentence]))["tags"].shape == (1, 5000)
    with pytest.raises(tf.errors.InvalidArgumentError, match="sentence: the answer has a row per sentence"):
        ner.serve_text(tf.constant([long_sentence] + [""] * 1000))  # 1,001 x 5,000 tags
    ones = tf.ones([2, 5], tf.int32)
    bad = [((tf.zeros([2, 0], tf.int32),) * 3, "input_ids must have at least 1 position per row"),
           ((tf.ones([1, 49], tf.int32),) * 3, "input_ids must have at most max_position_embeddings 48"),
           ((ones, ones * 2, ones * 0), "input_mask must be 0 \\(padding\\) or 1 \\(a token\\)"),
           ((ones, -ones, ones * 0), "input_mask must be 0"),
           ((ones, tf.ones([3, 5], tf.int32), ones), "input_mask must have the shape of input_ids")]
    for module in (classifier, modules["ner"][1], squad):
        for inputs, message in bad:
            with pytest.raises(tf.errors.InvalidArgumentError, match=message):
                module.serve_ids(*inputs)
        for width in (0, 3, 100):
            empty = tf.zeros([0, width], tf.int32)
            assert all(value.shape[0] == 0 for value in module.serve_ids(empty, empty, empty).values())


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
