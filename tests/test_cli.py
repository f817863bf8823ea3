"""cli.py: user errors as one line, TensorFlow's start-up noise dropped, files and folders named by flags."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

import cli
from tests.training_curves import onednn_on

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SCRIPT = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {root!r})
    import cli
    from absl import flags, logging

    flags.DEFINE_string("what", "user", "")

    def main(_):
        logging.info("progress stays")
        os.write(2, b"2026-11-23 12:00:00.123456: E tensorflow/core/common_runtime/base_collective_executor.cc:249] "
                    b"BaseCollectiveExecutor::StartAbort UNAVAILABLE: Socket closed\\n")
        os.write(2, b"Additional GRPC error information from remote target /job:worker/replica:0/task:1\\n")
        os.write(2, b":{{created_time:2026-11-23T12:00:00.1+00:00, grpc_status:14}}\\n")
        os.write(2, b"2026-11-23 E external/local_xla/cuda_platform.cc:51] failed call to cuInit: UNKNOWN (303)\\n")
        os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\\n")
        os.write(2, b"I0000 device_compiler.h:196] Compiled cluster using XLA!  This line is logged at most once\\n")
        os.write(2, b"a real C++ error line\\n")
        if flags.FLAGS.what == "user":
            raise cli.UserError("--vocab_file=x.txt: no such file\\nsecond line")
        if flags.FLAGS.what == "os":
            open("/nonexistent/folder/file.txt")
        if flags.FLAGS.what == "bug":
            raise ValueError("an internal invariant broke")
        print("done")

    cli.run(main)
""")


def _run(tmp_path, *args, **env):
    script = tmp_path / "script.py"
    script.write_text(_SCRIPT.format(root=ROOT))
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    environment.update(env)
    return subprocess.run([sys.executable, str(script)] + list(args), capture_output=True, text=True,
                          env=environment, timeout=120)


def test_user_error_is_one_line_with_status_2_and_noise_is_dropped(tmp_path):
    proc = _run(tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == "error: --vocab_file=x.txt: no such file second line"
    assert "Traceback" not in proc.stderr
    assert "a real C++ error line" in proc.stderr and "progress stays" in proc.stderr
    # The collectives' report of a lost worker, its lines up to the next log record (WARNING: ...) included.
    for noise in ("cuInit", "InitializeLog", "Compiled cluster", "StartAbort", "GRPC error", "grpc_status"):
        assert noise not in proc.stderr


def test_os_errors_name_the_file_and_bugs_keep_their_traceback(tmp_path):
    proc = _run(tmp_path, "--what=os")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == \
        "error: /nonexistent/folder/file.txt: No such file or directory"
    proc = _run(tmp_path, "--what=bug")
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "an internal invariant broke" in proc.stderr
    proc = _run(tmp_path, "--what=ok")
    assert proc.returncode == 0 and proc.stdout.strip() == "done"


def test_traceback_on_request_and_noise_kept_when_the_user_asks_for_tf_warnings(tmp_path):
    proc = _run(tmp_path, "--verbosity=1")
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "cli.UserError" in proc.stderr
    proc = _run(tmp_path, BERT_TRACEBACK="1")
    assert "Traceback" in proc.stderr
    proc = _run(tmp_path, TF_CPP_MIN_LOG_LEVEL="0")
    assert "failed call to cuInit" in proc.stderr
    proc = _run(tmp_path, TF_CPP_MIN_LOG_LEVEL="2")  # as scripts/setup.sh exports it
    assert "a real C++ error line" in proc.stderr and "failed call to cuInit" not in proc.stderr


def test_scripts_that_need_no_tensorflow_do_not_load_it():
    code = "import sys, cli, tokenization, create_pretraining_data; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_options_are_the_flags_with_their_names_defaults_and_help():
    import dataclasses

    from absl import flags

    @dataclasses.dataclass
    class Inner:
        rate: float = cli.option(None, "A rate.")
        hidden: int = cli.option(3, "Not a flag here.")

    @dataclasses.dataclass
    class Options:
        inner: Inner = cli.nested(Inner, exclude=("hidden",), required=("rate",))
        name: str = cli.option(None, "A name.", required=True)
        mode: str = cli.option("a", "A mode.", ("a", "b"))
        items: list = cli.option(("x", "y"), "Items.")
        request: list = cli.option(("hi",), "Repeated.", multi=True)
        internal: int = cli.option(7, flag=False)

    fv = flags.FlagValues()
    cli.define_flags(Options, flag_values=fv)
    assert sorted(fv) == ["items", "mode", "name", "rate", "request"]
    assert (fv["rate"].default, fv["rate"].help, fv["items"].default) == (None, "A rate.", ["x", "y"])
    with pytest.raises(flags.IllegalFlagValueError, match="--name must have a value"):
        fv(["prog", "--rate=1"])
    fv(["prog", "--name=n", "--rate=0.25", "--mode=b", "--items=p,q", "--request=one", "--request=two"])
    options = cli.options_from_flags(Options, fv)
    assert options == Options(inner=Inner(rate=0.25), name="n", mode="b", items=["p", "q"],
                              request=["one", "two"])
    assert cli.build_options(Options, name="m", rate=2.0, hidden=4).inner == Inner(rate=2.0, hidden=4)
    with pytest.raises(TypeError, match=r"Options has no option\(s\) \['nme'\]"):
        cli.build_options(Options, nme="typo")


_USER_SCRIPT = textwrap.dedent("""
    import logging, os, sys, threading
    from absl import logging as absl_logging

    def state():
        fd = os.fstat(2)
        return {"TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL"), "fd2": (fd.st_dev, fd.st_ino),
                "threads": sorted(t.name for t in threading.enumerate()),
                "handlers": [type(h).__name__ for h in logging.root.handlers], "level": logging.root.level,
                "absl": absl_logging.get_verbosity()}

    before = state()
    import modeling  # loads TensorFlow
    after = state()
    print(before == after, before, after, sep="\\n")
    os.write(2, b"2026-11-23 E external/local_xla/cuda_platform.cc:51] failed call to cuInit: from the user\\n")
""")


def test_importing_the_project_from_a_users_own_script_changes_nothing_of_its_stderr_or_logging():
    # A user's script in the project's folder (as the original's users placed theirs), TF_CPP_MIN_LOG_LEVEL unset.
    script = os.path.join(ROOT, f"user_script_{os.getpid()}.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(_USER_SCRIPT)
    try:
        proc = subprocess.run([sys.executable, script], capture_output=True, text=True, cwd=ROOT, timeout=300,
                              env={k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"})
    finally:
        os.remove(script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    same, before, _ = proc.stdout.splitlines()
    assert same == "True", proc.stdout  # environment, file descriptor 2, threads, logging handlers and levels
    assert "'TF_CPP_MIN_LOG_LEVEL': None" in before
    assert "failed call to cuInit: from the user" in proc.stderr  # nothing filters this process's stderr
    # TensorFlow's own start-up lines, as without the project (oneDNN's where this CPU runs it)
    assert ("oneDNN custom operations" in proc.stderr) == onednn_on(), proc.stderr[-3000:]


def test_the_projects_scripts_keep_their_quiet_console(tmp_path):
    # TensorFlow loads (and, TF_CPP_MIN_LOG_LEVEL unset, would log its start-up lines) before the error.
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "run_classifier.py"), "--task_name=cola", "--do_train",
                           f"--data_dir={tmp_path}", f"--vocab_file={tmp_path}/vocab.txt",
                           f"--bert_config_file={tmp_path}/missing.json", f"--output_dir={tmp_path}/out"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"})
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"error: --bert_config_file={tmp_path}/missing.json: no such file"]


def test_scripts_are_the_files_that_start_with_cli():
    def starts_with_cli(name):
        with open(os.path.join(ROOT, name), encoding="utf-8") as f:
            return re.search(r"^\s*cli\.(main|run)\(", f.read(), re.M) is not None

    started = [name for name in sorted(os.listdir(ROOT)) if name.endswith(".py") and name != "cli.py"
               and starts_with_cli(name)]
    assert started == sorted(cli.SCRIPTS)
