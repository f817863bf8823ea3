"""tokenization.py: the original's tokenizer against its reference outputs and its own tests, bad vocabularies and
text (the in-graph tokenizer: tests/test_fast_tokenization.py)."""
import pytest

import tokenization
from tests.tokenizers import REFERENCES, SMALL_VOCAB, first_difference, full, reference, write_file

# ----------------------------------------------------------------------------- exact tokenizer


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_full_tokenizer_matches_reference(name):
    records = reference(name)
    tok = full(name)
    tokens = [tok.tokenize(r["text"]) for r in records]
    diff = first_difference(name, records, tokens, "tokens")
    assert diff is None, diff
    ids = [tok.convert_tokens_to_ids(t) for t in tokens]
    diff = first_difference(name, records, ids, "ids")
    assert diff is None, diff
    assert len(records) == 5308
    back = [tok.convert_ids_to_tokens(r["ids"]) for r in records[:200]]
    assert back == [r["tokens"] for r in records[:200]]


def test_original_examples(tmp_path):
    vocab_file = write_file(tmp_path, "vocab.txt", SMALL_VOCAB)
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
    tokenizer = tokenization.FullTokenizer(write_file(tmp_path, "vocab.txt", "".join(t + "\n" for t in vocab_tokens)))
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
    vocab_file = write_file(tmp_path, "vocab.txt", SMALL_VOCAB)
    tok = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    assert tok.tokenize("a" * 200) == ["a"] + ["##a"] * 199
    assert tok.tokenize("a" * 201) == ["[UNK]"]
    assert tok.tokenize("a" * 10000 + " want") == ["[UNK]", "want"]


def test_bad_vocab_files(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        tokenization.FullTokenizer(str(tmp_path / "missing.txt"))
    with pytest.raises(ValueError, match="empty"):
        tokenization.FullTokenizer(write_file(tmp_path, "empty.txt", ""))
    with pytest.raises(ValueError, match=r"has no \[UNK\]"):
        tokenization.FullTokenizer(write_file(tmp_path, "nounk.txt", "[PAD]\nhello\n"))
    with pytest.raises(ValueError, match="not valid UTF-8"):
        tokenization.FullTokenizer(write_file(tmp_path, "latin1.txt", b"[UNK]\ncaf\xe9\n"))
    with pytest.raises(ValueError, match="--vocab_file is required"):
        tokenization.FullTokenizer("")


def test_load_vocab_keeps_original_line_semantics(tmp_path):
    vocab = tokenization.load_vocab(write_file(tmp_path, "v.txt", "[UNK]\n  spaced  \n\nlast"))
    assert list(vocab.items()) == [("[UNK]", 0), ("spaced", 1), ("", 2), ("last", 3)]


def test_bad_text_input(tmp_path):
    vocab_file = write_file(tmp_path, "vocab.txt", SMALL_VOCAB)
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
