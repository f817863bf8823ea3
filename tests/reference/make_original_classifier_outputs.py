"""Makes tests/reference/original_classifier_outputs.json: what the original release's run_classifier.create_model
computes on MRPC dev examples, for tests/test_original_classifier.py.

    python tests/reference/make_original_classifier_outputs.py --original_dir=/tmp/bert --original_revision=eedf571

--original_dir is a checkout of https://github.com/google-research/bert. Its run_classifier.py (with its modeling.py
and tokenization.py) is imported from there as it is and run in TensorFlow's compat.v1 graph mode with the shims of
make_original_curves.py (nothing of the original is copied into this project). Its MrpcProcessor reads the first
--examples dev examples of ../shared/data/glue/MRPC, its convert_examples_to_features packs them (uncased vocab,
--max_seq_length), and its create_model (is_training=False, use_one_hot_embeddings=False) computes the loss,
per-example loss, logits and probabilities from the tiny original checkpoint (every bert/ variable, by its
get_assignment_map_from_checkpoint and tf.train.init_from_checkpoint) and an output layer drawn here with a fixed
seed. The file keeps the features, the output layer and the outputs.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUTPUT = os.path.join(HERE, "original_classifier_outputs.json")
HEAD_SEED = 4821


def main(args):
    import numpy as np
    import tensorflow as tf
    sys.path.insert(0, HERE)
    from make_original_curves import _compat_module, _import_original
    v1 = tf.compat.v1
    v1.disable_v2_behavior()
    shim = _compat_module(v1)
    modeling, script = _import_original(args.original_dir, "run_classifier", shim)
    shared = os.path.abspath(os.environ.get("BERT_SHARED_DIR", os.path.join(ROOT, "..", "shared")))
    tiny = os.path.join(shared, "reference", "original_checkpoint_tiny")
    init_checkpoint = os.path.join(tiny, "model.ckpt-30")

    processor = script.MrpcProcessor()
    examples = processor.get_dev_examples(os.path.join(shared, "data", "glue", "MRPC"))[:args.examples]
    tokenizer = script.tokenization.FullTokenizer(os.path.join(shared, "vocab", "uncased", "vocab.txt"), True)
    features = script.convert_examples_to_features(examples, processor.get_labels(), args.max_seq_length,
                                                   tokenizer)
    arrays = {name: np.array([getattr(f, name) for f in features], np.int32)
              for name in ("input_ids", "input_mask", "segment_ids", "label_id")}
    bert_config = modeling.BertConfig.from_json_file(os.path.join(tiny, "bert_config.json"))
    rng = np.random.RandomState(HEAD_SEED)
    output_weights = rng.normal(0.0, 0.5, [2, bert_config.hidden_size]).astype(np.float32)
    output_bias = rng.normal(0.0, 0.5, [2]).astype(np.float32)

    with v1.Graph().as_default():
        inputs = {name: v1.constant(value) for name, value in arrays.items()}
        loss, per_example_loss, logits, probabilities = script.create_model(
            bert_config, False, inputs["input_ids"], inputs["input_mask"], inputs["segment_ids"],
            inputs["label_id"], 2, False)
        tvars = v1.trainable_variables()
        assignment_map, _ = modeling.get_assignment_map_from_checkpoint(tvars, init_checkpoint)
        v1.train.init_from_checkpoint(init_checkpoint, assignment_map)
        head = {v.name[:-2]: v for v in tvars if not v.name.startswith("bert/")}
        if sorted(head) != ["output_bias", "output_weights"]:
            raise RuntimeError(f"unexpected variables outside bert/: {sorted(head)}")
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            head["output_weights"].load(output_weights, sess)
            head["output_bias"].load(output_bias, sess)
            out = sess.run({"loss": loss, "per_example_loss": per_example_loss, "logits": logits,
                            "probabilities": probabilities})
    result = {
        "made_by": "tests/reference/make_original_classifier_outputs.py",
        "original": {"repository": "https://github.com/google-research/bert", "revision": args.original_revision},
        "tensorflow": tf.__version__,
        "inputs": {"data": "data/glue/MRPC dev.tsv", "examples": args.examples, "guids": [e.guid for e in examples],
                   "vocab": "vocab/uncased/vocab.txt", "max_seq_length": args.max_seq_length,
                   "init_checkpoint": "reference/original_checkpoint_tiny/model.ckpt-30"},
        "features": {name: value.tolist() for name, value in arrays.items()},
        "output_weights": output_weights.tolist(), "output_bias": output_bias.tolist(),
        "outputs": {name: np.asarray(value).tolist() for name, value in out.items()},
    }
    with open(args.output, "w") as f:
        json.dump(result, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print("wrote", args.output)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--original_dir", required=True, help="a checkout of google-research/bert")
    parser.add_argument("--original_revision", default="unknown", help="its commit, recorded in the output")
    parser.add_argument("--examples", type=int, default=16, help="the first N MRPC dev examples")
    parser.add_argument("--max_seq_length", type=int, default=64)
    parser.add_argument("--output", default=OUTPUT)
    args = parser.parse_args(argv)
    if not os.path.isfile(os.path.join(args.original_dir, "run_classifier.py")):
        parser.error(f"--original_dir={args.original_dir}: no run_classifier.py there (a google-research/bert "
                     f"checkout)")
    return args


if __name__ == "__main__":
    main(parse_args(sys.argv[1:]))
