"""Code written against the original release's Python API (run_classifier, run_squad, create_pretraining_data,
extract_features) runs here unchanged and gives the original's features, files and records.

References: tests/reference/original_api.json (made by tests/reference/make_original_features.py from the
original's own run_classifier.py and run_squad.py) and ../shared/reference/pretraining_data (the original's
create_pretraining_data.py).
"""
import collections
import contextlib
import itertools
import json
import logging as std_logging
import os
import random
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import cli
import create_pretraining_data as cpd
import extract_features
import modeling
import run_classifier as rc
import run_squad
import tokenization
from tests import original_style_processor
from tests.reference import make_original_features as ref
from tests.shared_data import shared_path
from tests.original_algorithms import original_doc_spans, original_is_max_context

pytestmark = pytest.mark.usefixtures("modeling_defaults")  # the original's API: a fresh namespace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def reference():
    with open(ref.REFERENCE_FILE, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def tokenizer():
    return tokenization.FullTokenizer(shared_path(*ref.VOCAB), do_lower_case=True)


@contextlib.contextmanager
def original_flags(module, **values):
    """module.FLAGS with these values set, as code written for the original sets them; unset afterwards."""
    for name, value in values.items():
        setattr(module.FLAGS, name, value)
    try:
        yield
    finally:
        for name in values:
            delattr(module.FLAGS, name)


def parse_records(path):
    """[{feature: values}] of a TFRecord file of tf.train.Examples."""
    rows = []
    for record in tf.data.TFRecordDataset(path):
        feature = tf.train.Example.FromString(record.numpy()).features.feature
        rows.append({name: list(feature[name].int64_list.value or feature[name].float_list.value)
                     for name in feature})
    return rows


# ---------------------------------------------------------------------------------------------------------
# run_classifier: a user's DataProcessor written as the original's README says.


def test_user_processor_gives_the_originals_examples_and_features(reference, tokenizer, tmp_path):
    want = reference["classifier"]
    processor = original_style_processor.ParaphraseProcessor()
    lines = processor._read_tsv(os.path.join(shared_path(*ref.MRPC), "dev.tsv"))
    assert isinstance(lines, list) and all(type(line) is list for line in lines) and len(lines) == 409
    assert lines[1][0] == "1" and lines == [list(line) for line in lines]
    labels = processor.get_labels()
    assert labels == want["labels"]
    for split, read in (("dev", processor.get_dev_examples), ("test", processor.get_test_examples)):
        examples = read(shared_path(*ref.MRPC))
        assert [ref.example_digest(e) for e in examples] == want["splits"][split]["examples"], split
        if split == "dev":
            examples = examples + [rc.PaddingInputExample() for _ in range(ref.NUM_PADDING)]
        for length in ref.CLASSIFIER_LENGTHS[split]:
            features = rc.convert_examples_to_features(examples, labels, length, tokenizer)
            assert all(isinstance(f, rc.InputFeatures) for f in features)
            got = [ref.feature_digest(f.input_ids, f.input_mask, f.segment_ids, f.label_id, f.is_real_example)
                   for f in features]
            assert got == want["splits"][split][f"features_{length}"], (split, length)
    # One example at a time, and the record file, give the same features.
    dev = processor.get_dev_examples(shared_path(*ref.MRPC))
    single = rc.convert_single_example(0, dev[7], labels, 128, tokenizer)
    assert ref.feature_digest(single.input_ids, single.input_mask, single.segment_ids, single.label_id,
                              single.is_real_example) == want["splits"]["dev"]["features_128"][7]
    padding = rc.convert_single_example(9, rc.PaddingInputExample(), labels, 16, tokenizer)
    assert (padding.input_ids, padding.label_id, padding.is_real_example) == ([0] * 16, 0, False)
    path = str(tmp_path / "dev.tf_record")
    assert rc.file_based_convert_examples_to_features(dev, labels, 128, tokenizer, path) == len(dev)
    rows = parse_records(path)
    assert [ref.feature_digest(r["input_ids"], r["input_mask"], r["segment_ids"], r["label_ids"][0],
                               r["is_real_example"][0]) for r in rows] == want["splits"]["dev"]["records_128"]

    # The original's input functions: input_fn(params) -> tf.data.Dataset of int32 batches.
    features = rc.convert_examples_to_features(dev, labels, 128, tokenizer)
    batches = list(rc.file_based_input_fn_builder(path, 128, False, False)({"batch_size": 100}))
    assert [len(b["input_ids"]) for b in batches] == [100, 100, 100, 100, 8]
    assert {name: t.dtype for name, t in batches[0].items()} == {
        "input_ids": tf.int32, "input_mask": tf.int32, "segment_ids": tf.int32, "label_ids": tf.int32,
        "is_real_example": tf.int32}
    in_memory = list(rc.input_fn_builder(features, 128, False, True)({"batch_size": 100}))
    assert len(in_memory) == 4 and sorted(in_memory[0]) == ["input_ids", "input_mask", "label_ids", "segment_ids"]
    for name, attribute in (("input_ids", "input_ids"), ("segment_ids", "segment_ids"), ("label_ids", "label_id")):
        values = np.array([getattr(f, attribute) for f in features[:400]])
        np.testing.assert_array_equal(np.concatenate([b[name].numpy() for b in in_memory]), values)
        np.testing.assert_array_equal(np.concatenate([b[name].numpy() for b in batches])[:400], values)
    training = rc.input_fn_builder(features, 128, True, True)({"batch_size": 32})
    assert next(iter(training))["input_ids"].shape == (32, 128)


def test_processor_class_names_a_module_or_a_file():
    by_module = rc.user_processor_class("tests.original_style_processor.ParaphraseProcessor")
    assert by_module is original_style_processor.ParaphraseProcessor
    by_file = rc.user_processor_class(os.path.join(ROOT, "tests", "original_style_processor.py") +
                                      ":ParaphraseProcessor")
    assert by_file.__name__ == "ParaphraseProcessor" and issubclass(by_file, rc.DataProcessor)
    processor = rc.get_processor("anything", processor_class="tests.original_style_processor:ParaphraseProcessor")
    assert isinstance(processor, original_style_processor.ParaphraseProcessor)
    for spec, message in (("no_such_module.Processor", r"--processor_class=no_such_module\.Processor: cannot "
                                                        r"import no_such_module"),
                          ("tests.original_style_processor.Missing", "has no DataProcessor subclass 'Missing'"),
                          ("os.path", "has no DataProcessor subclass 'path'"),
                          ("Processor", "expected module.Class"),
                          ("absent/file.py:Processor", "--processor_class=absent/file.py: no such file")):
        with pytest.raises(cli.UserError, match=message):
            rc.user_processor_class(spec)


def _tiny_config(path):
    modeling.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128).to_json_file(path)
    return path


@pytest.mark.slow
def test_user_processor_runs_through_run_classifier_flags(reference, tmp_path):
    """The documented way in: run_classifier.py --processor_class=module.Class trains, evaluates and predicts with
    a user's own processor; its train.tf_record holds the original's features."""
    data_dir = tmp_path / "paraphrase"
    data_dir.mkdir()
    with open(os.path.join(shared_path(*ref.MRPC), "dev.tsv"), encoding="utf-8") as f:
        dev_lines = f.readlines()
    with open(os.path.join(shared_path(*ref.MRPC), "test.tsv"), encoding="utf-8") as f:
        test_lines = f.readlines()
    (data_dir / "train.tsv").write_text("".join(dev_lines[:65]), encoding="utf-8")
    (data_dir / "dev.tsv").write_text("".join(dev_lines[:41]), encoding="utf-8")
    (data_dir / "test.tsv").write_text("".join(test_lines[:21]), encoding="utf-8")
    output_dir = tmp_path / "out"
    command = [sys.executable, os.path.join(ROOT, "run_classifier.py"),
               "--processor_class=tests.original_style_processor.ParaphraseProcessor", "--task_name=paraphrase",
               f"--data_dir={data_dir}", f"--vocab_file={shared_path(*ref.VOCAB)}",
               f"--bert_config_file={_tiny_config(str(tmp_path / 'bert_config.json'))}", "--max_seq_length=128",
               "--do_train", "--do_eval", "--do_predict", "--train_batch_size=32", "--num_train_epochs=1",
               "--learning_rate=1e-3", f"--output_dir={output_dir}"]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "original_style_processor.ParaphraseProcessor (--processor_class)" in proc.stderr
    rows = parse_records(str(output_dir / "train.tf_record"))
    assert [ref.feature_digest(r["input_ids"], r["input_mask"], r["segment_ids"], r["label_ids"][0],
                               r["is_real_example"][0]) for r in rows] == \
        reference["classifier"]["splits"]["dev"]["features_128"][:64]
    results = dict(line.split(" = ") for line in (output_dir / "eval_results.txt").read_text().splitlines())
    assert results["global_step"] == "2" and 0.0 <= float(results["eval_accuracy"]) <= 1.0
    predictions = (output_dir / "test_results.tsv").read_text().splitlines()
    assert len(predictions) == 20 and all(len(row.split("\t")) == 2 for row in predictions)


# ---------------------------------------------------------------------------------------------------------
# run_squad


@pytest.mark.parametrize("run", ref.SQUAD_RUNS, ids=[run[0] for run in ref.SQUAD_RUNS])
def test_write_predictions_writes_the_originals_files(reference, tokenizer, tmp_path, run):
    name, path, version_2, num_questions = run
    want = reference["squad"]["runs"][name]
    with original_flags(run_squad, version_2_with_negative=version_2):
        examples = run_squad.read_squad_examples(shared_path(*path), is_training=False)[:num_questions]
        features = []
        assert run_squad.convert_examples_to_features(examples, tokenizer, is_training=False,
                                                      output_fn=features.append, **ref.SQUAD_WINDOWS) == len(features)
        assert [ref.digest([f.unique_id, f.example_index, f.doc_span_index, f.tokens,
                            sorted(f.token_to_orig_map.items()), sorted(f.token_is_max_context.items()),
                            f.input_ids, f.input_mask, f.segment_ids]) for f in features] == want["features"]
        results = [run_squad.RawResult(f.unique_id, *ref.result_logits(f)) for f in features]
        paths = [str(tmp_path / file_name) for file_name in ref.PREDICTION_FILES]
        run_squad.write_predictions(examples, features, results, ref.SQUAD_DECODING["n_best_size"],
                                    ref.SQUAD_DECODING["max_answer_length"], ref.SQUAD_DECODING["do_lower_case"],
                                    *paths)
    written = {}
    for file_name, file_path in zip(ref.PREDICTION_FILES, paths):
        if os.path.exists(file_path):
            with open(file_path, encoding="utf-8") as f:
                text = f.read()
            written[file_name] = {"digest": ref.digest(text), "entries": {
                qas_id: ref.digest(value) for qas_id, value in json.loads(text).items()}}
    assert sorted(written) == sorted(want["files"])
    for file_name, entries in want["files"].items():
        assert written[file_name]["entries"] == entries["entries"], file_name
        assert written[file_name]["digest"] == entries["digest"], file_name


def test_get_final_text_as_the_original(reference, caplog):
    caplog.set_level(std_logging.INFO)
    with original_flags(run_squad, verbose_logging=True):
        for case in reference["squad"]["get_final_text"]:
            caplog.clear()
            assert run_squad.get_final_text(*case["case"]) == case["result"], case["case"]
            assert [r.getMessage() for r in caplog.records if r.name == "absl"] == case["logged"], case["case"]
    caplog.clear()
    assert run_squad.get_final_text("not there", "Something else", True) == "Something else"
    assert not [r for r in caplog.records if r.name == "absl"]  # FLAGS.verbose_logging is off by default


def test_squad_helpers_as_the_original():
    DocSpan = collections.namedtuple("DocSpan", ["start", "length"])
    for num_tokens, max_tokens, stride in ((0, 5, 2), (7, 5, 2), (30, 8, 3), (30, 8, 8), (19, 10, 128)):
        spans = [DocSpan(*span) for span in original_doc_spans(num_tokens, max_tokens, stride)]
        for index in range(len(spans) + 1):
            for position in range(-1, num_tokens + 1):
                assert run_squad._check_is_max_context(spans, index, position) == original_is_max_context(
                    spans, index, position), (num_tokens, max_tokens, stride, index, position)
    # Plain Python on Python ints: it gives its answer while a tf.function is traced, as the original's did.
    spans = [DocSpan(*span) for span in original_doc_spans(30, 8, 3)]

    @tf.function
    def traced():
        for index in range(len(spans)):
            for position in range(30):
                assert run_squad._check_is_max_context(spans, index, position) is original_is_max_context(
                    spans, index, position)
        return tf.constant(0)

    traced()
    assert run_squad._get_best_indexes([0.5, 2.0, 2.0, -1.0, 3.0], 3) == [4, 1, 2]
    assert run_squad._compute_softmax([]) == [] and run_squad._compute_softmax([1.0, 1.0]) == [0.5, 0.5]


# ---------------------------------------------------------------------------------------------------------
# create_pretraining_data: the original's function names give its instances and records.


def _original_records(name):
    return parse_records(shared_path("reference", "pretraining_data", name))


@pytest.mark.parametrize("name,whole_word", [("sample_text_default.tfrecord", False),
                                             ("sample_text_wwm.tfrecord", True)])
def test_create_training_instances_and_records_equal_the_originals(tokenizer, tmp_path, name, whole_word):
    corpus = shared_path("data", "text", "sample_text.txt")
    with original_flags(cpd, do_whole_word_mask=whole_word):
        instances = cpd.create_training_instances([corpus], tokenizer, 128, 10, 0.1, 0.15, 20, random.Random(12345))
        assert all(isinstance(instance, cpd.TrainingInstance) for instance in instances)
        outputs = [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
        cpd.write_instance_to_example_files(instances, tokenizer, 128, 20, outputs)
        want = _original_records(name)
        first_file, second_file = parse_records(outputs[0]), parse_records(outputs[1])
        assert len(first_file) - len(second_file) in (0, 1)  # round-robin over the two files
        got = [row for pair in itertools.zip_longest(first_file, second_file) for row in pair if row is not None]
        assert got == want

        # The same, composed from the original's lower-level functions as its create_training_instances does.
        rng = random.Random(12345)
        all_documents = [[]]
        with open(corpus, encoding="utf-8") as f:
            for line in f:
                line = tokenization.convert_to_unicode(line).strip()
                if not line:
                    all_documents.append([])
                tokens = tokenizer.tokenize(line)
                if tokens:
                    all_documents[-1].append(tokens)
        all_documents = [document for document in all_documents if document]
        rng.shuffle(all_documents)
        vocab_words = list(tokenizer.vocab.keys())
        composed = []
        for _ in range(10):
            for document_index in range(len(all_documents)):
                composed.extend(cpd.create_instances_from_document(all_documents, document_index, 128, 0.1, 0.15,
                                                                   20, vocab_words, rng))
        rng.shuffle(composed)
    assert [str(instance) for instance in composed] == [str(instance) for instance in instances]
    first = instances[0]
    assert first.tokens[0] == "[CLS]" and first.tokens.count("[SEP]") == 2
    assert len(first.segment_ids) == len(first.tokens) and first.segment_ids[0] == 0
    num_masked = len(first.masked_lm_positions)
    assert first.masked_lm_positions == want[0]["masked_lm_positions"][:num_masked]
    assert first.masked_lm_labels == tokenizer.convert_ids_to_tokens(want[0]["masked_lm_ids"][:num_masked])


def test_masking_and_truncation_helpers():
    rng = random.Random(3)
    tokens = ["[CLS]", "the", "dog", "##gie", "is", "hair", "##y", "[SEP]", "it", "is", "[SEP]"]
    vocab_words = ["[PAD]", "a", "b", "c"]
    output, positions, labels = cpd.create_masked_lm_predictions(tokens, 0.5, 3, vocab_words, rng)
    assert len(positions) == 3 and positions == sorted(positions) and labels == [tokens[p] for p in positions]
    assert all(tokens[p] not in ("[CLS]", "[SEP]") for p in positions)
    assert [t for i, t in enumerate(output) if i not in positions] == [t for i, t in enumerate(tokens)
                                                                      if i not in positions]
    assert all(output[p] in ("[MASK]", tokens[p]) or output[p] in vocab_words for p in positions)
    with original_flags(cpd, do_whole_word_mask=True):
        for seed in range(20):
            _, positions, _ = cpd.create_masked_lm_predictions(tokens, 0.5, 4, vocab_words, random.Random(seed))
            assert (2 in positions) == (3 in positions) and (5 in positions) == (6 in positions)
    assert cpd.MaskedLmInstance(index=1, label="x").label == "x"
    for seed in range(10):
        a, b = list(range(9)), list(range(100, 104))
        cpd.truncate_seq_pair(a, b, 7, random.Random(seed))
        assert len(a) + len(b) == 7 and len(a) == 4 and len(b) == 3
        assert a == list(range(a[0], a[0] + 4)) and b == list(range(b[0], b[0] + 3))


# ---------------------------------------------------------------------------------------------------------
# extract_features


def test_extract_features_original_functions(tokenizer, tmp_path):
    path = tmp_path / "input.txt"
    path.write_bytes(b"Who was Jim Henson ? ||| Jim Henson was a puppeteer\nline\rwith a carriage return\n\n")
    examples = extract_features.read_examples(str(path))
    assert [(e.unique_id, e.text_a, e.text_b) for e in examples] == [
        (0, "Who was Jim Henson ?", "Jim Henson was a puppeteer"), (1, "line\rwith a carriage return", None),
        (2, "", None)]
    features = extract_features.convert_examples_to_features(examples, 16, tokenizer)
    assert features[0].tokens == ["[CLS]", "who", "was", "jim", "henson", "?", "[SEP]", "jim", "henson", "was",
                                  "a", "puppet", "##eer", "[SEP]"]
    assert features[0].input_type_ids == [0] * 7 + [1] * 7 + [0] * 2
    batches = list(extract_features.input_fn_builder(features, 16)({"batch_size": 2}))
    assert [len(b["unique_ids"]) for b in batches] == [2, 1]
    assert {name: t.dtype for name, t in batches[0].items()} == {
        "unique_ids": tf.int32, "input_ids": tf.int32, "input_mask": tf.int32, "input_type_ids": tf.int32}
    np.testing.assert_array_equal(np.concatenate([b["input_ids"].numpy() for b in batches]),
                                  [f.input_ids for f in features])


# ---------------------------------------------------------------------------------------------------------
# docs/original_code.md: every name its section for code written for the original lists exists and is tested.

_OUR_MODULES = ("create_pretraining_data", "extract_features", "modeling", "optimization", "run_classifier",
                "run_pretraining", "run_squad", "tokenization", "cli")


def _readme_section(title):
    with open(os.path.join(ROOT, "docs", "original_code.md"), encoding="utf-8") as f:
        text = f.read()
    assert text.count("\n## " + title + "\n") == 1, f"docs/original_code.md: one section {title!r}"
    return text.split("\n## " + title + "\n")[1].split("\n## ")[0]


def _resolve(path, module=None, owner=None):
    """The object `path` names: module.attr..., or an attribute of `module` or of `owner` (a class listed before it
    in the same cell); None where it names nothing of ours."""
    import importlib
    parts = path.split(".")
    if parts[0] in _OUR_MODULES:
        target = importlib.import_module(parts[0])
        parts = parts[1:]
    elif module is not None and hasattr(module, parts[0]):
        target = module
    elif owner is not None and hasattr(owner, parts[0]):
        target = owner
    else:
        return None
    for part in parts:
        target = getattr(target, part, None)
        if target is None:
            return None
    return target


def test_readme_section_for_the_originals_code_lists_names_that_exist_and_are_tested():
    import importlib
    section = _readme_section("Your code written for the original")
    tests_text = ""
    for name in sorted(os.listdir(os.path.join(ROOT, "tests"))):
        if name.endswith(".py"):
            with open(os.path.join(ROOT, "tests", name), encoding="utf-8") as f:
                tests_text += f.read()
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| Original")]
    modules, checked, untested, module = [], [], [], None
    for row in rows:
        cells = [cell.strip() for cell in row.strip()[1:-1].split("|")]
        assert len(cells) == 3, row
        header = re.fullmatch(r"\*\*`?([\w ]+?)`?\*\*", cells[0])
        if header:
            name = header.group(1)
            module = importlib.import_module(name) if name in _OUR_MODULES else None
            modules.append(name)
            continue
        for column, cell in enumerate(cells):
            owner = None
            for path in re.findall(r"`([A-Za-z_][\w.]*)", cell):
                if path.startswith(("tf.", "absl.")) or path.endswith(".py"):
                    continue  # TensorFlow 1's names, a script's file
                prefixed = path.split(".")[0] in _OUR_MODULES
                if not prefixed and (column > 0 or module is None):
                    continue  # a bare name in the other columns is said of the row's own names; TensorFlow 1's
                target = _resolve(path, module if column == 0 else None, owner)
                assert target is not None, f"README names {path!r} ({row[:80]}...), which does not exist"
                if isinstance(target, type):
                    owner = target
                if not re.search(r"\b%s\b" % re.escape(path.split(".")[-1]), tests_text):
                    untested.append(path)
                checked.append(path)
    # The original's files, in its order.
    assert modules == ["create_pretraining_data", "extract_features", "modeling", "optimization", "run_classifier",
                       "run_pretraining", "run_squad", "tokenization", "TensorFlow 1"]
    assert len(checked) > 100 and untested == [], f"README names what no test uses: {untested}"


def test_the_originals_small_names():
    example = tf.train.Example(features=tf.train.Features(feature={
        "ids": cpd.create_int_feature([3, 1, 2]), "weights": cpd.create_float_feature([1.0, 0.5])}))
    parsed = tf.train.Example.FromString(example.SerializeToString()).features.feature
    assert list(parsed["ids"].int64_list.value) == [3, 1, 2]
    assert list(parsed["weights"].float_list.value) == [1.0, 0.5]
    for processor in (rc.XnliProcessor(), rc.MnliProcessor()):
        assert isinstance(processor, rc.DataProcessor)
        assert processor.get_labels() == ["contradiction", "entailment", "neutral"]
    squad_example = run_squad.SquadExample(qas_id="q1", question_text="Who?", doc_tokens=["So", "John", "went"],
                                           orig_answer_text="John", start_position=1, end_position=1)
    assert str(squad_example) == ("qas_id: q1, question_text: Who?, doc_tokens: [So John went], start_position: 1, "
                                  "end_position: 1, is_impossible: False")  # the original's
    spec = modeling.EstimatorSpec(mode=modeling.ModeKeys.PREDICT, predictions={}, loss=None, train_op=None)
    assert spec._fields == ("mode", "predictions", "loss", "train_op")
