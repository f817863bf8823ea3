"""Builds a WordPiece vocabulary (the original vocab.txt format) from a user's text corpus.

Words are counted after the original BasicTokenizer (so the vocabulary fits FullTokenizer exactly), then
tensorflow-text's WordPiece learner picks the pieces. The file starts with the special tokens.

  python build_vocab.py --input_file=corpus/*.txt --output_file=vocab.txt --vocab_size=8000 \
      --do_lower_case=True
"""
import collections
import dataclasses

from absl import logging

import cli
import filesystem
import tokenization

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# The original vocabularies keep 99 unused tokens between [PAD] and [UNK].
_ORIGINAL_UNUSED_BEFORE_UNK = 99


@dataclasses.dataclass
class BuildVocabOptions:
    """build_vocab.py's flags."""
    input_file: str = cli.option(None, "Comma-separated text files or globs, one sentence or paragraph per line "
                                 "(the create_pretraining_data.py input format).", required=True)
    output_file: str = cli.option(None, "Where to write vocab.txt (one token per line).", required=True)
    vocab_size: int = cli.option(30522, "Maximum vocabulary size, special and unused tokens included.")
    do_lower_case: bool = cli.option(True, "Lower case (and strip accents) as the tokenizer will.")
    num_unused: int = cli.option(0, "Number of [unusedN] placeholder tokens. With N > 0 the layout is the "
                                 "original's: [PAD], [unused0..98], [UNK], [CLS], [SEP], [MASK], the rest.")
    max_unique_chars: int = cli.option(1000, "Alphabet size: words with rarer characters are not learned from "
                                       "(they tokenize to [UNK] unless covered otherwise).")
    max_token_length: int = cli.option(50, "Longest token (in characters) the learner considers.")
    max_input_words: int = cli.option(5000000, "Most frequent distinct words the learner uses.")
    lower_thresh: int = cli.option(10, "Lower bound of the learner's token count threshold search.")
    num_iterations: int = cli.option(4, "Learner iterations per threshold.")
    slack_ratio: float = cli.option(0.05, "Acceptable shortfall below vocab_size, as a fraction.")
    unk_report_lines: int = cli.option(20000, "Lines of the corpus tokenized with the new vocabulary to report "
                                       "its [UNK] rate (0: skip).")


def reserved_tokens(num_unused=0):
    """Special tokens (and [unusedN] placeholders) in vocabulary order."""
    if num_unused < 0:
        raise cli.UserError("num_unused must be >= 0, got %d" % num_unused)
    if num_unused == 0:
        return list(SPECIAL_TOKENS)
    unused = ["[unused%d]" % i for i in range(num_unused)]
    head = min(num_unused, _ORIGINAL_UNUSED_BEFORE_UNK)
    return ["[PAD]"] + unused[:head] + list(SPECIAL_TOKENS[1:]) + unused[head:]


def count_words(lines, do_lower_case):
    """Counts the words BasicTokenizer makes of `lines` (str or UTF-8 bytes)."""
    basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
    counts = collections.Counter()
    num_lines = 0
    for line in lines:
        counts.update(basic.tokenize(line))
        num_lines += 1
    return counts, num_lines


def build_vocab(lines, options):
    """Learns a WordPiece vocabulary from an iterable of text lines with the settings of `options` (a
    BuildVocabOptions; its files are not read); returns the list of tokens."""
    from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

    vocab_size = options.vocab_size
    reserved = reserved_tokens(options.num_unused)
    if vocab_size <= len(reserved):
        raise cli.UserError("vocab_size %d leaves no room after the %d reserved tokens" % (vocab_size, len(reserved)))
    counts, num_lines = count_words(lines, options.do_lower_case)
    if not counts:
        raise cli.UserError("the corpus has no words (%d lines read): expected text, one sentence per line"
                         % num_lines)
    logging.info("Counted %d words (%d distinct) in %d lines", sum(counts.values()), len(counts), num_lines)
    tokens = learner.learn(
        counts, vocab_size=vocab_size, reserved_tokens=reserved, upper_thresh=max(counts.values()) + 1,
        lower_thresh=options.lower_thresh, num_iterations=options.num_iterations,
        max_input_tokens=options.max_input_words, max_token_length=options.max_token_length,
        max_unique_chars=options.max_unique_chars, slack_ratio=options.slack_ratio,
        include_joiner_token=True, joiner="##")
    if tokens[:len(reserved)] != reserved:
        raise AssertionError("the learner did not keep the reserved tokens first")
    if len(tokens) > vocab_size:
        logging.warning("The learner returned %d tokens; keeping the first %d (the least frequent pieces "
                        "are dropped)", len(tokens), vocab_size)
        tokens = tokens[:vocab_size]
    bad = [t for t in tokens if not t or t != t.strip() or any(c.isspace() for c in t)]
    if bad:
        raise AssertionError("tokens with whitespace cannot be written to vocab.txt: %r" % bad[:5])
    logging.info("Vocabulary of %d tokens (%d reserved)", len(tokens), len(reserved))
    return tokens


def write_vocab(tokens, output_file):
    """Writes tokens one per line, UTF-8, as the original vocab.txt."""
    if len(set(tokens)) != len(tokens):
        raise cli.UserError("duplicate tokens in the vocabulary for %s" % output_file)
    with filesystem.open_file(output_file, "w", newline="") as writer:
        writer.write("".join(token + "\n" for token in tokens))


def read_lines(input_file):
    """Yields the lines (str) of the comma-separated files/globs in `input_file`."""
    for path in filesystem.input_files(input_file, "--input_file"):
        logging.info("Reading %s", path)
        with filesystem.open_file(path, "rb") as reader:
            for line in reader:
                yield tokenization.convert_to_unicode(line)


def unk_rate(vocab_file, lines, do_lower_case):
    """Share of word pieces that are [UNK] when FullTokenizer with `vocab_file` tokenizes `lines`."""
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    total = unknown = 0
    for line in lines:
        pieces = tokenizer.tokenize(line)
        total += len(pieces)
        unknown += sum(1 for p in pieces if p == tokenization.UNK_TOKEN)
    return unknown / max(total, 1), total


def run(options):
    """Learns the vocabulary of options.input_file and writes it to options.output_file; returns the tokens."""
    tokens = build_vocab(read_lines(options.input_file), options)
    filesystem.make_parent_dir(options.output_file, "--output_file")
    write_vocab(tokens, options.output_file)
    logging.info("Wrote %d tokens to %s", len(tokens), options.output_file)
    if options.unk_report_lines > 0:
        sample = []
        for line in read_lines(options.input_file):
            if len(sample) >= options.unk_report_lines:
                break
            sample.append(line)
        rate, total = unk_rate(options.output_file, sample, options.do_lower_case)
        logging.info("[UNK] rate on the first %d lines: %.3f%% of %d word pieces", len(sample), 100 * rate,
                     total)
    return tokens


if __name__ == "__main__":
    cli.main(BuildVocabOptions, run)
