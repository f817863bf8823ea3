"""Tokenizers against the original's reference outputs, bad input, SavedModel round trip, random unicode."""
import json
import os
import random
import subprocess
import sys
import textwrap

import pytest

import fast_tokenization
import tokenization
from tests.shared_data import shared_path

# Reference file name -> do_lower_case used by the original to make it.
REFERENCES = {"uncased": True, "cased": False, "multi_cased": False, "chinese": True}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_TOKENIZERS = {}


def _reference(name):
    path = shared_path("reference", "tokenization", name + ".jsonl")
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _vocab_file(name):
    return shared_path("vocab", name, "vocab.txt")


def _full(name):
    key = ("full", name)
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = tokenization.FullTokenizer(_vocab_file(name), REFERENCES[name])
    return _TOKENIZERS[key]


def _first_difference(name, records, outputs, field):
    for i, (record, got) in enumerate(zip(records, outputs)):
        if got != record[field]:
            return "%s.jsonl line %d: %s differ\ntext: %r\nexpected: %r\ngot:      %r" % (
                name, i + 1, field, record["text"], record[field], got)
    return None


def _write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return str(path)


SMALL_VOCAB = "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "want", "##want", "##ed", "wa", "un",
                         "runn", "##ing", ",", "low", "lowest", "a", "##a", "."]) + "\n"


# ----------------------------------------------------------------------------- exact tokenizer


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_full_tokenizer_matches_reference(name):
    records = _reference(name)
    tok = _full(name)
    tokens = [tok.tokenize(r["text"]) for r in records]
    diff = _first_difference(name, records, tokens, "tokens")
    assert diff is None, diff
    ids = [tok.convert_tokens_to_ids(t) for t in tokens]
    diff = _first_difference(name, records, ids, "ids")
    assert diff is None, diff
    assert len(records) == 5308
    back = [tok.convert_ids_to_tokens(r["ids"]) for r in records[:200]]
    assert back == [r["tokens"] for r in records[:200]]


def test_original_examples(tmp_path):
    vocab_file = _write(tmp_path, "vocab.txt", SMALL_VOCAB)
    tok = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    assert tok.tokenize("UNwant\u00E9d,running") == ["un", "##want", "##ed", ",", "runn", "##ing"]
    assert tok.convert_tokens_to_ids(["un", "##want", "##ed", "runn", "##ing"]) == [9, 6, 7, 10, 11]
    basic = tokenization.BasicTokenizer(do_lower_case=True)
    assert basic.tokenize(" \tHeLLo!how  \n Are yoU?  ") == ["hello", "!", "how", "are", "you", "?"]
    assert basic.tokenize("H\u00E9llo") == ["hello"]
    assert basic.tokenize("ah\u535A\u63A8zz") == ["ah", "\u535A", "\u63A8", "zz"]
    cased = tokenization.BasicTokenizer(do_lower_case=False)
    assert cased.tokenize(" \tHeLLo!how  \n Are yoU?  ") == ["HeLLo", "!", "how", "Are", "yoU", "?"]
    assert cased.tokenize("H\u00E9llo") == ["H\u00E9llo"]
    wp = tokenization.WordpieceTokenizer(vocab=tok.vocab)
    assert wp.tokenize("") == []
    assert wp.tokenize("unwanted running") == ["un", "##want", "##ed", "runn", "##ing"]
    assert wp.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]


def test_tokenization_test_as_the_original(tmp_path):
    """What the original's tokenization_test.py asserts that test_original_examples does not: its own vocabulary
    (ids), FullTokenizer's default casing, the module-level convert_tokens_to_ids, and two character classes."""
    vocab_tokens = ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn", "##ing", ","]
    tokenizer = tokenization.FullTokenizer(_write(tmp_path, "vocab.txt", "".join(t + "\n" for t in vocab_tokens)))
    tokens = tokenizer.tokenize("UNwant\u00E9d,running")
    assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
    assert tokenizer.convert_tokens_to_ids(tokens) == [7, 4, 5, 10, 8, 9]
    vocab = {token: i for i, token in enumerate(vocab_tokens[:-1])}
    assert tokenization.WordpieceTokenizer(vocab=vocab).tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]
    assert tokenization.convert_tokens_to_ids(vocab, ["un", "##want", "##ed", "runn", "##ing"]) == [7, 4, 5, 8, 9]
    assert not tokenization._is_whitespace("-")
    assert not tokenization._is_control("\U0001F4A9")


def test_character_classes():
    assert tokenization._is_whitespace(" ") and tokenization._is_whitespace("\t")
    assert tokenization._is_whitespace("\r") and tokenization._is_whitespace("\n")
    assert tokenization._is_whitespace("\u00A0") and not tokenization._is_whitespace("A")
    assert tokenization._is_control("\u0005") and tokenization._is_control("\u200b")
    assert not tokenization._is_control("A") and not tokenization._is_control(" ")
    assert not tokenization._is_control("\t") and not tokenization._is_control("\r")
    assert tokenization._is_punctuation("-") and tokenization._is_punctuation("$")
    assert tokenization._is_punctuation("`") and tokenization._is_punctuation(".")
    assert not tokenization._is_punctuation("A") and not tokenization._is_punctuation(" ")


def test_wordpiece_200_char_rule(tmp_path):
    vocab_file = _write(tmp_path, "vocab.txt", SMALL_VOCAB)
    tok = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    assert tok.tokenize("a" * 200) == ["a"] + ["##a"] * 199
    assert tok.tokenize("a" * 201) == ["[UNK]"]
    assert tok.tokenize("a" * 10000 + " want") == ["[UNK]", "want"]


def test_bad_vocab_files(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        tokenization.FullTokenizer(str(tmp_path / "missing.txt"))
    with pytest.raises(ValueError, match="empty"):
        tokenization.FullTokenizer(_write(tmp_path, "empty.txt", ""))
    with pytest.raises(ValueError, match=r"has no \[UNK\]"):
        tokenization.FullTokenizer(_write(tmp_path, "nounk.txt", "[PAD]\nhello\n"))
    with pytest.raises(ValueError, match="not valid UTF-8"):
        tokenization.FullTokenizer(_write(tmp_path, "latin1.txt", b"[UNK]\ncaf\xe9\n"))
    with pytest.raises(ValueError, match="--vocab_file is required"):
        tokenization.FullTokenizer("")


def test_load_vocab_keeps_original_line_semantics(tmp_path):
    vocab = tokenization.load_vocab(_write(tmp_path, "v.txt", "[UNK]\n  spaced  \n\nlast"))
    assert list(vocab.items()) == [("[UNK]", 0), ("spaced", 1), ("", 2), ("last", 3)]


def test_bad_text_input(tmp_path):
    vocab_file = _write(tmp_path, "vocab.txt", SMALL_VOCAB)
    tok = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    assert tok.tokenize("") == []
    assert tok.tokenize("   \t\n ") == []
    assert tok.tokenize("\x00\x01\ufffd\u200b") == []
    assert tok.tokenize("want\x00ed") == ["want", "##ed"]
    # Invalid UTF-8 bytes are dropped, as the original's decode("utf-8", "ignore") does.
    assert tok.tokenize(b"want\xff\xfeed") == ["want", "##ed"]
    assert tokenization.convert_to_unicode(b"caf\xc3\xa9") == "caf\u00e9"
    assert tokenization.printable_text(b"abc") == "abc"
    with pytest.raises(ValueError, match="Unsupported string type"):
        tok.tokenize(12)
    assert tok.convert_tokens_to_ids(["never-seen"]) == [1]
    with pytest.raises(KeyError, match="no \\[UNK\\]"):
        tokenization.convert_by_vocab({"a": 0}, ["b"])


def test_validate_case_matches_checkpoint():
    tokenization.validate_case_matches_checkpoint(True, "/x/uncased_L-12_H-768_A-12/bert_model.ckpt")
    tokenization.validate_case_matches_checkpoint(False, "/x/cased_L-12_H-768_A-12/bert_model.ckpt")
    tokenization.validate_case_matches_checkpoint(False, "/x/my_model/bert_model.ckpt")
    tokenization.validate_case_matches_checkpoint(False, "")
    tokenization.validate_case_matches_checkpoint(False, "/x/model.ckpt-1000")
    with pytest.raises(ValueError, match="do_lower_case=False.*lowercased.*do_lower_case=True"):
        tokenization.validate_case_matches_checkpoint(False, "/x/uncased_L-12_H-768_A-12/bert_model.ckpt")
    with pytest.raises(ValueError, match="do_lower_case=True.*cased model.*do_lower_case=False"):
        tokenization.validate_case_matches_checkpoint(True, "gs://b/multi_cased_L-12_H-768_A-12/bert_model.ckpt")
    with pytest.raises(ValueError, match="chinese_L-12_H-768_A-12"):
        tokenization.validate_case_matches_checkpoint(False, "chinese_L-12_H-768_A-12/bert_model.ckpt")


def test_whitespace_tokenize():
    assert tokenization.whitespace_tokenize("") == []
    assert tokenization.whitespace_tokenize("  a  b\tc\n") == ["a", "b", "c"]


# ----------------------------------------------------------------------------- fast tokenizer


def _fast(name):
    key = ("fast", name)
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = fast_tokenization.FastBertTokenizer(_vocab_file(name), REFERENCES[name])
    return _TOKENIZERS[key]


def _graph_tokenize(fast):
    import tensorflow as tf
    return tf.function(fast.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_fast_tokenizer_matches_reference(name):
    import tensorflow as tf
    records = _reference(name)
    fast = _fast(name)
    texts = [r["text"] for r in records]
    ids = _graph_tokenize(fast)(tf.constant(texts)).to_list()
    diff = _first_difference(name, records, ids, "ids")
    assert diff is None, diff
    # Batches of mixed kinds (printable ASCII rows and others) and eager mode give the same.
    for start in range(0, 200, 37):
        assert fast.tokenize(tf.constant(texts[start:start + 37])).to_list() == ids[start:start + 37]


@pytest.mark.parametrize("name", ["uncased", "multi_cased"])
def test_fast_tokenizer_words_match_basic_tokenizer(name):
    import tensorflow as tf
    full, fast = _full(name), _fast(name)
    texts = [r["text"] for r in _reference(name)][::5]
    words = fast.tokenize_words(tf.constant(texts)).to_list()
    for text, got in zip(texts, words):
        expected = [full.convert_tokens_to_ids(full.wordpiece_tokenizer.tokenize(w))
                    for w in full.basic_tokenizer.tokenize(text)]
        assert got == expected, text


def _random_text(rng):
    pools = [(0x20, 0x7E), (0x0, 0x20), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x3A3, 0x3A3),
             (0x400, 0x4FF), (0x600, 0x6FF), (0x900, 0x97F), (0x1E00, 0x1FFF), (0x2000, 0x206F),
             (0x3000, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xF900, 0xFAFF), (0xFE00, 0xFFFF),
             (0x1F300, 0x1FAFF), (0x0, 0x10FFFF), (0x20000, 0x2FFFF), (0xE0000, 0xE01EF)]
    chars = []
    for _ in range(rng.randint(0, 40)):
        low, high = rng.choice(pools)
        cp = rng.randint(low, high)
        if 0xD800 <= cp <= 0xDFFF:
            continue
        chars.append(chr(cp))
        if rng.random() < 0.2:
            chars.append(rng.choice(" \t\n"))
    if rng.random() < 0.05:
        chars.append("".join(rng.choice("ab\u00e9\u03a3") for _ in range(rng.randint(190, 210))))
    return "".join(chars)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_random_unicode_fast_equals_exact(name):
    import tensorflow as tf
    rng = random.Random(1234 + len(name))
    texts = [_random_text(rng) for _ in range(3000)]
    full, fast = _full(name), _fast(name)
    got = fast.tokenize(tf.constant(texts)).to_list()
    for text, ids in zip(texts, got):
        expected = full.convert_tokens_to_ids(full.tokenize(text))
        assert ids == expected, "text %r (code points %s)" % (text, [hex(ord(c)) for c in text])


@pytest.mark.parametrize("name", ["uncased", "multi_cased"])
def test_random_unicode_both_code_point_paths_equal_exact(name):
    """The word path (any text) and the whole-row path (rows it accepts) each give the original's ids."""
    import numpy as np
    import tensorflow as tf
    rng = random.Random(99 + len(name))
    texts = [_random_text(rng) for _ in range(3000)]
    full, fast = _full(name), _fast(name)
    expected = [full.convert_tokens_to_ids(full.tokenize(t)) for t in texts]
    info, splits = fast._code_points(tf.constant(texts))
    words = tf.RaggedTensor.from_row_splits(*fast._word_path(info, splits)).to_list()
    assert words == expected
    info, splits = info.numpy(), splits.numpy()
    accepted = [i for i, text in enumerate(texts)
                if not (info[splits[i]:splits[i + 1]] & fast_tokenization._F_E2E_UNSAFE).any()
                and max([len(w) for w in full.basic_tokenizer.tokenize(text)] + [0]) <= 200]
    assert len(accepted) > 2500
    sub_info, sub_splits = fast._code_points(tf.constant([texts[i] for i in accepted]))
    rows = tf.RaggedTensor.from_row_splits(*fast._row_path(sub_info, sub_splits)).to_list()
    for i, ids in zip(accepted, rows):
        assert ids == expected[i], "text %r" % texts[i]
    assert np.all(fast_tokenization.end_to_end_kinds()[[ord("a"), ord(" "), ord("."), 0x4E00]] == [0, 1, 2, 2])


def test_random_bytes_fast_equals_exact():
    import tensorflow as tf
    rng = random.Random(7)
    texts = []
    for _ in range(3000):
        data = bytearray()
        for _ in range(rng.randint(0, 30)):
            r = rng.random()
            if r < 0.3:
                data += bytes([rng.randint(0, 255)])
            elif r < 0.6:
                data += chr(rng.choice([rng.randint(0x20, 0x7E), rng.randint(0x80, 0x7FF),
                                        rng.randint(0x800, 0xD7FF), rng.randint(0x10000, 0x10FFFF)])).encode()
            elif r < 0.8:
                data += bytes([rng.choice([0xED, 0xF4, 0xF5, 0xE0, 0xF0, 0xC0]), rng.randint(0x80, 0xBF)])
            else:
                data += b" "
        texts.append(bytes(data))
    full, fast = _full("multi_cased"), _fast("multi_cased")
    got = fast.tokenize(tf.constant(texts)).to_list()
    for text, ids in zip(texts, got):
        assert ids == full.convert_tokens_to_ids(full.tokenize(text)), text


def test_fast_tokenizer_bad_input(tmp_path):
    import tensorflow as tf
    vocab = SMALL_VOCAB + "\u00e9\n##\u00e9\n"
    vocab_file = _write(tmp_path, "vocab.txt", vocab)
    full = tokenization.FullTokenizer(vocab_file, do_lower_case=False)
    fast = fast_tokenization.FastBertTokenizer(vocab_file, do_lower_case=False)
    texts = ["", "   \t\n ", "\x00\x01\ufffd\u200b", "want\x00ed", "a" * 200, "a" * 201, "a" * 10000 + " want",
             "\u00e9" * 200, "\u00e9" * 201, "\u00e9" * 10000 + " want", "[UNK] [CLS] ##a #", "unwanted,running"]
    got = fast.tokenize(tf.constant(texts)).to_list()
    assert got == [full.convert_tokens_to_ids(full.tokenize(t)) for t in texts]
    assert got[5] == [1] and got[8] == [1] and got[9] == [1, 5]
    assert fast.tokenize(tf.constant([], tf.string)).to_list() == []
    assert fast.tokenize(tf.constant([b"want\xff\xfeed"])).to_list() == [[5, 7]]
    with pytest.raises(ValueError):
        fast.tokenize(tf.constant([["a"]]))
    with pytest.raises(ValueError, match="does not exist"):
        fast_tokenization.FastBertTokenizer(str(tmp_path / "missing.txt"))
    with pytest.raises(ValueError, match=r"has no \[UNK\]"):
        fast_tokenization.FastBertTokenizer(_write(tmp_path, "nounk.txt", "[PAD]\nhello\n"))


def test_fast_tokenizer_200_char_rule_with_four_byte_characters(tmp_path):
    import tensorflow as tf
    vocab_file = _write(tmp_path, "vocab.txt", "[UNK]\n\U0001F600\n##\U0001F600\na\n##a\n")
    full = tokenization.FullTokenizer(vocab_file, do_lower_case=False)
    fast = fast_tokenization.FastBertTokenizer(vocab_file, do_lower_case=False)
    texts = ["\U0001F600" * 200, "\U0001F600" * 201, "a" * 199 + "\U0001F600", "\U0001F600" * 199 + "a a"]
    got = fast.tokenize(tf.constant(texts)).to_list()
    assert got == [full.convert_tokens_to_ids(full.tokenize(t)) for t in texts]
    assert [len(ids) for ids in got] == [200, 1, 200, 201]


def test_fast_tokenizer_duplicate_and_empty_vocab_lines(tmp_path):
    import tensorflow as tf
    # Later lines win for a repeated token, as in load_vocab; an empty line keeps its id unused.
    vocab_file = _write(tmp_path, "vocab.txt", "[UNK]\nhello\n\nworld\nhello\n##s\n")
    full = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    fast = fast_tokenization.FastBertTokenizer(vocab_file, do_lower_case=True)
    texts = ["Hello worlds", "hello  x", "HELLO\u00e9 w\u00f6rld"]
    assert fast.tokenize(tf.constant(texts)).to_list() == [
        full.convert_tokens_to_ids(full.tokenize(t)) for t in texts] == [[4, 3, 5], [4, 0], [0, 3]]


_SAVED_MODEL_LOADER = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    import tensorflow_text  # registers the FastWordpiece ops
    module = tf.saved_model.load(sys.argv[1])
    texts = json.load(open(sys.argv[2], encoding="utf-8"))
    ids = module.tokenize(tf.constant(texts))
    words = module.tokenize_words(tf.constant(texts[:5]))
    keras_model = tf.saved_model.load(sys.argv[3])
    features = keras_model.serve(tf.constant(texts[:5])).numpy().tolist()
    print(json.dumps({"ids": ids.to_list(), "words": words.to_list(), "features": features}))
""")


@pytest.mark.slow
def test_fast_tokenizer_saved_model_round_trip(tmp_path):
    import tensorflow as tf

    class Exported(tf.Module):
        def __init__(self, tokenizer):
            super().__init__()
            self.tokenizer = tokenizer

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def tokenize(self, texts):
            return self.tokenizer.tokenize(texts)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def tokenize_words(self, texts):
            return self.tokenizer.tokenize_words(texts)

    fast = _fast("uncased")
    records = _reference("uncased")
    texts = [r["text"] for r in records[:150]] + [r["text"] for r in records if not r["text"].isascii()][:150]
    export_dir = str(tmp_path / "tokenizer_model")
    tf.saved_model.save(Exported(fast), export_dir)
    texts_file = tmp_path / "texts.json"
    texts_file.write_text(json.dumps(texts), encoding="utf-8")
    script = tmp_path / "load.py"
    script.write_text(_SAVED_MODEL_LOADER)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    # A Keras 3 model that tokenizes raw strings inside, exported as a SavedModel.
    import keras

    class Featurize(keras.layers.Layer):
        def __init__(self, tokenizer, **kwargs):
            super().__init__(**kwargs)
            self.tokenizer = tokenizer
            self.embedding = keras.layers.Embedding(len(tokenizer.vocab), 4)

        def call(self, texts):
            ids = self.tokenizer.tokenize(texts).to_tensor(shape=[None, 32])
            return keras.ops.sum(self.embedding(ids), axis=1)

    inputs = keras.Input(shape=(), dtype="string")
    model = keras.Model(inputs, Featurize(fast)(inputs))
    expected_features = model(tf.constant(texts[:5])).numpy()
    keras_dir = str(tmp_path / "keras_model")
    model.export(keras_dir, format="tf_saved_model", verbose=False)
    result = subprocess.run([sys.executable, str(script), export_dir, str(texts_file), keras_dir],
                            capture_output=True,
                            text=True, env=env, cwd=str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    full = _full("uncased")
    assert loaded["ids"] == [full.convert_tokens_to_ids(full.tokenize(t)) for t in texts]
    assert loaded["words"] == fast.tokenize_words(tf.constant(texts[:5])).to_list()
    import numpy as np
    np.testing.assert_allclose(np.array(loaded["features"]), expected_features, rtol=1e-6, atol=1e-6)
