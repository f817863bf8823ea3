"""benchmarks/bench_finetuning.py and its modules: the report's verdicts (per task, held-out seeds, every seed),
the command's checks, the original recipe in PyTorch against optimization.py, and the hf rows' SQuAD windows
against run_squad.py's training."""
import pytest

from tests.benchmark_modules import load_benchmark  # first: puts benchmarks/ on sys.path for the imports below
from tests.event_files import summary_scalars
from tests.shared_data import minilm_dir, shared_path

import finetuning_report as report
from finetuning_hf import _squad_encode, hf_tokenizer, read_squad, squad_best_spans, squad_window_labels
from finetuning_original_recipe import (OriginalAdamWeightDecay, OriginalSchedule, original_batches,
                                        original_step_counts, train_pad_embedding_like_original)
from finetuning_ours import parse_runner_log
from finetuning_process import cpu_description
from finetuning_recipe import IMPLS, RECIPES, SWEEP_LEARNING_RATES, effective_recipe, recipe_key, row_key


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_finetuning")


def _entry(args, impl, task, rate=None, **scores):
    return {"scores": scores, "recipe_key": recipe_key(effective_recipe(task, args, rate, impl))}


def _rows(args, rows):
    """{row_key: entry} from (impl, task, rate or None for the recipe's, seed, scores)."""
    return {row_key("full", impl, task, rate or RECIPES[task]["learning_rate"], seed):
            _entry(args, impl, task, rate, **scores) for impl, task, rate, seed, scores in rows}


def test_seed_spread_is_the_widest_side():
    entries = {"ours": [{"scores": {"accuracy": 58.8}}, {"scores": {"accuracy": 54.2}}],
               "hf": [{"scores": {"accuracy": 56.7}}, None]}
    assert report.seed_spread(entries, ["accuracy"])["accuracy"] == pytest.approx(4.6)
    assert report.seed_spread({"ours": [None], "hf": []}, ["accuracy"]) == {"accuracy": 0.0}


@pytest.mark.parametrize("diff, spread, expected", [
    ({"accuracy": 0.0, "f1": 2.0}, {"accuracy": 0.0, "f1": 0.0}, "at or above"),
    ({"accuracy": -0.5, "f1": 2.0}, {"accuracy": 4.4, "f1": 0.0}, "within the seed spread"),
    ({"accuracy": -4.4, "f1": 2.0}, {"accuracy": 4.4, "f1": 0.0}, "within the seed spread"),
    ({"accuracy": 3.0, "f1": -0.2}, {"accuracy": 4.4, "f1": 0.1}, "BELOW (F1 -0.2, spread 0.1)"),
])
def test_verdict(diff, spread, expected):
    assert report.verdict(diff, spread, ["accuracy", "f1"]) == expected


# RTE rows of seeds 0-2 for ours and the matched row, and an hf row that RTE (no sweep) never compares.
RTE_SEEDS_0_TO_2 = [
    ("ours", "rte", None, 0, dict(accuracy=58.8)), ("ours", "rte", None, 1, dict(accuracy=54.2)),
    ("hf_matched", "rte", None, 0, dict(accuracy=56.7)), ("hf_matched", "rte", None, 1, dict(accuracy=56.3)),
    ("ours", "rte", None, 2, dict(accuracy=50.0)), ("hf_matched", "rte", None, 2, dict(accuracy=56.0)),
    ("hf", "rte", None, 2, dict(accuracy=99.0)),
]


def test_heldout_section_compares_only_other_seeds_against_the_table_spread(bench):
    args = bench.parse_args(["--report"])
    cache = _rows(args, RTE_SEEDS_0_TO_2 + [
        ("ours", "mrpc", None, 2, dict(accuracy=80.0, f1=86.0)),
        ("hf_matched", "mrpc", None, 2, dict(accuracy=74.0, f1=83.0)),
        ("ours", "cola", None, 2, dict(mcc=20.0)),
    ])
    cache[row_key("full", "hf_matched", "stsb", 2e-5, 3)] = {"scores": {"pearson": 1.0, "spearman": 1.0},
                                                                   "recipe_key": "another recipe"}
    best, unswept = report.best_rates(cache, "full", args)
    text = "\n".join(report.heldout_section(args, cache, "full", [0, 1], [2, 3], best, unswept))
    assert ("| RTE | acc | 2 | same recipe: ours vs hf, original recipe | 50.0 (2e-05) | 56.0 (2e-05) | -6.0 | 4.6 "
            "| BELOW (acc -6.0, spread 4.6) |") in text
    assert ("| MRPC | acc / F1 | 2 | same recipe: ours vs hf, original recipe | 80.0 / 86.0 (2e-05) | "
            "74.0 / 83.0 (2e-05) | +6.0 / +3.0 | 0.0 / 0.0 | at or above |") in text
    assert "99.0" not in text
    assert "CoLA same recipe seed 2 (hf, original recipe missing)" in text
    assert "STS-B" not in text  # its only held-out row was cached with another recipe
    assert "| RTE | acc | 0 |" not in text and "| RTE | acc | 1 |" not in text
    empty = "\n".join(report.heldout_section(args, {}, "full", [0, 1], [], best, unswept))
    assert "No run with a seed outside the table's (0,1) yet" in empty


def test_every_seed_section_pools_the_table_and_heldout_seeds_with_twice_the_standard_error(bench):
    args = bench.parse_args(["--report"])
    cache = _rows(args, RTE_SEEDS_0_TO_2 + [
        ("ours", "rte", None, 3, dict(accuracy=10.0)),  # one side only: not a seed of the comparison
        ("ours", "mrpc", None, 2, dict(accuracy=80.0, f1=86.0)),  # no more seeds than the table's
        ("hf_matched", "mrpc", None, 2, dict(accuracy=74.0, f1=83.0)),
    ])
    best, unswept = report.best_rates(cache, "full", args)
    text = "\n".join(report.every_seed_section(args, cache, "full", [0, 1], best, unswept))
    # Means 54.33 and 56.33; sample sds 4.40 and 0.35, so 2 x sqrt((4.40^2 + 0.35^2) / 3) = 5.1.
    assert ("| RTE | acc | same recipe: ours (2e-05) vs hf, original recipe (2e-05) | 0,1,2 | 54.3 | 56.3 | "
            "-2.0 ± 5.1 | 8.8 | within the seed spread |") in text
    assert "MRPC" not in text and "99.0" not in text and "10.0" not in text
    assert report.every_seed_section(args, _rows(args, []), "full", [0, 1], best, unswept) == []


def test_best_learning_rate_needs_the_whole_sweep_and_maximises_the_metric_mean(bench):
    args = bench.parse_args(["--report"])
    rows = [("hf", "mrpc", 2e-5, 0, dict(accuracy=74.0, f1=83.0)),
            ("hf", "mrpc", 5e-5, 0, dict(accuracy=80.0, f1=85.0))]
    cache = _rows(args, rows)
    assert report.best_learning_rate(cache, "full", "hf", "mrpc", args)[0] is None
    assert report.best_rates(cache, "full", args)[0]["mrpc"]["hf"] == 2e-5  # incomplete: the recipe's rate
    cache.update(_rows(args, [("hf", "mrpc", 1e-4, 0, dict(accuracy=81.0, f1=83.0))]))
    assert report.best_learning_rate(cache, "full", "hf", "mrpc", args)[0] == 5e-5  # mean 82.5 beats 82.0
    cache.update(_rows(args, [("hf", "mrpc", 1e-4, 1, dict(accuracy=99.0, f1=99.0))]))
    assert report.best_learning_rate(cache, "full", "hf", "mrpc", args)[0] == 5e-5  # only the sweep seed counts
    assert report.best_learning_rate(cache, "full", "hf", "rte", args) == (None, {})  # no sweep for RTE
    table = "\n".join(report.sweep_table(cache, "full", args))
    assert "| MRPC | acc / F1 | hf, its defaults | 74.0 / 83.0 | **80.0 / 85.0** | 81.0 / 83.0 | 5e-05 |" in table


def test_comparison_table_judges_ours_against_the_named_row(bench):
    args = bench.parse_args(["--report"])
    rows = [(impl, "rte", None, seed, dict(accuracy=value)) for impl, seed, value in
            (("ours", 0, 58.0), ("ours", 1, 56.0), ("hf_matched", 0, 59.0), ("hf_matched", 1, 58.0),
             ("hf", 0, 50.0), ("hf", 1, 52.0))]
    looker = report._Rows(_rows(args, rows), "full", args)
    rates = {"rte": {impl: 2e-5 for impl in IMPLS}}
    text = "\n".join(report.comparison_table(looker, [0, 1], rates, "hf_matched"))
    assert "| RTE | acc | hf, original recipe | 2e-05 | 59.0 | 58.0 | 58.5 | -1.5 | within the seed spread |" in text
    assert "| RTE | acc | hf, its defaults | 2e-05 | 50.0 | 52.0 | 51.0 | +6.0 |  |" in text  # no verdict
    assert not looker.missing
    del looker.cache[row_key("full", "hf_matched", "rte", 2e-5, 1)]
    text = "\n".join(report.comparison_table(looker, [0, 1], rates, "hf_matched"))
    assert "| RTE | acc | hf, original recipe | 2e-05 | 59.0 | missing | 59.0 | -2.0 | seeds missing |" in text


def test_train_speed_marks_means_over_different_cpus_and_busy_runs(bench):
    args = bench.parse_args(["--report"])
    rows = [(impl, "rte", None, seed, dict(accuracy=55.0)) for impl in IMPLS for seed in (0, 1)]
    cache = _rows(args, rows)
    xeon, epyc = "2 CPU cores (Intel Xeon), 24 GiB RAM", "2 CPU cores (AMD EPYC), 24 GiB RAM"
    speeds = {"ours": (20.0, 22.0, xeon, xeon, 1.0), "hf_matched": (8.0, 6.0, xeon, epyc, 1.0),
              "hf": (10.0, 10.0, None, epyc, 9.0)}
    for impl, (first, second, machine0, machine1, load) in speeds.items():
        for seed, speed, machine in ((0, first, machine0), (1, second, machine1)):
            entry = cache[row_key("full", impl, "rte", 2e-5, seed)]
            entry.update(train_examples_per_sec=speed, load_mean=load)
            if machine:
                entry["machine"] = machine
    text = "\n".join(report.comparison_table(report._Rows(cache, "full", args), [0, 1],
                                             {"rte": {impl: 2e-5 for impl in IMPLS}}, "hf_matched"))
    assert "| ours | 2e-05 | 55.0 | 55.0 | 55.0 |  |  | 21.0 |" in text  # one CPU: unmarked
    assert "| hf, original recipe | 2e-05 | 55.0 | 55.0 | 55.0 | +0.0 | at or above | 7.0\u2020 |" in text
    assert "| hf, its defaults | 2e-05 | 55.0 | 55.0 | 55.0 | +0.0 |  | 10.0* |" in text  # busy; one CPU recorded


def test_a_row_records_the_revision_it_started_at(bench, tmp_path, monkeypatch):
    head = ["aaaaaaa"]

    def run_while_a_commit_lands(*_):
        head[0] = "bbbbbbb"
        return {"scores": {}}

    monkeypatch.setattr(bench, "git_revision", lambda directory=None: head[0])
    monkeypatch.setattr(bench, "run_hf", run_while_a_commit_lands)
    result = bench.run_row("hf", "rte", RECIPES["rte"], None, None, None, str(tmp_path / "run"), 0,
                           bench.parse_args(["--report"]), "key", [])
    assert result["revision"] == "aaaaaaa"


def test_best_against_best_waits_for_the_whole_sweep(bench):
    args = bench.parse_args(["--report"])
    scores = {"ours": 80.0, "hf_matched": 78.0, "hf": 74.0}
    cache = _rows(args, [(impl, "mrpc", None, seed, dict(accuracy=value, f1=value))
                         for impl, value in scores.items() for seed in (0, 1, 2)])

    def sections():
        best, unswept = report.best_rates(cache, "full", args)
        table = "\n".join(report.comparison_table(report._Rows(cache, "full", args), [0, 1], {"mrpc": best["mrpc"]},
                                                  "hf", unswept))
        return table, "\n".join(report.heldout_section(args, cache, "full", [0, 1], [2], best, unswept)), unswept

    # ours' own sweep is complete (best 5e-5), hf's is not: every row of the task keeps the recipe's rate.
    cache.update(_rows(args, [("ours", "mrpc", rate, 0, dict(accuracy=90.0, f1=90.0)) for rate in (5e-5, 1e-4)]))
    assert report.best_learning_rate(cache, "full", "ours", "mrpc", args)[0] == 5e-5
    table, heldout, unswept = sections()
    assert unswept == ["mrpc", "squad"]
    assert report.best_rates(cache, "full", args)[0]["mrpc"] == {impl: 2e-5 for impl in IMPLS}
    assert "| ours | 2e-05 | 80.0 / 80.0 | 80.0 / 80.0 | 80.0 / 80.0 |" in table
    assert "| hf, its defaults | 2e-05 | 74.0 / 74.0 | 74.0 / 74.0 | 74.0 / 74.0 | +6.0 / +6.0 | sweep incomplete |" \
        in table
    assert "best vs best" not in heldout and "same recipe: ours vs hf, original recipe" in heldout
    cache.update(_rows(args, [(impl, "mrpc", rate, 0, dict(accuracy=50.0, f1=50.0))
                              for impl in scores for rate in (5e-5, 1e-4)]))
    table, heldout, unswept = sections()
    assert unswept == ["squad"]
    assert "| +6.0 / +6.0 | at or above |" in table
    assert "| MRPC | acc / F1 | 2 | best vs best: ours vs hf, its defaults |" in heldout
    # A row outside the verdict with an incomplete sweep keeps the recipe's rate and does not hold the verdict up.
    del cache[row_key("full", "hf_matched", "mrpc", 1e-4, 0)]
    table, heldout, unswept = sections()
    assert unswept == ["squad"] and report.best_rates(cache, "full", args)[0]["mrpc"]["hf_matched"] == 2e-5
    assert "| +6.0 / +6.0 | at or above |" in table
    assert report.unswept_rows(cache, "full", args, unswept) == ["MRPC hf, original recipe"]


@pytest.mark.parametrize("text, expected", [("{not json", "is not valid JSON"),
                                            ("[1, 2]", "expected a JSON object of result rows, got list")])
def test_a_corrupt_results_file_is_one_error_and_left_as_it_is(bench, tmp_path, capsys, text, expected):
    path = tmp_path / "results.json"
    path.write_text(text)
    with pytest.raises(SystemExit) as stop:
        bench.main(["--report", "--tasks=mrpc", f"--shared_dir={shared_path()}", f"--hf_model_dir={minilm_dir()}",
                    f"--results={path}", f"--doc={tmp_path / 'doc.md'}", f"--work_dir={tmp_path / 'work'}"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and expected in err
    assert path.read_text() == text and not (tmp_path / "doc.md").exists()


def test_results_written_before_the_sweep_are_keyed_by_their_learning_rate(bench, tmp_path):
    path = tmp_path / "results.json"
    path.write_text('{"full/ours/mrpc/1": {"recipe": {"learning_rate": 2e-05}, "scores": {}}}')
    assert list(bench.load_cache(str(path))) == ["full/ours/mrpc/2e-05/1"]


@pytest.mark.hf
def test_hf_matched_optimizer_equals_optimization_py():
    """OriginalAdamWeightDecay + OriginalSchedule (PyTorch) take the steps of optimization.py's AdamWeightDecay
    and LinearWarmupDecay from the same weights and gradients: clipping, no bias correction, the weight-decay
    exclusions, warm-up overriding the decay and the lr(k + 1) read."""
    import numpy as np
    import tensorflow as tf
    import torch
    import optimization

    rng = np.random.default_rng(7)
    shapes = {"bert/encoder/layer_0/attention/self/query/kernel": (5, 4),
              "bert/encoder/layer_0/attention/self/query/bias": (4,),
              "bert/embeddings/LayerNorm/gamma": (4,), "output_weights": (3, 4), "output_bias": (3,)}
    init = {name: rng.normal(size=shape).astype(np.float32) for name, shape in shapes.items()}
    steps, warmup, lr = 7, 3, 0.05  # a large rate: bias correction or a wrong schedule would move far
    # Gradient norms from 0.2 to 8: clipping at 1.0 applies on some steps and not on others.
    grads = [{name: (rng.normal(size=shape) * scale).astype(np.float32) for name, shape in shapes.items()}
             for scale in (0.05, 2.0, 0.3, 1.0, 0.1, 3.0, 0.5)]

    tf_vars = {name: tf.Variable(value, name=name.replace("/", "_")) for name, value in init.items()}
    tf_opt = optimization.make_optimizer(lr, steps, warmup)
    tf_opt.build(tf_vars)
    params = {name: torch.nn.Parameter(torch.tensor(value)) for name, value in init.items()}
    torch_opt = OriginalAdamWeightDecay(list(params.items()), weight_decay_rate=0.01)
    schedule = OriginalSchedule(lr, steps, warmup)
    assert original_step_counts(3668, 32, 3.0) == (343, 34)
    assert [schedule(k) for k in range(steps)] == pytest.approx(
        [float(tf_opt.schedule(k + 1)) for k in range(steps)], rel=1e-6, abs=1e-12)
    for k, step_grads in enumerate(grads):
        norm = tf_opt.apply_gradients([(tf.constant(step_grads[n]), tf_vars[n]) for n in shapes])
        for name, p in params.items():
            p.grad = torch.tensor(step_grads[name])
        torch_norm = torch_opt.step(schedule(k))
        torch_opt.zero_grad()
        assert torch_norm == pytest.approx(float(norm), rel=1e-6)
        for name in shapes:
            np.testing.assert_allclose(params[name].detach().numpy(), tf_vars[name].numpy(), rtol=0, atol=1e-6,
                                       err_msg=f"{name} after step {k + 1}")
    moved = max(float(np.abs(tf_vars[n].numpy() - init[n]).max()) for n in shapes)
    assert moved > 0.05  # the comparison is not between two unmoved copies
    # Bias-corrected Adam (torch.optim.AdamW) with the same clipping and rates ends elsewhere: the tolerance
    # tells the two optimizers apart.
    adam_params = {name: torch.nn.Parameter(torch.tensor(value)) for name, value in init.items()}
    adam = torch.optim.AdamW(adam_params.values(), lr=lr, eps=1e-6, weight_decay=0.0)
    for k, step_grads in enumerate(grads):
        for name, p in adam_params.items():
            p.grad = torch.tensor(step_grads[name])
        torch.nn.utils.clip_grad_norm_(adam_params.values(), 1.0)
        for group in adam.param_groups:
            group["lr"] = schedule(k)
        adam.step()
    apart = max(float(np.abs(adam_params[n].detach().numpy() - tf_vars[n].numpy()).max()) for n in shapes)
    assert apart > 1e-3

@pytest.mark.hf
def test_original_batches_pass_over_every_row_then_cross_the_pass_boundary():
    import torch
    batches = original_batches(10, 4, 5, torch.Generator().manual_seed(0))
    assert [len(b) for b in batches] == [4] * 5
    flat = [i for b in batches for i in b]
    assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:20]) == list(range(10))
    assert batches[2] == flat[8:12]  # the third batch holds the end of pass 1 and the start of pass 2


def test_report_without_a_results_file_is_one_error_and_leaves_the_document(bench, tmp_path, capsys):
    doc = tmp_path / "FINETUNING.md"
    doc.write_text("earlier report\n")
    missing = tmp_path / "no-results.json"
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--report", "--tasks=mrpc", f"--shared_dir={shared_path()}", f"--hf_model_dir={minilm_dir()}",
                    f"--results={missing}", f"--doc={doc}", f"--work_dir={tmp_path / 'work'}"])
    assert exit_info.value.code == 2
    assert f"no results file {missing}" in capsys.readouterr().err
    assert doc.read_text() == "earlier report\n"


@pytest.mark.parametrize("flags, expected", [
    (["--tasks=mrpc", "--impls=ours,hf"],
     "the hf mrpc sweep at seed 0 has no row at 5e-05,0.0001 yet (run --tasks=mrpc --impls=hf --seeds=0 "
     "--learning_rates=5e-05,0.0001 first)"),
    (["--tasks=mrpc,rte", "--impls=ours"], "rte has no learning-rate sweep (only mrpc,squad)"),
])
def test_best_rate_runs_stop_before_any_run_when_a_sweep_is_missing(bench, tmp_path, capsys, monkeypatch, flags,
                                                                     expected):
    args = bench.parse_args(["--report"])
    path = tmp_path / "results.json"
    bench.save_cache(str(path), _rows(args, [("ours", "mrpc", rate, 0, dict(accuracy=80.0, f1=85.0))
                                             for rate in SWEEP_LEARNING_RATES]
                                      + [("hf", "mrpc", 2e-5, 0, dict(accuracy=74.0, f1=83.0))]))
    started = []
    monkeypatch.setattr(bench, "convert_minilm", lambda *a: started.append("convert"))
    monkeypatch.setattr(bench, "run_row", lambda *a: started.append(a))
    with pytest.raises(SystemExit) as stop:
        bench.main(flags + ["--seeds=0,1", "--learning_rates=best", f"--shared_dir={shared_path()}",
                            f"--hf_model_dir={minilm_dir()}", f"--results={path}", f"--doc={tmp_path / 'doc.md'}",
                            f"--work_dir={tmp_path / 'work'}"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err
    assert started == [] and not (tmp_path / "doc.md").exists()


def test_ours_training_loss_is_the_mean_over_every_step_of_the_run(tmp_path):
    """training.py logs the mean loss of each loop (up to a checkpoint); the row's train_loss_mean weighs each loop
    by its steps, as the hf rows' mean over their per-step losses."""
    log = tmp_path / "run.log"
    log.write_text("I1126 training.py:549] step 1000/1316: loss = 0.2, lr = 1.2e-05, 72.4 examples/s, ETA 0:02:20\n"
                   "I1126 training.py:549] step 1316/1316: loss = 0.1, lr = 0, 71.6 examples/s, ETA 0:00:00\n"
                   "I1126 training.py:580] Training done at global step 1316 in 600.0 s\n")
    parsed = parse_runner_log(str(log), 32)
    assert parsed["train_loss_mean"] == pytest.approx((1000 * 0.2 + 316 * 0.1) / 1316)
    assert parsed["train_steps_done"] == 1316


def test_a_row_records_which_generation_of_a_cpu_it_ran_on():
    zen3 = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\n"
            "flags\t\t: fpu sse2 avx avx2 fma\n\nprocessor\t: 1\nmodel name\t: other\n")
    zen4 = zen3.replace("model\t\t: 1\n", "model\t\t: 17\n").replace("avx2 fma", "avx2 avx512f fma")
    assert cpu_description(zen3) == "AMD EPYC family 25 model 1 AVX2"
    assert cpu_description(zen4) == "AMD EPYC family 25 model 17 AVX-512"  # same name, another speed
    entry = {"machine": "2 CPU cores (Intel(R) Xeon(R) Processor), 24 GiB RAM, Linux x86_64"}
    assert report.cpu_model(entry) == "Intel(R) Xeon(R) Processor"  # was cut at the first ")"
    assert report.cpu_model({"machine": f"2 CPU cores ({cpu_description(zen4)}), 24 GiB RAM"}) == \
        "AMD EPYC family 25 model 17 AVX-512"
    assert report.cpu_model({}) is None


SQUAD_RECIPE = dict(max_seq_length=256, doc_stride=128, n_best_size=20, max_answer_length=30)


def _hf_squad_windows(recipe):
    """The hf rows' windows and labels of the first 300 questions of the SQuAD training file the table uses:
    (examples, encoding, starts, ends); their long contexts give several windows, some without the answer."""
    import os
    examples = read_squad(shared_path("data", "squad", "v1.1", "dev-v1.1.articles00-37.json"))[:300]
    enc = _squad_encode(recipe, hf_tokenizer(os.path.join(minilm_dir(), "vocab.txt")), examples)
    starts, ends = squad_window_labels(examples, enc)
    assert len(starts) > len(examples) and 0 < starts.count(0) < len(starts)
    return examples, enc, starts, ends


SQUAD_FEATURE_NAMES = {"input_ids": "input_ids", "input_mask": "attention_mask", "segment_ids": "token_type_ids",
                       "start_positions": "start_positions", "end_positions": "end_positions"}  # ours: HF's


def squad_feature_arrays(enc, starts, ends):
    """HF tokenizer windows (enc) and their labels as int32 arrays named as the runners' SQuAD features
    (input_ids, input_mask, segment_ids, start_positions, end_positions)."""
    import numpy as np
    columns = dict(enc, start_positions=starts, end_positions=ends)
    return {ours: np.asarray(columns[hf], np.int32) for ours, hf in SQUAD_FEATURE_NAMES.items()}


def hf_squad_batch(arrays):
    """Arrays named as the runners' SQuAD features (squad_feature_arrays) as the keyword tensors of HF's
    BertForQuestionAnswering: int64, the positions flattened to [batch]."""
    import numpy as np
    import torch
    return {hf: torch.tensor(np.asarray(arrays[ours]).reshape(-1) if ours.endswith("_positions") else arrays[ours],
                             dtype=torch.long) for ours, hf in SQUAD_FEATURE_NAMES.items()}


def squad_short_windows(enc, starts, ends, length, count):
    """The first `count` windows whose tokens and answer lie within `length` tokens, cut there (so the loss is that
    of the whole window): squad_feature_arrays' arrays; fewer rows where fewer windows fit."""
    import numpy as np
    arrays = squad_feature_arrays(enc, starts, ends)
    short = np.flatnonzero((arrays["input_mask"][:, length:].sum(axis=1) == 0)
                           & (arrays["end_positions"] < length))[:count]
    return {name: value[short][:, :length] if value.ndim == 2 else value[short] for name, value in arrays.items()}


@pytest.mark.slow
@pytest.mark.hf
def test_run_squad_training_takes_the_matched_hf_rows_steps_on_the_same_batches(tmp_path):
    """SQuAD fine-tuning through training.py (SquadTask, full-length batches as run_squad.py trains on: the
    start/end softmax spans the padding, as the original's; AdamWeightDecay) and
    the hf_matched row's loop (BertForQuestionAnswering, OriginalAdamWeightDecay, OriginalSchedule), from the
    same MiniLM weights and output layer, on the same windows of real SQuAD questions, dropout off: the same loss
    at every step and the same weights after them, the [PAD] embedding included (HF's padding_idx would freeze
    it; the hf_matched row lets it learn as the original does). So what differs between the two rows is the
    windows, the order and the dropout draws, not the training arithmetic."""
    import numpy as np
    import torch
    import transformers
    import json
    import os
    import checkpoints
    import conversions
    import encoder
    import run_squad
    import runner
    import training

    steps, batch_size = 6, 8
    _, enc, starts, ends = _hf_squad_windows(SQUAD_RECIPE)
    assert len(starts) >= steps * batch_size
    take = np.random.default_rng(3).permutation(len(starts))[:steps * batch_size]
    arrays = {name: value[take] for name, value in squad_feature_arrays(enc, starts, ends).items()}

    prefix = conversions.hf_to_original(minilm_dir(), str(tmp_path / "minilm"))
    with open(os.path.join(minilm_dir(), "config.json")) as f:
        hf_config = json.load(f)
    config = encoder.BertConfig.from_json_file(os.path.join(str(tmp_path / "minilm"), "bert_config.json"))
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
    config.to_json_file(str(tmp_path / "no_dropout.json"))
    output_dir = str(tmp_path / "ours")
    training.train(run_squad.SquadTask(config), runner.array_input_fn(arrays, is_training=False, trim=False),
                   training.TrainingConfig(output_dir=output_dir, train_batch_size=batch_size, learning_rate=1e-4,
                                           num_train_steps=60, num_warmup_steps=steps - 1, save_summary_steps=1,
                                           save_checkpoints_steps=1000), init_checkpoint=prefix)
    ours_losses = [value for _, value in summary_scalars(output_dir)["loss"]]
    start = checkpoints.load_checkpoint(os.path.join(output_dir, "model.ckpt-0"))
    end = checkpoints.load_checkpoint(os.path.join(output_dir, f"model.ckpt-{steps}"))

    assert hf_config["hidden_act"] == "gelu" and config.hidden_act == "gelu_exact"

    def hf_run(rate):
        """The hf_matched loop over the same batches; rate(k) is update k's learning rate."""
        model = transformers.BertForQuestionAnswering.from_pretrained(
            minilm_dir(), hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        train_pad_embedding_like_original(model)
        with torch.no_grad():
            model.qa_outputs.weight.copy_(torch.tensor(start["cls/squad/output_weights"]))
            model.qa_outputs.bias.copy_(torch.tensor(start["cls/squad/output_bias"]))
        optimizer = OriginalAdamWeightDecay(list(model.named_parameters()), weight_decay_rate=0.01)
        model.train()
        losses = []
        for k in range(steps):
            rows = slice(k * batch_size, (k + 1) * batch_size)
            loss = model(**hf_squad_batch({name: value[rows] for name, value in arrays.items()})).loss
            loss.backward()
            optimizer.step(rate(k))
            optimizer.zero_grad()
            losses.append(loss.item())
        return model, losses

    schedule = OriginalSchedule(1e-4, 60, steps - 1)
    model, hf_losses = hf_run(schedule)
    _, late_losses = hf_run(schedule.rate)  # lr(k) instead of lr(k + 1): one step late on the schedule

    assert len(ours_losses) == steps
    assert ours_losses[-1] < ours_losses[0] - 0.5  # they trained, at a rate where a different step would show
    np.testing.assert_allclose(ours_losses, hf_losses, rtol=1e-3)
    # The tolerance tells apart a schedule read one step late.
    assert max(abs(a - b) / b for a, b in zip(ours_losses, late_losses)) > 1e-2
    moved = np.abs(end["cls/squad/output_weights"] - start["cls/squad/output_weights"]).max()
    np.testing.assert_allclose(end["cls/squad/output_weights"], model.qa_outputs.weight.detach().numpy(),
                               rtol=0, atol=moved * 1e-2)
    # Adam moves weights of tiny gradients by about lr a step whatever their size, so rounding shows there most.
    name = "bert/encoder/layer_3/attention/self/query/kernel"
    moved = np.abs(end[name] - start[name]).max()
    query = model.bert.encoder.layer[3].attention.self.query.weight.detach().numpy().T
    np.testing.assert_allclose(end[name], query, rtol=0, atol=moved * 0.1)
    # The [PAD] row learns on both sides: the windows' padded positions are in the start/end softmax.
    name = "bert/embeddings/word_embeddings"
    pad_moved = np.abs(end[name][0] - start[name][0]).max()
    assert (arrays["input_mask"] == 0).any() and pad_moved > 1e-5
    np.testing.assert_allclose(end[name][0], model.bert.embeddings.word_embeddings.weight.detach().numpy()[0],
                               rtol=0, atol=pad_moved * 0.1)


@pytest.mark.slow
@pytest.mark.hf
def test_dropout_under_training_costs_what_hfs_costs(tmp_path):
    """Dropout is the one part of a training step the same-batches test turns off. With the same MiniLM weights,
    an output layer fitted to real SQuAD windows (so that noise in the encoder costs loss), the training-mode loss
    of ours (SquadTask, the config's dropout 0.1) and of HF's BertForQuestionAnswering (train mode) have the same
    mean and spread over many draws, the eval-mode losses are equal, and HF at dropout 0.2 is told apart, so the
    test can fail."""
    import numpy as np
    import torch
    import transformers
    import tensorflow as tf
    import checkpoints
    import conversions
    import encoder
    import run_squad

    draws, rows, length = 100, 4, 128
    _, enc, starts, ends = _hf_squad_windows(SQUAD_RECIPE)
    # Windows whose tokens and answer fit in `length`, cut there: the loss is that of the whole window.
    arrays = squad_short_windows(enc, starts, ends, length, rows)
    assert len(arrays["input_ids"]) == rows and arrays["start_positions"].any()
    batch = hf_squad_batch(arrays)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        def hf_model(rate):
            torch.manual_seed(0)
            return transformers.BertForQuestionAnswering.from_pretrained(
                minilm_dir(), hidden_dropout_prob=rate, attention_probs_dropout_prob=rate)

        # The output layer: fitted on the encoder's eval-mode outputs of these windows.
        hf = hf_model(0.1).eval()
        with torch.no_grad():
            hidden = hf.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                             token_type_ids=batch["token_type_ids"]).last_hidden_state
        head = torch.nn.Linear(384, 2)
        fit = torch.optim.Adam(head.parameters(), lr=1e-2)
        for _ in range(200):
            start_logits, end_logits = head(hidden).unbind(-1)
            fit_loss = (torch.nn.functional.cross_entropy(start_logits, batch["start_positions"])
                        + torch.nn.functional.cross_entropy(end_logits, batch["end_positions"])) / 2
            fit.zero_grad()
            fit_loss.backward()
            fit.step()
        head_weight, head_bias = head.weight.detach().numpy(), head.bias.detach().numpy()

        def hf_losses(rate):
            model = hf_model(rate)
            with torch.no_grad():
                model.qa_outputs.weight.copy_(torch.tensor(head_weight))
                model.qa_outputs.bias.copy_(torch.tensor(head_bias))
                clean = model.eval()(**batch).loss.item()
                model.train()
                return clean, np.array([model(**batch).loss.item() for _ in range(draws)])

        hf_eval, hf = hf_losses(0.1)
        _, hf_double = hf_losses(0.2)
    finally:
        torch.set_num_threads(threads)

    prefix = conversions.hf_to_original(minilm_dir(), str(tmp_path / "minilm"))
    config = encoder.BertConfig.from_json_file(str(tmp_path / "minilm" / "bert_config.json"))
    assert config.hidden_dropout_prob == config.attention_probs_dropout_prob == 0.1
    task = run_squad.SquadTask(config)
    model = task.build_model()
    checkpoints.init_from_checkpoint(model.variables_by_name(), prefix)
    model.variables_by_name()["cls/squad/output_weights"].assign(head_weight)
    model.variables_by_name()["cls/squad/output_bias"].assign(head_bias)
    tf.random.set_seed(0)
    features = {name: tf.constant(value) for name, value in arrays.items()}
    loss = tf.function(lambda training: task.compute_loss(model, features, training=training)[0])
    ours_eval = float(loss(False))
    ours = np.array([float(loss(True)) for _ in range(draws)])

    def gap(a, b):
        """|difference of the means| in standard errors of that difference."""
        return abs(a.mean() - b.mean()) / np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))

    print(f"eval {ours_eval:.4f} / {hf_eval:.4f}; dropout 0.1: ours {ours.mean():.4f} sd {ours.std(ddof=1):.4f}, "
          f"hf {hf.mean():.4f} sd {hf.std(ddof=1):.4f}; hf at 0.2: {hf_double.mean():.4f}; "
          f"gaps {gap(ours, hf):.1f} and {gap(hf_double, hf):.1f} standard errors")
    np.testing.assert_allclose(ours_eval, hf_eval, rtol=1e-4)
    assert ours.mean() - ours_eval > 10 * ours.std(ddof=1) / np.sqrt(draws)  # dropout costs loss, clearly
    assert gap(ours, hf) < 4.0
    assert 0.5 < ours.std(ddof=1) / hf.std(ddof=1) < 2.0
    assert gap(hf_double, hf) > 8.0


@pytest.mark.hf
def test_squad_window_labels_and_best_spans_round_trip_on_real_questions():
    """The hf rows' SQuAD windows: a label inside a window spans exactly the answer's tokens, and logits that peak
    at the labels of a question's windows make the selection answer with the gold text."""
    import numpy as np
    examples, enc, starts, ends = _hf_squad_windows(SQUAD_RECIPE)
    start_logits = np.zeros((len(starts), 256), np.float32)
    end_logits = np.zeros((len(starts), 256), np.float32)
    for i, (s, e) in enumerate(zip(starts, ends)):
        start_logits[i, s] = end_logits[i, e] = 10.0
    predictions = squad_best_spans(SQUAD_RECIPE, examples, enc, start_logits, end_logits)
    exact = sum(predictions[qid].strip() == answer.strip() for qid, _, _, answer, _ in examples)
    assert exact >= 0.95 * len(examples), exact
    # The rest are gold answers that cut a word ("8" of "18"): the whole token's text holds them.
    assert all(answer.strip() in predictions[qid] for qid, _, _, answer, _ in examples)

