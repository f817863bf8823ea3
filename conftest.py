"""Pytest setup: repository root on sys.path, and the shared data folder."""
import os
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest
from absl import logging as absl_logging


@pytest.fixture(autouse=True)
def absl_info_logging():
    """Every test starts with absl at INFO, as the scripts set it in main(): a test that parses absl flags
    in-process resets the verbosity (default WARNING), which would hide INFO records from later tests' caplog."""
    absl_logging.set_verbosity(absl_logging.INFO)
    yield


def pytest_collection_modifyitems(config, items):
    """Tests marked gpu are skipped where TensorFlow sees no GPU."""
    gpu_tests = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_tests:
        return
    import tensorflow as tf
    if tf.config.list_physical_devices("GPU"):
        return
    skip = pytest.mark.skip(reason="needs a GPU; TensorFlow sees none here")
    for item in gpu_tests:
        item.add_marker(skip)
