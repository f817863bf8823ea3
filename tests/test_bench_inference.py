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


def test_interleaved_alternates_the_runtimes_round_by_round(bench, monkeypatch):
    """Part onnx: the SavedModel and both ONNX models timed in alternating rounds in one process; a round of
    each before the next round of any, the median and min of each runtime's rounds, its difference from the
    SavedModel's probabilities."""
    clock, order = FakeClock(), []
    monkeypatch.setattr(bench, "time", clock)
    probabilities = np.array([[0.25, 0.75]], np.float32)

    class Tensor:
        def __init__(self, value):
            self.value = value

        def numpy(self):
            return self.value

    def signature(**inputs):
        assert sorted(inputs) == ["input_ids", "input_mask", "segment_ids"]
        clock.take(0.003)
        order.append("savedmodel")
        return {"probabilities": Tensor(probabilities)}

    class Session:
        def __init__(self, path):
            self.name = "ort_int8" if path.endswith("int8.onnx") else "ort_float32"

        def get_inputs(self):
            return [type("Input", (), {"name": n})() for n in ("input_ids", "input_mask", "segment_ids")]

        def get_outputs(self):
            return [type("Output", (), {"name": n})() for n in ("label", "probabilities")]

        def run(self, _, feeds):
            assert all(a.dtype == np.int32 and a.shape == (1, 8) for a in feeds.values())
            clock.take(0.002 if self.name == "ort_float32" else 0.001)
            order.append(self.name)
            return [None, probabilities + (0.01 if self.name == "ort_int8" else 0.0)]

    fake_tf = type("tf", (), {"int32": "int32", "constant": staticmethod(lambda a, dtype: a)})
    loaded = type("Loaded", (), {"signatures": {"serving_default": signature}})()
    monkeypatch.setattr(bench, "_load_savedmodel", lambda ctx: (fake_tf, loaded))
    monkeypatch.setattr(bench, "_signature_vocab_size", lambda sig: 100)
    monkeypatch.setattr(bench, "_ort_session", Session)
    class Interpreter:  # LiteRT's signature runner on token ids
        def __init__(self, path, num_threads=None):
            assert path == "m_int8.tflite" and num_threads == bench._threads()

        def get_signature_runner(self):
            def run(**feeds):
                assert sorted(feeds) == ["input_ids", "input_mask", "segment_ids"]
                clock.take(0.0005)
                order.append("litert_int8")
                return {"probabilities": probabilities - 0.02}
            return run

    import litert_export
    monkeypatch.setattr(litert_export, "interpreter", Interpreter)
    ctx = {"max_seq_length": 8, "warmup": 1, "rounds": 3, "min_round_s": 0.0035,
           "ours_onnx": {"float32": "m.onnx", "int8": "m_int8.onnx"}, "ours_litert": {"int8": "m_int8.tflite"}}
    result = bench.interleaved(ctx, 1)
    # untimed: the reference call, then each runtime's difference call and one warm-up call, in turn
    assert order[:9] == ["savedmodel", "savedmodel", "savedmodel", "ort_float32", "ort_float32", "ort_int8",
                         "ort_int8", "litert_int8", "litert_int8"]
    timed = order[9:]
    runs = [name for i, name in enumerate(timed) if i == 0 or timed[i - 1] != name]
    assert runs == ["savedmodel", "ort_float32", "ort_int8", "litert_int8"] * 3  # rounds alternate
    assert result["ms"] == {"savedmodel": pytest.approx([3.0] * 3), "ort_float32": pytest.approx([2.0] * 3),
                            "ort_int8": pytest.approx([1.0] * 3), "litert_int8": pytest.approx([0.5] * 3)}
    assert result["median_ms"]["ort_float32"] == pytest.approx(2.0)
    assert result["min_ms"]["ort_int8"] == pytest.approx(1.0)
    assert result["max_abs_diff"] == pytest.approx({"savedmodel": 0.0, "ort_float32": 0.0, "ort_int8": 0.01,
                                                    "litert_int8": 0.02})


def test_part_onnx_with_an_export_dir_needs_its_onnx_model(tmp_path, monkeypatch, capsys):
    (tmp_path / "saved_model.pb").write_bytes(b"")
    monkeypatch.setattr("sys.argv", ["bench_inference.py", "--parts=onnx", f"--export_dir={tmp_path}"])
    with pytest.raises(SystemExit, match="--parts=onnx with --export_dir needs --export_onnx=FILE"):
        load_benchmark("bench_inference").main()


def test_interleaved_times_the_xla_export_in_the_same_rounds(bench, monkeypatch, capsys):
    """With --xla (ctx export_dir_xla), part onnx loads the --use_xla=true export too and times it in the same
    alternating rounds, second after the SavedModel; the table gives its own ratio to ORT float32."""
    clock, order = FakeClock(), []
    monkeypatch.setattr(bench, "time", clock)
    probabilities = np.array([[0.25, 0.75]], np.float32)

    def signature_of(name, seconds):
        def signature(**inputs):
            clock.take(seconds)
            order.append(name)
            return {"probabilities": type("T", (), {"numpy": lambda self: probabilities})()}
        return type("Loaded", (), {"signatures": {"serving_default": signature}})()

    class Session:
        def get_inputs(self):
            return [type("Input", (), {"name": n})() for n in ("input_ids", "input_mask", "segment_ids")]

        def get_outputs(self):
            return [type("Output", (), {"name": "probabilities"})()]

        def run(self, _, feeds):
            clock.take(0.002)
            order.append("ort")
            return [probabilities]

    fake_tf = type("tf", (), {"int32": "int32", "constant": staticmethod(lambda a, dtype: a)})
    exports = {"sm": signature_of("savedmodel", 0.004), "sm_xla": signature_of("savedmodel_xla", 0.0025)}
    loads = []

    def load(ctx, key="export_dir"):
        loads.append(key)
        return fake_tf, exports[ctx[key]]
    monkeypatch.setattr(bench, "_load_savedmodel", load)
    monkeypatch.setattr(bench, "_signature_vocab_size", lambda sig: 100)
    monkeypatch.setattr(bench, "_ort_session", lambda path: Session())
    ctx = {"max_seq_length": 8, "warmup": 0, "rounds": 2, "min_round_s": 0.001, "export_dir": "sm",
           "export_dir_xla": "sm_xla", "ours_onnx": {"float32": "m.onnx", "int8": "m_int8.onnx"}, "ours_litert": {}}
    result = bench.interleaved(ctx, 1)
    assert loads == ["export_dir", "export_dir_xla"]
    timed = order[5:]  # the reference call and one difference call of each
    assert timed == ["savedmodel", "savedmodel_xla", "ort", "ort"] * 2
    assert result["median_ms"] == pytest.approx({"savedmodel": 4.0, "savedmodel_xla": 2.5, "ort_float32": 2.0,
                                                 "ort_int8": 2.0})
    bench.summarize_interleaved({"interleaved:1": result})
    header, row = capsys.readouterr().out.strip().splitlines()[-2:]
    assert "SavedModel XLA" in header and "fp32/xla" in header
    assert "0.50x" in row and "0.80x" in row  # ORT / SavedModel and ORT / SavedModel XLA


def test_an_xla_export_needs_xla(tmp_path, monkeypatch):
    (tmp_path / "saved_model.pb").write_bytes(b"")
    monkeypatch.setattr("sys.argv", ["bench_inference.py", "--parts=onnx", f"--export_dir_xla={tmp_path}"])
    with pytest.raises(SystemExit, match="--export_dir_xla is timed with --xla"):
        load_benchmark("bench_inference").main()


def test_an_xla_export_needs_the_export_it_was_made_from(tmp_path, monkeypatch):
    """Without --export_dir the benchmark exports both models itself; a given --export_dir_xla would be dropped."""
    (tmp_path / "saved_model.pb").write_bytes(b"")
    monkeypatch.setattr("sys.argv", ["bench_inference.py", "--parts=onnx", "--xla", f"--export_dir_xla={tmp_path}"])
    with pytest.raises(SystemExit, match="--export_dir_xla is --export_dir's model exported with --use_xla=true"):
        load_benchmark("bench_inference").main()


def test_an_xla_export_folder_must_hold_a_savedmodel(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["bench_inference.py", "--parts=onnx", "--xla", f"--export_dir_xla={tmp_path}"])
    with pytest.raises(SystemExit, match=f"--export_dir_xla={tmp_path}: expected a SavedModel folder"):
        load_benchmark("bench_inference").main()


def test_part_onnxs_litert_models_come_from_the_export_in_whole_calls(bench, mrpc_classifier, mrpc_export,
                                                                        tmp_path, monkeypatch):
    """prep_ours_onnx converts serving_default to LiteRT from the same model exported in whole calls
    (export_dir_whole: LiteRT cannot convert the steps' loop); with the stepped export alone it says why it
    has no LiteRT rows instead of failing. The ONNX quantization is stubbed (not what this checks)."""
    import onnx

    import model_options
    import encoder
    import onnx_export
    import run_classifier
    import serving
    import tensorflow as tf
    monkeypatch.setattr(bench, "_tf", lambda: tf)  # this process's TensorFlow runs already: no thread settings
    monkeypatch.setattr(onnx, "load", lambda path: path)
    monkeypatch.setattr(onnx_export, "quantized", lambda model: b"int8")
    (tmp_path / "m.onnx").write_bytes(b"float32")
    ctx = {"export_dir": mrpc_export["export_dir"],
           "ours_onnx": {"float32": str(tmp_path / "m.onnx"), "int8": str(tmp_path / "m_int8.onnx")},
           "ours_litert": {"float32": str(tmp_path / "ids.tflite"), "int8": str(tmp_path / "ids_int8.tflite")}}
    skipped = bench.prep_ours_onnx(dict(ctx))
    assert "steps" in skipped["litert"] and not (tmp_path / "ids.tflite").exists()

    job = mrpc_classifier
    options = model_options.ModelOptions(vocab_file=job["vocab_file"], max_seq_length=job["max_seq_length"])
    task = run_classifier.ClassifierTask(encoder.BertConfig.load(job["config_file"]), 2)
    whole = serving.export_saved_model(
        str(tmp_path / "whole"), task.build_model, job["checkpoint"],
        lambda model: serving.ClassifierServing(model, options, False, True, ["0", "1"]),
        settings=serving.ExportSettings(rows_per_step=None))
    made = bench.prep_ours_onnx(dict(ctx, export_dir_whole=whole))
    assert "litert" not in made and made["litert_float32_mb"] > 0 and made["litert_int8_mb"] > 0
    assert (tmp_path / "ids.tflite").stat().st_size > 0 and (tmp_path / "ids_int8.tflite").stat().st_size > 0
