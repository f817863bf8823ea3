"""FastBertTokenizer: the original BERT tokenizer's ids from tensorflow-text ops, inside a TensorFlow graph.

It is saved inside exported SavedModels; loading one needs `import tensorflow_text` (which registers the
FastWordpiece ops), nothing from this repository. The character tables are built from the exact tokenizer's
rules in tokenization.py.
"""
import unicodedata

import numpy as np
import tensorflow as tf
import tensorflow_text as text

import linear_ragged
from cli import UserError
from tokenization import (CJK_RANGES, MAX_INPUT_CHARS_PER_WORD, UNK_TOKEN, _is_control, _is_punctuation,
                          _is_whitespace, load_vocab)

# Entry of a code point in the character table: the code point it becomes (after lower casing, when
# do_lower_case) in the bits above _F_BITS, word-boundary kind and flags below.
_KIND_MASK = 3
_KIND_DELIM = 1    # whitespace for str.split() (after cleaning): separates words
_KIND_ALONE = 2    # punctuation (after lower casing) or CJK ideograph (before): a word of its own
_F_CJK = 4
_F_DROP = 8        # removed by _clean_text: NUL, U+FFFD, control characters (Cc, Cf but not \t \n \r)
_F_CASE_IGNORABLE = 16  # Unicode Case_Ignorable (for the Greek final sigma rule of str.lower)
_F_CASED = 32      # Cased and not Case_Ignorable
_F_MAP_MANY = 64   # lower casing gives 0 or several code points: expansion index above _F_BITS
_F_SPECIAL = 128   # needs the general path: dropped, mapped to 0 or several code points, or capital sigma
_F_E2E_UNSAFE = 256  # (the character it becomes) splits differently in FastWordpiece's own pre-tokenization
_F_BITS = 9
_NUM_CODEPOINTS = 0x110000
_CAPITAL_SIGMA, _FINAL_SIGMA = 0x3A3, 0x3C2


def _case_class(char):
    """Case_Ignorable / Cased of `char`, read off CPython's own final-sigma handling in str.lower()."""
    if (char + "\u03a3").lower()[-1] == "\u03c2":
        return _F_CASED
    if ("A" + char + "\u03a3").lower()[-1] == "\u03c2":
        return _F_CASE_IGNORABLE
    return 0


def lower_and_strip(char):
    """What BasicTokenizer makes of one character when lower casing: lower(), NFD, combining marks removed."""
    text = unicodedata.normalize("NFD", char.lower())
    return "".join(c for c in text if unicodedata.category(c) != "Mn")


def _kind(char):
    """Word-boundary kind of a character as it is after lower casing."""
    if char.isspace():
        return _KIND_DELIM
    return _KIND_ALONE if _is_punctuation(char) else 0


_TABLE_CACHE = {}


def _char_tables(do_lower_case):
    """Character table (int32 per code point) and lower-casing expansions, as numpy arrays.

    Returns (table, exp_start, exp_len, exp_entries): for a _F_MAP_MANY entry, entry >> _F_BITS indexes
    exp_start/exp_len, which select entries (code point << _F_BITS | kind) in exp_entries.
    """

    key = bool(do_lower_case)
    if key in _TABLE_CACHE:
        return _TABLE_CACHE[key]
    table = np.arange(_NUM_CODEPOINTS, dtype=np.int32) << _F_BITS
    for low, high in CJK_RANGES:
        table[low:high + 1] |= _F_CJK | _KIND_ALONE
    expansions = {}
    exp_start, exp_len, exp_entries = [0], [0], [0]
    for cp in range(_NUM_CODEPOINTS):
        char = chr(cp)
        if unicodedata.category(char) in ("Cn", "Co", "Cs"):
            continue
        if cp == 0 or cp == 0xFFFD or _is_control(char):
            table[cp] |= _F_DROP | _F_SPECIAL
            continue
        if char.isspace() or _is_whitespace(char):
            table[cp] |= _KIND_DELIM
            continue
        if not key:
            table[cp] |= _kind(char)
            continue
        cjk = bool(table[cp] & _F_CJK)
        flags = _case_class(char)
        mapped = lower_and_strip(char)
        if cjk and len(mapped) != 1:
            raise AssertionError("CJK character U+%04X lower-cases to %d characters" % (cp, len(mapped)))
        if cp == _CAPITAL_SIGMA:
            flags |= _F_SPECIAL
        if len(mapped) == 1:
            flags |= (_KIND_ALONE if cjk else _kind(mapped))
            table[cp] = (ord(mapped) << _F_BITS) | (table[cp] & _F_CJK) | flags
            continue
        if mapped not in expansions:
            expansions[mapped] = len(exp_start)
            exp_start.append(len(exp_entries))
            exp_len.append(len(mapped))
            exp_entries.extend((ord(c) << _F_BITS) | _kind(c) for c in mapped)
        table[cp] = (expansions[mapped] << _F_BITS) | _F_MAP_MANY | _F_SPECIAL | flags
    tables = (table, np.asarray(exp_start, np.int32), np.asarray(exp_len, np.int32),
              np.asarray(exp_entries, np.int32))
    _TABLE_CACHE[key] = tables
    return tables


_E2E_KINDS = []


def end_to_end_kinds():
    """Word-boundary kind (0, _KIND_DELIM, _KIND_ALONE) FastWordpiece's pre-tokenization gives each code point.

    Read off the op itself: "x" + c + "x" gives one piece for a word character, two for whitespace, three
    for a character split off on its own (punctuation, CJK). Surrogates count as word characters.
    Characters marked otherwise than the original treats them route their batch to the word path.
    """
    if _E2E_KINDS:
        return _E2E_KINDS[0]
    probe = text.FastWordpieceTokenizer(vocab=[UNK_TOKEN, "x", "##x"], suffix_indicator="##",
                                        max_bytes_per_word=64, token_out_type=tf.int64,
                                        unknown_token=UNK_TOKEN, no_pretokenization=False)
    cps = np.arange(_NUM_CODEPOINTS, dtype=np.int32)
    cps[0xD800:0xE000] = ord("x")
    chars = np.full((_NUM_CODEPOINTS, 3), ord("x"), np.int32)
    chars[:, 1] = cps
    pieces = probe.tokenize(tf.strings.unicode_encode(tf.constant(chars), "UTF-8")).row_lengths().numpy()
    kinds = np.select([pieces == 1, pieces == 2, pieces == 3], [0, _KIND_DELIM, _KIND_ALONE], -1)
    kinds[ord("x")] = 0  # "xxx" is x ##x ##x
    _E2E_KINDS.append(kinds.astype(np.int32))
    return _E2E_KINDS[0]


def _mark_end_to_end_unsafe(entries, e2e_kinds, skip):
    """Sets _F_E2E_UNSAFE on entries whose code point FastWordpiece would split otherwise than their kind."""
    cps = entries >> _F_BITS
    unsafe = (e2e_kinds[np.clip(cps, 0, _NUM_CODEPOINTS - 1)] != (entries & _KIND_MASK)) & ~skip
    return np.where(unsafe, entries | _F_E2E_UNSAFE, entries).astype(np.int32)


def wordpiece_tokens(vocab):
    """The vocabulary as tensorflow-text's WordPiece ops take it: one token per id (line number); lines whose
    token is empty or repeated later can never be produced by the original, so they get placeholders no word
    can match (words never contain control characters)."""
    tokens = ["\x01%d" % i for i in range(max(vocab.values()) + 1)]
    for token, index in vocab.items():
        if token and token != "##":
            tokens[index] = token
    return tokens


def _find_unknown_word(vocab):
    """A one-character word that WordPiece can only map to [UNK] (stands in for words over 200 characters)."""
    first_chars = {token[0] for token in vocab if token}
    for cp in range(0x10FFFD, 0xF0000, -1):
        if chr(cp) not in first_chars:
            return chr(cp)
    raise ValueError("vocabulary covers every private-use character; cannot mark over-long words")


class FastBertTokenizer(tf.Module):
    """In-graph BERT tokenizer giving the same ids as FullTokenizer, built on tf.strings / tensorflow-text ops.

    tokenize(strings) maps a 1-D string tensor (UTF-8) to a tf.RaggedTensor int64 [batch, (pieces)];
    tokenize_words gives [batch, (words), (pieces)]. Works eagerly, in tf.function and in SavedModels
    (loading one needs `import tensorflow_text`, which registers the FastWordpiece ops).

    Rows of printable ASCII (plus tab, newline, carriage return) go through tensorflow-text's end-to-end
    FastWordpieceTokenizer, whose splitting equals the original's there. Other rows are decoded to code
    points and mapped through a per-code-point table built from Python's unicodedata at construction
    (cleaning, whitespace, CJK, punctuation, lower casing + NFD + accent stripping, with str.lower()'s
    Greek final sigma rule). The result is re-encoded and run through FastWordpiece end to end as whole
    rows when that splits words as the original (checked per code point against the op at construction)
    and no word exceeds 200 characters; otherwise the batch is split into words here, over-long words
    become [UNK], and FastWordpiece runs word by word. Known differences from FullTokenizer:
      * Invalid UTF-8 bytes are dropped as bytes.decode("utf-8", "ignore") does, but TensorFlow's decoder
        decides how many bytes an invalid sequence spans (equal on all random tests so far).
      * Python str holding lone surrogates cannot become a tf.string (the original keeps them).
      * With do_lower_case, NFD reorders adjacent combining characters by combining class; the table maps
        characters one at a time, so the order of two adjacent non-Mn combining characters with nonzero
        class (25 code points: some Mc viramas, U+302E/U+302F, musical symbols U+1D165..U+1D172) written
        out of canonical order is kept as written.
      * The Unicode version is that of the Python that built the tables (frozen into a SavedModel).
    """

    def __init__(self, vocab_file, do_lower_case=True, max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD,
                 name=None):
        super().__init__(name=name)
        vocab = load_vocab(vocab_file)
        if UNK_TOKEN not in vocab:
            raise UserError("vocab_file %s has no %s token: expected it on a line of its own"
                             % (vocab_file, UNK_TOKEN))
        self.vocab_file = vocab_file
        self.do_lower_case = bool(do_lower_case)
        self.max_input_chars_per_word = int(max_input_chars_per_word)
        self.vocab = vocab
        self.unk_id = vocab[UNK_TOKEN]
        tokens = wordpiece_tokens(vocab)
        # Words from the code-point path: at most 4 bytes a character; longer words are replaced first.
        self._wordpiece = text.FastWordpieceTokenizer(
            vocab=tokens, suffix_indicator="##", max_bytes_per_word=4 * self.max_input_chars_per_word,
            token_out_type=tf.int64, unknown_token=UNK_TOKEN, no_pretokenization=True,
            support_detokenization=False)
        # Printable ASCII text (plus tab, newline, carriage return): FastWordpiece's own whitespace and
        # punctuation splitting is the original's there, and bytes are characters (the 200 rule holds).
        self._ascii_wordpiece = text.FastWordpieceTokenizer(
            vocab=tokens, suffix_indicator="##", max_bytes_per_word=self.max_input_chars_per_word,
            token_out_type=tf.int64, unknown_token=UNK_TOKEN, no_pretokenization=False,
            support_detokenization=False)

        self._is_suffix_id = tf.constant([token.startswith("##") for token in tokens])
        # Characters of each piece's text (its "##" not counted), for tokenize_with_offsets.
        self._piece_chars = tf.constant([len(token) - 2 if token.startswith("##") else len(token) for token in tokens],
                                        tf.int64)
        self._unknown_word = _find_unknown_word(vocab)
        # Other text, once cleaned and lower cased in the code-point domain, goes to FastWordpiece end to
        # end as whole rows when no character splits differently there and no word is over 200 characters.
        self._row_wordpiece = text.FastWordpieceTokenizer(
            vocab=tokens, suffix_indicator="##", max_bytes_per_word=4 * self.max_input_chars_per_word,
            token_out_type=tf.int64, unknown_token=UNK_TOKEN, no_pretokenization=False,
            support_detokenization=False)
        table, exp_start, exp_len, exp_entries = _char_tables(self.do_lower_case)
        e2e_kinds = end_to_end_kinds()
        table = _mark_end_to_end_unsafe(table, e2e_kinds, (table & (_F_DROP | _F_MAP_MANY)) != 0)
        exp_entries = _mark_end_to_end_unsafe(exp_entries, e2e_kinds, np.arange(len(exp_entries)) == 0)
        self._char_table = tf.constant(table)
        self._sigma_entry = int(table[_CAPITAL_SIGMA])
        self._exp_start = tf.constant(exp_start)
        self._exp_len = tf.constant(exp_len)
        self._exp_entries = tf.constant(exp_entries)

    @staticmethod
    def _has(info, flags):
        return tf.not_equal(tf.bitwise.bitwise_and(info, flags), 0)

    @staticmethod
    def _remap_splits(splits, counts):
        """Row splits after each element i of the flat values became counts[i] elements."""
        ends = tf.cumsum(tf.cast(counts, tf.int64))
        return tf.gather(tf.concat([tf.zeros([1], tf.int64), ends], 0), splits)

    def _final_sigma(self, info, splits):
        """Turns capital sigma into final sigma where str.lower() would (its Final_Sigma context)."""
        sigma_pos = tf.where(tf.equal(info, self._sigma_entry))[:, 0]
        heads = tf.where(~self._has(info, _F_CASE_IGNORABLE))[:, 0]
        num_heads = tf.size(heads, out_type=tf.int64)
        before = tf.searchsorted(heads, sigma_pos, side="left", out_type=tf.int64) - 1
        after = tf.searchsorted(heads, sigma_pos, side="right", out_type=tf.int64)
        sigma_rows = tf.searchsorted(splits, sigma_pos, side="right", out_type=tf.int64)

        def cased_head(k):
            valid = (k >= 0) & (k < num_heads)
            pos = tf.gather(heads, tf.clip_by_value(k, 0, tf.maximum(num_heads - 1, 0)))
            same_row = tf.equal(tf.searchsorted(splits, pos, side="right", out_type=tf.int64), sigma_rows)
            return valid & same_row & self._has(tf.gather(info, pos), _F_CASED)

        final_pos = tf.boolean_mask(sigma_pos, cased_head(before) & ~cased_head(after))[:, None]
        final_info = tf.gather(self._char_table, tf.fill(tf.shape(final_pos)[:1], _FINAL_SIGMA))
        return tf.tensor_scatter_nd_update(info, final_pos, final_info)

    def _expand(self, info, splits):
        """Applies lower-casing maps to several (or no) code points: lower(), NFD, accents removed."""
        many = self._has(info, _F_MAP_MANY)
        exp_id = tf.where(many, tf.bitwise.right_shift(info, _F_BITS), 0)
        lengths = tf.where(many, tf.gather(self._exp_len, exp_id), 1)
        origin = linear_ragged.repeat(tf.range(tf.size(info)), lengths)
        offsets = tf.cumsum(lengths, exclusive=True)
        index = tf.gather(tf.gather(self._exp_start, exp_id) - offsets, origin) + tf.range(tf.size(origin))
        origin_info = tf.gather(info, origin)
        new_info = tf.where(tf.gather(many, origin), tf.gather(self._exp_entries, index), origin_info)
        return new_info, self._remap_splits(splits, lengths)

    def _general_path(self, info, splits):
        """Removes dropped characters, applies final sigma and one-to-many lower-casing maps."""
        keep = ~self._has(info, _F_DROP)
        info = tf.gather(info, tf.where(keep)[:, 0])
        splits = self._remap_splits(splits, keep)
        if self.do_lower_case:
            info = tf.cond(tf.reduce_any(tf.equal(info, self._sigma_entry)),
                           lambda: self._final_sigma(info, splits), lambda: info)
            info, splits = tf.cond(tf.reduce_any(self._has(info, _F_MAP_MANY)),
                                   lambda: self._expand(info, splits), lambda: (info, splits))
        return info, splits

    def _code_points(self, strings):
        """Decodes and cleans (and lower cases) rows: (info [chars] int32, row_splits [batch + 1] int64).

        info is code point << _F_BITS | flags | kind, for the characters as the original sees them before
        splitting into words.
        """
        decoded = tf.strings.unicode_decode(strings, "UTF-8", errors="replace", replacement_char=0xFFFD)
        splits = decoded.row_splits
        info = tf.gather(self._char_table, decoded.flat_values)
        special = self._has(info, _F_SPECIAL)
        return tf.cond(tf.reduce_any(special),
                       lambda: self._general_rows(info, splits, special), lambda: (info, splits))

    def _general_rows(self, info, splits, special):
        """Runs the general path on the rows that need it only, keeping the rows' order."""
        rows = tf.RaggedTensor.from_row_splits(info, splits, validate=False)
        row_special = linear_ragged.row_any(special, splits)
        special_rows = tf.where(row_special)[:, 0]
        clean_rows = tf.where(~row_special)[:, 0]
        picked = tf.gather(rows, special_rows)
        general = tf.RaggedTensor.from_row_splits(
            *self._general_path(picked.flat_values, picked.row_splits), validate=False)
        order = tf.math.invert_permutation(tf.concat([clean_rows, special_rows], 0))
        merged = tf.gather(tf.concat([tf.gather(rows, clean_rows), general], axis=0), order)
        return merged.flat_values, merged.row_splits

    def _word_path(self, info, splits):
        """Ids from code points: split into words here, WordPiece each word. Returns (ids, row_splits)."""
        kind = tf.bitwise.bitwise_and(info, _KIND_MASK)
        prev_kind = tf.concat([[_KIND_DELIM], kind[:-1]], 0)[:tf.size(kind)]
        row_starts = splits[:-1]
        row_starts = tf.boolean_mask(row_starts, row_starts < tf.size(kind, out_type=tf.int64))[:, None]
        prev_kind = tf.tensor_scatter_nd_update(prev_kind, row_starts,
                                                tf.fill(tf.shape(row_starts)[:1], _KIND_DELIM))
        starts = tf.not_equal(prev_kind, 0) | tf.equal(kind, _KIND_ALONE)
        in_word = tf.where(tf.not_equal(kind, _KIND_DELIM))[:, 0]
        word_starts = tf.where(tf.gather(starts, in_word))[:, 0]
        chars = tf.RaggedTensor.from_row_splits(
            tf.bitwise.right_shift(tf.gather(info, in_word), _F_BITS),
            tf.concat([word_starts, tf.size(in_word, out_type=tf.int64)[None]], 0), validate=False)
        word_rows = tf.searchsorted(splits, tf.gather(in_word, word_starts), side="right",
                                    out_type=tf.int64) - 1
        words = tf.strings.unicode_encode(chars, "UTF-8")
        too_long = chars.row_lengths() > self.max_input_chars_per_word
        words = tf.where(too_long, tf.constant(self._unknown_word), words)
        pieces = self._wordpiece.tokenize(words)
        ids = tf.RaggedTensor.from_value_rowids(pieces, word_rows, nrows=tf.size(splits, tf.int64) - 1,
                                                validate=False).merge_dims(1, 2)
        return ids.flat_values, ids.row_splits

    def _row_path(self, info, splits):
        """Ids from code points: rows re-encoded whole, FastWordpiece end to end. Returns (ids, row_splits)."""
        rows = tf.RaggedTensor.from_row_splits(tf.bitwise.right_shift(info, _F_BITS), splits, validate=False)
        ids = self._row_wordpiece.tokenize(tf.strings.unicode_encode(rows, "UTF-8"))
        return ids.flat_values, tf.cast(ids.row_splits, tf.int64)

    def _code_point_path(self, strings):
        """Ids for any text through the code-point tables. Returns (ids, row_splits)."""
        info, splits = self._code_points(strings)
        # Longest run of word characters (runs may span rows here, which only errs towards the word path).
        boundaries = tf.where(tf.not_equal(tf.bitwise.bitwise_and(info, _KIND_MASK), 0))[:, 0]
        edges = tf.concat([[-1], boundaries, tf.size(info, out_type=tf.int64)[None]], 0)
        longest_run = tf.reduce_max(edges[1:] - edges[:-1]) - 1
        use_rows = (longest_run <= self.max_input_chars_per_word) & ~tf.reduce_any(
            self._has(info, _F_E2E_UNSAFE))
        return tf.cond(use_rows, lambda: self._row_path(info, splits), lambda: self._word_path(info, splits))

    def _ascii_path(self, strings):
        """Ids for printable ASCII text: (ASCII lower casing and) FastWordpiece end to end."""
        if self.do_lower_case:
            strings = tf.strings.lower(strings)
        ids = self._ascii_wordpiece.tokenize(strings)
        return ids.flat_values, tf.cast(ids.row_splits, tf.int64)

    def _mixed_path(self, strings, is_ascii):
        """Each row through the path it qualifies for, in the input's order."""
        ascii_rows = tf.where(is_ascii)[:, 0]
        other_rows = tf.where(~is_ascii)[:, 0]
        fast = tf.RaggedTensor.from_row_splits(*self._ascii_path(tf.gather(strings, ascii_rows)), validate=False)
        slow = tf.RaggedTensor.from_row_splits(*self._code_point_path(tf.gather(strings, other_rows)),
                                               validate=False)
        order = tf.math.invert_permutation(tf.concat([ascii_rows, other_rows], 0))
        ids = tf.gather(tf.concat([fast, slow], axis=0), order)
        return ids.flat_values, ids.row_splits

    def tokenize(self, strings):
        """1-D string tensor (UTF-8) -> tf.RaggedTensor int64 of word-piece ids [batch, (pieces)]."""
        strings = tf.convert_to_tensor(strings, tf.string)
        strings.shape.assert_has_rank(1)
        is_ascii = tf.strings.regex_full_match(strings, "[\t\n\r\x20-\x7e]*")
        flat, splits = tf.cond(
            tf.reduce_all(is_ascii),
            lambda: self._ascii_path(strings),
            lambda: tf.cond(tf.reduce_any(is_ascii),
                            lambda: self._mixed_path(strings, is_ascii),
                            lambda: self._code_point_path(strings)))
        return tf.RaggedTensor.from_row_splits(flat, splits, validate=False)

    def tokenize_with_offsets(self, words):
        """tokenize(words) with each piece's byte span [start, end) in its word, for strings without whitespace.

        A piece covers as many characters as its text (without "##"), counted from the word's start, where the
        original's normalization keeps every character as one character (the original's get_final_text aligns
        its answers the same way); in a word where it drops or expands a character, or that has an [UNK] piece,
        every piece spans the whole word. Returns (ids, starts, ends), RaggedTensors int64 [batch, (pieces)].
        """
        words = tf.convert_to_tensor(words, tf.string)
        ids = self.tokenize(words)
        decoded = tf.strings.unicode_decode_with_offsets(words, "UTF-8", errors="replace",
                                                         replacement_char=0xFFFD)
        chars, char_bytes = decoded[0], tf.cast(decoded[1], tf.int64)
        info = tf.gather(self._char_table, chars.flat_values)
        changed = self._has(info, _F_DROP | _F_MAP_MANY) | tf.equal(tf.bitwise.bitwise_and(info, _KIND_MASK),
                                                                    _KIND_DELIM)
        row_changed = linear_ragged.row_any(changed, chars.row_splits)
        row = linear_ragged.row_ids(ids.row_splits)  # each piece's word
        lengths = tf.gather(self._piece_chars, ids.flat_values)
        ends_chars = linear_ragged.row_cumsum(lengths, ids.row_splits, row)
        has_unk = linear_ragged.row_any(tf.equal(ids.flat_values, self.unk_id), ids.row_splits)
        exact = ~row_changed & ~has_unk & tf.equal(linear_ragged.row_sums(lengths, ids.row_splits),
                                                   chars.row_lengths())
        byte_length = tf.cast(tf.strings.length(words), tf.int64)
        # Byte offset of every character, and of the word's end.
        char_bytes = tf.concat([char_bytes, byte_length[:, tf.newaxis]], axis=1)
        base = tf.gather(char_bytes.row_starts(), row)
        piece_exact = tf.gather(exact, row)
        end_char = tf.where(piece_exact, ends_chars, 0)
        start_char = tf.where(piece_exact, end_char - lengths, 0)
        starts = tf.where(piece_exact, tf.gather(char_bytes.flat_values, base + start_char), 0)
        ends = tf.where(piece_exact, tf.gather(char_bytes.flat_values, base + end_char), tf.gather(byte_length, row))
        return ids, ids.with_flat_values(starts), ids.with_flat_values(ends)

    def tokenize_words(self, strings):
        """1-D string tensor -> tf.RaggedTensor int64 of ids [batch, (words), (pieces)].

        A word of the original (after BasicTokenizer) starts at every piece that is not a ##-suffix.
        """
        ids = self.tokenize(strings)
        starts = tf.where(~tf.gather(self._is_suffix_id, ids.flat_values))[:, 0]
        words = tf.RaggedTensor.from_row_splits(
            ids.flat_values, tf.concat([starts, tf.size(ids.flat_values, out_type=tf.int64)[None]], 0),
            validate=False)
        word_splits = tf.searchsorted(starts, ids.row_splits, side="left", out_type=tf.int64)
        return tf.RaggedTensor.from_row_splits(words, word_splits, validate=False)

