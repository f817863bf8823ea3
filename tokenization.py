# coding=utf-8
"""Tokenization classes: the original BERT tokenizer and an in-graph fast path.

`FullTokenizer`, `BasicTokenizer` and `WordpieceTokenizer` reproduce the original release token for token.
`FastBertTokenizer` is a tf.Module built on tensorflow-text ops that gives the same ids inside a graph.
"""

import collections
import os
import re
import unicodedata

from absl import logging

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
    raise ValueError(
        "You passed in `--do_lower_case=%s` with `--init_checkpoint=%s`. However, `%s` seems to be a %s "
        "model, so you should pass in `--do_lower_case=%s` so that the fine-tuning matches how the model "
        "was pre-trained. If this error is wrong, pass a checkpoint path that does not end in "
        "`%s/bert_model.ckpt`." % (actual_flag, init_checkpoint, model_name, case_name, opposite_flag,
                                   model_name))


def convert_to_unicode(text):
    """Returns `text` as str, decoding bytes as UTF-8 (invalid bytes are dropped, as in the original)."""
    if isinstance(text, str):
        return text
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text)
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError as err:
            logging.warning("Input is not valid UTF-8 (%s); dropping the invalid bytes: %r", err, text[:80])
            return text.decode("utf-8", "ignore")
    raise ValueError("Unsupported string type: %s (expected str or UTF-8 bytes)" % type(text))


def printable_text(text):
    """Returns `text` as str suitable for printing or logging."""
    return convert_to_unicode(text)


def load_vocab(vocab_file):
    """Loads a vocab.txt (one token per line) into an OrderedDict token -> index."""
    import tensorflow as tf  # gfile reads local and remote (gs://) paths alike.

    if not vocab_file:
        raise ValueError("vocab_file is empty: expected the path of a vocab.txt file")
    if not tf.io.gfile.exists(vocab_file):
        raise ValueError("vocab_file %s does not exist: expected a vocab.txt file, one token per line"
                         % vocab_file)
    with tf.io.gfile.GFile(vocab_file, "rb") as reader:
        data = reader.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError("vocab_file %s is not valid UTF-8: %s" % (vocab_file, err)) from err
    vocab = collections.OrderedDict()
    # The original reads with readline(), which splits on "\n" only (and keeps "\r").
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for index, line in enumerate(lines):
        vocab[line.strip()] = index
    if not vocab:
        raise ValueError("vocab_file %s is empty: expected one token per line" % vocab_file)
    return vocab


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


class FullTokenizer(object):
    """Runs end-to-end tokenization: BasicTokenizer then WordpieceTokenizer."""

    def __init__(self, vocab_file, do_lower_case=True):
        self.vocab = load_vocab(vocab_file)
        if UNK_TOKEN not in self.vocab:
            raise ValueError("vocab_file %s has no %s token: expected it on a line of its own"
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


class BasicTokenizer(object):
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


class WordpieceTokenizer(object):
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


# ----------------------------------------------------------------------------------------------------------
# Fast in-graph tokenizer.

_F_DROP = 1        # removed by _clean_text: NUL, U+FFFD, control characters (Cc, Cf but not \t \n \r)
_F_DELIM = 2       # whitespace for str.split() (after cleaning): separates words
_F_CJK = 4         # CJK ideograph: a word of its own (decided before lower casing)
_F_PUNCT = 8       # punctuation by the original's rule: a word of its own
_F_CASE_IGNORABLE = 16  # Unicode Case_Ignorable (for the Greek final sigma rule of str.lower)
_F_CASED = 32      # Cased and not Case_Ignorable
_F_BITS = 8        # flags use the low bits; the index of a lower-casing expansion the bits above
_PAGE_BITS = 7
_NUM_CODEPOINTS = 0x110000
_CAPITAL_SIGMA, _SMALL_SIGMA, _FINAL_SIGMA = 0x3A3, 0x3C3, 0x3C2


def _case_class(char):
    """Case_Ignorable / Cased of `char`, read off CPython's own final-sigma handling in str.lower()."""
    if (char + "\u03a3").lower()[-1] == "\u03c2":
        return _F_CASED
    if ("A" + char + "\u03a3").lower()[-1] == "\u03c2":
        return _F_CASE_IGNORABLE
    return 0


def _lower_and_strip(char):
    """What BasicTokenizer makes of one character when lower casing: lower(), NFD, combining marks removed."""
    text = unicodedata.normalize("NFD", char.lower())
    return "".join(c for c in text if unicodedata.category(c) != "Mn")


_TABLE_CACHE = {}


def _char_tables(do_lower_case):
    """Per-code-point flags and lower-casing expansions, as a two-level table (numpy arrays).

    Returns (page_base, data, exp_start, exp_len, exp_flat): the entry of code point cp is
    data[page_base[cp >> 7] + (cp & 127)]; entry >> 8 indexes exp_start/exp_len (0: unchanged).
    """
    import numpy as np

    key = bool(do_lower_case)
    if key in _TABLE_CACHE:
        return _TABLE_CACHE[key]
    info = np.zeros(_NUM_CODEPOINTS, np.int32)
    for low, high in CJK_RANGES:
        info[low:high + 1] |= _F_CJK
    expansions = {}
    exp_start, exp_len, exp_flat = [0], [0], [0]
    for cp in range(_NUM_CODEPOINTS):
        char = chr(cp)
        cat = unicodedata.category(char)
        if cat in ("Cn", "Co", "Cs"):
            continue
        flags = 0
        if cp == 0 or cp == 0xFFFD or _is_control(char):
            info[cp] = _F_DROP
            continue
        if char.isspace() or _is_whitespace(char):
            info[cp] |= _F_DELIM
            continue
        if _is_punctuation(char):
            flags |= _F_PUNCT
        if key:
            flags |= _case_class(char)
            mapped = _lower_and_strip(char)
            if mapped != char:
                if info[cp] & _F_CJK and len(mapped) != 1:
                    raise AssertionError("CJK character U+%04X lower-cases to %d characters" % (cp, len(mapped)))
                if any(c.isspace() for c in mapped):
                    raise AssertionError("U+%04X lower-cases to whitespace" % cp)
                if mapped not in expansions:
                    expansions[mapped] = len(exp_start)
                    exp_start.append(len(exp_flat))
                    exp_len.append(len(mapped))
                    exp_flat.extend(ord(c) for c in mapped)
                flags |= expansions[mapped] << _F_BITS
        info[cp] |= flags
    page_size = 1 << _PAGE_BITS
    pages = info.reshape(-1, page_size)
    page_base = np.zeros(len(pages), np.int32)
    unique = {}
    data = []
    for i, page in enumerate(pages):
        blob = page.tobytes()
        if blob not in unique:
            unique[blob] = len(data) * page_size
            data.append(page)
        page_base[i] = unique[blob]
    tables = (page_base, np.concatenate(data), np.array(exp_start, np.int32), np.array(exp_len, np.int32),
              np.array(exp_flat, np.int32))
    _TABLE_CACHE[key] = tables
    return tables


def _find_unknown_word(vocab):
    """A one-character word that WordPiece can only map to [UNK] (stands in for words over 200 characters)."""
    first_chars = {token[0] for token in vocab if token}
    for cp in range(0x10FFFD, 0xF0000, -1):
        if chr(cp) not in first_chars:
            return chr(cp)
    raise ValueError("vocabulary covers every private-use character; cannot mark over-long words")


def _import_tf_text():
    try:
        import tensorflow_text
    except ImportError as err:
        raise ImportError("FastBertTokenizer needs tensorflow-text (pip install tensorflow-text); "
                          "FullTokenizer works without it") from err
    return tensorflow_text


def _tf():
    import tensorflow as tf
    return tf


class FastBertTokenizer(_tf().Module):
    """In-graph BERT tokenizer giving the same ids as FullTokenizer, built on tf.strings / tensorflow-text ops.

    tokenize(strings) maps a 1-D string tensor (UTF-8) to a tf.RaggedTensor int64 [batch, (pieces)];
    tokenize_words gives [batch, (words), (pieces)]. Works eagerly, in tf.function and in a SavedModel.
    """

    def __init__(self, vocab_file, do_lower_case=True, max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD,
                 name=None):
        super().__init__(name=name)
        tf = _tf()
        text = _import_tf_text()
        vocab = load_vocab(vocab_file)
        if UNK_TOKEN not in vocab:
            raise ValueError("vocab_file %s has no %s token: expected it on a line of its own"
                             % (vocab_file, UNK_TOKEN))
        self.vocab_file = vocab_file
        self.do_lower_case = bool(do_lower_case)
        self.max_input_chars_per_word = int(max_input_chars_per_word)
        self.vocab = vocab
        self.unk_id = vocab[UNK_TOKEN]
        # Ids are line numbers; lines whose token is empty or repeated later can never be produced by the
        # original, so they get placeholders no word can match (words never contain control characters).
        size = max(vocab.values()) + 1
        tokens = ["\x01%d" % i for i in range(size)]
        for token, index in vocab.items():
            if token and token != "##":
                tokens[index] = token
        self._wordpiece = text.FastWordpieceTokenizer(
            vocab=tokens, suffix_indicator="##", max_bytes_per_word=4 * self.max_input_chars_per_word,
            token_out_type=tf.int64, unknown_token=UNK_TOKEN, no_pretokenization=True,
            support_detokenization=False)
        self._unknown_word = _find_unknown_word(vocab)
        page_base, data, exp_start, exp_len, exp_flat = _char_tables(self.do_lower_case)
        self._page_base = tf.constant(page_base)
        self._char_info = tf.constant(data)
        self._exp_start = tf.constant(exp_start)
        self._exp_len = tf.constant(exp_len)
        self._exp_flat = tf.constant(exp_flat)

    def _lookup(self, cps):
        tf = _tf()
        base = tf.gather(self._page_base, tf.bitwise.right_shift(cps, _PAGE_BITS))
        return tf.gather(self._char_info, base + tf.bitwise.bitwise_and(cps, (1 << _PAGE_BITS) - 1))

    def _final_sigma(self, cps, rows, info):
        """Turns capital sigma into final sigma where str.lower() would (its Final_Sigma context)."""
        tf = _tf()
        sigma_pos = tf.cast(tf.where(tf.equal(cps, _CAPITAL_SIGMA))[:, 0], tf.int32)
        heads = tf.cast(tf.where(tf.equal(tf.bitwise.bitwise_and(info, _F_CASE_IGNORABLE), 0))[:, 0], tf.int32)
        num_heads = tf.size(heads)
        before = tf.searchsorted(heads, sigma_pos, side="left") - 1
        after = tf.searchsorted(heads, sigma_pos, side="right")
        sigma_rows = tf.gather(rows, sigma_pos)

        def cased_head(k):
            valid = (k >= 0) & (k < num_heads)
            pos = tf.gather(heads, tf.clip_by_value(k, 0, tf.maximum(num_heads - 1, 0)))
            same_row = tf.equal(tf.gather(rows, pos), sigma_rows)
            cased = tf.not_equal(tf.bitwise.bitwise_and(tf.gather(info, pos), _F_CASED), 0)
            return valid & same_row & cased

        final = cased_head(before) & ~cased_head(after)
        final_pos = tf.boolean_mask(sigma_pos, final)
        return tf.tensor_scatter_nd_update(
            cps, final_pos[:, None], tf.fill(tf.shape(final_pos), tf.constant(_FINAL_SIGMA, tf.int32)))

    def _expand(self, cps, rows, info):
        """Applies the lower-casing expansions (lower, NFD, accents removed): one character to 0..n."""
        tf = _tf()
        exp_id = tf.bitwise.right_shift(info, _F_BITS)
        lengths = tf.where(exp_id > 0, tf.gather(self._exp_len, exp_id), 1)
        origin = tf.repeat(tf.range(tf.size(cps)), lengths)
        offsets = tf.cumsum(lengths, exclusive=True)
        within = tf.range(tf.size(origin)) - tf.gather(offsets, origin)
        origin_exp = tf.gather(exp_id, origin)
        mapped = tf.gather(self._exp_flat, tf.gather(self._exp_start, origin_exp) + within)
        new_cps = tf.where(origin_exp > 0, mapped, tf.gather(cps, origin))
        return new_cps, tf.gather(rows, origin), tf.gather(info, origin)

    def _word_strings(self, strings):
        """Splits a 1-D string tensor into words: (words [num_words] string, word_rows [num_words] int64)."""
        tf = _tf()
        strings = tf.convert_to_tensor(strings, tf.string)
        strings.shape.assert_has_rank(1)
        decoded = tf.strings.unicode_decode(strings, "UTF-8", errors="replace", replacement_char=0xFFFD)
        cps = decoded.flat_values
        rows = tf.cast(decoded.value_rowids(), tf.int32)
        info = self._lookup(cps)
        keep = tf.equal(tf.bitwise.bitwise_and(info, _F_DROP), 0)
        cps, rows, info = (tf.boolean_mask(t, keep) for t in (cps, rows, info))
        if self.do_lower_case:
            cps = self._final_sigma(cps, rows, info)
            cps, rows, origin_info = self._expand(cps, rows, info)
            info = tf.bitwise.bitwise_or(
                tf.bitwise.bitwise_and(self._lookup(cps), _F_DELIM | _F_PUNCT),
                tf.bitwise.bitwise_and(origin_info, _F_CJK))
        delim = tf.not_equal(tf.bitwise.bitwise_and(info, _F_DELIM), 0)
        alone = tf.not_equal(tf.bitwise.bitwise_and(info, _F_CJK | _F_PUNCT), 0)
        first = tf.concat([[True], tf.not_equal(rows[1:], rows[:-1])], 0)[:tf.size(rows)]
        prev_delim = tf.concat([[True], delim[:-1]], 0)[:tf.size(rows)]
        prev_alone = tf.concat([[False], alone[:-1]], 0)[:tf.size(rows)]
        starts = ~delim & (first | prev_delim | alone | prev_alone)
        word_chars = tf.boolean_mask(cps, ~delim)
        word_ids = tf.cumsum(tf.cast(tf.boolean_mask(starts, ~delim), tf.int32)) - 1
        word_rows = tf.boolean_mask(rows, starts)
        chars = tf.RaggedTensor.from_value_rowids(word_chars, word_ids, nrows=tf.size(word_rows))
        words = tf.strings.unicode_encode(chars, "UTF-8")
        too_long = chars.row_lengths() > self.max_input_chars_per_word
        words = tf.where(too_long, tf.constant(self._unknown_word), words)
        return words, tf.cast(word_rows, tf.int64), tf.shape(strings, out_type=tf.int64)[0]

    def tokenize_words(self, strings):
        """1-D string tensor -> tf.RaggedTensor int64 of ids [batch, (words), (pieces)]."""
        tf = _tf()
        words, word_rows, batch = self._word_strings(strings)
        pieces = self._wordpiece.tokenize(words)
        return tf.RaggedTensor.from_value_rowids(pieces, word_rows, nrows=batch)

    def tokenize(self, strings):
        """1-D string tensor -> tf.RaggedTensor int64 of word-piece ids [batch, (pieces)]."""
        return self.tokenize_words(strings).merge_dims(1, 2)
