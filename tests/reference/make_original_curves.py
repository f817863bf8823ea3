"""Makes tests/reference/original_curves.json: the original release's own per-step training losses on the batches
this project's runners train on, for tests/test_training_curves.py.

    git --git-dir=BARE_CLONE_OF_google-research/bert archive HEAD | tar -x -C /tmp/bert
    python tests/reference/make_original_curves.py --original_dir=/tmp/bert --original_revision=eedf571 \
        [--workdir=/tmp/curves] [--runners=run_squad,...]

--original_dir is a checkout of https://github.com/google-research/bert. Its modeling.py, optimization.py and
run_pretraining.py / run_classifier.py / run_squad.py are imported from there as they are and run in TensorFlow's
compat.v1 graph mode, each in a process of its own (its scripts define the same absl flags). Nothing of the
original is copied into this project: what TensorFlow 2.20 no longer has is stood in for by this script's own
shims (tf.contrib.layers.layer_norm, tf.layers.dense, tf.estimator.ModeKeys, tf.contrib.tpu.TPUEstimatorSpec),
written from those functions' documented behaviour.

For each runner (tests/training_curves.py holds the recipe):
1. Ours runs the recipe's command as a user runs it (its losses are printed beside the original's, to compare).
2. The batches: the first 100 batches of the input function that run trained with, rebuilt here with the runner's
   seed (TensorFlow's global seed set as the runner sets it), from the feature records that run wrote
   (run_classifier, run_squad) or from the pre-training records (run_pretraining).
3. The original's model function (its script's model_fn_builder; features on placeholders, TRAIN mode) builds its
   graph with its create_model and its optimization.create_optimizer, starts from the same init checkpoint (every
   trainable variable found there, output layer included) and trains on those batches, one session run per step;
   the loss of each step is the one its train op's forward pass computed, as ours logs.
Dropout is off on both sides: the config's probabilities are 0 (the original's dropout() then returns its input)
and the shim's tf.nn.dropout returns its input (the classifier's fixed keep_prob=0.9 on the output layer).
Learning rate: the original's train op reads global_step for its schedule unordered with its own increment, so a
plain run takes the rate of the step before or after it, whichever the scheduling of its ops runs first. Here the
schedule's read of global_step (the one read tensor of its reference variable) is fed the incremented step:
step + 1 for the update that makes global step step + 1, the rate this project's schedule takes (optimization.py,
lr_step_offset=1). The original's own increment reads that tensor too and stores step + 2; nothing else in the
step reads global_step.

Recorded runs, each of the original on this machine's CPU, named by tests/training_curves.py's variant_name:
"gather" (use_one_hot_embeddings=False, its default off TPU, oneDNN kernels on: TF_ENABLE_ONEDNN_OPTS=1),
"gather_onednn_off" (the same with TF_ENABLE_ONEDNN_OPTS=0: the original against itself with other CPU kernels),
and for the fine-tuning runners "one_hot" (use_one_hot_embeddings=True, its TPU path); on a CPU without AVX-512
the names carry its kernels ("gather_avx2", "gather_avx2_onednn_off", "one_hot_avx2"). Runs recorded on other CPUs
stay in the file: the tests compare ours with the run made on kernels like their machine's, within the original's
spread over all of them. Each variant's description says which TensorFlow and CPU made it.
"""
import argparse
import importlib
import json
import os
import subprocess
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# Per runner, the original's runs recorded on this machine: (path, oneDNN on). Each is named by
# tests/training_curves.py's variant_name with this CPU's kernels; runs recorded on other CPUs are kept.
VARIANTS = {"run_pretraining": (("gather", True), ("gather", False)),
            "run_classifier": (("gather", True), ("gather", False), ("one_hot", True)),
            "run_squad": (("gather", True), ("gather", False), ("one_hot", True))}


# ---------------------------------------------------------------------------------------------------------
# The original's side (a process of its own, compat.v1 graph mode; none of this project's modules imported).


def _compat_module(v1):
    """A stand-in for `import tensorflow as tf` in the original's files: tf.compat.v1 with the shims."""

    class Namespace(types.ModuleType):
        def __init__(self, name, base, **members):
            super().__init__(name)
            self._base = base
            self.__dict__.update(members)

        def __getattr__(self, attr):
            return getattr(self._base, attr)

    def layer_norm(inputs, begin_norm_axis=-1, begin_params_axis=-1, scope=None, reuse=None, **unused):
        """tf.contrib.layers.layer_norm over the last axis: variables scope/beta, scope/gamma; moments and
        batch_normalization with variance epsilon 1e-12."""
        if begin_norm_axis != -1 or begin_params_axis != -1 or unused:
            raise NotImplementedError("layer_norm shim: only the original's call (last axis) is supported")
        with v1.variable_scope(scope, default_name="LayerNorm", values=[inputs], reuse=reuse):
            params_shape = inputs.shape[-1:]
            beta = v1.get_variable("beta", shape=params_shape, dtype=inputs.dtype,
                                   initializer=v1.zeros_initializer())
            gamma = v1.get_variable("gamma", shape=params_shape, dtype=inputs.dtype,
                                    initializer=v1.ones_initializer())
            mean, variance = v1.nn.moments(inputs, [inputs.shape.rank - 1], keep_dims=True)
            return v1.nn.batch_normalization(inputs, mean, variance, offset=beta, scale=gamma,
                                             variance_epsilon=1e-12)

    def dense(inputs, units, activation=None, use_bias=True, kernel_initializer=None,
              bias_initializer=None, name=None, reuse=None, **unused):
        """tf.layers.dense: variables name/kernel [in, units] and name/bias [units]; matmul, bias, activation."""
        if unused:
            raise NotImplementedError(f"dense shim: unsupported arguments {sorted(unused)}")
        with v1.variable_scope(name, default_name="dense", values=[inputs], reuse=reuse):
            kernel = v1.get_variable("kernel", shape=[inputs.shape[-1], units], dtype=inputs.dtype,
                                     initializer=kernel_initializer)
            if inputs.shape.rank == 2:
                outputs = v1.matmul(inputs, kernel)
            else:
                outputs = v1.tensordot(inputs, kernel, [[inputs.shape.rank - 1], [0]])
            if use_bias:
                bias = v1.get_variable("bias", shape=[units], dtype=inputs.dtype,
                                       initializer=bias_initializer or v1.zeros_initializer())
                outputs = v1.nn.bias_add(outputs, bias)
            return activation(outputs) if activation is not None else outputs

    def dropout(x, *args, **kwargs):
        """Dropout off: the input unchanged."""
        return x

    class ModeKeys:
        TRAIN = "train"
        EVAL = "eval"
        PREDICT = "infer"

    def estimator_spec(**kwargs):
        return types.SimpleNamespace(**kwargs)

    contrib = types.SimpleNamespace(layers=types.SimpleNamespace(layer_norm=layer_norm),
                                    tpu=types.SimpleNamespace(TPUEstimatorSpec=estimator_spec))
    return Namespace("tensorflow", v1, contrib=contrib, layers=types.SimpleNamespace(dense=dense),
                     estimator=types.SimpleNamespace(ModeKeys=ModeKeys),
                     nn=Namespace("tensorflow.nn", v1.nn, dropout=dropout))


def _import_original(original_dir, runner, shim):
    """The original's modeling module and runner script, imported from original_dir with `tensorflow` bound to
    the shim."""
    sys.path.insert(0, original_dir)
    real = sys.modules["tensorflow"]
    sys.modules["tensorflow"] = shim
    try:
        modeling = importlib.import_module("modeling")
        script = importlib.import_module(runner)
    finally:
        sys.modules["tensorflow"] = real
    for module in (modeling, script, sys.modules["optimization"]):
        if os.path.dirname(os.path.abspath(module.__file__)) != os.path.abspath(original_dir):
            raise RuntimeError(f"{module.__name__} was imported from {module.__file__}, not from {original_dir}")
    return modeling, script


def original_worker(args):
    """Trains the original on the saved batches; writes {"losses": [...]} to args.output."""
    import numpy as np
    import tensorflow as tf
    v1 = tf.compat.v1
    v1.disable_v2_behavior()
    shim = _compat_module(v1)
    modeling, script = _import_original(args.original_dir, args.runner, shim)
    recipe = json.loads(args.recipe)
    batches = np.load(args.batches)
    names = sorted(batches.files)
    steps = recipe["steps"]
    bert_config = modeling.BertConfig.from_json_file(args.bert_config_file)
    common = dict(init_checkpoint=args.init_checkpoint, learning_rate=recipe["learning_rate"],
                  num_train_steps=steps, num_warmup_steps=recipe["num_warmup_steps"], use_tpu=False,
                  use_one_hot_embeddings=args.one_hot)
    if args.runner == "run_classifier":
        model_fn = script.model_fn_builder(bert_config=bert_config, num_labels=recipe["num_labels"], **common)
    else:
        model_fn = script.model_fn_builder(bert_config=bert_config, **common)
    with v1.Graph().as_default():
        features = {name: v1.placeholder(tf.as_dtype(batches[name].dtype), batches[name].shape[1:], name=name)
                    for name in names}
        spec = model_fn(features, None, shim.estimator.ModeKeys.TRAIN, {"batch_size": recipe["batch_size"]})
        tvars = v1.trainable_variables()
        _, initialized = modeling.get_assignment_map_from_checkpoint(tvars, args.init_checkpoint)
        missing = [v.name for v in tvars if v.name[:-2] not in initialized]
        if missing:
            raise RuntimeError(f"not in the init checkpoint: {missing}")
        global_step = v1.train.get_global_step()
        if global_step.op.type != "VariableV2":
            raise RuntimeError("global_step is not a reference variable: its reads cannot be fed as one tensor")
        step_read = global_step.value()
        probe = v1.cast(global_step, tf.int32)
        losses = []
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            if sess.run(probe, {step_read: 7}) != 7:
                raise RuntimeError("feeding global_step's read does not reach its readers")
            for step in range(steps):
                feed = {features[name]: batches[name][step] for name in names}
                feed[step_read] = step + 1
                _, loss = sess.run([spec.train_op, spec.loss], feed)
                losses.append(float(loss))
    with open(args.output, "w") as f:
        json.dump({"losses": losses}, f)


# ---------------------------------------------------------------------------------------------------------
# This project's side.


def training_batches(runner, output_dir, steps):
    """{feature: array [steps, batch, ...]}: the first `steps` batches the runner's training input gave."""
    sys.path.insert(0, ROOT)
    import numpy as np
    import tensorflow as tf
    import records
    import run_pretraining
    from tests import training_curves as tc
    tf.random.set_seed(tc.SEED)  # as the runner's training.train does (keras.utils.set_random_seed(--seed))
    if runner == "run_pretraining":
        input_fn = run_pretraining.pretraining_input_fn(
            [tc.pretraining_records()], records.pretraining(tc.MAX_SEQ_LENGTH, tc.MAX_PREDICTIONS_PER_SEQ), True,
            seed=tc.SEED)
    else:
        record_format = (records.classifier(tc.MAX_SEQ_LENGTH, False) if runner == "run_classifier"
                         else records.squad(tc.MAX_SEQ_LENGTH, True))
        input_fn = records.input_fn(os.path.join(output_dir, "train.tf_record"), record_format, is_training=True,
                                    drop_remainder=True, shuffle=records.Shuffle(seed=tc.SEED))
    batches = list(input_fn(tc.BATCH_SIZE, None).take(steps))
    return {name: np.stack([batch[name].numpy() for batch in batches]) for name in batches[0]}


def run_original(args, runner, variant, path, onednn, inputs, batches_file, workdir):
    from tests import training_curves as tc
    recipe = {"steps": tc.STEPS, "learning_rate": tc.LEARNING_RATE, "batch_size": tc.BATCH_SIZE,
              "num_warmup_steps": int(tc.STEPS * tc.WARMUP_PROPORTION), "num_labels": tc.CLASSIFIER_HEAD[1]}
    init = (os.path.join(tc.tiny_dir(), "model.ckpt-30") if runner == "run_pretraining"
            else inputs["init_checkpoint"])
    output = os.path.join(workdir, f"original_{variant}.json")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["TF_ENABLE_ONEDNN_OPTS"] = "1" if onednn else "0"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    command = [sys.executable, os.path.abspath(__file__), "--worker", f"--runner={runner}",
               f"--original_dir={args.original_dir}", f"--batches={batches_file}",
               f"--bert_config_file={inputs['bert_config_file']}", f"--init_checkpoint={init}",
               f"--recipe={json.dumps(recipe)}", f"--output={output}"] + (["--one_hot"] if path == "one_hot" else [])
    proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=HERE)
    if proc.returncode != 0:
        raise RuntimeError(f"original {runner} {variant} failed:\n{proc.stderr[-5000:]}")
    with open(output) as f:
        return json.load(f)["losses"]


def cpu_model():
    """This CPU's model name and the vector instructions its kernels use, for the record."""
    from tests import training_curves as tc
    try:
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        name = ""
    return f"{name or 'an unnamed CPU'} ({tc.cpu_kernels()})"


def main(args):
    sys.path.insert(0, ROOT)
    import numpy as np
    import tensorflow as tf
    from tests import training_curves as tc
    os.makedirs(args.workdir, exist_ok=True)
    inputs = tc.prepare(os.path.join(args.workdir, "inputs"))
    previous = tc.load_reference() if os.path.exists(tc.REFERENCE_FILE) else {"runs": {}}
    runs = dict(previous.get("runs", {}))
    described = dict(previous.get("variants", {}))
    kernels, cpu = tc.cpu_kernels(), cpu_model()
    for runner in args.runners:
        workdir = os.path.join(args.workdir, runner)
        ours_dir = os.path.join(workdir, "ours")
        if os.path.exists(ours_dir):
            raise SystemExit(f"{ours_dir} exists: give another --workdir")
        start = time.time()
        ours = tc.run(runner, inputs, ours_dir)
        print(f"{runner}: ours ran in {time.time() - start:.0f} s", flush=True)
        batches_file = os.path.join(workdir, "batches.npz")
        np.savez(batches_file, **training_batches(runner, ours_dir, tc.STEPS))
        runs[runner] = dict(runs.get(runner, {}))
        for path, onednn in VARIANTS[runner]:
            variant = tc.variant_name(path, kernels, onednn)
            start = time.time()
            runs[runner][variant] = run_original(args, runner, variant, path, onednn, inputs, batches_file, workdir)
            where = "the original's TPU path" if path == "one_hot" else "CPU/GPU"
            described[variant] = (f"use_one_hot_embeddings={path == 'one_hot'} ({where}), "
                                  f"TF_ENABLE_ONEDNN_OPTS={int(onednn)}; TensorFlow {tf.__version__} on {cpu}")
            worst, step = tc.largest_difference(ours, runs[runner][variant])
            print(f"{runner} {variant}: original ran in {time.time() - start:.0f} s; ours against it: largest "
                  f"difference {worst:.3g} at step {step}", flush=True)
        spread, step = tc.original_spread(runs[runner])
        print(f"{runner}: the original against itself (its gather runs on every recorded CPU, oneDNN on and off): "
              f"largest difference {spread:.3g} at step {step}")
    recipe = {name: getattr(tc, name) for name in ("STEPS", "BATCH_SIZE", "LEARNING_RATE", "WARMUP_PROPORTION",
                                                     "SEED", "HEAD_SEED", "MAX_SEQ_LENGTH",
                                                     "MAX_PREDICTIONS_PER_SEQ", "CLASSIFIER_EPOCHS", "SQUAD_EPOCHS")}
    result = {"made_by": "tests/reference/make_original_curves.py",
              "original": {"repository": "https://github.com/google-research/bert",
                           "revision": args.original_revision},
              "recipe": recipe,
              "variants": {name: described[name] for name in sorted(described)},
              "runs": {runner: runs[runner] for runner in sorted(runs)}}
    with open(tc.REFERENCE_FILE, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print("wrote", tc.REFERENCE_FILE)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--original_dir", required=True, help="a checkout of google-research/bert")
    parser.add_argument("--original_revision", default="unknown", help="its commit, recorded in the output")
    parser.add_argument("--workdir", default="/tmp/original_curves", help="scratch folder (runs, batches)")
    parser.add_argument("--runners", default=",".join(VARIANTS), type=lambda s: s.split(","),
                        help="comma-separated subset of " + ", ".join(VARIANTS))
    # The original's side (one process per run).
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--runner", help=argparse.SUPPRESS)
    parser.add_argument("--batches", help=argparse.SUPPRESS)
    parser.add_argument("--bert_config_file", help=argparse.SUPPRESS)
    parser.add_argument("--init_checkpoint", help=argparse.SUPPRESS)
    parser.add_argument("--recipe", help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    parser.add_argument("--one_hot", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not os.path.isfile(os.path.join(args.original_dir, "modeling.py")):
        parser.error(f"--original_dir={args.original_dir}: no modeling.py there (a google-research/bert checkout)")
    unknown = sorted(set(args.runners) - set(VARIANTS))
    if unknown:
        parser.error(f"--runners: unknown {unknown}")
    return args


if __name__ == "__main__":
    parsed = parse_args(sys.argv[1:])
    if parsed.worker:
        original_worker(parsed)
    else:
        main(parsed)
