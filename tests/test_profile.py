"""--profile_loop (a tf.profiler trace of one training loop) and benchmarks/profile_summary.py, which reads it."""
import glob
import os

import pytest
from tensorflow.tsl.profiler.protobuf import xplane_pb2

import training
from tests.benchmark_modules import load_benchmark
from tests import tiny

pytestmark = pytest.mark.usefixtures("float32_policy")


def _train(output_dir, profile_loop):
    """4 steps of the tiny pretraining model in loops of 2 (however slow the machine: no loop cut by the time of a
    progress line)."""
    return tiny.train_pretraining(output_dir, steps=4, train_batch_size=8, iterations_per_loop=2,
                                  log_every_secs=3600, profile_loop=profile_loop)


def traces(output_dir):
    return glob.glob(os.path.join(output_dir, "plugins", "profile", "*", "*.xplane.pb"))


def test_profile_loop_traces_one_loop_and_the_summary_reads_it(tmp_path, capsys):
    output_dir = str(tmp_path / "run")
    assert _train(output_dir, profile_loop=2)["global_step"] == 4
    assert len(traces(output_dir)) == 1
    summary = load_benchmark("profile_summary")
    (cpu,) = summary.main([output_dir, "--top=40", "--json", str(tmp_path / "summary.json")])
    assert cpu["device"] == "/host:CPU" and 0 < cpu["busy_ps"] <= cpu["span_ps"]
    # The traced loop is two steps of the tiny model: its matmuls, GELU's Tanh and the softmax ran in it.
    ops = set(cpu["groups"])
    assert any(summary.MATMUL.search(op) for op in ops), ops
    assert "Tanh" in ops and any("Softmax" in op for op in ops), ops
    printed = capsys.readouterr().out
    assert printed.startswith(f"trace: {traces(output_dir)[0]}\nno GPU kernels in the trace")
    assert "\n/host:CPU: traced span " in printed
    assert (tmp_path / "summary.json").exists()


def test_a_profile_loop_past_the_run_traces_nothing(tmp_path):
    output_dir = str(tmp_path / "run")
    _train(output_dir, profile_loop=3)  # 4 steps in loops of 2: two loops
    assert traces(output_dir) == []


def test_a_negative_profile_loop_names_the_flag():
    with pytest.raises(ValueError, match="--profile_loop=-1: expected a non-negative integer"):
        training.TrainingConfig(profile_loop=-1)


def _gpu_trace(path):
    """A GPU plane as the profiler writes one: stream lines of kernels and copies (annotated with the TensorFlow
    op each ran for), and a derived line repeating them, which the summary must not count twice."""
    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/device:GPU:0")
    plane.stat_metadata[1].name = "kernel_annotation"
    plane.stat_metadata[2].name = "bert/encoder/layer_0/intermediate/dense/MatMul:MatMul"
    for key, name in ((1, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"),
                      (2, "void Eigen::internal::EigenMetaKernel<Eigen::TensorEvaluator<float>, long>"),
                      (3, "MemcpyHtoD"), (4, "bert/encoder/layer_0/intermediate/Pow:Pow")):
        plane.event_metadata[key].id = key
        plane.event_metadata[key].name = name
    compute = plane.lines.add(name="Stream #7(Compute)", timestamp_ns=1000)
    gemm = compute.events.add(metadata_id=1, offset_ps=0, duration_ps=4_000_000_000)
    gemm.stats.add(metadata_id=1, ref_value=2)
    pow_kernel = compute.events.add(metadata_id=2, offset_ps=2_000_000_000, duration_ps=4_000_000_000)  # overlaps
    pow_kernel.stats.add(metadata_id=1, str_value="outer::bert/encoder/layer_0/intermediate/Pow:Pow#id=3#")
    copy = plane.lines.add(name="Stream #8(MemcpyH2D)", timestamp_ns=1000)
    copy.events.add(metadata_id=3, offset_ps=20_000_000_000, duration_ps=1_000_000_000)
    derived = plane.lines.add(name="TensorFlow Ops", timestamp_ns=1000)
    derived.events.add(metadata_id=4, offset_ps=0, duration_ps=50_000_000_000)
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(space.SerializeToString())


def test_the_summary_of_a_gpu_plane(tmp_path, capsys):
    _gpu_trace(str(tmp_path / "plugins" / "profile" / "run" / "host.xplane.pb"))
    summary = load_benchmark("profile_summary")
    (gpu,) = summary.main([str(tmp_path)])
    assert gpu["device"] == "/device:GPU:0"
    assert gpu["span_ps"] == 21_000_000_000 and gpu["busy_ps"] == 6_000_000_000  # the kernels' union, not their sum
    assert dict(gpu["groups"]) == {"MatMul": 4_000_000_000, "Pow": 4_000_000_000}
    assert dict(gpu["copies"]) == {"H2D": 1_000_000_000}
    assert set(gpu["kernels"]) == {"smN_xmma_gemm_bfNbfN_bfNfN_fN_tn_n_tilesizeNxNxN",
                                   "void Eigen::internal::EigenMetaKernel<>"}
    printed = capsys.readouterr().out
    assert "/device:GPU:0: traced span 21.0 ms, busy 6.0 ms (28.6 %), idle 71.4 %; matmul ops 50.0 % of op time" \
        in printed
    assert "copies: H2D 1.0 ms" in printed


@pytest.mark.parametrize("make, message", [
    (lambda p: str(p / "missing"), "no such file or folder"),
    (lambda p: str(p), "no *.xplane.pb below it"),
    (lambda p: (p / "x.xplane.pb").write_bytes(b"\xff\xfe not a trace") and str(p / "x.xplane.pb"),
     "cannot read a tf.profiler trace from it"),
])
def test_the_summary_refuses_what_is_not_a_trace_in_one_line(tmp_path, make, message):
    summary = load_benchmark("profile_summary")
    with pytest.raises(SystemExit) as exit_info:
        summary.main([make(tmp_path)])
    text = str(exit_info.value)
    assert text.startswith("profile_summary.py: ") and message in text and "\n" not in text
