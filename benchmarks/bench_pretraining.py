"""End-to-end pre-training throughput on BERT-base or -large: run_pretraining vs tf-models-official and HF PyTorch.

Three implementations, each configuration `impl:dtype:xla` in its own process, all with the same batch
from the same TFRecords, the masked-LM + next-sentence losses and AdamW-style weight decay (LayerNorm and
biases excluded) with global-norm clipping 1.0 and a linear-decay learning rate:
- `ours`: run_pretraining.run (the original's AdamWeightDecay), `xla` = --use_xla (on a GPU the project sets
  XLA's options itself: device_setup.py; nothing is set by hand).
- `peer`: tf-models-official (legacy tf_keras) BertEncoder + BertPretrainerV2, `xla` = jit_compile, with the XLA
  options the project sets for ours (device_setup.xla_flags: cuBLAS GEMMs, an autotune cache in its own folder;
  with XLA's defaults neither side compiled BERT in 240 s on an H100).
- `hf`: transformers BertForPreTraining (hidden_act "gelu_new", the original's tanh gelu) with
  torch.optim.AdamW(fused=True); `xla=1` means torch.compile(model) (there is no XLA in PyTorch).
  Torch threads = os.cpu_count(). HF is installed by `source scripts/setup.sh --bench`. Unlike the
  original (and ours and peer), BertForPreTraining computes masked-LM logits at every position, not only at
  the masked ones; peak RSS does not count torch.compile's compile-worker processes.
dtypes, the same for each side: bfloat16 = mixed precision (Keras mixed_bfloat16 policies; torch.autocast);
float16 = mixed float16 with dynamic loss scaling (ours: --dtype=float16; peer: LossScaleOptimizer; hf: autocast
and torch.amp.GradScaler); float32 = float32 variables and matmuls in TF32 on a GPU that has it (TensorFlow's
default; torch.backends.cuda.matmul.allow_tf32 set for hf), reported as "tf32" there.
ours and peer read the TFRecords with tf.data (repeat, shuffle(100), decode, batch) inside their loops. hf
cannot consume tf.data tensors, so a helper process decodes a pool of batches with that same pipeline
beforehand (so TensorFlow is not resident in the torch process) and the hf loop cycles through that pool,
turning each batch into torch tensors (and moving it to the device) inside the timed loop; that leaves
hf a little less input work per step than the others.
Each process runs one warm-up loop of `--steps` steps and reports the examples/s of the second (steady,
already compiled) loop (ours: progress lines and summaries at the loops' ends, so that none cuts a loop short),
its peak resident memory (and peak GPU memory where there is a GPU), and compile_s: the first loop's time less
its steps at the second loop's speed (tracing, compiling, autotuning), the same estimate for every side. model
TFLOP/s counts the original's matmul work (train_flops); MFU is that over --peak_tflops (gpu_run.sh passes the
bf16 matmul peak it measured; none: no MFU).

    .venv/bin/python benchmarks/bench_pretraining.py --steps=5 --configs=ours:float32:0,peer:float32:0,hf:float32:0
    # a smoke run of every side on a CPU: --model=tiny
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_INPUT = os.path.join(ROOT, "..", "shared", "reference", "pretraining_data",
                             "conll_train_docs_dupe2.tfrecord")
DEFAULT_CONFIGS = ",".join(f"{impl}:{dtype}:{xla}" for dtype in ("float32", "bfloat16") for xla in (0, 1)
                           for impl in ("ours", "peer", "hf"))
BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1, max_position_embeddings=512, type_vocab_size=2,
                 initializer_range=0.02)
BERT_LARGE = dict(BERT_BASE, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
BERT_TINY = dict(BERT_BASE, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
MODELS = {"base": BERT_BASE, "large": BERT_LARGE, "tiny": BERT_TINY}  # tiny: smoke runs on a CPU
HF_POOL_BATCHES = 32
IMPLS = ("ours", "peer", "hf")
DTYPES = {impl: ("float32", "bfloat16", "float16") for impl in IMPLS}


def train_flops(config, batch_size, seq_length, max_predictions):
    """Matmul FLOPs of one training step (forward x 3), counting the masked-LM head at the masked positions only
    (what the original computes): the nominal work, the same for every implementation."""
    h, i, t = config["hidden_size"], config["intermediate_size"], batch_size * seq_length
    per_layer = 2 * t * (4 * h * h + 2 * h * i) + 2 * 2 * batch_size * seq_length * seq_length * h
    masked = batch_size * max_predictions
    heads = 2 * masked * (h * h + h * config["vocab_size"]) + 2 * batch_size * h * h
    return 3 * (config["num_hidden_layers"] * per_layer + heads)


def compile_seconds(first_s, steady_s):
    """The first loop's tracing / compiling / autotuning time: its time less the steady loop's (same steps)."""
    return max(0.0, first_s - steady_s)


def matmul_precision(dtype, device):
    """What the matmuls ran in: dtype, or "tf32" for float32 on a GPU (TensorFlow's default there; hf sets it)."""
    return "tf32" if dtype == "float32" and device != "cpu" else dtype


def device_name(impl):
    if impl == "hf":
        import torch
        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    return tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU") if gpus else "cpu"


def peak_memory(impl):
    out = {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}
    if impl == "hf":
        import torch
        if torch.cuda.is_available():
            out["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2 ** 20
        return out
    import tensorflow as tf
    if tf.config.list_physical_devices("GPU"):
        out["peak_gpu_mb"] = tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2 ** 20
    return out


def _dataset(args):
    """The shared input pipeline: TFRecords, repeat, shuffle(100), decode, batches (int32 / float32)."""
    import tensorflow as tf
    seq, preds = args.max_seq_length, args.max_predictions_per_seq
    spec = {"input_ids": seq, "input_mask": seq, "segment_ids": seq, "masked_lm_positions": preds,
            "masked_lm_ids": preds, "next_sentence_labels": 1}

    def decode(record):
        feats = {k: tf.io.FixedLenFeature([n], tf.int64) for k, n in spec.items()}
        feats["masked_lm_weights"] = tf.io.FixedLenFeature([preds], tf.float32)
        ex = tf.io.parse_single_example(record, feats)
        return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in ex.items()}

    files = tf.io.gfile.glob(args.input_file)
    if not files:
        raise SystemExit(f"--input_file {args.input_file}: no file matches")
    dataset = tf.data.Dataset.from_tensor_slices(files).repeat().interleave(
        tf.data.TFRecordDataset, cycle_length=min(4, len(files)), num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.shuffle(100).map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.batch(args.batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def _pool_size(args):
    return max(1, min(2 * args.steps, HF_POOL_BATCHES))


def write_pool(args, path):
    """Decodes the first batches of the shared pipeline into an .npz of stacked arrays [pool, batch, ...]."""
    batches = list(_dataset(args).take(_pool_size(args)).as_numpy_iterator())
    np.savez(path, **{k: np.stack([b[k] for b in batches]) for k in batches[0]})


def hf_batches(pool):
    """Turns decoded pool arrays into HF BertForPreTraining inputs, one dict of int64 arrays per batch.

    labels: -100 everywhere except at masked_lm_positions whose weight is > 0, which hold masked_lm_ids;
    next_sentence_label: next_sentence_labels[:, 0].
    """
    batches = []
    for i in range(pool["input_ids"].shape[0]):
        ids = pool["input_ids"][i].astype(np.int64)
        labels = np.full_like(ids, -100)
        rows, cols = np.nonzero(pool["masked_lm_weights"][i] > 0)
        positions = pool["masked_lm_positions"][i][rows, cols]
        if positions.size and positions.max() >= ids.shape[1]:
            raise ValueError(f"masked_lm_positions up to {positions.max()} >= max_seq_length {ids.shape[1]}")
        labels[rows, positions] = pool["masked_lm_ids"][i][rows, cols]
        batches.append({"input_ids": ids, "attention_mask": pool["input_mask"][i].astype(np.int64),
                        "token_type_ids": pool["segment_ids"][i].astype(np.int64), "labels": labels,
                        "next_sentence_label": pool["next_sentence_labels"][i][:, 0].astype(np.int64)})
    return batches


CHILD_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
# The hf side's batch decoding needs no GPU; hidden from it, TensorFlow cannot reserve the GPU's memory there.
# It runs with TensorFlow's PYTHONPATH even when the hf process itself was given another (--hf_pythonpath).
DECODE_ENV = dict(CHILD_ENV, CUDA_VISIBLE_DEVICES="",
                  PYTHONPATH=os.environ.get("BENCH_TF_PYTHONPATH", os.environ.get("PYTHONPATH", "")))


def child_env(impl, hf_pythonpath=None, xla=0, cache_dir=None):
    """The environment of one configuration's process: hf gets --hf_pythonpath when given (a TensorFlow kit
    first on PYTHONPATH can shadow the CUDA libraries torch loads); peer with XLA gets the XLA options the project
    sets for ours (device_setup.xla_flags, its autotune cache in cache_dir), the user's XLA_FLAGS kept."""
    if impl == "peer" and xla:
        sys.path.insert(0, ROOT)
        import device_setup
        return dict(CHILD_ENV, XLA_FLAGS=device_setup.xla_flags(CHILD_ENV.get("XLA_FLAGS", ""), cache_dir)[0])
    if impl != "hf" or hf_pythonpath is None:
        return CHILD_ENV
    return dict(CHILD_ENV, PYTHONPATH=hf_pythonpath, BENCH_TF_PYTHONPATH=os.environ.get("PYTHONPATH", ""))


def _child_command(args, mode_flag):
    """This script, rerun in a child process in `mode_flag`'s mode with the same data flags."""
    return [sys.executable, os.path.abspath(__file__), mode_flag, f"--input_file={args.input_file}",
            f"--model={args.model}", f"--batch_size={args.batch_size}", f"--max_seq_length={args.max_seq_length}",
            f"--max_predictions_per_seq={args.max_predictions_per_seq}", f"--steps={args.steps}",
            f"--elementwise_dtype={args.elementwise_dtype}"] + (
                [f"--peak_tflops={args.peak_tflops}"] if getattr(args, "peak_tflops", None) else [])


def _decode_pool_in_subprocess(args, path):
    proc = subprocess.run(_child_command(args, f"--decode_pool={path}"), capture_output=True, text=True,
                          env=DECODE_ENV)
    if proc.returncode:
        raise SystemExit(f"hf: decoding {args.input_file} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def run_ours(args, dtype, xla):
    sys.path.insert(0, ROOT)
    import device_setup
    import encoder
    import run_pretraining
    import training
    from model_options import ModelOptions
    with tempfile.TemporaryDirectory() as output_dir:
        config = training.TrainingConfig(
            output_dir=output_dir, train_batch_size=args.batch_size, learning_rate=1e-4,
            num_train_steps=2 * args.steps, num_warmup_steps=0, iterations_per_loop=args.steps,
            # Two loops of --steps steps, as the peers': no progress line or summary cuts one short.
            log_step_count_steps=args.steps, save_summary_steps=args.steps, log_every_secs=10 ** 9,
            save_checkpoints_steps=10 ** 9, keep_checkpoint_max=1, dtype=dtype, use_xla=bool(xla),
            elementwise_dtype=args.elementwise_dtype)
        start = time.time()
        config_file = os.path.join(output_dir, "bert_config.json")
        encoder.BertConfig.from_dict(MODELS[args.model]).to_json_file(config_file)
        result = run_pretraining.run(run_pretraining.PretrainingOptions(
            model=ModelOptions(bert_config_file=config_file, max_seq_length=args.max_seq_length), training=config,
            input_file=args.input_file, max_predictions_per_seq=args.max_predictions_per_seq, do_train=True))
        wall = time.time() - start
    return {"examples_per_sec": result["train"]["examples_per_sec"], "loss": result["train"]["loss"],
            "wall_s": wall, "compile_s": result["train"].get("compile_s"),
            "elementwise_dtype": device_setup.decide_elementwise(args.elementwise_dtype,
                                                                 device_setup.device_type(config))}


def run_peer(args, dtype, xla):
    import tensorflow as tf
    import tf_keras
    from official.nlp import optimization
    from official.nlp.modeling import layers
    from official.nlp.modeling import models
    from official.nlp.modeling import networks
    if dtype != "float32":
        tf_keras.mixed_precision.set_global_policy("mixed_" + dtype)
    c = MODELS[args.model]
    encoder = networks.BertEncoder(
        vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], num_layers=c["num_hidden_layers"],
        num_attention_heads=c["num_attention_heads"], max_sequence_length=c["max_position_embeddings"],
        type_vocab_size=c["type_vocab_size"], inner_dim=c["intermediate_size"],
        inner_activation=lambda x: tf_keras.activations.gelu(x, approximate=True),
        output_dropout=c["hidden_dropout_prob"], attention_dropout=c["attention_probs_dropout_prob"],
        dict_outputs=True)
    pretrainer = models.BertPretrainerV2(
        encoder_network=encoder,
        classification_heads=[layers.ClassificationHead(inner_dim=c["hidden_size"], num_classes=2,
                                                        name="next_sentence")])
    optimizer = optimization.create_optimizer(1e-4, 2 * args.steps, 0, optimizer_type="adamw")
    if dtype == "float16":
        optimizer = tf_keras.mixed_precision.LossScaleOptimizer(optimizer)
    dataset = _dataset(args)
    iterator = iter(dataset)

    def step(f):
        inputs = {"input_word_ids": f["input_ids"], "input_mask": f["input_mask"],
                  "input_type_ids": f["segment_ids"], "masked_lm_positions": f["masked_lm_positions"]}
        with tf.GradientTape() as tape:
            out = pretrainer(inputs, training=True)
            mlm = tf_keras.losses.sparse_categorical_crossentropy(
                f["masked_lm_ids"], tf.cast(out["mlm_logits"], tf.float32), from_logits=True)
            w = f["masked_lm_weights"]
            mlm_loss = tf.reduce_sum(mlm * w) / (tf.reduce_sum(w) + 1e-5)
            nsp_loss = tf.reduce_mean(tf_keras.losses.sparse_categorical_crossentropy(
                f["next_sentence_labels"][:, 0], tf.cast(out["next_sentence"], tf.float32), from_logits=True))
            loss = mlm_loss + nsp_loss
            scaled = optimizer.get_scaled_loss(loss) if dtype == "float16" else loss
        grads = tape.gradient(scaled, pretrainer.trainable_variables)
        if dtype == "float16":
            grads = optimizer.get_unscaled_gradients(grads)
        grads, _ = tf.clip_by_global_norm(grads, 1.0)
        optimizer.apply_gradients(zip(grads, pretrainer.trainable_variables))
        return loss

    step_fn = tf.function(step, jit_compile=bool(xla))

    @tf.function
    def loop(n):
        loss = tf.constant(0.0)
        for _ in tf.range(n):
            loss = step_fn(next(iterator))
        return loss

    start = time.time()
    float(loop(tf.constant(args.steps)))
    timed = time.time()
    loss = float(loop(tf.constant(args.steps)))
    end = time.time()
    return {"examples_per_sec": args.steps * args.batch_size / (end - timed), "loss": loss,
            "wall_s": end - start, "compile_s": compile_seconds(timed - start, end - timed)}


def hf_config(c):
    """The transformers.BertConfig of one of MODELS (hidden_act gelu_new: the original's tanh GELU)."""
    import transformers
    return transformers.BertConfig(
        vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], num_hidden_layers=c["num_hidden_layers"],
        num_attention_heads=c["num_attention_heads"], intermediate_size=c["intermediate_size"],
        hidden_act="gelu_new", hidden_dropout_prob=c["hidden_dropout_prob"],
        attention_probs_dropout_prob=c["attention_probs_dropout_prob"],
        max_position_embeddings=c["max_position_embeddings"], type_vocab_size=c["type_vocab_size"],
        initializer_range=c["initializer_range"], layer_norm_eps=1e-12)


def torch_device():
    """torch, the device ("cuda" or "cpu"), with float32 matmuls in TF32 on a GPU (TensorFlow's default there)."""
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"hf: {e}; the HF PyTorch peer needs torch and transformers: "
                         "run `source scripts/setup.sh --bench`")
    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return torch, device


def torch_train(model, batches, steps, batch_size, dtype, xla, device, learning_rate=1e-4):
    """HF's side of a speed measurement: `model` (on `device`, returning .loss) trained with torch AdamW (fused;
    weight decay 0.01 except LayerNorm and biases), clipping 1.0 and a linear decay over two loops of `steps`
    steps cycling through `batches` (dicts of numpy arrays, made torch tensors inside the loop); bfloat16 /
    float16 under torch.autocast, float16 with torch.amp.GradScaler; xla=1: torch.compile. Returns examples/s of
    the second loop, its last loss, wall and compile seconds."""
    import torch
    model.train()
    params = list(model.named_parameters())
    no_decay = ("LayerNorm", "layer_norm", "bias")
    groups = [{"params": [p for n, p in params if not any(x in n for x in no_decay)], "weight_decay": 0.01},
              {"params": [p for n, p in params if any(x in n for x in no_decay)], "weight_decay": 0.0}]
    # fused=True: one kernel per update (HF Trainer's default, adamw_torch_fused); the default for-each
    # implementation takes several times longer per step on CPU.
    optimizer = torch.optim.AdamW(groups, lr=learning_rate, betas=(0.9, 0.999), eps=1e-6, fused=True)
    total_steps = 2 * steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1.0 - step / total_steps))
    forward = torch.compile(model) if xla else model
    half = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
    scaler = torch.amp.GradScaler(device) if dtype == "float16" else None  # dynamic loss scaling
    position = 0

    def loop():
        nonlocal position
        loss = None
        for _ in range(steps):
            batch = {k: torch.from_numpy(v).to(device, non_blocking=True)
                     for k, v in batches[position % len(batches)].items()}
            position += 1
            with torch.autocast(device_type=device, dtype=half or torch.bfloat16, enabled=half is not None):
                loss = forward(**batch).loss
            if scaler is None:
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
            else:
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
        return float(loss)

    start = time.time()
    try:
        loop()
    except Exception as e:  # torch.compile errors surface at the first call
        if not xla:
            raise
        raise SystemExit(f"hf xla=1 (torch.compile) failed on this machine: {type(e).__name__}: "
                         f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}")
    timed = time.time()
    loss = loop()
    end = time.time()
    import transformers
    return {"examples_per_sec": steps * batch_size / (end - timed), "loss": loss,
            "wall_s": end - start, "compile_s": compile_seconds(timed - start, end - timed),
            "xla_means": "torch.compile" if xla else "eager",
            "torch": torch.__version__, "transformers": transformers.__version__, "device": device}


def run_hf(args, dtype, xla):
    torch, device = torch_device()
    import transformers
    with tempfile.TemporaryDirectory() as tmp:
        pool = hf_batches(_decode_pool_in_subprocess(args, os.path.join(tmp, "pool.npz")))
    model = transformers.BertForPreTraining(hf_config(MODELS[args.model])).to(device)
    return torch_train(model, pool, args.steps, args.batch_size, dtype, xla, device)


def run_one(args):
    impl, dtype, xla = args.one.split(":")
    result = {"ours": run_ours, "peer": run_peer, "hf": run_hf}[impl](args, dtype, int(xla))
    result.update(peak_memory(impl))
    flops = train_flops(MODELS[args.model], args.batch_size, args.max_seq_length, args.max_predictions_per_seq)
    device = device_name(impl)
    result.update(impl=impl, dtype=dtype, xla=int(xla), model=args.model, batch_size=args.batch_size,
                  max_seq_length=args.max_seq_length, device_name=device, steps=args.steps,
                  matmul=matmul_precision(dtype, device),
                  model_tflops=flops * result["examples_per_sec"] / args.batch_size / 1e12)
    if args.peak_tflops:
        result.update(peak_tflops=args.peak_tflops, mfu=result["model_tflops"] / args.peak_tflops)
    print("RESULT " + json.dumps(result), flush=True)


def parse_configs(text):
    """'impl:dtype:xla,...' -> list of (impl, dtype, xla); errors name --configs and what was expected."""
    configs = []
    for spec in text.split(","):
        parts = spec.strip().split(":")
        if (len(parts) != 3 or parts[0] not in IMPLS or parts[1] not in DTYPES[parts[0]]
                or parts[2] not in ("0", "1")):
            allowed = "; ".join(f"{impl}: {'|'.join(DTYPES[impl])}" for impl in IMPLS)
            raise SystemExit(f"--configs: bad entry {spec!r}; expected impl:dtype:xla with xla 0|1 and "
                             f"impl: dtype among {allowed}")
        configs.append((parts[0], parts[1], int(parts[2])))
    return configs


def _label(impl, dtype, xla):
    return f"{impl}:{dtype}:{xla}" + (" (torch.compile)" if impl == "hf" and xla else "")


def summarize(results):
    """Ratios of each `ours` configuration to the best float32 peers and to the same dtype/xla peers."""
    by_key = {(r["impl"], r["dtype"], r["xla"]): r["examples_per_sec"] for r in results}
    best = {impl: max([v for (i, d, _), v in by_key.items() if i == impl and d == "float32"], default=None)
            for impl in ("peer", "hf")}
    ours = sorted((k for k in by_key if k[0] == "ours"), key=lambda k: (DTYPES["ours"].index(k[1]), k[2]))
    lines = []
    if not ours:
        return lines
    for _, dtype, xla in ours:
        value = by_key[("ours", dtype, xla)]
        ratios = [f"{value / best[impl]:.2f}x the best {impl} float32" for impl in ("peer", "hf") if best[impl]]
        lines.append(f"ours {dtype} xla={xla}: " + (", ".join(ratios) if ratios else "no float32 peer result"))

    def cell(value, ratio):
        return f"{value:10.2f} {ratio:>9s}" if value is not None else f"{'-':>10s} {'-':>9s}"

    lines.append("")
    lines.append("examples/s, same dtype and xla (hf xla=1 is torch.compile); ratio = ours / peer")
    lines.append(f"{'dtype':9s} {'xla':>3s} {'ours':>10s} "
                 + " ".join(f"{impl:>10s} {'ours/' + impl:>9s}" for impl in ("peer", "hf")))
    for _, dtype, xla in ours:
        value = by_key[("ours", dtype, xla)]
        row = f"{dtype:9s} {xla:3d} {value:10.2f}"
        for impl in ("peer", "hf"):
            other = by_key.get((impl, dtype, xla))
            row += " " + cell(other, f"{value / other:.2f}x" if other else "-")
        lines.append(row)
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--input_file", default=DEFAULT_INPUT, help="pre-training TFRecords (glob)")
    parser.add_argument("--model", choices=sorted(MODELS), default="base", help="BERT-base or BERT-large")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--max_predictions_per_seq", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20, help="steps per timed loop (one warm-up loop first)")
    parser.add_argument("--configs", default=DEFAULT_CONFIGS,
                        help="impl:dtype:xla, comma separated; impl ours|peer|hf (hf xla=1 = torch.compile)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per configuration")
    parser.add_argument("--results_jsonl", help="also append each result as one JSON line to this file")
    parser.add_argument("--hf_pythonpath", help="PYTHONPATH of the hf processes (default: this one's); its batch "
                                                "decoding keeps this process's")
    parser.add_argument("--peak_tflops", type=float, help="the device's matmul peak (TFLOP/s) MFU is taken against")
    parser.add_argument("--elementwise_dtype", default="auto", choices=("auto", "float32", "compute"),
                        help="ours: --elementwise_dtype (auto: the device's)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--decode_pool", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.decode_pool:
        return write_pool(args, args.decode_pool)
    if args.one:
        return run_one(args)
    if args.steps < 1:
        raise SystemExit(f"--steps must be >= 1, got {args.steps}")
    if not os.path.exists(args.input_file) and not any(c in args.input_file for c in "*?["):
        raise SystemExit(f"--input_file {args.input_file} not found")
    results, failures = [], []
    cache_root = tempfile.mkdtemp(prefix="bench_pretraining_xla_")
    for impl, dtype, xla in parse_configs(args.configs):
        spec, label = f"{impl}:{dtype}:{xla}", _label(impl, dtype, xla)
        cmd = _child_command(args, f"--one={spec}")
        env = child_env(impl, args.hf_pythonpath, xla, os.path.join(cache_root, spec.replace(":", "_")))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
        except subprocess.TimeoutExpired as e:
            failures.append((impl, dtype, xla, label, f"timed out after --timeout={args.timeout} s"))
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            print(f"{label}: failed (timed out after {args.timeout} s); its last output:\n{err[-2000:]}",
                  file=sys.stderr, flush=True)
            continue
        lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
        if proc.returncode or not lines:
            tail = [l for l in proc.stderr.strip().splitlines() if l.strip()]
            failures.append((impl, dtype, xla, label, tail[-1] if tail else f"exit {proc.returncode}, no RESULT line"))
            print(f"{label}: failed (exit {proc.returncode})\n{proc.stderr[-2000:]}", file=sys.stderr, flush=True)
            continue
        results.append(json.loads(lines[-1][len("RESULT "):]))
        r = results[-1]
        if args.results_jsonl:
            with open(args.results_jsonl, "a") as f:
                f.write(json.dumps(r) + "\n")
        print(f"{label:32s} {r['examples_per_sec']:8.2f} examples/s  {r['model_tflops']:7.2f} model TFLOP/s  "
              + (f"MFU {100 * r['mfu']:4.1f} %  " if "mfu" in r else "")
              + f"peak RSS {r['peak_rss_mb']:8.0f} MB"
              + (f"  peak GPU {r['peak_gpu_mb']:8.0f} MB" if "peak_gpu_mb" in r else "")
              + f"  loss {r['loss']:.3f}  compile {r['compile_s'] or 0:.1f} s  wall {r['wall_s']:.0f} s", flush=True)
    for line in summarize(results):
        print(line)
    shutil.rmtree(cache_root, ignore_errors=True)
    for impl, dtype, xla, label, reason in failures:
        print(f"failed: {label}: {reason}")
        if args.results_jsonl:  # a row that says what could not be measured, and why
            with open(args.results_jsonl, "a") as f:
                f.write(json.dumps({"impl": impl, "dtype": dtype, "xla": xla, "model": args.model,
                                    "batch_size": args.batch_size, "max_seq_length": args.max_seq_length,
                                    "failed": reason}) + "\n")
    print(json.dumps(results))

if __name__ == "__main__":
    main()
