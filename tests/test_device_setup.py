"""device_setup.py: XLA decided by the device type and --use_xla (devices injected), the project's XLA options
added to XLA_FLAGS without overriding the user's, known to this TensorFlow's XLA, the autotune cache folder, and
mixed precision's elementwise dtype decided by the device."""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import device_setup
import training
from tests import tiny
from tests.processes import run_script
from tests.shared_data import shared_path

CPU = [tf.config.PhysicalDevice("/physical_device:CPU:0", "CPU")]
GPU = CPU + [tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")]
GPUS = GPU + [tf.config.PhysicalDevice("/physical_device:GPU:1", "GPU")]
REPLICATED = (False, "several replicas, where XLA is not measured yet (--use_xla=true compiles each replica's "
                     "gradients)")


@pytest.mark.parametrize("use_xla, devices, strategy, expected", [
    (None, CPU, "default", (False, "a CPU, where XLA slows training down (--use_xla=true turns it on)")),
    (None, GPU, "default", (True, "a GPU and --use_xla not given")),
    (None, CPU, "tpu", (True, "a TPU and --use_xla not given")),
    (True, CPU, "default", (True, "--use_xla=true")),
    (False, GPU, "default", (False, "--use_xla=false")),
    (False, CPU, "tpu", (False, "--use_xla=false")),
    (True, GPU, "default", (True, "--use_xla=true")),
    (None, GPU, "mirrored", (True, "a GPU and --use_xla not given")),  # one GPU: one replica
    (None, GPUS, "default", (True, "a GPU and --use_xla not given")),  # the default strategy uses one of them
    (None, GPUS, "mirrored", REPLICATED),
    (None, GPU, "multi_worker_mirrored", REPLICATED),
    (True, GPUS, "mirrored", (True, "--use_xla=true")),
    (None, CPU, "mirrored", (False, "a CPU, where XLA slows training down (--use_xla=true turns it on)")),
])
def test_xla_is_decided_by_the_device_type_the_replicas_and_the_flag(use_xla, devices, strategy, expected):
    config = training.TrainingConfig(use_xla=use_xla, distribution_strategy=strategy)
    device = device_setup.device_type(config, devices)
    replicated = device == "gpu" and device_setup.several_replicas(config, devices)
    assert device_setup.decide_xla(use_xla, device, replicated) == expected
    assert device_setup.setup(config, devices, {}).use_xla == expected[0]


def test_the_device_type_of_this_machine_is_what_tensorflow_sees():
    seen = "gpu" if tf.config.list_physical_devices("GPU") else "cpu"
    assert device_setup.device_type(training.TrainingConfig()) == seen
    assert device_setup.device_type(training.TrainingConfig(distribution_strategy="tpu")) == "tpu"


@pytest.mark.parametrize("existing, expected, added", [
    ("", "--xla_gpu_enable_triton_gemm=false --xla_gpu_per_fusion_autotune_cache_dir=/o/c", 2),
    # The kit's own option (device_env.sh) stays first; the project's are appended.
    ("--xla_gpu_cuda_data_dir=/k", "--xla_gpu_cuda_data_dir=/k --xla_gpu_enable_triton_gemm=false "
                                   "--xla_gpu_per_fusion_autotune_cache_dir=/o/c", 2),
    # The user's values are never overridden, whatever they are.
    ("--xla_gpu_enable_triton_gemm=true", "--xla_gpu_enable_triton_gemm=true "
                                          "--xla_gpu_per_fusion_autotune_cache_dir=/o/c", 1),
    ("--xla_gpu_per_fusion_autotune_cache_dir=/mine --xla_gpu_enable_triton_gemm",
     "--xla_gpu_per_fusion_autotune_cache_dir=/mine --xla_gpu_enable_triton_gemm", 0),
    # A flag whose name only begins like ours is another flag.
    ("--xla_gpu_enable_triton_gemm_any=true", "--xla_gpu_enable_triton_gemm_any=true "
     "--xla_gpu_enable_triton_gemm=false --xla_gpu_per_fusion_autotune_cache_dir=/o/c", 2),
])
def test_the_projects_xla_flags_never_override_the_users(existing, expected, added):
    value, new = device_setup.xla_flags(existing, "/o/c")
    assert value == expected and len(new) == added


def test_on_a_gpu_setup_sets_xla_flags_and_names_the_cache_under_output_dir(tmp_path, caplog):
    output_dir = tmp_path / "out"
    environ = {"XLA_FLAGS": "--xla_gpu_cuda_data_dir=/kit"}
    config = device_setup.setup(training.TrainingConfig(output_dir=str(output_dir)), GPU, environ)
    assert config.use_xla is True
    cache = output_dir / device_setup.CACHE_DIR
    assert environ["XLA_FLAGS"] == ("--xla_gpu_cuda_data_dir=/kit --xla_gpu_enable_triton_gemm=false "
                                    f"--xla_gpu_per_fusion_autotune_cache_dir={cache}")
    assert "XLA on: a GPU and --use_xla not given" in caplog.text
    assert not output_dir.exists()  # the checks come first: the folder is made with --output_dir, not here
    output_dir.mkdir()
    assert device_setup.make_cache_dir() == str(cache) and cache.is_dir()
    # A CPU, or XLA turned off, leaves XLA_FLAGS alone; so does a TPU (its compiler takes no XLA_FLAGS of ours).
    for devices, use_xla, tpu in ((CPU, None, False), (GPU, False, False), (CPU, None, True)):
        untouched = {}
        device_setup.setup(training.TrainingConfig(output_dir=str(output_dir), use_xla=use_xla, use_tpu=tpu),
                           devices, untouched)
        assert untouched == {}
    # An output folder on a remote file system gets no cache (XLA writes local files); cuBLAS GEMMs still.
    remote = {}
    device_setup.setup(training.TrainingConfig(output_dir="gs://bucket/run"), GPU, remote)
    assert remote["XLA_FLAGS"] == "--xla_gpu_enable_triton_gemm=false"
    assert "no autotune cache: no --output_dir on a local file system" in caplog.text


def test_the_projects_xla_flags_are_known_to_this_tensorflows_xla(tmp_path):
    """XLA ends the process at its first compile on an unknown XLA_FLAGS entry: the project's options must exist
    in the XLA of this TensorFlow (both versions run this test). On a CPU, XLA writes nothing to the autotune
    cache (GPU autotuning fills it: tests/test_gpu.py), so this is what a CPU can check of it."""
    flags, _ = device_setup.xla_flags("", str(tmp_path / "cache"))
    code = ("import tensorflow as tf\n"
            "print(float(tf.function(lambda x: x * 2.0, jit_compile=True)(tf.constant(1.5))))\n")
    env = dict(os.environ, XLA_FLAGS=flags, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "3.0", proc.stderr[-2000:]
    bad = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=dict(env, XLA_FLAGS=flags + " --xla_gpu_no_such_option=1"))
    assert bad.returncode != 0 and "Unknown flag" in bad.stderr  # the check above can fail


@pytest.mark.slow
def test_use_xla_true_on_a_cpu_trains_and_predicts_as_without(tmp_path):
    """run_classifier.py with --use_xla=true on a CPU (where XLA is off unless asked): the same training (4 steps)
    and the same predictions as without (dropout off: XLA draws other masks from the same seed), and the log says
    once that XLA is on and why, and how long its first compile took. (Prediction alone from one checkpoint, to
    1e-5: tests/test_runner.py.)"""
    data_dir = tmp_path / "mrpc"
    # Outputs far apart; no dropout (XLA draws other random bits for the same seed).
    config = tiny.config_file(tmp_path / "config.json", num_hidden_layers=1, type_vocab_size=2, initializer_range=0.5, hidden_dropout_prob=0.0,
                              attention_probs_dropout_prob=0.0)
    args = tiny.classifier_flags(tmp_path, do_train="true", do_predict="true", train_batch_size="8", learning_rate="1e-3",
                           output_dropout_prob="0",
                           num_train_epochs="1", iterations_per_loop="2", max_seq_length="64", bert_config_file=config)
    with open(shared_path("data", "glue", "MRPC", "test.tsv"), encoding="utf-8") as f:
        (data_dir / "test.tsv").write_text("".join(f.readlines()[:40]), encoding="utf-8")
    runs = {}
    for name, flags in (("plain", []), ("xla", ["--use_xla=true"])):
        proc = run_script("run_classifier.py", *args, f"--output_dir={tmp_path / name}", *flags)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[name] = proc.stderr
    assert "XLA off: a CPU, where XLA slows training down (--use_xla=true turns it on)" in runs["plain"]
    assert runs["xla"].count("XLA on: --use_xla=true") == 1
    assert "The first loop's tracing and XLA compiling took about" in runs["xla"]

    def results(folder):
        with open(folder / "eval_results.txt") as f:
            scores = dict(line.strip().split(" = ") for line in f)
        return scores, np.loadtxt(folder / "test_results.tsv")

    (plain_scores, plain), (xla_scores, xla) = results(tmp_path / "plain"), results(tmp_path / "xla")
    assert plain_scores["global_step"] == xla_scores["global_step"] == "4"
    assert float(xla_scores["eval_loss"]) == pytest.approx(float(plain_scores["eval_loss"]), abs=1e-3)
    np.testing.assert_allclose(xla, plain, atol=1e-3)
    assert plain[:, 1].std() > 0.01, plain  # the predictions differ from example to example


def test_a_process_started_after_a_job_takes_its_own_cache_not_the_parents(tmp_path, caplog, monkeypatch):
    """A job's setup() writes XLA_FLAGS into the environment that the processes it starts inherit. Their own job
    replaces the entries the parent's added (its cache folder is not the user's choice) and keeps the user's."""
    parent = {"XLA_FLAGS": "--xla_gpu_cuda_data_dir=/kit"}
    device_setup.setup(training.TrainingConfig(output_dir=str(tmp_path / "first")), GPU, parent)
    assert str(tmp_path / "first") in parent["XLA_FLAGS"]
    assert parent[device_setup.ADDED_ENV] == ("--xla_gpu_enable_triton_gemm=false "
                                              f"--xla_gpu_per_fusion_autotune_cache_dir={tmp_path / 'first'}/"
                                              f"{device_setup.CACHE_DIR}")
    # The child: a new process (nothing added there yet) with a copy of the parent's environment.
    monkeypatch.setattr(device_setup, "_ours", set())
    child = dict(parent)
    caplog.clear()
    device_setup.setup(training.TrainingConfig(output_dir=str(tmp_path / "second")), GPU, child)
    cache = tmp_path / "second" / device_setup.CACHE_DIR
    assert child["XLA_FLAGS"] == ("--xla_gpu_cuda_data_dir=/kit --xla_gpu_enable_triton_gemm=false "
                                  f"--xla_gpu_per_fusion_autotune_cache_dir={cache}")
    assert "keeps the user's" not in caplog.text
    assert device_setup.make_cache_dir() == str(cache)
    # A second job in the same process changes nothing (XLA has read its options): no second cache is named.
    again = dict(child)
    device_setup.setup(training.TrainingConfig(output_dir=str(tmp_path / "third")), GPU, again)
    assert again["XLA_FLAGS"] == child["XLA_FLAGS"] and device_setup.make_cache_dir() is None
    # The user's own cache folder, set before any job, is kept in the child.
    monkeypatch.setattr(device_setup, "_ours", set())
    user = {"XLA_FLAGS": "--xla_gpu_per_fusion_autotune_cache_dir=/mine"}
    device_setup.setup(training.TrainingConfig(output_dir=str(tmp_path / "fourth")), GPU, user)
    assert user["XLA_FLAGS"] == "--xla_gpu_per_fusion_autotune_cache_dir=/mine --xla_gpu_enable_triton_gemm=false"


@pytest.mark.usefixtures("float32_policy")
def test_the_elementwise_dtype_is_decided_by_the_device_unless_given():
    for devices, given, expected in ((CPU, "auto", "float32"), (GPU, "auto", "compute"), (CPU, "compute", "compute"),
                                     (GPU, "float32", "float32")):
        config = training.TrainingConfig(dtype="bfloat16", elementwise_dtype=given)
        assert device_setup.setup(config, devices, {}).elementwise_dtype == expected
    with pytest.raises(ValueError, match="--elementwise_dtype='half': expected auto or one of"):
        training.TrainingConfig(elementwise_dtype="half")
