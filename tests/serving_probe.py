"""Seeded requests, valid, odd and malformed, against every signature of an exported SavedModel, in this process.

    python tests/serving_probe.py EXPORT_DIR [EXPORT_DIR ...] --seed=S --count=N [--max_rows=R]
        [--cross_rows=C] [--threads=T]

Reads nothing of the project: TensorFlow, tensorflow-text and the export alone. The task is told by the
export's signatures (the classifier's label, NER's tags, SQuAD's answer). Each request is answered or refused;
prints one JSON line per request ({"export", "signature", "kind", "rows", "bytes", "growth_mb", "outcome":
"answered" | "refused" | "wrong", "detail"}) and, after each export's requests, a line {"export", "summary": ...};
the i-th export (from 0) draws its requests from seed S + i. After the N drawn requests come C requests to
serving_text whose rows differ in shape (kind "cross_rows": a very long word in one row beside many words in
another, one long text beside many empty rows, many rows of lengths far apart), then T threads send the answered
text requests again to the one loaded export at once (kind "threads"): each must get the answer it got alone.
"wrong" is what a served model must never do: an answer of the wrong rows or shape, non-finite or non-normalised
probabilities, a refusal that names no input, any error other than InvalidArgumentError, an answer that differs
under threads, or a call whose peak memory grows past MEMORY_BASE_MB plus MEMORY_PER_BYTE times its bytes (per
thread). A request runs in this process: a crash or hang ends the process (the caller sees it).
"""
import argparse
import concurrent.futures
import json
import random
import re
import sys
import time

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

WORDS = ("the a of and to in is was for on that with as by it he said at from his an be has have are were "
         "company year new market percent government two first million people police minister president "
         "Germany U.S. Dr. Mr. e.g. 3.5 1,000 naïve café résumé Σοφός straße 東京 中文 ☃ 😀").split()
ODD = ["", " ", "\t\n", "\x00", "\x00\x00abc", "\u200b", "\ufeffhello", "e\u0301\u0301\u0301", "😀" * 50,
       "x" * 5000, "word " * 600, "\u3000".join("中文字"), "a\u0300" * 300, "\r\n\r\n", "[CLS] [SEP] [MASK]",
       "\u202fnarrow\u202fspace", "!" * 1000, "\x7f\x1b[31mred", "ǅ" * 40]
INVALID_UTF8 = [b"\xff\xfe", b"abc\x80def", b"\xc3", b"\xed\xa0\x80", b"ok \xe4\xb8 cut"]
TEXT_INPUTS = ("text_a", "text_b", "sentence", "question", "context")
ID_INPUTS = ("input_ids", "input_mask", "segment_ids")
# The most a call may add to the process's peak memory: the model over one step of rows and the tokenizer's
# work, linear in the request's bytes (TensorFlow's own ragged row ids would make it words x longest word).
MEMORY_BASE_MB = 96
MEMORY_PER_BYTE = 64


def memory_mb(name):
    """VmRSS or VmHWM of this process in MB (Linux), None elsewhere."""
    try:
        with open("/proc/self/status") as f:
            return int(re.search(name + r":\s+(\d+) kB", f.read()).group(1)) / 1024
    except (OSError, AttributeError):
        return None


def reset_peak():
    """Restarts the peak (VmHWM) from the current resident size (Linux); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def with_peak_growth(call):
    """(call()'s result or None, its exception or None, how many MB it raised the process's peak memory by, or
    None where that cannot be read)."""
    before, measured = memory_mb("VmRSS"), reset_peak()
    try:
        result, error = call(), None
    except Exception as err:  # pylint: disable=broad-except
        result, error = None, err
    growth = memory_mb("VmHWM") - before if measured and before is not None else None
    return result, error, growth


def request_bytes(inputs):
    return sum(len(text) for texts in inputs.values() for text in texts if isinstance(text, bytes))


def answer_mb(outputs):
    """The size of an answer (numpy arrays) as TensorFlow holds it: a string is 32 bytes (a tstring)."""
    return sum(value.size * (32 if value.dtype.kind in "OSU" else value.itemsize)
               for value in (outputs or {}).values()) / 2 ** 20


def memory_bound_mb(size, calls=1, answer_mb=0.0):  # pylint: disable=redefined-outer-name
    """The most `calls` calls at once of a request of `size` bytes may add to the peak memory: each its linear
    bound plus its answer, twice (the graph's tensor and the copy returned)."""
    return calls * (MEMORY_BASE_MB + MEMORY_PER_BYTE * size / 2 ** 20 + 2 * answer_mb)


def sentence(rng, words=None):
    return " ".join(rng.choice(WORDS) for _ in range(words if words is not None else rng.randint(1, 40)))


def text(rng):
    """A valid, odd or invalid UTF-8 text (bytes)."""
    kind = rng.random()
    if kind < 0.6:
        return sentence(rng).encode()
    if kind < 0.8:
        return rng.choice(ODD).encode()
    if kind < 0.9:
        return rng.choice(INVALID_UTF8)
    return sentence(rng, rng.randint(100, 3000)).encode()


def texts(rng, rows):
    return [text(rng) for _ in range(rows)]


class Probe:
    """The export's signatures and what a right answer of each looks like."""

    def __init__(self, export_dir):
        self.loaded = tf.saved_model.load(export_dir)
        self.signatures = dict(self.loaded.signatures)
        outputs = set(self.signatures["serving_default"].structured_outputs)
        self.task = "squad" if "start_logits" in outputs else "ner" if "label" not in outputs and \
            "probabilities" in outputs else "classifier"
        self.text_inputs = ()
        if "serving_text" in self.signatures:
            self.text_inputs = tuple(sorted(self.signatures["serving_text"].structured_input_signature[1]))
        self.max_positions = None  # learnt from the first refusal of a wide request, else 512

    # ---- requests ----

    def ids_request(self, rng, max_rows):
        """(kind, inputs, rows, ok) of serving_default: ok False for a request that must be refused."""
        rows = rng.choice([0, 1, 1, 2, 3, 8, rng.randint(1, max_rows)])
        width = rng.choice([1, 2, 16, 128, rng.randint(1, 384)])
        ids = np.array([[rng.randrange(0, 30522) for _ in range(width)] for _ in range(rows)], np.int32).reshape(
            rows, width)
        mask = np.ones_like(ids)
        for row in range(rows):
            mask[row, rng.randint(1, width):] = 0
        segments = (np.arange(width)[None, :] >= rng.randint(0, width)).astype(np.int32) * mask
        inputs = {"input_ids": ids, "input_mask": mask, "segment_ids": segments}
        kind = rng.choice(["valid", "valid", "all_masked", "width0", "too_wide", "ids_range", "negative",
                           "mask_value", "segment_range", "shape", "rows"])
        ok = True
        if kind == "all_masked" and rows:
            inputs["input_mask"] = np.zeros_like(ids)
            inputs["segment_ids"] = np.zeros_like(ids)
        elif kind == "width0":
            inputs = {name: np.zeros([rows, 0], np.int32) for name in ID_INPUTS}
            ok = rows == 0
        elif kind == "too_wide":
            wide = rng.choice([513, 600, 1024, 4096])
            inputs = {name: np.pad(value, [[0, 0], [0, wide - width]]) for name, value in inputs.items()}
            ok = rows == 0
        elif kind == "ids_range" and rows:
            inputs["input_ids"] = ids.copy()
            inputs["input_ids"][rng.randrange(rows), rng.randrange(width)] = rng.choice([30522, 2 ** 31 - 1])
            ok = False
        elif kind == "negative" and rows:
            name = rng.choice(ID_INPUTS)
            inputs[name] = inputs[name].copy()
            inputs[name][rng.randrange(rows), rng.randrange(width)] = rng.choice([-1, -(2 ** 31)])
            ok = False
        elif kind == "mask_value" and rows:
            inputs["input_mask"] = inputs["input_mask"].copy()
            inputs["input_mask"][rng.randrange(rows), rng.randrange(width)] = rng.choice([2, 7, 2 ** 31 - 1])
            ok = False
        elif kind == "segment_range" and rows:
            inputs["segment_ids"] = inputs["segment_ids"].copy()
            inputs["segment_ids"][rng.randrange(rows), rng.randrange(width)] = rng.choice([2, 3, 1000])
            ok = False
        elif kind == "shape":
            name = rng.choice(ID_INPUTS[1:])
            inputs[name] = np.ones([rows, width + rng.choice([-1, 1, 5]) if width > 1 else width + 1], np.int32)
            ok = False
        elif kind == "rows":
            name = rng.choice(ID_INPUTS)
            inputs[name] = np.ones([rows + rng.choice([1, 2, 5]), width], np.int32)
            ok = False
        else:
            kind = "valid"
        return kind, inputs, rows, ok

    def text_request(self, rng, max_rows):
        rows = rng.choice([0, 1, 1, 2, 3, 8, rng.randint(1, max_rows)])
        inputs = {name: texts(rng, rows) for name in self.text_inputs}
        kind, ok = "valid", True
        if len(self.text_inputs) == 2 and rng.random() < 0.35:
            kind, ok = "rows", False
            name = rng.choice(self.text_inputs)
            other = rng.choice([r for r in (0, 1, 2, rows + 1, rows + 3, max(rows - 1, 0)) if r != rows])
            inputs[name] = texts(rng, other)
        elif len(self.text_inputs) == 1 and rng.random() < 0.1:
            kind = "ragged"  # one long text and many empty ones: a dense answer [rows, words] would be huge
            inputs[self.text_inputs[0]] = ([sentence(rng, rng.randint(20000, 60000)).encode()]
                                           + [b""] * rng.randint(10, 120))
            rows = len(inputs[self.text_inputs[0]])
        elif rng.random() < 0.15:
            kind = "long"
            name = rng.choice(self.text_inputs)
            inputs[name] = [sentence(rng, rng.randint(2000, 20000)).encode() for _ in range(rows)]
        return kind, inputs, rows, ok

    def warm_up(self):
        """One small valid request to each signature."""
        ids = np.ones([1, 4], np.int32)
        self.run("serving_default", {"input_ids": ids, "input_mask": ids, "segment_ids": 0 * ids})
        if self.text_inputs:
            self.run("serving_text", {name: [b"the dog ran home"] for name in self.text_inputs})

    CROSS_ROWS = ("long_word_beside_words", "long_text_beside_empty_rows", "lengths_far_apart")

    def cross_rows_request(self, rng, shape):
        """serving_text inputs whose rows differ in shape (one of CROSS_ROWS): ("cross_rows", inputs, rows, True)."""
        if shape == "long_word_beside_words":
            rows = rng.randint(2, 5)
            # After 80 words: a text cut after its first tokens keeps them, and the word is read.
            long_word = sentence(rng, 80) + " " + "".join(rng.choice("abcdefghij")
                                                            for _ in range(rng.randint(20_000, 100_000)))
            many = sentence(rng, rng.randint(5_000, 45_000))
            rows_of = [[sentence(rng).encode() for _ in range(rows)] for _ in self.text_inputs]
            crowded = rows_of[self.text_inputs.index("context") if "context" in self.text_inputs
                              else rng.randrange(len(self.text_inputs))]
            first, second = rng.sample(range(rows), 2)
            crowded[first], crowded[second] = long_word.encode(), many.encode()
        elif shape == "long_text_beside_empty_rows":
            rows = rng.randint(500, 5_000)
            rows_of = [[sentence(rng, 3).encode() for _ in range(rows)] for _ in self.text_inputs]
            rows_of[-1] = [b""] * rows
            rows_of[-1][rng.randrange(rows)] = sentence(rng, rng.randint(20_000, 60_000)).encode()
        else:
            rows = rng.randint(20, 200)
            rows_of = [[sentence(rng, int(10 ** rng.uniform(0, 3.5))).encode() if rng.random() < 0.8 else b""
                        for _ in range(rows)] for _ in self.text_inputs]
        return "cross_rows", dict(zip(self.text_inputs, rows_of)), rows, True

    # ---- answers ----

    def check_answer(self, signature, outputs, rows, inputs):
        """None when `outputs` is a right answer of `rows` rows, else what is wrong."""
        row_outputs = {"classifier": ("label", "probabilities", "score"),
                       "ner": ("probabilities", "words", "tags", "num_words"),
                       "squad": ("answer", "start", "end", "score", "null_score_diff")}[self.task]
        if self.task == "squad" and signature == "serving_default":
            row_outputs = ("start_logits", "end_logits")
        for name in row_outputs:
            if name in outputs and outputs[name].shape[0] != rows:
                return f"{name} has {outputs[name].shape[0]} rows for a request of {rows}"
        if signature == "serving_default" and self.task != "classifier":
            width = inputs["input_ids"].shape[1]
            for name, value in outputs.items():
                if value.shape[:2] != (rows, width):
                    return f"{name} has shape {value.shape} for inputs [{rows}, {width}]"
        probabilities = outputs.get("probabilities")
        if probabilities is not None:
            if not np.all(np.isfinite(probabilities)):
                return "non-finite probabilities"
            sums = probabilities.sum(-1)
            if probabilities.size and not np.allclose(sums, 1.0, atol=1e-3):
                return f"probabilities sum to {sums.min()}..{sums.max()}"
        for name in ("start_logits", "end_logits", "score"):
            value = outputs.get(name)
            if value is not None and name != "score" and not np.all(np.isfinite(value)):
                return f"non-finite {name}"
            if value is not None and name == "score" and np.any(np.isnan(value)):
                return "score is NaN"
        if "num_words" in outputs and signature == "serving_text":
            if outputs["tags"].shape != outputs["words"].shape:
                return f"tags {outputs['tags'].shape} and words {outputs['words'].shape} differ"
        return None

    def run(self, signature, inputs):
        function = self.signatures[signature]
        dtype = tf.int32 if signature == "serving_default" else tf.string
        return function(**{name: tf.constant(value, dtype) for name, value in inputs.items()})


BOILERPLATE = ("Graph execution error", "Detected at node", "<stack traces unavailable>", "[[{{node")


def refusal(message):
    """The words of an InvalidArgumentError's message, without TensorFlow's frame (node names, traces)."""
    lines = [line.strip() for line in message.splitlines()]
    return " ".join(line for line in lines if line and not line.startswith(BOILERPLATE))[:400]


def names_an_input(message, names):
    return any(name in message for name in names)


def _drawn_requests(probe, rng, count, max_rows, cross_rows):
    """(signature, kind, inputs, rows, ok): `count` drawn over the signatures, then `cross_rows` to serving_text."""
    for _ in range(count):
        signature = rng.choice(sorted(probe.signatures))
        if signature == "serving_default":
            yield (signature, *probe.ids_request(rng, max_rows))
        else:
            yield (signature, *probe.text_request(rng, max_rows))
    if probe.text_inputs:
        for i in range(cross_rows):
            yield ("serving_text", *probe.cross_rows_request(rng, probe.CROSS_ROWS[i % len(probe.CROSS_ROWS)]))


def _same_answer(first, second):
    """None when two answers to one request agree (strings and integers exactly, floats to 1e-4), else how
    they differ."""
    for name, value in first.items():
        other = second[name]
        if value.shape != other.shape:
            return f"{name} has shape {other.shape}, alone {value.shape}"
        if value.dtype.kind == "f":
            if not np.allclose(value, other, atol=1e-4, equal_nan=True):
                return f"{name} differs by {np.nanmax(np.abs(value - other))}"
        elif not np.array_equal(value, other):
            return f"{name} differs"
    return None


def _threads(probe, export, answered, threads):
    """Sends the answered text requests again from `threads` threads at once; returns the record."""
    record = {"export": export, "signature": "serving_text", "kind": "threads", "rows": threads,
              "requests": len(answered)}
    if not answered:
        return dict(record, outcome="answered", detail="no text request to repeat")
    answered = answered[-2 * threads:]  # the cross-row requests among them
    jobs = [answered[i % len(answered)] for i in range(max(threads, len(answered)))]
    bound = memory_bound_mb(max(request_bytes(inputs) for inputs, _ in jobs), threads,
                            max(answer_mb(alone) for _, alone in jobs))

    def ask(job):
        inputs, alone = job
        outputs = {name: value.numpy() for name, value in probe.run("serving_text", inputs).items()}
        return _same_answer(alone, outputs)

    def ask_at_once():
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            return [problem for problem in pool.map(ask, jobs) if problem]

    problems, error, growth = with_peak_growth(ask_at_once)
    if error is not None:
        problems = [f"{type(error).__name__}: {str(error).strip()[:300]}"]
    record["growth_mb"] = None if growth is None else round(growth, 1)
    if growth is not None and growth > bound:
        problems.append(f"peak memory grew {growth:.0f} MB under {threads} threads (bound {bound:.0f} MB)")
    return dict(record, outcome="wrong" if problems else "answered", detail="; ".join(problems[:3]))


def probe_export(export, export_dir, seed, count, max_rows, cross_rows=0, threads=0):
    """Sends `count` requests drawn from `seed` to the export, then `cross_rows` text requests of rows of different
    shapes, then the answered text requests from `threads` threads at once; prints a line per request, then the
    summary."""
    rng = random.Random(seed)
    probe = Probe(export_dir)
    probe.warm_up()  # a signature's first call loads its kernels and tables: not a request's memory
    counts = {"answered": 0, "refused": 0, "wrong": 0}
    answered_text = []
    start = time.time()
    for signature, kind, inputs, rows, ok in _drawn_requests(probe, rng, count, max_rows, cross_rows):
        names = ID_INPUTS if signature == "serving_default" else TEXT_INPUTS
        size = request_bytes(inputs)
        record = {"export": export, "signature": signature, "kind": kind, "rows": rows, "bytes": size,
                  "shapes": {name: list(np.shape(value)) for name, value in inputs.items()}}
        outputs, error, growth = with_peak_growth(lambda: probe.run(signature, inputs))
        record["growth_mb"] = None if growth is None else round(growth, 1)
        if isinstance(error, tf.errors.InvalidArgumentError):
            message = refusal(error.message)
            if names_an_input(message, names):
                record.update(outcome="refused", detail=message)
            else:
                record.update(outcome="wrong", detail="refused without naming an input: " + message)
        elif error is not None:
            record.update(outcome="wrong", detail=f"{type(error).__name__}: {str(error).strip()[:300]}")
        else:
            outputs = {name: value.numpy() for name, value in outputs.items()}
            problem = probe.check_answer(signature, outputs, rows, inputs)
            if problem is None and not ok:
                problem = "answered a request that must be refused"
            record.update(outcome="wrong" if problem else "answered", detail=problem or "")
            if not problem and signature == "serving_text":
                answered_text.append((inputs, outputs))
        bound = memory_bound_mb(size, answer_mb=answer_mb(outputs))
        if growth is not None and growth > bound and record["outcome"] != "wrong":
            record.update(outcome="wrong", detail=f"peak memory grew {growth:.0f} MB for {size} bytes (bound "
                                                  f"{bound:.0f} MB)")
        counts[record["outcome"]] += 1
        print(json.dumps(record), flush=True)
    if threads:
        record = _threads(probe, export, answered_text, threads)
        counts[record["outcome"]] += 1
        print(json.dumps(record), flush=True)
    print(json.dumps({"export": export, "summary": counts, "task": probe.task,
                      "seconds": round(time.time() - start, 1)}), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("export_dirs", nargs="+", metavar="export_dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--max_rows", type=int, default=40)
    parser.add_argument("--cross_rows", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    for export, export_dir in enumerate(args.export_dirs):
        probe_export(export, export_dir, args.seed + export, args.count, args.max_rows, args.cross_rows,
                     args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
