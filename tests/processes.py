"""Processes of the project's scripts, started as a user starts them: one command line (its exit status and its
one-line user errors), a cluster of workers (TF_CONFIG), a run killed once it has saved a checkpoint, and a
Python program run in a fresh interpreter that does not see the repository."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def script_env(tf_config=None, quiet=True, **extra):
    """The environment of a script's process: no PYTHONPATH (a script finds the project's modules beside it),
    TF_CONFIG as given (none: one worker), TensorFlow's C++ logging at level 2 unless quiet=False (a user's shell,
    which the scripts quiet themselves), and `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TF_CONFIG", "TF_CPP_MIN_LOG_LEVEL")}
    if quiet:
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    if tf_config:
        env["TF_CONFIG"] = json.dumps(tf_config)
    env.update(extra)
    return env


def script_command(script, *args):
    return [sys.executable, os.path.join(ROOT, script)] + [str(arg) for arg in args]


def run_script(script, *args, timeout=600, cwd=ROOT, quiet=False, input=None, **env):
    """Runs `python SCRIPT ARGS` to its end (TensorFlow's logging as a user's shell has it unless quiet);
    returns the CompletedProcess (stdout and stderr as text)."""
    return subprocess.run(script_command(script, *args), capture_output=True, text=True, input=input,
                          env=script_env(quiet=quiet, **env), cwd=str(cwd), timeout=timeout)


def assert_ran(proc):
    """Exit status 0; else fails with the end of stderr."""
    assert proc.returncode == 0, (proc.stdout or "")[-2000:] + (proc.stderr or "")[-3000:]
    return proc


def assert_user_error(proc, *parts):
    """Exit status 2, and stderr ends with one `error: ...` line holding every part; no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), proc.stderr[-3000:]
    for part in parts:
        assert part in last, (part, last)
    return last


def run_isolated(code, *args, cwd=None, timeout=900, **env):
    """Runs the Python program `code` in a fresh interpreter that does not see the repository (python -I: no
    PYTHONPATH, no user site, its own folder first on sys.path), TensorFlow quiet; returns the CompletedProcess.
    What an exported model needs must load there without the project."""
    return subprocess.run([sys.executable, "-I", "-c", code] + [str(arg) for arg in args], capture_output=True,
                          text=True, cwd=str(cwd) if cwd else None, timeout=timeout, env=script_env(**env))


def free_ports(n):
    """n TCP ports free on 127.0.0.1 now (for the workers of a TF_CONFIG cluster)."""
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start_workers(command, n=2, per_worker=None):
    """Starts `command --distribution_strategy=multi_worker_mirrored` as workers 0 (the chief) .. n-1 of a cluster
    on 127.0.0.1, each with its own TF_CONFIG (and per_worker[index], flags of its own, when given); returns the
    processes (stdout and stderr together, as text)."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(n)]}
    return [subprocess.Popen(list(command) + ["--distribution_strategy=multi_worker_mirrored"]
                             + (list(per_worker[index]) if per_worker else []), cwd=ROOT,
                             env=script_env({"cluster": cluster, "task": {"type": "worker", "index": index}}),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for index in range(n)]


def run_workers(command, n=2, timeout=600, per_worker=None):
    """Runs start_workers(command, n, per_worker) to the end; returns (exit statuses, logs)."""
    procs = start_workers(command, n, per_worker)
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


def user_error(options_class, run, *args):
    """What a script's command line ends with when its flags or its job fail with a user error, found in this
    process by cli's own steps (the flags parsed into options_class as cli.main parses them, run(options), the
    error as cli.run prints it): the `error: ...` line. Fails if the job ends without an error or with another one
    (a bug, which keeps its traceback). A script's process as a whole (exit status 2, that line last, no traceback,
    no TensorFlow noise) is checked once per script through run_script."""
    from absl import flags

    import cli
    flag_values = flags.FlagValues()
    cli.define_flags(options_class, flag_values=flag_values)
    flag_values(["script"] + [str(arg) for arg in args])
    try:
        run(cli.options_from_flags(options_class, flag_values))
    except Exception as err:  # pylint: disable=broad-except
        if not cli._is_user_error(err):  # pylint: disable=protected-access
            raise
        return "error: " + cli.one_line(err)
    raise AssertionError(f"no error: {' '.join(str(arg) for arg in args)}")
