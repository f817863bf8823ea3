"""What the device a job runs on decides, once, where every script's job starts (runner.Job.run, before the
strategy is made): whether XLA compiles the model's steps, the XLA options that make its compile finish, and
where a mixed-precision model runs its elementwise work (--elementwise_dtype, the models' elementwise_dtype).

  device_type(config, devices=None) -> "tpu" | "gpu" | "cpu": --use_tpu / --distribution_strategy=tpu, else
    whether TensorFlow sees a GPU (`devices`: a list of tf.config.PhysicalDevice, injected by tests).
  decide_xla(use_xla, device, replicated) -> (on, why): --use_xla when given; not given (None), on for a GPU or
    TPU and off on a CPU, where XLA makes training slower (README, "Scaling and speed"), and off for several GPU
    replicas (several_replicas: mirrored on several GPUs, multi_worker_mirrored), where XLA (the gradients
    compiled, the all-reduce and update outside: training._make_train_loop) has not been measured yet.
  xla_flags(existing, cache_dir) -> XLA_FLAGS with the project's GPU options added where `existing` (the user's)
    does not set them: cuBLAS GEMMs instead of Triton's (GEMM_FLAG; XLA's default Triton GEMM autotuning makes
    BERT's compile take minutes: benchmarks/GPU.md), and the per-fusion autotune cache in `cache_dir`
    (CACHE_FLAG: a resumed run reads the results instead of tuning again; XLA fills it where it autotunes
    fusions, Triton GEMMs among them, which a user's XLA_FLAGS may turn back on: with cuBLAS GEMMs a tiny model's
    job left it empty on an H200). Both exist in TensorFlow 2.20's and
    2.21's XLA (an unknown flag in XLA_FLAGS ends the process at its first XLA compile).
  decide_elementwise(elementwise_dtype, device): "auto" is "float32" on a CPU, "compute" on a GPU or TPU.
  setup(config, devices=None, environ=None) -> the config with use_xla and elementwise_dtype decided (the latter
    reaches the models through training.py's Task.build_model); on a GPU with XLA on, sets XLA_FLAGS (through xla_flags); logs what it decided and why.
    The entries it added are named in ADDED_ENV too, so that a process started from this one (which inherits
    XLA_FLAGS) replaces them with its own job's instead of keeping them as the user's.
  make_cache_dir() creates the autotune cache folder setup() named (after --output_dir exists).

XLA reads XLA_FLAGS once per process, the first time it needs its options: on a CPU at the first XLA compile
(an unknown flag set after `import tensorflow`, a device listing and an op still ends the process at that
compile), and a GPU may read them as its devices are made. So setup() runs before the strategy, which makes
the devices, and after the device listing (which only counts them); later changes to XLA_FLAGS in the same
process have no effect.
"""
import dataclasses
import os
import re

from absl import logging

import filesystem

GEMM_FLAG = "--xla_gpu_enable_triton_gemm"
CACHE_FLAG = "--xla_gpu_per_fusion_autotune_cache_dir"
CACHE_DIR = "xla_autotune_cache"  # under --output_dir
# Names the XLA_FLAGS entries a job's setup() added, for the processes it starts: they inherit XLA_FLAGS, and
# their own jobs replace these entries (another job's cache folder is not the user's choice) and keep the rest.
ADDED_ENV = "BERT_XLA_FLAGS_ADDED"


def device_type(config, devices=None):
    """"tpu", "gpu" or "cpu": what the job's steps run on (devices: TensorFlow's physical devices when None)."""
    if config.strategy_name == "tpu":
        return "tpu"
    if devices is None:
        import tensorflow as tf
        devices = tf.config.list_physical_devices()  # counts them; makes no device
    return "gpu" if any(device.device_type == "GPU" for device in devices) else "cpu"


def decide_elementwise(elementwise_dtype, device):
    """--elementwise_dtype decided: "auto" is "float32" on a CPU (elementwise bfloat16 is slow there), "compute" on
    a GPU or TPU (encoder.py's ELEMENTWISE_DTYPES)."""
    if elementwise_dtype != "auto":
        return elementwise_dtype
    return "float32" if device == "cpu" else "compute"


def several_replicas(config, devices=None):
    """Whether the training step runs on several replicas of this worker or of several workers (mirrored on
    several GPUs, multi_worker_mirrored)."""
    if config.strategy_name == "multi_worker_mirrored":
        return True
    if config.strategy_name != "mirrored":
        return False
    if devices is None:
        import tensorflow as tf
        devices = tf.config.list_physical_devices()
    return sum(device.device_type == "GPU" for device in devices) > 1


def decide_xla(use_xla, device, replicated=False):
    """(whether XLA compiles the steps, why, as a log phrase) for --use_xla (None: not given) on `device`, the
    step on several replicas when `replicated` (XLA then compiles each replica's gradients and the all-reduce
    and update run outside it; not measured on several GPUs yet: off unless asked)."""
    if use_xla is not None:
        return bool(use_xla), f"--use_xla={str(bool(use_xla)).lower()}"
    if device == "cpu":
        return False, "a CPU, where XLA slows training down (--use_xla=true turns it on)"
    if replicated and device == "gpu":
        return False, ("several replicas, where XLA is not measured yet (--use_xla=true compiles each "
                       "replica's gradients)")
    return True, f"a {device.upper()} and --use_xla not given"


def _flag_names(flags):
    return {match.group(1) for match in re.finditer(r"(--[A-Za-z0-9_]+)(?:=|\s|$)", flags or "")}


def xla_flags(existing, cache_dir):
    """(XLA_FLAGS value, [flags added]) : `existing` (the user's XLA_FLAGS, may be empty) with GEMM_FLAG=false and
    CACHE_FLAG=cache_dir (when cache_dir) appended where it does not set them; the user's values are kept."""
    present = _flag_names(existing)
    added = []
    if GEMM_FLAG not in present:
        added.append(f"{GEMM_FLAG}=false")
    if cache_dir and CACHE_FLAG not in present:
        added.append(f"{CACHE_FLAG}={cache_dir}")
    return " ".join(part for part in [(existing or "").strip()] + added if part), added


_cache_dir = None  # the autotune cache folder setup() named in XLA_FLAGS (made by make_cache_dir)
_ours = set()  # the XLA_FLAGS entries setup() added in this process (an earlier job's are not the user's)


def setup(config, devices=None, environ=None):
    """The config with use_xla and elementwise_dtype decided for the device (device_type, decide_xla,
    decide_elementwise); with XLA on a GPU, XLA_FLAGS gets the project's options
    (xla_flags) unless the user's XLA_FLAGS sets them. Logs the decisions and why."""
    global _cache_dir
    environ = os.environ if environ is None else environ
    _cache_dir = None
    device = device_type(config, devices)
    on, why = decide_xla(config.use_xla, device, device == "gpu" and several_replicas(config, devices))
    elementwise = decide_elementwise(config.elementwise_dtype, device)
    resolved = dataclasses.replace(config, use_xla=on, elementwise_dtype=elementwise)
    if config.dtype != "float32":
        given = config.elementwise_dtype != "auto"
        logging.info("Mixed precision (%s): elementwise work in %s (%s)", config.dtype,
                     config.dtype if elementwise == "compute" else "float32",
                     f"--elementwise_dtype={elementwise}" if given else f"a {device.upper()}")
    if not on:
        logging.info("XLA off: %s", why)
        return resolved
    note = ""
    if device == "gpu":
        cache_dir = None
        if config.output_dir and not filesystem.is_remote(config.output_dir):
            cache_dir = os.path.abspath(os.path.join(config.output_dir, CACHE_DIR))
        inherited = set(environ.get(ADDED_ENV, "").split()) - _ours  # a parent process's job added these
        existing = " ".join(flag for flag in environ.get("XLA_FLAGS", "").split() if flag not in inherited)
        value, added = xla_flags(existing, cache_dir)
        environ["XLA_FLAGS"] = value
        _ours.update(added)
        environ[ADDED_ENV] = " ".join(flag for flag in value.split() if flag in _ours)
        if any(flag.startswith(CACHE_FLAG) for flag in added):
            _cache_dir = cache_dir
        kept = sorted(flag for flag in value.split() if flag.split("=")[0] in (GEMM_FLAG, CACHE_FLAG)
                      and flag not in _ours)
        note = ("; XLA_FLAGS: the project adds " + (" ".join(added) if added else "nothing")
                + (f", keeps the user's {', '.join(kept)}" if kept else "")
                + ("" if cache_dir else " (no autotune cache: no --output_dir on a local file system)"))
    logging.info("XLA on: %s; the steps are compiled with XLA (the first loop's log says how long it "
                 "took)%s", why, note)
    return resolved


def make_cache_dir():
    """Creates the autotune cache folder named in XLA_FLAGS by setup() (None if it named none); returns it."""
    if _cache_dir:
        os.makedirs(_cache_dir, exist_ok=True)
    return _cache_dir
