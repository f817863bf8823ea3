"""run_ner.py: CoNLL reading, features (windows, first sub-token labels), decoding, bad input, end to end."""
import os

import numpy as np
import pytest

import conlleval
import run_ner
import tokenization
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
    spans = run_ner.window_spans(10, 4, 2)
    assert spans == [(0, 4), (2, 4), (4, 4), (6, 4)]
    assert run_ner.window_spans(3, 4, 2) == [(0, 3)]
    owners = [run_ner.best_span_for(p, spans) for p in range(10)]
    assert owners == [0, 0, 0, 1, 1, 2, 2, 3, 3, 3]


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
    run_ner.write_predictions(path, triples)
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
