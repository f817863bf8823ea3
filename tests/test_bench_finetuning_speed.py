"""benchmarks/bench_finetuning_speed.py: ours runs the runner's own job (run_classifier.run, run_squad.run) with
loops of --steps steps, HF the same shapes; one JSON row per configuration (gpu_run.sh's finetune steps)."""
import argparse
import json
import os
import subprocess
import sys

import pytest

from tests.benchmark_modules import load_benchmark
from tests.shared_data import shared_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_finetuning_speed")


def test_configs_are_checked(bench):
    assert bench.parse_configs("ours:bfloat16:1,hf:float16:0") == [("ours", "bfloat16", 1), ("hf", "float16", 0)]
    with pytest.raises(SystemExit, match="--configs: bad entry 'peer:bfloat16:1'"):
        bench.parse_configs("peer:bfloat16:1")


@pytest.mark.slow
def test_ours_runs_run_classifier_in_loops_of_steps(bench):
    args = argparse.Namespace(task="mrpc", data=shared_path("data", "glue", "MRPC"), model="tiny", batch_size=8,
                              max_seq_length=32, steps=3, num_train_epochs=0.01,
                              vocab_file=shared_path("vocab", "uncased", "vocab.txt"))
    result = bench.run_ours(args, "float32", 0)
    assert result["steps_run"] == 4  # 3668 examples x 0.01 epochs / 8: loops of 3 and 1 steps
    assert result["examples_per_sec"] > 0 and result["compile_s"] is not None


@pytest.mark.slow
@pytest.mark.hf
def test_squad_ours_and_hf_rows(tmp_path):
    rows = tmp_path / "rows.jsonl"
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "bench_finetuning_speed.py"), "--task=squad",
         "--data=" + shared_path("data", "squad", "v1.1", "dev-v1.1.articles38-47.json"),
         "--vocab_file=" + shared_path("vocab", "uncased", "vocab.txt"), "--model=tiny", "--batch_size=4",
         "--max_seq_length=128", "--steps=2", "--num_train_epochs=0.01", "--configs=ours:bfloat16:0,hf:bfloat16:0",
         f"--results_jsonl={rows}"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for line in rows.read_text().splitlines()]
    assert [(r["impl"], r["task"], r["batch_size"], r["max_seq_length"], r["dtype"]) for r in results] == [
        ("ours", "squad", 4, 128, "bfloat16"), ("hf", "squad", 4, 128, "bfloat16")]
    assert all(r["examples_per_sec"] > 0 and "compile_s" in r for r in results)
    assert "ours / hf, bfloat16 xla=0:" in proc.stdout
