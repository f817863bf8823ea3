"""The `ours` rows: the project's runners (run_classifier.py, run_ner.py, run_squad.py) run as a user runs them,
in --runner_dir; the scores from the files they write, the speed and training loss from their log."""
import json
import os
import re
import shlex
import sys

import finetuning_process as process
from finetuning_recipe import EVAL_BATCH_SIZE, ROOT, WARMUP_PROPORTION


def ours_command(task, recipe, data, model_dir, output_dir, seed, epochs):
    """The runner's command line with the original's flags, as a user types it."""
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
    """The scores the runner wrote: eval_results.txt (GLUE), test/eval_results.txt (CoNLL), eval_results.json
    (SQuAD)."""
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
    """One ours row: the runner's command in its own process, then the scores it wrote; the row's result."""
    cmd = ours_command(task, recipe, data, model_dir, run_dir, seed, epochs)
    log = os.path.join(run_dir, "run.log")
    code, wall, rss, load = process.run_process(cmd, log, timeout)
    if code != 0:
        raise RuntimeError(f"{'timed out' if code is None else f'exit {code}'}; log {log}:\n{process.log_tail(log)}")
    result = dict(scores=ours_scores(recipe, run_dir), wall_s=wall, peak_rss_mb=rss, load_mean=load,
                  command=shlex.join(cmd).replace(ROOT + "/", "").replace(process.RUNNER_DIR + "/", ""))
    result.update(parse_runner_log(log, recipe["train_batch_size"]))
    return result
