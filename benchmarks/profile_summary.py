"""Where the time of a traced training loop went: reads the tf.profiler trace that `--profile_loop=N` writes
(OUTPUT_DIR/plugins/profile/RUN/HOST.xplane.pb) and prints, per device, the busy and idle share of the traced
span, host-device copies, and the TensorFlow op types (or kernels) that took the most time.

    python benchmarks/profile_summary.py OUTPUT_DIR [--top=15] [--json=FILE]

It also makes a trace of inference at a fixed shape and summarizes it (CPU serving, batch 1 by default):

    # an exported SavedModel's signature (run_classifier.py --export_dir=DIR), random ids, every position real
    python benchmarks/profile_summary.py --trace_savedmodel=DIR [--signature=serving_default] [--batch=1]
      [--seq_length=128] [--calls=50] [--threads=N] [--trace_dir=DIR]
    # the encoder alone (encoder.BertEncoder in a tf.function, training=False) of a bert_config.json, with the
    # weights of --init_checkpoint (random without it)
    python benchmarks/profile_summary.py --trace_encoder=bert_config.json [--init_checkpoint=CKPT] ...

The traced calls run after --warmup untimed ones; the report gives the time per call (the traced span over
the calls), the share of it no op was running (executor overhead, Python and the call's own cost), and per op
type its executions per call beside its time.

On a GPU the device's kernels are grouped by the TensorFlow op they ran for (the `tf_op` stat; kernels of XLA
clusters by kernel name, digits dropped). Without a GPU the CPU's op executions are grouped by op type. The
matmul share is the time of matmul ops (MatMul, BatchMatMul, Einsum, GEMM kernels) over all op time.
"""
import argparse
import collections
import glob
import json
import os
import re
import sys

MATMUL = re.compile(r"matmul|einsum|gemm|cublas|cutlass|xmma|sm\d+_.*(gemm|xmma)", re.IGNORECASE)
MEMCPY = re.compile(r"memcpy|memset", re.IGNORECASE)


class UserError(Exception):
    pass


def find_trace(path):
    """The newest *.xplane.pb under path (an output_dir, its plugins/profile, a run folder or the file)."""
    if os.path.isfile(path):
        return path
    if not os.path.isdir(path):
        raise UserError(f"{path}: no such file or folder (expected an --output_dir traced with --profile_loop)")
    traces = glob.glob(os.path.join(path, "**", "*.xplane.pb"), recursive=True)
    if not traces:
        raise UserError(f"{path}: no *.xplane.pb below it (was the run given --profile_loop=N?)")
    return max(traces, key=os.path.getmtime)


def read_space(trace):
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    space = xplane_pb2.XSpace()
    with open(trace, "rb") as f:
        space.ParseFromString(f.read())
    return space


def stat_value(plane, stat):
    kind = stat.WhichOneof("value")
    if kind == "ref_value":
        return plane.stat_metadata[stat.ref_value].name
    return getattr(stat, kind) if kind else None


def event_stats(plane, event):
    """Stats of an event and of its metadata, by name."""
    stats = {}
    for stat in list(plane.event_metadata[event.metadata_id].stats) + list(event.stats):
        stats[plane.stat_metadata[stat.metadata_id].name] = stat_value(plane, stat)
    return stats


def timed_events(line):
    """(event, start_ps, stop_ps) of a timeline line's events."""
    base = line.timestamp_ns * 1000
    for event in line.events:
        yield event, base + event.offset_ps, base + event.offset_ps + event.duration_ps


def summary(plane, events, busy, groups, kernels=None, copies=None, counts=None):
    """A plane's summary: the span from its first to its last event (copies included), the busy union."""
    span = max(stop for _, stop in events) - min(start for start, _ in events) if events else 0
    return {"device": plane.name, "span_ps": span, "busy_ps": busy_ps(busy), "groups": groups,
            "kernels": kernels or collections.Counter(), "copies": copies or collections.Counter(),
            "counts": counts or collections.Counter()}


def busy_ps(intervals):
    """Length of the union of [start, end) intervals."""
    total, end = 0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def op_type(annotation):
    """The op type of a TensorFlow op annotation ("outer::scope/name:Type#id=1#" -> "Type")."""
    if isinstance(annotation, bytes):
        annotation = annotation.decode(errors="replace")
    if not annotation:
        return None
    last = annotation.split("::")[-1].split("#")[0]
    return last.rsplit(":", 1)[-1] if ":" in last else last.rsplit("/", 1)[-1]


def kernel_name(name):
    """A kernel's name with template arguments and digits folded, so that variants group together."""
    return re.sub(r"\d+", "N", re.sub(r"<.*>", "<>", name))[:60]


def summarize_device(plane):
    """Kernels and copies of one GPU plane: its stream lines, each event one kernel or copy. Kernels are
    grouped by the TensorFlow op they ran for (tf_op or kernel annotation stat) where the trace says it."""
    groups, kernels, copies = collections.Counter(), collections.Counter(), collections.Counter()
    events, kernel_times = [], []
    for line in plane.lines:
        if not line.name.startswith("Stream"):
            continue  # derived lines (XLA Ops, TensorFlow Ops, ...) repeat the stream's events
        for event, start, stop in timed_events(line):
            name = plane.event_metadata[event.metadata_id].name
            events.append((start, stop))
            if MEMCPY.search(name):
                kind = "H2D" if re.search(r"htod|h2d", name, re.IGNORECASE) else \
                    "D2H" if re.search(r"dtoh|d2h", name, re.IGNORECASE) else "other"
                copies[kind] += event.duration_ps
                continue
            stats = event_stats(plane, event)
            kernel = kernel_name(name)
            groups[op_type(stats.get("tf_op") or stats.get("kernel_annotation")) or kernel] += event.duration_ps
            kernels[kernel] += event.duration_ps
            kernel_times.append((start, stop))
    return summary(plane, events, kernel_times, groups, kernels, copies)


def summarize_host(plane):
    """Op executions on the host's TensorFlow threads ("name:Type" events), grouped by op type."""
    ops, counts = collections.Counter(), collections.Counter()
    events = []
    for line in plane.lines:
        if not line.name.startswith(("tf_Compute", "tf_numa", "tf_inter_op")):
            continue
        for event, start, stop in timed_events(line):
            meta = plane.event_metadata[event.metadata_id]
            if ":" not in meta.name or "::" in meta.name:
                continue
            events.append((start, stop))
            name = meta.display_name or meta.name.rsplit(":", 1)[-1].strip()
            name = re.sub(r"(\.\d+|\.clone)+$", "", name)  # XLA's numbered copies together
            ops[name] += event.duration_ps
            counts[name] += 1
    return summary(plane, events, events, ops, counts=counts)


def summarize(space):
    """One summary per GPU plane with kernels, else one of the host's op executions (a CPU run, or a GPU run
    traced without CUPTI: then the host's times are launch times, not kernel times)."""
    devices = [d for d in (summarize_device(p) for p in space.planes if p.name.startswith("/device:GPU"))
               if d["span_ps"] > 0]
    return devices or [d for d in (summarize_host(p) for p in space.planes if p.name == "/host:CPU")
                       if d["span_ps"] > 0]


# Op types by what they do, for the breakdown of an inference trace (the rest: "other").
CATEGORIES = (
    ("matmul", MATMUL),
    ("bias add", re.compile(r"^(BiasAdd|_FusedMatMul|_MklFusedMatMul)")),
    ("layer norm (mean, variance, rsqrt, scale)", re.compile(r"^(Mean|SquaredDifference|Rsqrt|StopGradient)$")),
    ("GELU / tanh / erf / pow", re.compile(r"^(Tanh|Erf|Pow|Gelu)")),
    ("softmax", re.compile(r"Softmax")),
    ("casts", re.compile(r"^Cast$")),
    ("reshapes / transposes", re.compile(r"^(Reshape|Transpose|ExpandDims|Squeeze|_MklTranspose|ConjugateTranspose)$")),
    ("input checks (Assert and its comparisons)", re.compile(r"^(Assert|All|Less|GreaterEqual|Equal|NoOp)$")),
    ("gathers / one-hot / slices", re.compile(r"^(GatherV2|ResourceGather|OneHot|Slice|StridedSlice|Pack)$")),
    ("other elementwise", re.compile(r"^(Mul|AddV2|Add|Sub|RealDiv|Maximum|Minimum|Neg|Select|SelectV2)$")),
)


def category(op):
    for name, pattern in CATEGORIES:
        if pattern.search(op):
            return name
    return "other"


def report(summaries, top, calls=None):
    lines = []
    for s in summaries:
        total = sum(s["groups"].values()) or 1
        matmul = sum(v for k, v in s["groups"].items() if MATMUL.search(k))
        busy = s["busy_ps"] / max(s["span_ps"], 1)
        if s["device"] == "/host:CPU":
            lines.append("no GPU kernels in the trace: the host's op executions (on a GPU machine, CUPTI was "
                         "missing and these are launch times)")
        lines.append(f"{s['device']}: traced span {s['span_ps'] / 1e9:.1f} ms, busy {s['busy_ps'] / 1e9:.1f} ms "
                     f"({100 * busy:.1f} %), idle {100 * (1 - busy):.1f} %; matmul ops {100 * matmul / total:.1f} % "
                     f"of op time")
        if calls:
            lines.append(f"  per call ({calls} traced calls): {s['span_ps'] / 1e9 / calls:.2f} ms, of which no op ran "
                         f"{(s['span_ps'] - s['busy_ps']) / 1e9 / calls:.2f} ms; op time {total / 1e9 / calls:.2f} ms "
                         f"(threads overlap), {sum(s['counts'].values()) / calls:.0f} op executions")
            by_category, count_category = collections.Counter(), collections.Counter()
            for op, ps in s["groups"].items():
                by_category[category(op)] += ps
                count_category[category(op)] += s["counts"][op]
            lines.append(f"  {'what':<58} {'ms/call':>10} {'share':>7} {'ops/call':>9}")
            for name, ps in by_category.most_common():
                lines.append(f"  {name[:58]:<58} {ps / 1e9 / calls:>10.3f} {100 * ps / total:>6.1f}% "
                             f"{count_category[name] / calls:>9.1f}")
        if s["copies"]:
            lines.append("  copies: " + ", ".join(f"{k} {v / 1e9:.1f} ms" for k, v in sorted(s["copies"].items())))
        for title, counter in (("op type", s["groups"]), ("kernel", s["kernels"])):
            if not counter or (title == "kernel" and counter == s["groups"]):
                continue
            per = calls or 1
            counted = title == "op type" and s["counts"]
            lines.append(f"  {title:<58} {'ms' if per == 1 else 'ms/call':>10} {'share':>7}"
                         + (f" {'ops' if per == 1 else 'ops/call':>9}" if counted else ""))
            for name, ps in counter.most_common(top):
                lines.append(f"  {name[:58]:<58} {ps / 1e9 / per:>10.3f} {100 * ps / total:>6.1f}%"
                             + (f" {s['counts'][name] / per:>9.1f}" if counted else ""))
    return "\n".join(lines)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _inputs(batch, seq_length, vocab_size, seed=12345):
    """Random ids in [1, vocab_size), every position real, segments half and half (as bench_inference.py)."""
    import numpy as np
    rng = np.random.RandomState(seed)
    ids = rng.randint(1, vocab_size, size=[batch, seq_length]).astype(np.int32)
    segments = np.repeat((np.arange(seq_length)[None, :] >= seq_length // 2).astype(np.int32), batch, axis=0)
    return ids, np.ones_like(ids), segments


def check_inputs(export_dir, bert_config_file):
    """A UserError naming the flag when what it names is not there (before TensorFlow is imported)."""
    if export_dir and not os.path.isfile(os.path.join(export_dir, "saved_model.pb")):
        raise UserError(f"--trace_savedmodel={export_dir}: no saved_model.pb in it (run_classifier.py --export_dir)")
    if bert_config_file and not os.path.isfile(bert_config_file):
        raise UserError(f"--trace_encoder={bert_config_file}: no such file (expected a bert_config.json)")


def savedmodel_call(export_dir, signature, batch, seq_length):
    """A call of the SavedModel's signature on token ids (outputs fetched to numpy)."""
    check_inputs(export_dir, None)
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (serving_text's tokenizer ops)
    loaded = tf.saved_model.load(export_dir)
    if signature not in loaded.signatures:
        raise UserError(f"--signature={signature}: {export_dir} has {', '.join(loaded.signatures)}")
    fn = loaded.signatures[signature]
    # ids below 1000, inside any BERT vocabulary: a lookup costs the same whatever row it reads
    ids, mask, segments = (tf.constant(a) for a in _inputs(batch, seq_length, 1000))

    def call():
        return {k: v.numpy() for k, v in fn(input_ids=ids, input_mask=mask, segment_ids=segments).items()}
    call.keep = loaded
    return call


def encoder_call(bert_config_file, init_checkpoint, batch, seq_length, jit_compile=False):
    """A call of encoder.BertEncoder (training=False, in a tf.function) of the config, with the checkpoint's
    weights (random without one); sequence and pooled output fetched to numpy."""
    check_inputs(None, bert_config_file)
    sys.path.insert(0, ROOT)
    import tensorflow as tf
    import checkpoints
    import encoder
    config = encoder.BertConfig.from_json_file(bert_config_file)
    bert = encoder.BertEncoder(config)
    ids, mask, segments = (tf.constant(a) for a in _inputs(batch, seq_length, config.vocab_size))
    bert(ids, mask, segments, training=False)
    if init_checkpoint:
        _, new, _ = checkpoints.init_from_checkpoint(bert.variables_by_name(), init_checkpoint)
        if new:
            raise UserError(f"--init_checkpoint={init_checkpoint}: lacks {', '.join(sorted(new)[:3])}")

    @tf.function(jit_compile=jit_compile, autograph=False)
    def forward(ids, mask, segments):
        out = bert(ids, mask, segments, training=False)
        return out["sequence_output"], out["pooled_output"]

    def call():
        return [t.numpy() for t in forward(ids, mask, segments)]
    return call


def trace(call, trace_dir, calls, warmup):
    """Runs call() 1 + warmup times untraced, then `calls` times under tf.profiler; the trace's path."""
    import tensorflow as tf
    for _ in range(1 + warmup):
        call()
    os.makedirs(trace_dir, exist_ok=True)
    tf.profiler.experimental.start(trace_dir, options=tf.profiler.experimental.ProfilerOptions(
        host_tracer_level=2, python_tracer_level=0, device_tracer_level=1))
    try:
        for _ in range(calls):
            call()
    finally:
        tf.profiler.experimental.stop()
    return find_trace(trace_dir)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", nargs="?", help="an --output_dir run with --profile_loop=N, or an .xplane.pb file")
    parser.add_argument("--trace_savedmodel", help="trace this SavedModel's --signature on token ids, then summarize")
    parser.add_argument("--signature", default="serving_default")
    parser.add_argument("--trace_encoder", help="trace encoder.BertEncoder of this bert_config.json, then summarize")
    parser.add_argument("--init_checkpoint", help="weights of --trace_encoder (random without it)")
    parser.add_argument("--jit_compile", action="store_true", help="--trace_encoder's tf.function with XLA")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--calls", type=int, default=50, help="traced calls")
    parser.add_argument("--warmup", type=int, default=5, help="untraced calls before them (after the first)")
    parser.add_argument("--threads", type=int, default=0,
                        help="TensorFlow intra- and inter-op threads of the traced calls (0: TensorFlow's default)")
    parser.add_argument("--trace_dir", help="where the trace goes (default: a new temporary folder)")
    parser.add_argument("--top", type=int, default=15, help="op types or kernels to list per device")
    parser.add_argument("--json", help="also write the summary here")
    args = parser.parse_args(argv)
    calls = None
    try:
        if (args.trace_savedmodel or args.trace_encoder) and (args.path or (args.trace_savedmodel and
                                                                            args.trace_encoder)):
            raise UserError("give one of a trace path, --trace_savedmodel or --trace_encoder")
        if args.trace_savedmodel or args.trace_encoder:
            if args.calls < 1 or args.batch < 1 or args.seq_length < 1:
                raise UserError("--calls, --batch and --seq_length must be positive")
            import tempfile
            check_inputs(args.trace_savedmodel, args.trace_encoder)
            if args.threads:
                import tensorflow as tf
                tf.config.threading.set_intra_op_parallelism_threads(args.threads)
                tf.config.threading.set_inter_op_parallelism_threads(args.threads)
            args.path = args.trace_dir or tempfile.mkdtemp(prefix="profile_")
            if args.trace_savedmodel:
                call = savedmodel_call(args.trace_savedmodel, args.signature, args.batch, args.seq_length)
            else:
                call = encoder_call(args.trace_encoder, args.init_checkpoint, args.batch, args.seq_length,
                                    args.jit_compile)
            trace(call, args.path, args.calls, args.warmup)
            calls = args.calls
        elif not args.path:
            raise UserError("give a trace path, --trace_savedmodel or --trace_encoder")
        trace_file = find_trace(args.path)
        summaries = summarize(read_space(trace_file))
    except UserError as e:
        sys.exit(f"profile_summary.py: {e}")
    except Exception as e:  # a damaged or foreign file
        sys.exit(f"profile_summary.py: {args.path}: cannot read a tf.profiler trace from it ({type(e).__name__}: "
                 f"{str(e)[:200]})")
    if not summaries:
        sys.exit(f"profile_summary.py: {trace_file}: the trace holds no op executions")
    print(f"trace: {trace_file}")
    print(report(summaries, args.top, calls))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{**s, "groups": dict(s["groups"]), "kernels": dict(s["kernels"]), "copies": dict(s["copies"]),
                        "counts": dict(s["counts"]), "calls": calls}
                       for s in summaries], f, indent=1)
    return summaries


if __name__ == "__main__":
    main()
