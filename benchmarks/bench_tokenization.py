"""Tokenizer throughput on the shared corpora: exact FullTokenizer, FastBertTokenizer, HF tokenizers.

For each corpus: tokens per second (wall clock and per CPU second of this process, best of --repeats), the
ratios fast/exact and fast/HF, and the share of lines whose ids equal the reference (the original's
outputs for reference/tokenization/*.jsonl, the exact tokenizer's, which equal them, elsewhere).

  .venv/bin/python benchmarks/bench_tokenization.py [--shared_dir ../shared] [--batch_size 4096]
"""
import concurrent.futures
import glob
import json
import os
import sys
import time

from absl import app
from absl import flags
from absl import logging

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import fast_tokenization  # noqa: E402
import tokenization  # noqa: E402

FLAGS = flags.FLAGS

# (corpus name, vocab name, do_lower_case, files relative to the shared folder)
CORPORA = (
    ("reference/uncased", "uncased", True, ["reference/tokenization/uncased.jsonl"]),
    ("reference/cased", "cased", False, ["reference/tokenization/cased.jsonl"]),
    ("reference/multi_cased", "multi_cased", False, ["reference/tokenization/multi_cased.jsonl"]),
    ("reference/chinese", "chinese", True, ["reference/tokenization/chinese.jsonl"]),
    ("gutenberg", "uncased", True, ["data/text/gutenberg/*.txt"]),
    ("wikitext-2", "uncased", True, ["data/text/wikitext-2/*.txt"]),
    ("conll_train_docs", "cased", False, ["data/text/conll_train_docs.txt"]),
)


def define_flags():
    flags.DEFINE_string("shared_dir", os.path.join(ROOT, "..", "shared"),
                        "Folder with vocab/, data/ and reference/ (the shared test data).")
    flags.DEFINE_integer("batch_size", 4096, "Lines per FastBertTokenizer / HF encode_batch call.")
    flags.DEFINE_integer("repeats", 3, "Timed passes over each corpus; the best is reported.")
    flags.DEFINE_list("corpora", [c[0] for c in CORPORA], "Corpora to run (names from the table).")
    flags.DEFINE_integer("parallel_batches", 1, "FastBertTokenizer batches tokenized at once (Python threads "
                         "calling the tf.function); 1: one call after another.")
    flags.DEFINE_bool("hf", True, "Also time HF tokenizers' BertWordPieceTokenizer (peer).")


def read_lines(shared_dir, patterns):
    """Non-empty lines of the files, and reference ids where the files are reference jsonl."""
    lines, reference_ids = [], []
    paths = []
    for pattern in patterns:
        found = sorted(glob.glob(os.path.join(shared_dir, pattern)))
        if not found:
            raise ValueError("no file matches %s under --shared_dir=%s" % (pattern, shared_dir))
        paths.extend(found)
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        if path.endswith(".jsonl"):
            for line in data.decode("utf-8").splitlines():
                record = json.loads(line)
                lines.append(record["text"])
                reference_ids.append(record["ids"])
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            logging.info("%s is not UTF-8; reading it as Latin-1", path)
            text = data.decode("latin-1")
        lines.extend(line for line in text.split("\n") if line.strip())
    return lines, (reference_ids or None)


def best_time(fn, repeats):
    """Best (wall seconds, CPU seconds) of `repeats` calls, and the last result."""
    best_wall = best_cpu = float("inf")
    result = None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return best_wall, best_cpu, result


def bench_corpus(shared_dir, vocab_name, do_lower_case, patterns, batch_size, repeats, with_hf,
                 parallel_batches=1):
    import tensorflow as tf

    vocab_file = os.path.join(shared_dir, "vocab", vocab_name, "vocab.txt")
    lines, reference_ids = read_lines(shared_dir, patterns)
    full = tokenization.FullTokenizer(vocab_file, do_lower_case)
    fast = fast_tokenization.FastBertTokenizer(vocab_file, do_lower_case)

    def run_exact():
        return [full.convert_tokens_to_ids(full.tokenize(line)) for line in lines]

    exact = best_time(run_exact, repeats)
    if reference_ids is None:
        reference_ids = exact[2]
    num_tokens = sum(len(ids) for ids in reference_ids)

    tokenize = tf.function(fast.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
    batches = [tf.constant(lines[i:i + batch_size]) for i in range(0, len(lines), batch_size)]
    tokenize(batches[0])  # trace

    def run_fast():
        if parallel_batches <= 1:
            return [tokenize(batch) for batch in batches]
        with concurrent.futures.ThreadPoolExecutor(parallel_batches) as pool:
            return list(pool.map(tokenize, batches))

    fast_result = best_time(run_fast, repeats)
    fast_ids = [ids for batch in fast_result[2] for ids in batch.to_list()]
    results = {"lines": len(lines), "tokens": num_tokens,
               "exact": exact[:2] + (_share_equal(exact[2], reference_ids),),
               "fast": fast_result[:2] + (_share_equal(fast_ids, reference_ids),)}
    if with_hf:
        from tokenizers import BertWordPieceTokenizer

        hf = BertWordPieceTokenizer(vocab_file, lowercase=do_lower_case, clean_text=True,
                                    handle_chinese_chars=True, strip_accents=do_lower_case)

        def run_hf():
            out = []
            for i in range(0, len(lines), batch_size):
                out.extend(hf.encode_batch(lines[i:i + batch_size], add_special_tokens=False))
            return out

        hf_result = best_time(run_hf, repeats)
        results["hf"] = hf_result[:2] + (_share_equal([e.ids for e in hf_result[2]], reference_ids),)
    return results


def _share_equal(ids, reference_ids):
    return sum(a == b for a, b in zip(ids, reference_ids)) / max(len(reference_ids), 1)


def main(argv):
    del argv
    import tensorflow as tf

    names = {c[0]: c for c in CORPORA}
    unknown = [c for c in FLAGS.corpora if c not in names]
    if unknown:
        raise ValueError("--corpora: unknown %s; expected names from %s" % (unknown, sorted(names)))
    print("cores: %d, load average %.1f, TensorFlow %s, batch size %d, parallel batches %d, best of %d" % (
        os.cpu_count(), os.getloadavg()[0], tf.__version__, FLAGS.batch_size, FLAGS.parallel_batches,
        FLAGS.repeats))
    header = "%-22s %7s %8s | %-27s | %-27s | %-27s | %-17s | %-17s" % (
        "corpus", "lines", "tokens", "exact tok/s wall/cpu  same", "fast tok/s wall/cpu   same",
        "HF tok/s wall/cpu     same", "fast/exact w/cpu", "fast/HF w/cpu")
    print(header)
    print("-" * len(header))
    totals = {}
    for name in FLAGS.corpora:
        _, vocab_name, do_lower_case, patterns = names[name]
        r = bench_corpus(FLAGS.shared_dir, vocab_name, do_lower_case, patterns, FLAGS.batch_size,
                         FLAGS.repeats, FLAGS.hf, FLAGS.parallel_batches)
        cells = []
        for kind in ("exact", "fast", "hf"):
            if kind not in r:
                cells.append("%-27s" % "-")
                continue
            wall, cpu, same = r[kind]
            cells.append("%9.0f %9.0f %6.2f%%" % (r["tokens"] / wall, r["tokens"] / cpu, 100 * same))
            totals.setdefault(kind, [0.0, 0.0])
            totals[kind][0] += wall
            totals[kind][1] += cpu
        totals["tokens"] = totals.get("tokens", 0) + r["tokens"]
        fast_wall, fast_cpu = r["fast"][:2]
        ratio_exact = "%7.1fx %7.1fx" % (r["exact"][0] / fast_wall, r["exact"][1] / fast_cpu)
        ratio_hf = ("%7.1fx %7.1fx" % (r["hf"][0] / fast_wall, r["hf"][1] / fast_cpu)) if "hf" in r else "-"
        print("%-22s %7d %8d | %s | %s | %s | %-17s | %-17s" % (
            name, r["lines"], r["tokens"], cells[0], cells[1], cells[2], ratio_exact, ratio_hf))
    fast_wall, fast_cpu = totals["fast"]
    print("all corpora: fast/exact %.1fx wall, %.1fx CPU" % (
        totals["exact"][0] / fast_wall, totals["exact"][1] / fast_cpu), end="")
    if "hf" in totals:
        print("; fast/HF %.1fx wall, %.1fx CPU" % (totals["hf"][0] / fast_wall, totals["hf"][1] / fast_cpu))
    else:
        print()


if __name__ == "__main__":
    define_flags()
    app.run(main)
