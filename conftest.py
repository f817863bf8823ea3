"""Pytest setup: repository root on sys.path, --without (tests of a peer left out), and the tests that could not
run for want of the shared data folder (a failed run, unless --data-free outside CI)."""
import os
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest
from absl import logging as absl_logging

from tests import shared_data


@pytest.fixture(autouse=True)
def absl_info_logging():
    """Every test starts with absl at INFO, as the scripts set it in main(): a test that parses absl flags
    in-process resets the verbosity (default WARNING), which would hide INFO records from later tests' caplog."""
    absl_logging.set_verbosity(absl_logging.INFO)
    yield


@pytest.fixture(autouse=True)
def modeling_defaults():
    """Every test starts with no variables of modeling's original API (as a fresh TF1 graph) and ends with them
    gone and modeling's elementwise dtype back at its default, "float32": a job decides it for its device
    (device_setup.setup), and a test that sets up a GPU's ("compute") would leave it to the next tests."""
    modeling = sys.modules.get("modeling")
    if modeling is not None:
        modeling.reset_variables()
    yield
    modeling = sys.modules.get("modeling")
    if modeling is not None:
        modeling.set_elementwise_dtype("float32")
        modeling.reset_variables()


# Markers of the tests that need a peer implementation (pytest.ini): not the product's own tests.
PEER_MARKERS = ("tf_models", "hf", "clients")
# Markers --without takes: the peers', and that of the tests one TensorFlow's pass runs for both.
WITHOUT_MARKERS = PEER_MARKERS + ("default_tf", "second_tf")


def pytest_addoption(parser):
    parser.addoption(
        "--without", default="", metavar="MARKER[,MARKER]",
        help="leave out (deselect) the tests carrying one of these markers: %s (scripts/test.sh runs the tests "
             "of tf-models-official and second_tf on TensorFlow 2.20 only, those of HF and default_tf on the default "
             "TensorFlow only)" % ", ".join(WITHOUT_MARKERS))
    parser.addoption(
        "--data-free", action="store_true",
        help="run the data-free subset: the tests that read the shared data folder (../shared or "
             "$BERT_SHARED_DIR) skip where it is missing without failing the run (under CI=true they still fail it)")


def _deselect_without(config, items):
    """Drops the tests marked with a --without marker; a marked test that stays runs, and fails where its peer
    is missing (no skip)."""
    names = [name.strip() for name in config.getoption("without").split(",") if name.strip()]
    unknown = sorted(set(names) - set(WITHOUT_MARKERS))
    if unknown:
        raise pytest.UsageError("--without: unknown marker(s) %s: expected some of %s"
                                % (", ".join(unknown), ", ".join(WITHOUT_MARKERS)))
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



# Where a run writes its count of tests left out for want of the shared data and its last line (two lines; the
# line has {tests} for the count), when this variable names a file: scripts/test.sh sums its two passes in one.
DATA_REPORT_VARIABLE = "BERT_TEST_DATA_REPORT"


def pytest_configure(config):
    config.pluginmanager.register(MissingData(config), "missing_shared_data")


class MissingData:
    """Counts the tests that skipped for want of the shared data (shared_data.shared_path) and ends the run with
    one line saying how many, why and how to point them at the data; they fail the run under CI=true, and
    elsewhere unless --data-free."""

    def __init__(self, config):
        self.config = config
        self.paths = {}  # test id -> the shared path it lacked

    def pytest_runtest_logreport(self, report):
        marker = shared_data.MISSING_REASON + ": "
        if report.skipped and isinstance(report.longrepr, tuple) and marker in report.longrepr[2]:
            path = report.longrepr[2].split(marker, 1)[1].split(" (set BERT_SHARED_DIR)")[0]
            self.paths.setdefault(report.nodeid, path)

    def line(self):
        """The run's last line, {tests} standing for the number of tests."""
        if not os.path.isdir(shared_data.SHARED):
            what = f"the shared data folder {shared_data.SHARED} does not exist"
        else:
            paths = sorted(set(self.paths.values()))
            what = f"{len(paths)} of the paths they read are missing from the shared data folder (e.g. {paths[0]})"
        todo = ("set BERT_SHARED_DIR to the shared data folder (GLUE, SQuAD, CoNLL-2003, corpora and the "
                "original's reference outputs; default: ../shared beside the repository)")
        in_ci = os.environ.get("CI", "").lower() == "true"
        if in_ci:
            return f"error: {{tests}} could not run: {what}; CI=true needs them all: {todo}"
        if not self.config.getoption("data_free"):
            return f"error: {{tests}} could not run: {what}; {todo}, or pass --data-free to run the data-free subset"
        return f"data-free subset (--data-free): {{tests}} that read the shared data did not run: {what}; {todo}"

    def fails(self):
        return bool(self.paths) and self.line().startswith("error:")

    def pytest_sessionfinish(self, session, exitstatus):
        if self.fails() and exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        report = os.environ.get(DATA_REPORT_VARIABLE)
        if report:
            with open(report, "w", encoding="utf-8") as f:
                f.write(f"{len(self.paths)}\n{self.line() if self.paths else ''}\n")

    def pytest_unconfigure(self, config):
        """Writes the run's last line."""
        if not self.paths:
            return
        count = len(self.paths)
        line = self.line().replace("{tests}", "1 test" if count == 1 else f"{count} tests")
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(line)
        else:
            print(line, flush=True)
