"""On a GPU: training runs there, XLA and graph steps agree, float16 with dynamic loss scaling converges like
float32 over 200 steps, MirroredStrategy on one GPU equals the default strategy, and a script's job turns XLA on
with the project's options and keeps its autotuning for a resumed run. Skipped without a GPU."""
import os
import subprocess
import sys

import numpy as np
import pytest

import checkpoints
import device_setup
import run_pretraining as rp
from tests.event_files import summary_scalars
from tests import tiny
from tests.shared_data import shared_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("float32_policy")]


def _train(output_dir, steps, **kwargs):
    """The training loop's tiny pre-training run (tests/tiny.py), one checkpoint at the end, a progress line and summaries at least
    every 50 steps."""
    every = min(steps, 50)
    return tiny.train_pretraining(output_dir, steps=steps, save_checkpoints_steps=steps, iterations_per_loop=every,
                                  log_step_count_steps=every, save_summary_steps=every, **kwargs)


def test_training_places_the_model_on_the_gpu(tmp_path):
    task = rp.PretrainingTask(tiny.pretraining_config())
    model = task.build_model()
    features = next(iter(tiny.pretraining_input_fn()(4)))
    out = model(features, training=False)
    assert "GPU" in out["total_loss"].device.upper()
    assert all("GPU" in getattr(v, "value", v).device.upper() for v in model.variables_by_name().values())


def test_xla_steps_equal_graph_steps(tmp_path):
    graph = str(tmp_path / "graph")
    _train(graph, 5, use_xla=False)
    xla = str(tmp_path / "xla")
    _train(xla, 5, use_xla=True, init_checkpoint=f"{graph}/model.ckpt-0")
    a, b = checkpoints.load_checkpoint(f"{graph}/model.ckpt-5"), checkpoints.load_checkpoint(f"{xla}/model.ckpt-5")
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=2e-3, atol=2e-4, err_msg=name)


def test_mirrored_on_one_gpu_equals_the_default_strategy(tmp_path):
    default = str(tmp_path / "default")
    r1 = _train(default, 10)  # XLA on: a GPU, --use_xla not given, one replica
    mirrored = str(tmp_path / "mirrored")
    r2 = _train(mirrored, 10, distribution_strategy="mirrored", init_checkpoint=f"{default}/model.ckpt-0")
    assert r1["loss"] == pytest.approx(r2["loss"], rel=1e-4)


def test_float16_200_steps_converge_like_float32(tmp_path):
    fp32 = str(tmp_path / "fp32")
    _train(fp32, 200, use_xla=False)
    fp16 = str(tmp_path / "fp16")
    result = _train(fp16, 200, dtype="float16", use_xla=False, init_checkpoint=f"{fp32}/model.ckpt-0")
    losses32 = [v for _, v in summary_scalars(fp32)["loss"]]
    losses16 = [v for _, v in summary_scalars(fp16)["loss"]]
    assert len(losses16) == 4 and all(np.isfinite(losses16)), losses16
    assert losses16[-1] < losses16[0] - 1.0, losses16
    assert abs(losses16[-1] - losses32[-1]) < 0.05 * losses32[-1], (losses16, losses32)
    assert result["loss_scale"] >= 1.0


def _job_env(*user_flags):
    """This process's environment with XLA_FLAGS as a user's shell has it: the kit's own options and user_flags,
    without those the in-process tests' jobs added (device_setup.setup sets XLA_FLAGS in os.environ)."""
    env = dict(os.environ)
    kept = [flag for flag in env.get("XLA_FLAGS", "").split()
            if flag.split("=")[0] not in (device_setup.GEMM_FLAG, device_setup.CACHE_FLAG)]
    env["XLA_FLAGS"] = " ".join(kept + list(user_flags))
    return env


def _pretrain(tmp_path, out, steps, env):
    config = tmp_path / "bert_config.json"
    tiny.pretraining_config().to_json_file(str(config))
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "run_pretraining.py"), "--do_train",
         "--input_file=" + shared_path("reference", "pretraining_data", "sample_text_default.tfrecord"),
         f"--output_dir={out}", f"--bert_config_file={config}", "--train_batch_size=32",
         "--max_seq_length=128", "--max_predictions_per_seq=20", f"--num_train_steps={steps}",
         "--num_warmup_steps=0", "--iterations_per_loop=2", "--save_checkpoints_steps=2", "--dtype=bfloat16"],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr


def test_a_job_turns_xla_on_with_the_projects_options(tmp_path):
    """run_pretraining.py without --use_xla on a GPU: XLA on (said once, with why), cuBLAS GEMMs and the
    autotune cache under --output_dir added to XLA_FLAGS (the kit's own option kept), the cache's folder made, the
    first compile's time logged. (With cuBLAS GEMMs XLA autotunes no fusion of this model: on an H200 the cache
    stayed empty, 2026-11-28.)"""
    out = tmp_path / "out"
    log = _pretrain(tmp_path, out, 4, _job_env())
    assert log.count("XLA on: a GPU and --use_xla not given") == 1, log[-3000:]
    assert f"{device_setup.GEMM_FLAG}=false" in log and f"{device_setup.CACHE_FLAG}={out}" in log
    assert "The first loop's tracing and XLA compiling took about" in log
    assert (out / device_setup.CACHE_DIR).is_dir()


def test_with_the_users_triton_gemms_a_resumed_run_reuses_the_autotuning(tmp_path):
    """A user's XLA_FLAGS turning Triton GEMMs on is kept (and said so); XLA autotunes those fusions into the
    cache under --output_dir, and the same command resumed for more steps adds no entry."""
    out = tmp_path / "out"
    env = _job_env(f"{device_setup.GEMM_FLAG}=true")
    log = _pretrain(tmp_path, out, 4, env)
    assert f"keeps the user's {device_setup.GEMM_FLAG}=true" in log, log[-3000:]
    cache = out / device_setup.CACHE_DIR
    entries = sorted(os.listdir(cache))
    assert entries, "XLA wrote no autotuning result"
    _pretrain(tmp_path, out, 6, env)
    assert sorted(os.listdir(cache)) == entries
