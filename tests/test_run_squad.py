"""run_squad.py: reading, windowed features, decoding, head, runner and export on the real SQuAD data."""
import collections
import dataclasses
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import cli
import conversions
import encoder
import fast_tokenization
import packing
import records
import run_squad
import serving
import squad_evaluation
import tokenization
import training
from model_options import ModelOptions
from tests.original_algorithms import original_doc_spans, original_is_max_context
from tests.shared_data import shared_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def tokenizer():
    return tokenization.FullTokenizer(shared_path("vocab", "uncased", "vocab.txt"), do_lower_case=True)


def _v11():
    return shared_path("data", "squad", "v1.1", "dev-v1.1.json")


def _v20(name="dev-v2.0.json"):
    return shared_path("data", "squad", "v2.0_dev_subset", name)


def _questions(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)["data"]
    return data, [(p["context"], qa) for a in data for p in a["paragraphs"] for qa in p["qas"]]


def _tokenize_doc(doc_tokens, tokenizer):
    orig_to_tok_index, all_doc_tokens = [], []
    for token in doc_tokens:
        orig_to_tok_index.append(len(all_doc_tokens))
        all_doc_tokens.extend(tokenizer.tokenize(token))
    return None, orig_to_tok_index, all_doc_tokens


V1 = serving.SquadAnswering()  # the original's default n-best rules (n_best_size 20, max_answer_length 30)
V2 = serving.SquadAnswering(version_2_with_negative=True)


def _features(examples, tokenizer, max_seq_length, doc_stride, max_query_length, is_training=False):
    features = []
    run_squad.convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride,
                                           max_query_length, is_training, features.append)
    return features


def _gold_results(examples, features, questions, tokenizer, max_seq_length, doc_stride,
                  max_answer_length):
    """Logits that put 10 on the gold span (in the window where its start has max context).

    Of several gold answers, one whose sub-tokens equal its tokenized text and that fits
    max_answer_length is preferred. Unanswerable questions get 10 on [CLS] in every window.
    Returns (results, answerable ids where no gold answer can be decoded exactly).
    """
    doc_cache = {}
    by_example = {}
    for feature in features:
        by_example.setdefault(feature.example_index, []).append(feature)
    results, not_representable = [], set()
    for example_index, (example, (context, qa)) in enumerate(zip(examples, questions)):
        assert example.qas_id == qa["id"]
        if context not in doc_cache:
            doc_tokens, char_to_word = run_squad.split_context(context)
            doc_cache[context] = (doc_tokens, char_to_word,
                                  _tokenize_doc(doc_tokens, tokenizer))
        doc_tokens, char_to_word, (_, orig_to_tok, all_doc_tokens) = doc_cache[context]
        spans = []
        for answer in qa["answers"]:
            start = char_to_word[answer["answer_start"]]
            end = char_to_word[answer["answer_start"] + len(answer["text"]) - 1]
            tok_start = orig_to_tok[start]
            tok_end = orig_to_tok[end + 1] - 1 if end < len(doc_tokens) - 1 else len(all_doc_tokens) - 1
            tok_start, tok_end = run_squad._improve_answer_span(all_doc_tokens, tok_start, tok_end,
                                                                tokenizer, answer["text"])
            exact = all_doc_tokens[tok_start:tok_end + 1] == tokenizer.tokenize(answer["text"])
            fits = tok_end - tok_start + 1 <= max_answer_length
            spans.append((not (exact and fits), tok_start, tok_end))
        spans.sort(key=lambda s: s[0])
        if spans and spans[0][0]:
            not_representable.add(qa["id"])
        placed = False
        for feature in by_example[example_index]:
            start_logits = [0.0] * max_seq_length
            end_logits = [0.0] * max_seq_length
            if not spans:
                start_logits[0] = end_logits[0] = 10.0
            elif not placed:
                doc_offset = feature.tokens.index("[SEP]") + 1
                span_start, span_length = original_doc_spans(
                    len(all_doc_tokens), max_seq_length - doc_offset - 1, doc_stride)[feature.doc_span_index]
                _, tok_start, tok_end = spans[0]
                if span_start <= tok_start and tok_end < span_start + span_length:
                    position = tok_start - span_start + doc_offset
                    if feature.token_is_max_context[position]:
                        start_logits[position] = 10.0
                        end_logits[tok_end - span_start + doc_offset] = 10.0
                        placed = True
            results.append(run_squad.RawResult(feature.unique_id, start_logits, end_logits))
        assert placed or not spans, "question %s: gold span in no max-context window" % qa["id"]
    return results, not_representable


def _check_feature_layout(feature, example, max_seq_length):
    n = sum(feature.input_mask)
    assert len(feature.input_ids) == len(feature.input_mask) == len(feature.segment_ids) == max_seq_length
    assert feature.tokens[0] == "[CLS]" and feature.tokens[-1] == "[SEP]" and len(feature.tokens) == n
    first_sep = feature.tokens.index("[SEP]")
    assert feature.segment_ids[:first_sep + 1] == [0] * (first_sep + 1)
    assert feature.segment_ids[first_sep + 1:n] == [1] * (n - first_sep - 1)
    assert set(feature.token_to_orig_map) == set(range(first_sep + 1, n - 1))
    assert set(feature.token_is_max_context) == set(feature.token_to_orig_map)
    assert all(0 <= w < len(example.doc_tokens) for w in feature.token_to_orig_map.values())


@pytest.mark.slow
def test_v11_dev_features_and_gold_round_trip(tokenizer):
    """Every dev-v1.1 question gets windows; gold logits decode back to a gold answer."""
    data, questions = _questions(_v11())
    examples, stats = run_squad.read_squad_examples(_v11(), is_training=False, return_stats=True)
    assert len(examples) == len(questions) == stats.questions == 10570
    assert stats.empty_contexts == 0
    features = _features(examples, tokenizer, 384, 128, 64)
    windows = {}
    for feature in features:
        windows[feature.example_index] = windows.get(feature.example_index, 0) + 1
        _check_feature_layout(feature, examples[feature.example_index], 384)
    assert sorted(windows) == list(range(len(examples)))
    assert max(windows.values()) > 1  # long contexts are windowed
    assert [f.unique_id for f in features] == list(range(1000000000, 1000000000 + len(features)))

    results, not_representable = _gold_results(examples, features, questions, tokenizer, 384, 128, 30)
    predictions, nbest, diffs = run_squad.compute_predictions(examples, features, results, V1, True)
    assert not diffs and len(predictions) == len(nbest) == 10570
    scores = squad_evaluation.evaluate_v1(data, predictions)
    wrong = [qa["id"] for _, qa in questions if not any(
        squad_evaluation.exact_match_v1(predictions[qa["id"]], a["text"]) for a in qa["answers"])]
    # Exact where a gold answer is representable; the rest are the original algorithm's limits:
    # an answer inside one WordPiece token ("four" in "fourth") or longer than max_answer_length.
    assert set(wrong) - not_representable <= _get_final_text_fallbacks(wrong, examples, predictions)
    assert len(not_representable) == 2 and len(wrong) == 3
    assert scores["exact_match"] == pytest.approx(100.0 * (10570 - len(wrong)) / 10570)


def _get_final_text_fallbacks(ids, examples, predictions):
    """Questions whose prediction is a whole whitespace-token span: get_final_text could not align
    (e.g. zero-width spaces that BasicTokenizer drops make the stripped lengths differ)."""
    by_id = {e.qas_id: e for e in examples}
    out = set()
    for qid in ids:
        pred = predictions[qid]
        words = by_id[qid].doc_tokens
        tokens = pred.split(" ")
        for i in range(len(words) - len(tokens) + 1):
            if words[i:i + len(tokens)] == tokens:
                tok_text = " ".join(tokenization.BasicTokenizer(True).tokenize(pred))
                if len(tok_text.replace(" ", "")) != len(pred.replace(" ", "")):
                    out.add(qid)
    return out


def test_v20_dev_subset_gold_round_trip_is_exact(tokenizer):
    """SQuAD 2.0: answerable and unanswerable questions all round-trip (also with small windows)."""
    data, questions = _questions(_v20())
    examples = run_squad.read_squad_examples(_v20(), is_training=False)
    assert len(examples) == 706
    for max_seq_length, doc_stride in ((384, 128), (96, 32)):
        features = _features(examples, tokenizer, max_seq_length, doc_stride, 64)
        if max_seq_length == 96:
            assert len(features) > 2 * len(examples)
        results, not_representable = _gold_results(examples, features, questions, tokenizer,
                                                   max_seq_length, doc_stride, 30)
        assert not not_representable
        predictions, nbest, diffs = run_squad.compute_predictions(
            examples, features, results, V2, True)
        assert list(diffs) == [e.qas_id for e in examples]
        out = squad_evaluation.evaluate_v2(data, predictions, na_probs=diffs)
        assert out["HasAns_exact"] == 100.0 and out["NoAns_exact"] == 100.0 and out["exact"] == 100.0
        assert out["HasAns_total"] == 386 and out["NoAns_total"] == 320
        for qid, entries in nbest.items():
            assert abs(sum(e["probability"] for e in entries) - 1.0) < 1e-9
            assert any(e["text"] == "" for e in entries)


def test_training_features_label_the_answer(tokenizer):
    """train-v2.0.json with small windows: labels point at the answer, or [CLS] when it is cut."""
    examples, stats = run_squad.read_squad_examples(
        _v20("train-v2.0.json"), is_training=True, version_2_with_negative=True,
        train_first_answer=True, return_stats=True)
    assert stats.questions == 626 and stats.skipped_answer_mismatch == 0
    assert len(examples) == 626
    features = _features(examples, tokenizer, 96, 32, 32, is_training=True)
    cut = labelled = 0
    for feature in features:
        example = examples[feature.example_index]
        _check_feature_layout(feature, example, 96)
        if example.is_impossible:
            assert (feature.start_position, feature.end_position) == (0, 0)
        elif feature.start_position == 0:
            assert feature.end_position == 0
            cut += 1
        else:
            labelled += 1
            span = " ".join(feature.tokens[feature.start_position:feature.end_position + 1])
            answer = " ".join(tokenizer.tokenize(example.orig_answer_text))
            assert span == answer or answer in span
    assert cut > 0 and labelled > 0
    answerable = {e.qas_id for e in examples if not e.is_impossible}
    assert {examples[f.example_index].qas_id for f in features if f.start_position > 0} == answerable


def test_tfrecord_round_trip(tokenizer, tmp_path):
    examples = run_squad.read_squad_examples(_v20("train-v2.0.json"), True, True, True)[:12]
    features = _features(examples, tokenizer, 128, 64, 32, is_training=True)
    writer = run_squad.FeatureWriter(str(tmp_path / "train.tf_record"), is_training=True)
    for feature in features:
        writer.process_feature(feature)
    writer.close()
    assert writer.num_features == len(features)
    input_fn = records.input_fn(writer.filename, records.squad(128, False), is_training=False,
                                      drop_remainder=False)
    batches = list(input_fn(5))
    got = {k: np.concatenate([b[k].numpy() for b in batches]) for k in batches[0]}
    assert got["input_ids"].dtype == np.int32 and "start_positions" not in got
    np.testing.assert_array_equal(got["input_ids"], [f.input_ids for f in features])
    np.testing.assert_array_equal(got["unique_ids"], [f.unique_id for f in features])
    train_fn = records.input_fn(writer.filename, records.squad(128, True), is_training=True,
                                drop_remainder=True, shuffle=records.Shuffle(seed=1))
    batch = next(iter(train_fn(4)))
    assert batch["start_positions"].shape == (4,) and batch["segment_ids"].shape == (4, 128)
    record = next(iter(tf.data.TFRecordDataset(writer.filename)))
    parsed = tf.train.Example.FromString(record.numpy()).features.feature
    assert sorted(parsed) == sorted(["unique_ids", "input_ids", "input_mask", "segment_ids",
                                     "start_positions", "end_positions", "is_impossible"])


def test_improve_answer_span_and_max_context(tokenizer):
    doc = tokenizer.tokenize("The leader was John Smith (1895-1943).")
    start, end = doc.index("("), len(doc) - 1
    assert run_squad._improve_answer_span(doc, start, end, tokenizer, "1895") == (doc.index("1895"),) * 2
    doc = "the man went to the store and bought a gallon of milk".split()
    spans = original_doc_spans(len(doc), 5, 3)
    assert spans[:3] == [(0, 5), (3, 5), (6, 5)]
    bought = doc.index("bought")
    assert [original_is_max_context(spans, i, bought) for i in range(3)] == [False, False, True]
    # The packer's windows and max-context flags are the original's, here and at other strides and lengths.
    for num_tokens, query_length, stride in ((12, 2, 3), (0, 2, 3), (7, 0, 8), (40, 3, 7), (9, 1, 1)):
        max_seq_length = 5 + query_length + 3
        packed = packing.squad_windows(packing.ragged_ids([list(range(1, query_length + 1))]),
                                       packing.ragged_word_ids([[[100 + i] for i in range(num_tokens)]]),
                                       packing.Windowing(max_seq_length, stride, 64), packing.SpecialIds(101, 102))
        want = original_doc_spans(num_tokens, 5, stride)
        assert packed["doc_span_index"].numpy().tolist() == list(range(len(want)))
        for k, (span_start, length) in enumerate(want):
            doc = packed["input_ids"].numpy()[k][query_length + 2:query_length + 2 + length]
            assert doc.tolist() == [100 + span_start + i for i in range(length)]
            flags = packed["token_is_max_context"].numpy()[k][query_length + 2:query_length + 2 + length]
            assert flags.tolist() == [original_is_max_context(want, k, span_start + i) for i in range(length)]


def get_final_text(pred_text, orig_text, do_lower_case):
    """The original's get_final_text: the BasicTokenizer text of orig_text, aligned with it."""
    tok_text = " ".join(tokenization.BasicTokenizer(do_lower_case=do_lower_case).tokenize(orig_text))
    return run_squad._align_final_text(pred_text, orig_text, tok_text, verbose_logging=False)


def test_get_final_text():
    assert get_final_text("steve smith", "Steve Smith's", True) == "Steve Smith"
    assert get_final_text("1895", "(1895-1943).", True) == "1895"
    assert get_final_text("cafe", "Café,", True) == "Café"
    assert get_final_text("Café", "Café,", False) == "Café"
    assert get_final_text("xyz", "Steve Smith's", True) == "Steve Smith's"


def test_decoding_rules_and_output_files(tmp_path, tokenizer):
    context = "Normandy is a region in France. It was named after the Normans who came from Denmark."
    data = {"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": "q1", "question": "Where is Normandy?", "answers": [{"text": "France", "answer_start": 24}],
         "is_impossible": False}]}]}]}
    path = tmp_path / "d.json"
    path.write_text(json.dumps(data))
    examples = run_squad.read_squad_examples(str(path), is_training=False)
    features = _features(examples, tokenizer, 64, 32, 16)
    assert len(features) == 1
    f = features[0]
    france = f.tokens.index("france")
    start = [-10.0] * 64
    end = [-10.0] * 64
    start[france], end[france] = 4.0, 3.0
    start[1], end[1] = 9.0, 9.0  # a span in the question is never an answer
    end[france - 2] = 8.0  # end before start is dropped
    start[0], end[0] = 1.0, 0.5
    results = [run_squad.RawResult(f.unique_id, start, end)]
    out = run_squad.compute_predictions(examples, features, results, V2, True)
    text = run_squad.prediction_json(out[0])
    predictions, nbest, odds = (json.loads(run_squad.prediction_json(obj)) for obj in out)
    assert predictions == {"q1": "France"}
    assert odds["q1"] == pytest.approx(1.5 - 7.0)
    assert list(nbest["q1"][0]) == ["text", "probability", "start_logit", "end_logit"]
    assert nbest["q1"][0]["text"] == predictions["q1"]
    assert text.startswith('{\n    "q1": ') and text.endswith("}\n")
    # A threshold below the score difference makes the null answer win.
    below = serving.SquadAnswering(version_2_with_negative=True, null_score_diff_threshold=-6.0)
    preds, _, _ = run_squad.compute_predictions(examples, features, results, below, True)
    assert preds["q1"] == ""
    one_piece = serving.SquadAnswering(max_answer_length=1)
    preds, _, _ = run_squad.compute_predictions(examples, features, results, one_piece, True)
    assert preds["q1"] == predictions["q1"]


def _write(tmp_path, obj, name="bad.json"):
    path = tmp_path / name
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return str(path)


def _squad(qas, context="Paris is the capital of France."):
    return {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}


@pytest.mark.parametrize("content, message", [
    ("{\"data\": [", "is not valid JSON"),
    ({"version": "1.1"}, "has no \"data\" field"),
    ({"data": [{"title": "x"}]}, "data[0] has no \"paragraphs\" field"),
    ({"data": [{"paragraphs": [{"qas": []}]}]}, "data[0].paragraphs[0] has no \"context\" field"),
    (_squad([{"question": "q?", "answers": []}]), "qas[0] has no \"id\" field"),
    (_squad([{"id": "a", "answers": []}]), "qas[0] has no \"question\" field"),
    (_squad([{"id": "a", "question": "q?"}]), "qas[0] has no \"answers\" field"),
    (_squad([{"id": "a", "question": "q?", "answers": [{"text": "Paris"}]}]), "has no \"answer_start\""),
    (_squad([{"id": "a", "question": "q?", "answers": [{"text": "Paris", "answer_start": 0}] * 2}]),
     "should have exactly 1 answer (set --train_first_answer"),
])
def test_bad_training_input_errors(tmp_path, content, message):
    path = _write(tmp_path, content)
    with pytest.raises(run_squad.SquadDataError) as info:
        run_squad.read_squad_examples(path, is_training=True)
    assert message in str(info.value) and path in str(info.value)


def test_missing_is_impossible_for_v2_training(tmp_path):
    path = _write(tmp_path, _squad([{"id": "a", "question": "q?", "answers": []}]))
    with pytest.raises(run_squad.SquadDataError, match="has no \"is_impossible\" field"):
        run_squad.read_squad_examples(path, is_training=True, version_2_with_negative=True)
    with pytest.raises(run_squad.SquadDataError, match="cannot read SQuAD file"):
        run_squad.read_squad_examples(str(tmp_path / "absent.json"), is_training=False)


def test_mismatched_answers_skipped_with_count(tmp_path, caplog, tokenizer):
    qas = [{"id": "ok", "question": "What is the capital?", "answers": [{"text": "Paris", "answer_start": 0}]},
           {"id": "shifted", "question": "q?", "answers": [{"text": "France", "answer_start": 3}]},
           {"id": "outside", "question": "q?", "answers": [{"text": "France", "answer_start": 400}]},
           {"id": "first", "question": "q?", "answers": [{"text": "France", "answer_start": 24},
                                                          {"text": "Paris", "answer_start": 0}]}]
    data = _squad(qas)
    data["data"][0]["paragraphs"].append({"context": "  \n ", "qas": [
        {"id": "empty", "question": "Where?", "answers": [{"text": "x", "answer_start": 0}]}]})
    path = _write(tmp_path, data)
    with caplog.at_level("INFO"):
        examples, stats = run_squad.read_squad_examples(path, is_training=True, train_first_answer=True,
                                                        return_stats=True)
    assert [e.qas_id for e in examples] == ["ok", "first"]
    assert examples[1].orig_answer_text == "France"
    assert stats == run_squad.ReadStats(questions=5, examples=2, skipped_answer_mismatch=1,
                                        skipped_bad_offset=2, empty_contexts=1)
    assert "Could not find answer: 'Paris is' vs. 'France'" in caplog.text
    assert "lies outside the context" in caplog.text and "empty context" in caplog.text
    assert "skipped 1 whose answer text does not match the context" in caplog.text
    assert "1 training questions have several answers; the first one is used" in caplog.text

    # For prediction every question is kept; the empty context gets the original's nonce answer.
    examples = run_squad.read_squad_examples(path, is_training=False)
    assert len(examples) == 5
    features = _features(examples, tokenizer, 64, 32, 16)
    assert {f.example_index for f in features} == {0, 1, 2, 3}
    results = [run_squad.RawResult(f.unique_id, [0.0] * 64, [0.0] * 64) for f in features]
    predictions, _, _ = run_squad.compute_predictions(examples, features, results, V1, True)
    assert predictions["empty"] == "empty"
    predictions, _, diffs = run_squad.compute_predictions(examples, features, results, V2, True)
    assert predictions["empty"] == ""


def test_flag_validation(tmp_path):
    config = encoder.BertConfig(vocab_size=10, max_position_embeddings=64)
    with pytest.raises(ValueError, match="only trained up to sequence length 64"):
        run_squad.validate_flags_or_throw(config, 128, 16)
    with pytest.raises(ValueError, match="must be greater than max_query_length"):
        run_squad.validate_flags_or_throw(config, 64, 61)
    out = tmp_path / "out"
    options = cli.build_options(
        run_squad.SquadOptions, vocab_file=shared_path("vocab", "uncased", "vocab.txt"), max_seq_length=64,
        max_query_length=16, bert_config_file=_write(tmp_path, TINY_CONFIG, "c.json"), output_dir=str(out))
    with pytest.raises(ValueError, match="At least one of `do_train`, `do_predict`, `export_dir`, `export_onnx` or "
                                         "`export_tflite` must be set"):
        run_squad.run(options)
    with pytest.raises(ValueError, match="If `do_train` is True, then `train_file` must be specified"):
        run_squad.run(dataclasses.replace(options, do_train=True))
    with pytest.raises(ValueError, match="must be greater than max_query_length"):
        run_squad.run(dataclasses.replace(options, do_predict=True, predict_file="x",
                                          answering=serving.SquadAnswering(max_query_length=61)))
    assert not out.exists()


TINY_CONFIG = {"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
               "intermediate_size": 64, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
               "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 128, "type_vocab_size": 2,
               "initializer_range": 0.02}


def test_head_names_and_loss():
    config = encoder.BertConfig.from_dict(TINY_CONFIG)
    task = run_squad.SquadTask(config)
    model = task.build_model()
    names = model.variables_by_name()
    assert list(names)[-2:] == ["cls/squad/output_weights", "cls/squad/output_bias"]
    assert tuple(names["cls/squad/output_weights"].shape) == (2, 32)
    assert tuple(names["cls/squad/output_bias"].shape) == (2,)
    assert all(n.startswith("bert/") for n in list(names)[:-2])
    ids = tf.constant([[101, 2054, 102, 3000, 102, 0], [101, 2073, 102, 2003, 3000, 102]], tf.int32)
    mask = tf.cast(ids > 0, tf.int32)
    seg = tf.constant([[0, 0, 0, 1, 1, 0], [0, 0, 0, 1, 1, 1]], tf.int32)
    features = {"input_ids": ids, "input_mask": mask, "segment_ids": seg,
                "start_positions": tf.constant([3, 0]), "end_positions": tf.constant([3, 0])}
    start, end = model(features)
    hidden = model.bert(ids, mask, seg)["sequence_output"].numpy()
    w = names["cls/squad/output_weights"].numpy()
    b = names["cls/squad/output_bias"].numpy()
    np.testing.assert_allclose(start.numpy(), hidden @ w[0] + b[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(end.numpy(), hidden @ w[1] + b[1], rtol=1e-5, atol=1e-6)
    loss, _ = task.compute_loss(model, features, training=False)

    def ce(logits, positions):
        logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        return -np.mean(logp[np.arange(2), positions])

    expected = (ce(start.numpy(), [3, 0]) + ce(end.numpy(), [3, 0])) / 2
    assert float(loss) == pytest.approx(expected, rel=1e-5)


@pytest.mark.slow
def test_end_to_end_tiny_train_predict_export(tmp_path):
    """CLI: trains a tiny model on SQuAD 2.0 questions, predicts, scores and exports; the SavedModel
    loaded in a fresh process gives the checkpoint's logits."""
    with open(_v20("train-v2.0.json"), encoding="utf-8") as f:
        train = json.load(f)
    train["data"] = [{"title": "t", "paragraphs": train["data"][0]["paragraphs"][:4]}]
    with open(_v20(), encoding="utf-8") as f:
        dev = json.load(f)
    dev["data"] = [{"title": "d", "paragraphs": dev["data"][1]["paragraphs"][:2]}]
    num_dev = sum(len(p["qas"]) for p in dev["data"][0]["paragraphs"])
    train_file = _write(tmp_path, train, "train.json")
    dev_file = _write(tmp_path, dev, "dev.json")
    config_file = _write(tmp_path, TINY_CONFIG, "bert_config.json")
    out = tmp_path / "out"
    export = tmp_path / "export"
    cmd = [sys.executable, os.path.join(ROOT, "run_squad.py"),
           "--vocab_file=" + shared_path("vocab", "uncased", "vocab.txt"), "--bert_config_file=" + config_file,
           "--output_dir=" + str(out), "--train_file=" + train_file, "--predict_file=" + dev_file,
           "--do_train", "--do_predict", "--version_2_with_negative", "--train_first_answer",
           "--max_seq_length=96", "--doc_stride=48", "--max_query_length=24", "--train_batch_size=8",
           "--predict_batch_size=16", "--num_train_epochs=1", "--learning_rate=1e-3",
           "--save_checkpoints_steps=2", "--export_dir=" + str(export), "--shuffle_buffer_size=0",
           "--export_tflite=" + str(tmp_path / "lite" / "squad.tflite")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"Shuffling all \d+ training records anew every pass", proc.stderr)
    num_train = sum(len(p["qas"]) for p in train["data"][0]["paragraphs"])
    steps = int(num_train / 8 * 1)
    assert (out / f"model.ckpt-{steps}.index").exists() and (out / "train.tf_record").exists()
    predictions = json.loads((out / "predictions.json").read_text())
    nbest = json.loads((out / "nbest_predictions.json").read_text())
    odds = json.loads((out / "null_odds.json").read_text())
    assert len(predictions) == len(nbest) == len(odds) == num_dev
    scores = json.loads((out / "eval_results.json").read_text())
    expected = squad_evaluation.evaluate_v2(dev["data"], predictions, na_probs=odds)
    assert scores == pytest.approx(dict(expected))

    assert not (out / "eval.tf_record").exists()  # prediction reads its features from memory

    # The exported signature against the checkpoint, on the first prediction features.
    tokenizer = tokenization.FullTokenizer(shared_path("vocab", "uncased", "vocab.txt"), True)
    features = _features(run_squad.read_squad_examples(dev_file, is_training=False), tokenizer, 96, 48, 24)[:3]
    arrays = {k: np.array([getattr(f, k) for f in features], np.int32) for k in ("input_ids", "input_mask",
                                                                              "segment_ids")}
    np.savez(tmp_path / "inputs.npz", **arrays)
    pairs = [(qa["id"], qa["question"], p["context"]) for p in dev["data"][0]["paragraphs"] for qa in p["qas"]]
    (tmp_path / "pairs.json").write_text(json.dumps(pairs))
    # Both signatures in one fresh process: token ids, and the raw dev strings.
    script = (
        "import json, sys, numpy as np, tensorflow as tf, tensorflow_text\n"
        "m = tf.saved_model.load(sys.argv[1])\n"
        "a = np.load(sys.argv[2]); o = m.signatures['serving_default'](**{k: tf.constant(a[k]) for k in a.files})\n"
        "np.savez(sys.argv[3], start=o['start_logits'].numpy(), end=o['end_logits'].numpy())\n"
        "pairs = json.load(open(sys.argv[4]))\n"
        "o = m.signatures['serving_text'](question=tf.constant([p[1] for p in pairs]),\n"
        "                                 context=tf.constant([p[2] for p in pairs]))\n"
        "np.savez(sys.argv[5], **{k: v.numpy() for k, v in o.items()})\n")
    proc = subprocess.run([sys.executable, "-c", script, str(export), str(tmp_path / "inputs.npz"),
                           str(tmp_path / "logits.npz"), str(tmp_path / "pairs.json"), str(tmp_path / "text.npz")],
                          capture_output=True, text=True, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.load(tmp_path / "logits.npz")
    model = run_squad.SquadTask(encoder.BertConfig.from_dict(TINY_CONFIG)).build_model()
    import checkpoints
    checkpoints.init_from_checkpoint(model.variables_by_name(), str(out / f"model.ckpt-{steps}"))
    start, end = model(arrays, training=False)
    np.testing.assert_allclose(got["start"], start.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["end"], end.numpy(), rtol=1e-5, atol=1e-5)
    # The LiteRT model of the same signature (--export_tflite, token ids in, float32) answers alike.
    import litert_export
    run = litert_export.interpreter(tmp_path / "lite" / "squad.tflite").get_signature_runner()
    lite = run(**arrays)
    np.testing.assert_allclose(lite["start_logits"], start.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(lite["end_logits"], end.numpy(), rtol=1e-5, atol=1e-5)

    # serving_text outputs, decoded, give the runner's predictions.
    outputs = dict(np.load(tmp_path / "text.npz", allow_pickle=True))
    tokenizer = tokenization.FullTokenizer(shared_path("vocab", "uncased", "vocab.txt"))
    text_predictions, text_nbest, text_odds = run_squad.decode_text_outputs(
        [p[1] for p in pairs], [p[2] for p in pairs], outputs, tokenizer,
        serving.SquadAnswering(version_2_with_negative=True), qas_ids=[p[0] for p in pairs])
    assert dict(text_predictions) == predictions
    assert [[e["text"] for e in v] for v in text_nbest.values()] == [[e["text"] for e in v] for v in nbest.values()]
    assert list(text_odds.values()) == pytest.approx(list(odds.values()), abs=1e-4)
    # The answers serving_text chose in the graph are the runner's predictions and null odds, with the span.
    answers = [a.decode("utf-8") for a in outputs["answer"]]
    assert answers == [predictions[qid] for qid, _, _ in pairs]
    assert list(outputs["null_score_diff"]) == pytest.approx([odds[qid] for qid, _, _ in pairs], abs=1e-4)
    for (_, _, context), answer, start, end in zip(pairs, answers, outputs["start"], outputs["end"]):
        assert (start, end) == (-1, -1) if not answer else " ".join(context[start:end].split()) == answer


@pytest.mark.parametrize("path_fn,version_2", [(_v11, False), (_v20, True)])
def test_serving_answers_equal_the_python_n_best_path(tmp_path, tokenizer, path_fn, version_2):
    """serving_text's in-graph answer choice and text equal compute_predictions (n-best and get_final_text) on
    every question of the dev file, with a random model whose spans land anywhere, short windows included."""
    path = path_fn() if version_2 else shared_path("data", "squad", "v1.1", "dev-v1.1.articles38-47.json")
    config = encoder.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=64, type_vocab_size=2, initializer_range=0.5)
    tf.keras.utils.set_random_seed(3)
    task = run_squad.SquadTask(config)
    model = task.build_model()
    checkpoint = checkpoints.CheckpointManager(str(tmp_path)).save(model.variables_by_name(), 0)
    examples = run_squad.read_squad_examples(path, is_training=False)
    features = _features(examples, tokenizer, 128, 48, 32)
    results = run_squad.predict_features(task, features, training.TrainingConfig(predict_batch_size=64), None,
                                         checkpoint)
    predictions, _, odds = run_squad.compute_predictions(
        examples, features, results, serving.SquadAnswering(version_2_with_negative=version_2), True)
    module = serving.SquadServing(
        model, ModelOptions(vocab_file=shared_path("vocab", "uncased", "vocab.txt"), max_seq_length=128),
        serving.SquadAnswering(doc_stride=48, max_query_length=32, version_2_with_negative=version_2))
    _, questions = _questions(path)
    got = collections.defaultdict(list)
    for i in range(0, len(questions), 128):
        chunk = questions[i:i + 128]
        out = module.serve_text(tf.constant([qa["question"] for _, qa in chunk]), tf.constant([c for c, _ in chunk]))
        for name in ("answer", "start", "end", "null_score_diff"):
            got[name].extend(out[name].numpy().tolist())
    assert [a.decode("utf-8") for a in got["answer"]] == [predictions[qa["id"]] for _, qa in questions]
    if version_2:
        assert got["null_score_diff"] == pytest.approx([odds[qa["id"]] for _, qa in questions], abs=1e-5)
    assert sum(1 for a in got["answer"] if a) > len(questions) // 2


def test_word_cache_decoding_equals_direct_get_final_text(tokenizer, monkeypatch):
    """The memoized per-word BasicTokenizer path gives the original get_final_text's outputs."""
    examples = run_squad.read_squad_examples(_v20(), is_training=False)
    features = _features(examples, tokenizer, 128, 48, 32)
    rng = np.random.RandomState(0)
    results = [run_squad.RawResult(f.unique_id, [float(x) for x in rng.randn(128).astype(np.float32)],
                                   [float(x) for x in rng.randn(128).astype(np.float32)]) for f in features]
    cached = run_squad.compute_predictions(examples, features, results, V2, True)
    basic = tokenization.BasicTokenizer(do_lower_case=True)
    monkeypatch.setattr(run_squad._WordTokenCache, "tok_text",
                        lambda self, words: " ".join(basic.tokenize(" ".join(words))))
    direct = run_squad.compute_predictions(examples, features, results, V2, True)
    assert cached == direct
    assert sum(1 for text in cached[0].values() if text) > 100


def _first_answers_only(path, tmp_path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qa["answers"] = qa["answers"][:1]
    return _write(tmp_path, data, "first_answers.json")


@pytest.mark.slow
@pytest.mark.tf_models
def test_parity_with_tf_models_official_squad_lib(tokenizer, tmp_path):
    """Examples, windows, training labels and the n-best decoding equal tf-models-official's port of
    the original run_squad.py (squad_lib), on the SQuAD 2.0 subset with random logits."""
    from official.nlp.data import squad_lib
    from official.nlp.tools import tokenization as mg_tokenization
    mg_tokenizer = mg_tokenization.FullTokenizer(shared_path("vocab", "uncased", "vocab.txt"), True)
    keys = ("unique_id", "example_index", "doc_span_index", "tokens", "token_to_orig_map",
            "token_is_max_context", "input_ids", "input_mask", "segment_ids")
    for path, is_training in ((_v20(), False),
                              (_first_answers_only(_v20("train-v2.0.json"), tmp_path), True)):
        ours = run_squad.read_squad_examples(path, is_training, version_2_with_negative=True)
        theirs = squad_lib.read_squad_examples(path, is_training, True)
        assert [(e.qas_id, e.doc_tokens, e.start_position, e.end_position, e.is_impossible) for e in ours] == \
            [(e.qas_id, e.doc_tokens, e.start_position, e.end_position, e.is_impossible) for e in theirs]
        features = _features(ours, tokenizer, 128, 48, 32, is_training)
        their_features = []
        if is_training:
            squad_lib.convert_examples_to_features(theirs, mg_tokenizer, 128, 48, 32, True,
                                                   their_features.append)
        else:
            squad_lib.convert_examples_to_features(
                theirs, mg_tokenizer, 128, 48, 32, False,
                lambda f, is_padding: None if is_padding else their_features.append(f), batch_size=1)
        assert len(features) == len(their_features) > len(ours)
        for a, b in zip(features, their_features):
            assert [getattr(a, k) for k in keys] == [getattr(b, k) for k in keys]
            if is_training:
                assert (a.start_position, a.end_position) == (b.start_position, b.end_position)
        if not is_training:
            rng = np.random.RandomState(1)
            results = [run_squad.RawResult(f.unique_id, [float(x) for x in rng.randn(128).astype(np.float32)],
                                           [float(x) for x in rng.randn(128).astype(np.float32)])
                       for f in features]
            mine = run_squad.compute_predictions(ours, features, results, V2, True)
            reference = squad_lib.postprocess_output(theirs, their_features, results, 20, 30, True, True)
            assert mine == tuple(reference)


@pytest.mark.slow
def test_in_graph_packing_equals_convert_examples_to_features(tokenizer):
    """serving_text's packing (FastBertTokenizer + packing.squad_windows) gives the same windows, ids, word map
    and max-context flags as convert_examples_to_features, on real questions and contexts."""
    fast = fast_tokenization.FastBertTokenizer(shared_path("vocab", "uncased", "vocab.txt"), True)
    keys = ("unique_id", "example_index", "doc_span_index", "tokens", "token_to_orig_map",
            "token_is_max_context", "input_ids", "input_mask", "segment_ids")
    for path, limit, (max_seq_length, doc_stride, max_query_length) in (
            (_v20(), 706, (96, 32, 24)), (_v11(), 400, (384, 128, 64))):
        _, questions = _questions(path)
        questions = questions[:limit]
        examples = run_squad.read_squad_examples(path, is_training=False)[:limit]
        expected = _features(examples, tokenizer, max_seq_length, doc_stride, max_query_length)
        pack = tf.function(lambda q, c: serving.squad_text_windows(
            fast, q, c, packing.Windowing(max_seq_length, doc_stride, max_query_length),
            packing.SpecialIds.of(tokenizer.vocab))[0], autograph=False)
        parts = []
        for i in range(0, limit, 128):
            chunk = questions[i:i + 128]
            out = {k: v.numpy() for k, v in pack(tf.constant([qa["question"] for _, qa in chunk]),
                                                  tf.constant([c for c, _ in chunk])).items()}
            out["example_index"] = out["example_index"] + i
            parts.append(out)
        packed = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        got = run_squad.features_from_packed(packed, tokenizer.inv_vocab)
        assert len(got) == len(expected) > limit
        for a, b in zip(got, expected):
            assert [getattr(a, k) for k in keys] == [getattr(b, k) for k in keys]
    # An empty context has no window; a pair beside it is unaffected.
    out = pack(tf.constant(["Who?", "Where is it?"]), tf.constant([" \n ", "It is in Paris."]))
    assert out["example_index"].numpy().tolist() == [1]
    assert tokenizer.convert_ids_to_tokens(out["input_ids"].numpy()[0][:11].tolist()) == \
        ["[CLS]", "where", "is", "it", "?", "[SEP]", "it", "is", "in", "paris", "."]


def test_minilm_checkpoint_initializes_the_squad_model(tmp_path):
    """The converted MiniLM-L6 weights fill every encoder variable; only the SQuAD head is new."""
    import checkpoints
    from tests.shared_data import minilm_dir
    prefix = conversions.hf_to_original(minilm_dir(), str(tmp_path / "minilm"))
    config = encoder.BertConfig.from_json_file(str(tmp_path / "minilm" / "bert_config.json"))
    model = run_squad.SquadTask(config).build_model()
    loaded, new, unused = checkpoints.init_from_checkpoint(model.variables_by_name(), prefix)
    assert new == ["cls/squad/output_weights", "cls/squad/output_bias"]
    assert len(loaded) == len(model.variables_by_name()) - 2 and not unused
    ids = tf.constant([[101, 2054, 2003, 1996, 3007, 1029, 102, 3000, 2003, 1996, 3007, 1012, 102]])
    start, end = model({"input_ids": ids, "input_mask": tf.ones_like(ids), "segment_ids": tf.zeros_like(ids)})
    assert start.shape == end.shape == (1, 13) and np.isfinite(start.numpy()).all()
