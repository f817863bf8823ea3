"""The README's main job: the whole BERT pipeline end to end on a built-in corpus, with no download.

Stages: (1) a pre-training corpus from the docstrings of Python's standard library (real text present on any
machine with Python), (2) a WordPiece vocab (build_vocab.py), (3) masked-LM / next-sentence data
(create_pretraining_data.py), (4) pre-training a small BERT (run_pretraining.py on training.py), (5) a
classification task from the same source (which standard-library package a docstring sentence documents),
fine-tuned, evaluated and exported as a SavedModel (run_classifier.py), (6) a raw-text request answered by the
exported model in a fresh process.

Flags take the user's own corpus (--corpus_file), vocab (--vocab_file), checkpoint (--init_checkpoint with
--bert_config_file) and classification data (--task_data_dir).
"""
import ast
import collections
import inspect
import os
import random
import re
import sys
import sysconfig

from absl import app
from absl import flags
from absl import logging

FLAGS = flags.FLAGS

# Packages whose docstring sentences form the built-in classification task (all pure Python, always shipped).
DEFAULT_LABELS = ("asyncio", "email", "importlib", "logging", "unittest")

# Parts of the standard library tree that are not library documentation.
_SKIPPED_DIRS = frozenset(["test", "tests", "idle_test", "__pycache__", "site-packages", "dist-packages",
                           "_bundled", "turtledemo"])

_ABBREVIATIONS = frozenset(["e.g.", "i.e.", "etc.", "vs.", "cf.", "resp.", "approx.", "Mr.", "Dr.", "No.",
                            "ca.", "al.", "Ph.D."])


# ----------------------------------------------------------------------------------------------------------
# Corpus: docstrings of the standard library.
# ----------------------------------------------------------------------------------------------------------
def stdlib_dir():
    """Folder holding the running interpreter's standard library sources."""
    return sysconfig.get_paths()["stdlib"]


def stdlib_source_files(root=None):
    """Sorted list of (module_name, path) for the pure-Python standard-library modules under `root`."""
    root = root or stdlib_dir()
    if not os.path.isdir(root):
        raise FileNotFoundError(f"standard library folder not found: {root}")
    known = set(getattr(sys, "stdlib_module_names", ())) or None
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        parts = [] if rel == "." else rel.split(os.sep)
        if parts and (parts[0] not in known if known else "-" in parts[0]):
            dirnames[:] = []
            continue
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            stem = name[:-3]
            if not parts and known and stem not in known:
                continue
            module = ".".join(parts + ([] if stem == "__init__" else [stem]))
            found.append((module, os.path.join(dirpath, name)))
    found.sort()
    return found


def source_docstrings(path):
    """Docstrings of the module, its classes and functions in source order; [] if the file does not parse."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
    except (SyntaxError, UnicodeDecodeError, ValueError) as e:
        logging.info("skipping %s: %s", path, e)
        return []
    nodes = [n for n in ast.walk(tree)
             if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    nodes.sort(key=lambda n: getattr(n, "lineno", 0))
    docs = []
    for node in nodes:
        doc = ast.get_docstring(node, clean=False)
        if doc:
            docs.append(inspect.cleandoc(doc))
    return docs


def _prose_paragraphs(doc):
    """Paragraphs of running text in a docstring: code, doctests, tables and markup blocks left out."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", doc):
        lines = block.split("\n")
        if not lines or lines[0].startswith((" ", "\t")):
            continue  # indented: code, argument lists, literal blocks
        kept = []
        for line in lines:
            stripped = line.strip()
            if stripped.startswith((">>>", "...", ".. ", "::", "--", "==", "~~", "+-", "|", "$ ", "#")):
                break
            if line.startswith((" ", "\t")) and kept and kept[-1].endswith(":"):
                break
            kept.append(stripped)
        if kept:
            paragraphs.append(" ".join(kept))
    return paragraphs


def split_sentences(text):
    """Splits running text after ., ! or ? followed by a space and an upper-case letter (abbreviations kept)."""
    sentences, start = [], 0
    for m in re.finditer(r"[.!?][\"')\]]*\s+(?=[A-Z\"'(])", text):
        words = text[start:m.start() + 1].split()
        last_word = words[-1].lstrip("(\"'[") if words else ""
        if last_word in _ABBREVIATIONS or re.fullmatch(r"[A-Z]\.", last_word):
            continue
        sentences.append(text[start:m.end()].strip())
        start = m.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


def is_prose_sentence(sentence, min_words=4, max_words=80):
    """True for a sentence of words (not code, signatures or symbols) ending like a sentence."""
    words = sentence.split()
    if not min_words <= len(words) <= max_words:
        return False
    if not sentence[0].isupper() or sentence[-1] not in ".!?:" or sentence.endswith("::"):
        return False
    letters = sum(c.isalpha() or c == " " for c in sentence)
    if letters < 0.8 * len(sentence):
        return False
    return sum(bool(re.fullmatch(r"[A-Za-z][a-z'-]*[,.;:!?]?", w)) for w in words) >= 0.6 * len(words)


def docstring_sentences(doc):
    """Prose sentences of one docstring."""
    out = []
    for paragraph in _prose_paragraphs(doc):
        out.extend(s for s in split_sentences(paragraph) if is_prose_sentence(s))
    return out


def stdlib_documents(root=None):
    """Ordered {module_name: [sentences]} of the standard library's docstrings; modules without prose left out."""
    documents = collections.OrderedDict()
    for module, path in stdlib_source_files(root):
        sentences = []
        for doc in source_docstrings(path):
            sentences.extend(docstring_sentences(doc))
        if sentences:
            documents[module] = sentences
    if not documents:
        raise ValueError(f"no docstring sentences found in the standard library at {root or stdlib_dir()}")
    return documents


def write_corpus(documents, path, exclude=()):
    """Writes documents as one sentence per line, a blank line between documents (create_pretraining_data's
    input format). Sentences in `exclude` are left out (logged); returns (documents, sentences) written."""
    exclude = set(exclude)
    n_docs = n_sent = n_excluded = 0
    with open(path, "w", encoding="utf-8") as f:
        for sentences in documents.values():
            kept = [s for s in sentences if s not in exclude]
            n_excluded += len(sentences) - len(kept)
            if not kept:
                continue
            f.write("\n".join(kept) + "\n\n")
            n_docs += 1
            n_sent += len(kept)
    if n_excluded:
        logging.info("corpus %s: left out %d sentences held out for classifier evaluation", path, n_excluded)
    return n_docs, n_sent


def read_corpus(path):
    """Reads a corpus file (one sentence per line, blank line between documents) into a list of documents."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--corpus_file: no such file: {path}")
    documents, current = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                current.append(line)
            elif current:
                documents.append(current)
                current = []
    if current:
        documents.append(current)
    if not documents:
        raise ValueError(f"--corpus_file {path} holds no text (expected one sentence per line, "
                         "blank lines between documents)")
    return documents


# ----------------------------------------------------------------------------------------------------------
# Classification task: which package a docstring sentence documents.
# ----------------------------------------------------------------------------------------------------------
def package_sentences(documents, labels):
    """{label: sorted unique sentences} of the documents whose top-level package is `label`. A sentence
    found under two labels is ambiguous and dropped (logged)."""
    by_label = {label: set() for label in labels}
    for module, sentences in documents.items():
        top = module.split(".")[0]
        if top in by_label:
            by_label[top].update(sentences)
    owners = collections.Counter(s for group in by_label.values() for s in group)
    ambiguous = {s for s, n in owners.items() if n > 1}
    if ambiguous:
        logging.info("classification data: dropped %d sentences found under more than one package",
                     len(ambiguous))
    return {label: sorted(group - ambiguous) for label, group in by_label.items()}


def build_classification_splits(documents, labels=DEFAULT_LABELS, per_label=None, dev_fraction=0.2,
                                test_fraction=0.1, min_per_label=20, seed=12345):
    """Balanced (sentence, label) train/dev/test splits of the package task.

    Each label gets the same number of sentences (the smallest label's count, or `per_label` if smaller),
    drawn with a fixed seed; the rest of each label's sentences are not used (logged).
    """
    if len(labels) < 2:
        raise ValueError(f"--labels: need at least two packages, got {list(labels)}")
    groups = package_sentences(documents, labels)
    counts = {label: len(group) for label, group in groups.items()}
    too_small = [label for label, n in counts.items() if n < min_per_label]
    if too_small:
        raise ValueError(f"--labels: packages {too_small} have fewer than {min_per_label} docstring sentences "
                         f"(counts: {counts})")
    n = min(counts.values())
    if per_label:
        n = min(n, per_label)
    rng = random.Random(seed)
    splits = {"train": [], "dev": [], "test": []}
    n_test = max(1, int(round(n * test_fraction)))
    n_dev = max(1, int(round(n * dev_fraction)))
    for label in labels:
        group = list(groups[label])
        rng.shuffle(group)
        if len(group) > n:
            logging.info("classification data: using %d of %d sentences of %s (balanced classes)",
                         n, len(group), label)
        chosen = group[:n]
        splits["test"].extend((s, label) for s in chosen[:n_test])
        splits["dev"].extend((s, label) for s in chosen[n_test:n_test + n_dev])
        splits["train"].extend((s, label) for s in chosen[n_test + n_dev:])
    for rows in splits.values():
        rng.shuffle(rows)
    return splits


def write_tsv(rows, path):
    """Writes (sentence, label) rows as `label<TAB>sentence` lines under a header."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("label\tsentence\n")
        for sentence, label in rows:
            if "\t" in sentence or "\n" in sentence:
                raise ValueError(f"sentence for {path} holds a tab or newline: {sentence!r}")
            f.write(f"{label}\t{sentence}\n")


# ----------------------------------------------------------------------------------------------------------
# The pipeline: each stage is the project's own script, run with its flags in a child process.
# ----------------------------------------------------------------------------------------------------------
ROOT = os.path.dirname(os.path.abspath(__file__))


class Progress(object):
    """Numbered stage headers with elapsed time; child output streamed with a prefix and kept in a log."""

    def __init__(self, num_stages, log_dir):
        import time
        self._time = time.time
        self.start = time.time()
        self.num_stages = num_stages
        self.stage = 0
        self.log_dir = log_dir

    def header(self, title):
        self.stage += 1
        print(f"\n[main_job {self.elapsed()}] stage {self.stage}/{self.num_stages}: {title}", flush=True)

    def note(self, text):
        print(f"[main_job {self.elapsed()}]   {text}", flush=True)

    def elapsed(self):
        seconds = int(self._time() - self.start)
        return f"{seconds // 60:02d}:{seconds % 60:02d}"


def run_script(progress, name, script, args, show=None):
    """Runs `python script args` from the repository root; streams lines matching `show` (all if None) and
    writes everything to LOG_DIR/name.log. Raises RuntimeError naming the log on failure."""
    import subprocess
    os.makedirs(progress.log_dir, exist_ok=True)
    log_path = os.path.join(progress.log_dir, name + ".log")
    cmd = [sys.executable, os.path.join(ROOT, script)] + [str(a) for a in args]
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    pattern = re.compile(show) if show else None
    with open(log_path, "w", encoding="utf-8") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, encoding="utf-8", errors="replace")
        tail = collections.deque(maxlen=30)
        for line in proc.stdout:
            log.write(line)
            tail.append(line)
            if pattern is None or pattern.search(line):
                print("    | " + _strip_log_prefix(line.rstrip()), flush=True)
        code = proc.wait()
    if code != 0:
        raise RuntimeError(f"stage {name!r} failed (exit code {code}); command and output in {log_path}:\n"
                           + "".join(tail))
    return log_path


def _strip_log_prefix(line):
    """Drops absl's `I1122 00:21:05.123456 12345 file.py:12]` prefix for the console."""
    return re.sub(r"^[IWEF]\d{4} [\d:.]+\s+\d+ [^\]]+\] ", "", line)
