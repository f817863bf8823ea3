"""The suite's shared fixtures (a pytest plugin of conftest.py): what several test modules read, made once per
run of the suite, whichever of pytest-xdist's worker processes needs it first (made_once). A test that only
reads one of these folders never writes into it; a job of its own that starts from one takes its checkpoint as
--init_checkpoint and writes to an output folder of its own."""
import fcntl
import json
import os
import shutil

import pytest

from tests import processes, tiny
from tests.shared_data import glue, vocab

def made_once(tmp_path_factory, name, make):
    """make(folder) (a JSON value: paths and words) for the whole run: in the run's shared temporary folder, by the
    first process that asks (pytest-xdist's workers share that folder; the others wait for it under a lock and
    read what it made); a failed make leaves nothing, and the next process to ask makes it again."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the workers' basetemps are folders of the run's
    folder, result = root / f"shared_{name}", root / f"shared_{name}.json"
    with open(root / f"shared_{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if result.exists():
            with open(result, encoding="utf-8") as f:
                return json.load(f)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        value = make(folder)
        with open(result, "w", encoding="utf-8") as f:
            json.dump(value, f)
        return value


# The MRPC classifier's sequence length: MRPC pairs go up to about 100 pieces, so the text signature must
# truncate as the Python path does.
MRPC_MAX_SEQ_LENGTH = 64


@pytest.fixture(scope="session")
def mrpc_classifier(tmp_path_factory):
    """A random tiny MRPC classifier (tests/tiny.py's config with 2 token types and initializer_range 0.2, its
    output weights x20 and bias [0.3, -0.2], so that its probabilities differ clearly from pair to pair), saved as
    a job's output folder holds it, and a data folder whose test.tsv is MRPC dev. A dict: config_file,
    output_dir, checkpoint (its prefix), data_dir, vocab_file, max_seq_length."""

    def make(work):
        data_dir = work / "data"
        data_dir.mkdir()
        shutil.copy(os.path.join(glue("MRPC"), "dev.tsv"), data_dir / "test.tsv")
        values = dict(type_vocab_size=2, initializer_range=0.2)
        config_file = tiny.config_file(work / "bert_config.json", **values)
        model = tiny.random_classifier(tiny.config(**values), seed=7, bias=[0.3, -0.2])
        output_dir = work / "output"
        checkpoint = tiny.save(model, output_dir)
        return {"config_file": config_file, "output_dir": str(output_dir), "checkpoint": checkpoint,
                "data_dir": str(data_dir), "vocab_file": vocab(), "max_seq_length": MRPC_MAX_SEQ_LENGTH}

    return made_once(tmp_path_factory, "mrpc_classifier", make)


@pytest.fixture(scope="session")
def mrpc_export(mrpc_classifier, tmp_path_factory):
    """mrpc_classifier exported by the command a user types, `run_classifier.py --export_dir` (float32, whole
    rows per step as by default, no training). A dict: export_dir, log (the command's stderr)."""

    def make(work):
        job = mrpc_classifier
        proc = processes.assert_ran(processes.run_script(
            "run_classifier.py", "--task_name=MRPC", f"--vocab_file={job['vocab_file']}",
            f"--bert_config_file={job['config_file']}", f"--init_checkpoint={job['checkpoint']}",
            f"--max_seq_length={job['max_seq_length']}", f"--output_dir={work / 'output'}",
            f"--export_dir={work / 'saved_model'}", quiet=True))
        return {"export_dir": str(work / "saved_model"), "log": proc.stderr}

    return made_once(tmp_path_factory, "mrpc_export", make)


@pytest.fixture
def float32_policy():
    """Keras's dtype policy back at float32 after the test (a job sets it for its --dtype)."""
    yield
    import keras
    keras.config.set_dtype_policy("float32")


# The uninterrupted run that the runs of the same command stopped, killed or resumed must end as.
PRETRAINING_STEPS = 250


@pytest.fixture(scope="session")
def pretraining_run(tmp_path_factory):
    """One uninterrupted run of run_pretraining.py's command line (tests/tiny.py's pretraining_command: a one-layer
    model of 32, dropout 0.1, PRETRAINING_STEPS steps with 20 of warm-up), a progress line every half second
    (--log_every_secs=0.5; the step cadence out of the way: --log_step_count_steps=1000), TensorBoard scalars
    every 100 steps and a checkpoint at its start and its end. A dict: config_file (the model's, for the runs
    compared with this one), output_dir, log (its stderr), steps, weights (the last checkpoint's, by name)."""
    import subprocess
    import checkpoints

    def make(work):
        config_file = tiny.config_file(work / "bert_config.json", num_hidden_layers=1, type_vocab_size=2)
        output_dir = str(work / "out")
        proc = processes.assert_ran(subprocess.run(
            tiny.pretraining_command(config_file, output_dir, PRETRAINING_STEPS, "--log_every_secs=0.5",
                                     "--log_step_count_steps=1000", "--save_checkpoints_steps=1000"),
            env=processes.script_env(), cwd=processes.ROOT, capture_output=True, text=True, timeout=900))
        return {"config_file": config_file, "output_dir": output_dir, "log": proc.stderr,
                "steps": PRETRAINING_STEPS}

    run = made_once(tmp_path_factory, "pretraining_run", make)
    run["weights"] = checkpoints.load_checkpoint(os.path.join(run["output_dir"], f"model.ckpt-{PRETRAINING_STEPS}"))
    return run
