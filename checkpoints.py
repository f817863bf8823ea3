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

import numpy as np
import tensorflow as tf
from absl import logging


STATE_FILE = "checkpoint"
ORIGINAL_CHECKPOINT_NAME = "bert_model.ckpt"


def _is_prefix(path):
    return tf.io.gfile.exists(path + ".index")


def resolve_checkpoint(path):
    """A checkpoint prefix from a prefix or a directory (its latest checkpoint); clear error otherwise."""
    if not path:
        raise ValueError("No checkpoint path given")
    if _is_prefix(path):
        return path
    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is not None and _is_prefix(latest):
            return latest
        # No state file (e.g. a released bert_model.ckpt): the newest-step, or the only, checkpoint there.
        prefixes = sorted(p[:-len(".index")] for p in tf.io.gfile.glob(os.path.join(path, "*.index")))
        if len(prefixes) == 1:
            return prefixes[0]
        stepped = [p for p in prefixes if _step_of(p) >= 0]
        if prefixes and len(stepped) == len(prefixes):
            return max(stepped, key=_step_of)
        if prefixes:
            raise ValueError(f"Directory {path} holds several checkpoints {prefixes} and no `checkpoint` state "
                             f"file: name one prefix")
        raise FileNotFoundError(f"No checkpoint found in directory {path} (no `checkpoint` state file and no "
                                f"*.index file)")
    raise FileNotFoundError(f"Checkpoint not found: {path} (expected a prefix with {path}.index, or a directory)")


def list_checkpoint(path):
    """OrderedDict {name: shape} of a checkpoint, sorted by name."""
    reader = tf.train.load_checkpoint(resolve_checkpoint(path))
    shapes = reader.get_variable_to_shape_map()
    return collections.OrderedDict((name, shapes[name]) for name in sorted(shapes))


def load_checkpoint(path, names=None):
    """OrderedDict {name: ndarray} of a checkpoint (all variables, or just `names`)."""
    prefix = resolve_checkpoint(path)
    reader = tf.train.load_checkpoint(prefix)
    available = reader.get_variable_to_shape_map()
    wanted = sorted(available) if names is None else list(names)
    missing = [n for n in wanted if n not in available]
    if missing:
        raise KeyError(f"Checkpoint {prefix} has no variable(s) {missing}")
    return collections.OrderedDict((name, reader.get_tensor(name)) for name in wanted)


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


def init_from_checkpoint(variables_by_name, init_checkpoint):
    """Loads every variable present in the checkpoint by name; returns (loaded, new, unused) names.

    A variable whose name is in the checkpoint with another shape is an error naming it and both shapes.
    """
    prefix = resolve_checkpoint(init_checkpoint)
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    loaded, new = [], []
    mismatched = []
    for name, variable in variables_by_name.items():
        if name not in shapes:
            continue
        var_shape = [int(d) for d in variable.shape]
        if var_shape != list(shapes[name]):
            mismatched.append(f"{name}: model {var_shape} vs checkpoint {list(shapes[name])}")
    if mismatched:
        raise ValueError(f"Shape mismatch between the model and checkpoint {prefix} for: " + "; ".join(mismatched))
    logging.info("**** Initializing from checkpoint %s ****", prefix)
    for name, variable in variables_by_name.items():
        if name in shapes:
            value = reader.get_tensor(name)
            var_dtype = tf.as_dtype(variable.dtype)
            if dtypes[name] != var_dtype:
                if not (dtypes[name].is_floating and var_dtype.is_floating) and not (
                        dtypes[name].is_integer and var_dtype.is_integer):
                    raise ValueError(f"Variable {name}: checkpoint dtype {dtypes[name].name} cannot be loaded "
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


class CheckpointManager(object):
    """Writes `model.ckpt-STEP` checkpoints plus the `checkpoint` state file, keeping the newest N."""

    def __init__(self, output_dir, max_to_keep=5, checkpoint_name="model.ckpt"):
        if max_to_keep is not None and max_to_keep < 1:
            raise ValueError(f"max_to_keep must be >= 1 or None, got {max_to_keep}")
        self.output_dir = output_dir
        self.max_to_keep = max_to_keep
        self.checkpoint_name = checkpoint_name
        tf.io.gfile.makedirs(output_dir)
        _, paths = _read_state(output_dir)
        self._checkpoints = []
        for p in paths:
            full = p if os.path.isabs(p) else os.path.join(output_dir, p)
            if _is_prefix(full):
                self._checkpoints.append(full)

    @property
    def checkpoints(self):
        return list(self._checkpoints)

    def latest_checkpoint(self):
        """Prefix of the newest complete checkpoint in output_dir, or None."""
        latest, _ = _read_state(self.output_dir)
        if latest is None:
            return None
        full = latest if os.path.isabs(latest) else os.path.join(self.output_dir, latest)
        return full if _is_prefix(full) else None

    def save(self, variables_by_name, step):
        """Writes every variable under its name as `model.ckpt-STEP`, then updates the state file."""
        step = int(step.numpy() if hasattr(step, "numpy") else step)
        prefix = os.path.join(self.output_dir, f"{self.checkpoint_name}-{step}")
        save_checkpoint(prefix, variables_by_name)
        self._checkpoints = [p for p in self._checkpoints if p != prefix] + [prefix]
        removed = []
        if self.max_to_keep is not None:
            while len(self._checkpoints) > self.max_to_keep:
                removed.append(self._checkpoints.pop(0))
        rel = [os.path.relpath(p, self.output_dir) for p in self._checkpoints]
        text = f'model_checkpoint_path: "{rel[-1]}"\n' + "".join(
            f'all_model_checkpoint_paths: "{p}"\n' for p in rel)
        _write_atomic(os.path.join(self.output_dir, STATE_FILE), text)
        for old in removed:
            for path in tf.io.gfile.glob(old + ".*"):
                tf.io.gfile.remove(path)
            logging.info("Removed old checkpoint %s", old)
        logging.info("Saved checkpoint %s (%d variables)", prefix, len(variables_by_name))
        return prefix

    def restore(self, variables_by_name, checkpoint=None):
        """Restores every variable exactly from `checkpoint` (default: latest); returns its global_step."""
        prefix = resolve_checkpoint(checkpoint or self.latest_checkpoint() or self.output_dir)
        reader = tf.train.load_checkpoint(prefix)
        shapes = reader.get_variable_to_shape_map()
        missing = [n for n in variables_by_name if n not in shapes]
        if missing:
            raise ValueError(f"Checkpoint {prefix} lacks variable(s) {missing[:10]}"
                             f"{' ...' if len(missing) > 10 else ''} ({len(missing)} missing)")
        for name, variable in variables_by_name.items():
            if [int(d) for d in variable.shape] != list(shapes[name]):
                raise ValueError(f"Variable {name}: model shape {list(variable.shape)} vs checkpoint "
                                 f"{list(shapes[name])} in {prefix}")
            _assign(variable, reader.get_tensor(name))
        step = int(reader.get_tensor("global_step")) if "global_step" in shapes else _step_of(prefix)
        logging.info("Restored %d variables from %s (global_step %d)", len(variables_by_name), prefix, step)
        return step


def checkpoint_for_inference(output_dir, init_checkpoint):
    """The newest checkpoint in output_dir, else init_checkpoint; an error when there is neither."""
    latest = None
    if output_dir and tf.io.gfile.exists(os.path.join(output_dir, STATE_FILE)):
        latest = CheckpointManager(output_dir).latest_checkpoint()
    path = latest or init_checkpoint
    if not path:
        raise ValueError("no checkpoint to use: --output_dir=%s holds none and --init_checkpoint is not set"
                         % output_dir)
    return path
