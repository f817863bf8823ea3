"""Processes of a script's command line on this machine: a cluster of workers (multi-worker tests), and a run
killed once it has saved a checkpoint."""
import json
import os
import signal
import socket
import subprocess
import time


def free_ports(n):
    """n TCP ports free on 127.0.0.1 now (for the workers of a TF_CONFIG cluster)."""
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def worker_env(tf_config=None, root=None):
    """The environment of a script's process: quiet TensorFlow, TF_CONFIG as given (none: one worker)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    if root:
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    if tf_config:
        env["TF_CONFIG"] = json.dumps(tf_config)
    return env


def start_workers(command, n=2, cwd=None, per_worker=None):
    """Starts `command --distribution_strategy=multi_worker_mirrored` as workers 0 (the chief) .. n-1 of a cluster
    on 127.0.0.1, each with its own TF_CONFIG (and per_worker[index], flags of its own, when given); returns the
    processes (stdout and stderr together, as text)."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(n)]}
    return [subprocess.Popen(list(command) + ["--distribution_strategy=multi_worker_mirrored"]
                             + (list(per_worker[index]) if per_worker else []), cwd=cwd,
                             env=worker_env({"cluster": cluster, "task": {"type": "worker", "index": index}}, cwd),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for index in range(n)]


def run_workers(command, n=2, cwd=None, timeout=600, per_worker=None):
    """Runs start_workers(command, n, per_worker=...) to the end; returns (exit statuses, logs)."""
    procs = start_workers(command, n, cwd, per_worker)
    logs = [p.communicate(timeout=timeout)[0] for p in procs]
    return [p.returncode for p in procs], logs


def kill_at_checkpoint(proc, output_dir, step, timeout):
    """SIGKILLs the running `proc` once output_dir's checkpoint state names model.ckpt-`step` (within timeout
    seconds); fails if the run ended first."""
    state = os.path.join(output_dir, "checkpoint")
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if os.path.exists(state) and f"model.ckpt-{step}" in open(state).read():
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
