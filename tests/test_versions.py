"""The TensorFlow versions the project runs on: their requirements files, the check of the installed pair
(cli.py), the environment's version switch (scripts/setup.sh), and no module of ours in the way of a package."""
import glob
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAIR = ("tensorflow", "tensorflow-text", "tensorboard")  # the packages whose version goes with TensorFlow's


def _pins(name):
    """{package: version} of a requirements file's `package==version` lines."""
    pins = {}
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        for line in f:
            match = re.match(r"([A-Za-z0-9_.\[\]-]+)==(\S+)", line.split("#")[0].strip())
            if match:
                pins[match.group(1).lower()] = match.group(2)
    return pins


def _minor(version):
    return ".".join(version.split(".")[:2])


def _our_modules():
    """Top-level names that our files take when a script runs: the root's modules and packages, and the
    benchmarks' modules (a benchmark script puts benchmarks/ first on sys.path)."""
    names = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "*.py"))}
    names |= {os.path.basename(os.path.dirname(p)) for p in glob.glob(os.path.join(ROOT, "*", "__init__.py"))}
    names |= {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "benchmarks", "*.py"))}
    names.discard("conftest")  # pytest's, imported by path
    return names


def test_each_tensorflow_version_has_a_requirements_file_that_pins_its_pair():
    """requirements.txt (the default) and requirements-tfX.Y.txt pin TensorFlow X.Y with the tensorflow-text and
    TensorBoard of that version, and the same versions of everything else; the environment of this test run is
    one of them."""
    files = list(cli.TENSORFLOW_VERSIONS.items())
    assert files[0][1] == "requirements.txt"
    assert sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "requirements-tf[0-9]*.txt"))) == \
        sorted(f for _, f in files[1:])
    others = None
    for version, name in files:
        pins = _pins(name)
        assert {package: _minor(pins[package]) for package in PAIR} == dict.fromkeys(PAIR, version), name
        rest = {package: pin for package, pin in pins.items() if package not in PAIR}
        assert rest == (others if others is not None else rest), name
        others = rest
    assert "numpy" in others and "absl-py" in others
    installed = {package: importlib.metadata.version(package) for package in PAIR}
    assert any(installed == {package: _pins(name)[package] for package in PAIR} for _, name in files), installed
    assert _pins("requirements-gpu.txt")["tensorflow[and-cuda]"] == _pins("requirements.txt")["tensorflow"]
    # tf-models-official's environment is TensorFlow 2.20's (scripts/setup.sh).
    assert _minor(_pins("requirements-tf-models.txt")["tf-keras"]) == "2.20" and "2.20" in cli.TENSORFLOW_VERSIONS


@pytest.mark.parametrize("tensorflow, text, expected", [
    ("2.21.0", "2.21.1", None),
    ("2.20.0", "2.20.1", None),
    ("2.21.0", None, None),  # without tensorflow-text: its import fails on its own
    (None, "2.20.1", None),
    ("2.21.0", "2.20.1", "tensorflow 2.21.0 and tensorflow-text 2.20.1 do not go together (tensorflow-text 2.20 "
                         "is built for tensorflow 2.20 only): install one of the pairs this project runs on, "),
    ("2.20.0", "2.21.1", "tensorflow 2.20.0 and tensorflow-text 2.21.1 do not go together"),
    ("2.19.0", "2.19.0", "tensorflow 2.19.0 is not a version this project runs on: install "),
    ("2.22.0rc1", "2.22.0rc0", "tensorflow 2.22.0rc1 is not a version this project runs on"),
])
def test_which_versions_go_together(tensorflow, text, expected):
    problem = cli.tensorflow_version_problem(tensorflow, text)
    if expected is None:
        assert problem is None
    else:
        assert problem.startswith(expected) and "\n" not in problem
        assert problem.endswith("tensorflow 2.21 with tensorflow-text 2.21 (pip install -r requirements.txt) or "
                                "tensorflow 2.20 with tensorflow-text 2.20 (pip install -r requirements-tf2.20.txt)")


def _fake_distribution(folder, name, version):
    """Package metadata of `name` `version` alone (no code): first on PYTHONPATH, it is the version found."""
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_tensorflow_text_of_the_other_version_is_one_error_line(tmp_path):
    """With the tensorflow-text of the other TensorFlow version installed (its metadata first on the path), a
    script that loads TensorFlow stops before the import with one line naming the pairs, exit status 2; a script
    that runs without TensorFlow still runs; imported from elsewhere, the import raises that message."""
    installed = importlib.metadata.version("tensorflow")
    other = next(v for v in cli.TENSORFLOW_VERSIONS if v != _minor(installed))
    _fake_distribution(tmp_path, "tensorflow-text", other + ".1")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))

    def run(*args):
        return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=300)

    script = run("run_classifier.py", "--task_name=MRPC", "--output_dir=" + str(tmp_path / "out"))
    assert script.returncode == cli.EXIT_USER_ERROR, script.stderr
    assert script.stderr.startswith(f"error: tensorflow {installed} and tensorflow-text {other}.1 do not go "
                                    "together (")
    assert script.stderr.count("\n") == 1 and "requirements-tf2.20.txt" in script.stderr
    assert not (tmp_path / "out").exists()
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat",
                                                  "sat", "dog", "ran", "."]) + "\n")
    (tmp_path / "corpus.txt").write_text("the cat sat.\nthe dog ran.\n\nthe dog sat.\nthe cat ran.\n")
    records = run("create_pretraining_data.py", f"--input_file={tmp_path / 'corpus.txt'}",
                  f"--vocab_file={tmp_path / 'vocab.txt'}", f"--output_file={tmp_path / 'data.tfrecord'}",
                  "--dupe_factor=1", "--max_seq_length=16")
    assert records.returncode == 0, records.stderr
    assert (tmp_path / "data.tfrecord").stat().st_size > 0
    library = run("-c", "import run_classifier")
    assert library.returncode == 1
    assert f"cli.TensorFlowVersionError: tensorflow {installed} and tensorflow-text {other}.1" in library.stderr


def test_an_unknown_tensorflow_version_for_the_environment_is_one_error_line(tmp_path):
    result = subprocess.run(["bash", os.path.join(ROOT, "scripts", "main_job.sh")], cwd=tmp_path,
                            env=dict(os.environ, BERT_TF_VERSION="2.19"), capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert result.stderr == ("error: BERT_TF_VERSION=2.19: expected 2.21 (the default, requirements.txt) or 2.20 "
                             "(requirements-tf2.20.txt)\n")
    assert not (tmp_path / "output").exists() and result.stdout == ""


def test_main_job_sh_passes_its_own_arguments_to_main_job(tmp_path):
    """scripts/main_job.sh sets up its environment (the one of this test's TensorFlow) and hands every argument to
    main_job.py (none to setup.sh)."""
    version = _minor(importlib.metadata.version("tensorflow"))
    result = subprocess.run(["bash", os.path.join(ROOT, "scripts", "main_job.sh"),
                             f"--answer_export_dir={tmp_path / 'nowhere'}"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=600, env=dict(os.environ, BERT_TF_VERSION=version))
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (f"error: --answer_export_dir={tmp_path / 'nowhere'}: no such "
                                                      f"folder")


# Distributions known to install their own test suite as a top-level package `tests`.
_SHIPS_ITS_TESTS_AS_TESTS = {"tf2onnx"}


def test_no_module_here_has_the_name_of_an_installed_package_or_the_standard_librarys():
    """A module of ours found first on sys.path would stand in for a package of that name (litert.py did so for
    TensorFlow 2.21's `litert`)."""
    ours = _our_modules()
    assert {"cli", "run_classifier", "litert_classifier", "tests", "bench_finetuning"} <= ours
    distributions = importlib.metadata.packages_distributions()
    installed = set(distributions)
    assert {"tensorflow", "keras", "numpy"} <= installed
    # tf2onnx (a test client, requirements-clients.txt) installs its own test suite as a top-level `tests`, which
    # nothing imports; ours is found first from the project root. Any other package of that name still fails.
    if set(distributions.get("tests", ())) <= _SHIPS_ITS_TESTS_AS_TESTS:
        installed.discard("tests")
    assert sorted(ours & installed) == []
    assert sorted(ours & set(sys.stdlib_module_names)) == []


_RECORD_LOOKUPS = textwrap.dedent("""
    import json, sys

    class Record:
        names = set()

        @classmethod
        def find_spec(cls, fullname, path=None, target=None):
            cls.names.add(fullname.split(".")[0])
            return None

    sys.meta_path.insert(0, Record)
    import keras, tensorflow as tf, tensorflow_text
    tf.keras.layers.Dense, tf.lite.TFLiteConverter
    with tf.summary.create_file_writer("summaries").as_default():
        tf.summary.scalar("loss", 1.0, step=0)
    from ai_edge_litert import interpreter
    print(json.dumps(sorted(Record.names)))
""")


def test_importing_tensorflow_keras_and_tensorflow_text_looks_up_no_module_of_ours(tmp_path):
    """Every top-level name that TensorFlow, Keras, tensorflow-text, TensorBoard's summaries and the LiteRT
    interpreter look up while they load, found or not (TensorFlow 2.21 tries `litert` first, which is not
    installed here), is none of our modules' names: run from the project root, the scripts import them."""
    result = subprocess.run([sys.executable, "-c", _RECORD_LOOKUPS], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300, env=dict(os.environ, PYTHONPATH=""))
    assert result.returncode == 0, result.stderr
    looked_up = set(json.loads(result.stdout.splitlines()[-1]))
    assert {"tensorflow", "keras", "tensorflow_text", "tensorboard", "numpy", "google"} <= looked_up
    assert sorted(looked_up & _our_modules()) == []


def test_a_failed_install_ends_the_test_command_before_pytest_with_one_line_per_environment(tmp_path):
    """scripts/test.sh runs each pass's setup where `set -e` is off (its status is tested): a pip install that
    fails (a full disk, a missing package) still ends that pass with setup.sh's error line, before pytest, and
    leaves no stamp that would skip the install next time."""
    os.mkdir(tmp_path / "scripts")
    for name in ("setup.sh", "test.sh"):
        with open(os.path.join(ROOT, "scripts", name), encoding="utf-8") as f:
            (tmp_path / "scripts" / name).write_text(f.read())
    for name in ("requirements-dev.txt", "requirements-hf.txt", "requirements-clients.txt",
                 "requirements-tf-models.txt"):
        (tmp_path / name).write_text("")
    for name, version in (("requirements.txt", "2.21.0"), ("requirements-tf2.20.txt", "2.20.0")):
        (tmp_path / name).write_text(f"tensorflow=={version}\nno-such-package-of-the-bert-tests==1.0\n")
    env = {k: v for k, v in os.environ.items() if k != "BERT_TF_VERSION"}  # both passes, whatever the user set
    result = subprocess.run(["bash", str(tmp_path / "scripts" / "test.sh")], cwd=tmp_path, capture_output=True,
                            text=True, timeout=600, env=dict(env, PYTHON=sys.executable))
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    for venv, files in ((".venv", "requirements.txt requirements-dev.txt requirements-hf.txt requirements-clients.txt"),
                        (".venv-tf2.20", "requirements-tf2.20.txt requirements-dev.txt requirements-tf-models.txt")):
        assert f"error: scripts/setup.sh: pip could not install {files} into {tmp_path / venv} " in output
        assert not glob.glob(str(tmp_path / venv / ".setup-stamp-*"))
    assert "[test] TensorFlow 2.21: exit status 1; TensorFlow 2.20: exit status 1" in output
    assert "python -m pytest" not in output
