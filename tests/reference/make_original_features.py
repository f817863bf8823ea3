"""Makes tests/reference/original_api.json: what the original release's Python API returns and writes for code
written against it, for tests/test_original_api.py.

    git --git-dir=BARE_CLONE_OF_google-research/bert archive HEAD | tar -x -C /tmp/bert
    python tests/reference/make_original_features.py --original_dir=/tmp/bert --original_revision=eedf571

--original_dir is a checkout of https://github.com/google-research/bert. Its run_classifier.py and run_squad.py
(with its tokenization.py, modeling.py, optimization.py) are imported from there as they are, with `tensorflow`
bound to TensorFlow's tf.compat.v1 (what they use of it at import and in these functions is there), each in a
process of its own (the two scripts define the same absl flags). Nothing of the original is copied into this
project, and none of ../shared's data either: the reference keeps digests (digest()) of features, examples and
files, and numbers that carry no text.

1. run_classifier: tests/original_style_processor.py (a user's DataProcessor in the original README's style,
   importing run_classifier from the original's folder here) reads MRPC's dev.tsv and test.tsv; the original's
   convert_examples_to_features makes their features at max_seq_length 128 (dev's also at 24, with a few
   PaddingInputExamples after them), and its file_based_convert_examples_to_features writes dev's at 128 (read
   back here).
2. run_squad: its read_squad_examples and convert_examples_to_features on the first questions of SQuAD 1.1 and
   2.0 dev files, RawResults of logits drawn from each feature's unique_id (result_logits()) and the three files
   its write_predictions writes (2.0 with FLAGS.version_2_with_negative); get_final_text on GET_FINAL_TEXT_CASES
   with FLAGS.verbose_logging on, and what it logged.
"""
import argparse
import hashlib
import importlib
import json
import logging
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHARED = os.path.abspath(os.environ.get("BERT_SHARED_DIR", os.path.join(ROOT, "..", "shared")))
REFERENCE_FILE = os.path.join(HERE, "original_api.json")
PARTS = ("classifier", "squad")

VOCAB = ("vocab", "uncased", "vocab.txt")
MRPC = ("data", "glue", "MRPC")
CLASSIFIER_LENGTHS = {"dev": (128, 24), "test": (128,)}
NUM_PADDING = 3
# (name, SQuAD file, version_2_with_negative, questions used)
SQUAD_RUNS = (("v1", ("data", "squad", "v1.1", "dev-v1.1.json"), False, 120),
              ("v2", ("data", "squad", "v2.0_dev_subset", "dev-v2.0.json"), True, 160))
SQUAD_WINDOWS = {"max_seq_length": 96, "doc_stride": 32, "max_query_length": 24}
SQUAD_DECODING = {"n_best_size": 8, "max_answer_length": 30, "do_lower_case": True}
PREDICTION_FILES = ("predictions.json", "nbest_predictions.json", "null_odds.json")
# (pred_text, orig_text, do_lower_case): texts of this file's own, each taking one of get_final_text's paths.
GET_FINAL_TEXT_CASES = (
    ("steve smith", "Steve Smith's", True),
    ("steve smith", "Steve Smith's", False),
    ("Steve Smith", "Steve Smith's", False),
    ("cafe au lait", "Café  au\tlait!", True),
    ("1998", "(1998)", True),
    ("not there", "Something else entirely", True),
    ("a b", "a\u0000 b", True),
    ("ab", "a\u0301b", True),
    ("東 京", "東京都", True),
    ("new york", "New-York", True),
    ("york", "New-York", True),
    ("hello", "hello", True),
    (" b", "a b", True),
    ("", "empty prediction", True),
)


def digest(value):
    """A short, stable digest of a JSON-able value: the reference keeps these, not the data's text."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def example_digest(example):
    """Digest of a classifier InputExample's guid, texts and label."""
    return digest([example.guid, example.text_a, example.text_b, example.label])


def feature_digest(input_ids, input_mask, segment_ids, label_id, is_real_example):
    """Digest of one classifier feature row (values as lists of ints)."""
    return digest([[int(x) for x in input_ids], [int(x) for x in input_mask], [int(x) for x in segment_ids],
                   int(label_id), int(is_real_example)])


def result_logits(feature):
    """(start_logits, end_logits) of a SQuAD feature, drawn from its unique_id, higher in its context (segment 1):
    the same RawResult on both sides."""
    import numpy as np
    rng = np.random.RandomState(feature.unique_id % (2 ** 31))
    logits = rng.normal(0.0, 3.0, size=(2, len(feature.input_ids))) + 4.0 * np.asarray(feature.segment_ids)
    logits = np.round(logits, 4)
    return [float(x) for x in logits[0]], [float(x) for x in logits[1]]


def shared(*parts):
    return os.path.join(SHARED, *parts)


# ---------------------------------------------------------------------------------------------------------
# The original's side (a process per part; none of this project's modules imported).


def _import_original(original_dir, names):
    """The modules `names` (the original's scripts, and tests/original_style_processor.py, a user's module),
    imported with `tensorflow` bound to tf.compat.v1; the original's folder first on sys.path."""
    import tensorflow as tf
    sys.path[:0] = [original_dir, os.path.dirname(HERE)]
    real = sys.modules["tensorflow"]
    sys.modules["tensorflow"] = tf.compat.v1
    try:
        modules = [importlib.import_module(name) for name in names]
    finally:
        sys.modules["tensorflow"] = real
    for name in ("run_classifier", "run_squad", "tokenization", "modeling"):
        module = sys.modules.get(name)
        if module is not None and os.path.dirname(os.path.abspath(module.__file__)) != os.path.abspath(original_dir):
            raise RuntimeError(f"{name} was imported from {module.__file__}, not from {original_dir}")
    return modules


def classifier_part(original_dir):
    run_classifier, processor_module = _import_original(original_dir, ["run_classifier", "original_style_processor"])
    import tensorflow as tf
    if processor_module.run_classifier is not run_classifier:
        raise RuntimeError("the processor did not get the original's run_classifier")
    tokenization = sys.modules["tokenization"]
    tokenizer = tokenization.FullTokenizer(shared(*VOCAB), do_lower_case=True)
    processor = processor_module.ParaphraseProcessor()
    labels = processor.get_labels()
    out = {"labels": labels, "splits": {}}
    for split, read in (("dev", processor.get_dev_examples), ("test", processor.get_test_examples)):
        examples = read(shared(*MRPC))
        entry = {"examples": [example_digest(e) for e in examples]}
        if split == "dev":
            examples = examples + [run_classifier.PaddingInputExample() for _ in range(NUM_PADDING)]
        for length in CLASSIFIER_LENGTHS[split]:
            features = run_classifier.convert_examples_to_features(examples, labels, length, tokenizer)
            entry[f"features_{length}"] = [feature_digest(f.input_ids, f.input_mask, f.segment_ids, f.label_id,
                                                          f.is_real_example) for f in features]
        out["splits"][split] = entry
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "dev.tf_record")
        examples = processor.get_dev_examples(shared(*MRPC))
        run_classifier.file_based_convert_examples_to_features(examples, labels, 128, tokenizer, path)
        rows = []
        for record in tf.compat.v1.io.tf_record_iterator(path):
            feature = tf.train.Example.FromString(record).features.feature
            values = {name: list(feature[name].int64_list.value) for name in feature}
            rows.append(feature_digest(values["input_ids"], values["input_mask"], values["segment_ids"],
                                       values["label_ids"][0], values["is_real_example"][0]))
        out["splits"]["dev"]["records_128"] = rows
    return out


def squad_part(original_dir):
    (run_squad,) = _import_original(original_dir, ["run_squad"])
    import tensorflow as tf
    tokenization = sys.modules["tokenization"]
    flags = run_squad.FLAGS
    flags([sys.argv[0]])
    tokenizer = tokenization.FullTokenizer(shared(*VOCAB), do_lower_case=SQUAD_DECODING["do_lower_case"])
    out = {"runs": {}, "get_final_text": []}
    for name, path, version_2, num_questions in SQUAD_RUNS:
        flags.version_2_with_negative = version_2
        examples = run_squad.read_squad_examples(shared(*path), is_training=False)[:num_questions]
        features = []
        run_squad.convert_examples_to_features(examples, tokenizer, is_training=False, output_fn=features.append,
                                               **SQUAD_WINDOWS)
        results = [run_squad.RawResult(f.unique_id, *result_logits(f)) for f in features]
        with tempfile.TemporaryDirectory() as scratch:
            paths = [os.path.join(scratch, file_name) for file_name in PREDICTION_FILES]
            run_squad.write_predictions(examples, features, results, SQUAD_DECODING["n_best_size"],
                                        SQUAD_DECODING["max_answer_length"], SQUAD_DECODING["do_lower_case"], *paths)
            files = {}
            for file_name, file_path in zip(PREDICTION_FILES, paths):
                if os.path.exists(file_path):
                    with open(file_path, encoding="utf-8") as f:
                        text = f.read()
                    files[file_name] = {"digest": digest(text), "entries": {
                        qas_id: digest(value) for qas_id, value in json.loads(text).items()}}
        out["runs"][name] = {"num_examples": len(examples), "num_features": len(features),
                             "features": [digest([f.unique_id, f.example_index, f.doc_span_index, f.tokens,
                                                  sorted(f.token_to_orig_map.items()),
                                                  sorted(f.token_is_max_context.items()), f.input_ids,
                                                  f.input_mask, f.segment_ids]) for f in features],
                             "files": files}
    flags.verbose_logging = True
    messages = []

    class Collect(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)
    logging.getLogger("tensorflow").addHandler(Collect())
    for pred_text, orig_text, do_lower_case in GET_FINAL_TEXT_CASES:
        del messages[:]
        result = run_squad.get_final_text(pred_text, orig_text, do_lower_case)
        out["get_final_text"].append({"case": [pred_text, orig_text, do_lower_case], "result": result,
                                      "logged": list(messages)})
    return out


def worker(args):
    part = {"classifier": classifier_part, "squad": squad_part}[args.part](args.original_dir)
    with open(args.output, "w") as f:
        json.dump(part, f)


# ---------------------------------------------------------------------------------------------------------


def main(args):
    import tensorflow as tf
    result = {"made_by": "tests/reference/make_original_features.py",
              "original": {"repository": "https://github.com/google-research/bert",
                           "revision": args.original_revision},
              "tensorflow": tf.__version__}
    with tempfile.TemporaryDirectory() as scratch:
        for part in PARTS:
            output = os.path.join(scratch, part + ".json")
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", f"--part={part}",
                                   f"--original_dir={args.original_dir}", f"--output={output}"],
                                  capture_output=True, text=True, env=env, cwd=os.path.dirname(HERE))
            if proc.returncode != 0:
                raise RuntimeError(f"the original's {part} failed:\n{proc.stderr[-5000:]}")
            with open(output) as f:
                result[part] = json.load(f)
            print(f"{part}: done", flush=True)
    with open(REFERENCE_FILE, "w") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote", REFERENCE_FILE)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--original_dir", required=True, help="a checkout of google-research/bert")
    parser.add_argument("--original_revision", default="unknown", help="its commit, recorded in the output")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not os.path.isfile(os.path.join(args.original_dir, "run_classifier.py")):
        parser.error(f"--original_dir={args.original_dir}: no run_classifier.py there (a google-research/bert "
                     "checkout)")
    return args


if __name__ == "__main__":
    parsed = parse_args(sys.argv[1:])
    if parsed.worker:
        worker(parsed)
    else:
        main(parsed)
