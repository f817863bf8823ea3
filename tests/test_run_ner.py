"""run_ner.py: CoNLL reading, features (windows, first sub-token labels), decoding, bad input, end to end."""
import os

import numpy as np
import pytest

import checkpoints
import cli
import conlleval
import packing
import run_ner
import runner
import serving
import tokenization
from model_options import ModelOptions
from tests.shared_data import shared_path

SPLITS = (("train.txt", "eng.train", 14041), ("dev.txt", "eng.testa", 3250), ("test.txt", "eng.testb", 3453))


@pytest.fixture(scope="module")
def cased_tokenizer():
    return tokenization.FullTokenizer(shared_path("vocab", "cased", "vocab.txt"), do_lower_case=False)


@pytest.fixture(scope="module")
def conll_test():
    return run_ner.read_conll(shared_path("data", "conll2003", "test.txt"))


@pytest.mark.parametrize("name,iob1_name,expected", SPLITS)
def test_conll2003_sentence_counts_and_iob1_files_agree(name, iob1_name, expected):
    iob2 = run_ner.read_conll(shared_path("data", "conll2003", name))
    iob1 = run_ner.read_conll(shared_path("data", "conll2003", "original_iob1", iob1_name))
    assert len(iob2) == len(iob1) == expected
    for a, b in zip(iob2, iob1):
        assert (a.words, a.labels, a.document) == (b.words, b.labels, b.document)
    raw_iob1_tags = [line.split()[-1] for line in open(shared_path("data", "conll2003", "original_iob1", iob1_name),
                                                       encoding="utf-8") if line.split()
                     and not line.startswith(run_ner.DOCSTART)]
    assert len(raw_iob1_tags) == sum(len(s.labels) for s in iob1)
    assert sum(t.startswith("B-") for t in raw_iob1_tags) < sum(t.startswith("B-") for s in iob1 for t in s.labels)


def test_labels_from_training_data():
    train = run_ner.read_conll(shared_path("data", "conll2003", "train.txt"))
    assert run_ner.get_labels(train) == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-MISC", "I-ORG",
                                         "I-PER"]
    assert train[0].words == ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."]
    assert train[0].labels == ["B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"]
    assert train[-1].document == 945


def test_to_iob2():
    assert run_ner.to_iob2(["I-PER", "I-PER", "B-PER", "I-LOC", "O", "I-ORG", "I-ORG"]) == \
        ["B-PER", "I-PER", "B-PER", "B-LOC", "O", "B-ORG", "I-ORG"]
    iob2 = ["B-PER", "I-PER", "O", "B-LOC", "B-LOC"]
    assert run_ner.to_iob2(iob2) == iob2


def test_windows_cover_every_token_and_pick_max_context():
    """A 10-piece sentence in windows of 4 pieces every 2: windows start at 0, 2, 4, 6; each word (one piece
    here) is scored in the window where it has the most context (the original run_squad.py's rule)."""
    words = [[[1000 + i] for i in range(10)], [[2000], [2001], [2002]]]
    packed = packing.ner_windows(packing.ragged_word_ids(words), packing.Windowing(6, 2),
                                 packing.SpecialIds(101, 102, 100))
    ids = packed["input_ids"].numpy()
    assert packed["sentence_index"].numpy().tolist() == [0, 0, 0, 0, 1]
    assert [row[1:5].tolist() for row in ids[:4]] == [[1000 + s + i for i in range(4)] for s in (0, 2, 4, 6)]
    scored = packed["scored_word"].numpy()
    owners = [int(np.flatnonzero((scored[:4] == w).any(axis=1))[0]) for w in range(10)]
    assert owners == [0, 0, 0, 1, 1, 2, 2, 3, 3, 3]
    assert ids[4][:5].tolist() == [101, 2000, 2001, 2002, 102] and scored[4][1:4].tolist() == [0, 1, 2]


def _gold_ids(features):
    return [np.array(f.label_ids) for f in features]


@pytest.mark.parametrize("max_seq_length,doc_stride,document_context", [(128, 64, False), (128, 64, True),
                                                                        (24, 5, False), (12, 10, True)])
def test_every_word_gets_exactly_one_prediction(conll_test, cased_tokenizer, max_seq_length, doc_stride,
                                                document_context):
    labels = run_ner.get_labels(conll_test)
    features = run_ner.convert_sentences_to_features(conll_test, labels, max_seq_length, cased_tokenizer,
                                                     doc_stride=doc_stride, document_context=document_context)
    word_tokenizer = run_ner.WordTokenizer(cased_tokenizer)
    lengths = [sum(len(word_tokenizer(w)) for w in s.words) for s in conll_test]
    num_long = sum(n > max_seq_length - 2 for n in lengths)
    assert len(features) >= len(conll_test) + num_long
    if max_seq_length < 128:
        assert num_long > 100
    seen = np.zeros(sum(len(s.words) for s in conll_test), dtype=int)
    offsets = np.cumsum([0] + [len(s.words) for s in conll_test])
    for f in features:
        assert len(f.input_ids) == len(f.input_mask) == len(f.label_ids) == max_seq_length
        assert sum(f.label_weights) == len(f.scored)
        for position, word_index in f.scored:
            seen[offsets[f.sentence_index] + word_index] += 1
            first_piece = word_tokenizer(conll_test[f.sentence_index].words[word_index])[0]
            assert f.input_ids[position] == cased_tokenizer.vocab[first_piece]
    assert (seen == 1).all()
    tags = run_ner.decode_predictions(conll_test, features, _gold_ids(features), labels)
    assert tags == [s.labels for s in conll_test]
    if document_context:
        _check_document_context(conll_test, features, word_tokenizer, max_seq_length)


def _check_document_context(sentences, features, word_tokenizer, max_seq_length):
    """A sentence that fits sits in a contiguous slice of its document's sub-tokens, filled to the window."""
    streams, where = {}, []
    for s in sentences:
        stream = streams.setdefault(s.document, [])
        pieces = [p for w in s.words for p in word_tokenizer(w)]
        where.append((len(stream), len(pieces)))
        stream.extend(pieces)
    max_tokens = max_seq_length - 2
    checked = 0
    for f in features:
        start, length = where[f.sentence_index]
        if length > max_tokens:
            continue
        stream = streams[sentences[f.sentence_index].document]
        n = sum(f.input_mask) - 2
        assert n == min(max_tokens, len(stream))
        left = f.scored[0][0] - 1
        window = [word_tokenizer.tokenizer.vocab[p] for p in stream[start - left:start - left + n]]
        assert f.input_ids[1:n + 1] == window
        checked += 1
    assert checked == sum(length <= max_tokens for _, length in where) > 1000


def test_sub_tokens_and_padding_have_zero_weight(cased_tokenizer):
    sentence = run_ner.Sentence("t-0", ["Johanson", "lives", "in", "Reykjavik"], ["B-PER", "O", "O", "B-LOC"],
                                0, "mem", [1, 2, 3, 4])
    labels = ["O", "B-LOC", "B-PER"]
    [feature] = run_ner.convert_sentences_to_features([sentence], labels, 16, cased_tokenizer)
    tokens = cased_tokenizer.convert_ids_to_tokens(feature.input_ids[:sum(feature.input_mask)])
    pieces = [cased_tokenizer.tokenize(w) for w in sentence.words]
    assert tokens == ["[CLS]"] + sum(pieces, []) + ["[SEP]"]
    assert len(pieces[0]) > 1 and len(pieces[3]) > 1
    starts = np.cumsum([1] + [len(p) for p in pieces])[:-1]
    expected_weights = np.zeros(16)
    expected_weights[starts] = 1.0
    assert feature.label_weights == list(expected_weights)
    assert [feature.label_ids[p] for p in starts] == [2, 0, 0, 1]


def test_word_without_wordpieces_becomes_unk(cased_tokenizer):
    sentence = run_ner.Sentence("t-0", ["a", "\u200b", "b"], ["O", "B-PER", "O"], 0, "mem", [1, 2, 3])
    [feature] = run_ner.convert_sentences_to_features([sentence], ["O", "B-PER"], 8, cased_tokenizer)
    assert cased_tokenizer.convert_ids_to_tokens(feature.input_ids[1:4]) == ["a", "[UNK]", "b"]
    assert feature.scored == [(1, 0), (2, 1), (3, 2)]


def test_predictions_file_scores_with_conlleval(tmp_path, conll_test):
    triples = run_ner.prediction_triples(conll_test, [s.labels for s in conll_test])
    path = str(tmp_path / "test_predictions.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(run_ner.format_predictions(triples))
    report = conlleval.format_report(conlleval.evaluate_file(path))
    assert report.startswith("processed 46435 tokens with 5648 phrases; found: 5648 phrases; correct: 5648.\n")


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_wrong_number_of_columns_names_file_and_line(tmp_path):
    path = _write(tmp_path, "train.txt", "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP\n")
    with pytest.raises(ValueError, match=r"train.txt line 4: expected 4 columns .* found 3"):
        run_ner.read_conll(path)


def test_bad_tag_empty_file_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match=r"bad.txt line 1: tag 'X-PER' is not IOB"):
        run_ner.read_conll(_write(tmp_path, "bad.txt", "Peter X-PER\n"))
    with pytest.raises(ValueError, match=r"empty.txt: no sentences found"):
        run_ner.read_conll(_write(tmp_path, "empty.txt", ""))
    with pytest.raises(ValueError, match=r"docs.txt: no sentences found"):
        run_ner.read_conll(_write(tmp_path, "docs.txt", "-DOCSTART- O\n\n\n"))
    with pytest.raises(FileNotFoundError, match=r"nothere.txt"):
        run_ner.read_conll(str(tmp_path / "nothere.txt"))


def test_unknown_tag_at_predict_time(tmp_path, cased_tokenizer):
    sentences = run_ner.read_conll(_write(tmp_path, "test.txt", "Peter B-PER\nin O\nParis B-LOC\n"))
    with pytest.raises(ValueError, match=r"test.txt line 3: tag 'B-LOC' is not in the label list"):
        run_ner.convert_sentences_to_features(sentences, ["O", "B-PER", "I-PER"], 16, cased_tokenizer)


# ----------------------------------------------------------------------------------------------
# Model, loss and a short end-to-end run on a tiny config.

import json
import subprocess
import sys

import tensorflow as tf

import encoder
import training

TINY_CONFIG = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=64, max_position_embeddings=64)


def _tiny_bert_config():
    return encoder.BertConfig.from_dict(TINY_CONFIG)


def test_head_variables_have_original_names_and_shapes():
    model = run_ner.NerTask(_tiny_bert_config(), 9).build_model()
    variables = model.variables_by_name()
    assert tuple(variables["output_weights"].shape) == (9, 32)
    assert tuple(variables["output_bias"].shape) == (9,)
    assert "bert/encoder/layer_1/output/LayerNorm/gamma" in variables
    assert np.all(variables["output_bias"].numpy() == 0)
    assert np.abs(variables["output_weights"].numpy()).max() <= 0.04


def test_loss_ignores_unscored_positions_and_accumulates_exactly():
    task = run_ner.NerTask(_tiny_bert_config(), 5)
    model = task.build_model()
    rng = np.random.RandomState(0)
    batch = {"input_ids": rng.randint(1000, 2000, (4, 10)).astype(np.int32),
             "input_mask": np.ones((4, 10), np.int32), "segment_ids": np.zeros((4, 10), np.int32),
             "label_ids": rng.randint(0, 5, (4, 10)).astype(np.int32),
             "label_weights": (rng.rand(4, 10) < 0.4).astype(np.float32)}
    batch["label_weights"][0, 1] = 1.0
    batch = {k: tf.constant(v) for k, v in batch.items()}
    logits = model(batch, training=False)
    losses = run_ner.token_losses(logits, batch["label_ids"]).numpy()
    w = batch["label_weights"].numpy()
    expected = (losses * w).sum() / w.sum()
    loss, _ = task.compute_loss(model, batch, training=False)
    assert np.isclose(float(loss), expected, rtol=1e-6)
    # Changing the labels of unscored positions changes nothing.
    other = dict(batch, label_ids=tf.where(batch["label_weights"] > 0, batch["label_ids"], 4))
    assert np.isclose(float(task.compute_loss(model, other, training=False)[0]), expected, rtol=1e-6)
    # Two micro-batches (as training.py splits them) average to the whole batch's loss.
    prepared = task.prepare_batch(batch, 2)
    halves = [task.compute_loss(model, training._split_micro_batches(prepared, 2, i), training=False)[0]
              for i in range(2)]
    assert np.isclose(float(sum(halves)) / 2, expected, rtol=1e-6)


def _write_subset(src, dst, num_sentences, extra_long=None):
    """First num_sentences sentences of a CoNLL file (with its -DOCSTART- lines), plus an optional long one."""
    out, count = [], 0
    with open(src, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                if out and out[-1].strip() and not out[-1].startswith(run_ner.DOCSTART):
                    count += 1
                out.append(line)
                if count == num_sentences:
                    break
            else:
                out.append(line)
    if extra_long:
        out.append("\n")
        out.extend("%s NN I-NP %s\n" % (word, tag) for word, tag in extra_long)
        out.append("\n")
    with open(dst, "w", encoding="utf-8") as f:
        f.writelines(out)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """Trains, evaluates, predicts and exports with a 2-layer, hidden-32 model on CoNLL-2003 subsets."""
    root = tmp_path_factory.mktemp("ner")
    data_dir = root / "data"
    data_dir.mkdir()
    conll = shared_path("data", "conll2003")
    long_sentence = [("Reykjavik" if i % 7 == 0 else "word%d" % i, "B-LOC" if i % 7 == 0 else "O")
                     for i in range(40)]
    _write_subset(os.path.join(conll, "train.txt"), data_dir / "train.txt", 96)
    _write_subset(os.path.join(conll, "dev.txt"), data_dir / "dev.txt", 40, long_sentence)
    _write_subset(os.path.join(conll, "original_iob1", "eng.testb"), data_dir / "test.txt", 40, long_sentence)
    config_file = root / "bert_config.json"
    config_file.write_text(json.dumps(TINY_CONFIG))
    output_dir = root / "out"
    export_dir = root / "export"
    options = cli.build_options(
        run_ner.NerOptions, output_dir=str(output_dir), bert_config_file=str(config_file), train_batch_size=8,
        eval_batch_size=8, predict_batch_size=8, learning_rate=2e-3, save_checkpoints_steps=100,
        iterations_per_loop=100, deterministic=True, data_dir=str(data_dir),
        vocab_file=shared_path("vocab", "uncased", "vocab.txt"), do_lower_case=True, max_seq_length=24,
        do_train=True, do_eval=True, do_predict=True, num_train_epochs=2.0, export_dir=str(export_dir), doc_stride=8)
    config = options.training
    results = run_ner.run(options)
    return dict(root=root, data_dir=data_dir, output_dir=output_dir, export_dir=export_dir, results=results,
                config=config)


@pytest.mark.slow
def test_tiny_end_to_end_train_eval_predict(tiny_run):
    out = tiny_run["output_dir"]
    results = tiny_run["results"]
    train_sentences = run_ner.read_conll(str(tiny_run["data_dir"] / "train.txt"))
    assert len(train_sentences) == 96
    assert results["train"]["global_step"] > 10
    assert (out / "checkpoint").exists()
    assert (out / "label_list.txt").read_text().split() == run_ner.get_labels(train_sentences)
    for set_name, file_name in (("eval", "dev.txt"), ("test", "test.txt")):
        sentences = run_ner.read_conll(str(tiny_run["data_dir"] / file_name))
        assert len(sentences) == 41 and len(sentences[-1].words) == 40
        lines = (out / ("%s_predictions.txt" % set_name)).read_text(encoding="utf-8").split("\n")
        rows = [line.split(" ") for line in lines if line]
        assert [r[0] for r in rows] == [w for s in sentences for w in s.words]
        assert [r[1] for r in rows] == [t for s in sentences for t in s.labels]
        report = subprocess.run([sys.executable, os.path.join(os.path.dirname(run_ner.__file__), "conlleval.py"),
                                 str(out / ("%s_predictions.txt" % set_name))], capture_output=True, check=True)
        assert report.stdout.decode() == (out / ("%s_conlleval.txt" % set_name)).read_text()
        result = results["eval" if set_name == "eval" else "predict"]
        counts = conlleval.evaluate_file(str(out / ("%s_predictions.txt" % set_name)))
        assert result[set_name + "_f1"] == pytest.approx(conlleval.metrics(counts)["f1"] / 100)
        assert result["global_step"] == results["train"]["global_step"]
        assert np.isfinite(result[set_name + "_loss"]) and result[set_name + "_loss"] > 0
    written = dict(line.split(" = ") for line in (out / "eval_results.txt").read_text().splitlines())
    for key in ("eval_precision", "eval_recall", "eval_f1", "eval_loss", "eval_token_accuracy", "global_step",
                "eval_LOC_f1", "eval_PER_precision"):
        assert key in written
    # The trained model beats the all-"O" baseline on scored-token cross entropy (ln 9 = 2.2 at random).
    assert results["eval"]["eval_loss"] < 1.5


@pytest.mark.slow
def test_tiny_export_loads_in_fresh_process(tiny_run, tmp_path):
    sentences = run_ner.read_conll(str(tiny_run["data_dir"] / "test.txt"))
    labels = (tiny_run["output_dir"] / "label_list.txt").read_text().split()
    tokenizer = tokenization.FullTokenizer(shared_path("vocab", "uncased", "vocab.txt"), do_lower_case=True)
    features = run_ner.convert_sentences_to_features(sentences, labels, 24, tokenizer, doc_stride=8)
    arrays = run_ner.features_to_arrays(features, 24)
    inputs_path = tmp_path / "inputs.npz"
    np.savez(inputs_path, **{k: arrays[k] for k in ("input_ids", "input_mask", "segment_ids")})
    (tmp_path / "sentences.json").write_text(json.dumps([" ".join(s.words) for s in sentences]))
    script = (
        "import json, sys, numpy as np, tensorflow as tf, tensorflow_text\n"
        "m = tf.saved_model.load(sys.argv[1])\n"
        "f = m.signatures['serving_default']\n"
        "x = np.load(sys.argv[2])\n"
        "out = f(**{k: tf.constant(x[k]) for k in ('input_ids', 'input_mask', 'segment_ids')})\n"
        "np.save(sys.argv[3], out['probabilities'].numpy())\n"
        "out = m.signatures['serving_text'](sentence=tf.constant(json.load(open(sys.argv[4]))))\n"
        "print(json.dumps({k: v.numpy().tolist() for k, v in out.items()}, default=bytes.decode))\n")
    probs_path = tmp_path / "probs.npy"
    proc = subprocess.run([sys.executable, "-c", script, str(tiny_run["export_dir"]), str(inputs_path),
                           str(probs_path), str(tmp_path / "sentences.json")],
                          check=True, capture_output=True, text=True, cwd=str(tmp_path))
    by_text = json.loads(proc.stdout.strip().splitlines()[-1])
    probs = np.load(probs_path)
    assert probs.shape == (len(features), 24, len(labels))
    assert np.allclose(probs.sum(-1), 1.0, atol=1e-5)
    assert (tiny_run["export_dir"] / "assets.extra" / "labels.txt").read_text().split() == labels
    tags = run_ner.decode_predictions(sentences, features, list(probs.argmax(-1)), labels)
    rows = [line.split(" ") for line in (tiny_run["output_dir"] / "test_predictions.txt").read_text(
        encoding="utf-8").split("\n") if line]
    assert [r[2] for r in rows] == [t for s in tags for t in s]
    # serving_text: raw sentences in, the words and one tag per word out, equal to the runner's predictions.
    assert by_text["num_words"] == [len(s.words) for s in sentences]
    assert [w[:n] for w, n in zip(by_text["words"], by_text["num_words"])] == [s.words for s in sentences]
    assert [t[:n] for t, n in zip(by_text["tags"], by_text["num_words"])] == tags


@pytest.mark.slow
def test_serving_text_tags_equal_the_runner_on_long_sentences(conll_test, cased_tokenizer, tmp_path):
    """A model whose tags vary from word to word: serving_text's windows and per-word choice equal the
    runner's on CoNLL test sentences, a fifth of them split into windows at max_seq_length 24."""
    config = encoder.BertConfig.from_dict(dict(TINY_CONFIG, vocab_size=28996))
    labels = run_ner.get_labels(conll_test)
    task = run_ner.NerTask(config, len(labels))
    tf.keras.utils.set_random_seed(5)
    model = task.build_model()
    model.head.output_weights.assign(model.head.output_weights * 50.0)
    checkpoint = checkpoints.CheckpointManager(str(tmp_path / "ckpt")).save(model.variables_by_name(), 0)
    sentences = conll_test[:300]
    features = run_ner.convert_sentences_to_features(sentences, labels, 24, cased_tokenizer, doc_stride=8)
    assert len(features) > len(sentences) * 1.2
    outputs = runner.predict_arrays(task, run_ner.features_to_arrays(features, 24),
                                    training.TrainingConfig(predict_batch_size=32), None, checkpoint)
    tags, _ = run_ner.sentence_tags(sentences, features, outputs, labels)
    assert len({t for sentence in tags for t in sentence}) > 3
    module = serving.NerServing(model, ModelOptions(vocab_file=shared_path("vocab", "cased", "vocab.txt"),
                                                    do_lower_case=False, max_seq_length=24), 8, labels)
    out = module.serve_text(tf.constant([" ".join(s.words) for s in sentences]))
    got = [[t.decode() for t in row[:n]] for row, n in zip(out["tags"].numpy(), out["num_words"].numpy())]
    assert got == tags


@pytest.mark.slow
def test_cli_exports_from_output_dir(tiny_run, tmp_path):
    root = tiny_run["root"]
    export_dir = tmp_path / "cli_export"
    command = [sys.executable, os.path.join(os.path.dirname(run_ner.__file__), "run_ner.py"),
               "--data_dir=%s" % tiny_run["data_dir"],
               "--vocab_file=%s" % shared_path("vocab", "uncased", "vocab.txt"),
               "--bert_config_file=%s" % (root / "bert_config.json"), "--output_dir=%s" % tiny_run["output_dir"],
               "--export_dir=%s" % export_dir, "--max_seq_length=24"]
    subprocess.run(command, check=True, capture_output=True)
    assert (export_dir / "saved_model.pb").exists()
    assert (export_dir / "assets.extra" / "labels.txt").read_text() == \
        (tiny_run["output_dir"] / "label_list.txt").read_text()
    bad = subprocess.run(command[:2] + ["--data_dir=%s" % tmp_path, "--vocab_file=%s" % shared_path(
        "vocab", "uncased", "vocab.txt"), "--bert_config_file=%s" % (root / "bert_config.json"),
        "--output_dir=%s" % (tmp_path / "o"), "--do_predict", "--max_seq_length=24"], capture_output=True)
    assert bad.returncode != 0
    assert b"no label list" in bad.stderr


def test_trimmed_batches_give_the_same_outputs(conll_test, cased_tokenizer):
    config = encoder.BertConfig.from_dict(dict(TINY_CONFIG, vocab_size=28996, max_position_embeddings=128))
    task = run_ner.NerTask(config, 9)
    model = task.build_model()
    labels = run_ner.get_labels(conll_test)
    short = [s for s in conll_test if len(s.words) <= 30][:64]
    features = run_ner.convert_sentences_to_features(short, labels, 128, cased_tokenizer)
    arrays = run_ner.features_to_arrays(features, 128)
    full = next(iter(runner.array_input_fn(arrays, False, trim=False)(len(features))))
    trimmed = next(iter(runner.array_input_fn(arrays, False, trim=True)(len(features))))
    multiple = packing.LENGTH_MULTIPLE
    length = -(-int(np.max(arrays["input_mask"].sum(1))) // multiple) * multiple
    assert trimmed["input_ids"].shape == (len(features), length) and length < 128
    a = task.predict_outputs(model, full)
    b = task.predict_outputs(model, trimmed)
    scored = arrays["label_weights"][:, :length] > 0
    assert np.array_equal(a["predicted_ids"].numpy()[:, :length][scored], b["predicted_ids"].numpy()[scored])
    assert np.allclose(a["token_loss"].numpy()[:, :length], b["token_loss"].numpy(), atol=1e-5)


@pytest.mark.slow
def test_litert_int8_model_tags_as_the_saved_model(tiny_run, tmp_path):
    """--export_tflite --tflite_quantize: the int8 LiteRT model of serving_default (token ids in) tags the dev
    windows as the SavedModel does, its probabilities close; a request of another width is answered too."""
    import litert_export
    root = tiny_run["root"]
    labels = (tiny_run["output_dir"] / "label_list.txt").read_text().split()
    # A model whose tags vary from token to token (the tiny run's tags nearly everything O).
    tf.keras.utils.set_random_seed(5)
    model = run_ner.NerTask(_tiny_bert_config(), len(labels)).build_model()
    model.head.output_weights.assign(model.head.output_weights * 50.0)
    checkpoints.CheckpointManager(str(tmp_path / "ckpt")).save(model.variables_by_name(), 0)
    (tmp_path / "ckpt" / "label_list.txt").write_text("\n".join(labels) + "\n")
    export_dir, tflite = tmp_path / "export", tmp_path / "lite" / "ner.tflite"
    command = [sys.executable, os.path.join(os.path.dirname(run_ner.__file__), "run_ner.py"),
               "--data_dir=%s" % tiny_run["data_dir"], "--vocab_file=%s" % shared_path("vocab", "uncased", "vocab.txt"),
               "--bert_config_file=%s" % (root / "bert_config.json"), "--output_dir=%s" % (tmp_path / "ckpt"),
               "--export_dir=%s" % export_dir, "--max_seq_length=24", "--export_tflite=%s" % tflite,
               "--tflite_quantize"]
    proc = subprocess.run(command, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Wrote the LiteRT model" in proc.stderr and "dynamic-range int8" in proc.stderr
    sentences = run_ner.read_conll(str(tiny_run["data_dir"] / "dev.txt"))
    tokenizer = tokenization.FullTokenizer(shared_path("vocab", "uncased", "vocab.txt"), True)
    features = run_ner.convert_sentences_to_features(sentences, labels, 24, tokenizer, doc_stride=8)
    arrays = {k: v.astype(np.int32) for k, v in run_ner.features_to_arrays(features, 24).items()
              if k in serving.INPUT_NAMES}
    expected = tf.saved_model.load(str(export_dir)).signatures["serving_default"](
        **{k: tf.constant(v) for k, v in arrays.items()})["probabilities"].numpy()
    run = litert_export.interpreter(tflite).get_signature_runner()
    got = run(**arrays)["probabilities"]
    real = arrays["input_mask"] == 1
    assert real.sum() > 400
    same = (got.argmax(-1) == expected.argmax(-1))[real]
    assert same.mean() >= 0.99, same.mean()  # 0.9989 when written
    assert np.abs(got - expected)[real].max() < 0.1  # 0.015
    assert len(set(expected.argmax(-1)[real])) > 3  # the tags vary: the agreement says something
    assert tflite.stat().st_size < 0.4 * sum(f.stat().st_size for f in (export_dir / "variables").iterdir())
    lengths = arrays["input_mask"].sum(axis=1)
    rows = np.argsort(lengths, kind="stable")[:3]  # the shortest windows, cut to their longest
    width = int(lengths[rows].max())
    assert width < 24
    short = {k: np.ascontiguousarray(v[rows, :width]) for k, v in arrays.items()}
    np.testing.assert_allclose(run(**short)["probabilities"], got[rows, :width], atol=0.05)
