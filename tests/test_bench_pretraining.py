"""benchmarks/bench_pretraining.py: the FLOP count behind "model TFLOP/s", and each configuration's environment."""
import pytest

import encoder
from tests.benchmark_modules import load_benchmark


def load(name="bench_pretraining"):
    """The module, imported now (its child environments are read from os.environ at import, as in a run)."""
    return load_benchmark("bench_pretraining", name)


@pytest.fixture(scope="module")
def bench():
    return load()


@pytest.mark.parametrize("model", ["base", "large"])
def test_train_flops_are_six_per_encoder_weight_per_token(bench, model):
    """Dense work is 2 FLOPs per weight per token forward, 4 backward; with one token per sequence and no masked
    positions, attention and the heads add little, so the count is 6 x the encoder's kernel weights x tokens."""
    config = encoder.BertConfig.from_dict(bench.MODELS[model])
    bert = encoder.BertEncoder(config)
    kernels = sum(int(v.shape.num_elements()) for name, v in bert.variables_by_name().items()
                  if name.startswith("bert/encoder/") and name.endswith("/kernel"))
    flops = bench.train_flops(bench.MODELS[model], batch_size=4, seq_length=1, max_predictions=0)
    assert flops == pytest.approx(6 * kernels * 4, rel=0.01)
    # the masked-LM head counts at the masked positions only: transform + output embedding per position
    h, v = config.hidden_size, config.vocab_size
    extra = bench.train_flops(bench.MODELS[model], 4, 1, 20) - flops
    assert extra == 3 * 2 * 4 * 20 * (h * h + h * v)


def test_hf_processes_get_their_own_pythonpath_and_decode_with_tensorflows(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/kit")
    monkeypatch.delenv("BENCH_TF_PYTHONPATH", raising=False)
    bench = load()
    assert bench.child_env("ours", "")["PYTHONPATH"] == "/kit"
    assert bench.child_env("hf")["PYTHONPATH"] == "/kit"
    env = bench.child_env("hf", "")
    assert env["PYTHONPATH"] == "" and env["BENCH_TF_PYTHONPATH"] == "/kit"
    # inside such an hf process, the batch-decoding child gets TensorFlow's path back, and no GPU
    monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])
    monkeypatch.setenv("BENCH_TF_PYTHONPATH", env["BENCH_TF_PYTHONPATH"])
    hf_side = load("bench_pretraining_hf")
    assert hf_side.DECODE_ENV["PYTHONPATH"] == "/kit" and hf_side.DECODE_ENV["CUDA_VISIBLE_DEVICES"] == ""


def test_the_peer_with_xla_gets_the_projects_xla_options_and_the_users_stay(monkeypatch):
    """Fair XLA: tf-models-official compiles with the options the project sets for ours (cuBLAS GEMMs, an
    autotune cache of its own); without XLA, and for the other sides, the environment is the user's."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_cuda_data_dir=/kit")
    bench = load()
    flags = bench.child_env("peer", None, 1, "/cache")["XLA_FLAGS"]
    assert flags == ("--xla_gpu_cuda_data_dir=/kit --xla_gpu_enable_triton_gemm=false "
                     "--xla_gpu_per_fusion_autotune_cache_dir=/cache")
    assert bench.child_env("peer", None, 0, "/cache")["XLA_FLAGS"] == "--xla_gpu_cuda_data_dir=/kit"
    assert bench.child_env("ours", None, 1, "/cache")["XLA_FLAGS"] == "--xla_gpu_cuda_data_dir=/kit"
    assert bench.matmul_precision("float32", "NVIDIA H100 80GB HBM3") == "tf32"
    assert bench.matmul_precision("float32", "cpu") == "float32"
    assert bench.compile_seconds(12.0, 2.0) == 10.0 and bench.compile_seconds(1.0, 2.0) == 0.0
