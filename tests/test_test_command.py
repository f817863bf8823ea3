"""scripts/test.sh and conftest.py without the shared data: a copy of the repository with no ../shared beside it
fails with one last line saying how many tests could not run, why and what to do; --data-free passes (never
under CI=true). Each pass's environment is a stand-in that runs this interpreter (its pip does nothing), and
pytest runs two tests of the copy's own, in place of its tests/test_versions.py: a module that both TensorFlow
versions' passes run (conftest.SECOND_TF)."""
import os
import shutil
import stat
import subprocess
import sys

import pytest

import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = next(iter(cli.TENSORFLOW_VERSIONS))  # the first pass's TensorFlow; the second pass's is 2.20
PASSES = f"1 on TensorFlow {DEFAULT}, 1 on TensorFlow 2.20"

SAMPLE_TESTS = '''
from tests.shared_data import shared_path


def test_reads_the_shared_data():
    with open(shared_path("sample.txt"), encoding="utf-8") as f:
        assert f.read() == "sample\\n"


def test_reads_nothing():
    assert 1 + 1 == 2
'''


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """The repository's files (no environments, outputs or git) in tmp/repo, with no tmp/shared beside it; its
    environments (.venv, .venv-tf2.20) run this interpreter, and `python -m pip` there does nothing."""
    repo = tmp_path_factory.mktemp("clone") / "repo"
    shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns(".git", ".venv*", "output", "__pycache__",
                                                              ".pytest_cache", "*.egg-info"))
    (repo / "tests" / "test_versions.py").write_text(SAMPLE_TESTS, encoding="utf-8")
    for venv in (".venv", ".venv-tf2.20"):
        python = repo / venv / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text(f'#!/bin/sh\nif [ "$1 $2" = "-m pip" ]; then exit 0; fi\nexec "{sys.executable}" "$@"\n')
        python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return repo


def _test_command(repo, *args, **env):
    """Runs the copy's scripts/test.sh on its sample tests; returns (exit status, output lines)."""
    environ = {k: v for k, v in os.environ.items()
               if k not in ("CI", "BERT_SHARED_DIR", "BERT_TF_VERSION", "BERT_TEST_DATA_REPORT")}
    environ.update(env)
    result = subprocess.run(["bash", str(repo / "scripts" / "test.sh"), "-p", "no:cacheprovider",
                             "tests/test_versions.py", *args], cwd=repo, env=environ, capture_output=True,
                            text=True, timeout=600)
    return result.returncode, (result.stdout + result.stderr).strip().splitlines()


def test_without_the_shared_data_the_test_command_fails_with_one_last_line(clone):
    shared = clone.parent / "shared"
    todo = ("set BERT_SHARED_DIR to the shared data folder (GLUE, SQuAD, CoNLL-2003, corpora and the original's "
            "reference outputs; default: ../shared beside the repository)")
    status, lines = _test_command(clone)
    assert status == 1, "\n".join(lines[-30:])
    assert lines[-1] == (f"error: 2 tests ({PASSES}) could not run: the shared "
                         f"data folder {shared} does not exist; {todo}, or pass --data-free to run the data-free "
                         "subset")
    assert sum("1 passed, 1 skipped" in line for line in lines) == 2  # each pass ran the test that needs no data

    # One version's pass alone: pytest's own last line.
    status, lines = _test_command(clone, BERT_TF_VERSION="2.20")
    assert status == 1 and lines[-1].startswith("error: 1 test could not run: the shared data folder "), lines[-5:]

    # The data-free subset, asked for by name: it passes, and says what did not run.
    status, lines = _test_command(clone, "--data-free")
    assert status == 0, "\n".join(lines[-30:])
    assert lines[-1] == (f"data-free subset (--data-free): 2 tests ({PASSES}) that "
                         f"read the shared data did not run: the shared data folder {shared} does not exist; {todo}")

    # Under CI the data is required, --data-free or not.
    status, lines = _test_command(clone, "--data-free", CI="true")
    assert status == 1 and lines[-1].startswith(f"error: 2 tests ({PASSES}) could "
                                                f"not run: the shared data folder {shared} does not exist; CI=true "
                                                "needs them all: set BERT_SHARED_DIR"), lines[-5:]


def test_with_the_shared_data_every_test_runs(clone, tmp_path):
    (tmp_path / "sample.txt").write_text("sample\n", encoding="utf-8")
    status, lines = _test_command(clone, CI="true", BERT_SHARED_DIR=str(tmp_path))
    assert status == 0, "\n".join(lines[-30:])
    assert sum("2 passed" in line for line in lines) == 2
    assert not any("could not run" in line or "did not run" in line for line in lines)
    # A path missing from the folder counts as well.
    os.remove(tmp_path / "sample.txt")
    status, lines = _test_command(clone, BERT_SHARED_DIR=str(tmp_path))
    assert status == 1
    assert lines[-1].startswith(f"error: 2 tests ({PASSES}) could not run: 1 of "
                                f"the paths they read are missing from the shared data folder (e.g. "
                                f"{tmp_path / 'sample.txt'}); set BERT_SHARED_DIR"), lines[-5:]
