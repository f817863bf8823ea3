"""The original release's tokenization reference outputs (../shared/reference/tokenization: English, Chinese,
Japanese, accents, control characters, emoji; ids and tokens made by the original's FullTokenizer) and the
tokenizers that read them, one per vocabulary for the session."""
import functools
import json

from tests.shared_data import shared_path, vocab

# Reference file name (and vocabulary) -> do_lower_case the original used to make it.
REFERENCES = {"uncased": True, "cased": False, "multi_cased": False, "chinese": True}

# A small vocabulary of the original's tokenization tests.
SMALL_VOCAB = "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "want", "##want", "##ed", "wa", "un",
                         "runn", "##ing", ",", "low", "lowest", "a", "##a", "."]) + "\n"


def reference(name):
    """The records ({"text", "tokens", "ids"}) of reference/tokenization/NAME.jsonl."""
    with open(shared_path("reference", "tokenization", name + ".jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@functools.lru_cache(maxsize=None)
def full(name):
    """tokenization.FullTokenizer of the NAME vocabulary, cased as its reference."""
    import tokenization
    return tokenization.FullTokenizer(vocab(name), REFERENCES[name])


@functools.lru_cache(maxsize=None)
def fast(name):
    """fast_tokenization.FastBertTokenizer of the NAME vocabulary, cased as its reference."""
    import fast_tokenization
    return fast_tokenization.FastBertTokenizer(vocab(name), REFERENCES[name])


def first_difference(name, records, outputs, field):
    """Where outputs first differ from the records' `field`, said in words; None where they are equal."""
    for i, (record, got) in enumerate(zip(records, outputs)):
        if got != record[field]:
            return "%s.jsonl line %d: %s differ\ntext: %r\nexpected: %r\ngot:      %r" % (
                name, i + 1, field, record["text"], record[field], got)
    return None


def write_file(tmp_path, name, data):
    """tmp_path/NAME holding data (text as UTF-8, or bytes); returns its path as a string."""
    path = tmp_path / name
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return str(path)
