"""How every script starts and ends: options declared once, quiet TensorFlow, user errors as one line, files
named by flags on any file system.

A script declares its flags as an options dataclass (fields made with option(), and nested() for another
options class such as training.TrainingConfig) and ends with

    if __name__ == "__main__":
        cli.main(MyOptions, run)

which defines the flags (define_flags: each field's name, default and help), and runs run(options) under
absl with INFO logging (unless --verbosity is given). Import this module before TensorFlow: unless the user
set TF_CPP_MIN_LOG_LEVEL, it sets it to 2 (TensorFlow's C++ INFO and WARNING lines off), and it drops the
start-up noise no log level hides (the cuInit error on machines without a GPU, absl's "before InitializeLog"
warning, XLA's "Compiled cluster" line, TensorFlow 2.21's INFO lines as it loads) unless that level is 0 or 1,
from the script's import of TensorFlow on. A `UserError` (a flag value, a missing or
malformed file, bad data), an operating-system error on a named file, or TensorFlow's error on one (a missing
gs:// object) becomes one line `error: ...` on stderr with exit status 2. Internal errors keep their traceback;
`--verbosity=1` or BERT_TRACEBACK=1 shows it for user errors too.

This module never imports TensorFlow (create_pretraining_data.py and build_vocab.py run without it), except
for a path with a scheme (gs://, s3://, hdfs://, ram://), which it reads and writes through tf.io.gfile
(open_file, file_size, remove_file, exists, isdir, input_files, make_dir); modules that import TensorFlow use
tf.io.gfile themselves.

Before TensorFlow or tensorflow-text is first imported, the installed versions are checked (from their package
metadata): tensorflow-text X.Y goes with TensorFlow X.Y only, and this project runs on the TensorFlow versions of
TENSORFLOW_VERSIONS. Another installation ends a script with one `error: ...` line (exit status 2) saying which
versions go together, instead of an import traceback; imported from elsewhere, the import raises
TensorFlowVersionError with that line.
"""
import atexit
import dataclasses
import errno
import glob
import importlib.metadata
import io
import os
import posixpath
import re
import sys
import threading

from absl import app
from absl import flags
from absl import logging

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The user asked for TensorFlow's INFO or WARNING lines: show its start-up lines too.
_SHOW_TF_NOISE = os.environ["TF_CPP_MIN_LOG_LEVEL"].strip() in ("0", "1")

TRACEBACK_ENV = "BERT_TRACEBACK"
EXIT_USER_ERROR = 2

# TensorFlow lines that TF_CPP_MIN_LOG_LEVEL=2 does not hide and that say nothing to the user; among them
# TensorFlow 2.21's INFO and WARNING lines from before absl's logging is set up (its C++ code logs through absl;
# such a line is stamped "0000 00:00:<seconds since 1970>", and TF_CPP_MIN_LOG_LEVEL does not apply yet).
_NOISE = re.compile(rb"failed call to cuInit|All log messages before absl::InitializeLog\(\)|"
                    rb"Compiled cluster using XLA!|oneDNN supports DT_INT64 only on platforms with AVX-512|"
                    rb"^[IW]0000 00:00:\d+\.\d+ +\d+ \S+:\d+\] ")


class UserError(ValueError):
    """A problem with the user's flags, files or data; a script shows it as one `error: ...` line."""


class MissingFileError(UserError, FileNotFoundError):
    """A file or folder named by a flag does not exist."""


# ---------------------------------------------------------------------------------------------------------
# TensorFlow and tensorflow-text versions.

# The TensorFlow versions this project runs on, each with the tensorflow-text of the same version, and the
# requirements file that installs them (the first: the default, which scripts/setup.sh installs).
TENSORFLOW_VERSIONS = {"2.21": "requirements.txt", "2.20": "requirements-tf2.20.txt"}
# Distributions that install the `tensorflow` and `tensorflow_text` packages.
_TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-intel", "tf-nightly", "tf-nightly-cpu")
_TENSORFLOW_TEXT_DISTRIBUTIONS = ("tensorflow-text", "tensorflow-text-nightly")
_ROOT = os.path.dirname(os.path.abspath(__file__))
_SCRIPT_DIRS = (_ROOT, os.path.join(_ROOT, "benchmarks"))


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
    ours, drops TensorFlow's noise from then on (TensorFlow 2.21 writes some as it loads)."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        del path, target
        if fullname not in ("tensorflow", "tensorflow_text"):
            return None
        if cls in sys.meta_path:
            sys.meta_path.remove(cls)
        main_file = getattr(sys.modules.get("__main__"), "__file__", None)
        script = bool(main_file) and os.path.dirname(os.path.abspath(main_file)) in _SCRIPT_DIRS
        problem = installed_tensorflow_problem()
        if problem is None:
            if script and not _SHOW_TF_NOISE:
                _filter_stderr_noise()
            return None
        if script:
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
    if not _SHOW_TF_NOISE:
        _filter_stderr_noise()
    app.run(_guarded(main))


def _guarded(main):
    def guarded_main(argv):
        if not flags.FLAGS["verbosity"].present:
            logging.set_verbosity(logging.INFO)
        try:
            return main(argv)
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
            kept = b"".join(line + b"\n" for line in lines if not _NOISE.search(line))
            if pending and not _NOISE.search(pending):
                kept += pending
                pending = b""
            if kept:
                os.write(original, kept)
        if pending and not _NOISE.search(pending):
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
# Files and folders named by flags.


def is_remote(path):
    """Whether `path` names a file system by its scheme (gs://, s3://, hdfs://, ram://...)."""
    return "://" in path


def _gfile(path=""):
    """tf.io.gfile, which reads and writes every file system TensorFlow knows; a UserError without TensorFlow."""
    try:
        import tensorflow as tf
    except ImportError:
        raise UserError(f"{path}: a path with a scheme is read through TensorFlow's file systems, and TensorFlow "
                        f"is not installed (pip install tensorflow)") from None
    return tf.io.gfile


def normpath(path):
    """os.path.normpath that keeps a scheme's `//` (gs://bucket/a/../b -> gs://bucket/b)."""
    if is_remote(path):
        scheme, rest = path.split("://", 1)
        return scheme + "://" + posixpath.normpath(rest)
    return os.path.normpath(path)


def open_file(path, mode="r", encoding="utf-8", newline=None):
    """open() for modules that run without TensorFlow: a path with a scheme goes through tf.io.gfile.

    Text modes decode and encode with `encoding` and translate newlines as open() does, on every file system.
    """
    if not is_remote(path):
        if "b" in mode:
            return open(path, mode)
        return open(path, mode, encoding=encoding, newline=newline)
    gfile = _gfile(path)
    if "r" in mode and not gfile.exists(path):  # as open(): an OSError naming the file
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    if "b" in mode:
        return gfile.GFile(path, mode)
    if "r" in mode:
        with gfile.GFile(path, "rb") as f:
            data = f.read()
        return io.TextIOWrapper(io.BytesIO(data), encoding=encoding, newline=newline)
    return _RemoteTextWriter(gfile.GFile(path, mode.replace("t", "") + "b"), encoding)


class _RemoteTextWriter:
    """Text written to a tf.io.gfile.GFile opened in binary mode."""

    def __init__(self, file, encoding):
        self._file, self._encoding = file, encoding

    def write(self, text):
        self._file.write(text.encode(self._encoding))
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        self._file.flush()

    def close(self):
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def file_size(path):
    """Size in bytes of a file on any file system."""
    return _gfile(path).stat(path).length if is_remote(path) else os.path.getsize(path)


def remove_file(path):
    """Removes a file if it exists, on any file system; returns whether there was one."""
    if not exists(path):
        return False
    if is_remote(path):
        _gfile(path).remove(path)
    else:
        os.remove(path)
    return True


def exists(path):
    return _gfile(path).exists(path) if is_remote(path) else os.path.exists(path)


def isdir(path):
    return _gfile(path).isdir(path) if is_remote(path) else os.path.isdir(path)


def require_file(path, flag):
    """Returns `path` when it names a file; else a MissingFileError naming the flag."""
    if not path:
        raise UserError(f"{flag} is required")
    if not exists(path) or isdir(path):
        what = "is a folder, expected a file" if exists(path) else "no such file"
        raise MissingFileError(f"{flag}={path}: {what}")
    return path


def require_dir(path, flag):
    """Returns `path` when it names a folder; else a MissingFileError naming the flag."""
    if not path:
        raise UserError(f"{flag} is required")
    if not isdir(path):
        raise MissingFileError(f"{flag}={path}: no such folder")
    return path


def input_files(value, flag="--input_file"):
    """Comma-separated files or globs -> the files (each glob sorted); a pattern matching nothing is an error."""
    if not value:
        raise UserError(f"{flag} is required: file names or globs, comma separated")
    files = []
    for pattern in value.split(","):
        pattern = pattern.strip()
        if not pattern:
            continue
        if is_remote(pattern):
            matches = sorted(p for p in _gfile(pattern).glob(pattern) if not _gfile(pattern).isdir(p))
        else:
            matches = sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
        if not matches:
            raise MissingFileError(f"{flag} pattern {pattern!r} matches no file")
        files.extend(matches)
    return files


def make_dir(path, flag):
    """Creates the folder `path` (and its parents) if needed; a clear error naming the flag otherwise."""
    if not path:
        raise UserError(f"{flag} is required")
    return _make_dir(path, f"{flag}={path}")


def _make_dir(path, named):
    if is_remote(path):
        _gfile(path).makedirs(path)
        return path
    if os.path.isdir(path):
        return path
    blocker = path
    while blocker and not os.path.exists(blocker):
        blocker = os.path.dirname(blocker.rstrip(os.sep))
    if blocker and not os.path.isdir(blocker):
        raise UserError(f"{named}: cannot create the folder: {blocker} is a file")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise UserError(f"{named}: cannot create the folder: {err.strerror or err}") from None
    return path


def make_parent_dir(path, flag):
    """Creates the folder an output file named by `flag` goes into."""
    if not path:
        raise UserError(f"{flag} is required")
    parent = os.path.dirname(path)
    if parent:
        _make_dir(parent, f"{flag}={path}")
    if not is_remote(path) and os.path.isdir(path):
        raise UserError(f"{flag}={path}: is a folder, expected a file name")
    return path


# ---------------------------------------------------------------------------------------------------------
# Options: a script's flags declared once, as a dataclass whose fields become its absl flags.


def option(default=None, help_text="", enum=None, required=False, flag=True, multi=False):
    """A field of an options dataclass. define_flags makes it the flag of the field's name, default and help:
    DEFINE_enum when `enum` is given, DEFINE_multi_string when `multi` (a list of values, the flag repeated),
    else by the field's type (str, int, float, bool, list: comma-separated; give a list field a tuple default);
    `required` flags must be given on the command line; flag=False keeps the field off the command line."""
    return dataclasses.field(default=default, metadata={"help": help_text, "enum": enum, "required": required,
                                                        "flag": flag, "multi": multi})


def nested(options_class, exclude=(), required=()):
    """A field holding another options dataclass (e.g. training.TrainingConfig): its flags are the script's
    flags too, under their own names, except `exclude`; `required` makes some of them required here."""
    return dataclasses.field(default_factory=options_class,
                             metadata={"nested": True, "exclude": tuple(exclude), "required": tuple(required)})


def flag_fields(options_class, exclude=(), required=()):
    """[(field, required)] of every flag of options_class in declaration order, nested options flattened."""
    out = []
    for field in dataclasses.fields(options_class):
        if field.name in exclude or not field.metadata.get("flag", True):
            continue
        if field.metadata.get("nested"):
            out.extend(flag_fields(field.default_factory, field.metadata["exclude"], field.metadata["required"]))
        else:
            out.append((field, field.metadata.get("required", False) or field.name in required))
    return out


_DEFINE = {str: flags.DEFINE_string, int: flags.DEFINE_integer, float: flags.DEFINE_float, bool: flags.DEFINE_bool,
           list: flags.DEFINE_list}


def define_flags(options_class, flag_values=None):
    """Defines an absl flag for every flag field of options_class (see option and nested), each declared by
    the script that defines options_class (so `--help` lists them all, as the original scripts' own flags)."""
    fv = flag_values if flag_values is not None else flags.FLAGS
    module = options_class.__module__
    module = sys.argv[0] if module == "__main__" else module  # absl's name for the main module's flags
    for field, required in flag_fields(options_class):
        default = list(field.default) if isinstance(field.default, tuple) else field.default  # list flags
        if field.metadata.get("enum"):
            flags.DEFINE_enum(field.name, field.default, list(field.metadata["enum"]), field.metadata["help"],
                              flag_values=fv, module_name=module)
        elif field.metadata.get("multi"):
            flags.DEFINE_multi_string(field.name, default, field.metadata["help"], flag_values=fv,
                                      module_name=module)
        else:
            _DEFINE[field.type](field.name, default, field.metadata["help"], flag_values=fv, module_name=module)
        if required:
            flags.mark_flag_as_required(field.name, flag_values=fv)


def build_options(options_class, **values):
    """options_class from flat flag-name values (nested options get theirs); the rest keep their defaults."""
    fields = {}
    for field in dataclasses.fields(options_class):
        if field.metadata.get("nested"):
            inner = {f.name for f in dataclasses.fields(field.default_factory)}
            mine = {name: values.pop(name) for name in list(values) if name in inner}
            if mine or field.name not in values:
                fields[field.name] = field.default_factory(**mine)
        if field.name in values:
            fields[field.name] = values.pop(field.name)
    if values:
        raise TypeError(f"{options_class.__name__} has no option(s) {sorted(values)}")
    return options_class(**fields)


def options_from_flags(options_class, flag_values=None):
    """An options_class built from the parsed flags (fields off the command line keep their defaults)."""
    fv = flag_values if flag_values is not None else flags.FLAGS
    return build_options(options_class, **{field.name: fv[field.name].value
                                          for field, _ in flag_fields(options_class) if field.name in fv})
