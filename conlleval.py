"""Chunk-level evaluation equal to the standard CoNLL `conlleval` perl script (version 2004-01-26).

Input: one token per line, fields separated by a delimiter (default a single space), the last two fields the
gold and the guessed tag; sentences separated by empty lines or lines whose first field is `-X-`. Chunks follow
the script's rules, so IOB1, IOB2 (and IOE, bracket) tags are read as conlleval reads them; a tag's type is
whatever follows its first hyphen.

Module use:
    counts = evaluate_lines(lines)             # or evaluate_sentences([[(word, gold, pred), ...], ...])
    print(format_report(counts), end="")       # the script's text, to the printed digit
    metrics(counts)                            # the same numbers as floats

CLI (the script's options, plus an optional input file instead of stdin):
    python conlleval.py [-l] [-r] [-d delimiter] [-o outsideTag] [file] < file
"""
import dataclasses
import re
import sys

import filesystem

BOUNDARY = "-X-"


class ConllevalError(ValueError):
    """Input the conlleval script rejects."""


@dataclasses.dataclass
class ChunkCounts:
    """Counters the script accumulates; `sorted_types` is its (quirky) ordered, de-duplicated type list."""
    token_counter: int = 0
    correct_tags: int = 0
    found_correct: int = 0
    found_guessed: int = 0
    correct_chunk: int = 0
    found_correct_by_type: dict = dataclasses.field(default_factory=dict)
    found_guessed_by_type: dict = dataclasses.field(default_factory=dict)
    correct_chunk_by_type: dict = dataclasses.field(default_factory=dict)

    @property
    def sorted_types(self):
        types = []
        last = None
        for name in sorted(list(self.found_correct_by_type) + list(self.found_guessed_by_type)):
            # The script keeps a repeated name when the previous one is false in perl ("" here).
            if not last or last != name:
                types.append(name)
            last = name
        return types


def end_of_chunk(prev_tag, tag, prev_type, type_):
    """True if a chunk ended between the previous and the current token (conlleval's endOfChunk)."""
    end = False
    if prev_tag == "B" and tag in ("B", "O"):
        end = True
    if prev_tag == "I" and tag in ("B", "O"):
        end = True
    if prev_tag == "E" and tag in ("E", "I", "O"):
        end = True
    if prev_tag != "O" and prev_tag != "." and prev_type != type_:
        end = True
    if prev_tag in ("]", "["):
        end = True
    return end


def start_of_chunk(prev_tag, tag, prev_type, type_):
    """True if a chunk started between the previous and the current token (conlleval's startOfChunk)."""
    start = False
    if prev_tag in ("B", "I", "O") and tag == "B":
        start = True
    if prev_tag == "O" and tag in ("I", "E"):
        start = True
    if prev_tag == "E" and tag in ("E", "I"):
        start = True
    if tag != "O" and tag != "." and prev_type != type_:
        start = True
    if tag in ("[", "]"):
        start = True
    return start


def _split_tag(tag):
    """Prefix before the first hyphen and the type after it; a type perl reads as false ("", "0") becomes ""."""
    match = re.match(r"^([^-]*)-(.*)$", tag)
    if match:
        prefix, type_ = match.group(1), match.group(2)
    else:
        prefix, type_ = tag, ""
    if type_ in ("", "0"):
        type_ = ""
    return prefix, type_


def _split_fields(line, delimiter):
    """perl's split(/delimiter/, line): a regex split whose trailing empty fields are dropped."""
    if line == "":
        return []
    fields = re.split(delimiter, line) if delimiter != " " else line.split(" ")
    while fields and fields[-1] == "":
        fields.pop()
    return fields


def evaluate_lines(lines, delimiter=" ", raw=False, o_tag="O", source="<input>"):
    """Counts chunks over conlleval input lines (with or without their newline)."""
    counts = ChunkCounts()
    nbr_of_features = -1
    in_correct = False
    last_correct, last_correct_type = "O", ""
    last_guessed, last_guessed_type = "O", ""
    for line_number, line in enumerate(lines, start=1):
        if line.endswith("\n"):
            line = line[:-1]
        features = _split_fields(line, delimiter)
        if nbr_of_features < 0:
            nbr_of_features = len(features) - 1
        elif nbr_of_features != len(features) - 1 and features:
            raise ConllevalError(
                "unexpected number of features: %d (%d) in %s line %d"
                % (len(features), nbr_of_features + 1, source, line_number))
        if not features or features[0] == BOUNDARY:
            features = [BOUNDARY, "O", "O"]
        if len(features) < 2:
            raise ConllevalError("conlleval: unexpected number of features in %s line %d: %r"
                                 % (source, line_number, line))
        if raw:
            if features[-1] == o_tag:
                features[-1] = "O"
            if features[-2] == o_tag:
                features[-2] = "O"
            if features[-1] != "O":
                features[-1] = "B-" + features[-1]
            if features[-2] != "O":
                features[-2] = "B-" + features[-2]
        guessed, guessed_type = _split_tag(features[-1])
        correct, correct_type = _split_tag(features[-2])
        first_item = features[0] if len(features) > 2 else None
        if first_item == BOUNDARY:
            guessed = "O"

        correct_ended = end_of_chunk(last_correct, correct, last_correct_type, correct_type)
        guessed_ended = end_of_chunk(last_guessed, guessed, last_guessed_type, guessed_type)
        if in_correct:
            if correct_ended and guessed_ended and last_guessed_type == last_correct_type:
                in_correct = False
                counts.correct_chunk += 1
                _increment(counts.correct_chunk_by_type, last_correct_type)
            elif correct_ended != guessed_ended or guessed_type != correct_type:
                in_correct = False

        correct_started = start_of_chunk(last_correct, correct, last_correct_type, correct_type)
        guessed_started = start_of_chunk(last_guessed, guessed, last_guessed_type, guessed_type)
        if correct_started and guessed_started and guessed_type == correct_type:
            in_correct = True
        if correct_started:
            counts.found_correct += 1
            _increment(counts.found_correct_by_type, correct_type)
        if guessed_started:
            counts.found_guessed += 1
            _increment(counts.found_guessed_by_type, guessed_type)
        if first_item != BOUNDARY:
            if correct == guessed and guessed_type == correct_type:
                counts.correct_tags += 1
            counts.token_counter += 1

        last_guessed, last_correct = guessed, correct
        last_guessed_type, last_correct_type = guessed_type, correct_type
    if in_correct:
        counts.correct_chunk += 1
        _increment(counts.correct_chunk_by_type, last_correct_type)
    return counts


def _increment(table, key):
    table[key] = table.get(key, 0) + 1


def evaluate_sentences(sentences):
    """Counts chunks over sentences given as lists of (word, gold_tag, predicted_tag)."""
    return evaluate_lines(sentence_lines(sentences))


def sentence_lines(sentences):
    """`word gold pred` lines with an empty line after each sentence (the predictions file format)."""
    for sentence in sentences:
        for word, gold, pred in sentence:
            yield "%s %s %s" % (word, gold, pred)
        yield ""


def _prf(correct, guessed, gold):
    precision = 100 * correct / guessed if guessed else 0.0
    recall = 100 * correct / gold if gold else 0.0
    fb1 = 2 * precision * recall / (precision + recall) if precision + recall != 0.0 else 0.0
    return precision, recall, fb1


def metrics(counts):
    """Overall and per-type precision, recall and FB1 (percentages) and counts, as the script computes them."""
    precision, recall, fb1 = _prf(counts.correct_chunk, counts.found_guessed, counts.found_correct)
    result = {
        "tokens": counts.token_counter,
        "phrases": counts.found_correct,
        "found": counts.found_guessed,
        "correct": counts.correct_chunk,
        "accuracy": 100 * counts.correct_tags / counts.token_counter if counts.token_counter else 0.0,
        "precision": precision, "recall": recall, "f1": fb1,
        "per_type": {},
    }
    for name in counts.sorted_types:
        p, r, f = _prf(counts.correct_chunk_by_type.get(name, 0), counts.found_guessed_by_type.get(name, 0),
                       counts.found_correct_by_type.get(name, 0))
        result["per_type"][name] = {
            "precision": p, "recall": r, "f1": f,
            "found": counts.found_guessed_by_type.get(name, 0),
            "phrases": counts.found_correct_by_type.get(name, 0),
            "correct": counts.correct_chunk_by_type.get(name, 0),
        }
    return result


def format_report(counts, latex=False):
    """The text the script prints (plain or `-l` LaTeX)."""
    out = []
    if not latex:
        precision, recall, fb1 = _prf(counts.correct_chunk, counts.found_guessed, counts.found_correct)
        out.append("processed %d tokens with %d phrases; found: %d phrases; correct: %d.\n"
                   % (counts.token_counter, counts.found_correct, counts.found_guessed, counts.correct_chunk))
        if counts.token_counter > 0:
            out.append("accuracy: %6.2f%%; " % (100 * counts.correct_tags / counts.token_counter))
            out.append("precision: %6.2f%%; recall: %6.2f%%; FB1: %6.2f\n" % (precision, recall, fb1))
        for name in counts.sorted_types:
            guessed = counts.found_guessed_by_type.get(name, 0)
            p, r, f = _prf(counts.correct_chunk_by_type.get(name, 0), guessed,
                           counts.found_correct_by_type.get(name, 0))
            out.append("%17s: precision: %6.2f%%; recall: %6.2f%%; FB1: %6.2f  %d\n" % (name, p, r, f, guessed))
    else:
        out.append("        & Precision &  Recall  & F$_{\\beta=1} \\\\\\hline")
        for name in counts.sorted_types:
            p, r, f = _prf(counts.correct_chunk_by_type.get(name, 0), counts.found_guessed_by_type.get(name, 0),
                           counts.found_correct_by_type.get(name, 0))
            out.append("\n%-7s &  %6.2f\\%% & %6.2f\\%% & %6.2f \\\\" % (name, p, r, f))
        out.append("\\hline\n")
        precision, recall, fb1 = _prf(counts.correct_chunk, counts.found_guessed, counts.found_correct)
        out.append("Overall &  %6.2f\\%% & %6.2f\\%% & %6.2f \\\\\\hline\n" % (precision, recall, fb1))
    return "".join(out)


def evaluate_file(path, delimiter=" ", raw=False, o_tag="O"):
    """Counts chunks in a file, read byte for byte as the perl script reads it."""
    with filesystem.open_file(path, "r", encoding="latin-1", newline="\n") as f:  # gs://... through tf.io.gfile
        return evaluate_lines(f, delimiter=delimiter, raw=raw, o_tag=o_tag, source=path)


def _parse_args(argv):
    options = {"latex": False, "raw": False, "delimiter": " ", "o_tag": "O"}
    args = list(argv)
    while args and args[0].startswith("-") and args[0] != "-":
        flag = args.pop(0)
        if flag == "-l":
            options["latex"] = True
        elif flag == "-r":
            options["raw"] = True
        elif flag in ("-d", "-o"):
            if not args:
                raise SystemExit("conlleval: %s requires delimiter character" % flag)
            options["delimiter" if flag == "-d" else "o_tag"] = args.pop(0)
        else:
            raise SystemExit("conlleval: unknown argument %s" % flag)
    if len(args) > 1:
        raise SystemExit("conlleval: unexpected command line argument")
    return options, (args[0] if args else "-")


def main(argv=None):
    options, path = _parse_args(sys.argv[1:] if argv is None else argv)
    kwargs = dict(delimiter=options["delimiter"], raw=options["raw"], o_tag=options["o_tag"])
    try:
        if path == "-":
            stdin = open(sys.stdin.fileno(), "r", encoding="latin-1", newline="\n", closefd=False)
            counts = evaluate_lines(stdin, source="<stdin>", **kwargs)
        else:
            counts = evaluate_file(path, **kwargs)
    except ConllevalError as e:
        sys.stderr.write("%s\n" % e)
        return 1
    sys.stdout.flush()
    sys.stdout.buffer.write(format_report(counts, latex=options["latex"]).encode("latin-1"))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
