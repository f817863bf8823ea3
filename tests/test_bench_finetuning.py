"""benchmarks/bench_finetuning.py's judgement: the verdict per task and the held-out seeds section."""
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_finetuning",
                                                  os.path.join(ROOT, "benchmarks", "bench_finetuning.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _entry(bench, args, task, **scores):
    return {"scores": scores, "recipe_key": bench.recipe_key(bench.effective_recipe(task, args))}


def test_seed_spread_is_the_widest_side(bench):
    entries = {"ours": [{"scores": {"accuracy": 58.8}}, {"scores": {"accuracy": 54.2}}],
               "hf": [{"scores": {"accuracy": 56.7}}, None]}
    assert bench.seed_spread(entries, ["accuracy"])["accuracy"] == pytest.approx(4.6)
    assert bench.seed_spread({"ours": [None], "hf": []}, ["accuracy"]) == {"accuracy": 0.0}


@pytest.mark.parametrize("diff, spread, expected", [
    ({"accuracy": 0.0, "f1": 2.0}, {"accuracy": 0.0, "f1": 0.0}, "at or above"),
    ({"accuracy": -0.5, "f1": 2.0}, {"accuracy": 4.4, "f1": 0.0}, "within the seed spread"),
    ({"accuracy": -4.4, "f1": 2.0}, {"accuracy": 4.4, "f1": 0.0}, "within the seed spread"),
    ({"accuracy": 3.0, "f1": -0.2}, {"accuracy": 4.4, "f1": 0.1}, "BELOW (F1 -0.2, spread 0.1)"),
])
def test_verdict(bench, diff, spread, expected):
    assert bench.verdict(diff, spread, ["accuracy", "f1"]) == expected


def test_heldout_section_compares_only_other_seeds_against_the_table_spread(bench):
    args = bench.parse_args(["--report"])
    cache = {
        "full/ours/rte/0": _entry(bench, args, "rte", accuracy=58.8),
        "full/ours/rte/1": _entry(bench, args, "rte", accuracy=54.2),
        "full/hf/rte/0": _entry(bench, args, "rte", accuracy=56.7),
        "full/hf/rte/1": _entry(bench, args, "rte", accuracy=56.3),
        "full/ours/rte/2": _entry(bench, args, "rte", accuracy=50.0),
        "full/hf/rte/2": _entry(bench, args, "rte", accuracy=56.0),
        "full/ours/mrpc/2": _entry(bench, args, "mrpc", accuracy=80.0, f1=86.0),
        "full/hf/mrpc/2": _entry(bench, args, "mrpc", accuracy=74.0, f1=83.0),
        "full/ours/cola/2": _entry(bench, args, "cola", mcc=20.0),
        "full/hf/stsb/3": {"scores": {"pearson": 1.0, "spearman": 1.0}, "recipe_key": "another recipe"},
    }
    text = "\n".join(bench.heldout_section(args, cache, "full", list(bench.RECIPES), [0, 1], [2, 3]))
    assert "| RTE | acc | 2 | 50.0 | 56.0 | -6.0 | 4.6 | BELOW (acc -6.0, spread 4.6) |" in text
    assert "| MRPC | acc / F1 | 2 | 80.0 / 86.0 | 74.0 / 83.0 | +6.0 / +3.0 | 0.0 / 0.0 | at or above |" in text
    assert "CoLA seed 2 (hf missing)" in text
    assert "STS-B" not in text  # its only held-out row was cached with another recipe
    assert "| RTE | acc | 0 |" not in text and "| RTE | acc | 1 |" not in text
    empty = "\n".join(bench.heldout_section(args, {}, "full", list(bench.RECIPES), [0, 1], []))
    assert "No run with a seed outside the table's (0,1) yet" in empty
