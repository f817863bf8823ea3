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
import io
import json
import re

import numpy as np
import tensorflow as tf
from absl import logging

import encoder
import filesystem
import modeling
import original_model_fn
import packing
import runner
import tokenization
import training
from model_options import ModelOptions

SENTENCE_VECTORS = ("none", "pooled", "mean")


@dataclasses.dataclass
class ExtractFeaturesOptions:
    """extract_features.py's flags: the original's plus --sentence_vector."""
    input_file: str = cli.option(None, "Text file, one example per line; `text_a ||| text_b` for pairs.",
                                 required=True)
    output_file: str = cli.option(None, "Output JSON-lines file.", required=True)
    layers: str = cli.option("-1,-2,-3,-4", "Comma-separated encoder layer indexes (negative from the top).")
    model: ModelOptions = cli.nested(ModelOptions, required=("bert_config_file", "init_checkpoint", "vocab_file"),
                                     help_texts={"do_lower_case": "Whether to lower case the input text (True for "
                                                                  "uncased models)."})
    batch_size: int = cli.option(32, "Batch size for predictions.")
    log_every_secs: float = cli.option(training.LOG_EVERY_SECS, training.LOG_EVERY_SECS_HELP)
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
    """Reads `InputExample`s, one per line (lines end at "\\n" only, as the original's reader); `a ||| b` splits
    a pair (at the last separator, as the original)."""
    filesystem.require_file(input_file, "--input_file")
    with tf.io.gfile.GFile(input_file, "rb") as reader:
        data = reader.read()
    examples = []
    for unique_id, raw in enumerate(io.BytesIO(data)):
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
    texts = [e.text_a for e in examples] + [e.text_b or "" for e in examples]
    ids = tokenization.tokenize_in_processes(texts, tokenizer)
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


def input_fn_builder(features, seq_length):
    """The original's `input_fn(params)` over `InputFeatures`: input_fn({"batch_size": n}) is a tf.data.Dataset
    of batches, in order, of int32 unique_ids [n] and input_ids, input_mask, input_type_ids [n, seq_length]."""
    arrays = feature_arrays(features)
    for name in ("input_ids", "input_mask", "input_type_ids"):
        arrays[name] = arrays[name].reshape(-1, seq_length)
    return runner.original_input_fn(arrays)


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

    def build_model(self, elementwise_dtype="float32"):
        return encoder.BertEncoder(self.bert_config, elementwise_dtype=elementwise_dtype)

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


def feature_arrays(features):
    """The model inputs of InputFeatures, as arrays [examples, seq_length]."""
    return {"unique_ids": np.array([f.unique_id for f in features], np.int32),
            "input_ids": np.array([f.input_ids for f in features], np.int32),
            "input_mask": np.array([f.input_mask for f in features], np.int32),
            "input_type_ids": np.array([f.input_type_ids for f in features], np.int32)}


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


class Job(runner.Job):
    """One extract_features.py invocation on runner.Job's shape: one step, the features of every line written to
    --output_file (its folder made after the checks), from --init_checkpoint, in real-length batches."""

    steps = (("features", None, "extract"),)
    output_is_file = True

    def __init__(self, options):
        if not options.model.init_checkpoint:
            raise cli.UserError("--init_checkpoint is required (features of random weights are meaningless)")
        if options.batch_size < 1:
            raise cli.UserError(f"--batch_size must be positive, got {options.batch_size}")
        super().__init__(options)
        self.layer_indexes = parse_layers(options.layers, self.bert_config.num_hidden_layers)
        self.task = ExtractFeaturesTask(self.bert_config, self.layer_indexes, options.sentence_vector)
        self.features = None

    def loop_config(self):
        """The original's flags of the prediction loop: its batch size and TPU (and how often it logs progress)."""
        options = self.options
        return training.TrainingConfig(predict_batch_size=options.batch_size, use_tpu=options.use_tpu,
                                       master=options.master, num_tpu_cores=options.num_tpu_cores,
                                       log_every_secs=options.log_every_secs)

    def output_flag(self):
        return "--output_file", self.options.output_file

    def read_data(self):
        examples = read_examples(self.options.input_file)
        self.features = convert_examples_to_features(examples, self.model.max_seq_length, self.tokenizer)

    def extract(self):
        """Writes one JSON line per input line; returns the number of lines."""
        output_file = self.options.output_file
        outputs = self.predict_arrays(feature_arrays(self.features), self.config.predict_batch_size) \
            if self.features else {}
        with tf.io.gfile.GFile(output_file, "w") as writer:
            for i, feature in enumerate(self.features):
                result = {name: value[i] for name, value in outputs.items()}
                writer.write(feature_json(feature, result, self.layer_indexes) + "\n")
        logging.info("wrote %d lines to %s", len(self.features), output_file)
        return len(self.features)


# ----------------------------------------------------------------------------------------------
# The original's model_fn_builder, on TensorFlow 2 (modeling's original API).


def model_fn_builder(bert_config, init_checkpoint, layer_indexes, use_tpu, use_one_hot_embeddings):
    """The original's model_fn_builder. TensorFlow 2.16+ has no tf.estimator to run a model_fn, so the model_fn
    it returns is called directly, eagerly or in a tf.function: `model_fn(features, labels=None,
    mode=modeling.ModeKeys.PREDICT, params=None)` on a batch of features (unique_ids, input_ids, input_mask,
    input_type_ids) -> modeling.EstimatorSpec with predictions {"unique_id", "layer_output_<i>": the encoder layer
    layer_indexes[i]} (each [batch, seq_length, hidden_size]); its first call loads init_checkpoint by the
    assignment map (original_model_fn). Any other mode is the original's ValueError. use_tpu served TPUEstimator
    and is not used; extract_features.py runs the whole job (batches, JSON lines)."""
    loader = original_model_fn.CheckpointLoader(init_checkpoint)

    def model_fn(features, labels=None, mode=modeling.ModeKeys.PREDICT, params=None):
        if mode != modeling.ModeKeys.PREDICT:
            raise ValueError("Only PREDICT modes are supported: %s" % (mode))
        model = original_model_fn.load_once(loader, lambda: modeling.BertModel(
            config=bert_config, is_training=False, input_ids=features["input_ids"],
            input_mask=features["input_mask"], token_type_ids=features["input_type_ids"],
            use_one_hot_embeddings=use_one_hot_embeddings))
        all_layers = model.get_all_encoder_layers()
        predictions = {"unique_id": features["unique_ids"]}
        for i, layer_index in enumerate(layer_indexes):
            predictions["layer_output_%d" % i] = all_layers[layer_index]
        return modeling.EstimatorSpec(mode=mode, predictions=predictions, loss=None, train_op=None)

    return model_fn
# ----------------------------------------------------------------------------------------------


def run(options):
    """The whole script (ExtractFeaturesOptions): reads input_file, writes output_file; returns the number of
    lines written."""
    return Job(options).run()["features"]


if __name__ == "__main__":
    cli.main(ExtractFeaturesOptions, run)
