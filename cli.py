"""How every script starts and ends: options declared once, quiet TensorFlow, user errors as one line, files
named by flags on any file system.

A script declares its flags as an options dataclass (fields made with option(), and nested() for another
options class such as training.TrainingConfig) and ends with

    if __name__ == "__main__":
        cli.main(MyOptions, run)

which defines the flags (define_flags: each field's name, default and help), and runs run(options) under
absl with INFO logging (unless --verbosity is given). Import this module before TensorFlow: in one of the
project's scripts (SCRIPTS, and benchmarks/), unless the user set TF_CPP_MIN_LOG_LEVEL, it sets it to 2
(TensorFlow's C++ INFO and WARNING lines off), and it drops the start-up noise no log level hides (the cuInit
error on machines without a GPU, absl's "before InitializeLog" warning, XLA's "Compiled cluster" line,
TensorFlow 2.21's INFO lines as it loads) unless that level is 0 or 1, from the script's import of TensorFlow
on. Imported by any other program (a user's own script, even one in the project's folder), it changes nothing
of that process's environment, stderr or logging until the program calls run() or main(). A `UserError` (a
flag value, a missing or malformed file, bad data), an operating-system error on a named file, or TensorFlow's error on one (a missing
gs:// object) becomes one line `error: ...` on stderr with exit status 2; a run `Stopped` early (preempted, a
worker lost) one line with its own exit status. Internal errors keep their traceback; `--verbosity=1` or
BERT_TRACEBACK=1 shows it for user errors too.

This module never imports TensorFlow (create_pretraining_data.py and build_vocab.py run without it); files and
folders named by flags are filesystem.py's.

Before TensorFlow or tensorflow-text is first imported, the installed versions are checked (from their package
metadata): tensorflow-text X.Y goes with TensorFlow X.Y only, and this project runs on the TensorFlow versions of
TENSORFLOW_VERSIONS. Another installation ends a script with one `error: ...` line (exit status 2) saying which
versions go together, instead of an import traceback; imported from elsewhere, the import raises
TensorFlowVersionError with that line.
"""
import atexit
import dataclasses
import functools
import importlib.metadata
import os
import re
import sys
import threading

from absl import app
from absl import flags
from absl import logging

TRACEBACK_ENV = "BERT_TRACEBACK"
EXIT_USER_ERROR = 2

# TensorFlow lines that TF_CPP_MIN_LOG_LEVEL=2 does not hide and that say nothing to the user; among them
# TensorFlow 2.21's INFO and WARNING lines from before absl's logging is set up (its C++ code logs through absl;
# such a line is stamped "0000 00:00:<seconds since 1970>", and TF_CPP_MIN_LOG_LEVEL does not apply yet).
_NOISE = re.compile(rb"failed call to cuInit|All log messages before absl::InitializeLog\(\)|"
                    rb"Compiled cluster using XLA!|oneDNN supports DT_INT64 only on platforms with AVX-512|"
                    rb"grpc_server_lib\.cc:\d+\] Started server with target|"
                    rb"^[IW]0000 00:00:\d+\.\d+ +\d+ \S+:\d+\] ")
# The collectives' report of a lost worker (several lines each), which preemption.WorkerLost says in one line.
_NOISE_BLOCK = re.compile(rb"^\S+ \S+: E tensorflow/core/common_runtime/(base_collective_executor|ring_alg)\.cc")
_LOG_RECORD = re.compile(rb"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|[IWEF]\d{4} |[A-Za-z]+: |[A-Z]+:\w|Traceback )")


class UserError(ValueError):
    """A problem with the user's flags, files or data; a script shows it as one `error: ...` line."""


class MissingFileError(UserError, FileNotFoundError):
    """A file or folder named by a flag does not exist."""


class Stopped(Exception):
    """The run stopped before its end for a reason outside the program (a preemption notice, a lost worker),
    with what it kept; rerunning the same command resumes. A script prints `prefix: message` as one line and exits
    with `exit_status`."""

    prefix = "error"
    exit_status = 1


# ---------------------------------------------------------------------------------------------------------
# TensorFlow and tensorflow-text versions.

# The TensorFlow versions this project runs on, each with the tensorflow-text of the same version, and the
# requirements file that installs them (the first: the default, which scripts/setup.sh installs).
TENSORFLOW_VERSIONS = {"2.21": "requirements.txt", "2.20": "requirements-tf2.20.txt"}
# Distributions that install the `tensorflow` and `tensorflow_text` packages.
_TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-intel", "tf-nightly", "tf-nightly-cpu")
_TENSORFLOW_TEXT_DISTRIBUTIONS = ("tensorflow-text", "tensorflow-text-nightly")
_ROOT = os.path.dirname(os.path.abspath(__file__))
# The project's scripts (the files a user runs): they get the quiet console. Any other program that imports a
# module of the project (a user's own script, even one in this folder; pytest) keeps its stderr and logging as
# they are, unless it calls run() or main() itself.
SCRIPTS = ("run_classifier.py", "run_squad.py", "run_ner.py", "run_pretraining.py", "extract_features.py",
           "create_pretraining_data.py", "prepare_corpus.py", "build_vocab.py", "convert_checkpoint.py", "main_job.py")
_BENCHMARKS = os.path.join(_ROOT, "benchmarks")


def _is_project_script(path):
    """Whether `path` (the __main__ module's file) is one of the project's scripts or benchmarks."""
    if not path:
        return False
    path = os.path.abspath(path)
    folder, name = os.path.split(path)
    return (folder == _ROOT and name in SCRIPTS) or folder == _BENCHMARKS


def _quiet_tensorflow():
    """TF_CPP_MIN_LOG_LEVEL=2 unless the user set it (before TensorFlow loads); returns whether TensorFlow's
    start-up noise is to be dropped (not when the user asked for its INFO or WARNING lines, level 0 or 1)."""
    return os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2").strip() not in ("0", "1")


_PROJECT_SCRIPT = _is_project_script(getattr(sys.modules.get("__main__"), "__file__", None))
if _PROJECT_SCRIPT:
    _quiet_tensorflow()


class TensorFlowVersionError(UserError, ImportError):
    """The installed TensorFlow and tensorflow-text do not go together, or this project does not run on them."""


def _major_minor(version):
    return ".".join(version.split(".")[:2])


def _installed_version(distributions):
    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return None


def tensorflow_version_problem(tensorflow_version, text_version):
    """What is wrong with these installed versions (None: not installed), as one line; None if nothing is."""
    if tensorflow_version is None:
        return None
    pairs = " or ".join(f"tensorflow {v} with tensorflow-text {v} (pip install -r {f})"
                        for v, f in TENSORFLOW_VERSIONS.items())
    minor = _major_minor(tensorflow_version)
    if text_version is not None and _major_minor(text_version) != minor:
        return (f"tensorflow {tensorflow_version} and tensorflow-text {text_version} do not go together "
                f"(tensorflow-text {_major_minor(text_version)} is built for tensorflow "
                f"{_major_minor(text_version)} only): install one of the pairs this project runs on, {pairs}")
    if minor not in TENSORFLOW_VERSIONS:
        return (f"tensorflow {tensorflow_version} is not a version this project runs on: install {pairs}")
    return None


def installed_tensorflow_problem():
    """tensorflow_version_problem() of the installed TensorFlow and tensorflow-text."""
    return tensorflow_version_problem(_installed_version(_TENSORFLOW_DISTRIBUTIONS),
                                      _installed_version(_TENSORFLOW_TEXT_DISTRIBUTIONS))


class _BeforeTensorFlow:
    """A sys.meta_path finder that acts once, when `tensorflow` or `tensorflow_text` is about to be imported,
    and finds nothing itself (the import goes on as usual): checks the installed versions and, in a script of
    the project's (SCRIPTS), drops TensorFlow's noise from then on (TensorFlow 2.21 writes some as it loads);
    in any other program it changes nothing of stderr."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        del path, target
        if fullname not in ("tensorflow", "tensorflow_text"):
            return None
        if cls in sys.meta_path:
            sys.meta_path.remove(cls)
        problem = installed_tensorflow_problem()
        if problem is None:
            if _PROJECT_SCRIPT and _quiet_tensorflow():
                _filter_stderr_noise()
            return None
        if _PROJECT_SCRIPT:
            print("error: " + problem, file=sys.stderr, flush=True)
            raise SystemExit(EXIT_USER_ERROR)
        raise TensorFlowVersionError(problem)


if "tensorflow_text" not in sys.modules and _BeforeTensorFlow not in sys.meta_path:
    sys.meta_path.insert(0, _BeforeTensorFlow)


def main(options_class, run_options):
    """A script's entry point: defines the flags of options_class, then, under run(), calls
    run_options(the options the command line gives)."""
    define_flags(options_class)

    def main(argv):
        del argv
        run_options(options_from_flags(options_class))  # its result is not an exit status

    run(main)


def run(main):
    """absl's app.run(main) with quiet TensorFlow and user errors as one line (exit status 2)."""
    if _quiet_tensorflow():
        _filter_stderr_noise()
    app.run(_guarded(main))


def _guarded(main):
    def guarded_main(argv):
        if not flags.FLAGS["verbosity"].present:
            logging.set_verbosity(logging.INFO)
        try:
            return main(argv)
        except Stopped as err:
            if _show_traceback():
                raise
            print(f"{err.prefix}: {one_line(err)}", file=sys.stderr, flush=True)
            sys.exit(err.exit_status)
        except Exception as err:  # pylint: disable=broad-except
            if not _is_user_error(err) or _show_traceback():
                raise
            print("error: " + one_line(err), file=sys.stderr, flush=True)
            sys.exit(EXIT_USER_ERROR)

    return guarded_main


# TensorFlow's errors about a file a user named (tf.io.gfile, checkpoints, TFRecords on any file system).
_TF_FILE_ERRORS = ("NotFoundError", "PermissionDeniedError", "AlreadyExistsError", "FailedPreconditionError")


def _is_user_error(err):
    """UserErrors, operating-system errors on a named file (missing, permission, disk full), and TensorFlow's
    file-system errors (a missing gs:// object, a bucket without permission)."""
    if isinstance(err, UserError) or (isinstance(err, OSError) and getattr(err, "filename", None) is not None):
        return True
    return type(err).__module__.startswith("tensorflow") and type(err).__name__ in _TF_FILE_ERRORS


def _show_traceback():
    return os.environ.get(TRACEBACK_ENV, "") not in ("", "0") or logging.get_verbosity() >= 1


def one_line(err):
    """The error's message on one line (an OSError as `path: reason`)."""
    if isinstance(err, OSError) and not isinstance(err, UserError) and err.filename is not None:
        text = f"{err.filename}: {err.strerror or err}"
    else:
        text = getattr(err, "message", None) or str(err)
    return " ".join(text.split())


_stderr_filtered = False


def _filter_stderr_noise():
    """Routes file descriptor 2 through a thread that drops the _NOISE lines (C++ code writes there directly);
    once a process."""
    global _stderr_filtered
    if _stderr_filtered:
        return
    _stderr_filtered = True
    try:
        sys.stderr.flush()
        original = os.dup(2)
        read_fd, write_fd = os.pipe()
        os.dup2(write_fd, 2)
        os.close(write_fd)
    except (OSError, ValueError):
        return

    in_block = False

    def shown(line):
        nonlocal in_block
        if in_block and not _LOG_RECORD.match(line):
            return False
        in_block = bool(_NOISE_BLOCK.search(line))
        return not in_block and not _NOISE.search(line)

    def pump():
        pending = b""
        while True:
            try:
                chunk = os.read(read_fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            kept = b"".join(line + b"\n" for line in lines if shown(line))
            if pending and not _NOISE.search(pending) and not in_block:
                kept += pending
                pending = b""
            if kept:
                os.write(original, kept)
        if pending and shown(pending):
            os.write(original, pending)
        os.close(read_fd)

    thread = threading.Thread(target=pump, name="stderr-filter", daemon=True)
    thread.start()

    def restore():
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(original, 2)  # the pipe's last writer closes: the pump sees the end and stops
        thread.join(timeout=5)

    atexit.register(restore)


# ---------------------------------------------------------------------------------------------------------
# Options: a script's flags declared once, as a dataclass whose fields become its absl flags.


def option(default=None, help_text="", enum=None, required=False, flag=True, multi=False):
    """A field of an options dataclass. define_flags makes it the flag of the field's name, default and help:
    DEFINE_enum when `enum` is given, DEFINE_multi_string when `multi` (a list of values, the flag repeated),
    else by the field's type (str, int, float, bool, list: comma-separated; give a list field a tuple default);
    `required` flags must be given on the command line; flag=False keeps the field off the command line."""
    return dataclasses.field(default=default, metadata={"help": help_text, "enum": enum, "required": required,
                                                        "flag": flag, "multi": multi})


def nested(options_class, exclude=(), required=(), defaults=None, help_texts=None):
    """A field holding another options dataclass (e.g. training.TrainingConfig): its flags are the script's
    flags too, under their own names, except `exclude`; `required` makes some of them required here, `defaults`
    and `help_texts` ({field name: value}) give some of them this script's own default and help."""
    defaults = dict(defaults or {})
    return dataclasses.field(default_factory=functools.partial(options_class, **defaults),
                             metadata={"nested": options_class, "exclude": tuple(exclude), "required": tuple(required),
                                       "defaults": defaults, "help": dict(help_texts or {})})


class _Flag:
    """One flag of an options class: its field, whether it is required, its default and help here."""

    def __init__(self, field, required, default, help_text):
        self.field, self.name, self.required, self.default, self.help = field, field.name, required, default, help_text


def flag_fields(options_class, exclude=(), required=(), defaults=None, help_texts=None):
    """[_Flag] of every flag of options_class in declaration order, nested options flattened."""
    out = []
    for field in dataclasses.fields(options_class):
        if field.name in exclude or not field.metadata.get("flag", True):
            continue
        meta = field.metadata
        if meta.get("nested"):
            out.extend(flag_fields(meta["nested"], meta["exclude"], meta["required"], meta["defaults"], meta["help"]))
        else:
            out.append(_Flag(field, meta.get("required", False) or field.name in required,
                             (defaults or {}).get(field.name, field.default),
                             (help_texts or {}).get(field.name, meta.get("help", ""))))
    return out


_DEFINE = {str: flags.DEFINE_string, int: flags.DEFINE_integer, float: flags.DEFINE_float, bool: flags.DEFINE_bool,
           list: flags.DEFINE_list}


def define_flags(options_class, flag_values=None):
    """Defines an absl flag for every flag field of options_class (see option and nested), each declared by
    the script that defines options_class (so `--help` lists them all, as the original scripts' own flags)."""
    fv = flag_values if flag_values is not None else flags.FLAGS
    module = options_class.__module__
    module = sys.argv[0] if module == "__main__" else module  # absl's name for the main module's flags
    for flag in flag_fields(options_class):
        field = flag.field
        default = list(flag.default) if isinstance(flag.default, tuple) else flag.default  # list flags
        if field.metadata.get("enum"):
            flags.DEFINE_enum(flag.name, flag.default, list(field.metadata["enum"]), flag.help, flag_values=fv,
                              module_name=module)
        elif field.metadata.get("multi"):
            flags.DEFINE_multi_string(flag.name, default, flag.help, flag_values=fv, module_name=module)
        else:
            _DEFINE[field.type](flag.name, default, flag.help, flag_values=fv, module_name=module)
        if flag.required:
            flags.mark_flag_as_required(flag.name, flag_values=fv)


def build_options(options_class, **values):
    """options_class from flat flag-name values (nested options get theirs); the rest keep their defaults."""
    fields = {}
    for field in dataclasses.fields(options_class):
        if field.metadata.get("nested"):
            inner = {f.name for f in dataclasses.fields(field.metadata["nested"])}
            mine = {name: values.pop(name) for name in list(values) if name in inner}
            if mine or field.name not in values:
                fields[field.name] = field.default_factory(**mine)
        if field.name in values:
            fields[field.name] = values.pop(field.name)
    if values:
        raise TypeError(f"{options_class.__name__} has no option(s) {sorted(values)}")
    return options_class(**fields)


class OriginalFlags:
    """A script module's `FLAGS` as the original's library functions read it (run_squad.write_predictions reads
    FLAGS.version_2_with_negative, create_pretraining_data.create_masked_lm_predictions FLAGS.do_whole_word_mask):
    a value set on it (`module.FLAGS.name = value`) wins; else the parsed absl flag of that name, when a script
    defined one (this project's scripts define theirs in main(), a user's own script may define its own); else the
    original's default given here. This project's own code passes its options explicitly and never reads it."""

    def __init__(self, **defaults):
        object.__setattr__(self, "_defaults", dict(defaults))
        object.__setattr__(self, "_values", {})

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._values:
            return self._values[name]
        if name in flags.FLAGS and flags.FLAGS.is_parsed():
            return flags.FLAGS[name].value
        if name in self._defaults:
            return self._defaults[name]
        raise AttributeError(f"FLAGS has no flag {name!r} (the original's flags read here: {sorted(self._defaults)})")

    def __setattr__(self, name, value):
        self._values[name] = value

    def __delattr__(self, name):
        self._values.pop(name, None)


def options_from_flags(options_class, flag_values=None):
    """An options_class built from the parsed flags (fields off the command line keep their defaults)."""
    fv = flag_values if flag_values is not None else flags.FLAGS
    return build_options(options_class, **{flag.name: fv[flag.name].value
                                          for flag in flag_fields(options_class) if flag.name in fv})
