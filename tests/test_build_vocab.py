"""build_vocab.py: vocabulary learned from a real corpus works with both tokenizers."""
import os
import subprocess
import sys

import pytest

import build_vocab
import fast_tokenization
import tokenization
from tests.shared_data import shared_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")


def test_reserved_tokens_match_original_layout():
    assert build_vocab.reserved_tokens() == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    original = _read(shared_path("vocab", "uncased", "vocab.txt"))
    # The released uncased vocabulary: [PAD], [unused0..98], [UNK], [CLS], [SEP], [MASK], [unused99..993].
    assert build_vocab.reserved_tokens(994) == original[:999]
    assert original[999] == "!"
    with pytest.raises(ValueError, match="num_unused"):
        build_vocab.reserved_tokens(-1)


def test_bad_input(tmp_path):
    with pytest.raises(ValueError, match="no words"):
        build_vocab.build_vocab(["", "   ", "\x00"], build_vocab.BuildVocabOptions(vocab_size=100))
    with pytest.raises(ValueError, match="no room"):
        build_vocab.build_vocab(["a b c"], build_vocab.BuildVocabOptions(vocab_size=5))
    with pytest.raises(ValueError, match="--input_file pattern .*missing.* matches no file"):
        list(build_vocab.read_lines(str(tmp_path / "missing*.txt")))
    with pytest.raises(ValueError, match="duplicate"):
        build_vocab.write_vocab(["[UNK]", "a", "a"], str(tmp_path / "v.txt"))


@pytest.mark.slow
def test_build_vocab_on_conll_corpus(tmp_path):
    import tensorflow as tf

    lines = _read(shared_path("data", "text", "conll_train_docs.txt"))
    tokens = build_vocab.build_vocab(lines, build_vocab.BuildVocabOptions(vocab_size=3000, num_iterations=2))
    assert 0.95 * 3000 <= len(tokens) <= 3000
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(set(tokens)) == len(tokens)
    vocab_file = str(tmp_path / "vocab.txt")
    build_vocab.write_vocab(tokens, vocab_file)

    full = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    assert list(full.vocab) == tokens
    for word in ("the", "said", "in", "percent", "."):
        assert full.tokenize(word) == [word]
    rate, total = build_vocab.unk_rate(vocab_file, lines, do_lower_case=True)
    assert total > 250000
    assert rate < 0.001, "[UNK] rate %.4f" % rate
    # Pieces per word stay low: the vocabulary holds the corpus' frequent words whole.
    words = sum(len(full.basic_tokenizer.tokenize(line)) for line in lines)
    assert total / words < 1.5

    fast = fast_tokenization.FastBertTokenizer(vocab_file, do_lower_case=True)
    sample = [line for line in lines if line.strip()][:1000]
    assert fast.tokenize(tf.constant(sample)).to_list() == [
        full.convert_tokens_to_ids(full.tokenize(line)) for line in sample]


@pytest.mark.slow
def test_command_line(tmp_path):
    corpus = shared_path("data", "text", "sample_text.txt")
    output = tmp_path / "vocab.txt"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "build_vocab.py"), "--input_file=%s" % corpus,
         "--output_file=%s" % output, "--vocab_size=400", "--do_lower_case=false", "--num_unused=10"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[UNK] rate" in result.stderr
    tokens = _read(str(output))[:-1]
    assert tokens[:16] == ["[PAD]"] + ["[unused%d]" % i for i in range(10)] + [
        "[UNK]", "[CLS]", "[SEP]", "[MASK]", "!"]
    assert len(tokens) <= 400
    full = tokenization.FullTokenizer(str(output), do_lower_case=False)
    text = open(corpus, encoding="utf-8").read()
    pieces = full.tokenize(text)
    assert pieces.count("[UNK]") <= 0.01 * len(pieces)
