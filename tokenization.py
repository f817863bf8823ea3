"""The original BERT tokenizer: `FullTokenizer`, `BasicTokenizer` and `WordpieceTokenizer`, token for token.

Pure Python, no TensorFlow. The same ids inside a TensorFlow graph: fast_tokenization.FastBertTokenizer.
tokenize_in_processes(texts, tokenizer, num_workers) gives the ids of many texts, in several processes.
"""

import collections
import json
import multiprocessing
import re
import unicodedata

from absl import logging

import filesystem
from cli import MissingFileError, UserError

UNK_TOKEN = "[UNK]"
MAX_INPUT_CHARS_PER_WORD = 200

_LOWER_MODELS = (
    "uncased_L-24_H-1024_A-16", "uncased_L-12_H-768_A-12",
    "multilingual_L-12_H-768_A-12", "chinese_L-12_H-768_A-12",
)
_CASED_MODELS = (
    "cased_L-12_H-768_A-12", "cased_L-24_H-1024_A-16",
    "multi_cased_L-12_H-768_A-12",
)

# Code point ranges the original treats as CJK characters (each becomes its own token).
CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def validate_case_matches_checkpoint(do_lower_case, init_checkpoint):
    """Raises ValueError when do_lower_case contradicts a known Google checkpoint's casing."""
    if not init_checkpoint:
        return
    match = re.match("^.*?([A-Za-z0-9_-]+)/bert_model.ckpt", init_checkpoint)
    if match is None:
        return
    model_name = match.group(1)
    if model_name in _LOWER_MODELS and not do_lower_case:
        actual_flag, case_name, opposite_flag = "False", "lowercased", "True"
    elif model_name in _CASED_MODELS and do_lower_case:
        actual_flag, case_name, opposite_flag = "True", "cased", "False"
    else:
        return
    raise UserError(
        "You passed in `--do_lower_case=%s` with `--init_checkpoint=%s`. However, `%s` seems to be a %s "
        "model, so you should pass in `--do_lower_case=%s` so that the fine-tuning matches how the model "
        "was pre-trained. If this error is wrong, pass a checkpoint path that does not end in "
        "`%s/bert_model.ckpt`." % (actual_flag, init_checkpoint, model_name, case_name, opposite_flag,
                                   model_name))


_INVALID_UTF8 = [0]  # strings with invalid UTF-8 seen by convert_to_unicode


def convert_to_unicode(text):
    """Returns `text` as str, decoding bytes as UTF-8 (invalid bytes are dropped, as in the original)."""
    if isinstance(text, str):
        return text
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text)
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError as err:
            _INVALID_UTF8[0] += 1
            count = _INVALID_UTF8[0]
            if count <= 3 or count % 1000 == 0:
                logging.warning("Input is not valid UTF-8 (%s); dropping the invalid bytes: %r (%d such strings "
                                "so far; the first 3 and every 1000th are logged)", err, text[:80], count)
            return text.decode("utf-8", "ignore")
    raise ValueError("Unsupported string type: %s (expected str or UTF-8 bytes)" % type(text))


def printable_text(text):
    """Returns `text` as str suitable for printing or logging."""
    return convert_to_unicode(text)


def load_vocab(vocab_file):
    """Loads a vocab.txt (one token per line) into an OrderedDict token -> index."""
    if not vocab_file:
        raise UserError("--vocab_file is required: the path of a vocab.txt file")
    if not filesystem.exists(vocab_file) or filesystem.isdir(vocab_file):
        raise MissingFileError("vocab_file %s does not exist: expected a vocab.txt file, one token per line"
                               % vocab_file)
    with filesystem.open_file(vocab_file, "rb") as reader:  # a path with a scheme (gs://...) through tf.io.gfile
        data = reader.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserError("vocab_file %s is not valid UTF-8: %s" % (vocab_file, err)) from None
    vocab = collections.OrderedDict()
    # The original reads with readline(), which splits on "\n" only (and keeps "\r").
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for index, line in enumerate(lines):
        vocab[line.strip()] = index
    if not vocab:
        raise UserError("vocab_file %s is empty: expected one token per line" % vocab_file)
    return vocab


def check_vocab_size(vocab_file, vocab_size):
    """Number of ids of vocab_file; an error when they do not fit a model of vocab_size (config's vocab_size)."""
    count = max(load_vocab(vocab_file).values()) + 1
    if count > vocab_size:
        raise UserError("vocab_file %s has %d tokens but the config's vocab_size is %d (ids would be out of "
                        "range)" % (vocab_file, count, vocab_size))
    if count < vocab_size:
        logging.warning("vocab_file %s has %d tokens, fewer than the BERT config's vocab_size %d", vocab_file,
                        count, vocab_size)
    return count


def require_vocab_of(vocab_file, vocab_size, bert_config_file):
    """An error unless vocab_file holds exactly vocab_size ids (the config's): an export's tokenizer and model must
    agree. Returns the count."""
    count = check_vocab_size(vocab_file, vocab_size)
    if count != vocab_size:
        raise UserError(f"--vocab_file={vocab_file} has {count} tokens but --bert_config_file={bert_config_file} "
                        f"says vocab_size {vocab_size}: expected the vocabulary of this model")
    return count


def check_special_tokens(vocab, vocab_file, tokens=("[CLS]", "[SEP]")):
    """An error naming vocab_file when a special token a script uses is missing (ids would shift silently)."""
    missing = [token for token in tokens if token not in vocab]
    if missing:
        raise UserError("vocab_file %s lacks the special token(s) %s: expected each on a line of its own"
                        % (vocab_file, " ".join(missing)))


# The casing of a model, recorded beside its checkpoint in HF's tokenizer_config.json format (written by
# convert_checkpoint.py's hf_to_original; read by original_to_hf and by every script's --init_checkpoint check).
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"


def cased_entry(vocab):
    """The first entry of `vocab` that lower casing would change (a cased vocabulary holds one: "The"), or None.
    Bracketed special entries ([CLS], <S>) do not count."""
    for token in vocab:
        if token[:1] + token[-1:] in ("[]", "<>"):
            continue
        if token.lower() != token:
            return token
    return None


def recorded_tokenizer_config(folder):
    """(the JSON object of folder/tokenizer_config.json, its path); (None, None) without that file. An error when it
    is not a JSON object whose do_lower_case (if any) is true or false."""
    path = folder.rstrip("/") + "/" + TOKENIZER_CONFIG_FILE if folder else TOKENIZER_CONFIG_FILE
    if not filesystem.exists(path):
        return None, None
    with filesystem.open_file(path) as reader:
        try:
            config = json.load(reader)
        except ValueError as err:
            raise UserError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(config, dict) or not isinstance(config.get("do_lower_case", False), bool):
        raise UserError(f"{path}: expected a JSON object whose do_lower_case is true or false")
    return config, path


def recorded_do_lower_case(folder):
    """(do_lower_case, path) recorded in folder/tokenizer_config.json; (None, None) without that file or key."""
    config, path = recorded_tokenizer_config(folder)
    if config is None or "do_lower_case" not in config:
        return None, None
    return config["do_lower_case"], path


def checkpoint_casing(do_lower_case, init_checkpoint, vocab, vocab_file, flag="--do_lower_case"):
    """The casing of the model of `init_checkpoint` being exported: resolve_do_lower_case of the flag's value and
    the tokenizer_config.json recorded beside the checkpoint."""
    recorded, recorded_path = recorded_do_lower_case(checkpoint_folder(init_checkpoint))
    return resolve_do_lower_case(do_lower_case, recorded, vocab, vocab_file, recorded_path, flag)


def checkpoint_folder(init_checkpoint):
    """The folder of a checkpoint prefix (or the folder itself when init_checkpoint names one)."""
    if filesystem.isdir(init_checkpoint):
        return init_checkpoint
    return init_checkpoint.rstrip("/").rsplit("/", 1)[0] if "/" in init_checkpoint.rstrip("/") else "."


def check_recorded_casing(do_lower_case, init_checkpoint, flag="--do_lower_case"):
    """An error when do_lower_case contradicts the casing recorded beside init_checkpoint (recorded_do_lower_case):
    a model must read text cased as it was trained."""
    if not init_checkpoint:
        return
    recorded, path = recorded_do_lower_case(checkpoint_folder(init_checkpoint))
    if recorded is not None and recorded != bool(do_lower_case):
        raise UserError(f"{flag}={do_lower_case} contradicts {path}, which records do_lower_case={recorded} for the "
                        f"model of --init_checkpoint={init_checkpoint}: pass {flag}={recorded}")


def resolve_do_lower_case(do_lower_case, recorded, vocab, vocab_file, recorded_in=None, flag="--do_lower_case"):
    """The casing of a model being converted: `do_lower_case` (a flag: True, False or None when not given), else
    `recorded` (None: nothing recorded, in `recorded_in`), else True for an uncased vocabulary. Never guessed for
    a cased vocabulary (an error asks for the flag); a flag that contradicts the record is an error too."""
    if do_lower_case is not None and recorded is not None and do_lower_case != recorded:
        raise UserError(f"{flag}={do_lower_case} contradicts {recorded_in}, which records do_lower_case={recorded}")
    if do_lower_case is not None:
        return do_lower_case
    if recorded is not None:
        return recorded
    entry = cased_entry(vocab)
    if entry is not None:
        raise UserError(f"{flag} is required: vocab_file {vocab_file} is cased (it holds upper-case entries such as "
                        f"{entry!r}) and nothing records whether the model lowercases its input; pass {flag}=false "
                        f"for a cased model, {flag}=true for one trained on lower-cased text")
    return True


def convert_by_vocab(vocab, items):
    """Maps a sequence of tokens (or ids) through `vocab`; unknown items map to vocab["[UNK]"]."""
    output = []
    for item in items:
        if item in vocab:
            output.append(vocab[item])
        elif UNK_TOKEN in vocab:
            output.append(vocab[UNK_TOKEN])
        else:
            raise KeyError("%r is not in the vocabulary and the vocabulary has no %s entry" % (item, UNK_TOKEN))
    return output


def convert_tokens_to_ids(vocab, tokens):
    return convert_by_vocab(vocab, tokens)


def convert_ids_to_tokens(inv_vocab, ids):
    return convert_by_vocab(inv_vocab, ids)


def whitespace_tokenize(text):
    """Strips and splits `text` on whitespace."""
    text = text.strip()
    if not text:
        return []
    return text.split()


class FullTokenizer:
    """Runs end-to-end tokenization: BasicTokenizer then WordpieceTokenizer."""

    def __init__(self, vocab_file, do_lower_case=True):
        self.vocab = load_vocab(vocab_file)
        if UNK_TOKEN not in self.vocab:
            raise UserError("vocab_file %s has no %s token: expected it on a line of its own"
                             % (vocab_file, UNK_TOKEN))
        self.inv_vocab = {v: k for k, v in self.vocab.items()}
        self.do_lower_case = do_lower_case
        self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
        self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)

    def tokenize(self, text):
        split_tokens = []
        for token in self.basic_tokenizer.tokenize(text):
            for sub_token in self.wordpiece_tokenizer.tokenize(token):
                split_tokens.append(sub_token)
        return split_tokens

    def convert_tokens_to_ids(self, tokens):
        return convert_by_vocab(self.vocab, tokens)

    def convert_ids_to_tokens(self, ids):
        return convert_by_vocab(self.inv_vocab, ids)


class BasicTokenizer:
    """Runs basic tokenization (cleaning, CJK split, lower casing, accent stripping, punctuation split)."""

    def __init__(self, do_lower_case=True):
        self.do_lower_case = do_lower_case

    def tokenize(self, text):
        """Tokenizes a piece of text."""
        text = convert_to_unicode(text)
        text = self._clean_text(text)
        text = self._tokenize_chinese_chars(text)
        split_tokens = []
        for token in whitespace_tokenize(text):
            if self.do_lower_case:
                token = token.lower()
                token = self._run_strip_accents(token)
            split_tokens.extend(self._run_split_on_punc(token))
        return whitespace_tokenize(" ".join(split_tokens))

    def _run_strip_accents(self, text):
        """Strips accents (combining marks, category Mn) after NFD normalization."""
        text = unicodedata.normalize("NFD", text)
        return "".join(char for char in text if unicodedata.category(char) != "Mn")

    def _run_split_on_punc(self, text):
        """Splits punctuation characters into tokens of their own."""
        output = []
        start_new_word = True
        for char in text:
            if _is_punctuation(char):
                output.append([char])
                start_new_word = True
            else:
                if start_new_word:
                    output.append([])
                start_new_word = False
                output[-1].append(char)
        return ["".join(x) for x in output]

    def _tokenize_chinese_chars(self, text):
        """Adds whitespace around any CJK character."""
        output = []
        for char in text:
            if self._is_chinese_char(ord(char)):
                output.append(" ")
                output.append(char)
                output.append(" ")
            else:
                output.append(char)
        return "".join(output)

    def _is_chinese_char(self, cp):
        """Whether code point `cp` is in the CJK Unified Ideographs blocks the original lists."""
        return _is_chinese_codepoint(cp)

    def _clean_text(self, text):
        """Removes NUL, U+FFFD and control characters; maps whitespace to a space."""
        output = []
        for char in text:
            cp = ord(char)
            if cp == 0 or cp == 0xFFFD or _is_control(char):
                continue
            if _is_whitespace(char):
                output.append(" ")
            else:
                output.append(char)
        return "".join(output)


class WordpieceTokenizer:
    """Runs WordPiece tokenization (greedy longest-match-first)."""

    def __init__(self, vocab, unk_token=UNK_TOKEN, max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD):
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word

    def tokenize(self, text):
        """Splits whitespace-separated words of `text` into word pieces, e.g. unaffable -> un ##aff ##able."""
        text = convert_to_unicode(text)
        output_tokens = []
        for token in whitespace_tokenize(text):
            if len(token) > self.max_input_chars_per_word:
                output_tokens.append(self.unk_token)
                continue
            is_bad = False
            start = 0
            sub_tokens = []
            while start < len(token):
                end = len(token)
                cur_substr = None
                while start < end:
                    substr = token[start:end]
                    if start > 0:
                        substr = "##" + substr
                    if substr in self.vocab:
                        cur_substr = substr
                        break
                    end -= 1
                if cur_substr is None:
                    is_bad = True
                    break
                sub_tokens.append(cur_substr)
                start = end
            if is_bad:
                output_tokens.append(self.unk_token)
            else:
                output_tokens.extend(sub_tokens)
        return output_tokens


def _is_chinese_codepoint(cp):
    for low, high in CJK_RANGES:
        if low <= cp <= high:
            return True
    return False


def _is_whitespace(char):
    """Space, tab, newline, carriage return and category Zs."""
    if char == " " or char == "\t" or char == "\n" or char == "\r":
        return True
    return unicodedata.category(char) == "Zs"


def _is_control(char):
    """Categories Cc and Cf, except tab, newline and carriage return (treated as whitespace)."""
    if char == "\t" or char == "\n" or char == "\r":
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char):
    """All non-letter/number ASCII, and Unicode categories P*."""
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


_WORKER_TOKENIZER = []


def _tokenize_chunk(texts):
    tokenizer = _WORKER_TOKENIZER[0]
    return [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text)) if text else [] for text in texts]


def tokenize_in_processes(texts, tokenizer, num_workers=1, chunk_size=2000):
    """WordPiece ids of every text (None or "" -> []), in order; num_workers > 1 tokenizes chunks in that
    many processes (forked: no TensorFlow ops run in them). The ids are the same for any number."""
    texts = list(texts)
    _WORKER_TOKENIZER[:] = [tokenizer]
    if num_workers <= 1 or len(texts) <= chunk_size:
        return _tokenize_chunk(texts)
    chunks = [texts[i:i + chunk_size] for i in range(0, len(texts), chunk_size)]
    logging.info("Tokenizing %d texts with %d worker processes", len(texts), num_workers)
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with context.Pool(num_workers) as pool:
        return [ids for chunk in pool.map(_tokenize_chunk, chunks) for ids in chunk]
