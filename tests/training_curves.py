"""Training curves against the original's: the recipe shared by tests/test_training_curves.py and the script that
made the original's curves, tests/reference/make_original_curves.py.

Each runner trains as a user runs it (a subprocess of run_pretraining.py, run_classifier.py or run_squad.py with
its flags) from the tiny original-format checkpoint of ../shared/reference/original_checkpoint_tiny, dropout off
(the config's two probabilities 0, and --output_dropout_prob=0 for the classifier), batch 8, learning rate 1e-4,
10 % warm-up then linear decay over 100 steps, --deterministic, one loss per step (--save_summary_steps=1, read
back from the TensorBoard scalars). The fine-tuning runners start from an init checkpoint that holds the tiny
checkpoint's encoder and an output layer drawn once here (write_init_checkpoint), so both sides start from the
same head. tests/reference/original_curves.json holds the original's per-step losses for the same batches.
"""
import json
import os
import platform
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE_FILE = os.path.join(ROOT, "tests", "reference", "original_curves.json")

STEPS = 100
BATCH_SIZE = 8
LEARNING_RATE = 1e-4
WARMUP_PROPORTION = 0.1
SEED = 12345  # the runners' --seed default: their shuffling
HEAD_SEED = 43
MAX_SEQ_LENGTH = 128
MAX_PREDICTIONS_PER_SEQ = 20
RUNNERS = ("run_pretraining", "run_classifier", "run_squad")

# Fine-tuning epochs that make exactly STEPS steps (the runners' int(examples / batch * epochs)).
MRPC_TRAIN_EXAMPLES = 3668
SQUAD_TRAIN_QUESTIONS = 626
CLASSIFIER_EPOCHS = 0.2181026   # int(3668 / 8 * 0.2181026) = 100
SQUAD_EPOCHS = 1.278            # int(626 / 8 * 1.278) = 100
CLASSIFIER_HEAD = (("output_weights", "output_bias"), 2)   # MRPC: 2 labels
SQUAD_HEAD = (("cls/squad/output_weights", "cls/squad/output_bias"), 2)


def shared_dir():
    return os.path.abspath(os.environ.get("BERT_SHARED_DIR", os.path.join(ROOT, "..", "shared")))


def shared(*parts):
    return os.path.join(shared_dir(), *parts)


def tiny_dir():
    return shared("reference", "original_checkpoint_tiny")


def pretraining_records():
    return shared("reference", "pretraining_data", "sample_text_default.tfrecord")


def num_train_steps(examples, epochs):
    """The fine-tuning runners' step count (runner.finetuning_config)."""
    return int(examples / BATCH_SIZE * epochs)


def truncated_normal(rng, shape, stddev=0.02):
    """The original initializer's values (normal, redrawn beyond two standard deviations), from numpy."""
    values = rng.standard_normal(shape)
    while True:
        outside = np.abs(values) > 2.0
        if not outside.any():
            return (values * stddev).astype(np.float32)
        values[outside] = rng.standard_normal(int(outside.sum()))


def initial_heads():
    """{name: array} of both fine-tuning output layers, drawn once (HEAD_SEED)."""
    rng = np.random.default_rng(HEAD_SEED)
    hidden = json.load(open(os.path.join(tiny_dir(), "bert_config.json")))["hidden_size"]
    heads = {}
    for (weights, bias), outputs in (CLASSIFIER_HEAD, SQUAD_HEAD):
        heads[weights] = truncated_normal(rng, (outputs, hidden))
        heads[bias] = np.zeros([outputs], np.float32)
    return heads


def write_init_checkpoint(prefix):
    """The fine-tuning init checkpoint: the tiny checkpoint's bert/ variables and both output layers."""
    import tensorflow as tf
    sys.path.insert(0, ROOT)
    import checkpoints
    reader = tf.train.load_checkpoint(os.path.join(tiny_dir(), "model.ckpt-30"))
    tensors = {name: reader.get_tensor(name) for name in sorted(reader.get_variable_to_shape_map())
               if name.startswith("bert/") and not name.endswith(("/adam_m", "/adam_v"))}
    tensors.update(initial_heads())
    checkpoints.save_checkpoint(prefix, tensors)
    return prefix


def write_config_without_dropout(path):
    """The tiny checkpoint's bert_config.json with both dropout probabilities 0."""
    config = json.load(open(os.path.join(tiny_dir(), "bert_config.json")))
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    with open(path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    return path


def prepare(workdir):
    """Writes the config and init checkpoint both sides start from into workdir; returns their paths."""
    os.makedirs(workdir, exist_ok=True)
    return {"bert_config_file": write_config_without_dropout(os.path.join(workdir, "bert_config.json")),
            "init_checkpoint": write_init_checkpoint(os.path.join(workdir, "init", "model.ckpt-0"))}


def command(runner, inputs, output_dir, root=ROOT, extra=()):
    """The command line of `runner` (one of RUNNERS) for the curve, run from the project at `root`."""
    common = [f"--bert_config_file={inputs['bert_config_file']}", f"--output_dir={output_dir}",
              f"--train_batch_size={BATCH_SIZE}", f"--learning_rate={LEARNING_RATE}",
              f"--max_seq_length={MAX_SEQ_LENGTH}", "--save_summary_steps=1", "--save_checkpoints_steps=1000",
              "--deterministic", "--do_train"]
    vocab = f"--vocab_file={shared('vocab', 'uncased', 'vocab.txt')}"
    if runner == "run_pretraining":
        flags = [f"--input_file={pretraining_records()}",
                 f"--init_checkpoint={os.path.join(tiny_dir(), 'model.ckpt-30')}",
                 f"--max_predictions_per_seq={MAX_PREDICTIONS_PER_SEQ}", f"--num_train_steps={STEPS}",
                 f"--num_warmup_steps={int(STEPS * WARMUP_PROPORTION)}"]
    elif runner == "run_classifier":
        flags = ["--task_name=MRPC", f"--data_dir={shared('data', 'glue', 'MRPC')}", vocab,
                 f"--init_checkpoint={inputs['init_checkpoint']}", f"--num_train_epochs={CLASSIFIER_EPOCHS}",
                 f"--warmup_proportion={WARMUP_PROPORTION}", "--output_dropout_prob=0"]
    elif runner == "run_squad":
        flags = [f"--train_file={shared('data', 'squad', 'v2.0_dev_subset', 'train-v2.0.json')}", vocab,
                 "--version_2_with_negative", f"--init_checkpoint={inputs['init_checkpoint']}",
                 f"--num_train_epochs={SQUAD_EPOCHS}", f"--warmup_proportion={WARMUP_PROPORTION}",
                 "--train_first_answer", "--doc_stride=64", "--max_query_length=32"]
    else:
        raise ValueError(f"unknown runner {runner!r}")
    return [sys.executable, os.path.join(root, runner + ".py")] + common + flags + list(extra)


# The runner's command with --use_tpu on this machine: the default strategy stands in for the TPU one.
_TPU_PATH = """
import runpy, sys
sys.path.insert(0, {root!r})
import tensorflow as tf
import training
training.create_strategy = lambda config: tf.distribute.get_strategy()
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run(runner, inputs, output_dir, root=ROOT, extra=(), tpu_path=False, timeout=900):
    """Runs the command; returns its per-step training losses (STEPS floats, step order). tpu_path adds --use_tpu
    and trains on the default strategy in place of a TPU's (what the original computes there, on this CPU)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TF_CONFIG")}
    argv = command(runner, inputs, output_dir, root, extra)
    if tpu_path:
        argv = [argv[0], "-c", _TPU_PATH.format(root=root)] + argv[1:] + ["--use_tpu"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=root, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{runner} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return losses_of(output_dir)


def losses_of(output_dir):
    """The per-step losses a run with --save_summary_steps=1 wrote to its TensorBoard scalars."""
    sys.path.insert(0, ROOT)
    from tests.event_files import summary_scalars
    scalars = summary_scalars(output_dir)["loss"]
    steps = [step for step, _ in scalars]
    if steps != list(range(1, STEPS + 1)):
        raise ValueError(f"{output_dir}: expected one loss for each of steps 1..{STEPS}, found steps {steps[:5]}...")
    return [value for _, value in scalars]


def onednn_on():
    """Whether TensorFlow's oneDNN kernels are on in a process started with this environment: what
    TF_ENABLE_ONEDNN_OPTS says, else TensorFlow's own default for this CPU (on for CPUs with AVX-512 VNNI, BF16 or
    AMX, off for others: the same build runs either way)."""
    setting = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    if setting is not None:
        return setting.strip().lower() not in ("0", "false")
    from tensorflow.python.util import _pywrap_util_port
    return bool(_pywrap_util_port.IsMklEnabled())


def cpu_kernels():
    """The vector instructions TensorFlow's CPU kernels are built for here, which decide their float rounding:
    "avx512" (x86 with AVX-512), "avx2" (other x86 with AVX2), else the machine's name."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        flags = []
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if "avx2" in flags else platform.machine()


def variant_name(path, kernels, onednn):
    """The name of a recorded run of the original: its path ("gather": CPU/GPU, "one_hot": TPU), the CPU kernels
    it ran on (none named for "avx512", where the first runs were recorded) and "_onednn_off" when oneDNN was off:
    "gather", "gather_onednn_off", "gather_avx2", "gather_avx2_onednn_off", "one_hot", ..."""
    return path + ("" if kernels == "avx512" else f"_{kernels}") + ("" if onednn else "_onednn_off")


def reference_variant(path="gather"):
    """The recorded run of the original made with this machine's kernels: path "gather" (CPU/GPU) or "one_hot"
    (TPU), this CPU's kernels (cpu_kernels), oneDNN on or off as a process started here runs (onednn_on; the
    TPU path is recorded with oneDNN on only)."""
    return variant_name(path, cpu_kernels(), onednn_on() or path == "one_hot")


def reference_run(runs, path="gather"):
    """The losses of the original's run made with this machine's kernels (reference_variant) among `runs`."""
    name = reference_variant(path)
    if name not in runs:
        raise LookupError(f"no run of the original recorded as {name!r} (recorded: {', '.join(sorted(runs))}): "
                          "record one on this machine with tests/reference/make_original_curves.py")
    return runs[name]


def original_spread(runs, steps=None):
    """The original against itself: the largest difference between two of its recorded gather-path runs (other
    CPUs' kernels, oneDNN on and off) over the first `steps` steps: (difference, 1-based step)."""
    names = sorted(name for name in runs if name.startswith("gather"))
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    return max(largest_difference(runs[a], runs[b], steps) for a, b in pairs)


def load_reference():
    """The committed original curves (tests/reference/original_curves.json)."""
    with open(REFERENCE_FILE) as f:
        return json.load(f)


def largest_difference(ours, theirs, steps=None):
    """(largest |ours - theirs| over the first `steps` steps (all by default), the 1-based step where it is)."""
    a = np.asarray(ours[:steps], np.float64)
    b = np.asarray(theirs[:steps], np.float64)
    diff = np.abs(a - b)
    return float(diff.max()), int(diff.argmax()) + 1
