"""Peak memory and time of one big request to an exported SavedModel, and its speed at batch 1, 8 and 32.

Exports random-weight BERTs of two sizes (small: L2 H128 A2, intermediate 512; base: BERT-base's L12 H768 A12,
intermediate 3072; vocab: ../shared's uncased 30,522) as the runners export them (`run_classifier.py
--task_name=MRPC --max_seq_length=128` and `run_squad.py --max_seq_length=384 --version_2_with_negative`, both
`--do_train=false --init_checkpoint=... --export_dir=...`), once with `--export_rows_per_step` (the default, or
--rows_per_step) and, for comparison, once with `--export_rows_per_step=0` (whole calls: the model over every
row of a call at once, as exports were before the bound; memory part: the small model's only, --whole_sizes).

Part `memory`: each request in a fresh process that loads the export and answers one small request first (the
one-request baseline); the figure is the process's peak resident memory (VmHWM) during the big request over
its resident memory just before it, and the request's seconds. Requests: classifier `serving_text` with 1,
1,000 and 4,000 max-length pairs (each text over 128 tokens of Gutenberg prose: every pair packs to 128
positions); SQuAD `serving_text` with one question over a context of 10 KB, 100 KB and 1 MB of Gutenberg prose.
Part `steps` (how the default was chosen): classifier exports of --step_choices rows per step (0: whole calls),
loaded in one process, `serving_default` with a request of --step_batch rows (256) timed in alternating rounds,
and each one's peak memory growth for as many max-length pairs to `serving_text`.
Part `speed`: the two classifier exports of a size loaded in one process, `serving_default` (random ids, all
128 positions real) and `serving_text` (MRPC dev pairs) at batch 1, 8 and 32, timed in alternating rounds
(sequences/s: the median over rounds; ratio bounded / whole calls).

    .venv/bin/python benchmarks/bench_serving_memory.py [--sizes=small,base]
        [--parts=memory,speed,steps] [--work_dir=DIR (keeps and reuses the exports)] [--output_json=FILE]
    .venv/bin/python benchmarks/bench_serving_memory.py --quick   # small model, small requests: a smoke run

Reads ../shared ($BERT_SHARED_DIR): the uncased vocab, the Gutenberg books, MRPC dev. Run on an idle machine.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("BERT_SHARED_DIR", os.path.join(ROOT, "..", "shared"))
VOCAB = os.path.join(SHARED, "vocab", "uncased", "vocab.txt")
BOOKS = os.path.join(SHARED, "data", "text", "gutenberg")
MRPC = os.path.join(SHARED, "data", "glue", "MRPC")
SIZES = {"small": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512),
         "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)}
TASKS = {"classifier": ("run_classifier.py", ["--task_name=MRPC", f"--data_dir={MRPC}", "--max_seq_length=128"]),
         "squad": ("run_squad.py", ["--max_seq_length=384", "--version_2_with_negative"])}

# The child that answers one request: loads the export, answers a small request, then the big one.
CHILD = r"""
import json, re, sys, time
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401

def status(name):
    with open("/proc/self/status") as f:
        return int(re.search(name + r":\s+(\d+) kB", f.read()).group(1)) / 1024

export_dir, task, request_file = sys.argv[1:]
serve = tf.saved_model.load(export_dir).signatures["serving_text"]
request = json.load(open(request_file, encoding="utf-8"))
first, second = ("text_a", "text_b") if task == "classifier" else ("question", "context")
def ask(a, b):
    out = serve(**{first: tf.constant(a, tf.string), second: tf.constant(b, tf.string)})
    return {name: value.numpy() for name, value in out.items()}
ask(request[first][:1], [request[second][0][:2000]])
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) restarts from the resident size now
start = time.time()
out = ask(request[first], request[second])
seconds = time.time() - start
rows = len(out["label" if task == "classifier" else "answer"])
windows = len(out["start_logits"]) if task == "squad" else rows
print(json.dumps({"peak_increase_mb": status("VmHWM") - before, "seconds": seconds, "rows": rows,
                  "windows": windows, "baseline_mb": before}))
"""


def log(message):
    print(message, file=sys.stderr, flush=True)


def run(command, **kwargs):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, **kwargs)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:3])} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout


def make_checkpoint(folder, size):
    """A random-weight encoder checkpoint of `size` and its bert_config.json in folder."""
    if os.path.exists(os.path.join(folder, "checkpoint")):
        return
    code = f"""
import os, sys
sys.path.insert(0, {ROOT!r})
import tensorflow as tf
import checkpoints, encoder
config = encoder.BertConfig(vocab_size=30522, max_position_embeddings=512, type_vocab_size=2, **{SIZES[size]!r})
config.to_json_file(os.path.join({folder!r}, "bert_config.json"))
tf.keras.utils.set_random_seed(1)
bert = encoder.BertEncoder(config)
bert(tf.ones([1, 4], tf.int32), tf.ones([1, 4], tf.int32), tf.zeros([1, 4], tf.int32))
checkpoints.CheckpointManager({folder!r}).save(bert.variables_by_name(), 0)
"""
    os.makedirs(folder, exist_ok=True)
    run([sys.executable, "-c", code])


def export(work, size, task, rows_per_step):
    """The export of `task` for `size` with --export_rows_per_step=rows_per_step (made once in work)."""
    checkpoint_dir = os.path.join(work, size, "checkpoint")
    make_checkpoint(checkpoint_dir, size)
    export_dir = os.path.join(work, size, f"{task}_rows{rows_per_step}")
    if not os.path.exists(os.path.join(export_dir, "saved_model.pb")):
        script, flags = TASKS[task]
        log(f"exporting {export_dir}")
        run([sys.executable, os.path.join(ROOT, script), f"--vocab_file={VOCAB}",
             f"--bert_config_file={checkpoint_dir}/bert_config.json", f"--init_checkpoint={checkpoint_dir}/model.ckpt-0",
             f"--output_dir={export_dir}_run", f"--export_dir={export_dir}", f"--export_rows_per_step={rows_per_step}",
             "--do_train=false"] + flags)
    return export_dir


def prose():
    """The Gutenberg books' text, whitespace runs made single spaces."""
    text = []
    for name in sorted(os.listdir(BOOKS)):
        if name.endswith(".txt"):
            with open(os.path.join(BOOKS, name), encoding="utf-8", errors="replace") as f:
                text.append(f.read())
    return re.sub(r"\s+", " ", " ".join(text))


def classifier_request(text, pairs):
    """`pairs` pairs of texts of 160 words each (over 128 tokens: every pair packs to max_seq_length)."""
    words = text.split()
    def piece(i):
        start = (i * 160) % (len(words) - 160)
        return " ".join(words[start:start + 160])
    return {"text_a": [piece(2 * i) for i in range(pairs)], "text_b": [piece(2 * i + 1) for i in range(pairs)]}


def squad_request(text, kilobytes):
    context = text[:kilobytes * 1000].rsplit(" ", 1)[0]
    return {"question": ["Who went to the house of Mr. Woodhouse that evening?"], "context": [context]}


def measure_memory(export_dir, task, request, work):
    with tempfile.NamedTemporaryFile("w", suffix=".json", dir=work, delete=False, encoding="utf-8") as f:
        json.dump(request, f)
    try:
        out = run([sys.executable, "-c", CHILD, export_dir, task, f.name], timeout=3600)
    finally:
        os.unlink(f.name)
    return json.loads(out.strip().splitlines()[-1])


SPEED_CHILD = r"""
import json, sys, time
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401
config = json.loads(sys.argv[1])
models = {name: tf.saved_model.load(path) for name, path in config["exports"].items()}
rng = np.random.default_rng(0)
results = {}
for batch in config["batches"]:
    ids = {"input_ids": tf.constant(rng.integers(1000, 30000, [batch, 128]), tf.int32),
           "input_mask": tf.ones([batch, 128], tf.int32), "segment_ids": tf.zeros([batch, 128], tf.int32)}
    texts = config["texts"]
    repeat = (batch + len(texts["a"]) - 1) // len(texts["a"])
    text = {"text_a": tf.constant((texts["a"] * repeat)[:batch]), "text_b": tf.constant((texts["b"] * repeat)[:batch])}
    for signature, inputs in (("serving_default", ids), ("serving_text", text)):
        if signature not in config["signatures"]:
            continue
        calls = {name: model.signatures[signature] for name, model in models.items()}
        for call in calls.values():
            for _ in range(2):
                call(**inputs)
        times = {name: [] for name in calls}
        for _ in range(config["rounds"]):
            for name, call in calls.items():
                n, start = 0, time.perf_counter()
                while True:
                    call(**inputs)["probabilities"].numpy()
                    n += 1
                    elapsed = time.perf_counter() - start
                    if elapsed >= config["min_round_s"]:
                        break
                times[name].append(batch * n / elapsed)
        results[f"{signature}:{batch}"] = {name: float(np.median(v)) for name, v in times.items()}
print(json.dumps(results))
"""


def measure_speed(exports, batches, signatures, rounds, min_round_s):
    """{signature:batch: {export name: sequences/s}}: the exports loaded in one process, timed in alternating
    rounds (the median over rounds)."""
    import csv  # pylint: disable=import-outside-toplevel
    with open(os.path.join(MRPC, "dev.tsv"), encoding="utf-8-sig") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:65]
    config = {"exports": exports, "batches": batches, "signatures": signatures, "rounds": rounds,
              "min_round_s": min_round_s, "texts": {"a": [row[3] for row in rows], "b": [row[4] for row in rows]}}
    out = run([sys.executable, "-c", SPEED_CHILD, json.dumps(config)], timeout=7200)
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="small,base")
    parser.add_argument("--parts", default="memory,speed,steps")
    parser.add_argument("--rows_per_step", type=int, default=None,
                        help="--export_rows_per_step of the bounded exports (default: the runners' default)")
    parser.add_argument("--pairs", default="1,1000,4000")
    parser.add_argument("--context_kb", default="10,100,1000")
    parser.add_argument("--whole_sizes", default="small",
                        help="the sizes whose whole-call exports are measured too (memory part; BERT-base's would "
                             "need tens of GB for 4,000 pairs)")
    parser.add_argument("--step_choices", default="8,16,32,64,128,0",
                        help="part steps: the --export_rows_per_step values compared (0: whole calls)")
    parser.add_argument("--step_batch", type=int, default=256, help="part steps: the rows of a request")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--min_round_s", type=float, default=2.0)
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--output_json", default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.pairs, args.context_kb, args.rounds, args.min_round_s = "small", "1,40", "10", 2, 0.3
        args.step_choices, args.step_batch = "8,0", 40
    if args.rows_per_step is None:
        sys.path.insert(0, ROOT)
        import serving  # pylint: disable=import-outside-toplevel
        args.rows_per_step = serving.ROWS_PER_STEP
    work = args.work_dir or tempfile.mkdtemp(prefix="bench_serving_memory_")
    os.makedirs(work, exist_ok=True)
    text = prose()
    parts = args.parts.split(",")
    whole_sizes = args.whole_sizes.split(",")
    results = {"rows_per_step": args.rows_per_step, "memory": [], "speed": {}, "steps": {}}
    for size in args.sizes.split(","):
        if "memory" in parts:
            for task, sizes, make in (("classifier", args.pairs, classifier_request),
                                      ("squad", args.context_kb, squad_request)):
                for amount in [int(value) for value in sizes.split(",") if value]:
                    request = make(text, amount)
                    for rows_per_step in [args.rows_per_step] + ([0] if size in whole_sizes else []):
                        figure = measure_memory(export(work, size, task, rows_per_step), task, request, work)
                        figure.update(size=size, task=task, amount=amount, rows_per_step=rows_per_step)
                        results["memory"].append(figure)
                        log(json.dumps(figure))
        if "speed" in parts:
            speed = measure_speed({"bounded": export(work, size, "classifier", args.rows_per_step),
                                   "whole": export(work, size, "classifier", 0)}, [1, 8, 32],
                                  ["serving_default", "serving_text"], args.rounds, args.min_round_s)
            results["speed"][size] = speed
            log(json.dumps({size: speed}))
        if "steps" in parts:
            choices = [int(value) for value in args.step_choices.split(",")]
            exports = {str(rows): export(work, size, "classifier", rows) for rows in choices}
            steps = measure_speed(exports, [args.step_batch], ["serving_default"], args.rounds, args.min_round_s)
            request = classifier_request(text, args.step_batch)
            memory = {str(rows): measure_memory(exports[str(rows)], "classifier", request, work)["peak_increase_mb"]
                      for rows in choices}
            results["steps"][size] = {"speed": steps[f"serving_default:{args.step_batch}"], "memory": memory,
                                      "batch": args.step_batch}
            log(json.dumps({size: results["steps"][size]}))
    print_tables(results)
    if args.output_json:
        with open(args.output_json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    return 0


def print_tables(results):
    if results["memory"]:
        print(f"\nPeak RSS over the one-request baseline (MB) and seconds of one serving_text request; "
              f"bounded: --export_rows_per_step={results['rows_per_step']}, whole: =0")
        print("| model | request | rows (windows) | bounded MB | bounded s | whole MB | whole s |")
        print("|---|---|---|---|---|---|---|")
        keyed = {}
        for r in results["memory"]:
            keyed.setdefault((r["size"], r["task"], r["amount"]), {})[r["rows_per_step"]] = r
        for (size, task, amount), by_step in keyed.items():
            bounded = by_step.get(results["rows_per_step"], {})
            whole = by_step.get(0, {})
            request = f"{amount:,} pairs" if task == "classifier" else f"{amount:,} KB context"
            shape = bounded.get("windows", whole.get("windows"))

            def cell(r, key, fmt):
                return fmt.format(r[key]) if key in r else "-"
            print(f"| {size} | {request} | {shape:,} | {cell(bounded, 'peak_increase_mb', '{:,.0f}')} | "
                  f"{cell(bounded, 'seconds', '{:.2f}')} | {cell(whole, 'peak_increase_mb', '{:,.0f}')} | "
                  f"{cell(whole, 'seconds', '{:.2f}')} |")
    for size, steps in results["steps"].items():
        print(f"\n{size}: one request of {steps['batch']} rows (serving_default; memory: serving_text's max-length "
              "pairs) by --export_rows_per_step (0: whole calls)")
        print("| rows per step | sequences/s | peak RSS growth MB |")
        print("|---|---|---|")
        for rows, speed in steps["speed"].items():
            print(f"| {rows} | {speed:.1f} | {steps['memory'][rows]:,.0f} |")
    for size, speed in results["speed"].items():
        print(f"\n{size}: sequences/s, median of alternating rounds, bounded / whole calls")
        print("| signature:batch | bounded | whole | ratio |")
        print("|---|---|---|---|")
        for key, values in speed.items():
            print(f"| {key} | {values['bounded']:.1f} | {values['whole']:.1f} | "
                  f"{values['bounded'] / values['whole']:.3f} |")


if __name__ == "__main__":
    sys.exit(main())
