"""Fine-tuning speed: run_classifier.py on MRPC (seq 128) and run_squad.py on SQuAD (seq 384) as a user runs them,
beside HF transformers at the same batch size, sequence length, model size and dtype (random weights: speed only;
benchmarks/bench_finetuning.py measures the scores).

Each configuration `impl:dtype:xla` runs in its own process:
- `ours`: the script's run(options), what its command line runs, on the real data (--train_file / --data_dir):
  --do_train for --num_train_epochs with loops of at most --steps steps (the original's --iterations_per_loop; a
  loop also ends at a progress line, every 100 steps and 30 s); examples/s and compile_s as training.train
  reports them (the speed of its loops after the first; the first loop's time less its steps at that speed);
  xla = --use_xla (the project's XLA options on a GPU, nothing set by hand).
- `hf`: transformers BertForSequenceClassification (2 labels) / BertForQuestionAnswering, trained as
  bench_pretraining.torch_train trains (torch AdamW fused, clipping 1.0, linear decay; bfloat16 / float16 under
  autocast, float16 with GradScaler; xla=1: torch.compile) for two loops of --steps steps on random token ids of
  the same shape [batch, max_seq_length] (the ids do not change the speed; ours' own records pad to the same
  full length) and random labels / answer positions.
Where they differ: ours reads and tokenizes the data and writes its records before training (not timed: the
loops are), and runs the original's AdamWeightDecay; HF's optimizer is torch's fused AdamW.

    .venv/bin/python benchmarks/bench_finetuning_speed.py --task=mrpc --data=../shared/data/glue/MRPC \
      --vocab_file=../shared/vocab/uncased/vocab.txt --model=base --batch_size=32 \
      --configs=ours:bfloat16:1,hf:bfloat16:1
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import bench_pretraining as bench

ROOT = bench.ROOT
TASKS = {"mrpc": 128, "squad": 384}  # the task's default --max_seq_length


def run_ours(args, dtype, xla):
    sys.path.insert(0, ROOT)
    import cli
    import encoder
    with tempfile.TemporaryDirectory() as output_dir:
        config_file = os.path.join(output_dir, "bert_config.json")
        encoder.BertConfig.from_dict(bench.MODELS[args.model]).to_json_file(config_file)
        common = dict(vocab_file=args.vocab_file, bert_config_file=config_file, max_seq_length=args.max_seq_length,
                      do_train=True, train_batch_size=args.batch_size, num_train_epochs=args.num_train_epochs,
                      iterations_per_loop=args.steps, save_checkpoints_steps=10 ** 9, dtype=dtype,
                      use_xla=bool(xla), output_dir=os.path.join(output_dir, "out"), learning_rate=2e-5)
        start = time.time()
        if args.task == "mrpc":
            import run_classifier as script
            options = cli.build_options(script.ClassifierOptions, task_name="MRPC", data_dir=args.data, **common)
        else:
            import run_squad as script
            options = cli.build_options(script.SquadOptions, train_file=args.data, train_first_answer=True,
                                        doc_stride=128, **common)
        train = script.run(options)["train"]
        wall = time.time() - start
    return {"examples_per_sec": train["examples_per_sec"], "loss": train["loss"], "wall_s": wall,
            "compile_s": train.get("compile_s"), "steps_run": train["global_step"]}


def random_batches(args, count=8):
    """HF inputs of ours' shape: random ids [batch, max_seq_length] (mask all ones) and random labels."""
    rng = np.random.default_rng(0)
    shape = (args.batch_size, args.max_seq_length)
    batches = []
    for _ in range(count):
        batch = {"input_ids": rng.integers(1000, bench.MODELS[args.model]["vocab_size"], shape),
                 "attention_mask": np.ones(shape, np.int64), "token_type_ids": np.zeros(shape, np.int64)}
        if args.task == "mrpc":
            batch["labels"] = rng.integers(0, 2, args.batch_size)
        else:
            batch["start_positions"] = rng.integers(0, args.max_seq_length, args.batch_size)
            batch["end_positions"] = rng.integers(0, args.max_seq_length, args.batch_size)
        batches.append(batch)
    return batches


def run_hf(args, dtype, xla):
    torch, device = bench.torch_device()
    import transformers
    config = bench.hf_config(bench.MODELS[args.model])
    if args.task == "mrpc":
        model = transformers.BertForSequenceClassification(config)  # num_labels 2
    else:
        model = transformers.BertForQuestionAnswering(config)
    return bench.torch_train(model.to(device), random_batches(args), args.steps, args.batch_size, dtype, xla,
                             device, learning_rate=2e-5)


def run_one(args):
    impl, dtype, xla = args.one.split(":")
    result = {"ours": run_ours, "hf": run_hf}[impl](args, dtype, int(xla))
    result.update(bench.peak_memory(impl))
    device = bench.device_name(impl)
    result.update(impl=impl, dtype=dtype, xla=int(xla), task=args.task, model=args.model,
                  batch_size=args.batch_size, max_seq_length=args.max_seq_length, device_name=device,
                  matmul=bench.matmul_precision(dtype, device))
    print("RESULT " + json.dumps(result), flush=True)


def parse_configs(text):
    configs = []
    for spec in text.split(","):
        parts = spec.strip().split(":")
        if (len(parts) != 3 or parts[0] not in ("ours", "hf") or parts[1] not in bench.DTYPES["ours"]
                or parts[2] not in ("0", "1")):
            raise SystemExit(f"--configs: bad entry {spec!r}; expected ours|hf:float32|bfloat16|float16:0|1")
        configs.append((parts[0], parts[1], int(parts[2])))
    return configs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", choices=sorted(TASKS), required=True)
    parser.add_argument("--data", required=True, help="mrpc: the MRPC folder (train.tsv); squad: a SQuAD json")
    parser.add_argument("--vocab_file", required=True)
    parser.add_argument("--model", choices=sorted(bench.MODELS), default="base")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_seq_length", type=int, help="default: 128 (mrpc), 384 (squad)")
    parser.add_argument("--steps", type=int, default=20, help="steps per loop (ours: --iterations_per_loop)")
    parser.add_argument("--num_train_epochs", type=float, default=1.0, help="ours' epochs (at least two loops)")
    parser.add_argument("--configs", default="ours:bfloat16:1,hf:bfloat16:1")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per configuration")
    parser.add_argument("--results_jsonl", help="append each result as one JSON line to this file")
    parser.add_argument("--hf_pythonpath", help="PYTHONPATH of the hf processes (default: this one's)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.max_seq_length = args.max_seq_length or TASKS[args.task]
    if args.one:
        return run_one(args)
    if not os.path.exists(args.data):
        raise SystemExit(f"--data {args.data} not found")
    results, failed = [], 0
    for impl, dtype, xla in parse_configs(args.configs):
        spec = f"{impl}:{dtype}:{xla}"
        cmd = [sys.executable, os.path.abspath(__file__), f"--one={spec}"] + [
            f"--{name}={getattr(args, name)}" for name in ("task", "data", "vocab_file", "model", "batch_size",
                                                           "max_seq_length", "steps", "num_train_epochs")]
        row = {"impl": impl, "dtype": dtype, "xla": xla, "task": args.task, "model": args.model,
               "batch_size": args.batch_size, "max_seq_length": args.max_seq_length}
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                                  env=bench.child_env(impl, args.hf_pythonpath))
            lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
            if proc.returncode or not lines:
                tail = [line for line in proc.stderr.strip().splitlines() if line.strip()]
                row["failed"] = tail[-1] if tail else f"exit {proc.returncode}, no RESULT line"
                print(f"{spec}: failed (exit {proc.returncode})\n{proc.stderr[-2000:]}", file=sys.stderr, flush=True)
            else:
                row = json.loads(lines[-1][len("RESULT "):])
        except subprocess.TimeoutExpired:
            row["failed"] = f"timed out after --timeout={args.timeout} s"
        if "failed" in row:
            failed += 1
            print(f"{args.task} {spec}: failed: {row['failed']}", flush=True)
        else:
            results.append(row)
            print(f"{args.task} {spec:18s} {row['examples_per_sec']:8.2f} examples/s  compile "
                  f"{row['compile_s'] or 0:.1f} s  peak RSS {row['peak_rss_mb']:.0f} MB"
                  + (f"  peak GPU {row['peak_gpu_mb']:.0f} MB" if "peak_gpu_mb" in row else ""), flush=True)
        if args.results_jsonl:
            with open(args.results_jsonl, "a") as f:
                f.write(json.dumps(row) + "\n")
    by_key = {(r["impl"], r["dtype"], r["xla"]): r["examples_per_sec"] for r in results}
    for (impl, dtype, xla), value in by_key.items():
        if impl == "ours" and ("hf", dtype, xla) in by_key:
            print(f"ours / hf, {dtype} xla={xla}: {value / by_key[('hf', dtype, xla)]:.2f}x")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
