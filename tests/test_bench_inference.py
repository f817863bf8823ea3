"""benchmarks/bench_inference.py (latency percentiles, serving_text in batches), without timing anything real: a
fake clock advances only when the measured call runs. (benchmarks/gpu_run.sh: tests/test_gpu_run.py.)"""
import numpy as np
import pytest

from tests.benchmark_modules import load_benchmark
from tests.shared_data import shared_path


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_inference")


class FakeClock:
    """Stands in for the `time` module: perf_counter only moves when a call `takes` some seconds."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now

    def take(self, seconds):
        self.now += seconds


def test_measure_reports_the_percentiles_of_single_calls(bench, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(bench, "time", clock)
    durations = iter([5.0] + [0.001] * 98 + [0.010, 0.050] + [0.001] * 1000)  # first call, then 100 timed, ...

    def run():
        clock.take(next(durations))
    result = bench.measure(run, batch=8, warmup=0, rounds=1, min_round_s=0.1485)
    assert result["first_call_s"] == 5.0
    assert result["calls"] == 100
    assert result["p50_ms"] == pytest.approx(1.0)
    assert 10.0 < result["p99_ms"] <= 50.0
    assert result["mean_ms"] == pytest.approx((98 * 1 + 10 + 50) / 100)
    assert result["seq_per_s"] == pytest.approx(8 / (0.158 / 100))


class FakeTensor:
    def __init__(self, value):
        self.value = value

    def numpy(self):
        return self.value


@pytest.mark.parametrize("batch", [1, 8, 32])
def test_serving_text_sends_batch_pairs_a_request_and_predicts_every_pair_once(bench, monkeypatch, batch):
    """One pass over the MRPC dev pairs gives the predictions (a fake classifier: label 1 for pairs whose first
    text is longer), then passes repeat until 50 requests are timed; pairs/s counts the pairs timed."""
    clock = FakeClock()
    monkeypatch.setattr(bench, "time", clock)
    sizes = []

    def serving_text(text_a, text_b):
        sizes.append(len(text_a))
        clock.take(0.001 * len(text_a))
        longer = np.array([len(a) > len(b) for a, b in zip(text_a, text_b)])
        return {"probabilities": FakeTensor(np.stack([~longer, longer], -1).astype(np.float32))}

    class Loaded:
        signatures = {"serving_text": serving_text}

    class FakeTf:
        constant = staticmethod(np.array)
    monkeypatch.setattr(bench, "_load_savedmodel", lambda ctx: (FakeTf, Loaded))
    mrpc_dir = shared_path("data", "glue", "MRPC")
    result = bench.savedmodel_text({"mrpc_dir": mrpc_dir, "text_requests": 0, "warmup": 2}, batch)
    pairs = bench.read_mrpc_dev(mrpc_dir)
    assert result["pairs"] == len(pairs) == 408
    assert max(sizes) == batch
    assert result["requests"] == max(-(-408 // batch), bench.MIN_TEXT_REQUESTS)
    expected = [int(len(a) > len(b)) for a, b, _ in pairs]
    assert result["predictions"] == expected
    assert result["accuracy"] == pytest.approx(np.mean(np.array(expected) == [p[2] for p in pairs]))
    assert result["seq_per_s"] == pytest.approx(1000.0)  # 1 ms a pair, whatever the batch
    assert result["p50_ms"] == pytest.approx(batch if batch < 408 else 408)


def test_serving_text_results_come_smallest_batch_first(bench):
    results = {"sm_text:8": {"batch": 8}, "sm_text:1": {"batch": 1}, "sm_ids:1": {"batch": 1, "x": 0}}
    assert bench.serving_text_results(results) == [{"batch": 1}, {"batch": 8}]
    assert bench.serving_text_results({"sm_ids:1": {}}) == []
