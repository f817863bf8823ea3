"""Exports in half precision (--export_dtype) and compiled with XLA at padded shapes (--use_xla): the same MRPC dev
labels as float32, and a few compiles, no retrace, across 100 requests of varying batch sizes and lengths."""
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
import run_classifier as rc
import serving
from model_options import ModelOptions
from tests.shared_data import shared_path
from tests.test_classifier_export import tiny_config_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs in a fresh process without the project on its path: serves the requests of requests.json through the
# SavedModels it names; writes every output and, with XLA_FLAGS=--xla_dump_to, XLA leaves one module per compile.
SERVE_SCRIPT = r"""
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # the tokenizer's ops
work = sys.argv[1]
requests = json.load(open(work + "/requests.json", encoding="utf-8"))
out = {}
for name, texts in requests["texts"].items():
    loaded = tf.saved_model.load(work + "/" + name)
    text, ids = loaded.signatures["serving_text"], loaded.signatures["serving_default"]
    for i, (a, b) in enumerate(texts):
        got = text(text_a=tf.constant(a), text_b=tf.constant(b))
        out[f"{name}/text/{i}"] = got["probabilities"].numpy()
        out[f"{name}/label/{i}"] = np.array([label.decode() for label in got["label"].numpy()])
    for i, (rows, width) in enumerate(requests["ids"]):
        values = np.arange(rows * width, dtype=np.int32).reshape(rows, width) % 1000 + 1000
        got = ids(input_ids=tf.constant(values), input_mask=tf.ones([rows, width], tf.int32),
                  segment_ids=tf.zeros([rows, width], tf.int32))
        out[f"{name}/ids/{i}"] = got["probabilities"].numpy()
np.savez(work + "/served.npz", **out)
"""


def _checkpoint(output_dir, config_file):
    bert_config = tiny_config_file(config_file)
    tf.keras.utils.set_random_seed(7)
    model = rc.ClassifierTask(bert_config, 2).build_model()
    model.head.output_bias.assign([0.3, -0.2])
    model.head.output_weights.assign(model.head.output_weights * 20.0)  # probabilities far apart
    checkpoints.CheckpointManager(str(output_dir)).save(model.variables_by_name(), 0)
    return bert_config


def _export(tmp_path, name, *flags):
    """run_classifier.py --export_dir=tmp_path/name from the checkpoint in tmp_path/output (no training)."""
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "run_classifier.py"), "--task_name=MRPC", "--max_seq_length=64",
         "--vocab_file=" + shared_path("vocab", "uncased", "vocab.txt"),
         "--bert_config_file=" + str(tmp_path / "bert_config.json"), "--output_dir=" + str(tmp_path / "output"),
         "--export_dir=" + str(tmp_path / name), *flags],
        capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr


def _serve(tmp_path, texts, ids, **env):
    """SERVE_SCRIPT on the exports named by `texts` ({export: [(text_a list, text_b list), ...]}), each also
    given the token ids of `ids` ([(rows, width)])."""
    (tmp_path / "requests.json").write_text(json.dumps({"texts": texts, "ids": ids}), encoding="utf-8")
    script = tmp_path / "serve.py"
    script.write_text(SERVE_SCRIPT)
    env = dict({k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, TF_CPP_MIN_LOG_LEVEL="2", **env)
    proc = subprocess.run([sys.executable, "-I", str(script), str(tmp_path)], capture_output=True,
                          text=True, timeout=600, cwd=str(tmp_path), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(np.load(str(tmp_path / "served.npz")))


def _mrpc_dev():
    examples = rc.MrpcProcessor().get_dev_examples(shared_path("data", "glue", "MRPC"))
    return [e.text_a for e in examples], [e.text_b for e in examples]


def test_xla_module_traces_once_for_requests_of_every_batch_size_and_length():
    """In process: the XLA-compiled model function of an export is traced once, whatever the request's shape
    (packing.bucket and XLA_ROWS pad it: XLA compiles each padded shape once), and its outputs are those of the
    model called without XLA."""
    config = modeling.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=64, max_position_embeddings=128, type_vocab_size=2,
                                 initializer_range=0.2)
    model = rc.ClassifierTask(config, 2).build_model()
    options = ModelOptions(vocab_file=shared_path("vocab", "uncased", "vocab.txt"), max_seq_length=64)
    plain = serving.ClassifierServing(model, options, False, True)
    compiled = serving.ClassifierServing(model, options, False, True)
    compiled.compile_with_xla(packing.bucket_widths(64, 128))
    a, b = _mrpc_dev()
    rng = random.Random(3)
    for _ in range(12):
        rows = rng.choice([1, 2, 3, 5, 8])
        start = rng.randrange(len(a) - rows)
        got = compiled.serve_text(tf.constant(a[start:start + rows]), tf.constant(b[start:start + rows]))
        want = plain.serve_text(tf.constant(a[start:start + rows]), tf.constant(b[start:start + rows]))
        np.testing.assert_allclose(got["probabilities"], want["probabilities"], atol=1e-5)
    for width in (5, 64, 100):
        ids = tf.fill([3, width], 1000)
        got = compiled.serve_ids(ids, tf.ones_like(ids), tf.zeros_like(ids))
        np.testing.assert_allclose(got["probabilities"],
                                   plain.serve_ids(ids, tf.ones_like(ids), tf.zeros_like(ids))["probabilities"],
                                   atol=1e-5)
    assert compiled._xla_model.experimental_get_tracing_count() == 1
    assert compiled.serve_text.experimental_get_tracing_count() == 1


@pytest.mark.second_tf
@pytest.mark.slow
def test_exports_in_half_precision_and_under_xla_answer_as_float32(tmp_path):
    """run_classifier.py --export_dir from one checkpoint: float32; --use_xla=true; --export_dtype=bfloat16 and
    float16 (mixed: half-precision matmuls). Served in a fresh process:
    - the XLA export answers 100 text requests of 1 to 13 pairs of 1 to 60 words, and ids 5 to 128 wide, as the
      float32 one, compiling at most one XLA module per padded shape (rows 1, 2, 4, 8, 16 by widths 32 and 64 for
      text, and 128 for ids), not one per request shape;
    - the half-precision exports predict the float32 export's labels on the 408 MRPC dev pairs (how many differ is
      printed): a label may differ only where float32's probability is within the half precision's rounding of
      0.5. benchmarks/bench_inference.py --parts=export_dtypes counts them for a fine-tuned MiniLM."""
    _checkpoint(tmp_path / "output", tmp_path / "bert_config.json")
    # --export_tflite beside it converts a plain float32 export of its own (LiteRT lacks the padding's ops).
    assert "XLA at widths [32, 64, 128]" in _export(tmp_path, "xla", "--use_xla=true",
                                                    f"--export_tflite={tmp_path / 'model.tflite'}")
    assert (tmp_path / "model.tflite").stat().st_size > 0
    for dtype in ("float32", "bfloat16", "float16"):
        assert f"serving_text; {dtype}; the model over at most 32 rows at a time)" in _export(
            tmp_path, dtype, f"--export_dtype={dtype}")
    words = " ".join(_mrpc_dev()[0]).split()
    rng = random.Random(0)
    sizes = [rng.choice([1, 1, 2, 3, 5, 8, 13]) for _ in range(100)]
    texts = [[[" ".join(rng.choice(words) for _ in range(rng.randint(1, 60))) for _ in range(n)] for _ in "ab"]
             for n in sizes]
    ids = [(rows, width) for rows in (1, 3) for width in (5, 17, 64, 100, 128)]
    dump = tmp_path / "dump"
    served = _serve(tmp_path, {"xla": texts, "float32": [list(_mrpc_dev())] + texts, "bfloat16": [list(_mrpc_dev())],
                               "float16": [list(_mrpc_dev())]}, ids,
                    XLA_FLAGS=f"--xla_dump_to={dump} --xla_dump_hlo_as_text")
    for i in range(len(texts)):
        np.testing.assert_allclose(served[f"xla/text/{i}"], served[f"float32/text/{i + 1}"], atol=1e-5)
    for i in range(len(ids)):
        np.testing.assert_allclose(served[f"xla/ids/{i}"], served[f"float32/ids/{i}"], atol=1e-5)
    compiles = [name for name in os.listdir(dump) if name.endswith(".before_optimizations.txt")]
    row_buckets = {min(r for r in serving.XLA_ROWS if r >= n) for n in sizes + [1, 3]}
    assert row_buckets == {1, 2, 4, 8, 16}
    assert 3 <= len(compiles) <= len(row_buckets) * 2 + 2, sorted(compiles)
    print(f"XLA: {len(compiles)} compiles for {len(texts) + len(ids)} requests")

    labels, probabilities = served["float32/label/0"], served["float32/text/0"][:, 1]
    assert len(labels) == 408 and len(set(labels)) == 2
    for dtype, rounding in (("bfloat16", 0.02), ("float16", 0.002)):
        differ = served[f"{dtype}/label/0"] != labels
        largest = np.abs(served[f"{dtype}/text/0"][:, 1] - probabilities).max()
        print(f"{dtype}: {differ.sum()} of 408 MRPC dev labels differ from float32's; the largest probability "
              f"difference is {largest:.4f}")
        assert largest < rounding, dtype
        assert np.all(np.abs(probabilities[differ] - 0.5) < rounding), (dtype, probabilities[differ])
