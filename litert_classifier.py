"""LiteRT (TFLite) model of an exported sentence classifier: raw strings in, labels and probabilities out.

For phones, browsers and servers without TensorFlow: the .tflite holds TFLite builtins and four
tensorflow-text kernels (FastBertNormalize, FastWordpieceTokenizeWithOffsets, and Utf8Binarize and
ByteSplitByOffsets, which cut long texts), so the `ai-edge-litert` interpreter runs it with tensorflow-text's
registrar:

    import numpy as np, tensorflow_text
    from ai_edge_litert.interpreter import InterpreterWithCustomOps
    interpreter = InterpreterWithCustomOps(
        custom_op_registerers=tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS, model_path="classifier.tflite")
    run = interpreter.get_signature_runner()      # text_a[, text_b]: string [batch] -> label, probabilities
    run(text_a=np.array(["He said hi."]), text_b=np.array(["Hi, he said."]))

Tokenizer: tensorflow-text's FastBertTokenizer with a normalizer model built here that maps every code point as
the original BasicTokenizer does (cleaning, whitespace, lower casing + NFD + accents removed, punctuation and CJK
as words of their own), so its ids are the original FullTokenizer's on every line of the reference files.
Known differences, beyond fast_tokenization.FastBertTokenizer's: a capital sigma ending a word lower-cases to
σ (the original: ς); a word of more than 200 bytes (the original: characters) becomes [UNK], so non-ASCII words
of 101 to 200 characters differ; invalid UTF-8 is kept (its word becomes [UNK]) instead of dropped.
Packing: packing.pack_pair_flat, the packer of the records and of the SavedModel. Weights: those of the
SavedModel's serving_default (its restored variables freeze into the model).
Long texts: each text is cut as the SavedModel's serving_text cuts it (serving.bounded_text: after at most
serving.text_cut_chars(max_seq_length) characters, at the last point where a cut cannot change the tokens before
it), so a request of any length costs at most that much tokenizing. A LiteRT model cannot refuse a request, so
the cut is not checked: a text whose first max_seq_length tokens do not lie within the limit (runs of whitespace,
control characters or accents, or words of over 200 characters fill it; the SavedModel refuses it) is answered
from what lies there, and a NUL character at the limit hides that the text goes on (NULs are dropped anyway).
"""
import unicodedata

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

import cli
import fast_tokenization
import filesystem
import litert_export
import packing
import serving
import tokenization

CUSTOM_OPS = ("FastBertNormalize", "FastWordpieceTokenizeWithOffsets", "TFText>Utf8Binarize",
              "TFText>ByteSplitByOffsets")

# The FastBertNormalizer model: a darts-clone trie from a code point's UTF-8 to a value; a value marks that
# the code point changes (_CHANGED) and holds its replacement's byte length and offset in a string pool.
_CHANGED = 0x40000000
_LENGTH_BITS = 6
_MAX_LENGTH = (1 << _LENGTH_BITS) - 1
_MAX_OFFSET = (1 << (32 - 2 - _LENGTH_BITS)) - 1
_WORD, _SPACE, _ALONE = 0, 1, 2


def _kind(char):
    """Word character, space or a word of its own (punctuation), as BasicTokenizer sees a character."""
    if char.isspace() or tokenization._is_whitespace(char):
        return _SPACE
    return _ALONE if tokenization._is_punctuation(char) else _WORD


def code_point_map(do_lower_case):
    """{code point: replacement} for every code point the original tokenizer changes, or that FastWordpiece's
    own splitting would keep in a word the original splits off (it gets spaces around it)."""
    end_to_end = fast_tokenization.end_to_end_kinds()
    mapping = {}
    for cp in range(1, 0x110000):
        if 0xD800 <= cp < 0xE000:
            continue  # no surrogate in UTF-8
        char = chr(cp)
        if unicodedata.category(char) in ("Cn", "Co"):
            continue
        if cp == 0xFFFD or tokenization._is_control(char):
            mapping[cp] = ""
            continue
        if _kind(char) == _SPACE:
            mapping[cp] = " "
            continue
        out = fast_tokenization.lower_and_strip(char) if do_lower_case else char
        cjk = tokenization._is_chinese_codepoint(cp)
        pieces = []
        for c in out:
            kind = _ALONE if cjk else _kind(c)
            if kind == _SPACE:
                pieces.append(" ")
            elif kind == _ALONE and end_to_end[ord(c)] != _ALONE:
                pieces.append(" %s " % c)
            else:
                pieces.append(c)
        text = "".join(pieces)
        if text != char:
            mapping[cp] = text
    return mapping


def _darts_trie(keys, values):
    """A darts-clone double array for byte-string keys -> 31-bit values, as tensorflow-text reads it.

    A node's children sit at base ^ label and its value unit at base (label 0); every base is unique, so a label
    match proves the parent; offsets (node ^ base) stay below 2**21; the array is whole blocks of 256 units.
    A node unit is offset << 10 | has_value << 8 | label, a value unit is value | 1 << 31.
    """
    root = {}
    for key, value in zip(keys, values):
        node = root
        for byte in key:
            node = node.setdefault(byte, {})
        node[None] = value
    units = [0] * 256
    used = bytearray(256)
    used[0] = 1
    used_bases = set()
    free_from = 1
    queue = [(root, 0, 0)]
    for node, position, label in queue:  # breadth first: the queue grows while it is walked
        labels = sorted(0 if k is None else k for k in node)
        q = free_from
        while True:
            q = used.find(0, q)
            if q < 0:
                q = len(used)
                used.extend(bytes(256))
                units.extend([0] * 256)
            base = q ^ labels[0]
            if (base not in used_bases and (position ^ base) < (1 << 21)
                    and all(base ^ l and (base ^ l >= len(used) or not used[base ^ l]) for l in labels)):
                break
            q += 1
        while (base | 0xFF) >= len(used):
            used.extend(bytes(256))
            units.extend([0] * 256)
        used_bases.add(base)
        units[position] = ((position ^ base) << 10) | (0x100 if None in node else 0) | label
        for l in labels:
            used[base ^ l] = 1
        if None in node:
            units[base] = node[None] | 0x80000000
        queue.extend((node[l], base ^ l, l) for l in labels if l)
        found = used.find(0, free_from)
        free_from = found if found >= 0 else len(used)
    return np.asarray(units, np.uint32)


def _trie_lookup(units, key):
    """The value of `key` in a darts-clone array (0 when absent), as tensorflow-text looks it up."""
    def offset(unit):
        return (unit >> 10) << ((unit & 0x200) >> 6)

    node, unit = 0, int(units[0])
    for byte in key:
        node ^= offset(unit) ^ byte
        unit = int(units[node])
        if unit & 0x800000FF != byte:
            return 0
    return int(units[node ^ offset(unit)]) & 0x7FFFFFFF if unit & 0x100 else 0


def normalizer_model(do_lower_case):
    """The FastBertNormalizer model buffer (flatbuffer) of code_point_map."""
    import flatbuffers
    mapping = code_point_map(do_lower_case)
    pool, pool_at, keys, values = bytearray(), {}, [], []
    for cp in sorted(mapping):
        text = mapping[cp].encode("utf-8")
        if len(text) > _MAX_LENGTH:
            raise ValueError("the replacement of U+%04X has %d bytes" % (cp, len(text)))
        value = _CHANGED | len(text)
        if text:
            if text not in pool_at:
                pool_at[text] = len(pool)
                pool += text
            value |= pool_at[text] << _LENGTH_BITS
        keys.append(chr(cp).encode("utf-8"))
        values.append(value)
    if len(pool) > _MAX_OFFSET:
        raise ValueError("the replacement pool does not fit the normalizer model")
    trie = _darts_trie(keys, values)
    for key, value in zip(keys, values):
        if _trie_lookup(trie, key) != value:
            raise AssertionError("the normalizer trie misplaces %r" % key)
    builder = flatbuffers.Builder(len(pool) + 4 * len(trie) + 1024)
    pool_offset = builder.CreateByteVector(bytes(pool))
    builder.StartVector(4, len(trie), 4)
    for unit in trie[::-1]:
        builder.PrependUint32(int(unit))
    trie_offset = builder.EndVector()
    builder.StartObject(4)
    builder.PrependBoolSlot(0, bool(do_lower_case), False)
    builder.PrependUOffsetTRelativeSlot(1, trie_offset, 0)
    builder.PrependInt32Slot(2, _CHANGED, 0)  # NUL is dropped
    builder.PrependUOffsetTRelativeSlot(3, pool_offset, 0)
    builder.Finish(builder.EndObject())
    return bytes(builder.Output())


class LiteTokenizer(tf.Module):
    """The original's ids from TFLite-supported tensorflow-text ops: tokenize(strings [batch]) ->
    (ids int32 [pieces], row_splits int32 [batch + 1])."""

    def __init__(self, vocab_file, do_lower_case=True, name=None):
        super().__init__(name=name)
        self.vocab = tokenization.load_vocab(vocab_file)
        tokenization.check_special_tokens(self.vocab, vocab_file, ("[CLS]", "[SEP]", tokenization.UNK_TOKEN))
        tokens = fast_tokenization.wordpiece_tokens(self.vocab)
        self._tokenizer = tf_text.FastBertTokenizer(
            vocab=tokens, suffix_indicator="##", max_bytes_per_word=tokenization.MAX_INPUT_CHARS_PER_WORD,
            token_out_type=tf.int32, unknown_token=tokenization.UNK_TOKEN, no_pretokenization=False,
            support_detokenization=False, fast_bert_normalizer_model_buffer=normalizer_model(do_lower_case))

    def tokenize(self, strings):
        ids = self._tokenizer.tokenize(strings)
        return ids.flat_values, tf.cast(ids.row_splits, tf.int32)


class LiteClassifier(tf.Module):
    """serve_text(text_a[, text_b]: string [batch]) -> {"label", "probabilities"} ({"score"} for regression) of
    an exported classifier's serving_default, with the text packed as the SavedModel's serving_text packs it."""

    def __init__(self, export_dir, model_options, is_pair):
        super().__init__(name="litert_classifier")
        self._loaded = tf.saved_model.load(export_dir)
        if hasattr(self._loaded, "rows_per_step"):
            raise cli.UserError(f"{export_dir} runs its model in steps of {int(self._loaded.rows_per_step.numpy())} "
                                "rows (--export_rows_per_step), which LiteRT cannot convert: convert an export made "
                                "with --export_rows_per_step=0")
        self._serve_ids = self._loaded.signatures["serving_default"]
        self.tokenizer = LiteTokenizer(model_options.vocab_file, model_options.do_lower_case)
        self.special_ids = packing.SpecialIds.of(self.tokenizer.vocab)
        self.max_seq_length = int(model_options.max_seq_length)
        spec_a = tf.TensorSpec([None], tf.string, name="text_a")
        if is_pair:
            self.serve_text = tf.function(self._pair, input_signature=[spec_a, tf.TensorSpec([None], tf.string,
                                                                                              name="text_b")])
        else:
            self.serve_text = tf.function(self._single, input_signature=[spec_a])

    def _outputs(self, text_a, text_b):
        a = self.tokenizer.tokenize(bounded_text(text_a, self.max_seq_length))
        b = self.tokenizer.tokenize(bounded_text(text_b, self.max_seq_length)) if text_b is not None else None
        input_ids, input_mask, segment_ids = packing.pack_pair_flat(a, b, self.max_seq_length, self.special_ids)
        return self._serve_ids(input_ids=input_ids, input_mask=input_mask, segment_ids=segment_ids)

    def _pair(self, text_a, text_b):
        # Each text_b goes with the text_a of its row (never broadcast): the interpreter refuses other requests.
        refused = serving.refuse_unless(tf.equal(tf.shape(text_a)[0], tf.shape(text_b)[0]),
                                        "text_b_must_have_as_many_rows_as_text_a")
        return self._outputs(text_a, text_b[refused:])

    def _single(self, text_a):
        return self._outputs(text_a, None)


def bounded_text(strings, max_tokens):
    """serving.bounded_text's cut (unchecked: see the module docstring) with ops a LiteRT model has: the first
    limit + 1 characters' code points from tensorflow-text's Utf8Binarize, the text up to the cut from its
    ByteSplitByOffsets. Costs about 84 bytes per character of the limit and text, however short the text."""
    limit = serving.text_cut_chars(max_tokens)
    bits = tf_text.utf8_binarize(strings, word_length=limit + 1, bits_per_char=21, replacement_char=0x1A)
    rows = tf.shape(strings)[0]
    code_points = tf.cast(tf.reduce_sum(tf.reshape(bits, [rows, limit + 1, 21]) * 2.0 ** tf.range(21.0), axis=-1),
                          tf.int32)  # [rows, limit + 1], 0 past a text's end; 0x1A (one byte) for invalid UTF-8
    utf8_bytes = 1 + sum(tf.cast(code_points >= start, tf.int32) for start in (0x80, 0x800, 0x10000))
    begin = tf.cumsum(utf8_bytes, axis=1, exclusive=True)  # the byte offset of each character
    table = tf.constant(serving.safe_cut_table())
    safe = tf.gather(table, tf.minimum(code_points, 0xFFFF)) & (code_points <= 0xFFFF)
    cut_points = tf.where(safe & (tf.range(limit + 1) > 0)[tf.newaxis, :], begin, 0)
    ends = tf.where(code_points[:, limit] > 0, tf.reduce_max(cut_points, axis=1),
                    tf.reduce_max(tf.where(code_points > 0, begin + utf8_bytes, 0), axis=1))
    splits = tf.range(tf.cast(rows, tf.int64) + 1)
    cut = tf_text.ByteSplitter().split_by_offsets(
        strings, tf.RaggedTensor.from_row_splits(tf.zeros([rows], tf.int32), splits, validate=False),
        tf.RaggedTensor.from_row_splits(ends, splits, validate=False))
    return cut.flat_values


def convert(export_dir, model_options, is_pair, quantize=False):
    """The .tflite bytes of LiteClassifier (model_options: the classifier's vocab, casing and sequence length);
    quantize: dynamic-range int8 weights."""
    module = LiteClassifier(export_dir, model_options, is_pair)
    # custom ops: the tensorflow-text kernels, checked below
    model = litert_export.converter(module.serve_text.get_concrete_function(), module, quantize,
                                    custom_ops=True).convert()
    extra = sorted(set(custom_ops(model)) - set(CUSTOM_OPS))
    if extra:
        raise AssertionError("the LiteRT model needs ops its interpreter does not have: %s" % extra)
    return model


def custom_ops(model):
    """Names of the custom ops a .tflite model uses."""
    from tensorflow.lite.python import schema_py_generated as schema
    parsed = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(model, 0))
    return [code.customCode.decode() for code in parsed.operatorCodes if code.customCode]


def export(path, export_dir, model_options, is_pair, quantize=False):
    """Writes the LiteRT model of the SavedModel in export_dir to `path` (convert); returns path."""
    return filesystem.write_file_whole(path, convert(export_dir, model_options, is_pair, quantize), "--export_tflite")


def interpreter(model_path, num_threads=None):
    """An ai-edge-litert interpreter of a model written here, tensorflow-text's kernels registered."""
    return litert_export.interpreter(model_path, num_threads, tf_text.tflite_registrar.SELECT_TFTEXT_OPS)
