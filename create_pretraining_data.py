"""Creates masked-LM / next-sentence TFRecords for BERT pre-training, with the original's algorithm.

Input: UTF-8 text, one sentence per line, blank lines between documents. Output: tf.train.Example records
with the original's features: input_ids, input_mask, segment_ids, masked_lm_positions, masked_lm_ids
(int64, zero padded), masked_lm_weights (float) and next_sentence_labels (int64).

Exact mode (default, --num_workers=0) is the original create_pretraining_data.py call for call: it draws from
`random.Random(--random_seed)` in the same order, so the same flags give the same instances in the same
order. Like the original it holds the corpus and all instances in memory (as token ids and spans).

Fast mode (--num_workers=N >= 1) runs the same algorithm on big corpora in N processes:
  * the input files (their concatenation) are cut into N byte ranges, each snapped to a document boundary;
    worker w streams its range and writes its own output shard(s). A document belongs to the worker whose
    range it begins in. In fast mode the end of a file always ends a document (exact mode, like the original,
    runs a document on into the next file when a file does not end with a blank line).
  * A worker fills a window with about --window_tokens tokens of consecutive documents of its range (the last
    window may hold up to 1.5x that), then makes instances from the window the way the original makes them
    from the whole corpus: documents shuffled, --dupe_factor passes, random next sentences drawn from any
    document of the window, and all instances of the window shuffled before they are written.
  * Masking is vectorized with numpy (same rules: masked_lm_prob, 80/10/10, whole-word groups) and records
    are serialized and framed (TFRecord, CRC32C) with numpy, without TensorFlow.
  * Memory per worker is bounded by its window: about 4 bytes per token, 40 per sentence and 40 per instance
    of the window (~100 MB at the default window and dupe_factor 10), plus ~50 MB of batch buffers and a
    word cache of at most --tokenizer_cache_size words (~40 MB). It does not grow with corpus size.
  * The output depends only on the flags, --random_seed and --num_workers x --num_tasks; it is not equal to
    exact mode's output (different random streams), only distributed the same way.

Output files in fast mode: with one --output_file PATH and more than one worker in all, worker g of G writes
PATH-0000g-of-0000G; otherwise the number of --output_file paths must be a multiple of --num_workers and
worker w writes its consecutive share of them (instances round-robin over its files, as in the original).

Sharding a corpus across K machines: give every machine the same --input_file list and flags, with
--num_tasks=K and its own --task_index=k (0..K-1). Machine k runs workers k*N .. k*N+N-1 of the K*N byte
ranges, so the K machines together write exactly the shards that one machine with --num_workers=K*N would.
Use one --output_file PATH on every machine (shard names carry the global worker number), or per-machine paths.

Bad input: invalid UTF-8 is an error naming the file, line and byte (the original fails on it too); input without
any document is an error (no output file is left); lines that give no tokens are skipped and counted in the
log, as the original skips them; a corpus (or fast-mode window) of one document draws its random next
sentences from that document, with a warning, as the original does.

Tokenization uses the exact `tokenization` BasicTokenizer and WordpieceTokenizer behind a per-word cache
(a line is tokenized as the concatenation of its space-separated words, which the original's rules
guarantee), in both modes.

The original's Python API runs exact mode's algorithm (one implementation): TrainingInstance, MaskedLmInstance,
create_training_instances, create_instances_from_document, create_masked_lm_predictions, truncate_seq_pair,
write_instance_to_example_files, create_int_feature, create_float_feature, with the original's parameters; for
the same random.Random seed they give exact mode's instances and records. They read FLAGS.do_whole_word_mask as
the original does (create_pretraining_data.FLAGS: set it there, or define and parse an absl flag of that name).
"""

import array
import collections
import dataclasses
import itertools
import multiprocessing
import os
import random
import re
import resource
import time

import numpy as np
from absl import logging

import cli
import filesystem
import records
import tokenization


NUM_EXAMPLES_TO_LOG = 20
PROGRESS_SECONDS = 10.0
BATCH_SIZE = 4096
PRETRAINING_FORMAT = records.pretraining(None, None)
FEATURE_NAMES = records.names(PRETRAINING_FORMAT)


@dataclasses.dataclass
class Settings:
    """The generation parameters (the original's flags of that name), validated."""
    do_whole_word_mask: bool = cli.option(False, "Whether to use whole word masking rather than per-WordPiece "
                                          "masking.")
    max_seq_length: int = cli.option(128, "Maximum sequence length.")
    max_predictions_per_seq: int = cli.option(20, "Maximum number of masked LM predictions per sequence.")
    random_seed: int = cli.option(12345, "Random seed for data generation.")
    dupe_factor: int = cli.option(10, "Number of times to duplicate the input data (with different masks).")
    masked_lm_prob: float = cli.option(0.15, "Masked LM probability.")
    short_seq_prob: float = cli.option(0.1, "Probability of creating sequences which are shorter than the maximum "
                                       "length.")

    def __post_init__(self):
        if self.max_seq_length < 5:
            raise cli.UserError("--max_seq_length=%d is too small: it must be at least 5 ([CLS], [SEP], [SEP] and "
                                "one token of each segment)" % self.max_seq_length)
        if self.max_predictions_per_seq < 1:
            raise cli.UserError("--max_predictions_per_seq=%d: expected at least 1" % self.max_predictions_per_seq)
        if self.dupe_factor < 1:
            raise cli.UserError("--dupe_factor=%d: expected at least 1" % self.dupe_factor)
        if not 0.0 <= self.masked_lm_prob <= 1.0:
            raise cli.UserError("--masked_lm_prob=%r: expected a probability in [0, 1]" % self.masked_lm_prob)
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise cli.UserError("--short_seq_prob=%r: expected a probability in [0, 1]" % self.short_seq_prob)
        self.max_seq_length = int(self.max_seq_length)
        self.max_predictions_per_seq = int(self.max_predictions_per_seq)
        self.random_seed = int(self.random_seed)
        self.dupe_factor = int(self.dupe_factor)
        self.masked_lm_prob = float(self.masked_lm_prob)
        self.short_seq_prob = float(self.short_seq_prob)
        self.do_whole_word_mask = bool(self.do_whole_word_mask)


@dataclasses.dataclass
class CreatePretrainingDataOptions:
    """create_pretraining_data.py's flags: the original's (the generation Settings among them) and fast mode's."""
    input_file: str = cli.option(None, "Input raw text file (or comma-separated list of files or globs).",
                                 required=True)
    output_file: str = cli.option(None, "Output TF example file (or comma-separated list of files).",
                                  required=True)
    vocab_file: str = cli.option(None, "The vocabulary file that the BERT model was trained on.", required=True)
    do_lower_case: bool = cli.option(True, "Whether to lower case the input text. Should be True for uncased "
                                     "models and False for cased models.")
    settings: Settings = cli.nested(Settings)
    num_workers: int = cli.option(0, "0: exact mode (the original's output, single process, in memory). N >= 1: "
                                  "fast streaming mode with N worker processes, each writing its own output "
                                  "shard(s).")
    window_tokens: int = cli.option(10_000_000, "Fast mode: tokens of consecutive documents a worker holds at "
                                    "once; random next sentences and the instance shuffle span one window.")
    num_tasks: int = cli.option(1, "Fast mode: number of machines sharing the corpus (see module doc).")
    task_index: int = cli.option(0, "Fast mode: this machine's index in 0..num_tasks-1.")
    tokenizer_cache_size: int = cli.option(200_000, "Words whose token ids are cached (the cache is cleared when "
                                           "it is full).")


# ----------------------------------------------------------------------------------------------------------
# Vocabulary and tokenizer.

def _load_vocab(vocab_file):
    """The original's vocab: token -> line index, in file order."""
    if not vocab_file:
        raise cli.UserError("--vocab_file is required: the vocab.txt the BERT model was trained with")
    if not filesystem.exists(vocab_file) or filesystem.isdir(vocab_file):
        raise cli.UserError("--vocab_file %s does not exist: expected a vocab.txt file, one token per line"
                         % vocab_file)
    return tokenization.load_vocab(vocab_file)


class Vocab:
    """What generation needs from the vocabulary: special ids, random words, '##' pieces, id -> token."""

    def __init__(self, vocab):
        for token in ("[CLS]", "[SEP]", "[MASK]", tokenization.UNK_TOKEN):
            if token not in vocab:
                raise cli.UserError("the vocabulary has no %s token: expected it on a line of its own" % token)
        self.vocab = vocab
        self.cls_id = vocab["[CLS]"]
        self.sep_id = vocab["[SEP]"]
        self.mask_id = vocab["[MASK]"]
        self.size = max(vocab.values()) + 1
        # The original draws random words from list(vocab.keys()) and maps them back through the vocab.
        self.random_word_ids = [vocab[token] for token in vocab]
        self.random_word_ids_np = np.array(self.random_word_ids, np.int64)
        self.is_subword = [False] * self.size
        self.inv_vocab = {}
        for token, index in vocab.items():
            self.is_subword[index] = token.startswith("##")
            self.inv_vocab[index] = token
        self.is_subword_np = np.array(self.is_subword, bool)

    def tokens(self, ids):
        return [self.inv_vocab.get(int(i), "[?%d]" % int(i)) for i in ids]


_ASCII_PIECES = re.compile(r"[0-9A-Za-z]+|[^0-9A-Za-z]")


class CachedTokenizer:
    """The original FullTokenizer (BasicTokenizer + WordpieceTokenizer) to ids, cached per space-separated word.

    tokenize(a + " " + b) == tokenize(a) + tokenize(b) holds for the original's rules (cleaning and CJK
    spacing are per character, everything after the whitespace split is per word), so caching per word is exact.
    A printable-ASCII word skips BasicTokenizer: for it the original's rules reduce to lower casing (when
    do_lower_case) and splitting off every non-alphanumeric character (all are punctuation to the original).
    """

    def __init__(self, vocab, do_lower_case, cache_size=200_000):
        self.vocab = vocab
        self.do_lower_case = bool(do_lower_case)
        self.basic_tokenizer = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
        self.wordpiece_tokenizer = tokenization.WordpieceTokenizer(vocab=vocab)
        self.cache_size = max(1, int(cache_size))
        self._cache = {}

    def basic_tokens(self, word):
        if word.isascii() and word.isprintable():
            return _ASCII_PIECES.findall(word.lower() if self.do_lower_case else word)
        return self.basic_tokenizer.tokenize(word)

    def tokenize_word(self, word):
        ids = []
        vocab = self.vocab
        for token in self.basic_tokens(word):
            for piece in self.wordpiece_tokenizer.tokenize(token):
                ids.append(vocab[piece])
        return tuple(ids)

    def ids(self, line):
        """Token ids of one line."""
        words = line.split(" ")
        cached = list(map(self._cache.get, words))
        if None in cached:
            cache = self._cache
            for k, ids in enumerate(cached):
                if ids is None:
                    word = words[k]
                    ids = self.tokenize_word(word) if word else ()
                    if len(cache) >= self.cache_size:
                        cache.clear()
                    cache[word] = cached[k] = ids
        return list(itertools.chain.from_iterable(cached))


# ----------------------------------------------------------------------------------------------------------
# Files.

def _text(raw, path, offset):
    """A corpus line as text; invalid UTF-8 is an error naming the file, line and byte (the line's number is
    counted only then: a fast-mode worker starts in the middle of a file)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise cli.UserError(f"{path} line {filesystem.line_number(path, offset)}: not valid UTF-8 ({err.reason} at "
                            f"byte {offset + err.start}); input files must be UTF-8 text") from None


class Corpus:
    """Documents as flat token ids: sentence s is tokens[starts[s]:starts[s + 1]], document d is
    sentences docs[d][0] .. docs[d][0] + docs[d][1] - 1."""

    def __init__(self):
        self.tokens = array.array("i")
        self.starts = [0]
        self.docs = []
        self._doc_first = 0

    def add_sentence(self, ids):
        self.tokens.extend(ids)
        self.starts.append(len(self.tokens))

    def end_document(self):
        """Closes the current document (nothing happens when it has no sentence)."""
        num = len(self.starts) - 1 - self._doc_first
        if num > 0:
            self.docs.append((self._doc_first, num))
        self._doc_first = len(self.starts) - 1

    @property
    def num_tokens(self):
        return len(self.tokens)


class ReadStats:
    def __init__(self):
        self.lines = 0
        self.bytes = 0
        self.tokenless_lines = 0


def _log_tokenless(stats, source):
    if stats.tokenless_lines:
        logging.info("%s: %d non-blank lines gave no tokens and were skipped, as in the original",
                     source, stats.tokenless_lines)


_BLANK = None  # what _sentences yields for a blank line: the end of a document


def _sentences(path, tokenizer, stats, start=0, end=None):
    """The corpus reader of both modes: yields the token ids of each line of `path` that gives some (the others
    are counted in stats) and _BLANK for each blank line. With a byte range (fast mode) it begins after the first
    blank line at or after `start` (start > 0) and ends after the first blank line at or after `end`."""
    lines = filesystem.read_lines(path, start)
    if start > 0:
        for pos, raw in lines:
            stats.bytes += len(raw)
            if not raw.decode("utf-8", "replace").strip():
                if pos >= end:
                    return
                break
        else:
            return
    for pos, raw in lines:
        stats.lines += 1
        stats.bytes += len(raw)
        line = _text(raw, path, pos).strip()
        if not line:
            yield _BLANK
            if end is not None and pos >= end:
                return
            continue
        ids = tokenizer.ids(line)
        if ids:
            yield ids
        else:
            stats.tokenless_lines += 1


def read_corpus_exact(input_files, tokenizer, progress=None):
    """Reads all files like the original: blank lines end documents, documents run on across files."""
    corpus = Corpus()
    stats = ReadStats()
    for path in input_files:
        for ids in _sentences(path, tokenizer, stats):
            if ids is _BLANK:
                corpus.end_document()
                continue
            corpus.add_sentence(ids)
            if progress is not None:
                progress(stats, corpus)
    corpus.end_document()
    _log_tokenless(stats, "input")
    return corpus, stats


def read_documents_in_range(path, start, end, tokenizer, stats):
    """Yields the documents (lists of id lists) of `path` that begin in byte range [start, end).

    A document begins at the file start or after a blank line; a worker whose range starts inside the file
    skips to just after the first blank line at or after `start`, and stops at the first blank line at or after
    `end` (where the next worker begins), so every document is read by exactly one worker.
    """
    document = []
    for ids in _sentences(path, tokenizer, stats, start, end):
        if ids is not _BLANK:
            document.append(ids)
        elif document:
            yield document
            document = []
    if document:
        yield document


# ----------------------------------------------------------------------------------------------------------
# The original's algorithm.

def document_instance_spans(starts, docs, document_index, settings, rng, emit):
    """The original create_instances_from_document, on token spans: same decisions, same rng calls.

    `starts` are sentence start offsets into the flat tokens, `docs` (first sentence, sentence count) in the
    shuffled document order; settings gives max_seq_length and short_seq_prob. For every instance, calls
    emit(a_lo, a_hi, b_lo, b_hi, is_random_next), where tokens_a = tokens[a_lo:a_hi] and tokens_b =
    tokens[b_lo:b_hi] after truncation; the caller masks it right away, as the original does, before the next
    instance draws from `rng`.
    """
    first, count = docs[document_index]
    num_docs = len(docs)
    max_num_tokens = settings.max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < settings.short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
    chunk_first = first
    chunk_size = 0
    current_length = 0
    i = 0
    while i < count:
        sentence = first + i
        if chunk_size == 0:
            chunk_first = sentence
        chunk_size += 1
        current_length += starts[sentence + 1] - starts[sentence]
        if i == count - 1 or current_length >= target_seq_length:
            a_end = 1
            if chunk_size >= 2:
                a_end = rng.randint(1, chunk_size - 1)
            span_a = [starts[chunk_first], starts[chunk_first + a_end]]
            if chunk_size == 1 or rng.random() < 0.5:
                is_random_next = True
                target_b_length = target_seq_length - (span_a[1] - span_a[0])
                for _ in range(10):
                    random_document_index = rng.randint(0, num_docs - 1)
                    if random_document_index != document_index:
                        break
                random_first, random_count = docs[random_document_index]
                random_start = rng.randint(0, random_count - 1)
                span_b = [starts[random_first + random_start]] * 2
                for j in range(random_first + random_start, random_first + random_count):
                    span_b[1] = starts[j + 1]
                    if span_b[1] - span_b[0] >= target_b_length:
                        break
                # The unused sentences of the chunk go back, as in the original.
                i -= chunk_size - a_end
            else:
                is_random_next = False
                span_b = [span_a[1], starts[chunk_first + chunk_size]]
            trim_spans(span_a, span_b, max_num_tokens, rng)
            emit(span_a[0], span_a[1], span_b[0], span_b[1], is_random_next)
            chunk_size = 0
            current_length = 0
        i += 1


def trim_spans(span_a, span_b, max_num_tokens, rng):
    """The original truncate_seq_pair on spans [lo, hi] (changed in place): the longer side (B on ties) loses a
    token at a random end until the pair fits max_num_tokens."""
    len_a = span_a[1] - span_a[0]
    len_b = span_b[1] - span_b[0]
    while len_a + len_b > max_num_tokens:
        if len_a > len_b:
            span, len_a = span_a, len_a - 1
        else:
            span, len_b = span_b, len_b - 1
        if rng.random() < 0.5:
            span[0] += 1
        else:
            span[1] -= 1


def _shuffle_by_getrandbits(items, rng):
    """random.Random.shuffle's Fisher-Yates with its _randbelow (rejection sampling on getrandbits), inlined."""
    getrandbits = rng.getrandbits
    for i in range(len(items) - 1, 0, -1):
        n = i + 1
        k = n.bit_length()
        r = getrandbits(k)
        while r >= n:
            r = getrandbits(k)
        items[i], items[r] = items[r], items[i]


def _pick_shuffle():
    """The inlined shuffle (twice as fast) where it provably draws like this Python's random.shuffle."""
    for seed in range(20):
        ours, theirs = random.Random(seed), random.Random(seed)
        for size in (0, 1, 2, 3, 5, 64, 127, 128, 129, 300):
            mine, want = list(range(size)), list(range(size))
            _shuffle_by_getrandbits(mine, ours)
            theirs.shuffle(want)
            if mine != want or ours.random() != theirs.random():
                return lambda items, rng: rng.shuffle(items)
    return _shuffle_by_getrandbits


shuffle = _pick_shuffle()


def masked_lm_predictions(tokens, settings, vocab, rng):
    """The original create_masked_lm_predictions: returns (positions, replacements), by position.

    Candidates are all tokens but vocab.cls_id and vocab.sep_id (grouped into whole words when
    settings.do_whole_word_mask: a piece that vocab.is_subword joins the previous candidate's group, even across the
    middle [SEP]). Tokens are ids (Vocab) or the original's token strings (WordList).
    """
    cls_id, sep_id = vocab.cls_id, vocab.sep_id
    candidates = [i for i, token in enumerate(tokens) if token != cls_id and token != sep_id]
    num_to_predict = min(settings.max_predictions_per_seq,
                         max(1, int(round(len(tokens) * settings.masked_lm_prob))))
    random_ = rng.random
    randint = rng.randint
    mask_id = vocab.mask_id
    random_words = vocab.random_word_ids
    last_word = len(random_words) - 1
    chosen = []
    replacements = []
    if settings.do_whole_word_mask:
        is_subword = vocab.is_subword
        groups = []
        for index in candidates:
            if groups and is_subword[tokens[index]]:
                groups[-1].append(index)
            else:
                groups.append([index])
        shuffle(groups, rng)
        selected = []
        for group in groups:
            if len(selected) >= num_to_predict:
                break
            if len(selected) + len(group) > num_to_predict:
                continue
            selected.extend(group)
    else:
        shuffle(candidates, rng)
        selected = candidates[:num_to_predict]
    for index in selected:
        if random_() < 0.8:
            token = mask_id
        elif random_() < 0.5:
            token = tokens[index]
        else:
            token = random_words[randint(0, last_word)]
        chosen.append(index)
        replacements.append(token)
    order = sorted(range(len(chosen)), key=chosen.__getitem__)
    return [chosen[k] for k in order], [replacements[k] for k in order]


def pair_tokens(flat, span, vocab):
    """[CLS] A [SEP] B [SEP] of a span (a_lo, a_hi, b_lo, b_hi, ...) over the flat tokens (ids of a Vocab, or
    strings of a WordList), as a list: the one instance's sequence; assemble_input_ids lays out a batch of them
    the same way in numpy."""
    a_lo, a_hi, b_lo, b_hi = span[:4]
    return [vocab.cls_id] + flat[a_lo:a_hi] + [vocab.sep_id] + flat[b_lo:b_hi] + [vocab.sep_id]


def masked_instance(flat, span, settings, vocab, rng):
    """An instance of a span (a_lo, a_hi, b_lo, b_hi, is_random_next) over the flat tokens, masked right away as
    the original masks it: the span + (positions, replacements) of its pair_tokens."""
    return tuple(span) + masked_lm_predictions(pair_tokens(flat, span, vocab), settings, vocab, rng)


def exact_instances(corpus, vocab, settings, rng, progress=None):
    """The original create_training_instances after reading: shuffle documents, dupe_factor passes, shuffle.

    Returns instances (a_lo, a_hi, b_lo, b_hi, is_random_next, positions, replacement_ids) in output order.
    """
    docs = list(corpus.docs)
    shuffle(docs, rng)
    flat = corpus.tokens.tolist()
    instances = []

    def emit(*span):
        instances.append(masked_instance(flat, span, settings, vocab, rng))

    for pass_index in range(settings.dupe_factor):
        for document_index in range(len(docs)):
            document_instance_spans(corpus.starts, docs, document_index, settings, rng, emit)
        if progress is not None:
            progress(pass_index + 1, len(instances))
    shuffle(instances, rng)
    return instances


# ----------------------------------------------------------------------------------------------------------
# Fast-mode masking (numpy, the same rules).

def _choose_whole_words(input_ids, candidate, num_to_predict, vocab, rng):
    """Whole-word selection: '##' pieces join the previous candidate's group; groups in random order are
    taken greedily, skipping a group that would exceed num_to_predict. Returns the selected [B, L] mask."""
    batch, width = input_ids.shape
    col = np.arange(width)[None, :]
    group_start = candidate & ~(vocab.is_subword_np[input_ids] & (col > 1))
    group_id = np.maximum(np.cumsum(group_start, axis=1) - 1, 0)
    num_groups = group_start.sum(axis=1)
    max_groups = max(int(num_groups.max()), 1)
    flat_group = (np.arange(batch)[:, None] * max_groups + group_id)[candidate]
    sizes = np.bincount(flat_group, minlength=batch * max_groups).reshape(batch, max_groups)
    keys = rng.random((batch, max_groups))
    keys[np.arange(max_groups)[None, :] >= num_groups[:, None]] = 2.0
    order = np.argsort(keys, axis=1)
    sorted_sizes = np.take_along_axis(sizes, order, axis=1)
    taken = np.zeros((batch, max_groups), bool)
    count = np.zeros(batch, np.int64)
    for rank in range(max_groups):
        size = sorted_sizes[:, rank]
        ok = (size > 0) & (count < num_to_predict) & (count + size <= num_to_predict)
        taken[:, rank] = ok
        count += size * ok
    chosen_group = np.zeros((batch, max_groups), bool)
    np.put_along_axis(chosen_group, order, taken, axis=1)
    return candidate & np.take_along_axis(chosen_group, group_id, axis=1)


def mask_batch(input_ids, lengths, len_a, settings, vocab, rng):
    """Masks a batch like masked_lm_predictions, with numpy randomness.

    Returns (positions, replacements, counts): [B, max_predictions_per_seq] int64 sorted by position (zero
    padded), and the number of predictions per row.
    """
    batch, width = input_ids.shape
    pred = settings.max_predictions_per_seq
    col = np.arange(width)[None, :]
    candidate = (col >= 1) & (col < lengths[:, None] - 1) & (col != len_a[:, None] + 1)
    num_to_predict = np.minimum(pred, np.maximum(1, np.rint(lengths * settings.masked_lm_prob).astype(np.int64)))
    if settings.do_whole_word_mask:
        selected = _choose_whole_words(input_ids, candidate, num_to_predict, vocab, rng)
        counts = selected.sum(axis=1)
        positions = np.sort(np.where(selected, col, width), axis=1)[:, :pred]
    else:
        # A uniformly random subset of min(num_to_predict, candidates) candidates: the smallest random keys.
        keys = rng.random((batch, width))
        keys[~candidate] = 2.0
        first = min(pred, width)
        smallest = np.argpartition(keys, first - 1, axis=1)[:, :first] if first < width else \
            np.argsort(keys, axis=1)
        counts = np.minimum(num_to_predict, lengths - 3)
        ranked = np.take_along_axis(smallest, np.argsort(np.take_along_axis(keys, smallest, axis=1), axis=1), axis=1)
        positions = np.sort(np.where(np.arange(first)[None, :] < counts[:, None], ranked, width), axis=1)
    if positions.shape[1] < pred:
        positions = np.pad(positions, ((0, 0), (0, pred - positions.shape[1])), constant_values=width)
    valid = np.arange(pred)[None, :] < counts[:, None]
    positions = np.where(valid, positions, 0)
    labels = np.take_along_axis(input_ids, positions, axis=1)
    draw_mask = rng.random((batch, pred)) < 0.8
    draw_keep = rng.random((batch, pred)) < 0.5
    random_words = vocab.random_word_ids_np[rng.integers(0, len(vocab.random_word_ids_np), (batch, pred))]
    replacements = np.where(draw_mask, vocab.mask_id, np.where(draw_keep, labels, random_words))
    replacements = np.where(valid, replacements, 0)
    return positions.astype(np.int64), replacements.astype(np.int64), counts.astype(np.int64)


# ----------------------------------------------------------------------------------------------------------
# Features of a batch of instances (records.py serializes and frames them).

def assemble_input_ids(tokens, spans, max_seq_length, vocab):
    """pair_tokens of a batch of spans [B, 4 or more] (a_lo, a_hi, b_lo, b_hi, ...) over the flat token ids,
    vectorised, + zero padding -> (ids [B, L], lengths, len_a)."""
    a_lo, a_hi, b_lo, b_hi = spans[:, 0], spans[:, 1], spans[:, 2], spans[:, 3]
    len_a = a_hi - a_lo
    len_b = b_hi - b_lo
    lengths = len_a + len_b + 3
    col = np.arange(max_seq_length)[None, :]
    in_a = (col >= 1) & (col <= len_a[:, None])
    b_first = len_a[:, None] + 2
    in_b = (col >= b_first) & (col < b_first + len_b[:, None])
    source = np.where(in_a, a_lo[:, None] + col - 1, np.where(in_b, b_lo[:, None] + col - b_first, 0))
    ids = np.where(in_a | in_b, tokens[source], 0).astype(np.int64)
    rows = np.arange(len(a_lo))
    ids[:, 0] = vocab.cls_id
    ids[rows, len_a + 1] = vocab.sep_id
    ids[rows, lengths - 1] = vocab.sep_id
    return ids, lengths, len_a


def build_features(assembled, is_random_next, masks):
    """Feature arrays of a batch, as the original's write_instance_to_example_files builds them.

    assembled: (ids, lengths, len_a) of assemble_input_ids, the unmasked input ids [B, max_seq_length] (changed
    in place: the replacements go in at the masked positions); masks: (positions, replacements, counts)
    [B, max_predictions_per_seq], [B, max_predictions_per_seq], [B].
    """
    ids, lengths, len_a = assembled
    positions, replacements, counts = masks
    col = np.arange(ids.shape[1])[None, :]
    valid = np.arange(positions.shape[1])[None, :] < counts[:, None]
    masked_lm_ids = np.where(valid, np.take_along_axis(ids, positions, axis=1), 0)
    rows = np.broadcast_to(np.arange(len(ids))[:, None], valid.shape)
    ids[rows[valid], positions[valid]] = replacements[valid]
    return {
        "input_ids": ids,
        "input_mask": (col < lengths[:, None]).astype(np.int64),
        "segment_ids": ((col >= len_a[:, None] + 2) & (col < lengths[:, None])).astype(np.int64),
        "masked_lm_positions": positions,
        "masked_lm_ids": masked_lm_ids,
        "masked_lm_weights": valid.astype(np.float32),
        "next_sentence_labels": np.asarray(is_random_next, np.int64)[:, None],
    }


# ----------------------------------------------------------------------------------------------------------
# Logging.

def log_examples(features, vocab, limit):
    """Logs the first `limit` instances of a batch readably, as the original does."""
    for row in range(min(limit, len(features["input_ids"]))):
        length = int(features["input_mask"][row].sum())
        num_masked = int(features["masked_lm_weights"][row].sum())
        logging.info("*** Example ***")
        logging.info("tokens: %s", " ".join(vocab.tokens(features["input_ids"][row, :length])))
        logging.info("masked_lm_labels: %s", " ".join(vocab.tokens(features["masked_lm_ids"][row, :num_masked])))
        for name in FEATURE_NAMES:
            logging.info("%s: %s", name, " ".join(str(x) for x in features[name][row].tolist()))


def _duration(seconds):
    seconds = int(max(seconds, 0))
    return "%d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60)


class ProgressLog:
    """Logs `done` of `total` with rate and ETA, at most every PROGRESS_SECONDS (or when forced)."""

    def __init__(self, label, unit):
        self.label = label
        self.unit = unit
        self.start = time.time()
        self._last = self.start

    def update(self, done, total=None, extra="", force=False):
        """`extra`: text, or a function making it (only called when a line is logged)."""
        now = time.time()
        if not force and now - self._last < PROGRESS_SECONDS:
            return
        self._last = now
        if callable(extra):
            extra = extra()
        elapsed = max(now - self.start, 1e-9)
        text = "%s: %s %s" % (self.label, "{:,}".format(done), self.unit)
        if total:
            text += " of %s (%.1f%%)" % ("{:,}".format(total), 100.0 * done / total)
        text += ", %.0f %s/s" % (done / elapsed, self.unit)
        if total and done:
            text += ", elapsed %s, ETA %s" % (_duration(elapsed), _duration(elapsed * (total - done) / done))
        if extra:
            text += ", " + extra
        logging.info("%s", text)


def _peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _current_rss_mb():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2.0 ** 20
    except (OSError, ValueError, IndexError):
        return _peak_rss_mb()


def _no_documents_error(input_files):
    return ValueError("no documents in --input_file (%s): expected UTF-8 text with one sentence per line and "
                      "blank lines between documents" % ", ".join(input_files))


class InstanceWriter:
    """Writes batches of feature arrays as records, round-robin over the output files (records.RecordWriters),
    logging the first log_limit instances readably (log_examples)."""

    def __init__(self, writers, vocab, log_limit=NUM_EXAMPLES_TO_LOG):
        self.writers = writers
        self.vocab = vocab
        self.log_limit = log_limit
        self.logged = 0

    def write(self, features):
        if self.logged < self.log_limit:
            log_examples(features, self.vocab, self.log_limit - self.logged)
            self.logged = min(self.log_limit, self.logged + len(features["input_ids"]))
        self.writers.write(*records.frame_records(*records.serialize(features, PRETRAINING_FORMAT)))


def _write_batches(tokens, spans, masker, out, settings, progress=None):
    """Assembles, masks and writes (out: an InstanceWriter) the instances `spans` [n, 5] in order, BATCH_SIZE at a
    time. masker(ids, lengths, len_a, first row, end row) -> (positions, replacements, counts)."""
    for start in range(0, len(spans), BATCH_SIZE):
        batch = spans[start:start + BATCH_SIZE]
        assembled = assemble_input_ids(tokens, batch, settings.max_seq_length, out.vocab)
        masks = masker(*assembled, start, start + len(batch))
        out.write(build_features(assembled, batch[:, 4], masks))
        if progress is not None:
            progress(start + len(batch))


# ----------------------------------------------------------------------------------------------------------
# The original's Python API, on the algorithm above.

# The original's flags; its functions read do_whole_word_mask (create_masked_lm_predictions). Set it here
# (create_pretraining_data.FLAGS.do_whole_word_mask = True) or define and parse an absl flag of that name; this
# script's own run passes its options explicitly.
FLAGS = cli.OriginalFlags(**{field.name: field.default for field in dataclasses.fields(Settings)},
                          input_file=None, output_file=None, vocab_file=None, do_lower_case=True)

MaskedLmInstance = collections.namedtuple("MaskedLmInstance", ["index", "label"])


class TrainingInstance:
    """A single training instance (sentence pair)."""

    def __init__(self, tokens, segment_ids, masked_lm_positions, masked_lm_labels, is_random_next):
        self.tokens = tokens
        self.segment_ids = segment_ids
        self.is_random_next = is_random_next
        self.masked_lm_positions = masked_lm_positions
        self.masked_lm_labels = masked_lm_labels

    def __str__(self):
        s = ""
        s += "tokens: %s\n" % (" ".join(tokenization.printable_text(x) for x in self.tokens))
        s += "segment_ids: %s\n" % (" ".join(str(x) for x in self.segment_ids))
        s += "is_random_next: %s\n" % self.is_random_next
        s += "masked_lm_positions: %s\n" % (" ".join(str(x) for x in self.masked_lm_positions))
        s += "masked_lm_labels: %s\n" % (" ".join(tokenization.printable_text(x) for x in self.masked_lm_labels))
        s += "\n"
        return s

    def __repr__(self):
        return self.__str__()


class WordList:
    """The original's vocab_words (a list of token strings) as masked_lm_predictions reads a vocabulary, for
    instances of token strings."""

    cls_id, sep_id, mask_id = "[CLS]", "[SEP]", "[MASK]"

    class _IsSubword:
        def __getitem__(self, token):
            return token.startswith("##")

    def __init__(self, vocab_words):
        self.random_word_ids = vocab_words
        self.is_subword = self._IsSubword()

    @staticmethod
    def tokens(items):
        return list(items)


class _PlacedDocuments:
    """all_documents (lists of sentences, each a list of tokens) as document_instance_spans reads a corpus:
    docs[d] -> (first sentence, sentence count), the sentences of document d laid into `tokens` and `starts` when
    it is first read (an instance reads its own document and the random ones it draws, not the whole corpus)."""

    def __init__(self, documents):
        self.documents = documents
        self.tokens = []
        self.starts = [0]
        self._placed = {}

    def __len__(self):
        return len(self.documents)

    def __getitem__(self, document_index):
        if document_index not in self._placed:
            first = len(self.starts) - 1
            for sentence in self.documents[document_index]:
                self.tokens.extend(sentence)
                self.starts.append(len(self.tokens))
            self._placed[document_index] = (first, len(self.documents[document_index]))
        return self._placed[document_index]


def _original_settings(max_seq_length=128, short_seq_prob=0.1, masked_lm_prob=0.15, max_predictions_per_seq=20,
                       dupe_factor=10):
    """Settings of the original's function arguments, do_whole_word_mask from FLAGS (as the original reads it)."""
    return Settings(do_whole_word_mask=FLAGS.do_whole_word_mask, max_seq_length=max_seq_length,
                    short_seq_prob=short_seq_prob, masked_lm_prob=masked_lm_prob,
                    max_predictions_per_seq=max_predictions_per_seq, dupe_factor=dupe_factor)


def _training_instance(flat, instance, vocab):
    """The TrainingInstance of an instance tuple (masked_instance) over flat tokens (ids of a Vocab, or strings of
    a WordList)."""
    a_lo, a_hi, b_lo, b_hi, is_random_next, positions, replacements = instance
    tokens = pair_tokens(flat, instance, vocab)
    labels = [tokens[p] for p in positions]
    for position, replacement in zip(positions, replacements):
        tokens[position] = replacement
    segment_ids = [0] * (a_hi - a_lo + 2) + [1] * (b_hi - b_lo + 1)
    return TrainingInstance(tokens=vocab.tokens(tokens), segment_ids=segment_ids, masked_lm_positions=list(positions),
                            masked_lm_labels=vocab.tokens(labels), is_random_next=is_random_next)


class _TokenizerIds:
    """A tokenizer's ids of a line (tokenize, then convert_tokens_to_ids), as the corpus reader asks for them."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def ids(self, line):
        return self.tokenizer.convert_tokens_to_ids(self.tokenizer.tokenize(line))


def create_training_instances(input_files, tokenizer, max_seq_length, dupe_factor, short_seq_prob, masked_lm_prob,
                              max_predictions_per_seq, rng):
    """Create `TrainingInstance`s from raw text: the instances of exact mode (this script's output for the same
    files, flags and random.Random seed), in output order. Files on any file system."""
    settings = _original_settings(max_seq_length, short_seq_prob, masked_lm_prob, max_predictions_per_seq, dupe_factor)
    vocab = Vocab(tokenizer.vocab)
    if type(tokenizer) is tokenization.FullTokenizer:  # pylint: disable=unidiomatic-typecheck
        reader = CachedTokenizer(tokenizer.vocab, tokenizer.do_lower_case)  # the same ids, cached per word
    else:
        reader = _TokenizerIds(tokenizer)
    corpus, _ = read_corpus_exact(list(input_files), reader)
    flat = corpus.tokens.tolist()
    return [_training_instance(flat, instance, vocab) for instance in exact_instances(corpus, vocab, settings, rng)]


def create_instances_from_document(all_documents, document_index, max_seq_length, short_seq_prob, masked_lm_prob,
                                   max_predictions_per_seq, vocab_words, rng):
    """Creates `TrainingInstance`s for a single document (all_documents: lists of sentences, each a list of
    tokens; vocab_words: the words a masked token may be replaced by)."""
    settings = _original_settings(max_seq_length, short_seq_prob, masked_lm_prob, max_predictions_per_seq)
    documents = _PlacedDocuments(all_documents)
    vocab = WordList(vocab_words)
    instances = []

    def emit(*span):
        instance = masked_instance(documents.tokens, span, settings, vocab, rng)
        instances.append(_training_instance(documents.tokens, instance, vocab))

    document_instance_spans(documents.starts, documents, document_index, settings, rng, emit)
    return instances


def create_masked_lm_predictions(tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng):
    """Creates the predictions for the masked LM objective: (output_tokens, masked_lm_positions, masked_lm_labels);
    whole words when FLAGS.do_whole_word_mask."""
    settings = _original_settings(masked_lm_prob=masked_lm_prob, max_predictions_per_seq=max_predictions_per_seq)
    positions, replacements = masked_lm_predictions(tokens, settings, WordList(vocab_words), rng)
    output_tokens = list(tokens)
    for position, replacement in zip(positions, replacements):
        output_tokens[position] = replacement
    return output_tokens, positions, [tokens[p] for p in positions]


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    """Truncates a pair of sequences to a maximum sequence length (in place)."""
    span_a, span_b = [0, len(tokens_a)], [0, len(tokens_b)]
    trim_spans(span_a, span_b, max_num_tokens, rng)
    for tokens, (lo, hi) in ((tokens_a, span_a), (tokens_b, span_b)):
        del tokens[hi:]
        del tokens[:lo]


def _padded(rows, width, dtype):
    """Lists of numbers -> (array [len(rows), width] of each list then zeros, the lists' lengths)."""
    lengths = np.fromiter(map(len, rows), np.int64, len(rows))
    out = np.zeros((len(rows), width), dtype)
    out[np.arange(width)[None, :] < lengths[:, None]] = np.fromiter(itertools.chain.from_iterable(rows), dtype,
                                                                     int(lengths.sum()))
    return out, lengths


def instance_features(instances, tokenizer, max_seq_length, max_predictions_per_seq):
    """Feature arrays of `TrainingInstance`s, as the original's write_instance_to_example_files builds them:
    build_features on the instances' unmasked ids (the labels put back at the masked positions), with the
    instances' own segment_ids."""
    input_ids = [tokenizer.convert_tokens_to_ids(instance.tokens) for instance in instances]
    label_ids = [tokenizer.convert_tokens_to_ids(instance.masked_lm_labels) for instance in instances]
    for row, (ids, labels) in enumerate(zip(input_ids, label_ids)):
        if len(ids) > max_seq_length or len(labels) > max_predictions_per_seq:
            raise ValueError("instance %d has %d tokens and %d masked positions: more than max_seq_length=%d or "
                             "max_predictions_per_seq=%d" % (row, len(ids), len(labels), max_seq_length,
                                                             max_predictions_per_seq))
    ids, lengths = _padded(input_ids, max_seq_length, np.int64)
    positions, counts = _padded([instance.masked_lm_positions for instance in instances], max_predictions_per_seq,
                                np.int64)
    labels, _ = _padded(label_ids, max_predictions_per_seq, np.int64)
    segment_ids, _ = _padded([instance.segment_ids for instance in instances], max_seq_length, np.int64)
    valid = np.arange(max_predictions_per_seq)[None, :] < counts[:, None]
    replacements = np.where(valid, np.take_along_axis(ids, positions, axis=1), 0)
    rows = np.broadcast_to(np.arange(len(ids))[:, None], valid.shape)
    ids[rows[valid], positions[valid]] = labels[valid]
    len_a = (segment_ids == 0).sum(axis=1) - (max_seq_length - lengths) - 2
    features = build_features((ids, lengths, len_a), [int(bool(i.is_random_next)) for i in instances],
                              (positions, replacements, counts))
    features["segment_ids"] = segment_ids
    return features


def write_instance_to_example_files(instances, tokenizer, max_seq_length, max_predictions_per_seq, output_files):
    """Create TF example files from `TrainingInstance`s: round-robin over output_files (any file system), the
    records this script writes."""
    vocab = Vocab(tokenizer.vocab)
    writers = records.RecordWriters(list(output_files))
    out = InstanceWriter(writers, vocab)
    try:
        for start in range(0, len(instances), BATCH_SIZE):
            out.write(instance_features(instances[start:start + BATCH_SIZE], tokenizer, max_seq_length,
                                        max_predictions_per_seq))
        writers.close()
    except BaseException:
        writers.abort()
        raise
    logging.info("Wrote %d total instances", len(instances))


def create_int_feature(values):
    """A tf.train.Feature of int64 values."""
    import tensorflow as tf
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def create_float_feature(values):
    """A tf.train.Feature of float values."""
    import tensorflow as tf
    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


# ----------------------------------------------------------------------------------------------------------
# Exact mode.

def run_exact(input_files, output_files, options):
    """The original create_pretraining_data.py main() (options: CreatePretrainingDataOptions): returns
    {output path: instances written}."""
    settings = options.settings
    vocab_dict = _load_vocab(options.vocab_file)
    vocab = Vocab(vocab_dict)
    tokenizer = CachedTokenizer(vocab_dict, options.do_lower_case, options.tokenizer_cache_size)
    total_bytes = sum(filesystem.file_size(path) for path in input_files)
    writers = records.RecordWriters(output_files)
    try:
        read_log = ProgressLog("read", "bytes")
        corpus, stats = read_corpus_exact(
            input_files, tokenizer,
            progress=lambda st, co: read_log.update(st.bytes, total_bytes,
                                                    lambda: "%d documents" % len(co.docs)))
        if not corpus.docs:
            raise _no_documents_error(input_files)
        logging.info("read %d documents, %d sentences, %d tokens (%d lines) from %d files",
                     len(corpus.docs), len(corpus.starts) - 1, corpus.num_tokens, stats.lines, len(input_files))
        if len(corpus.docs) == 1:
            logging.warning("only one document: random next sentences come from the same document, as in the "
                            "original")
        rng = random.Random(settings.random_seed)
        gen_log = ProgressLog("made instances from", "documents")
        num_docs = len(corpus.docs)
        instances = exact_instances(
            corpus, vocab, settings, rng,
            progress=lambda passes, made: gen_log.update(
                passes * num_docs, settings.dupe_factor * num_docs,
                "pass %d of %d, %d instances" % (passes, settings.dupe_factor, made),
                force=passes == settings.dupe_factor))
        logging.info("*** Writing to output files ***")
        for path in output_files:
            logging.info("  %s", path)
        spans = np.array([inst[:5] for inst in instances], np.int64).reshape(-1, 5)
        tokens = np.frombuffer(corpus.tokens, np.int32) if corpus.num_tokens else np.zeros(1, np.int32)
        pred = settings.max_predictions_per_seq

        def masker(ids, lengths, len_a, lo, hi):
            chunk = instances[lo:hi]
            counts = np.array([len(inst[5]) for inst in chunk], np.int64)
            rows = np.repeat(np.arange(len(chunk)), counts)
            cols = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
            positions = np.zeros((len(chunk), pred), np.int64)
            replacements = np.zeros((len(chunk), pred), np.int64)
            positions[rows, cols] = [p for inst in chunk for p in inst[5]]
            replacements[rows, cols] = [r for inst in chunk for r in inst[6]]
            return positions, replacements, counts

        write_log = ProgressLog("wrote", "instances")
        _write_batches(tokens, spans, masker, InstanceWriter(writers, vocab), settings,
                       progress=lambda done: write_log.update(done, len(instances)))
        writers.close()
    except BaseException:
        writers.abort()
        raise
    result = dict(zip(writers.paths, writers.counts))
    for path, count in result.items():
        logging.info("%s: %d instances", path, count)
    logging.info("Wrote %d total instances", sum(result.values()))
    return result


# ----------------------------------------------------------------------------------------------------------
# Fast mode.

def fast_output_paths(output_files, num_workers, num_tasks, task_index):
    """Output paths of each local worker (see the module docstring)."""
    total_workers = num_workers * num_tasks
    if len(output_files) == 1 and total_workers > 1:
        return [[filesystem.shard_path(output_files[0], task_index * num_workers + w, total_workers)]
                for w in range(num_workers)]
    if len(output_files) % num_workers:
        raise cli.UserError("--output_file has %d paths and --num_workers=%d: give one path (shards are named "
                         "PATH-0000k-of-0000n) or a multiple of num_workers paths"
                         % (len(output_files), num_workers))
    share = len(output_files) // num_workers
    return [output_files[w * share:(w + 1) * share] for w in range(num_workers)]


_FAST_SHARED = {}


def _window_seeds(random_seed, worker, total_workers, window_index):
    seq = np.random.SeedSequence([random_seed & 0xFFFFFFFFFFFFFFFF, worker, total_workers, window_index])
    python_seed = int.from_bytes(seq.generate_state(4, np.uint32).tobytes(), "little")
    return random.Random(python_seed), np.random.default_rng(seq)


class _FastWorker:
    """One fast-mode worker: streams its byte range window by window and writes its shard(s)."""

    def __init__(self, job):
        self.job = job
        self.start_rss = _current_rss_mb()
        self.vocab_dict, self.vocab = _FAST_SHARED["vocab"]
        self.settings = job["settings"]
        self.worker = job["worker"]
        self.label = "worker %d/%d" % (self.worker, job["total_workers"])
        self.tokenizer = CachedTokenizer(self.vocab_dict, job["do_lower_case"], job["cache_size"])
        self.writers = records.RecordWriters(job["paths"])
        self.out = InstanceWriter(self.writers, self.vocab, job["log_examples"])
        self.stats = ReadStats()
        self.range_bytes = sum(hi - lo for _, lo, hi in job["parts"])
        self.documents = self.instances = self.windows = 0
        self.single_doc_warned = False
        self.window_start_bytes = 0
        self.written_fraction = 0.0
        self.progress = ProgressLog(self.label, "instances")

    def _progress_text(self):
        # Work done: finished windows, plus the current window's bytes weighted 30 % for reading and 70 % for
        # making and writing its instances.
        in_window = self.stats.bytes - self.window_start_bytes
        done = self.window_start_bytes + in_window * (0.3 + 0.7 * self.written_fraction)
        fraction = done / max(self.range_bytes, 1)
        elapsed = time.time() - self.progress.start
        return "%d documents, %.1f%% of its %.1f MB read, %.0f%% done, ETA %s" % (
            self.documents, 100.0 * self.stats.bytes / max(self.range_bytes, 1), self.range_bytes / 1e6,
            100.0 * fraction, _duration(elapsed * (1.0 - fraction) / fraction) if fraction > 0 else "?")

    def report(self, force=False):
        self.progress.update(self.instances, None, self._progress_text, force=force)

    def process(self, window):
        """Makes the instances of one window (as the original from a whole corpus) and writes them."""
        if not window.docs:
            return
        settings = self.settings
        rng, rng_np = _window_seeds(settings.random_seed, self.worker, self.job["total_workers"], self.windows)
        self.windows += 1
        if len(window.docs) == 1 and not self.single_doc_warned:
            self.single_doc_warned = True
            logging.warning("%s: a window holds a single document; its random next sentences come from the "
                            "same document", self.label)
        docs = list(window.docs)
        shuffle(docs, rng)
        spans = array.array("i")
        emit = lambda *span: spans.extend(span)
        for _ in range(settings.dupe_factor):
            for document_index in range(len(docs)):
                document_instance_spans(window.starts, docs, document_index, settings, rng, emit)
        spans = np.frombuffer(spans, np.int32).reshape(-1, 5)
        spans = spans[rng_np.permutation(len(spans))]
        tokens = np.frombuffer(window.tokens, np.int32)
        masker = lambda ids, lengths, len_a, lo, hi: mask_batch(ids, lengths, len_a, settings, self.vocab, rng_np)
        base = self.instances

        def written(done):
            self.instances = base + done
            self.written_fraction = done / len(spans)
            self.report()

        _write_batches(tokens, spans, masker, self.out, settings, progress=written)
        self.window_start_bytes = self.stats.bytes
        self.written_fraction = 0.0

    def _read_and_process(self):
        window_tokens = self.job["window_tokens"]
        window = Corpus()
        for path, lo, hi in self.job["parts"]:
            for document in read_documents_in_range(path, lo, hi, self.tokenizer, self.stats):
                for ids in document:
                    window.add_sentence(ids)
                window.end_document()
                self.documents += 1
                if window.num_tokens >= window_tokens:
                    tokens_per_byte = window.num_tokens / max(self.stats.bytes - self.window_start_bytes, 1)
                    remaining = (self.range_bytes - self.stats.bytes) * tokens_per_byte
                    if remaining >= window_tokens / 2:
                        self.process(window)
                        window = Corpus()
                self.report()
        self.process(window)

    def run(self):
        try:
            self._read_and_process()
            self.writers.close()
        except BaseException:
            self.writers.abort()
            raise
        self.report(force=True)
        _log_tokenless(self.stats, self.label)
        if self.documents == 0:
            logging.warning("%s: no document begins in its byte range; its output %s is empty",
                            self.label, ", ".join(self.job["paths"]))
        return {"worker": self.worker, "paths": self.writers.paths, "counts": self.writers.counts,
                "documents": self.documents, "instances": self.instances, "windows": self.windows,
                "peak_rss_mb": _peak_rss_mb(), "start_rss_mb": self.start_rss}


def fast_worker(job):
    """One fast-mode worker (_FastWorker): returns its counts and memory."""
    return _FastWorker(job).run()


def run_fast(input_files, output_files, options):
    """Fast mode (see the module docstring; options: CreatePretrainingDataOptions): returns {output path:
    instances written}."""
    num_workers, num_tasks, task_index = options.num_workers, options.num_tasks, options.task_index
    window_tokens = options.window_tokens
    if num_workers < 1:
        raise cli.UserError("--num_workers=%d: fast mode needs at least 1 worker" % num_workers)
    if num_tasks < 1 or not 0 <= task_index < num_tasks:
        raise cli.UserError("--task_index=%d, --num_tasks=%d: expected 0 <= task_index < num_tasks"
                         % (task_index, num_tasks))
    if not 1 <= window_tokens <= 1 << 30:
        raise cli.UserError("--window_tokens=%d: expected a number of tokens in 1 .. 2**30" % window_tokens)
    vocab_dict = _load_vocab(options.vocab_file)
    _FAST_SHARED["vocab"] = (vocab_dict, Vocab(vocab_dict))
    sizes = [filesystem.file_size(path) for path in input_files]
    total_workers = num_workers * num_tasks
    paths = fast_output_paths(output_files, num_workers, num_tasks, task_index)
    ranges = filesystem.byte_ranges(sizes, total_workers)
    jobs = []
    for w in range(num_workers):
        worker = task_index * num_workers + w
        start, end = ranges[worker]
        jobs.append({"worker": worker, "total_workers": total_workers, "settings": options.settings,
                     "parts": filesystem.range_parts(input_files, sizes, start, end), "paths": paths[w],
                     "do_lower_case": options.do_lower_case, "cache_size": options.tokenizer_cache_size,
                     "window_tokens": window_tokens,
                     "log_examples": NUM_EXAMPLES_TO_LOG if w == 0 else 0})
    logging.info("fast mode: %d workers (%d of %d in all), %.1f MB of input, windows of %d tokens",
                 num_workers, num_workers, total_workers, sum(sizes) / 1e6, window_tokens)
    try:
        if num_workers == 1:
            results = [fast_worker(jobs[0])]
        else:
            with multiprocessing.get_context("fork").Pool(num_workers) as pool:
                results = pool.map(fast_worker, jobs, chunksize=1)
        if num_tasks == 1 and sum(sum(res["counts"]) for res in results) == 0:
            raise _no_documents_error(input_files)
    except BaseException:
        for path in (path for worker_paths in paths for path in worker_paths):
            if filesystem.remove_file(path):
                logging.info("removed incomplete output %s", path)
        raise
    result = {}
    for res in results:
        result.update(zip(res["paths"], res["counts"]))
    for res in results:
        logging.info("worker %d: %d documents, %d windows, %d instances, peak RSS %.0f MB, %.0f MB above its "
                     "start", res["worker"], res["documents"], res["windows"], res["instances"],
                     res["peak_rss_mb"], res["peak_rss_mb"] - res["start_rss_mb"])
    for path, count in result.items():
        logging.info("%s: %d instances", path, count)
    total_peak = _peak_rss_mb()
    if num_workers > 1:  # forked workers share the parent's pages; count what each added
        total_peak += sum(max(res["peak_rss_mb"] - res["start_rss_mb"], 0.0) for res in results)
    logging.info("Wrote %d total instances (peak RSS of this process %.0f MB, all processes about %.0f MB)",
                 sum(result.values()), _peak_rss_mb(), total_peak)
    return result


# ----------------------------------------------------------------------------------------------------------

def run(options):
    """CreatePretrainingDataOptions in, output files written; returns {output path: instances written}."""
    start = time.time()
    input_files = filesystem.input_files(options.input_file, "--input_file")
    output_files = [path.strip() for path in (options.output_file or "").split(",") if path.strip()]
    if not output_files:
        raise cli.UserError("--output_file is required: comma-separated TFRecord paths")
    logging.info("*** Reading from input files ***")
    for path in input_files:
        logging.info("  %s", path)
    settings = options.settings
    full = int(round(settings.max_seq_length * settings.masked_lm_prob))  # the masks of a full sequence, uncapped
    if full > settings.max_predictions_per_seq:
        logging.warning("--max_predictions_per_seq=%d masks fewer than --masked_lm_prob=%g of a full sequence's "
                        "tokens (%d of %d): longer sequences get %d masks, as in the original",
                        settings.max_predictions_per_seq, settings.masked_lm_prob, full, settings.max_seq_length,
                        settings.max_predictions_per_seq)
    if options.num_workers == 0:
        if options.num_tasks != 1:
            raise cli.UserError("--num_tasks=%d needs fast mode (--num_workers >= 1)" % options.num_tasks)
        written = run_exact(input_files, output_files, options)
    else:
        written = run_fast(input_files, output_files, options)
    logging.info("done in %.1f s", time.time() - start)
    return written


if __name__ == "__main__":
    cli.main(CreatePretrainingDataOptions, run)
