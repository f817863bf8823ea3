"""benchmarks/profile_summary.py tracing inference itself: the encoder of a real checkpoint at batch 1, and a
SavedModel folder that is not one (CPU; the per-op tables that benchmarks/SPEED.md quotes come from these runs)."""
import json
import os
import subprocess
import sys

from tests.shared_data import shared_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "profile_summary.py")


def _run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_trace_encoder_reports_each_op_type_per_call(tmp_path):
    tiny = shared_path("reference", "original_checkpoint_tiny")
    with open(os.path.join(tiny, "bert_config.json")) as f:
        layers = json.load(f)["num_hidden_layers"]
    result = _run(f"--trace_encoder={tiny}/bert_config.json", f"--init_checkpoint={tiny}/model.ckpt-30",
                  "--seq_length=16", "--calls=3", "--warmup=1", f"--trace_dir={tmp_path / 'trace'}",
                  f"--json={tmp_path / 'summary.json'}")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "per call (3 traced calls): " in result.stdout and "ops/call" in result.stdout
    with open(tmp_path / "summary.json") as f:
        (cpu,) = json.load(f)
    assert cpu["calls"] == 3 and cpu["device"] == "/host:CPU"
    per_call = {op: n / 3 for op, n in cpu["counts"].items()}
    # Each layer runs the two attention batch matmuls once per call (plain or fused with the scale), and
    # softmax once: the executions of three calls, counted per op type.
    batch_matmuls = sum(n for op, n in per_call.items() if "BatchMatMul" in op)
    softmaxes = sum(n for op, n in per_call.items() if "Softmax" in op)
    assert batch_matmuls == 2 * layers and softmaxes == layers, per_call
    assert sum(cpu["groups"].values()) > 0 and set(cpu["groups"]) == set(cpu["counts"])


def test_trace_savedmodel_of_a_folder_without_one_is_one_line(tmp_path):
    result = _run(f"--trace_savedmodel={tmp_path}")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        f"profile_summary.py: --trace_savedmodel={tmp_path}: no saved_model.pb in it (run_classifier.py --export_dir)")
