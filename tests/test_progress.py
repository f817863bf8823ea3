"""Progress of long runs, through the scripts' command lines: training logs a line at least every
--log_step_count_steps steps and every --log_every_secs seconds (global step / total, the losses' means since the
line before, learning rate, examples/s, elapsed, ETA) and writes TensorBoard scalars every --save_summary_steps;
evaluation and prediction log examples done / total and ETA. The cadence changes no result: the same final
weights, bit for bit under --deterministic, whatever the flags and across a kill and resume."""
import os
import re
import statistics
import subprocess

import numpy as np
import pytest

import checkpoints
from tests import tiny
from tests.event_files import summary_scalars
from tests.fixtures import PRETRAINING_STEPS as STEPS
from tests.processes import ROOT, assert_ran, kill_at_checkpoint, run_script, script_env
from tests.shared_data import glue, vocab

_LOG_TIME = r"^I\d{4} (\d\d):(\d\d):(\d\d\.\d+) +\d+ training\.py:\d+\] "
TRAIN_LINE = re.compile(_LOG_TIME + r"step (\d+)/(\d+): loss = ([-\d.e+]+), (?:.*, )?lr = ([-\d.e+]+), "
                        r"([\d.]+) examples/s, elapsed (\d+:\d\d:\d\d), ETA (\d+:\d\d:\d\d)$", re.M)
PASS_LINE = re.compile(_LOG_TIME + r"(evaluation|prediction): ([\d,]+)/([\d,]+) examples \((\d+)%\), "
                       r"([\d.]+) examples/s, elapsed (\d+:\d\d:\d\d), ETA (\d+:\d\d:\d\d)$", re.M)


def _seconds(hours, minutes, seconds):
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def train_lines(log):
    """[(time of day in s, step, total, loss)] of a log's training progress lines, in order."""
    lines = [(_seconds(*m.group(1, 2, 3)), int(m.group(4)), int(m.group(5)), float(m.group(6)))
             for m in TRAIN_LINE.finditer(log)]
    return [(t + 86400.0 if lines and t < lines[0][0] else t, *rest) for t, *rest in lines]  # past midnight


def pass_lines(log, what):
    """[(done, total)] of a log's evaluation or prediction progress lines."""
    return [(int(m.group(5).replace(",", "")), int(m.group(6).replace(",", "")))
            for m in PASS_LINE.finditer(log) if m.group(4) == what]


def _assert_same_weights(a, b):
    assert sorted(a) == sorted(b) and int(a["global_step"]) == STEPS
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def _per_step_losses(output_dir):
    """{step: loss} of a run with --save_summary_steps=1 (a step summarised twice, before a kill and after the
    resume, holds the same value twice)."""
    losses = {}
    for step, value in summary_scalars(output_dir)["loss"]:
        assert losses.setdefault(step, value) == value, step
    assert sorted(losses) == list(range(1, STEPS + 1))
    return losses


def _assert_means_since_the_line_before(lines, losses, rel=1e-4):
    """Each line's (or summary's) loss is the mean of the per-step losses since the one before (a line prints 5
    significant digits)."""
    previous = 0
    for step, loss in lines:
        mean = np.mean([losses[s] for s in range(previous + 1, step + 1)])
        assert loss == pytest.approx(mean, rel=rel), (step, loss, mean)
        previous = step


@pytest.mark.slow
def test_training_progress_at_the_step_and_time_cadence_changes_no_result(pretraining_run, tmp_path):
    """run_pretraining.py over 250 fast steps. With the default cadence (and per-step summaries, loops of at most 7
    steps, killed after model.ckpt-100 and resumed): lines with loss, lr, examples/s, elapsed and ETA at steps
    100, 200 and the last, as the run goes. With --log_every_secs=0.5 (step multiples out of the way:
    --log_step_count_steps=1000; the session's uninterrupted run, tests/fixtures.py): a line every half second,
    and TensorBoard scalars every --save_summary_steps (100). Every line's loss is the mean of the steps' losses
    since the line before, and both runs end with the same weights, bit for bit: the killed run resumes from its
    last checkpoint to the uninterrupted run's weights."""
    stepped_dir = str(tmp_path / "stepped")
    command = tiny.pretraining_command(pretraining_run["config_file"], stepped_dir, STEPS, "--save_summary_steps=1",
                                       "--iterations_per_loop=7", "--save_checkpoints_steps=100")
    killed_log = tmp_path / "killed.log"
    with open(killed_log, "w") as log_file:
        proc = subprocess.Popen(command, env=script_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log_file)
        kill_at_checkpoint(proc, stepped_dir, 100, timeout=600)
    killed_at = checkpoints.CheckpointManager(stepped_dir).latest_checkpoint()
    assert killed_at.endswith("model.ckpt-100"), killed_at
    log = assert_ran(subprocess.run(command, env=script_env(), cwd=ROOT, capture_output=True, text=True,
                                    timeout=900)).stderr
    assert f"Resumed from {killed_at} " in log
    resumed_at = int(re.search(r"Resumed from .*model\.ckpt-(\d+) ", log).group(1))
    assert resumed_at >= 100
    stepped_lines = [line for line in train_lines(killed_log.read_text()) if line[1] <= resumed_at]
    stepped_lines += train_lines(log)
    steps = [step for _, step, _, _ in stepped_lines]
    # At least every 100 steps (a loaded machine may add a line after 30 s), the multiples of 100 among them.
    assert {100, 200, STEPS} <= set(steps) and steps[-1] == STEPS, log[-3000:]
    assert all(0 < b - a <= 100 for a, b in zip([0] + steps, steps)), steps
    assert all(total == STEPS for _, _, total, _ in stepped_lines)
    assert stepped_lines[-2][0] < stepped_lines[-1][0] - 0.5  # logged as the run went, not at its end
    assert "ETA 0:00:00" in log.split(f"step {STEPS}/{STEPS}: ")[1].splitlines()[0]
    losses = _per_step_losses(stepped_dir)

    # A line at least every 0.5 s: loops cut in time (the line's clock), not at step multiples.
    every = 0.5
    timed_dir, log = pretraining_run["output_dir"], pretraining_run["log"]
    timed_lines = train_lines(log)
    times, steps = [t for t, _, _, _ in timed_lines], [step for _, step, _, _ in timed_lines]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert len(timed_lines) >= 10 and steps[-1] == STEPS and steps == sorted(set(steps)), log[-3000:]
    assert len([step for step in steps[:-1] if step % 100]) >= len(steps) - 3, steps  # not the step cadence
    # Each gap: the half second, then the step in progress and the host's line; a loaded machine adds some.
    assert every - 0.05 <= statistics.median(gaps) <= every + 0.5, gaps
    assert max(gaps) <= every + 3.0, gaps
    scalars = summary_scalars(timed_dir)
    for tag in ("loss", "masked_lm_loss", "next_sentence_loss", "learning_rate", "examples_per_sec",
                "global_step/sec"):
        assert [step for step, _ in scalars[tag]] == [100, 200, STEPS], tag  # not the time cadence
    assert all(value > 0 for _, value in scalars["examples_per_sec"])
    assert [round(value, 9) for _, value in scalars["learning_rate"]] == [
        round(1e-3 * (STEPS - step) / STEPS, 9) for step in (100, 200, STEPS)]

    _assert_same_weights(checkpoints.load_checkpoint(os.path.join(stepped_dir, f"model.ckpt-{STEPS}")),
                         pretraining_run["weights"])
    for lines in (stepped_lines, timed_lines):
        _assert_means_since_the_line_before([(step, loss) for _, step, _, loss in lines], losses)
    _assert_means_since_the_line_before(scalars["loss"], losses, rel=1e-6)


def _mrpc(tmp_path, train_lines_, dev_lines, test_lines):
    data = tmp_path / "mrpc"
    data.mkdir()
    for split, lines in (("train", train_lines_), ("dev", dev_lines), ("test", test_lines)):
        with open(os.path.join(glue("MRPC"), f"{split}.tsv"), encoding="utf-8") as f:
            (data / f"{split}.tsv").write_text("".join(f.readlines()[:lines + 1]), encoding="utf-8")
    return data


@pytest.mark.slow
def test_fine_tuning_evaluation_and_prediction_log_their_progress(tmp_path):
    """run_classifier.py with --log_every_secs=0 (a line as soon as one can be): a training line after every step,
    and evaluation and prediction lines with examples done / total (the dev and test sets) and ETA, before the
    results are written; extract_features.py's prediction lines likewise."""
    config = tiny.config_file(tmp_path / "bert_config.json", num_hidden_layers=1, type_vocab_size=2)
    data = _mrpc(tmp_path, 64, 100, 60)
    log = assert_ran(run_script(
        "run_classifier.py", "--task_name=MRPC", f"--data_dir={data}", f"--vocab_file={vocab()}",
        f"--bert_config_file={config}", "--max_seq_length=64", f"--output_dir={tmp_path / 'out'}", "--do_train",
        "--do_eval", "--do_predict", "--train_batch_size=8", "--eval_batch_size=8", "--predict_batch_size=8",
        "--num_train_epochs=1", "--log_every_secs=0", quiet=True, timeout=900)).stderr
    assert [step for _, step, _, _ in train_lines(log)] == list(range(1, 9))  # 64 examples / 8 x 1 epoch
    for what, total, results in (("evaluation", 100, "eval_results.txt"), ("prediction", 60, "test_results.tsv")):
        lines = pass_lines(log, what)
        assert [done for done, _ in lines] == list(range(8, total, 8)) + [total], (what, log[-3000:])
        assert {count for _, count in lines} == {total}
        assert log.index(f"{what}: 8/{total} examples") < log.index(os.path.join(str(tmp_path / "out"), results))
        assert re.search(rf"{what}: {total} examples in \d+:\d\d:\d\d \([\d.]+ examples/s\)", log)

    sentences = tmp_path / "sentences.txt"
    with open(os.path.join(data, "dev.tsv"), encoding="utf-8") as f:
        sentences.write_text("".join(line.split("\t")[3] + "\n" for line in list(f)[1:41]), encoding="utf-8")
    checkpoint = checkpoints.CheckpointManager(str(tmp_path / "out")).latest_checkpoint()
    log = assert_ran(run_script(
        "extract_features.py", f"--input_file={sentences}", f"--output_file={tmp_path / 'features.jsonl'}",
        f"--vocab_file={vocab()}", f"--bert_config_file={config}", f"--init_checkpoint={checkpoint}",
        "--max_seq_length=64", "--layers=-1", "--batch_size=16", "--log_every_secs=0", quiet=True,
        timeout=900)).stderr
    assert pass_lines(log, "prediction") == [(16, 40), (32, 40), (40, 40)], log[-3000:]
