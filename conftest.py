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

# The suite's shared fixtures (sessions' checkpoints and exports): tests/fixtures.py.
pytest_plugins = ["tests.fixtures"]


@pytest.fixture(autouse=True)
def absl_info_logging():
    """Every test starts with absl at INFO, as the scripts set it in main(): a test that parses absl flags
    in-process resets the verbosity (default WARNING), which would hide INFO records from later tests' caplog."""
    absl_logging.set_verbosity(absl_logging.INFO)
    yield


@pytest.fixture
def modeling_defaults():
    """For the tests of the original's API (modeling.py's namespace and settings; `pytestmark` of
    tests/test_original_*.py): the test starts with no variables of it (as a fresh TF1 graph) and ends with them
    gone and modeling's elementwise dtype back at its default, "float32"."""
    import modeling
    modeling.reset_variables()
    yield
    modeling.set_elementwise_dtype("float32")
    modeling.reset_variables()


# Markers of the tests that need a peer implementation (pytest.ini): not the product's own tests.
PEER_MARKERS = ("tf_models", "hf", "clients")
# Markers --without takes: the peers'.
WITHOUT_MARKERS = PEER_MARKERS

# The second TensorFlow's pass (scripts/test.sh: TensorFlow 2.20 beside the default 2.21) runs what can differ
# between TensorFlow versions while the project's code stays the same, and nothing else: the tests below, by
# what they hold, and those of the peer that installs only there (tf_models). Every other test runs once, on the
# default TensorFlow. A name is a test module, or a test in one (pytest's node id, without the parameters unless
# given).
SECOND_TF = {
    "the version checks and what loads at import": ["tests/test_versions.py"],
    "the checkpoint format, read and written by name": ["tests/test_checkpoints.py"],
    "tensorflow-text's ops: the in-graph tokenizer": ["tests/test_fast_tokenization.py"],
    "a SavedModel export and its signatures, loaded in a fresh process":
        ["tests/test_run_classifier.py::test_signatures_equal_do_predict_in_a_fresh_process"],
    "the serving graph's text limits and XLA's compiles": [
        "tests/test_serving.py::test_a_cut_text_keeps_the_first_tokens_of_the_original_tokenizer",
        "tests/test_serving.py::test_xla_module_traces_once_for_requests_of_every_batch_size_and_length",
        "tests/test_serving.py::test_serving_text_builds_no_dense_row_ids",
        "tests/test_serving.py::test_the_steps_branch_stays_a_function_in_a_loaded_export"],
    "TF Hub's SavedModels, as tf.saved_model.load and a strategy's scope open them": [
        "tests/test_tfhub_export.py::test_encoder_equals_ours_and_the_original",
        "tests/test_tfhub_export.py::test_preprocessor_equals_run_classifier_features",
        "tests/test_tfhub_export.py::test_loaded_under_a_strategy_scope_the_variables_are_distributed"],
    "the LiteRT converter": ["tests/test_litert_export.py::test_encoder_litert_models_answer_as_the_original"],
    "one training curve against the original's": [
        "tests/test_training_curves.py::test_finetuning_curve_equals_the_originals[run_classifier]"],
    "the rows of the peer tf-models-official in the GPU benchmark's dry run":
        ["tests/test_gpu_run.py::test_the_dry_run_writes_gpu_json_of_the_real_runs_shape"],
}


def _second_tf(item):
    """Whether the second TensorFlow's pass runs this test (SECOND_TF, or the peer tf-models-official's)."""
    if item.get_closest_marker("tf_models"):
        return True
    module, _, name = item.nodeid.partition("::")
    for names in SECOND_TF.values():
        for chosen in names:
            chosen_module, _, chosen_name = chosen.partition("::")
            if module == chosen_module and (not chosen_name or chosen_name in (name, name.split("[")[0])):
                return True
    return False


def pytest_addoption(parser):
    parser.addoption(
        "--without", default="", metavar="MARKER[,MARKER]",
        help="leave out (deselect) the tests carrying one of these markers: %s (scripts/test.sh runs the tests "
             "of tf-models-official on TensorFlow 2.20 only, those of HF and the clients on the default TensorFlow "
             "only)" % ", ".join(WITHOUT_MARKERS))
    parser.addoption(
        "--second-tf", action="store_true",
        help="run only what the second TensorFlow's pass runs (conftest.SECOND_TF: what can differ between "
             "TensorFlow versions, and the tests of tf-models-official)")
    parser.addoption(
        "--data-free", action="store_true",
        help="run the data-free subset: the tests that read the shared data folder (../shared or "
             "$BERT_SHARED_DIR) skip where it is missing without failing the run (under CI=true they still fail it)")


def _deselect(config, items, drop_if):
    keep, drop = [], []
    for item in items:
        (drop if drop_if(item) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _deselect_without(config, items):
    """Drops the tests marked with a --without marker; a marked test that stays runs, and fails where its peer
    is missing (no skip)."""
    names = [name.strip() for name in config.getoption("without").split(",") if name.strip()]
    unknown = sorted(set(names) - set(WITHOUT_MARKERS))
    if unknown:
        raise pytest.UsageError("--without: unknown marker(s) %s: expected some of %s"
                                % (", ".join(unknown), ", ".join(WITHOUT_MARKERS)))
    if names:
        _deselect(config, items, lambda item: any(item.get_closest_marker(name) for name in names))


def pytest_collection_modifyitems(config, items):
    """--without drops the tests of those peers, --second-tf all but the second TensorFlow's; tests marked gpu
    are skipped where TensorFlow sees no GPU."""
    _deselect_without(config, items)
    if config.getoption("second_tf"):
        _deselect(config, items, lambda item: not _second_tf(item))
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
    if not hasattr(config, "workerinput"):  # pytest-xdist's workers report to the run that started them
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
