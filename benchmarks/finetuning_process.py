"""One row's training as a child process (exit code, wall time, peak RSS, load average), and the revision and
machine it ran at."""
import importlib.metadata
import os
import platform
import shlex
import signal
import subprocess
import time

from finetuning_recipe import DEFAULT_DOC, DEFAULT_RESULTS, ROOT

# Where run_*.py, conlleval.py, squad_evaluation.py and convert_checkpoint.py run: --runner_dir, which
# bench_finetuning.main sets here.
RUNNER_DIR = ROOT
CHILD_ENV = dict(os.environ, TOKENIZERS_PARALLELISM="false")


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
                return None, time.time() - start, usage.ru_maxrss / 1024.0, _mean_load(loads)
            if time.time() >= next_sample:
                loads.append(os.getloadavg()[0])
                next_sample += 5.0
            time.sleep(0.5)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, time.time() - start, usage.ru_maxrss / 1024.0, _mean_load(loads)


def _mean_load(loads):
    return sum(loads) / len(loads) if loads else None


def log_tail(path, lines=15):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


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
