"""End-to-end pre-training throughput: run_pretraining vs tf-models-official (legacy tf_keras) on BERT-base.

Both read the same TFRecords with the same batch, run the masked-LM + next-sentence losses with the
original-style AdamWeightDecay, in a device loop of `--steps` steps; the number reported is the examples/s
of the second (steady, already compiled) loop. Each configuration runs in its own process, which also
reports its peak resident memory (and peak GPU memory where there is a GPU).

    .venv/bin/python benchmarks/bench_pretraining.py --steps=5 --configs=ours:float32:0,peer:float32:0
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_INPUT = os.path.join(ROOT, "..", "shared", "reference", "pretraining_data",
                             "conll_train_docs_dupe2.tfrecord")
DEFAULT_CONFIGS = ",".join(f"{impl}:{dtype}:{xla}" for dtype in ("float32", "bfloat16") for xla in (0, 1)
                           for impl in ("ours", "peer"))
BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1, max_position_embeddings=512, type_vocab_size=2,
                 initializer_range=0.02)


def _peak_memory():
    out = {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}
    import tensorflow as tf
    if tf.config.list_physical_devices("GPU"):
        out["peak_gpu_mb"] = tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2 ** 20
    return out


def run_ours(args, dtype, xla):
    sys.path.insert(0, ROOT)
    import modeling
    import run_pretraining
    import training
    with tempfile.TemporaryDirectory() as output_dir:
        config = training.TrainingConfig(
            output_dir=output_dir, train_batch_size=args.batch_size, learning_rate=1e-4,
            num_train_steps=2 * args.steps, num_warmup_steps=0, iterations_per_loop=args.steps,
            save_checkpoints_steps=10 ** 9, keep_checkpoint_max=1, dtype=dtype, use_xla=bool(xla))
        start = time.time()
        result = run_pretraining.run_pretraining(
            config, modeling.BertConfig.from_dict(BERT_BASE), args.input_file, args.max_seq_length,
            args.max_predictions_per_seq, do_train=True)
        wall = time.time() - start
    return {"examples_per_sec": result["train"]["examples_per_sec"], "loss": result["train"]["loss"],
            "wall_s": wall}


def run_peer(args, dtype, xla):
    import tensorflow as tf
    import tf_keras
    from official.nlp import optimization
    from official.nlp.modeling import layers
    from official.nlp.modeling import models
    from official.nlp.modeling import networks
    if dtype != "float32":
        tf_keras.mixed_precision.set_global_policy("mixed_" + dtype)
    c = BERT_BASE
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
    seq, preds = args.max_seq_length, args.max_predictions_per_seq
    spec = {"input_ids": seq, "input_mask": seq, "segment_ids": seq, "masked_lm_positions": preds,
            "masked_lm_ids": preds, "next_sentence_labels": 1}

    def decode(record):
        feats = {k: tf.io.FixedLenFeature([n], tf.int64) for k, n in spec.items()}
        feats["masked_lm_weights"] = tf.io.FixedLenFeature([preds], tf.float32)
        ex = tf.io.parse_single_example(record, feats)
        return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in ex.items()}

    files = tf.io.gfile.glob(args.input_file)
    dataset = tf.data.Dataset.from_tensor_slices(files).repeat().interleave(
        tf.data.TFRecordDataset, cycle_length=min(4, len(files)), num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.shuffle(100).map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.batch(args.batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
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
    loop(tf.constant(args.steps))
    timed = time.time()
    loss = loop(tf.constant(args.steps))
    end = time.time()
    return {"examples_per_sec": args.steps * args.batch_size / (end - timed), "loss": float(loss),
            "wall_s": end - start}


def run_one(args):
    impl, dtype, xla = args.one.split(":")
    result = (run_ours if impl == "ours" else run_peer)(args, dtype, int(xla))
    result.update(_peak_memory())
    result.update(impl=impl, dtype=dtype, xla=int(xla))
    print("RESULT " + json.dumps(result), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--input_file", default=DEFAULT_INPUT, help="pre-training TFRecords (glob)")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--max_predictions_per_seq", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20, help="steps per timed loop (one warm-up loop first)")
    parser.add_argument("--configs", default=DEFAULT_CONFIGS, help="impl:dtype:xla, comma separated")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per configuration")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        return run_one(args)
    if not os.path.exists(args.input_file) and not any(c in args.input_file for c in "*?["):
        raise SystemExit(f"--input_file {args.input_file} not found")
    results = []
    for spec in args.configs.split(","):
        cmd = [sys.executable, os.path.abspath(__file__), f"--one={spec}", f"--input_file={args.input_file}",
               f"--batch_size={args.batch_size}", f"--max_seq_length={args.max_seq_length}",
               f"--max_predictions_per_seq={args.max_predictions_per_seq}", f"--steps={args.steps}"]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
        lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
        if proc.returncode or not lines:
            print(f"{spec}: failed (exit {proc.returncode})\n{proc.stderr[-2000:]}", file=sys.stderr)
            continue
        results.append(json.loads(lines[-1][len("RESULT "):]))
        r = results[-1]
        print(f"{spec:24s} {r['examples_per_sec']:8.2f} examples/s  peak RSS {r['peak_rss_mb']:8.0f} MB"
              + (f"  peak GPU {r['peak_gpu_mb']:8.0f} MB" if "peak_gpu_mb" in r else "")
              + f"  loss {r['loss']:.3f}  wall {r['wall_s']:.0f} s", flush=True)
    by_key = {(r["impl"], r["dtype"], r["xla"]): r["examples_per_sec"] for r in results}
    peer_fp32 = max([v for (impl, dtype, _), v in by_key.items() if impl == "peer" and dtype == "float32"],
                    default=None)
    if peer_fp32:
        for (impl, dtype, xla), value in sorted(by_key.items()):
            if impl == "ours":
                print(f"ours {dtype} xla={xla}: {value / peer_fp32:.2f}x the best peer float32")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
