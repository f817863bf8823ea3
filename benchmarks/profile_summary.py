"""Where the time of a traced training loop went: reads the tf.profiler trace that `--profile_loop=N` writes
(OUTPUT_DIR/plugins/profile/RUN/HOST.xplane.pb) and prints, per device, the busy and idle share of the traced
span, host-device copies, and the TensorFlow op types (or kernels) that took the most time.

    python benchmarks/profile_summary.py OUTPUT_DIR [--top=15] [--json=FILE]

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


def summary(plane, events, busy, groups, kernels=None, copies=None):
    """A plane's summary: the span from its first to its last event (copies included), the busy union."""
    span = max(stop for _, stop in events) - min(start for start, _ in events) if events else 0
    return {"device": plane.name, "span_ps": span, "busy_ps": busy_ps(busy), "groups": groups,
            "kernels": kernels or collections.Counter(), "copies": copies or collections.Counter()}


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
    ops = collections.Counter()
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
            ops[re.sub(r"(\.\d+|\.clone)+$", "", name)] += event.duration_ps  # XLA's numbered copies together
    return summary(plane, events, events, ops)


def summarize(space):
    """One summary per GPU plane with kernels, else one of the host's op executions (a CPU run, or a GPU run
    traced without CUPTI: then the host's times are launch times, not kernel times)."""
    devices = [d for d in (summarize_device(p) for p in space.planes if p.name.startswith("/device:GPU"))
               if d["span_ps"] > 0]
    return devices or [d for d in (summarize_host(p) for p in space.planes if p.name == "/host:CPU")
                       if d["span_ps"] > 0]


def report(summaries, top):
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
        if s["copies"]:
            lines.append("  copies: " + ", ".join(f"{k} {v / 1e9:.1f} ms" for k, v in sorted(s["copies"].items())))
        for title, counter in (("op type", s["groups"]), ("kernel", s["kernels"])):
            if not counter or (title == "kernel" and counter == s["groups"]):
                continue
            lines.append(f"  {title:<58} {'ms':>10} {'share':>7}")
            for name, ps in counter.most_common(top):
                lines.append(f"  {name[:58]:<58} {ps / 1e9:>10.2f} {100 * ps / total:>6.1f}%")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="an --output_dir run with --profile_loop=N, or an .xplane.pb file")
    parser.add_argument("--top", type=int, default=15, help="op types or kernels to list per device")
    parser.add_argument("--json", help="also write the summary here")
    args = parser.parse_args(argv)
    try:
        trace = find_trace(args.path)
        summaries = summarize(read_space(trace))
    except UserError as e:
        sys.exit(f"profile_summary.py: {e}")
    except Exception as e:  # a damaged or foreign file
        sys.exit(f"profile_summary.py: {args.path}: cannot read a tf.profiler trace from it ({type(e).__name__}: "
                 f"{str(e)[:200]})")
    if not summaries:
        sys.exit(f"profile_summary.py: {trace}: the trace holds no op executions")
    print(f"trace: {trace}")
    print(report(summaries, args.top))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{**s, "groups": dict(s["groups"]), "kernels": dict(s["kernels"]), "copies": dict(s["copies"])}
                       for s in summaries], f, indent=1)
    return summaries


if __name__ == "__main__":
    main()
