"""run_classifier.py: GLUE reading on the real data, feature conversion, bad input, fine-tuning, and the export's
signatures against --do_predict (the metrics: tests/test_glue_evaluation.py; packing: tests/test_packing.py)."""
import dataclasses
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import cli
import glue_evaluation
import records
import run_classifier as rc
import runner
import tokenization
from tests import tiny
from tests.processes import assert_ran, run_isolated, run_script
from tests.shared_data import glue, shared_path, vocab


@pytest.fixture(scope="module")
def tokenizer():
    return tokenization.FullTokenizer(vocab(), do_lower_case=True)


# (task, data folder, {split: count}, labels seen in train and dev)
COUNTS = [
    ("mrpc", "MRPC", {"train": 3668, "dev": 408, "test": 1725}, {"0", "1"}),
    ("cola", "CoLA", {"train": 8551, "dev": 1043}, {"0", "1"}),
    ("rte", "RTE", {"train": 2490, "dev": 277, "test": 3000}, {"entailment", "not_entailment"}),
    ("sst-2", "SST-2", {"train": 67349, "dev": 872}, {"0", "1"}),
    ("sts-b", "STS-B", {"train": 5749, "dev": 1500, "test": 1379}, None),
]


@pytest.mark.parametrize("task,folder,counts,labels", COUNTS, ids=[c[0] for c in COUNTS])
def test_glue_counts_and_labels(task, folder, counts, labels):
    processor = rc.get_processor(task)
    readers = {"train": processor.get_train_examples, "dev": processor.get_dev_examples,
               "test": processor.get_test_examples}
    for split, count in counts.items():
        examples = readers[split](glue(folder))
        assert len(examples) == count, (task, split)
        assert len({e.guid for e in examples}) == count
        assert all(e.guid.startswith(split + "-") for e in examples)
        assert all(isinstance(e.text_a, str) and e.text_a for e in examples)
        if processor.is_pair:
            assert all(isinstance(e.text_b, str) and e.text_b for e in examples)
        else:
            assert all(e.text_b is None for e in examples)
        if split == "test":
            assert {e.label for e in examples} == {processor._test_label()}
        elif labels is None:
            scores = np.array([e.label for e in examples])
            assert scores.dtype == np.float64 and scores.min() == 0.0 and scores.max() == 5.0
        else:
            assert {e.label for e in examples} == labels
    if "test" not in counts:
        with pytest.raises(FileNotFoundError, match="test.tsv"):
            processor.get_test_examples(glue(folder))


def test_mrpc_rows_exactly_as_the_original_reads_them():
    """Quoting off: a leading or unbalanced quote stays in the text; guid is set-lineindex."""
    dev = rc.MrpcProcessor().get_dev_examples(glue("MRPC"))
    first = dev[0]
    assert first.guid == "dev-1" and first.label == "1"
    assert first.text_a == ("He said the foodservice pie business doesn't fit the company's long-term "
                            "growth strategy.")
    assert first.text_b.startswith('"The foodservice pie business does not fit our long-term growth')
    assert dev[1].text_b.startswith('His wife said he was "100 percent behind George Bush"')
    with open(os.path.join(glue("MRPC"), "dev.tsv"), encoding="utf-8-sig") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    assert [(e.label, e.text_a, e.text_b) for e in dev] == [(r[0], r[3], r[4]) for r in rows]
    test = rc.MrpcProcessor().get_test_examples(glue("MRPC"))
    assert test[0].guid == "test-1" and test[0].label == "0"
    assert test[0].text_a.startswith("PCCW's chief operating officer")


def test_cola_sst2_stsb_rte_columns():
    cola = rc.ColaProcessor().get_train_examples(glue("CoLA"))
    assert cola[0].guid == "train-0" and cola[0].label == "1"
    assert cola[0].text_a == "Our friends won't buy this analysis, let alone the next one we propose."
    sst = rc.Sst2Processor().get_dev_examples(glue("SST-2"))
    assert sst[0].guid == "dev-1" and sst[0].text_a == "it 's a charming and often affecting journey . "
    assert sst[0].label == "1"
    sts = rc.StsbProcessor().get_dev_examples(glue("STS-B"))
    assert (sts[0].guid, sts[0].text_a, sts[0].text_b, sts[0].label) == (
        "dev-0", "A man with a hard hat is dancing.", "A man wearing a hard hat is dancing.", 5.0)
    rte = rc.RteProcessor().get_test_examples(glue("RTE"))
    assert rte[0].guid == "test-0" and rte[0].text_b == "Shukla is related to Mangla."
    assert rte[0].label == "entailment"


def _one(example, label_list, max_seq_length, tokenizer):
    """The feature row of one example, as lists."""
    arrays = rc.examples_to_arrays([example], label_list, max_seq_length, tokenizer, log_examples=0)
    return {name: values[0].tolist() for name, values in arrays.items()}


def test_feature_layout(tokenizer):
    example = rc.InputExample("t-1", "The dog is hairy.", "Is it?", "1")
    f = _one(example, ["0", "1"], 16, tokenizer)
    tokens = tokenizer.convert_ids_to_tokens([i for i in f["input_ids"] if i])
    assert tokens == ["[CLS]", "the", "dog", "is", "hairy", ".", "[SEP]", "is", "it", "?", "[SEP]"]
    assert f["segment_ids"] == [0] * 7 + [1] * 4 + [0] * 5
    assert f["input_mask"] == [1] * 11 + [0] * 5
    assert len(f["input_ids"]) == 16 and f["input_ids"][11:] == [0] * 5 and f["label_ids"] == 1
    single = _one(rc.InputExample("t-2", "a " * 30, None, "0"), ["0", "1"], 8, tokenizer)
    assert tokenizer.convert_ids_to_tokens(single["input_ids"]) == ["[CLS]"] + ["a"] * 6 + ["[SEP]"]
    assert single["segment_ids"] == [0] * 8 and single["label_ids"] == 0
    pad = _one(rc.PaddingInputExample(), ["0", "1"], 8, tokenizer)
    assert pad["input_ids"] == [0] * 8 and pad["is_real_example"] == 0
    reg = _one(rc.InputExample("t-3", "a", "b", 3.8), None, 8, tokenizer)
    assert reg["label_ids"] == pytest.approx(3.8)


def test_first_examples_are_logged(tokenizer, caplog):
    import logging
    examples = rc.MrpcProcessor().get_dev_examples(glue("MRPC"))[:7]
    with caplog.at_level(logging.INFO):
        rc.examples_to_arrays(examples, ["0", "1"], 32, tokenizer)
    text = caplog.text
    assert text.count("*** Example ***") == 5
    assert "guid: dev-1" in text and "tokens: [CLS] he said the foods ##er ##vic ##e pie business" in text
    assert "label: 1 (id = 1)" in text


def test_tfrecord_round_trip_on_mrpc_dev(tokenizer, tmp_path):
    processor = rc.MrpcProcessor()
    examples = processor.get_dev_examples(glue("MRPC"))
    path = str(tmp_path / "eval.tf_record")
    padded = rc.pad_examples(examples, 7)
    assert len(padded) == 413 and isinstance(padded[-1], rc.PaddingInputExample)
    records.write_file(path, rc.examples_to_arrays(padded, processor.get_labels(), 64, tokenizer),
                       records.classifier(64, False))
    batches = list(records.input_fn(path, records.classifier(64, False), False, False)(100).as_numpy_iterator())
    ids = np.concatenate([b["input_ids"] for b in batches])
    real = np.concatenate([b["is_real_example"] for b in batches])
    labels = np.concatenate([b["label_ids"] for b in batches])
    assert ids.shape == (413, 64) and ids.dtype == np.int32
    assert real.tolist() == [1] * 408 + [0] * 5
    assert labels[:408].tolist() == [int(e.label) for e in examples]
    assert ids[17].tolist() == _one(examples[17], ["0", "1"], 64, tokenizer)["input_ids"]
    # Truncation really happened on the long pairs, and every row ends its text with [SEP].
    lengths = np.concatenate([b["input_mask"] for b in batches]).sum(1)
    assert lengths.max() == 64 and (ids[np.arange(408), lengths[:408] - 1] == 102).all()


def test_regression_tfrecord_keeps_float_scores(tokenizer, tmp_path):
    examples = rc.StsbProcessor().get_dev_examples(glue("STS-B"))[:10]
    path = str(tmp_path / "eval.tf_record")
    records.write_file(path, rc.examples_to_arrays(examples, None, 32, tokenizer), records.classifier(32, True))
    batch = next(records.input_fn(path, records.classifier(32, True), False, False)(10).as_numpy_iterator())
    np.testing.assert_allclose(batch["label_ids"], [e.label for e in examples], rtol=1e-6)


def test_custom_tsv_and_csv(tmp_path):
    (tmp_path / "train.tsv").write_text("id\tsentence\tlabel\n1\tgood film\tpos\n2\tbad \"film\tneg\n")
    processor = rc.get_processor("custom", text_a_column="sentence", label_column="label",
                                 data_dir=str(tmp_path))
    examples = processor.get_train_examples(str(tmp_path))
    assert processor.get_labels() == ["neg", "pos"]
    assert [(e.text_a, e.label) for e in examples] == [("good film", "pos"), ('bad "film', "neg")]
    (tmp_path / "train.csv").write_text('q,a,y\n"one, two",three,1\nfour,five,0\n')
    processor = rc.get_processor("custom", text_a_column="0", text_b_column="1", label_column="2",
                                 delimiter=",", train_file="train.csv", label_list=["0", "1"])
    examples = processor.get_train_examples(str(tmp_path))
    assert [(e.text_a, e.text_b, e.label) for e in examples] == [("one, two", "three", "1"),
                                                                  ("four", "five", "0")]
    assert processor.is_pair


def test_bad_input_errors(tmp_path, tokenizer):
    with pytest.raises(ValueError, match=r"Task not found: 'mrcp'.*valid tasks: cola, mnli, mnli-mm, mrpc"):
        rc.get_processor("mrcp")
    with pytest.raises(FileNotFoundError, match="data file not found: .*nowhere.*dev.tsv"):
        rc.MrpcProcessor().get_dev_examples(str(tmp_path / "nowhere"))
    (tmp_path / "dev.tsv").write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                                      "1\t1\t2\ta\tb\n0\t3\t4\tonly four columns\n")
    with pytest.raises(ValueError, match=r"dev.tsv line 3: expected at least 5 tab-separated columns, found 4"):
        rc.MrpcProcessor().get_dev_examples(str(tmp_path))
    (tmp_path / "dev.tsv").write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n2\t1\t2\ta\tb\n")
    with pytest.raises(ValueError,
                       match=r"dev.tsv line 2: label '2' is not in the task's label list \['0', '1'\]"):
        rc.MrpcProcessor().get_dev_examples(str(tmp_path))
    (tmp_path / "train.tsv").write_text("index\tgenre\tf\ty\to\ts1\ts2\ta\tb\tscore\n"
                                        "0\tg\tf\ty\to\ts\ts\ta\tb\thigh\n")
    with pytest.raises(ValueError, match=r"train.tsv line 2: label 'high' is not a number"):
        rc.StsbProcessor().get_train_examples(str(tmp_path))
    with pytest.raises(ValueError, match=r"label 'maybe' is not in the label list"):
        rc.examples_to_arrays([rc.InputExample("x-1", "a", None, "maybe")], ["0", "1"], 8, tokenizer)
    (tmp_path / "bad.csv").write_text("q,y\nonly one column\n")
    with pytest.raises(ValueError, match=r"bad.csv line 2: expected at least 2 comma-separated columns"):
        rc.get_processor("custom", text_a_column="q", label_column="y", delimiter=",", label_list=["0"],
                         train_file="bad.csv").get_train_examples(str(tmp_path))
    with pytest.raises(ValueError, match=r"--delimiter='::': expected one character"):
        rc.get_processor("custom", text_a_column="q", label_column="y", delimiter="::")
    assert rc.get_processor("custom", text_a_column="q", label_column="y", delimiter="\\t").delimiter == "\t"
    processor = rc.get_processor("custom", text_a_column="text", label_column="label")
    with pytest.raises(ValueError, match=r"--text_a_column='text' is neither a column of the header"):
        processor.get_train_examples(str(tmp_path))


def _subset(folder, target, counts):
    """Copies the first lines of a GLUE folder's files (header included) into `target`."""
    import itertools
    target.mkdir()
    for name, n in counts.items():
        with open(os.path.join(glue(folder), name), encoding="utf-8") as f:
            (target / name).write_text("".join(itertools.islice(f, n)), encoding="utf-8")
    return str(target)


def _read_results(path):
    out = {}
    for line in open(path, encoding="utf-8"):
        key, value = line.rstrip("\n").split(" = ")
        out[key] = float(value)
    return out


def _tiny_job_options(tmp_path, task_name, data_dir, **flags):
    """run_classifier's options training a tiny model (64 positions, 2 token types) for one epoch at learning rate
    1e-3 on data_dir, sequences of 32, then evaluating and predicting into tmp_path/out; flags: the test's own."""
    values = dict(output_dir=str(tmp_path / "out"), task_name=task_name, data_dir=data_dir,
                  bert_config_file=tiny.config_file(tmp_path / "bert_config.json", max_position_embeddings=64,
                                                    type_vocab_size=2),
                  vocab_file=shared_path("vocab", "uncased", "vocab.txt"), max_seq_length=32, learning_rate=1e-3,
                  do_train=True, do_eval=True, do_predict=True, num_train_epochs=1.0)
    values.update(flags)
    return cli.build_options(rc.ClassifierOptions, **values)


@pytest.mark.slow
def test_fine_tune_tiny_model_on_mrpc_end_to_end(tmp_path):
    """Trains a tiny model a few steps, evaluates and predicts: the original's output files appear."""
    import training
    data_dir = _subset("MRPC", tmp_path / "mrpc", {"train.tsv": 97, "dev.tsv": 41, "test.tsv": 31})
    output_dir = str(tmp_path / "out")
    options = _tiny_job_options(tmp_path, "MRPC", data_dir, train_batch_size=16, eval_batch_size=8,
                                predict_batch_size=8, save_checkpoints_steps=4, iterations_per_loop=2)
    config = options.training
    results = rc.run(options)
    assert results["train"]["global_step"] == 6  # int(96 / 16 * 1.0)
    for name in ("train.tf_record", "eval_results.txt", "test_results.tsv", "model.ckpt-6.index", "checkpoint"):
        assert os.path.exists(os.path.join(output_dir, name)), name
    assert not [name for name in os.listdir(output_dir) if name in ("eval.tf_record", "predict.tf_record")]
    written = _read_results(os.path.join(output_dir, "eval_results.txt"))
    assert sorted(written) == ["eval_accuracy", "eval_f1", "eval_loss", "global_step", "loss"]
    assert written["global_step"] == 6 and 0.0 <= written["eval_accuracy"] <= 1.0
    # The written metrics equal the ones recomputed from the model's predictions on the dev set.
    dev = rc.MrpcProcessor().get_dev_examples(data_dir)
    task = rc.ClassifierTask(__import__("encoder").BertConfig.from_json_file(options.model.bert_config_file), 2)
    tokenizer = tokenization.FullTokenizer(shared_path("vocab", "uncased", "vocab.txt"), True)
    eval_input = runner.array_input_fn(rc.examples_to_arrays(dev, ["0", "1"], 32, tokenizer), False, trim=False)
    probs = np.array([p["probabilities"] for p in training.predict(
        task, eval_input, config, checkpoint_path=os.path.join(output_dir, "model.ckpt-6"))])
    labels = np.array([int(e.label) for e in dev])
    assert written["eval_accuracy"] == pytest.approx(glue_evaluation.accuracy(probs.argmax(1), labels), abs=1e-6)
    assert written["eval_f1"] == pytest.approx(glue_evaluation.f1_score(probs.argmax(1), labels), abs=1e-6)
    loss = -np.log(probs[np.arange(40), labels]).mean()
    assert written["eval_loss"] == pytest.approx(loss, rel=1e-4)
    rows = open(os.path.join(output_dir, "test_results.tsv")).read().splitlines()
    assert len(rows) == 30 and all(len(r.split("\t")) == 2 for r in rows)
    np.testing.assert_allclose(np.array([r.split("\t") for r in rows], float).sum(1), 1.0, atol=1e-6)
    # The trained head differs from its initialisation and is saved under the original names.
    reader = tf.train.load_checkpoint(os.path.join(output_dir, "model.ckpt-6"))
    assert reader.get_variable_to_shape_map()["output_weights"] == [2, 32]
    assert np.abs(reader.get_tensor("output_bias")).max() > 0


@pytest.mark.slow
def test_fine_tune_tiny_regression_on_stsb(tmp_path):
    """STS-B: one output, squared error, Pearson and Spearman in eval_results.txt, a score per test row."""
    data_dir = _subset("STS-B", tmp_path / "stsb", {"train.tsv": 49, "dev.tsv": 61, "test.tsv": 11})
    output_dir = str(tmp_path / "out")
    options = _tiny_job_options(tmp_path, "sts-b", data_dir, train_batch_size=16, eval_batch_size=16,
                                predict_batch_size=16)
    config = options.training
    rc.run(options)
    written = _read_results(os.path.join(output_dir, "eval_results.txt"))
    assert sorted(written) == ["eval_corr", "eval_loss", "eval_pearson", "eval_spearman", "global_step", "loss"]
    rows = open(os.path.join(output_dir, "test_results.tsv")).read().splitlines()
    assert len(rows) == 10
    reader = tf.train.load_checkpoint(os.path.join(output_dir, "model.ckpt-3"))
    assert reader.get_variable_to_shape_map()["output_weights"] == [1, 32]
    dev = rc.StsbProcessor().get_dev_examples(data_dir)
    task = rc.ClassifierTask(__import__("encoder").BertConfig.from_json_file(options.model.bert_config_file), 1,
                             is_regression=True)
    # Recomputed from the dev features the way evaluation predicts (real-length batches of eval_batch_size).
    tokenizer = tokenization.FullTokenizer(shared_path("vocab", "uncased", "vocab.txt"), True)
    arrays = rc.examples_to_arrays(dev, None, 32, tokenizer)
    eval_config = dataclasses.replace(config, predict_batch_size=config.eval_batch_size)
    scores = runner.predict_arrays(task, arrays, eval_config,
                                   checkpoint_path=os.path.join(output_dir, "model.ckpt-3"))["score"]
    gold = np.array([e.label for e in dev])
    assert written["eval_pearson"] == pytest.approx(glue_evaluation.pearson_corrcoef(scores, gold), abs=1e-6)
    assert written["eval_spearman"] == pytest.approx(glue_evaluation.spearman_corrcoef(scores, gold), abs=1e-6)
    assert written["eval_loss"] == pytest.approx(np.mean((scores - gold) ** 2), rel=1e-4)


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")


def test_mnli_qqp_qnli_wnli_xnli_column_layouts(tmp_path):
    """The GLUE/XNLI layouts absent from ../shared, written in their published column order."""
    mnli_head = ["index", "promptID", "pairID", "genre", "s1_bp", "s2_bp", "s1_p", "s2_p", "sentence1",
                 "sentence2"]
    _write(tmp_path / "mnli" / "train.tsv", [mnli_head + ["label1", "gold_label"],
                                             ["0", "1", "1e", "gov", "(", "(", "(", "(", "A", "B", "neutral",
                                              "neutral"]])
    _write(tmp_path / "mnli" / "dev_mismatched.tsv", [mnli_head + ["l1", "l2", "l3", "l4", "l5", "gold_label"],
                                                      ["7", "1", "1e", "x", "(", "(", "(", "(", "C", "D", "e", "e",
                                                       "e", "e", "e", "entailment"]])
    _write(tmp_path / "mnli" / "test_matched.tsv",
           [mnli_head, ["3", "1", "1e", "x", "(", "(", "(", "(", "E", "F"]])
    mnli = rc.get_processor("MNLI")
    train = mnli.get_train_examples(str(tmp_path / "mnli"))
    assert [(e.guid, e.text_a, e.text_b, e.label) for e in train] == [("train-0", "A", "B", "neutral")]
    test = mnli.get_test_examples(str(tmp_path / "mnli"))
    assert [(e.guid, e.text_a, e.label) for e in test] == [("test-3", "E", "contradiction")]
    dev_mm = rc.get_processor("mnli-mm").get_dev_examples(str(tmp_path / "mnli"))
    assert [(e.guid, e.text_a, e.text_b, e.label) for e in dev_mm] == [
        ("dev_mismatched-7", "C", "D", "entailment")]

    _write(tmp_path / "qqp" / "train.tsv", [["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
                                            ["5", "1", "2", "How?", "Why?", "1"]])
    _write(tmp_path / "qqp" / "test.tsv", [["id", "question1", "question2"], ["9", "Q1", "Q2"]])
    qqp = rc.get_processor("qqp")
    assert [(e.guid, e.text_a, e.text_b, e.label) for e in qqp.get_train_examples(str(tmp_path / "qqp"))] == [
        ("train-5", "How?", "Why?", "1")]
    assert [(e.guid, e.text_a, e.text_b) for e in qqp.get_test_examples(str(tmp_path / "qqp"))] == [
        ("test-9", "Q1", "Q2")]
    assert qqp.metric_names == ("accuracy", "f1")

    _write(tmp_path / "qnli" / "dev.tsv", [["index", "question", "sentence", "label"],
                                           ["0", "Who?", "Him.", "not_entailment"]])
    assert rc.get_processor("qnli").get_dev_examples(str(tmp_path / "qnli"))[0].label == "not_entailment"
    _write(tmp_path / "wnli" / "train.tsv", [["index", "sentence1", "sentence2", "label"], ["0", "a", "b", "1"]])
    assert rc.get_processor("wnli").get_train_examples(str(tmp_path / "wnli"))[0].label == "1"

    _write(tmp_path / "xnli" / "multinli" / "multinli.train.de.tsv", [["premise", "hypo", "label"],
                                                                       ["P", "H", "contradictory"]])
    dev_head = ["language", "gold_label", "s1_bp", "s2_bp", "s1_p", "s2_p", "sentence1", "sentence2"]
    _write(tmp_path / "xnli" / "xnli.dev.tsv", [dev_head, ["zh", "neutral", "", "", "", "", "z1", "z2"],
                                                ["de", "entailment", "", "", "", "", "d1", "d2"]])
    xnli = rc.get_processor("xnli", xnli_language="de")
    train = xnli.get_train_examples(str(tmp_path / "xnli"))
    assert [(e.guid, e.text_a, e.text_b, e.label) for e in train] == [("train-1", "P", "H", "contradiction")]
    dev = xnli.get_dev_examples(str(tmp_path / "xnli"))
    assert [(e.guid, e.text_a, e.label) for e in dev] == [("dev-2", "d1", "entailment")]


def test_parallel_feature_conversion_gives_the_same_features(tokenizer):
    examples = rc.MrpcProcessor().get_train_examples(glue("MRPC"))
    one = rc.examples_to_arrays(examples, ["0", "1"], 64, tokenizer)
    two = rc.examples_to_arrays(examples, ["0", "1"], 64, tokenizer, num_workers=2)
    assert list(one) == list(two) == list(rc.FEATURE_NAMES) and len(two["input_ids"]) == 3668
    for name in one:
        np.testing.assert_array_equal(one[name], two[name])
    bad = examples[:1200] + [rc.InputExample("train-x", "a", "b", "7")]
    with pytest.raises(ValueError, match=r"example train-x: label '7' is not in the label list"):
        rc.examples_to_arrays(bad, ["0", "1"], 64, tokenizer, num_workers=2)


def test_original_checkpoint_loads_by_name_and_logits_use_the_pooled_output():
    """A checkpoint written by the original code initialises every bert/ variable; the head is new, and the
    logits are the original's pooled output times output_weights^T plus output_bias."""
    import checkpoints
    import encoder
    folder = shared_path("reference", "original_checkpoint_tiny")
    config = encoder.BertConfig.from_json_file(os.path.join(folder, "bert_config.json"))
    model = rc.ClassifierTask(config, 3).build_model()
    names = list(model.variables_by_name())
    assert names[-2:] == ["output_weights", "output_bias"]
    assert model.variables_by_name()["output_weights"].shape == (3, config.hidden_size)
    loaded, new, _ = checkpoints.init_from_checkpoint(model.variables_by_name(),
                                                      os.path.join(folder, "model.ckpt-30"))
    assert new == ["output_weights", "output_bias"] and loaded == names[:-2]
    assert all(n.startswith("bert/") for n in loaded)
    weights = model.variables_by_name()["output_weights"].numpy()
    assert weights.std() == pytest.approx(0.02, rel=0.25) and np.abs(weights).max() <= 0.04 + 1e-6
    assert not model.variables_by_name()["output_bias"].numpy().any()
    model.variables_by_name()["output_bias"].assign([0.1, -0.2, 0.3])
    ref = np.load(os.path.join(folder, "reference_outputs.npz"))
    features = {"input_ids": ref["in_input_ids"], "input_mask": ref["in_input_mask"],
                "segment_ids": ref["in_segment_ids"]}
    logits = model(features, training=False).numpy()
    expected = ref["out_pooled_output"] @ weights.T + np.array([0.1, -0.2, 0.3])
    np.testing.assert_allclose(logits, expected, atol=1e-5)


# ---------------------------------------------------------------------------------------------------------
# The export: the SavedModel's two signatures equal --do_predict on MRPC dev, in a fresh process.


LOAD_SCRIPT = r"""
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # registers the tokenizer's ops
for name in ("run_classifier", "tokenization", "encoder", "modeling"):
    try:
        __import__(name)
        raise SystemExit("the project is importable from the loading process: " + name)
    except ImportError:
        pass
export_dir, work = sys.argv[1], sys.argv[2]
loaded = tf.saved_model.load(export_dir)
print("signatures", sorted(loaded.signatures.keys()))
ids = np.load(work + "/features.npz")
by_ids = loaded.signatures["serving_default"](
    input_ids=tf.constant(ids["input_ids"]), input_mask=tf.constant(ids["input_mask"]),
    segment_ids=tf.constant(ids["segment_ids"]))
texts = json.load(open(work + "/texts.json", encoding="utf-8"))
by_text = loaded.signatures["serving_text"](text_a=tf.constant(texts["a"]), text_b=tf.constant(texts["b"]))
single = loaded.serve_ids(tf.constant(ids["input_ids"][:2]), tf.constant(ids["input_mask"][:2]),
                          tf.constant(ids["segment_ids"][:2]))
np.savez(work + "/outputs.npz", by_ids=by_ids["probabilities"].numpy(),
         by_text=by_text["probabilities"].numpy(), single=single["probabilities"].numpy(),
         labels=np.array([label.decode() for label in by_text["label"].numpy()]),
         id_labels=np.array([label.decode() for label in by_ids["label"].numpy()]),
         label_list=np.array([label.decode() for label in loaded.labels.numpy()]))
"""


def _mrpc_options(job, **overrides):
    """ClassifierOptions of the session's MRPC classifier (tests/fixtures.py) on its data, starting from its
    checkpoint; overrides: flat flags (output_dir among them: never the fixture's own folder)."""
    values = dict(task_name="mrpc", data_dir=job["data_dir"], vocab_file=job["vocab_file"],
                  max_seq_length=job["max_seq_length"], bert_config_file=job["config_file"],
                  init_checkpoint=job["checkpoint"], predict_batch_size=32, eval_batch_size=32)
    values.update(overrides)
    return cli.build_options(rc.ClassifierOptions, **values)


@pytest.fixture(scope="module")
def mrpc_predictions(mrpc_classifier, tmp_path_factory):
    """--do_predict of the session's MRPC classifier on MRPC dev (its test.tsv): (the job's results, the rows of
    test_results.tsv)."""
    output_dir = tmp_path_factory.mktemp("mrpc_predict")
    results = rc.run(_mrpc_options(mrpc_classifier, do_predict=True, output_dir=str(output_dir)))
    with open(output_dir / "test_results.tsv", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    return results, rows


@pytest.mark.slow
def test_signatures_equal_do_predict_in_a_fresh_process(mrpc_classifier, mrpc_export, mrpc_predictions, tmp_path):
    """The session's export by run_classifier.py --export_dir, loaded where the project is not importable: both
    signatures (and serve_ids) give --do_predict's probabilities, and the labels with them."""
    results, rows = mrpc_predictions
    export_dir = mrpc_export["export_dir"]
    assert len(rows) == 408 and rows == [r.split("\t") for r in results["predict"]]
    expected = np.array(rows, dtype=np.float64)
    np.testing.assert_allclose(expected.sum(1), 1.0, atol=1e-6)
    assert expected.std(0).max() > 0.03  # the tiny model does tell examples apart
    assert open(os.path.join(export_dir, "assets.extra", "labels.txt")).read() == "0\n1\n"

    examples = rc.MrpcProcessor().get_test_examples(mrpc_classifier["data_dir"])
    tokenizer = tokenization.FullTokenizer(mrpc_classifier["vocab_file"], True)
    features = rc.examples_to_arrays(examples, ["0", "1"], mrpc_classifier["max_seq_length"], tokenizer)
    np.savez(str(tmp_path / "features.npz"),
             **{name: features[name].astype(np.int32) for name in ("input_ids", "input_mask", "segment_ids")})
    with open(tmp_path / "texts.json", "w", encoding="utf-8") as f:
        json.dump({"a": [e.text_a for e in examples], "b": [e.text_b for e in examples]}, f)
    proc = assert_ran(run_isolated(LOAD_SCRIPT, export_dir, tmp_path, cwd=tmp_path, timeout=300))
    assert "signatures ['serving_default', 'serving_text']" in proc.stdout
    outputs = np.load(str(tmp_path / "outputs.npz"))
    np.testing.assert_allclose(outputs["by_ids"], expected, atol=1e-5)
    np.testing.assert_allclose(outputs["by_text"], expected, atol=1e-5)
    np.testing.assert_allclose(outputs["single"], expected[:2], atol=1e-5)
    # The label strings come with the probabilities (MRPC's labels are "0" and "1").
    assert outputs["label_list"].tolist() == ["0", "1"]
    assert outputs["labels"].tolist() == outputs["id_labels"].tolist() == [str(i) for i in expected.argmax(1)]
    assert len(set(outputs["labels"].tolist())) == 2


@pytest.mark.slow
def test_predict_input_streams_stdin_with_one_model_load(mrpc_classifier, mrpc_predictions, tmp_path):
    """--predict_input=- in a subprocess: every stdin line predicted, equal to test_results.tsv."""
    job = mrpc_classifier
    examples = rc.MrpcProcessor().get_test_examples(job["data_dir"])[:20]
    expected = np.array(mrpc_predictions[1][:20], dtype=np.float64)
    stdin = "".join("%s\t%s\n" % (e.text_a, e.text_b) for e in examples)
    proc = assert_ran(run_script(
        "run_classifier.py", "--task_name=MRPC", f"--vocab_file={job['vocab_file']}",
        f"--bert_config_file={job['config_file']}", f"--init_checkpoint={job['checkpoint']}",
        f"--output_dir={tmp_path / 'out'}", f"--max_seq_length={job['max_seq_length']}", "--predict_input=-",
        "--predict_batch_size=3", input=stdin, cwd=tmp_path, timeout=300))
    got = np.array([line.split("\t") for line in proc.stdout.strip().split("\n")], dtype=np.float64)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert proc.stderr.count("Initializing from checkpoint") == 1
    assert "Predicted 20 inputs from <stdin>" in proc.stderr


def test_predict_input_bad_line_names_the_line(mrpc_classifier, tmp_path):
    path = tmp_path / "inputs.txt"
    path.write_text("first\tsecond\nno tab here\n")
    with pytest.raises(ValueError, match=r"inputs.txt line 2: expected text_a<TAB>text_b"):
        rc.run(_mrpc_options(mrpc_classifier, data_dir=None, predict_input=str(path), output_dir=str(tmp_path / "o"),
                             predict_output=str(tmp_path / "out.tsv")))


def test_init_checkpoint_shape_mismatch_is_a_clear_error(mrpc_classifier, tmp_path):
    config_file = str(tmp_path / "bert_config.json")
    values = json.load(open(mrpc_classifier["config_file"]))
    values["hidden_size"] = 48
    json.dump(values, open(config_file, "w"))
    with pytest.raises(ValueError, match=r"Shape mismatch .*bert/embeddings/word_embeddings: model \[30522, 48\]"):
        rc.run(_mrpc_options(mrpc_classifier, bert_config_file=config_file, output_dir=str(tmp_path / "out"),
                             do_predict=True))


def _loaded_text_outputs(export_dir, **texts):
    loaded = tf.saved_model.load(export_dir)
    serve = loaded.signatures["serving_text"]
    return {k: v.numpy() for k, v in serve(**{k: tf.constant(v) for k, v in texts.items()}).items()}


@pytest.mark.slow
def test_single_sentence_and_regression_exports_equal_do_predict(tmp_path):
    """CoLA (one text, MCC) and STS-B (regression score): predict, export, compare (random tiny models;
    training is covered above)."""
    import itertools
    values = dict(type_vocab_size=2, initializer_range=0.2)
    config_file = tiny.config_file(tmp_path / "bert_config.json", **values)

    def random_checkpoint(output_dir, num_labels, is_regression):
        tiny.save(tiny.random_classifier(tiny.config(**values), num_labels, seed=11, is_regression=is_regression),
                  output_dir)

    cola = tmp_path / "cola"
    cola.mkdir()
    with open(os.path.join(glue("CoLA"), "dev.tsv"), encoding="utf-8") as f:
        dev_lines = list(itertools.islice(f, 40))
    (cola / "dev.tsv").write_text("".join(dev_lines), encoding="utf-8")
    (cola / "test.tsv").write_text("index\tsentence\n" + "".join(
        "%d\t%s\n" % (i, line.rstrip("\n").split("\t")[3]) for i, line in enumerate(dev_lines)), encoding="utf-8")
    out = str(tmp_path / "cola_out")
    random_checkpoint(out, 2, False)
    rc.run(cli.build_options(rc.ClassifierOptions, output_dir=out, bert_config_file=config_file, eval_batch_size=16,
                             predict_batch_size=16, task_name="cola", data_dir=str(cola), vocab_file=vocab(),
                             max_seq_length=32, do_eval=True, do_predict=True,
                             export_dir=str(tmp_path / "cola_export")))
    written = open(os.path.join(out, "eval_results.txt")).read()
    assert "eval_mcc = " in written and "eval_accuracy = " in written
    expected = np.loadtxt(os.path.join(out, "test_results.tsv"), delimiter="\t")
    texts = [line.rstrip("\n").split("\t")[3] for line in dev_lines]
    got = _loaded_text_outputs(str(tmp_path / "cola_export"), text_a=texts)
    np.testing.assert_allclose(got["probabilities"], expected, atol=1e-5)

    stsb = tmp_path / "stsb"
    stsb.mkdir()
    with open(os.path.join(glue("STS-B"), "test.tsv"), encoding="utf-8") as f:
        (stsb / "test.tsv").write_text("".join(itertools.islice(f, 41)), encoding="utf-8")
    out = str(tmp_path / "stsb_out")
    random_checkpoint(out, 1, True)
    rc.run(cli.build_options(rc.ClassifierOptions, output_dir=out, bert_config_file=config_file,
                             predict_batch_size=16, task_name="sts-b", data_dir=str(stsb), vocab_file=vocab(),
                             max_seq_length=32, do_predict=True, export_dir=str(tmp_path / "stsb_export")))
    expected = np.loadtxt(os.path.join(out, "test_results.tsv"))
    assert expected.shape == (40,) and expected.std() > 0
    examples = rc.StsbProcessor().get_test_examples(str(stsb))
    got = _loaded_text_outputs(str(tmp_path / "stsb_export"), text_a=[e.text_a for e in examples],
                               text_b=[e.text_b for e in examples])
    assert list(got) == ["score"]
    np.testing.assert_allclose(got["score"], expected, atol=1e-5)
