"""A run stopped from outside, through run_pretraining.py's command line: a preemption notice (SIGTERM) saves the
step reached and the rerun ends bit-identical to an uninterrupted run (one worker and two); the notice's all-reduce
also agrees on a due progress line, so that two workers end their loops together; a lost worker ends the other
within TensorFlow's heartbeat timeout with one line, and the same commands resume."""
import os
import re
import signal
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import preemption
from tests import tiny
from tests.processes import ROOT, run_workers, script_env, start_workers

PREEMPTED = re.compile(r"^preempted: .*stopped at global step (\d+) and (?:the chief )?saved model\.ckpt-(\d+) in "
                       r"--output_dir \(no step lost\): run the same command again to resume$", re.M)
# The two-worker runs: steps, of which warm-up.
TWO_WORKER_STEPS, TWO_WORKER_WARMUP = 100, 10


def _wait_for_training(output_dir, procs, timeout=240):
    """Waits until the chief has saved its first checkpoint (training starts right after), plus a little."""
    state = os.path.join(output_dir, "checkpoint")
    deadline = time.time() + timeout
    while time.time() < deadline and all(p.poll() is None for p in procs):
        if os.path.exists(state) and "model.ckpt-0" in open(state).read():
            time.sleep(1.5)
            return
        time.sleep(0.05)
    raise AssertionError("training did not start: " + " | ".join(p.stdout.read()[-2000:] for p in procs
                                                                  if p.poll() is not None))


def _assert_same_weights(a, b, step):
    """Two checkpoints' values (by name) equal, bit for bit, at global step `step`."""
    assert sorted(a) == sorted(b) and int(a["global_step"]) == step
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def _weights(output_dir, step):
    return checkpoints.load_checkpoint(os.path.join(output_dir, f"model.ckpt-{step}"))


def _saved_step(log, output_dir):
    """The step a preempted run says it stopped at, checked against the checkpoint it saved."""
    found = PREEMPTED.findall(log)
    assert len(found) == 1, log[-3000:]
    step, saved = map(int, found[0])
    assert step == saved and 0 < step
    latest = checkpoints.CheckpointManager(output_dir).latest_checkpoint()
    assert latest.endswith(f"model.ckpt-{step}")
    assert int(checkpoints.load_checkpoint(latest)["global_step"]) == step
    return step


def test_a_sigterm_while_a_function_is_traced_sets_the_flag_and_leaves_the_graph_alone():
    """Python runs signal handlers in the main thread between two bytecodes, which may be inside a trace: a handler
    that ran TensorFlow ops there would put them into the traced graph (a two-worker run broke so, its step
    function's inputs out of order); the flag is set from the notice's own thread instead."""
    notice = preemption.PreemptionNotice(tf.distribute.get_strategy())

    @tf.function(autograph=False)
    def step(x):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # the main thread's handler runs here, inside the trace
        return x * 2.0

    with notice.watch():
        graph = step.get_concrete_function(tf.constant(1.0)).graph
        deadline = time.time() + 5
        while not notice.flags.numpy().any() and time.time() < deadline:
            time.sleep(0.01)
    assert notice.flags.numpy().tolist() == [1.0]
    assert sorted({op.type for op in graph.get_operations()}) == ["Const", "Identity", "Mul", "Placeholder"]
    assert len(graph.captures) == 0


@pytest.mark.slow
def test_sigterm_saves_the_step_reached_and_the_rerun_ends_as_an_uninterrupted_run(pretraining_run, tmp_path):
    """The session's uninterrupted run's command (tests/fixtures.py), in one loop of all its steps: a SIGTERM once
    training runs stops it after the step in progress with the step reached saved and one line, exit status 143;
    the same command again resumes there and ends with the uninterrupted run's weights."""
    steps = pretraining_run["steps"]
    stopped = str(tmp_path / "stopped")
    command = tiny.pretraining_command(pretraining_run["config_file"], stopped, steps, "--save_checkpoints_steps=1000",
                                       "--iterations_per_loop=1000")
    proc = subprocess.Popen(command, env=script_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    _wait_for_training(stopped, [proc])
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == preemption.PREEMPTED_EXIT_STATUS == 143, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("preempted: a preemption notice (SIGTERM) arrived; ")
    step = _saved_step(err, stopped)
    assert step < steps  # inside a loop of all the steps: the loop stopped after the step in progress
    resumed = subprocess.run(command, env=script_env(), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Resumed from {os.path.join(stopped, f'model.ckpt-{step}')}" in resumed.stderr
    _assert_same_weights(pretraining_run["weights"], _weights(stopped, steps), steps)


# ---------------------------------------------------------------------------------------------------------
# Two workers.


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    """The two-worker runs' model: that of the session's uninterrupted run (a one-layer model of 32)."""
    return tiny.config_file(tmp_path_factory.mktemp("config") / "bert_config.json", num_hidden_layers=1,
                            type_vocab_size=2)


@pytest.fixture(scope="module")
def two_workers(config_file, tmp_path_factory):
    """TWO_WORKER_STEPS steps on two workers without interruption: a dict of command(output_dir, *flags) (the
    two-worker runs' command line) and weights (their end)."""
    work = tmp_path_factory.mktemp("two_workers")

    def command(output_dir, *flags):
        return tiny.pretraining_command(config_file, output_dir, TWO_WORKER_STEPS, *flags, warmup=TWO_WORKER_WARMUP)

    statuses, logs = run_workers(command(work / "plain"))
    assert statuses == [0, 0], [log[-3000:] for log in logs]
    return {"command": command, "weights": _weights(work / "plain", TWO_WORKER_STEPS)}


@pytest.mark.slow
def test_sigterm_on_one_of_two_workers_stops_both_after_one_step_and_the_rerun_ends_as_an_uninterrupted_run(
        two_workers, tmp_path):
    stopped = str(tmp_path / "stopped")
    command = two_workers["command"](stopped, "--save_checkpoints_steps=1000", "--iterations_per_loop=1000")
    procs = start_workers(command)
    _wait_for_training(stopped, procs)
    procs[1].send_signal(signal.SIGTERM)
    logs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [143, 143], [log[-3000:] for log in logs]
    for log in logs:
        assert "a preemption notice (SIGTERM) reached worker 1;" in log
    assert "; stopped at global step" in logs[1] and "the chief saved model.ckpt-" in logs[1]
    step = _saved_step(logs[0], stopped)
    assert PREEMPTED.findall(logs[1]) == [(str(step), str(step))]  # both workers stopped at one step
    assert step < TWO_WORKER_STEPS
    procs = start_workers(command)
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stdout.read()[-3000:]
    _assert_same_weights(two_workers["weights"], _weights(stopped, TWO_WORKER_STEPS), TWO_WORKER_STEPS)


def _line_steps(log):
    return [int(step) for step in re.findall(r"training\.py:\d+\] step (\d+)/\d+: loss = ", log)]


@pytest.mark.slow
def test_two_workers_end_the_loops_a_due_progress_line_cuts_short_together(two_workers, tmp_path):
    """Two workers whose progress lines come due at different times (--log_every_secs=0.3 on the chief, 1000 on
    the other): every loop the chief's clock cuts short ends after the same step on both (agreed in the preemption
    notice's all-reduce; a worker leaving its loop alone would wait in a collective the other never joins), the
    other worker logs its line there too, and the weights equal those of the same two workers without the cuts,
    bit for bit."""
    cut = str(tmp_path / "cut")
    statuses, (chief, worker) = run_workers(two_workers["command"](cut),
                                            per_worker=[["--log_every_secs=0.3"], ["--log_every_secs=1000"]])
    assert statuses == [0, 0], [chief[-3000:], worker[-3000:]]
    chief_steps, worker_steps = _line_steps(chief), _line_steps(worker)
    assert len(worker_steps) >= 5 and worker_steps[-1] == TWO_WORKER_STEPS, worker[-3000:]  # the chief's cuts
    assert set(worker_steps) <= set(chief_steps), (chief_steps, worker_steps)
    _assert_same_weights(two_workers["weights"], _weights(cut, TWO_WORKER_STEPS), TWO_WORKER_STEPS)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_a_lost_worker_ends_the_other_with_one_line_and_the_same_commands_resume(config_file, tmp_path, how):
    """Killed (SIGKILL: its connections close) or frozen (SIGSTOP: a machine gone, no heartbeat)."""
    steps = 3000
    output_dir = str(tmp_path / "out")
    command = tiny.pretraining_command(config_file, output_dir, steps, "--save_checkpoints_steps=20",
                                       "--iterations_per_loop=5", warmup=10)
    procs = start_workers(command)
    _wait_for_training(output_dir, procs)
    procs[1].send_signal(signal.SIGKILL if how == "killed" else signal.SIGSTOP)
    lost_at = time.time()
    try:
        log = procs[0].communicate(timeout=120)[0]
    finally:
        procs[1].kill()
        procs[1].wait()
    took = time.time() - lost_at
    print(f"{how}: the chief exited {took:.1f} s after the worker was lost")
    assert procs[0].returncode == preemption.WORKER_LOST_EXIT_STATUS == 75, log[-3000:]
    # A killed worker's connections close at once, unless the chief had none open to it yet (then, as for a
    # frozen one, its heartbeats stop).
    why = "its connection broke|it stopped sending heartbeats" if how == "killed" else "it stopped sending heartbeats"
    last = log.strip().splitlines()[-1]
    assert re.fullmatch(rf"error: lost worker 1 of the cluster after global step \d+ \(({why})\); the checkpoints in "
                        r"--output_dir up to model\.ckpt-\d+ are kept: start the same command on every worker "
                        r"again to resume", last), log[-3000:]
    assert "Traceback" not in log and "CollectiveReduce" not in log
    assert took < 10 + 20  # TensorFlow's heartbeat timeout (10 s), then the step in progress and the exit
    latest = checkpoints.CheckpointManager(output_dir).latest_checkpoint()
    assert latest.endswith(re.search(r"up to (model\.ckpt-\d+)", last).group(1))
    if how == "frozen":
        return
    short = [arg for arg in command if not arg.startswith("--num_train_steps")] + [
        f"--num_train_steps={checkpoints.global_step_of(latest) + 10}"]
    procs = start_workers(short)
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [log[-3000:] for log in logs]
    assert f"Resumed from {latest}" in logs[0]
