"""Pytest setup: repository root on sys.path, the shared data folder, and --without (tests of a peer left out)."""
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


@pytest.fixture(autouse=True)
def default_elementwise_dtype():
    """Every test ends with modeling's elementwise dtype back at its default, "float32": a job decides it for its
    device (device_setup.setup), and a test that sets up a GPU's ("compute") would leave it to the next tests."""
    yield
    modeling = sys.modules.get("modeling")
    if modeling is not None:
        modeling.set_elementwise_dtype("float32")


# Markers of the tests that need a peer implementation (pytest.ini): not the product's own tests.
PEER_MARKERS = ("tf_models", "hf")


def pytest_addoption(parser):
    parser.addoption(
        "--without", default="", metavar="MARKER[,MARKER]",
        help="leave out (deselect) the tests carrying one of these markers: %s (scripts/test.sh runs the tests "
             "of tf-models-official on TensorFlow 2.20 only, those of HF on the default TensorFlow only)"
             % ", ".join(PEER_MARKERS))


def _deselect_without(config, items):
    """Drops the tests marked with a --without marker; a marked test that stays runs, and fails where its peer
    is missing (no skip)."""
    names = [name.strip() for name in config.getoption("without").split(",") if name.strip()]
    unknown = sorted(set(names) - set(PEER_MARKERS))
    if unknown:
        raise pytest.UsageError("--without: unknown marker(s) %s: expected some of %s"
                                % (", ".join(unknown), ", ".join(PEER_MARKERS)))
    if not names:
        return
    keep, drop = [], []
    for item in items:
        (drop if any(item.get_closest_marker(name) for name in names) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collection_modifyitems(config, items):
    """--without drops the tests of those peers; tests marked gpu are skipped where TensorFlow sees no GPU."""
    _deselect_without(config, items)
    gpu_tests = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_tests:
        return
    import tensorflow as tf
    if tf.config.list_physical_devices("GPU"):
        return
    skip = pytest.mark.skip(reason="needs a GPU; TensorFlow sees none here")
    for item in gpu_tests:
        item.add_marker(skip)
