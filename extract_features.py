"""Extract pre-computed feature vectors from BERT (the paper's feature-based use).

As the original: `--input_file` holds one example per line, `text_a ||| text_b` for a pair; `--output_file`
gets one JSON object per line: {"linex_index": i, "features": [{"token": t, "layers": [{"index": l,
"values": [...]}, ...]}, ...]} for every token of the example and every layer of `--layers`, values rounded as
the original rounds them (round(float(x), 6)).

Extra (not in the original): `--sentence_vector=pooled` adds the pooler output ([CLS] through the pooler
dense layer) and `--sentence_vector=mean` the mean of the last layer over the example's real tokens
(input_mask 1, [CLS] and [SEP] included), as a "sentence_vector" list in each line, rounded like the values.
Batches run through training.predict (one compiled tf.function), sorted by length and cut to their longest
example (runner.predict_arrays); pairs are packed by packing.pack_pair, as run_classifier.py packs them.
"""
import cli  # first: quiets TensorFlow's start-up logging
import collections
import dataclasses
import json
import re

import numpy as np
import tensorflow as tf
from absl import logging

import checkpoints
import filesystem
import modeling
import packing
import runner
import tokenization
import training

SENTENCE_VECTORS = ("none", "pooled", "mean")


@dataclasses.dataclass
class ExtractFeaturesOptions:
    """extract_features.py's flags: the original's plus --sentence_vector."""
    input_file: str = cli.option(None, "Text file, one example per line; `text_a ||| text_b` for pairs.",
                                 required=True)
    output_file: str = cli.option(None, "Output JSON-lines file.", required=True)
    layers: str = cli.option("-1,-2,-3,-4", "Comma-separated encoder layer indexes (negative from the top).")
    bert_config_file: str = cli.option(None, "The config json file corresponding to the pre-trained BERT model.",
                                       required=True)
    max_seq_length: int = cli.option(128, "The maximum total input sequence length after WordPiece tokenization. "
                                     "Longer sequences are truncated, shorter ones padded.")
    init_checkpoint: str = cli.option(None, "Initial checkpoint (usually from a pre-trained BERT model).",
                                      required=True)
    vocab_file: str = cli.option(None, "The vocabulary file that the BERT model was trained on.", required=True)
    do_lower_case: bool = cli.option(True, "Whether to lower case the input text (True for uncased models).")
    batch_size: int = cli.option(32, "Batch size for predictions.")
    use_tpu: bool = cli.option(False, "Whether to use TPU or GPU/CPU.")
    master: str = cli.option(None, "If using a TPU, the address of the master.")
    num_tpu_cores: int = cli.option(8, "Only used if `use_tpu` is True. Total number of TPU cores to use.")
    sentence_vector: str = cli.option("none", "Extra: also write a `sentence_vector` per line: `pooled` (pooler "
                                      "output) or `mean` (last layer averaged over real tokens, [CLS] and [SEP] "
                                      "included).", SENTENCE_VECTORS)


@dataclasses.dataclass
class InputExample:
    """One line of the input file."""
    unique_id: int
    text_a: str
    text_b: str


@dataclasses.dataclass
class InputFeatures:
    """A single set of features of data."""
    unique_id: int
    tokens: list
    input_ids: list
    input_mask: list
    input_type_ids: list


def read_examples(input_file):
    """Reads `InputExample`s, one per line; `a ||| b` splits a pair (at the last separator, as the original)."""
    filesystem.require_file(input_file, "--input_file")
    with tf.io.gfile.GFile(input_file, "rb") as reader:
        data = reader.read()
    examples = []
    for unique_id, raw in enumerate(data.splitlines(keepends=True)):
        try:
            line = raw.decode("utf-8").strip()
        except UnicodeDecodeError as err:
            raise cli.UserError(f"--input_file={input_file} line {unique_id + 1}: not valid UTF-8 ({err.reason})")
        m = re.match(r"^(.*) \|\|\| (.*)$", line)
        if m is None:
            text_a, text_b = line, None
        else:
            text_a, text_b = m.group(1), m.group(2)
        examples.append(InputExample(unique_id=unique_id, text_a=text_a, text_b=text_b))
    return examples


def convert_examples_to_features(examples, seq_length, tokenizer):
    """`[CLS] a [SEP] (b [SEP])`, zero padded to seq_length; truncation as the original (logged here)."""
    if seq_length < 3:
        raise cli.UserError(f"--max_seq_length must be at least 3, got {seq_length}")
    ids = tokenization.tokenize_in_processes([e.text_a for e in examples] + [e.text_b or "" for e in examples], tokenizer)
    ids_a, ids_b = ids[:len(examples)], ids[len(examples):]
    arrays = packing.pack_pairs(tokenizer, ids_a, ids_b, seq_length)
    lengths = arrays["input_mask"].sum(axis=1)
    n_truncated = int(sum(len(a) + len(b) + 2 + bool(b) > length for a, b, length in zip(ids_a, ids_b, lengths)))
    features = []
    for ex_index, example in enumerate(examples):
        length = int(lengths[ex_index])
        input_ids = arrays["input_ids"][ex_index].tolist()
        feature = InputFeatures(unique_id=example.unique_id,
                                tokens=tokenizer.convert_ids_to_tokens(input_ids[:length]), input_ids=input_ids,
                                input_mask=arrays["input_mask"][ex_index].tolist(),
                                input_type_ids=arrays["segment_ids"][ex_index].tolist())
        if ex_index < 5:
            logging.info("*** Example ***")
            logging.info("unique_id: %s", example.unique_id)
            logging.info("tokens: %s", " ".join(tokenization.printable_text(x) for x in feature.tokens))
            logging.info("input_ids: %s", " ".join(str(x) for x in feature.input_ids))
            logging.info("input_mask: %s", " ".join(str(x) for x in feature.input_mask))
            logging.info("input_type_ids: %s", " ".join(str(x) for x in feature.input_type_ids))
        features.append(feature)
    if n_truncated:
        logging.info("%d of %d examples were truncated to max_seq_length=%d", n_truncated, len(examples),
                     seq_length)
    return features


def parse_layers(layers, num_hidden_layers):
    """'-1,-2' -> [-1, -2]; each index must name an encoder layer (python indexing as the original)."""
    try:
        indexes = [int(x) for x in str(layers).split(",")]
    except ValueError:
        raise cli.UserError(f"--layers must be comma-separated integers, got {layers!r}") from None
    for index in indexes:
        if not -num_hidden_layers <= index < num_hidden_layers:
            raise cli.UserError(f"--layers: index {index} is out of range for a model with {num_hidden_layers} "
                             f"encoder layers (valid: {-num_hidden_layers}..{num_hidden_layers - 1})")
    return indexes


def round_like_original(values):
    """Array -> nested lists of Python floats equal to the original's round(float(x), 6) for each value.

    For float32 (or float16/bfloat16) values x * 1e6 is exact in float64 (at most 38 significant bits), and
    np.rint rounds half to even on that exact value, as Python's round does on the exact decimal value, so
    the two agree bit for bit; other dtypes fall back to Python's round.
    """
    values = np.asarray(values)
    if values.dtype in (np.float32, np.float16) or values.dtype.name == "bfloat16":
        return (np.rint(values.astype(np.float64) * 1e6) / 1e6).tolist()
    return np.vectorize(lambda x: round(float(x), 6), otypes=[np.float64])(values).tolist()


class ExtractFeaturesTask(training.Task):
    """training.Task that predicts the requested encoder layers (and a sentence vector) per example."""

    def __init__(self, bert_config, layer_indexes, sentence_vector="none"):
        self.sequence_outputs = tuple("layer_output_%d" % j for j in range(len(layer_indexes)))
        if sentence_vector not in SENTENCE_VECTORS:
            raise cli.UserError(f"--sentence_vector must be one of {SENTENCE_VECTORS}, got {sentence_vector!r}")
        self.bert_config = bert_config
        self.layer_indexes = list(layer_indexes)
        self.sentence_vector = sentence_vector

    def build_model(self):
        return modeling.BertModel(self.bert_config)

    def predict_outputs(self, model, features):
        input_mask = features["input_mask"]
        outputs = model(features["input_ids"], input_mask, features["input_type_ids"], training=False)
        all_layers = outputs["all_encoder_layers"]
        result = {"unique_id": features["unique_ids"]}
        for j, layer_index in enumerate(self.layer_indexes):
            result["layer_output_%d" % j] = tf.cast(all_layers[layer_index], tf.float32)
        if self.sentence_vector == "pooled":
            result["sentence_vector"] = tf.cast(outputs["pooled_output"], tf.float32)
        elif self.sentence_vector == "mean":
            last = tf.cast(all_layers[-1], tf.float32)
            mask = tf.cast(input_mask, tf.float32)[:, :, None]
            result["sentence_vector"] = tf.reduce_sum(last * mask, axis=1) / tf.maximum(
                tf.reduce_sum(mask, axis=1), 1.0)
        return result


def predict_features(features, bert_config, init_checkpoint, layer_indexes, seq_length, batch_size=32,
                     sentence_vector="none", dtype="float32", use_tpu=False, master=None, num_tpu_cores=8):
    """Yields (feature, result) in input order; result holds `layer_output_j` [seq, hidden] per requested
    layer and `sentence_vector` when asked for (runner.predict_arrays: real-length batches)."""
    if batch_size < 1:
        raise cli.UserError(f"--batch_size must be positive, got {batch_size}")
    if not features:
        return
    config = training.TrainingConfig(init_checkpoint=init_checkpoint, predict_batch_size=batch_size,
                                     dtype=dtype, use_tpu=use_tpu, master=master, num_tpu_cores=num_tpu_cores)
    task = ExtractFeaturesTask(bert_config, layer_indexes, sentence_vector)
    arrays = {"unique_ids": np.array([f.unique_id for f in features], np.int32),
              "input_ids": np.array([f.input_ids for f in features], np.int32).reshape(-1, seq_length),
              "input_mask": np.array([f.input_mask for f in features], np.int32).reshape(-1, seq_length),
              "input_type_ids": np.array([f.input_type_ids for f in features], np.int32).reshape(-1, seq_length)}
    outputs = runner.predict_arrays(task, arrays, config, checkpoint_path=checkpoints.resolve_checkpoint(
        init_checkpoint, flag="--init_checkpoint"))
    for i, feature in enumerate(features):
        yield feature, {name: value[i] for name, value in outputs.items()}


def feature_json(feature, result, layer_indexes):
    """One output line (without the newline) in the original's format, plus sentence_vector if computed."""
    n = len(feature.tokens)
    rounded = [round_like_original(result["layer_output_%d" % j][:n]) for j in range(len(layer_indexes))]
    output = collections.OrderedDict()
    output["linex_index"] = feature.unique_id
    all_features = []
    for i, token in enumerate(feature.tokens):
        all_layers = []
        for j, layer_index in enumerate(layer_indexes):
            layers = collections.OrderedDict()
            layers["index"] = layer_index
            layers["values"] = rounded[j][i]
            all_layers.append(layers)
        token_features = collections.OrderedDict()
        token_features["token"] = token
        token_features["layers"] = all_layers
        all_features.append(token_features)
    output["features"] = all_features
    if "sentence_vector" in result:
        output["sentence_vector"] = round_like_original(result["sentence_vector"])
    return json.dumps(output)


def run(options):
    """The whole script (ExtractFeaturesOptions): reads input_file, writes output_file; returns the number of
    lines written."""
    o = options
    if not o.init_checkpoint:
        raise cli.UserError("--init_checkpoint is required (features of random weights are meaningless)")
    bert_config, tokenizer = runner.check_model_inputs(o.bert_config_file, o.vocab_file, o.do_lower_case,
                                                       o.max_seq_length, o.init_checkpoint)
    layer_indexes = parse_layers(o.layers, bert_config.num_hidden_layers)
    examples = read_examples(o.input_file)
    features = convert_examples_to_features(examples, o.max_seq_length, tokenizer)
    filesystem.make_parent_dir(o.output_file, "--output_file")
    written = 0
    with tf.io.gfile.GFile(o.output_file, "w") as writer:
        for feature, result in predict_features(features, bert_config, o.init_checkpoint, layer_indexes,
                                                o.max_seq_length, o.batch_size, o.sentence_vector,
                                                use_tpu=o.use_tpu, master=o.master, num_tpu_cores=o.num_tpu_cores):
            writer.write(feature_json(feature, result, layer_indexes) + "\n")
            written += 1
    logging.info("wrote %d lines to %s", written, o.output_file)
    return written


if __name__ == "__main__":
    cli.main(ExtractFeaturesOptions, run)
