"""benchmarks/gpu_run.sh (its steps, the budget, the dry run on this CPU) and benchmarks/gpu_report.py (GPU.json's
rows and GPU.md's generated tables)."""
import json
import os
import subprocess
import sys
import tarfile

import pytest

from tests.benchmark_modules import load_benchmark

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def report():
    return load_benchmark("gpu_report")


def gpu_run(*args, **env):
    """The script, with this interpreter's environment first on PATH (its `python3`)."""
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    return subprocess.run(["bash", os.path.join(ROOT, "benchmarks", "gpu_run.sh"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=900, env=dict(os.environ, PATH=path, **env))


def test_gpu_run_lists_its_steps_and_refuses_an_unknown_one(tmp_path):
    listed = gpu_run("--list")
    assert listed.returncode == 0
    steps = listed.stdout.split()
    assert steps[:4] == ["environment", "tests", "large-bf16", "serving"]  # issue 51's priorities first
    assert {"large-seq512", "large-fp16", "large-tf32", "finetune-mrpc", "finetune-squad", "profile"} <= set(steps)
    bad = gpu_run("10", str(tmp_path), "serving", "servng")
    assert bad.returncode == 2
    assert bad.stderr.strip() == f"gpu_run.sh: unknown STEP servng; expected some of: {' '.join(steps)}"
    missing = gpu_run("10", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "is not a folder" in missing.stderr


def test_gpu_run_runs_only_the_steps_it_is_given_within_its_budget(tmp_path):
    """A budget too short for anything: the chosen steps say so, the others are not mentioned."""
    result = gpu_run("1", str(tmp_path), "serving", "finetune-squad", OUT=str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    skipped = [line.split(":")[0] for line in result.stdout.splitlines() if line.startswith("SKIP")]
    assert skipped == ["SKIP serving", "SKIP finetune-squad"]
    assert (tmp_path / "out" / "gpu_run.log").read_text().count("SKIP") == 2


@pytest.mark.slow
def test_the_dry_run_writes_gpu_json_of_the_real_runs_shape(tmp_path, report):
    """`gpu_run.sh --dry-run` on this CPU, a few of its steps (the dry run as a command runs every step; the tools
    behind the others have tests of their own): the machine's row fields, the tests' row, a pre-training step's
    rows, each marked dry on device cpu."""
    result = gpu_run("--dry-run", "environment", "tests", "large-eager", OUT=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "=== large-eager: rc 0" in result.stdout, result.stdout[-3000:]
    rows = json.load(open(tmp_path / "GPU.json"))
    assert all(list(row) == list(report.ROW_FIELDS) for row in rows)
    assert {row["device"] for row in rows} == {"cpu"} and all(row["dry"] for row in rows)
    environment = json.load(open(tmp_path / "environment.json"))
    assert environment["tensorflow"] and environment["peak_tflops"] > 0
    tests = [row for row in rows if row["kind"] == "tests"]
    assert len(tests) == 1 and "skipped" in tests[0]["note"] and not tests[0]["failed"]
    trained = [row for row in rows if row["kind"] == "pretraining"]
    expected = {"HF eager"} | ({"tf-models-official"} if environment["peer"] else set())
    assert {row["implementation"] for row in trained} == expected, trained
    for row in trained:
        if row["implementation"] == "HF eager" and not environment.get("torch"):
            # TensorFlow 2.20's test environment has tf-models-official but no PyTorch: a failed row says why.
            assert row["examples_per_s"] is None and "No module named 'torch'" in row["failed"], row
            continue
        assert row["examples_per_s"] > 0 and row["mfu"] > 0 and row["compile_s"] is not None, row
        assert (row["model"], row["seq"], row["batch"], row["dtype"], row["xla"]) == (
            "tiny (dry run)", 128, 4, "bfloat16", False)
    # What the device machine returns: at most 8 files, no folder but the dry run's data; the rows in extra.tgz.
    left = sorted(name for name in os.listdir(tmp_path) if name != "data")
    assert len(left) <= 8 and all(os.path.isfile(tmp_path / name) for name in left), left
    with tarfile.open(tmp_path / "extra.tgz") as archive:
        assert "rows/large-eager.jsonl" in archive.getnames(), archive.getnames()


def _write_rows(out, step, results):
    os.makedirs(out / "rows", exist_ok=True)
    with open(out / "rows" / f"{step}.jsonl", "w") as f:
        f.writelines(json.dumps(result) + "\n" for result in results)


def test_report_rows_label_counts_and_generated_tables(tmp_path, report):
    out = tmp_path / "out"
    _write_rows(out, "large-bf16", [
        {"impl": "ours", "dtype": "bfloat16", "xla": 1, "model": "large", "batch_size": 128, "max_seq_length": 128,
         "examples_per_sec": 1500.0, "model_tflops": 361.0, "mfu": 0.45, "peak_gpu_mb": 30720.0,
         "peak_rss_mb": 4000.0, "compile_s": 61.5, "matmul": "bfloat16"},
        {"impl": "hf", "dtype": "bfloat16", "xla": 1, "model": "large", "batch_size": 128, "max_seq_length": 128,
         "failed": "timed out after --timeout=300 s"}])
    _write_rows(out, "finetune-mrpc", [
        {"impl": "ours", "dtype": "bfloat16", "xla": 1, "task": "mrpc", "model": "base", "batch_size": 32,
         "max_seq_length": 128, "examples_per_sec": 900.0, "peak_rss_mb": 3000.0, "compile_s": 20.0}])
    served = [{"spec": f"sm_text:8", "variant": variant, "batch": 8, "seq_per_s": 100.0, "p50_ms": 2.0,
               "p99_ms": 3.0, "first_call_s": 1.5, "peak_gpu_mb": 512.0, "predictions": predictions}
              for variant, predictions in (("float32", [0, 1, 1, 0]), ("xla-bfloat16", [0, 1, 0, 0]))]
    served.append({"spec": "sm_ids:1", "variant": "xla-float16", "seq_per_s": 900.0, "p50_ms": 1.1, "p99_ms": 1.3,
                   "first_call_s": 2.0, "peak_rss_mb": 700.0})
    served.append({"spec": "encoder:ours:bfloat16:8:1", "variant": "encoder", "seq_per_s": 300.0, "batch": 8})
    _write_rows(out, "serving", served)
    (out / "pytest.xml").write_text('<testsuites><testsuite tests="5" failures="1" errors="0" skipped="0">'
                                    '</testsuite></testsuites>')
    (out / "environment.json").write_text(json.dumps({"device": "NVIDIA H100 80GB HBM3", "driver": "580.159.04",
                                                      "date": "2026-12-01", "commit": "abc1234",
                                                      "tensorflow": "2.20.0", "cuda": "12.5.1"}))
    rows = report.run_rows(str(out), dry=False)
    by = {(row["step"], row["implementation"], row["batch"]): row for row in rows}
    ours = by[("large-bf16", "ours", 128)]
    assert (ours["model"], ours["xla"], ours["peak_memory_gb"], ours["memory"], ours["device"], ours["dry"]) == (
        "BERT-large", True, 30.0, "gpu", "NVIDIA H100 80GB HBM3", False)
    assert by[("large-bf16", "HF torch.compile", 128)]["failed"] == "timed out after --timeout=300 s"
    finetune = by[("finetune-mrpc", "ours", 32)]
    assert finetune["kind"] == "finetuning" and finetune["memory"] == "host RSS"
    assert by[("serving", "export float32", 8)]["labels_differ"] == 0
    half = by[("serving", "export xla-bfloat16", 8)]
    assert (half["labels_differ"], half["dtype"], half["xla"], half["kind"]) == (1, "bfloat16", True, "serving")
    assert by[("serving", "export xla-float16", 1)]["latency_p50_ms"] == 1.1
    assert by[("serving", "ours", 8)]["kind"] == "encoder"
    assert by[("tests", "tests/test_gpu.py", None)]["note"] == "4 passed, 1 failed, 0 skipped"

    run_json = out / "GPU.json"
    run_json.write_text(json.dumps(rows))
    gpu_json, gpu_md = tmp_path / "GPU.json", tmp_path / "GPU.md"
    gpu_json.write_text(json.dumps([dict(rows[0], run="earlier", commit="0000000")]))
    gpu_md.write_text(f"# On a GPU\nstatus\n{report.BEGIN}\nold tables\n{report.END}\n## Findings\nkept\n")
    report.merge(str(run_json), str(gpu_json), str(gpu_md))
    report.merge(str(run_json), str(gpu_json), str(gpu_md))  # the same run again replaces its rows
    merged = json.load(open(gpu_json))
    assert len(merged) == len(rows) + 1
    text = gpu_md.read_text()
    assert text.startswith("# On a GPU\nstatus\n") and text.endswith("## Findings\nkept\n")
    assert "old tables" not in text and "| NVIDIA H100 80GB HBM3 | 2026-12-01 | abc1234 | BERT-large |" in text
    for title in ("### Pre-training", "### Fine-tuning speed", "### Serving", "### Encoder inference", "### GPU tests"):
        assert title in text
    run_json.write_text(json.dumps([dict(rows[0], dry=True)]))
    with pytest.raises(SystemExit, match="a dry run's rows stay out"):
        report.merge(str(run_json), str(gpu_json), str(gpu_md))


def test_gpu_json_and_md_agree(report):
    """benchmarks/GPU.md's tables are the ones GPU.json generates (rerun `gpu_report.py --markdown` after an edit)."""
    rows = json.load(open(report.GPU_JSON))
    assert all(list(row) == list(report.ROW_FIELDS) for row in rows)
    text = open(report.GPU_MD).read()
    assert report.markdown(rows) in text
