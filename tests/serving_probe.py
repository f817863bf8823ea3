"""Seeded requests, valid, odd and malformed, against every signature of an exported SavedModel, in this process.

    python tests/serving_probe.py EXPORT_DIR [EXPORT_DIR ...] --seed=S --count=N [--max_rows=R]

Reads nothing of the project: TensorFlow, tensorflow-text and the export alone. The task is told by the
export's signatures (the classifier's label, NER's tags, SQuAD's answer). Each request is answered or refused;
prints one JSON line per request ({"export", "signature", "kind", "rows", "outcome": "answered" | "refused" |
"wrong", "detail"}) and, after each export's requests, a line {"export", "summary": ...}; the i-th export (from 0)
draws its requests from seed S + i. "wrong" is what a served model must never do: an answer of the wrong
rows or shape, non-finite or non-normalised probabilities, a refusal that names no input, or any error other
than InvalidArgumentError. A request runs in this process: a crash or hang ends the process (the caller sees it).
"""
import argparse
import json
import random
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

    # ---- answers ----

    def check_answer(self, signature, outputs, rows, inputs):
        """None when `outputs` is a right answer of `rows` rows, else what is wrong."""
        outputs = {name: value.numpy() for name, value in outputs.items()}
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


def probe_export(export, export_dir, seed, count, max_rows):
    """Sends `count` requests drawn from `seed` to the export; prints a line per request, then its summary."""
    rng = random.Random(seed)
    probe = Probe(export_dir)
    counts = {"answered": 0, "refused": 0, "wrong": 0}
    start = time.time()
    for _ in range(count):
        signature = rng.choice(sorted(probe.signatures))
        if signature == "serving_default":
            kind, inputs, rows, ok = probe.ids_request(rng, max_rows)
            names = ID_INPUTS
        else:
            kind, inputs, rows, ok = probe.text_request(rng, max_rows)
            names = TEXT_INPUTS
        record = {"export": export, "signature": signature, "kind": kind, "rows": rows,
                  "shapes": {name: list(np.shape(value)) for name, value in inputs.items()}}
        try:
            outputs = probe.run(signature, inputs)
        except tf.errors.InvalidArgumentError as err:
            message = refusal(err.message)
            if names_an_input(message, names):
                record.update(outcome="refused", detail=message)
            else:
                record.update(outcome="wrong", detail="refused without naming an input: " + message)
        except Exception as err:  # pylint: disable=broad-except
            record.update(outcome="wrong", detail=f"{type(err).__name__}: {str(err).strip()[:300]}")
        else:
            problem = probe.check_answer(signature, outputs, rows, inputs)
            if problem is None and not ok:
                problem = "answered a request that must be refused"
            record.update(outcome="wrong" if problem else "answered", detail=problem or "")
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
    args = parser.parse_args()
    for export, export_dir in enumerate(args.export_dirs):
        probe_export(export, export_dir, args.seed + export, args.count, args.max_rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
