"""Training-step throughput of our BERT pre-training model vs tf-models-official, fp32/bf16, XLA on/off.

Both sides run one full pre-training step (masked-LM + next-sentence losses, gradients, global-norm
clipping to 1.0, AdamW with weight decay) on the same random batch and config (default BERT-base: L12 H768
A12, seq 128, batch 8, 20 masked positions). Ours: encoder.PretrainingModel + optimization.AdamWeightDecay.
Peer: official.nlp BertEncoderV2 + BertPretrainerV2 (masked LM) + a 2-way ClassificationHead, with the
Model Garden legacy AdamWeightDecay.

  .venv/bin/python benchmarks/bench_model.py [--steps=2 --rounds=2 --warmup=1 --layers=12 --batch_size=8 ...]

Prints steps/s (best of --rounds rounds, ours and peer alternating so that load from other processes
hits both alike), CPU seconds per step, ours/peer ratios, and the achieved share of a measured matmul peak.
"""
import gc
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags, logging  # noqa: E402

import encoder  # noqa: E402
import optimization  # noqa: E402
import bench_pretraining  # noqa: E402  (beside this script)

FLAGS = flags.FLAGS


def define_flags():
    flags.DEFINE_integer("layers", 12, "Transformer layers.")
    flags.DEFINE_integer("hidden", 768, "Hidden size.")
    flags.DEFINE_integer("heads", 12, "Attention heads.")
    flags.DEFINE_integer("vocab_size", 30522, "Vocabulary size.")
    flags.DEFINE_integer("seq_length", 128, "Sequence length.")
    flags.DEFINE_integer("batch_size", 8, "Batch size.")
    flags.DEFINE_integer("max_predictions", 20, "Masked positions per sequence.")
    flags.DEFINE_integer("warmup", 1, "Untimed steps after compilation.")
    flags.DEFINE_integer("steps", 2, "Timed steps per round.")
    flags.DEFINE_integer("rounds", 2, "Timing rounds (best round counts), alternating implementations.")
    flags.DEFINE_list("precisions", ["float32", "mixed_bfloat16"], "Precision policies to run.")
    flags.DEFINE_list("xla", ["off", "on"], "XLA settings to run.")
    flags.DEFINE_list("impls", ["ours", "peer"], "Implementations to run.")
    for name, allowed in (("precisions", ("float32", "mixed_bfloat16")), ("xla", ("off", "on")),
                          ("impls", ("ours", "peer"))):
        flags.register_validator(name, lambda values, allowed=allowed: set(values) <= set(allowed),
                                 message=f"expected a comma-separated list of {', '.join(allowed)}")


def make_batch(batch_size, seq_length, vocab_size, max_predictions, seed=0):
    rng = np.random.RandomState(seed)
    return {
        "input_ids": tf.constant(rng.randint(1, vocab_size, size=[batch_size, seq_length]), tf.int32),
        "input_mask": tf.ones([batch_size, seq_length], tf.int32),
        "segment_ids": tf.constant((np.arange(seq_length)[None, :] >= seq_length // 2).repeat(batch_size, 0),
                                   tf.int32),
        "masked_lm_positions": tf.constant(rng.randint(1, seq_length, size=[batch_size, max_predictions]),
                                           tf.int32),
        "masked_lm_ids": tf.constant(rng.randint(1, vocab_size, size=[batch_size, max_predictions]), tf.int32),
        "masked_lm_weights": tf.ones([batch_size, max_predictions], tf.float32),
        "next_sentence_labels": tf.constant(rng.randint(0, 2, size=[batch_size, 1]), tf.int32),
    }


def ours_step(config, precision, jit):
    """A compiled training step of our model; returns (step_fn, model)."""
    import keras
    keras.mixed_precision.set_global_policy(precision)
    try:
        model = encoder.PretrainingModel(config)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    variables = model.variables_by_name()
    optimizer = optimization.make_optimizer(1e-4, 10000, 100)
    optimizer.build(variables)
    trainable = list(variables.values())

    @tf.function(jit_compile=jit)
    def step(features):
        with tf.GradientTape() as tape:
            loss = model(features, training=True)["total_loss"]
        grads = tape.gradient(loss, trainable)
        optimizer.apply_gradients(zip(grads, trainable))
        return loss
    return step, model


def peer_step(config, precision, jit):
    """The same training step with tf-models-official (tf_keras) models and optimizer."""
    import tf_keras
    from official.modeling.optimization import legacy_adamw
    from official.nlp.modeling import layers as nlp_layers
    from official.nlp.modeling import models as nlp_models
    from official.nlp.modeling import networks

    tf_keras.mixed_precision.set_global_policy(precision)
    try:
        init = tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range)
        encoder = networks.BertEncoderV2(
            vocab_size=config.vocab_size, hidden_size=config.hidden_size, num_layers=config.num_hidden_layers,
            num_attention_heads=config.num_attention_heads, max_sequence_length=config.max_position_embeddings,
            type_vocab_size=config.type_vocab_size, inner_dim=config.intermediate_size,
            inner_activation=lambda x: tf_keras.activations.gelu(x, approximate=True),
            output_dropout=config.hidden_dropout_prob, attention_dropout=config.attention_probs_dropout_prob,
            initializer=init)
        nsp = nlp_layers.ClassificationHead(inner_dim=config.hidden_size, num_classes=2, initializer=init,
                                            name="next_sentence")
        _ = encoder(encoder.inputs)  # builds the embedding table
        # The masked-LM head runs in float32 (its bias_add fails under mixed_bfloat16 otherwise).
        masked_lm = nlp_layers.MaskedLM(embedding_table=encoder.get_embedding_table(), activation="gelu",
                                        initializer=init, name="cls/predictions", dtype="float32")
        model = nlp_models.BertPretrainerV2(encoder_network=encoder, classification_heads=[nsp],
                                            customized_masked_lm=masked_lm)
    finally:
        tf_keras.mixed_precision.set_global_policy("float32")
    schedule = tf_keras.optimizers.schedules.PolynomialDecay(1e-4, 10000, end_learning_rate=0.0)
    optimizer = legacy_adamw.AdamWeightDecay(learning_rate=schedule, weight_decay_rate=0.01, epsilon=1e-6,
                                             exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"],
                                             gradient_clip_norm=0.0)

    @tf.function(jit_compile=jit)
    def step(features):
        inputs = {"input_word_ids": features["input_ids"], "input_mask": features["input_mask"],
                  "input_type_ids": features["segment_ids"], "masked_lm_positions": features["masked_lm_positions"]}
        with tf.GradientTape() as tape:
            out = model(inputs, training=True)
            logits = tf.cast(out["mlm_logits"], tf.float32)
            mlm = tf_keras.losses.sparse_categorical_crossentropy(features["masked_lm_ids"], logits,
                                                                   from_logits=True)
            weights = features["masked_lm_weights"]
            mlm_loss = tf.reduce_sum(mlm * weights) / (tf.reduce_sum(weights) + 1e-5)
            nsp_logits = tf.cast(out["next_sentence"], tf.float32)
            nsp_loss = tf.reduce_mean(tf_keras.losses.sparse_categorical_crossentropy(
                features["next_sentence_labels"][:, 0], nsp_logits, from_logits=True))
            loss = mlm_loss + nsp_loss
        grads = tape.gradient(loss, model.trainable_variables)
        grads, _ = tf.clip_by_global_norm(grads, 1.0)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return step, model


def time_steps(step, features, steps):
    """(wall seconds, process CPU seconds) per step over `steps` steps."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        loss = float(step(features))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    if not np.isfinite(loss):
        raise RuntimeError(f"non-finite loss {loss}")
    return wall / steps, cpu / steps


def matmul_peak(dtype, n=2048, repeats=5):
    """Best measured FLOP/s of an n x n x n matmul."""
    a = tf.random.normal([n, n], dtype=tf.float32)
    b = tf.random.normal([n, n], dtype=tf.float32)
    a, b = tf.cast(a, dtype), tf.cast(b, dtype)
    mm = tf.function(lambda x, y: tf.matmul(x, y))
    mm(a, b).numpy()
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        mm(a, b).numpy()
        best = max(best, 2.0 * n ** 3 / (time.perf_counter() - t0))
    return best


def main(_):
    tf.get_logger().setLevel("ERROR")
    config = encoder.BertConfig(vocab_size=FLAGS.vocab_size, hidden_size=FLAGS.hidden,
                                num_hidden_layers=FLAGS.layers, num_attention_heads=FLAGS.heads,
                                intermediate_size=4 * FLAGS.hidden, type_vocab_size=2)
    features = make_batch(FLAGS.batch_size, FLAGS.seq_length, FLAGS.vocab_size, FLAGS.max_predictions)
    flops = bench_pretraining.train_flops(config.to_dict(), FLAGS.batch_size, FLAGS.seq_length,
                                          FLAGS.max_predictions)
    peaks = {"float32": matmul_peak(tf.float32), "mixed_bfloat16": matmul_peak(tf.bfloat16)}
    print(f"config L{config.num_hidden_layers} H{config.hidden_size} A{config.num_attention_heads} "
          f"seq {FLAGS.seq_length} batch {FLAGS.batch_size}; {flops / 1e9:.1f} GFLOP per training step")
    print("matmul peak: " + ", ".join(f"{k} {v / 1e9:.1f} GFLOP/s" for k, v in peaks.items()))
    builders = {"ours": ours_step, "peer": peer_step}
    results = {}
    for precision in FLAGS.precisions:
        for xla in FLAGS.xla:
            steps = {}
            for impl in FLAGS.impls:
                step, _ = builders[impl](config, precision, xla == "on")
                t0 = time.perf_counter()
                for _ in range(1 + FLAGS.warmup):
                    float(step(features))
                steps[impl] = step
                print(f"  {impl} {precision} xla={xla}: first call + warm-up {time.perf_counter() - t0:.1f} s",
                      flush=True)
            best = {impl: (float("inf"), float("inf")) for impl in steps}
            for _ in range(FLAGS.rounds):  # alternate implementations so load changes hit both alike
                for impl, step in steps.items():
                    wall, cpu = time_steps(step, features, FLAGS.steps)
                    best[impl] = (min(best[impl][0], wall), min(best[impl][1], cpu))
            for impl, (wall, cpu) in best.items():
                results[(impl, precision, xla)] = 1.0 / wall
                share = flops / wall / peaks[precision]
                print(f"{impl:5s} {precision:15s} xla={xla:3s} {1.0 / wall:7.3f} steps/s  {cpu:6.2f} CPU s/step  "
                      f"{100 * share:5.1f}% of the {precision} matmul peak", flush=True)
            del steps
            gc.collect()
    print("ratios ours/peer:")
    for precision in FLAGS.precisions:
        for xla in FLAGS.xla:
            key_o, key_p = ("ours", precision, xla), ("peer", precision, xla)
            if key_o in results and key_p in results:
                print(f"  {precision:15s} xla={xla:3s} {results[key_o] / results[key_p]:.2f}x")
    fp32 = [results[k] for k in results if k[0] == "peer" and k[1] == "float32"]
    bf16 = [results[k] for k in results if k[0] == "ours" and k[1] == "mixed_bfloat16"]
    if fp32 and bf16:
        print(f"  ours best bf16 vs peer best fp32: {max(bf16) / max(fp32):.2f}x")


if __name__ == "__main__":
    define_flags()
    logging.set_verbosity(logging.WARNING)
    app.run(main)
