"""Benchmark: create_pretraining_data.py exact and fast mode vs the original's measured figure.

Runs our script as a child process on a corpus (default: ../shared/data/text/conll_train_docs.txt, dupe_factor
10, other flags at their defaults, uncased vocab) and reports wall time, time after imports, instances/s and
peak memory: the child's ru_maxrss from wait4 (its largest process), and "sum MB", the parent's peak plus what
each forked worker added on top of the pages it shares with the parent. With --scale=K it also runs fast mode
on the corpus repeated K times; with --peer it also times tf-models-official's create_pretraining_data (the
original's algorithm and output, pure Python on TF2) under the same machine load.

    .venv/bin/python benchmarks/bench_create_pretraining_data.py [--num_workers=2] [--scale=10] [--peer]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("BERT_SHARED_DIR", os.path.join(ROOT, "..", "shared"))

# The original google-research/bert create_pretraining_data.py (TF 1.x), measured on this machine on
# conll_train_docs.txt with --dupe_factor=10, defaults otherwise, uncased vocab.
ORIGINAL = {"instances": 35415, "wall_s": 19.0, "import_s": 5.7, "peak_mb": 826.0}


def run_child(args, command=None):
    """Runs the script (or `command`); returns (wall s, CPU s, peak RSS MB of the child tree, its log)."""
    command = (command or [sys.executable, os.path.join(ROOT, "create_pretraining_data.py")]) + args
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    with tempfile.TemporaryFile() as log:
        start = time.time()
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.time() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        text = log.read().decode("utf-8", "replace")
    if process.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s" % (" ".join(command[:3]), process.returncode, text[-3000:]))
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0, text


def measure(name, corpus, output, vocab, dupe_factor, extra, command=None):
    wall, cpu, peak, log = run_child(["--input_file=" + corpus, "--output_file=" + output, "--vocab_file=" + vocab,
                                 "--dupe_factor=%d" % dupe_factor] + extra, command)
    instances = int(re.search(r"Wrote (\d+) total instances", log).group(1))
    done = re.search(r"done in ([\d.]+) s", log)
    work = float(done.group(1)) if done else float("nan")
    total = re.search(r"all processes about (\d+) MB", log)
    total_peak = float(total.group(1)) if total else peak
    return {"name": name, "instances": instances, "wall_s": wall, "cpu_s": cpu, "work_s": work, "peak_mb": peak,
            "sum_peak_mb": total_peak}


def import_seconds(statement):
    """Wall seconds of a fresh interpreter running `statement` (median of 3)."""
    times = []
    for _ in range(3):
        start = time.time()
        subprocess.run([sys.executable, "-c", statement], cwd=ROOT, check=True, capture_output=True,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        times.append(time.time() - start)
    return sorted(times)[1]


def row(result, original_rate):
    rate = result["instances"] / result["wall_s"]
    return "%-26s %9d %8.1f %8.1f %8.1f %10.0f %7.1fx %9.0f %9.0f" % (
        result["name"], result["instances"], result["wall_s"], result["cpu_s"], result["work_s"], rate,
        rate / original_rate, result["peak_mb"], result["sum_peak_mb"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=os.path.join(SHARED, "data", "text", "conll_train_docs.txt"))
    parser.add_argument("--vocab", default=os.path.join(SHARED, "vocab", "uncased", "vocab.txt"))
    parser.add_argument("--dupe_factor", type=int, default=10)
    parser.add_argument("--num_workers", type=int, default=2)
    parser.add_argument("--scale", type=int, default=10, help="also run fast mode on the corpus repeated this "
                                                                "many times (0: skip)")
    parser.add_argument("--skip_exact", action="store_true")
    parser.add_argument("--peer", action="store_true",
                        help="also time tf-models-official's create_pretraining_data (the original's algorithm, "
                             "pure Python, TF2) in this run, under the same machine load")
    args = parser.parse_args()
    for path in (args.corpus, args.vocab):
        if not os.path.exists(path):
            sys.exit("not found: %s (set BERT_SHARED_DIR or pass --corpus/--vocab)" % path)
    original_rate = ORIGINAL["instances"] / ORIGINAL["wall_s"]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.tfrecord")
        if args.peer:
            results.append(measure("peer tf-models-official", args.corpus, out, args.vocab, args.dupe_factor, [],
                                   [sys.executable, "-m", "official.nlp.data.create_pretraining_data"]))
        if not args.skip_exact:
            results.append(measure("ours exact", args.corpus, out, args.vocab, args.dupe_factor, []))
        results.append(measure("ours fast, %d workers" % args.num_workers, args.corpus, out, args.vocab,
                               args.dupe_factor, ["--num_workers=%d" % args.num_workers]))
        if args.scale > 1:
            big = os.path.join(tmp, "corpus_x%d.txt" % args.scale)
            with open(args.corpus, "rb") as f:
                text = f.read().rstrip(b"\n") + b"\n\n"
            with open(big, "wb") as f:
                for _ in range(args.scale):
                    f.write(text)
            results.append(measure("ours fast, corpus x%d" % args.scale, big, out, args.vocab, args.dupe_factor,
                                    ["--num_workers=%d" % args.num_workers]))
    print("corpus %s, dupe_factor %d, %d CPU cores" % (args.corpus, args.dupe_factor, os.cpu_count()))
    print("%-26s %9s %8s %8s %8s %10s %8s %9s %9s" % (
        "run", "instances", "wall s", "CPU s", "work s", "inst/s", "vs orig", "peak MB", "sum MB"))
    print("%-26s %9d %8.1f %8s %8.1f %10.0f %7.1fx %9.0f %9s" % (
        "original (measured)", ORIGINAL["instances"], ORIGINAL["wall_s"], "-",
        ORIGINAL["wall_s"] - ORIGINAL["import_s"], original_rate, 1.0, ORIGINAL["peak_mb"], "-"))
    for result in results:
        print(row(result, original_rate))
    base = import_seconds("import numpy, absl.flags, absl.logging")
    ours_import = import_seconds("import create_pretraining_data")
    peers = [r for r in results if r["name"].startswith("peer")]
    if peers:
        peer = peers[0]
        peer_work = max(peer["wall_s"] - ours_import, 1e-9)
        print("same load, relative to the peer (instances/s by wall, by CPU, and after imports, taking the "
              "peer's import time as ours):")
        for result in results[1:]:
            rate = lambda r, key: r["instances"] / r[key]
            print("  %-26s %5.1fx wall  %5.1fx CPU  %5.1fx after imports" % (
                result["name"], rate(result, "wall_s") / rate(peer, "wall_s"),
                rate(result, "cpu_s") / rate(peer, "cpu_s"), result["instances"] / result["work_s"]
                / (peer["instances"] / peer_work)))
    print("start-up: python + numpy + absl %.1f s; import create_pretraining_data %.1f s (no TensorFlow)"
          % (base, ours_import))
    print("wall: whole process; work: after imports (the original's minus its %.1f s TensorFlow import). "
          "peak MB: ru_maxrss of the child (largest process); sum MB: parent peak + what each worker added."
          % ORIGINAL["import_s"])


if __name__ == "__main__":
    main()
