"""run_classifier.py --long_text: texts longer than one window read whole (windows, head_tail) in the records, the
training, the evaluation and prediction per document, and the export's serving_text alike (long_text.py)."""
import os
import random

import numpy as np
import pytest
import tensorflow as tf

import long_text
import packing
import run_classifier as rc
import tokenization
from tests import tiny
from tests.processes import assert_ran, run_script, user_error
from tests.shared_data import minilm_dir, shared_path, vocab


@pytest.fixture(scope="module")
def tokenizer():
    return tokenization.FullTokenizer(vocab(), do_lower_case=True)


def passages(count, words, seed=3):
    """`count` passages of `words` words of a Gutenberg novel (real long text), from random places."""
    with open(shared_path("data", "text", "gutenberg", "austen-persuasion.txt"), encoding="utf-8") as f:
        text = f.read().split()
    rng = random.Random(seed)
    return [" ".join(text[start:start + words]) for start in (rng.randrange(len(text) - words) for _ in range(count))]


def test_windows_read_every_token_once_in_order(tokenizer):
    """Each window holds [CLS] a slice of text_a [SEP] text_b [SEP]; the slices start every doc_stride tokens (a
    stride past a window's end is the window's size) and the last ends at text_a's end; text_b is whole in every
    window (cut to half a window when longer); an empty text_a has one window; max_windows_per_document keeps the
    first windows; by_document puts them side by side (pack_documents, no documents too)."""
    texts = passages(4, 300) + ["", "short one"]
    ids_a = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(t)) for t in texts]
    ids_b = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(t)) for t in ["what is it ?", "", "a", "", "b", ""]]
    ids_b[3] = ids_a[0][:100]  # longer than half a window
    special = packing.SpecialIds.of(tokenizer.vocab)
    length, stride = 64, 40
    for bound in (100, 3):
        reading = long_text.LongText("windows", doc_stride=stride, max_windows_per_document=bound)
        packed = {k: v.numpy() for k, v in long_text.windows(packing.ragged_ids(ids_a), packing.ragged_ids(ids_b),
                                                               length, reading, special).items()}
        for doc, (a, b) in enumerate(zip(ids_a, ids_b)):
            rows = np.flatnonzero(packed["document"] == doc)
            b_kept = b[:(length - 3) // 2]
            room = length - 2 - (len(b_kept) + 1 if b_kept else 0)
            step = min(stride, room)  # a stride past the window's end would skip tokens
            expected_count = 1 if len(a) <= room else 1 + -(-(len(a) - room) // step)
            assert packed["num_windows"][doc] == expected_count
            assert list(packed["window"][rows]) == list(range(min(expected_count, bound)))
            for k, row in enumerate(rows):
                ids, mask, segments = (packed[name][row] for name in ("input_ids", "input_mask", "segment_ids"))
                piece = a[k * step:k * step + room]
                sep_b = [special.sep] if b_kept else []
                expected = [special.cls] + piece + [special.sep] + b_kept + sep_b
                assert list(ids[:mask.sum()]) == expected and not ids[mask.sum():].any()
                assert list(segments[:mask.sum()]) == [0] * (len(piece) + 2) + [1] * (len(b_kept) + len(sep_b))
            if expected_count <= bound and a:  # the last window ends at text_a's end
                assert k * step + room >= len(a) and (k == 0 or (k - 1) * step + room < len(a))
        dense = long_text.by_document(long_text.windows(packing.ragged_ids(ids_a), packing.ragged_ids(ids_b), length,
                                                        reading, special), len(texts), bound)
        dense = {k: v.numpy().reshape(len(texts), bound, length) for k, v in dense.items()}
        for row in range(len(packed["document"])):
            doc, k = packed["document"][row], packed["window"][row]
            np.testing.assert_array_equal(dense["input_ids"][doc, k], packed["input_ids"][row])
        present = dense["input_mask"][:, :, 0] > 0
        np.testing.assert_array_equal(present.sum(1), np.minimum(packed["num_windows"], bound))
    for mode, width in (("truncate", length), ("head_tail", length), ("windows", 3 * length)):  # no documents
        empty = long_text.pack_documents(packing.ragged_ids([]), packing.ragged_ids([]), length,
                                         long_text.LongText(mode, max_windows_per_document=3), special)
        assert all(empty[name].shape == (0, width) for name in packing.INPUT_NAMES)


def test_head_tail_keeps_the_first_and_the_last_tokens(tokenizer):
    """head_tail (pack_pair with a head, as pack_documents packs it): a cut text_a keeps its first `head` tokens and
    then its last ones, as many as the original's truncation keeps; a text that fits, and text_b, are packed as
    without it."""
    texts = passages(3, 200) + ["short text"]
    ids_a = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(t)) for t in texts]
    ids_b = [[], tokenizer.convert_tokens_to_ids(tokenizer.tokenize("is this a question ?")), [], []]
    length, head = 48, 11
    plain = packing.pack_pairs(tokenizer, ids_a, ids_b, length)
    reading = long_text.LongText("head_tail", head_tokens=head)
    cut = {name: value.numpy() for name, value in long_text.pack_documents(
        packing.ragged_ids(ids_a), packing.ragged_ids(ids_b), length, reading,
        packing.SpecialIds.of(tokenizer.vocab)).items()}
    np.testing.assert_array_equal(plain["input_mask"], cut["input_mask"])
    np.testing.assert_array_equal(plain["segment_ids"], cut["segment_ids"])
    for i, (a, b) in enumerate(zip(ids_a, ids_b)):
        keep = int((plain["segment_ids"][i] == 0).sum() - (plain["input_mask"][i] == 0).sum()) - 2
        kept = list(cut["input_ids"][i][1:1 + keep])
        if len(a) > keep:
            assert kept == a[:head] + a[len(a) - (keep - head):]
        else:
            assert kept == a
        np.testing.assert_array_equal(plain["input_ids"][i][1 + keep:], cut["input_ids"][i][1 + keep:])
    assert long_text.LongText("head_tail").head_tokens_for(512) == 255  # half: the default
    assert long_text.LongText("truncate").head_tokens_for(512) is None


def test_pooling_over_windows():
    logits = tf.constant([[1.0, 2.0], [3.0, -1.0], [5.0, 5.0], [9.0, 9.0]])
    document = tf.constant([0, 0, 2, 2])
    present = tf.constant([True, True, True, False])
    np.testing.assert_allclose(long_text.pool(logits, document, 3, "mean", present).numpy(),
                               [[2.0, 0.5], [0.0, 0.0], [5.0, 5.0]])
    np.testing.assert_allclose(long_text.pool(logits, document, 3, "max", present).numpy(),
                               [[3.0, 2.0], [0.0, 0.0], [5.0, 5.0]])


def _custom_flags(data_dir, output_dir, **flags):
    values = dict(task_name="custom", text_a_column="text", label_column="label", data_dir=data_dir,
                  output_dir=output_dir, max_seq_length=32)
    values.update(flags)
    return [f"--{name}={value}" for name, value in values.items()]


def _write_task(folder, rows, names=("train.tsv", "dev.tsv", "test.tsv")):
    """A custom task's files: rows[name] = [(text, label) or (text, question, label)]."""
    os.makedirs(folder, exist_ok=True)
    for name in names:
        header = "text\tlabel" if len(rows[name][0]) == 2 else "text\tquestion\tlabel"
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(header + "\n" + "".join("\t".join(row) + "\n" for row in rows[name]))
    return str(folder)


@pytest.mark.parametrize("reading,pair", [
        (["--long_text=windows", "--window_pooling=max", "--doc_stride=20", "--max_windows_per_document=6"], False),
        (["--long_text=windows", "--window_pooling=mean", "--doc_stride=16"], True),
        (["--long_text=head_tail", "--head_tokens=5"], False)], ids=["windows", "windows_pair", "head_tail"])
def test_predictions_per_document_and_the_export_reads_as_the_run(tmp_path, reading, pair):
    """Evaluation and prediction count documents (eval_results.txt, one test_results.tsv row per document in input
    order), --predict_input streams them alike, and the export's serving_text reads a long text as the run does
    (its probabilities and labels equal test_results.tsv), with the settings recorded in it; a pair task's text_b
    is in every window."""
    texts = passages(10, 120) + ["", "one short text"]
    labels = ["a", "b"] * 6
    questions = [f"is this passage number {i} of the book ?" for i in range(len(texts))]
    rows = list(zip(texts, questions, labels)) if pair else list(zip(texts, labels))
    data = _write_task(tmp_path / "data", {"dev.tsv": rows, "test.tsv": rows, "train.tsv": rows[:2]})
    if pair:
        reading = reading + ["--text_b_column=question"]
    config_file = tiny.config_file(tmp_path / "bert_config.json", type_vocab_size=2, initializer_range=0.2)
    out = tmp_path / "out"
    tiny.save(tiny.random_classifier(tiny.config(type_vocab_size=2, initializer_range=0.2), 2, seed=5), out)
    (tmp_path / "lines.txt").write_text("".join("\t".join(row[:-1]) + "\n" for row in rows), encoding="utf-8")
    proc = assert_ran(run_script("run_classifier.py", *_custom_flags(
        data, out, vocab_file=vocab(), bert_config_file=config_file, do_eval="true", do_predict="true",
        eval_batch_size=4, predict_batch_size=4, export_dir=tmp_path / "export", predict_input=tmp_path / "lines.txt",
        predict_output=tmp_path / "streamed.tsv"), *reading))
    expected = np.loadtxt(out / "test_results.tsv", delimiter="\t")
    assert expected.shape == (len(texts), 2) and expected[:, 0].std() > 0.01
    np.testing.assert_allclose(np.loadtxt(tmp_path / "streamed.tsv", delimiter="\t"), expected, atol=1e-5)
    results = dict(line.split(" = ") for line in (out / "eval_results.txt").read_text().splitlines())
    accuracy = np.mean(np.array(["a", "b"])[expected.argmax(1)] == np.array(labels))
    assert float(results["eval_accuracy"]) == pytest.approx(accuracy)

    loaded = tf.saved_model.load(str(tmp_path / "export"))
    inputs = {"text_a": tf.constant(texts)}
    if pair:
        inputs["text_b"] = tf.constant(questions)
    got = {k: v.numpy() for k, v in loaded.signatures["serving_text"](**inputs).items()}
    np.testing.assert_allclose(got["probabilities"], expected, atol=1e-5)
    assert [x.decode() for x in got["label"]] == list(np.array(["a", "b"])[expected.argmax(1)])
    mode = reading[0].split("=")[1]
    assert loaded.long_text.numpy().decode() == mode
    if mode == "windows" and not pair:
        assert "--max_windows_per_document=6: 10 of 12 texts have more windows" in proc.stderr
        assert list(got["windows"]) == [6] * 10 + [1, 1]
        assert loaded.window_pooling.numpy().decode() == "max" and int(loaded.doc_stride.numpy()) == 20
    elif mode == "windows":  # windows of 32 - 3 - 10 question tokens, a new one every 16 tokens
        assert "max_windows_per_document" not in proc.stderr
        assert got["windows"][:10].min() >= 8 and list(got["windows"][10:]) == [1, 1]
    else:
        assert int(loaded.head_tokens.numpy()) == 5
        # Only a reading of the whole text sees its end.
        plain = loaded.signatures["serving_text"](text_a=tf.constant([texts[0], texts[0] + " the end"]))
        assert not np.allclose(plain["probabilities"][0], plain["probabilities"][1])


def test_long_text_user_errors(tmp_path):
    """Each bad setting ends in one line naming its flag, before anything is written."""
    flags = _custom_flags(str(tmp_path), str(tmp_path / "out"), vocab_file=vocab(), do_eval="true",
                          bert_config_file=tiny.config_file(tmp_path / "bert_config.json"))
    cases = [(["--long_text=windows", "--export_onnx=m.onnx"], "--export_onnx with --long_text=windows"),
             (["--long_text=head_tail", "--export_tflite=m.tflite"], "--export_tflite with --long_text=head_tail"),
             (["--long_text=windows", "--max_windows_per_document=0"], "--max_windows_per_document=0"),
             (["--long_text=windows", "--doc_stride=0"], "--doc_stride=0"),
             (["--long_text=head_tail", "--head_tokens=31"], "--head_tokens=31: expected 0 to max_seq_length - 2")]
    for extra, expected in cases:
        assert expected in user_error(rc.ClassifierOptions, rc.run, *flags, *extra)
    assert not os.path.exists(tmp_path / "out")


def marker_documents(count, seed):
    """(text, label) of real news text (CoNLL-2003's documents) of 120 words in which one word, "zebra" (label a)
    or "volcano" (label b), stands somewhere past the 50th word: the evidence lies past a first window of 32
    tokens."""
    with open(shared_path("data", "text", "conll_train_docs.txt"), encoding="utf-8") as f:
        sentences = [line.split() for line in f if len(line.split()) > 4]
    sentences = [s for s in sentences if not {"zebra", "volcano"} & {w.lower() for w in s}]
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        label = rng.choice("ab")
        words = []
        while len(words) < 120:
            words += rng.choice(sentences)
        words = words[:120]
        words.insert(rng.randrange(50, 120), "zebra" if label == "a" else "volcano")
        rows.append((" ".join(words), label))
    return rows


@pytest.fixture(scope="module")
def minilm_checkpoint(tmp_path_factory):
    import conversions
    out = str(tmp_path_factory.mktemp("minilm"))
    prefix = conversions.hf_to_original(minilm_dir(), out)
    return {"init_checkpoint": prefix, "bert_config_file": os.path.join(out, "bert_config.json"),
            "vocab_file": os.path.join(out, "vocab.txt")}


@pytest.mark.slow
def test_windows_learn_evidence_past_the_first_window(tmp_path, minilm_checkpoint):
    """MiniLM-L6 fine-tuned through the command line on documents whose label is one word past the first window:
    read in windows it learns the task; truncated to its first window (the default) it cannot."""
    data = _write_task(tmp_path / "data", {"train.tsv": marker_documents(192, seed=1),
                                           "dev.tsv": marker_documents(64, seed=2)}, names=("train.tsv", "dev.tsv"))
    accuracy = {}
    for mode in ("windows", "truncate"):
        out = tmp_path / mode
        assert_ran(run_script("run_classifier.py", *_custom_flags(
            data, out, do_train="true", do_eval="true", train_batch_size=8, learning_rate=5e-5, num_train_epochs=2,
            save_checkpoints_steps=1000, long_text=mode, window_pooling="max", doc_stride=24, **minilm_checkpoint)))
        results = dict(line.split(" = ") for line in (out / "eval_results.txt").read_text().splitlines())
        accuracy[mode] = float(results["eval_accuracy"])
    assert accuracy["windows"] >= 0.9 and accuracy["truncate"] <= 0.75, accuracy
