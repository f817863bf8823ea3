"""Original-format (name-based) TensorFlow checkpoints: read, load into a model by name, write, keep N.

Public API (stable):
  resolve_checkpoint(path) -> checkpoint prefix (a prefix, or a directory -> its latest checkpoint).
  list_checkpoint(path) -> OrderedDict {name: shape}.
  load_checkpoint(path, names=None) -> OrderedDict {name: np.ndarray}.
  save_checkpoint(prefix, tensors_by_name) writes `prefix.index` + `prefix.data-00000-of-00001`.
  init_from_checkpoint(variables_by_name, init_checkpoint) -> (loaded, new, unused) name lists, with the
    original semantics: every variable found by name and shape is loaded, the rest keep their initial values.
  CheckpointManager(output_dir, max_to_keep=5, checkpoint_name="model.ckpt"):
    save(variables_by_name, step) -> path of `model.ckpt-STEP`; latest_checkpoint();
    restore(variables_by_name, checkpoint=None) -> global step restored; checkpoints (oldest first).
  checkpoint_for_inference(output_dir, init_checkpoint): the newest checkpoint of a run, else init_checkpoint.

Names are original variable names without ":0" ("bert/embeddings/word_embeddings", "global_step",
"NAME/adam_m", ...). Variables may be tf.Variables, Keras variables or distributed variables. Conversions from
and to HF and tf-models-official checkpoints are in conversions.py.
"""
import collections
import os
import re
import time

import numpy as np
import tensorflow as tf
from absl import logging

import cli
import filesystem
from cli import MissingFileError, UserError


STATE_FILE = "checkpoint"
ORIGINAL_CHECKPOINT_NAME = "bert_model.ckpt"
ENCODER_PREFIX = "bert/"


def _is_prefix(path):
    return tf.io.gfile.exists(path + ".index")


def reader(prefix):
    """A reader of the checkpoint `prefix` (tf.train.load_checkpoint without its folder test, which file systems
    that report a prefix as a folder, such as ram://, would answer wrongly)."""
    return tf.compat.v1.train.NewCheckpointReader(prefix)


def resolve_checkpoint(path, flag=None):
    """A checkpoint prefix from a prefix or a directory (its latest checkpoint); a clear error otherwise
    (naming `flag`, e.g. "--init_checkpoint", when given)."""
    where = f"{flag}={path}" if flag else f"checkpoint {path}"
    if not path:
        raise UserError(f"{flag or 'checkpoint path'} is empty: expected a checkpoint prefix or folder")
    if _is_prefix(path):
        return path
    if tf.io.gfile.isdir(path):
        latest = CheckpointManager(path).latest_checkpoint()
        if latest is not None:
            return latest
        # No state file (e.g. a released bert_model.ckpt): the newest-step, or the only, checkpoint there.
        prefixes = sorted(p[:-len(".index")] for p in tf.io.gfile.glob(os.path.join(path, "*.index")))
        if len(prefixes) == 1:
            return prefixes[0]
        stepped = [p for p in prefixes if _step_of(p) >= 0]
        if prefixes and len(stepped) == len(prefixes):
            return max(stepped, key=_step_of)
        if prefixes:
            raise UserError(f"{where}: the folder holds several checkpoints {prefixes} and no `checkpoint` "
                            f"state file: name one prefix")
        raise MissingFileError(f"{where}: no checkpoint found in the folder (no `checkpoint` state file and no "
                               f"*.index file)")
    raise MissingFileError(f"{where}: checkpoint not found (expected a prefix with {path}.index, or a folder)")


def list_checkpoint(path):
    """OrderedDict {name: shape} of a checkpoint, sorted by name."""
    shapes = reader(resolve_checkpoint(path)).get_variable_to_shape_map()
    return collections.OrderedDict((name, shapes[name]) for name in sorted(shapes))


def require_encoder(init_checkpoint, flag="--init_checkpoint"):
    """(prefix, {name: shape}) of a checkpoint that holds a BERT encoder (bert/encoder/...); an error naming the
    flag otherwise (an export of it would hold random weights)."""
    prefix = resolve_checkpoint(init_checkpoint, flag=flag)
    names = list_checkpoint(prefix)
    if not any(name.startswith(ENCODER_PREFIX + "encoder/") for name in names):
        raise UserError(f"{flag}={init_checkpoint}: {prefix} holds no BERT encoder variables "
                        f"(bert/encoder/layer_N/...); it holds {len(names)} variable(s) such as {list(names)[:5]}: "
                        f"expected an original-format BERT checkpoint")
    return prefix, names


def load_checkpoint(path, names=None):
    """OrderedDict {name: ndarray} of a checkpoint (all variables, or just `names`)."""
    prefix = resolve_checkpoint(path)
    ckpt = reader(prefix)
    available = ckpt.get_variable_to_shape_map()
    wanted = sorted(available) if names is None else list(names)
    missing = [n for n in wanted if n not in available]
    if missing:
        raise KeyError(f"Checkpoint {prefix} has no variable(s) {missing}")
    return collections.OrderedDict((name, ckpt.get_tensor(name)) for name in wanted)


def _value(variable):
    """The current value of a (possibly Keras or distributed) variable as a tensor."""
    if isinstance(variable, (np.ndarray, np.generic, int, float)):
        return tf.constant(variable)
    return tf.convert_to_tensor(variable)


def save_checkpoint(prefix, tensors_by_name):
    """Writes tensors under their names with SaveV2 (the format tf.train.Saver writes)."""
    if not tensors_by_name:
        raise ValueError(f"Nothing to save to {prefix}")
    directory = os.path.dirname(prefix)
    if directory:
        tf.io.gfile.makedirs(directory)
    names = list(tensors_by_name)
    tensors = [_value(tensors_by_name[n]) for n in names]
    with tf.device("/cpu:0"):
        tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names), tensors=tensors)
    return prefix


def _assign(variable, value):
    variable.assign(value)


def init_from_checkpoint(variables_by_name, init_checkpoint, required=ENCODER_PREFIX):
    """Loads every variable present in the checkpoint by name; returns (loaded, new, unused) names.

    A variable whose name is in the checkpoint with another shape is an error naming it and both shapes; so
    is a model variable under `required` (the encoder, "bert/") that the checkpoint lacks: only the layers a
    task adds on top start from their initial values.
    """
    prefix = resolve_checkpoint(init_checkpoint)
    ckpt = reader(prefix)
    shapes = ckpt.get_variable_to_shape_map()
    dtypes = ckpt.get_variable_to_dtype_map()
    absent = [name for name in variables_by_name if required and name.startswith(required) and name not in shapes]
    if absent:
        raise UserError(f"checkpoint {prefix} lacks {len(absent)} encoder variable(s) of the model: "
                        f"{' '.join(absent[:8])}{' ...' if len(absent) > 8 else ''} (does --bert_config_file "
                        f"describe this checkpoint?)")
    loaded, new = [], []
    mismatched = []
    for name, variable in variables_by_name.items():
        if name not in shapes:
            continue
        var_shape = [int(d) for d in variable.shape]
        if var_shape != list(shapes[name]):
            mismatched.append(f"{name}: model {var_shape} vs checkpoint {list(shapes[name])}")
    if mismatched:
        raise UserError(f"Shape mismatch between the model and checkpoint {prefix} for: " + "; ".join(mismatched))
    logging.info("**** Initializing from checkpoint %s ****", prefix)
    for name, variable in variables_by_name.items():
        if name in shapes:
            value = ckpt.get_tensor(name)
            var_dtype = tf.as_dtype(variable.dtype)
            if dtypes[name] != var_dtype:
                if not (dtypes[name].is_floating and var_dtype.is_floating) and not (
                        dtypes[name].is_integer and var_dtype.is_integer):
                    raise UserError(f"Variable {name}: checkpoint dtype {dtypes[name].name} cannot be loaded "
                                     f"into a {var_dtype.name} variable")
                value = value.astype(var_dtype.as_numpy_dtype)
            _assign(variable, value)
            loaded.append(name)
            logging.info("  name = %s, shape = %s, *INIT_FROM_CKPT*", name, list(variable.shape))
        else:
            new.append(name)
            logging.info("  name = %s, shape = %s, (new: not in checkpoint)", name, list(variable.shape))
    unused = sorted(set(shapes) - set(variables_by_name))
    for name in unused:
        logging.info("  checkpoint variable not used: %s %s", name, shapes[name])
    logging.info("Loaded %d variables from %s; %d new; %d checkpoint variables unused",
                 len(loaded), prefix, len(new), len(unused))
    return loaded, new, unused


def _write_atomic(path, text):
    tmp = path + ".tmp"
    with tf.io.gfile.GFile(tmp, "w") as f:
        f.write(text)
    tf.io.gfile.rename(tmp, path, overwrite=True)


def _read_state(directory):
    """(latest, [all]) from a `checkpoint` state file (names relative to `directory` where they were)."""
    path = os.path.join(directory, STATE_FILE)
    if not tf.io.gfile.exists(path):
        return None, []
    latest, paths = None, []
    with tf.io.gfile.GFile(path, "r") as f:
        for line in f:
            m = re.match(r'^\s*(model_checkpoint_path|all_model_checkpoint_paths)\s*:\s*"(.*)"\s*$', line)
            if not m:
                continue
            if m.group(1) == "model_checkpoint_path":
                latest = m.group(2)
            else:
                paths.append(m.group(2))
    return latest, paths


def _step_of(prefix):
    m = re.search(r"-(\d+)$", prefix)
    return int(m.group(1)) if m else -1


class CheckpointManager:
    """Writes `model.ckpt-STEP` checkpoints plus the `checkpoint` state file, keeping the newest N.

    Resume is robust to a killed or damaged run: latest_checkpoint() is the newest checkpoint of the folder
    that reads back whole (every tensor, checksums included); a newer broken one is named in a warning and left
    in place (moved aside, never overwritten, when a save reaches its step); files a killed save left behind
    (`*.tempstate*`, `checkpoint.tmp`) are removed by clean_up(). A failed save leaves the previous checkpoints
    and the state file as they were.
    """

    def __init__(self, output_dir, max_to_keep=5, checkpoint_name="model.ckpt"):
        if max_to_keep is not None and max_to_keep < 1:
            raise ValueError(f"max_to_keep must be >= 1 or None, got {max_to_keep}")
        self.output_dir = output_dir
        self.max_to_keep = max_to_keep
        self.checkpoint_name = checkpoint_name
        self._verified = {}
        self._checkpoints = [p for p in self._candidates() if p in self._listed()]
        self._checkpoints.sort(key=_step_of)

    @property
    def checkpoints(self):
        return list(self._checkpoints)

    def _listed(self):
        latest, paths = _read_state(self.output_dir)
        listed = [p if os.path.isabs(p) or filesystem.is_remote(p) else os.path.join(self.output_dir, p)
                  for p in paths + [latest] if p]
        return set(filesystem.normpath(p) for p in listed)

    def _candidates(self):
        """Prefixes of this manager's checkpoints in the folder (with an index or a data file), by step."""
        pattern = os.path.join(self.output_dir, self.checkpoint_name + "-*")
        prefixes = set()
        name = re.compile(r"^(" + re.escape(self.checkpoint_name) + r"-\d+)\.(?:index|data-\d+-of-\d+)$")
        for path in tf.io.gfile.glob(pattern):
            m = name.match(os.path.basename(path))
            if m:
                prefixes.add(filesystem.normpath(os.path.join(self.output_dir, m.group(1))))
        return sorted(prefixes, key=_step_of)

    def has_checkpoints(self):
        """Whether the folder holds files of checkpoints of its own, readable or not."""
        return bool(self._candidates())

    def _readable(self, prefix):
        """Whether every tensor of `prefix` reads back (index and data present, sizes and checksums right)."""
        files = [prefix + ".index"] + tf.io.gfile.glob(prefix + ".data-*")
        key = tuple((f, tf.io.gfile.stat(f).length) for f in files if tf.io.gfile.exists(f))
        if key not in self._verified:
            try:
                ckpt = reader(prefix)
                for name in ckpt.get_variable_to_shape_map():
                    ckpt.get_tensor(name)
                self._verified[key] = True
            except (tf.errors.OpError, IndexError, ValueError, OSError) as err:
                logging.warning("Checkpoint %s does not read back whole (%s): it is left in place and not "
                                "used", prefix, cli.one_line(err))
                self._verified[key] = False
        return self._verified[key]

    def latest_checkpoint(self):
        """Prefix of the newest checkpoint in output_dir that reads back whole, or None."""
        for prefix in reversed(self._candidates()):
            if self._readable(prefix):
                return prefix
        return None

    def clean_up(self):
        """Removes what a killed save left behind: `*.tempstate*` files and a stale state file copy."""
        for path in (tf.io.gfile.glob(os.path.join(self.output_dir, "*tempstate*"))
                     + tf.io.gfile.glob(os.path.join(self.output_dir, STATE_FILE + ".tmp"))):
            logging.info("Removing %s, left by an interrupted save", path)
            tf.io.gfile.remove(path)

    def save(self, variables_by_name, step):
        """Writes every variable under its name as `model.ckpt-STEP`, then updates the state file."""
        step = int(step.numpy() if hasattr(step, "numpy") else step)
        tf.io.gfile.makedirs(self.output_dir)
        prefix = filesystem.normpath(os.path.join(self.output_dir, f"{self.checkpoint_name}-{step}"))
        if prefix in self._candidates() and not self._readable(prefix):
            aside = f"{prefix}.broken-{int(time.time())}"
            for path in tf.io.gfile.glob(prefix + ".*"):
                tf.io.gfile.rename(path, aside + path[len(prefix):])
            logging.warning("Moved the unreadable checkpoint %s aside to %s.* before saving step %d", prefix,
                            aside, step)
        try:
            save_checkpoint(prefix, variables_by_name)
        except (tf.errors.OpError, OSError) as err:
            for path in tf.io.gfile.glob(os.path.join(self.output_dir, "*tempstate*")):
                tf.io.gfile.remove(path)
            previous = self._checkpoints[-1] if self._checkpoints else None
            raise UserError(f"cannot write checkpoint {prefix}: {cli.one_line(err)}"
                            + (f"; the previous checkpoint {previous} is intact" if previous else "")) from None
        checkpoints = [p for p in self._checkpoints if p != prefix] + [prefix]
        removed = []
        if self.max_to_keep is not None:
            while len(checkpoints) > self.max_to_keep:
                removed.append(checkpoints.pop(0))
        rel = [os.path.basename(p) for p in checkpoints]
        text = f'model_checkpoint_path: "{rel[-1]}"\n' + "".join(
            f'all_model_checkpoint_paths: "{p}"\n' for p in rel)
        _write_atomic(os.path.join(self.output_dir, STATE_FILE), text)
        self._checkpoints = checkpoints
        for old in removed:
            for path in tf.io.gfile.glob(old + ".*"):
                tf.io.gfile.remove(path)
            logging.info("Removed old checkpoint %s", old)
        logging.info("Saved checkpoint %s (%d variables)", prefix, len(variables_by_name))
        return prefix

    def restore(self, variables_by_name, checkpoint=None):
        """Restores every variable exactly from `checkpoint` (default: latest); returns its global_step."""
        prefix = resolve_checkpoint(checkpoint or self.latest_checkpoint() or self.output_dir)
        ckpt = reader(prefix)
        shapes = ckpt.get_variable_to_shape_map()
        missing = [n for n in variables_by_name if n not in shapes]
        if missing:
            raise UserError(f"Checkpoint {prefix} lacks variable(s) {missing[:10]}"
                            f"{' ...' if len(missing) > 10 else ''} ({len(missing)} missing)")
        for name, variable in variables_by_name.items():
            if [int(d) for d in variable.shape] != list(shapes[name]):
                raise UserError(f"Variable {name}: model shape {list(variable.shape)} vs checkpoint "
                                f"{list(shapes[name])} in {prefix}")
            _assign(variable, ckpt.get_tensor(name))
        step = global_step_of(prefix)
        logging.info("Restored %d variables from %s (global_step %d)", len(variables_by_name), prefix, step)
        return step


def global_step_of(prefix):
    """The checkpoint's global_step (the number after the last "-" of its name without one; else 0)."""
    try:
        return int(reader(prefix).get_tensor("global_step"))
    except (tf.errors.NotFoundError, ValueError):
        return max(_step_of(prefix), 0)


def checkpoint_for_inference(output_dir, init_checkpoint, required=True):
    """The newest readable checkpoint in output_dir, else init_checkpoint (None, or an error when required,
    when there is neither). Checkpoints in output_dir that all fail to read are an error, not a fall-back."""
    if output_dir and tf.io.gfile.isdir(output_dir):
        manager = CheckpointManager(output_dir)
        latest = manager.latest_checkpoint()
        if latest:
            return latest
        if manager.has_checkpoints():
            raise UserError(f"--output_dir={output_dir} holds checkpoint files but none reads back whole (see the "
                            f"warnings above); remove or repair them")
    if init_checkpoint:
        return resolve_checkpoint(init_checkpoint, flag="--init_checkpoint")
    if required:
        raise UserError(f"no checkpoint to use: --output_dir={output_dir} holds none and --init_checkpoint is "
                        f"not set")
    return None
