"""Files and folders named by flags, on any file system: local paths through the operating system, a path with a
scheme (gs://, s3://, hdfs://, ram://) through tf.io.gfile. TensorFlow is imported for such a path only, so the
modules that run without it (tokenization.py, create_pretraining_data.py, build_vocab.py, the evaluators) use
open_file and the rest for every path; modules that import TensorFlow may use tf.io.gfile themselves.

A missing or unusable file named by a flag is a cli.MissingFileError or cli.UserError naming the flag.
"""
import contextlib
import errno
import glob
import io
import os
import posixpath
import shutil
import uuid

from cli import MissingFileError, UserError


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


def move_dir(source, target):
    """Moves the folder `source` to `target` (which must not exist), on any file system: a rename on this machine;
    elsewhere (where a folder's rename is missing or loses its files: gs://, ram://) its files copied one by one,
    then `source` removed."""
    if not is_remote(source) and not is_remote(target):
        os.rename(source, target)
        return target
    gfile = _gfile(source)
    for folder, _, files in gfile.walk(source):
        inside = posixpath.join(target, posixpath.relpath(folder, source)) if folder != source else target
        gfile.makedirs(inside)
        for name in files:
            gfile.copy(posixpath.join(folder, name), posixpath.join(inside, name))
    gfile.rmtree(source)
    return target


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


def byte_ranges(sizes, num_parts):
    """Splits the concatenation of files of `sizes` bytes into `num_parts` ranges: [(start, end)]."""
    total = sum(sizes)
    return [(total * k // num_parts, total * (k + 1) // num_parts) for k in range(num_parts)]


def range_parts(paths, sizes, start, end):
    """The (path, local start, local end) pieces of files that global byte range [start, end) covers."""
    parts = []
    offset = 0
    for path, size in zip(paths, sizes):
        lo = max(start - offset, 0)
        hi = min(end - offset, size)
        if lo < hi:
            parts.append((path, lo, hi))
        offset += size
    return parts


def shard_path(path, index, count):
    """The name of output shard `index` of `count` written for --output_file=path: PATH-0000k-of-0000n."""
    return "%s-%05d-of-%05d" % (path, index, count)


def read_lines(path, start=0):
    """Yields (byte offset, raw line) for the lines of `path` from byte `start` on (snapped forward to the next line
    start: a line that begins before `start` is left to whoever reads the range before it)."""
    with open_file(path, "rb") as reader:
        pos = 0
        if start > 0:
            reader.seek(start - 1)
            pos = start - 1
            previous = reader.read(1)
            pos += len(previous)
            if previous != b"\n":
                pos += len(reader.readline())
        for raw in reader:
            yield pos, raw
            pos += len(raw)


def line_number(path, offset):
    """The 1-based number of the line holding byte `offset` of `path` (reads the file up to there)."""
    with open_file(path, "rb") as reader:
        return reader.read(offset).count(b"\n") + 1


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


def make_output_dir(path, flag="--output_dir", is_file=False, local=False):
    """What a job writes its outputs into, made once its checks passed: the folder `path` (is_file: the folder the
    file `path` goes into), on any file system; `local` asks for a folder on this machine (a job that keeps its
    log there and starts processes in it), returned as an absolute path. Returns the path."""
    if local and path and is_remote(path):
        raise UserError(f"{flag}={path}: this job writes its log and runs processes in a local folder; give a local "
                        "path (its input flags may name gs://... files)")
    if is_file:
        return make_parent_dir(path, flag)
    path = make_dir(path, flag)
    return os.path.abspath(path) if local else path


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


def write_file_whole(path, data, flag):
    """Writes bytes to `path` (any file system; its folder made) whole or not at all: into a scratch file beside
    it, then renamed over it; an error naming the flag when `path` is a folder. Returns path."""
    if isdir(path):
        raise UserError(f"{flag}={path}: is a folder, expected a file name")
    make_parent_dir(path, flag)
    scratch = f"{path}.partial-{uuid.uuid4().hex[:8]}"
    try:
        with _gfile(path).GFile(scratch, "wb") as f:
            f.write(data)
        _gfile(path).rename(scratch, path, overwrite=True)
    finally:
        if _gfile(path).exists(scratch):
            _gfile(path).remove(scratch)
    return path


@contextlib.contextmanager
def staged_folder(path, flag, clashing=()):
    """Writes a folder of outputs all at once: yields a fresh scratch folder beside `path`; when the block ends
    without an error, its files move into `path` (made if needed), else the scratch folder is removed and `path`
    is left as it was. An error naming the flag, before anything is written, when `path` is a file or already holds
    one of the names in `clashing` (an earlier export)."""
    if not path:
        raise UserError(f"{flag} is required")
    path = path.rstrip("/") or "/"
    if exists(path) and not isdir(path):
        raise UserError(f"{flag}={path}: is a file, expected a folder")
    held = sorted(name for name in clashing if exists(path + "/" + name))
    if held:
        raise UserError(f"{flag}={path} already holds an export ({', '.join(held)}): give an empty or new folder")
    parent = os.path.dirname(path)
    if parent:
        make_dir(parent, flag)
    scratch = f"{path}.partial-{uuid.uuid4().hex[:8]}"
    remote = is_remote(path)
    if remote:
        _gfile(path).makedirs(scratch)
    else:
        os.makedirs(scratch)
    try:
        yield scratch
    except BaseException:
        if remote:
            _gfile(path).rmtree(scratch)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    if remote:  # a folder's rename is missing or loses its files on some (move_dir)
        gfile = _gfile(path)
        if not gfile.exists(path):
            move_dir(scratch, path)
            return
        for name in gfile.listdir(scratch):
            source, target = scratch + "/" + name.rstrip("/"), path + "/" + name.rstrip("/")
            if gfile.isdir(source):
                move_dir(source, target)
            else:
                gfile.rename(source, target, overwrite=True)
        gfile.rmtree(scratch)
    elif not os.path.exists(path):
        os.rename(scratch, path)
    else:
        for name in os.listdir(scratch):
            os.replace(os.path.join(scratch, name), os.path.join(path, name))
        os.rmdir(scratch)
