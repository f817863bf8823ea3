"""Benchmark: sentence segmenters, boundary precision / recall on gold sets and speed; how corpus_text.py's
segmenter was chosen (results and command in SEGMENTATION.md).

Gold sets (each a list of paragraphs, each paragraph a list of its sentences):
  en news     the CoNLL-2003 training documents (../shared/data/text/conll_train_docs.txt, Reuters news, one
              sentence per line as the CoNLL annotators split them), detokenized; each run of at least two
              consecutive sentences of a document that end with . ! or ? (a closing quote or bracket may follow)
              and have at least 3 tokens is one paragraph (datelines, bylines and tables, which have no final
              punctuation, cut the runs).
  en fiction  the original release's sample_text.txt (one sentence per line; 19th-century fiction), its runs of
              sentences ending with . ! or ? as above.
  en tricky   benchmarks/segmentation_tricky_en.txt, written for this benchmark: abbreviations, initials,
              decimals, quotes closing a sentence, ellipses, numbered lists, parentheses, addresses.
  zh          the Chinese texts of ../shared/reference/tokenization/chinese.jsonl that hold a 。！or ？ (real
              Chinese prose: articles about BERT, the BERT paper in translation), split after each 。！？ and the
              closing quotes or brackets that follow it (the Chinese convention); texts with a Latin . ! ? before
              a space or a Chinese character (English sentences, "Wu et al. (2016)") are left out.
  zh tricky   benchmarks/segmentation_tricky_zh.txt, written for this benchmark: quotes, ellipses, numbers,
              Latin text inside Chinese.
  en tricky 2, zh tricky 2
              benchmarks/segmentation_tricky2_en.txt and _zh.txt, a second set written after the first and before
              the segmenter's rules were revised on it (the categories of rule-based segmenters' "golden rules":
              titles, months, units, countries, Latin abbreviations, initials, money, times, ellipses, quotes, ?!
              runs, lists, addresses, single letters, parentheses, lower-case starts; Chinese and Japanese quotes,
              ellipses, full-width digits, Latin abbreviations).
  en tricky 3, zh tricky 3
              benchmarks/segmentation_tricky3_en.txt and _zh.txt, written after the rules were settled on the first
              two sets: their held-out check (SEGMENTATION.md gives its first run; the rules were then revised
              on its false splits).
  en tricky 4, zh tricky 4, en tricky 5, zh tricky 5
              written together after the rules were revised on the third sets; the fourth measured first, the
              rules then revised on it (and on the golden rules below), then the fifth measured once.
  en tricky 6, zh tricky 6, en tricky 7, zh tricky 7
              each written by an author who had seen neither the rules nor the earlier sets, measured once after
              the rules were revised on the set before (then the rules were revised on its misses).
  en golden rules (with --golden_rules=PATH)
              the 48 English "golden rules" of rule-based segmenters (Pragmatic Segmenter's, as pySBD's repository
              holds them in benchmarks/english_golden_rules.py), written by others; not in this repository.
A paragraph is the sentences joined by one space (Chinese: by nothing); a segmenter's output is mapped back to
boundaries by counting non-whitespace characters, so whitespace it drops or keeps does not matter. A boundary is
the start of every sentence but the first; precision = right boundaries / boundaries found, recall = right
boundaries / gold boundaries.

Speed: each segmenter splits the same paragraphs (Gutenberg novels, blank-line paragraphs with their lines
joined; wikitext-2 valid, one paragraph per line) in one process, in interleaved rounds (median of --rounds),
as MB of UTF-8 text per second on one core. The machine is shared: compare the ratios of one run.

    python benchmarks/bench_sentence_segmentation.py [--rounds=3] [--speed_bytes=400000] [--only=sentencex,...]
        [--golden_rules=PATH/pySBD/benchmarks/english_golden_rules.py]
    python benchmarks/bench_sentence_segmentation.py --prepare_corpus=5 [--workers=2]   # the script's own rate

The candidates are in requirements-bench.txt (benchmark only); NLTK's punkt model has no
package that installs it offline (nltk downloads it at run time): its row is NLTK's Punkt algorithm with default
parameters and no trained abbreviations. nupunkt ships a trained Punkt model of its own.
"""
import argparse
import json
import os
import re
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
SHARED = os.environ.get("BERT_SHARED_DIR", os.path.join(ROOT, "..", "shared"))
HERE = os.path.dirname(os.path.abspath(__file__))

_CHINESE_END = re.compile(r"[。！？]+[”’」』）》〕】)\"']*")
# A Latin . ! ? followed by a space or a Chinese character: an English sentence inside Chinese text, or an
# abbreviation ("Wu et al. (2016)"); paragraphs holding one are left out of the zh gold set (their boundaries need
# a human's judgement; segmentation_tricky_zh.txt has such cases, judged by hand).
_LATIN_END = re.compile(r"[.!?][\s\u4e00-\u9fff]")


# ----------------------------------------------------------------------------------------------------------
# Gold sets.

def read_cases(path):
    """[(section, [sentences])] of a hand-written gold file (see segmentation_tricky_en.txt's header)."""
    cases, section, current = [], "", []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("#"):
                if current:
                    cases.append((section, current))
                    current = []
                section = line[1:].strip()
            elif line:
                current.append(line)
            elif current:
                cases.append((section, current))
                current = []
    if current:
        cases.append((section, current))
    return cases


_NO_SPACE_BEFORE = {",", ".", ";", ":", "!", "?", "%", ")", "]", "}", "'s", "n't", "'re", "'ve", "'ll", "'d", "'m",
                    "'S", "N'T"}
_NO_SPACE_AFTER = {"(", "[", "{", "$"}


def detokenize(tokens):
    """CoNLL's space-separated tokens as running text (punctuation attached, quotes paired)."""
    out, quote_open, glue = "", False, True
    for token in tokens:
        if token == '"':
            if quote_open:
                out += '"'
                glue = False
            else:
                out += ("" if glue else " ") + '"'
                glue = True
            quote_open = not quote_open
            continue
        if token in _NO_SPACE_BEFORE or glue:
            out += token
        else:
            out += " " + token
        glue = token in _NO_SPACE_AFTER
    return out


_ENDS = re.compile(r"[.!?]['\")\]]*$")


def _runs(documents, min_tokens):
    """The runs of at least two consecutive sentences of each document that end with . ! or ? (a closing quote or
    bracket may follow), have at least `min_tokens` tokens and an even number of double quotes."""
    paragraphs = []
    for document in documents:
        run = []
        for sentence in document + [""]:
            if len(sentence.split()) >= min_tokens and _ENDS.search(sentence) and sentence.count('"') % 2 == 0:
                run.append(sentence)
                continue
            if len(run) >= 2:
                paragraphs.append(run)
            run = []
    return paragraphs


def read_documents(path, convert=lambda line: line):
    """Documents (lists of lines) of a one-sentence-per-line file with blank lines between documents."""
    documents, current = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                current.append(convert(line))
            elif current:
                documents.append(current)
                current = []
    if current:
        documents.append(current)
    return documents


def conll_paragraphs(path):
    return _runs(read_documents(path, lambda line: detokenize(line.split())), 3)


def sample_text_paragraphs(path):
    return _runs(read_documents(path), 1)


def chinese_paragraphs(path):
    paragraphs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            text = json.loads(line)["text"].strip()
            if not _CHINESE_END.search(text) or _LATIN_END.search(text):
                continue
            sentences, start = [], 0
            for match in _CHINESE_END.finditer(text):
                sentences.append(text[start:match.end()].strip())
                start = match.end()
            if text[start:].strip():
                sentences.append(text[start:].strip())
            paragraphs.append([s for s in sentences if s])
    return paragraphs


def golden_rule_cases(path):
    """[(None, [sentences])] of the English "golden rules" of rule-based segmenters as pySBD's repository holds
    them (benchmarks/english_golden_rules.py: GOLDEN_EN_RULES, a list of (text, [sentences])), read without
    importing it. Written by others: no rule of ours was written on it before its first run (SEGMENTATION.md)."""
    import ast
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "GOLDEN_EN_RULES" for t in node.targets):
            return [(None, list(sentences)) for _, sentences in ast.literal_eval(node.value)]
    sys.exit("%s: no GOLDEN_EN_RULES list" % path)


# The hand-written tricky sets: benchmarks/segmentation_tricky{number}_{en,zh}.txt.
TRICKY_SET_NUMBERS = ("", "2", "3", "4", "5", "6", "7")


def tricky_set(number, language):
    """(language, joiner, cases) of a hand-written tricky set ("" the first; language "en" or "zh")."""
    return (language, " " if language == "en" else "",
            read_cases(os.path.join(HERE, "segmentation_tricky%s_%s.txt" % (number, language))))


def gold_sets(shared, golden_rules=None):
    text = os.path.join(shared, "data", "text")
    sets = {
        "en news": ("en", " ", [(None, p) for p in conll_paragraphs(os.path.join(text, "conll_train_docs.txt"))]),
        "en fiction": ("en", " ", [(None, p) for p in sample_text_paragraphs(os.path.join(text, "sample_text.txt"))]),
        "en tricky": tricky_set("", "en"),
        "zh": ("zh", "", [(None, p) for p in chinese_paragraphs(
            os.path.join(shared, "reference", "tokenization", "chinese.jsonl"))]),
        "zh tricky": tricky_set("", "zh"),
    }
    for number in TRICKY_SET_NUMBERS[1:]:
        for language in ("en", "zh"):
            sets["%s tricky %s" % (language, number)] = tricky_set(number, language)
    if golden_rules:
        sets["en golden rules"] = ("en", " ", golden_rule_cases(golden_rules))
    return sets


# ----------------------------------------------------------------------------------------------------------
# Candidates: name -> function(language) -> split(text) -> [sentences]; None where not installed.

def _sentencex(language):
    import sentencex
    return lambda text: list(sentencex.segment(language, text))


def _pysbd(language):
    import pysbd
    segmenter = pysbd.Segmenter(language=language, clean=False)
    return segmenter.segment


def _syntok(language):
    del language  # English, German, Spanish rules only
    import syntok.segmenter

    def split(text):  # its tokens' values are normalized ("n't" -> "not"): cut the text at their offsets
        starts = [s[0].offset for p in syntok.segmenter.process(text) for s in p if s]
        return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]
    return split


def _blingfire(language):
    del language
    import blingfire
    return lambda text: blingfire.text_to_sentences(text).split("\n")


def _spacy(language):
    import spacy
    nlp = spacy.blank(language)
    nlp.add_pipe("sentencizer")
    return lambda text: [s.text for s in nlp(text).sents]


def _nupunkt(language):
    del language  # its model is English
    import nupunkt
    return nupunkt.sent_tokenize


def _nltk_punkt_untrained(language):
    del language
    from nltk.tokenize.punkt import PunktSentenceTokenizer
    return PunktSentenceTokenizer().tokenize


def _main_job_regex(language):
    del language
    # The expression main_job.split_sentences used before corpus_text.py (kept here as the baseline).
    abbreviations = {"e.g.", "i.e.", "etc.", "vs.", "cf.", "resp.", "approx.", "Mr.", "Dr.", "No.", "ca.", "al.",
                     "Ph.D."}

    def split(text):
        sentences, start = [], 0
        for m in re.finditer(r"[.!?][\"')\]]*\s+(?=[A-Z\"'(])", text):
            words = text[start:m.start() + 1].split()
            last_word = words[-1].lstrip("(\"'[") if words else ""
            if last_word in abbreviations or re.fullmatch(r"[A-Z]\.", last_word):
                continue
            sentences.append(text[start:m.end()].strip())
            start = m.end()
        if text[start:].strip():
            sentences.append(text[start:].strip())
        return sentences
    return split


def _corpus_text(language):
    import corpus_text
    segmenter = corpus_text.Segmenter(language)
    return segmenter.split


CANDIDATES = {
    "corpus_text (chosen)": _corpus_text,
    "sentencex": _sentencex,
    "pysbd": _pysbd,
    "syntok": _syntok,
    "blingfire": _blingfire,
    "spacy sentencizer": _spacy,
    "nupunkt": _nupunkt,
    "nltk punkt (untrained)": _nltk_punkt_untrained,
    "main_job regex (before)": _main_job_regex,
}


def versions():
    import importlib.metadata
    out = {}
    for name in ("sentencex", "pysbd", "syntok", "blingfire", "spacy", "nupunkt", "nltk"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


# ----------------------------------------------------------------------------------------------------------
# Scoring.

def boundaries(sentences):
    """Non-whitespace character offsets at which each sentence but the first begins."""
    found, position = set(), 0
    for k, sentence in enumerate(sentences):
        if k and position:
            found.add(position)
        position += sum(1 for c in sentence if not c.isspace())
    return found


def score(split, cases, joiner):
    """{section: [right, found, gold, errors]} over the cases; errors: [(text, predicted)] of wrong ones."""
    table = {}
    for section, sentences in cases:
        text = joiner.join(sentences)
        predicted = [s for s in split(text) if s.strip()]
        if sum(len(s.split()) for s in predicted) and "".join("".join(predicted).split()) != "".join(text.split()):
            raise AssertionError("the segmenter changed the text: %r -> %r" % (text, predicted))
        gold, found = boundaries(sentences), boundaries(predicted)
        row = table.setdefault(section, [0, 0, 0, []])
        row[0] += len(gold & found)
        row[1] += len(found)
        row[2] += len(gold)
        if gold != found:
            row[3].append((text, predicted))
    return table


def ratio(a, b):
    return a / b if b else 1.0


# ----------------------------------------------------------------------------------------------------------
# Speed.

def speed_paragraphs(shared, limit):
    """(name, [paragraphs]) of the speed corpora, each cut to about `limit` bytes of UTF-8."""
    text = os.path.join(shared, "data", "text")
    corpora = []
    gutenberg = []
    for name in sorted(os.listdir(os.path.join(text, "gutenberg"))):
        if name.endswith(".txt"):
            with open(os.path.join(text, "gutenberg", name), encoding="utf-8", errors="replace") as f:
                gutenberg.extend(" ".join(block.split()) for block in re.split(r"\n\s*\n", f.read()))
    corpora.append(("gutenberg", gutenberg))
    with open(os.path.join(text, "wikitext-2", "valid.txt"), encoding="utf-8") as f:
        wiki = [line.strip() for line in f if line.strip() and not line.strip().startswith("=")]
    corpora.append(("wikitext-2", wiki))
    out = []
    for name, paragraphs in corpora:
        kept, size = [], 0
        for paragraph in paragraphs:
            if not paragraph:
                continue
            kept.append(paragraph)
            size += len(paragraph.encode("utf-8"))
            if size >= limit:
                break
        out.append((name, kept, size))
    return out


def prepare_corpus_speed(shared, repeat, workers):
    """prepare_corpus.py's own rate (its log's "MB/s of input": reading, segmenting, writing; not the imports) on
    the shared corpora, each repeated `repeat` times, with 1 and `workers` workers: [(corpus, MB, workers, MB/s)]."""
    import subprocess
    import tempfile
    text = os.path.join(shared, "data", "text")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        inputs = {}
        books = []
        for name in sorted(os.listdir(os.path.join(text, "gutenberg"))):
            with open(os.path.join(text, "gutenberg", name), "rb") as f:
                try:
                    f.read().decode("utf-8")
                except UnicodeDecodeError:  # chesterton-ball.txt has a Latin-1 byte: prepare_corpus.py stops on it
                    print("left out (not UTF-8): gutenberg/%s" % name)
                    continue
            if name.endswith(".txt"):
                books.append(os.path.join(text, "gutenberg", name))
        inputs["gutenberg books (text, a book per document)"] = (books, ["--text_document=file"])
        wiki = [os.path.join(text, "wikitext-2", n) for n in ("valid.txt", "test.txt")]
        inputs["wikitext-2 (text, heading documents)"] = (wiki, ["--text_document=heading"])
        extract = os.path.join(tmp, "wiki_00")
        with open(extract, "w", encoding="utf-8") as out:
            for path in wiki:
                with open(path, encoding="utf-8") as f:
                    body = f.read()
                for k, article in enumerate(re.split(r"\n \= (?=[^=])", body)):
                    lines = [l.strip() for l in article.split("\n")]
                    title = lines[0].strip(" =")
                    paragraphs = [l for l in lines[1:] if l and not l.startswith("=")]
                    out.write('<doc id="%d" url="u" title="%s">\n%s\n\n%s\n</doc>\n' % (
                        k, title.replace("<", "&lt;").replace(">", "&gt;"), title, "\n".join(paragraphs)))
        inputs["wikitext-2 as WikiExtractor <doc> output"] = ([extract], [])
        for name, (paths, flags) in inputs.items():
            big = os.path.join(tmp, "big_%d" % len(rows))
            os.makedirs(big)
            copies = []
            for k in range(repeat):
                for path in paths:
                    copy = os.path.join(big, "%03d_%s" % (k, os.path.basename(path)))
                    with open(path, "rb") as f, open(copy, "wb") as g:
                        g.write(f.read())
                    copies.append(copy)
            size = sum(os.path.getsize(p) for p in copies) / 1e6
            for n in (1, workers):
                log = subprocess.run([sys.executable, os.path.join(ROOT, "prepare_corpus.py"),
                                      "--input_file=" + ",".join(copies), "--output_file=" + os.path.join(tmp, "out.txt"),
                                      "--num_workers=%d" % n] + flags, capture_output=True, text=True, check=True).stderr
                rate = float(re.search(r"\(([\d.]+) MB/s of input\)", log).group(1))
                rows.append((name, size, n, rate))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--speed_bytes", type=int, default=400_000, help="bytes of each speed corpus")
    parser.add_argument("--only", default="", help="comma-separated candidate names (default: all installed)")
    parser.add_argument("--errors", type=int, default=0, help="print up to N wrong paragraphs per candidate and set")
    parser.add_argument("--prepare_corpus", type=int, default=0, metavar="REPEAT",
                        help="also time prepare_corpus.py on the shared corpora repeated REPEAT times, with 1 and "
                             "--workers workers")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--golden_rules", default="", metavar="PATH",
                        help="also score pySBD's English golden rules: its benchmarks/english_golden_rules.py")
    args = parser.parse_args()
    if not os.path.isdir(SHARED):
        sys.exit("shared data not found at %s (set BERT_SHARED_DIR)" % SHARED)
    if args.prepare_corpus:
        print("prepare_corpus.py, MB/s of input after imports (shared machine of %d cores):" % os.cpu_count())
        print("| input | MB | workers | MB/s | MB/s per worker |")
        print("|---|---|---|---|---|")
        for name, size, n, rate in prepare_corpus_speed(SHARED, args.prepare_corpus, args.workers):
            print("| %s | %.1f | %d | %.2f | %.2f |" % (name, size, n, rate, rate / n))
        return
    wanted = [n.strip() for n in args.only.split(",") if n.strip()] or list(CANDIDATES)
    sets = gold_sets(SHARED, args.golden_rules)
    splitters = {}
    for name in wanted:
        try:
            splitters[name] = {lang: CANDIDATES[name](lang) for lang in ("en", "zh")}
        except ImportError as err:
            print("skipped %s: %s" % (name, err))
    print("versions:", ", ".join("%s %s" % kv for kv in versions().items() if kv[1]))
    print("gold sets:", ", ".join("%s %d paragraphs, %d boundaries" % (
        name, len(cases), sum(len(c) - 1 for _, c in cases)) for name, (_, _, cases) in sets.items()))

    print("\nBoundary precision / recall (%):")
    print("| segmenter | " + " | ".join(sets) + " |")
    print("|" + "---|" * (len(sets) + 1))
    weak = {}
    for name, split in splitters.items():
        cells = []
        for set_name, (language, joiner, cases) in sets.items():
            table = score(split[language], cases, joiner)
            right = sum(r[0] for r in table.values())
            found = sum(r[1] for r in table.values())
            gold = sum(r[2] for r in table.values())
            cells.append("%.1f / %.1f" % (100 * ratio(right, found), 100 * ratio(right, gold)))
            if "tricky" in set_name:
                for section, (r, f, g, _) in table.items():
                    if min(ratio(r, f), ratio(r, g)) < 0.95:
                        weak.setdefault(name, []).append("%s: %s %.0f/%.0f" % (
                            set_name, section, 100 * ratio(r, f), 100 * ratio(r, g)))
            if args.errors:
                shown = [e for row in table.values() for e in row[3]][:args.errors]
                for text, predicted in shown:
                    print("    %s / %s: %r\n      -> %r" % (name, set_name, text[:300], predicted[:8]))
        print("| %s | %s |" % (name, " | ".join(cells)))
    print("\nTricky sections below 95 % precision or recall (set: section precision/recall):")
    for name in splitters:
        print("- %s: %s" % (name, "; ".join(weak.get(name, [])) or "none"))

    print("\nSpeed (MB/s of UTF-8 text on one core, median of %d interleaved rounds; shared machine):" % args.rounds)
    corpora = speed_paragraphs(SHARED, args.speed_bytes)
    times = {(name, corpus): [] for name in splitters for corpus, _, _ in corpora}
    for _ in range(args.rounds):
        for corpus, paragraphs, _ in corpora:
            for name, split in splitters.items():
                start = time.perf_counter()
                for paragraph in paragraphs:
                    split["en"](paragraph)
                times[(name, corpus)].append(time.perf_counter() - start)
    print("| segmenter | " + " | ".join("%s (%.2f MB)" % (c, size / 1e6) for c, _, size in corpora) + " |")
    print("|---|" + "---|" * len(corpora))
    for name in splitters:
        print("| %s | %s |" % (name, " | ".join(
            "%.2f" % (size / 1e6 / statistics.median(times[(name, corpus)])) for corpus, _, size in corpora)))


if __name__ == "__main__":
    main()
