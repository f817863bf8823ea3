"""BERT checkpoints from and to other formats, in the original variable names.

  HF BERT (config.json + model.safetensors):
    hf_config_to_bert_config(dict) / bert_config_to_hf_config(config),
    hf_to_original_weights(state) / original_to_hf_weights(weights, with_prefix),
    read_hf(hf_dir) -> (BertConfig, weights),
    hf_to_original(hf_dir, output_dir) writes bert_model.ckpt + bert_config.json + vocab.txt (+ the HF folder's
      tokenizer_config.json, the model's casing: tokenization.recorded_do_lower_case reads it),
    original_to_hf(init_checkpoint, bert_config_file, vocab_file, output_dir, do_lower_case) writes the HF folder,
      tokenizer files included (transformers' AutoTokenizer and keras-hub's from_preset read them),
    each all at once (filesystem.staged_folder).
  tf-models-official BertEncoder / BertEncoderV2 object-based checkpoints (encoder only):
    tfm_to_original_weights(checkpoint) -> (OrderedDict {original name: ndarray}, BertConfig);
    tfm_to_original(checkpoint, output_dir, vocab_file=None, hidden_act="gelu") writes bert_model.ckpt +
    bert_config.json (+ vocab.txt).
convert_checkpoint.py is the command line over these.
"""
import collections
import json
import os
import re

import numpy as np
import tensorflow as tf
from absl import logging

import checkpoints
import encoder
import filesystem
import tokenization
from checkpoints import ORIGINAL_CHECKPOINT_NAME, load_checkpoint, resolve_checkpoint, save_checkpoint
from cli import MissingFileError, UserError

HF_CONFIG = "config.json"
HF_WEIGHTS = "model.safetensors"

_HF_ACT_TO_ORIGINAL = {"gelu": "gelu_exact", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu",
                       "gelu_fast": "gelu", "relu": "relu", "tanh": "tanh", "linear": "linear"}
_ORIGINAL_ACT_TO_HF = {"gelu_exact": "gelu", "gelu": "gelu_new", "relu": "relu", "tanh": "tanh",
                       "linear": "linear"}
# What transformers' BertConfig assumes for a key its config.json leaves out (type_vocab_size 2, not the
# original's 16; the vocabulary of bert-base-uncased).
_HF_CONFIG_DEFAULTS = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                       "intermediate_size": 3072, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
                       "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 512, "type_vocab_size": 2,
                       "initializer_range": 0.02}


def hf_config_to_bert_config(hf):
    """BertConfig from an HF config.json dict (HF "gelu" is exact GELU -> "gelu_exact")."""
    act = hf.get("hidden_act", _HF_CONFIG_DEFAULTS["hidden_act"])
    if act not in _HF_ACT_TO_ORIGINAL:
        raise UserError(f"HF config: unsupported hidden_act {act!r} (expected one of {list(_HF_ACT_TO_ORIGINAL)})")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise UserError(f"HF config: position_embedding_type {hf['position_embedding_type']!r} is not supported")
    eps = hf.get("layer_norm_eps", 1e-12)
    if abs(eps - encoder.LAYER_NORM_EPSILON) > 1e-15:
        logging.warning("HF config: layer_norm_eps %g differs from BERT's %g", eps, encoder.LAYER_NORM_EPSILON)
    missing = [key for key in encoder.CONFIG_KEYS if key not in hf]
    if missing:
        logging.info("HF config: using HF's defaults for %s", ", ".join(missing))
    values = {key: hf.get(key, _HF_CONFIG_DEFAULTS[key]) for key in encoder.CONFIG_KEYS}
    values["hidden_act"] = _HF_ACT_TO_ORIGINAL[act]
    return encoder.BertConfig.from_dict(values).validate("HF config")


def bert_config_to_hf_config(config):
    """HF config.json dict of a BertConfig."""
    out = {"architectures": ["BertModel"], "model_type": "bert", "layer_norm_eps": encoder.LAYER_NORM_EPSILON,
           "pad_token_id": 0, "position_embedding_type": "absolute"}
    out.update(config.to_dict())
    out["hidden_act"] = _ORIGINAL_ACT_TO_HF[config.hidden_act]
    return out


def _hf_name_table(num_layers):
    """[(hf name without "bert.", original name, transpose)] for a model of `num_layers` layers."""
    table = [
        ("embeddings.word_embeddings.weight", "bert/embeddings/word_embeddings", False),
        ("embeddings.token_type_embeddings.weight", "bert/embeddings/token_type_embeddings", False),
        ("embeddings.position_embeddings.weight", "bert/embeddings/position_embeddings", False),
        ("embeddings.LayerNorm.bias", "bert/embeddings/LayerNorm/beta", False),
        ("embeddings.LayerNorm.weight", "bert/embeddings/LayerNorm/gamma", False),
    ]
    dense = [("attention.self.query", "attention/self/query"), ("attention.self.key", "attention/self/key"),
             ("attention.self.value", "attention/self/value"), ("attention.output.dense", "attention/output/dense"),
             ("attention.output.LayerNorm", "attention/output/LayerNorm"),
             ("intermediate.dense", "intermediate/dense"), ("output.dense", "output/dense"),
             ("output.LayerNorm", "output/LayerNorm")]
    for i in range(num_layers):
        for hf, orig in dense:
            hf, orig = f"encoder.layer.{i}.{hf}", f"bert/encoder/layer_{i}/{orig}"
            if orig.endswith("LayerNorm"):
                table += [(hf + ".bias", orig + "/beta", False), (hf + ".weight", orig + "/gamma", False)]
            else:
                table += [(hf + ".weight", orig + "/kernel", True), (hf + ".bias", orig + "/bias", False)]
    table += [
        ("pooler.dense.weight", "bert/pooler/dense/kernel", True),
        ("pooler.dense.bias", "bert/pooler/dense/bias", False),
        ("cls.predictions.transform.dense.weight", "cls/predictions/transform/dense/kernel", True),
        ("cls.predictions.transform.dense.bias", "cls/predictions/transform/dense/bias", False),
        ("cls.predictions.transform.LayerNorm.bias", "cls/predictions/transform/LayerNorm/beta", False),
        ("cls.predictions.transform.LayerNorm.weight", "cls/predictions/transform/LayerNorm/gamma", False),
        ("cls.predictions.bias", "cls/predictions/output_bias", False),
        ("cls.seq_relationship.weight", "cls/seq_relationship/output_weights", False),
        ("cls.seq_relationship.bias", "cls/seq_relationship/output_bias", False),
    ]
    return table


# HF tensors with no original counterpart: buffers, and the decoder tied to the word embeddings.
_HF_SKIP = ("embeddings.position_ids", "cls.predictions.decoder.weight", "cls.predictions.decoder.bias")


def _normalize_hf_name(hf_name):
    name = hf_name[len("bert."):] if hf_name.startswith("bert.") else hf_name
    if name.endswith(".gamma"):
        name = name[:-len(".gamma")] + ".weight"
    elif name.endswith(".beta"):
        name = name[:-len(".beta")] + ".bias"
    return name


def _num_layers(names, pattern):
    layers = [int(m.group(1)) for m in (re.search(pattern, n) for n in names) if m]
    return max(layers) + 1 if layers else 0


def hf_to_original_weights(state):
    """{original name: ndarray} (original order) from an HF BERT state dict, with or without "bert."."""
    normalized = {}
    for hf_name, value in state.items():
        name = _normalize_hf_name(hf_name)
        if name not in _HF_SKIP:
            normalized[name] = value
    table = _hf_name_table(_num_layers(normalized, r"^encoder\.layer\.(\d+)\."))
    known = {hf for hf, _, _ in table}
    unknown = sorted(n for n in normalized if n not in known)
    if unknown:
        raise UserError(f"HF weights hold tensors with no BERT counterpart: {unknown[:10]}")
    out = collections.OrderedDict()
    for hf, orig, transpose in table:
        if hf in normalized:
            array = np.asarray(normalized[hf], dtype=np.float32)
            out[orig] = np.ascontiguousarray(array.T) if transpose else array
    return out


def original_to_hf_weights(weights, with_prefix=None):
    """HF state dict from {original name: ndarray}; "bert." prefix when cls/ heads are present (or asked)."""
    weights = {n: v for n, v in weights.items() if n != "global_step" and not n.endswith(("/adam_m", "/adam_v"))}
    table = _hf_name_table(_num_layers(weights, r"^bert/encoder/layer_(\d+)/"))
    known = {orig for _, orig, _ in table}
    unknown = sorted(n for n in weights if n not in known)
    if unknown:
        raise UserError(f"Variables with no HF BERT counterpart: {unknown[:10]}")
    has_heads = any(n.startswith("cls/") for n in weights)
    prefix = "bert." if (has_heads if with_prefix is None else with_prefix) else ""
    out = collections.OrderedDict()
    for hf, orig, transpose in table:
        if orig in weights:
            array = np.asarray(weights[orig])
            array = np.ascontiguousarray(array.T if transpose else array)
            out[hf if hf.startswith("cls.") else prefix + hf] = array
    if "cls/predictions/output_bias" in weights:
        out["cls.predictions.decoder.weight"] = np.ascontiguousarray(weights["bert/embeddings/word_embeddings"])
        out["cls.predictions.decoder.bias"] = np.ascontiguousarray(weights["cls/predictions/output_bias"])
    return out


def _require(path, what):
    if not tf.io.gfile.exists(path):
        raise MissingFileError(f"{what} not found: {path}")
    return path


def read_hf(hf_dir):
    """(BertConfig, {original name: ndarray}) from an HF folder with config.json and model.safetensors."""
    import safetensors.numpy
    config_path = _require(os.path.join(hf_dir, HF_CONFIG), "HF config")
    weights_path = os.path.join(hf_dir, HF_WEIGHTS)
    if not tf.io.gfile.exists(weights_path):
        raise MissingFileError(f"HF weights not found: {weights_path} (only the safetensors format is read)")
    with tf.io.gfile.GFile(config_path, "r") as f:
        hf_config = json.load(f)
    config = hf_config_to_bert_config(hf_config)
    with tf.io.gfile.GFile(weights_path, "rb") as f:
        weights = hf_to_original_weights(safetensors.numpy.load(f.read()))
    check_weights_against_config(weights, config, source=weights_path)
    return config, weights


def check_weights_against_config(weights, config, source="weights"):
    """Errors naming the variable when a weight's shape disagrees with what the config builds."""
    model = encoder.PretrainingModel(config) if any(n.startswith("cls/") for n in weights) else \
        encoder.BertEncoder(config)
    expected = {n: [int(d) for d in v.shape] for n, v in model.variables_by_name().items()}
    problems = []
    for name, value in weights.items():
        if name in expected and list(np.shape(value)) != expected[name]:
            problems.append(f"{name}: {source} {list(np.shape(value))} vs config {expected[name]}")
    missing = [n for n in expected if n.startswith("bert/") and n not in weights]
    if problems:
        raise UserError("Weights do not match the config: " + "; ".join(problems))
    if missing:
        raise UserError(f"{source} lacks {missing[:10]} ({len(missing)} BERT variables missing)")


HF_FILES = (HF_CONFIG, HF_WEIGHTS, "vocab.txt", tokenization.TOKENIZER_CONFIG_FILE, "special_tokens_map.json")
# What marks a folder as holding a converted model already (a conversion refuses it): the model's own files, not
# the vocabulary or tokenizer files, which an HF folder written beside an original checkpoint shares with it.
ORIGINAL_EXPORT = (ORIGINAL_CHECKPOINT_NAME + ".index", "bert_config.json")
HF_EXPORT = (HF_CONFIG, HF_WEIGHTS)
HF_SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                     "mask_token": "[MASK]"}
# The keys of tokenizer_config.json that say how BERT's tokenizer reads text, and the values with which HF's
# BertTokenizer reads it as tokenization.FullTokenizer does (strip_accents None: stripped when lower casing;
# split_special_tokens: "[CLS]" written in a text is the pieces "[", "CLS", "]", as the original reads it).
_HF_TOKENIZER_AS_ORIGINAL = {"do_basic_tokenize": True, "tokenize_chinese_chars": True, "strip_accents": None,
                             "split_special_tokens": True}


def _read_json(path, what):
    with tf.io.gfile.GFile(path, "r") as f:
        try:
            value = json.load(f)
        except ValueError as err:
            raise UserError(f"{what} {path} is not valid JSON: {err}") from None
    if not isinstance(value, dict):
        raise UserError(f"{what} {path}: expected a JSON object")
    return value


def read_hf_tokenizer_config(hf_dir):
    """The HF folder's tokenizer_config.json as a dict ({} without one); a warning for settings under which HF's
    tokenizer reads text otherwise than this project's (tokenization.FullTokenizer)."""
    path = os.path.join(hf_dir, tokenization.TOKENIZER_CONFIG_FILE)
    if not tf.io.gfile.exists(path):
        return {}
    config = _read_json(path, "HF tokenizer config")
    if not isinstance(config.get("do_lower_case", True), bool):
        raise UserError(f"{path}: do_lower_case must be true or false, got {config['do_lower_case']!r}")
    different = {key: config[key] for key, value in _HF_TOKENIZER_AS_ORIGINAL.items()
                 if key in config and config[key] != value and key != "split_special_tokens"
                 and not (key == "strip_accents" and config[key] == config.get("do_lower_case", True))}
    if different:
        logging.warning("%s: %s; this project's tokenizer reads text as the original BERT does (%s)", path,
                        ", ".join(f"{k}={v}" for k, v in different.items()),
                        ", ".join(f"{k}={v}" for k, v in _HF_TOKENIZER_AS_ORIGINAL.items()))
    return config


def hf_to_original(hf_dir, output_dir, vocab_file=None, do_lower_case=None, replace=False):
    """Converts an HF BERT folder into bert_model.ckpt + bert_config.json + vocab.txt, and tokenizer_config.json
    where the casing is known (the HF folder's tokenizer_config.json, with do_lower_case when given): what the
    scripts and original_to_hf read of the model's casing. Written all at once; an output folder holding a
    converted checkpoint is an error unless `replace`. Returns the checkpoint prefix."""
    config, weights = read_hf(hf_dir)
    vocab_file = vocab_file or os.path.join(hf_dir, "vocab.txt")
    tokenization.check_vocab_size(vocab_file, config.vocab_size)
    tokenizer_config = read_hf_tokenizer_config(hf_dir)
    if do_lower_case is not None:
        recorded = tokenizer_config.get("do_lower_case")
        tokenization.resolve_do_lower_case(do_lower_case, recorded, {}, vocab_file,
                                           os.path.join(hf_dir, tokenization.TOKENIZER_CONFIG_FILE))
        tokenizer_config["do_lower_case"] = do_lower_case
    with filesystem.staged_folder(output_dir, "--output_dir", () if replace else ORIGINAL_EXPORT) as staged:
        save_checkpoint(os.path.join(staged, ORIGINAL_CHECKPOINT_NAME), weights)
        config.to_json_file(os.path.join(staged, "bert_config.json"))
        tf.io.gfile.copy(vocab_file, os.path.join(staged, "vocab.txt"), overwrite=True)
        if tokenizer_config:
            _write_json(os.path.join(staged, tokenization.TOKENIZER_CONFIG_FILE), tokenizer_config)
    prefix = os.path.join(output_dir, ORIGINAL_CHECKPOINT_NAME)
    logging.info("Wrote %s (%d variables), bert_config.json and vocab.txt%s", prefix, len(weights),
                 f", {tokenization.TOKENIZER_CONFIG_FILE} (do_lower_case={tokenizer_config.get('do_lower_case')})"
                 if tokenizer_config else "")
    return prefix


def _write_json(path, value):
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(json.dumps(value, indent=2, sort_keys=True) + "\n")


def hf_tokenizer_config(do_lower_case, config, recorded=None):
    """tokenizer_config.json of an HF folder: BERT's tokenizer reading text as tokenization.FullTokenizer does,
    with do_lower_case, model_max_length = max_position_embeddings and the special tokens; `recorded` (the
    tokenizer_config.json kept beside the checkpoint) keeps its other keys."""
    out = dict(recorded or {})
    out.update(_HF_TOKENIZER_AS_ORIGINAL)
    out.update(HF_SPECIAL_TOKENS)
    out.update({"tokenizer_class": "BertTokenizer", "do_lower_case": bool(do_lower_case),
                "model_max_length": config.max_position_embeddings})
    return out


# What keras-hub's BertBackbone computes in place of exact (erf) GELU, and how far that moves MiniLM-L6's outputs.
KERAS_HUB_GELU_WARNING = (
    "%s: hidden_act is exact (erf) GELU (HF \"gelu\"): transformers computes it so, but keras-hub's BertBackbone "
    "always computes tanh GELU, so the model loaded with keras_hub.models.*.from_preset() answers slightly "
    "differently (MiniLM-L6: sequence outputs up to 8.5e-3 apart on MRPC dev; see the README's \"keras-hub\")")


def original_to_hf(init_checkpoint, bert_config_file, vocab_file, output_dir, do_lower_case=None):
    """Converts an original checkpoint + config + vocab into a complete HF folder (config.json, model.safetensors,
    vocab.txt, tokenizer_config.json, special_tokens_map.json), written all at once; returns the output folder.

    do_lower_case: the model's casing (None: the tokenizer_config.json recorded beside the checkpoint, else True
    for an uncased vocabulary; a cased vocabulary with nothing recorded is an error). An output folder holding
    an HF export, a vocabulary whose size differs from the config's, or a checkpoint without the encoder's
    variables is an error too.
    """
    import safetensors.numpy
    config = encoder.BertConfig.load(bert_config_file)
    vocab = tokenization.load_vocab(vocab_file)
    tokenization.check_special_tokens(vocab, vocab_file, tuple(HF_SPECIAL_TOKENS.values()))
    tokenization.require_vocab_of(vocab_file, config.vocab_size, bert_config_file)
    checkpoints.require_encoder(init_checkpoint)
    recorded, recorded_path = tokenization.recorded_tokenizer_config(tokenization.checkpoint_folder(init_checkpoint))
    do_lower_case = tokenization.resolve_do_lower_case(do_lower_case, (recorded or {}).get("do_lower_case"), vocab,
                                                       vocab_file, recorded_path)
    weights = load_checkpoint(init_checkpoint)
    kept = collections.OrderedDict((n, v) for n, v in weights.items()
                                   if n.startswith(("bert/", "cls/predictions/", "cls/seq_relationship/"))
                                   and not n.endswith(("/adam_m", "/adam_v")))
    dropped = [n for n in weights if n not in kept and not n.endswith(("/adam_m", "/adam_v")) and n != "global_step"]
    if dropped:
        logging.warning("%s: %d variable(s) have no HF BertModel / BertForPreTraining counterpart and are not "
                        "converted (a fine-tuned task head such as output_weights / output_bias): %s",
                        init_checkpoint, len(dropped), " ".join(dropped[:8]))
    weights = kept
    check_weights_against_config(weights, config, source=resolve_checkpoint(init_checkpoint))
    state = original_to_hf_weights(weights)
    hf_config = bert_config_to_hf_config(config)
    if any(n.startswith("cls.") for n in state):
        hf_config["architectures"] = ["BertForPreTraining"]
    if config.hidden_act == "gelu_exact":
        logging.warning(KERAS_HUB_GELU_WARNING, bert_config_file)
    with filesystem.staged_folder(output_dir, "--output_dir", HF_EXPORT) as staged:
        with tf.io.gfile.GFile(os.path.join(staged, HF_WEIGHTS), "wb") as f:
            f.write(safetensors.numpy.save(dict(state), metadata={"format": "pt"}))
        _write_json(os.path.join(staged, HF_CONFIG), hf_config)
        tf.io.gfile.copy(vocab_file, os.path.join(staged, "vocab.txt"), overwrite=True)
        _write_json(os.path.join(staged, tokenization.TOKENIZER_CONFIG_FILE),
                    hf_tokenizer_config(do_lower_case, config, recorded))
        _write_json(os.path.join(staged, "special_tokens_map.json"), HF_SPECIAL_TOKENS)
    logging.info("Wrote HF model to %s (%d tensors; do_lower_case=%s)", output_dir, len(state), do_lower_case)
    return output_dir


# ---- tf-models-official (Model Garden) BertEncoder -> original ------------------------------------------

_TFM_VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"
_TFM_LAYER_PARTS = [
    ("_attention_layer/_query_dense/kernel", "attention/self/query/kernel"),
    ("_attention_layer/_query_dense/bias", "attention/self/query/bias"),
    ("_attention_layer/_key_dense/kernel", "attention/self/key/kernel"),
    ("_attention_layer/_key_dense/bias", "attention/self/key/bias"),
    ("_attention_layer/_value_dense/kernel", "attention/self/value/kernel"),
    ("_attention_layer/_value_dense/bias", "attention/self/value/bias"),
    ("_attention_layer/_output_dense/kernel", "attention/output/dense/kernel"),
    ("_attention_layer/_output_dense/bias", "attention/output/dense/bias"),
    ("_attention_layer_norm/beta", "attention/output/LayerNorm/beta"),
    ("_attention_layer_norm/gamma", "attention/output/LayerNorm/gamma"),
    ("_intermediate_dense/kernel", "intermediate/dense/kernel"),
    ("_intermediate_dense/bias", "intermediate/dense/bias"),
    ("_output_dense/kernel", "output/dense/kernel"),
    ("_output_dense/bias", "output/dense/bias"),
    ("_output_layer_norm/beta", "output/LayerNorm/beta"),
    ("_output_layer_norm/gamma", "output/LayerNorm/gamma"),
]
_TFM_TOP_PARTS = [
    ("_embedding_layer/embeddings", "bert/embeddings/word_embeddings"),
    ("_type_embedding_layer/embeddings", "bert/embeddings/token_type_embeddings"),
    ("_position_embedding_layer/embeddings", "bert/embeddings/position_embeddings"),
    ("_embedding_norm_layer/beta", "bert/embeddings/LayerNorm/beta"),
    ("_embedding_norm_layer/gamma", "bert/embeddings/LayerNorm/gamma"),
]
_TFM_POOLER_PARTS = [("_pooler_layer/kernel", "bert/pooler/dense/kernel"),
                     ("_pooler_layer/bias", "bert/pooler/dense/bias")]


def tfm_to_original_weights(checkpoint, hidden_act="gelu"):
    """Reads a Model Garden BertEncoder(V2) from an object-based checkpoint -> (weights, BertConfig).

    The encoder is found by its `_embedding_layer/embeddings` entry (any prefix: `encoder/`,
    `model/encoder_network/`, ...); heads and optimizer slots in the checkpoint are ignored with a log line.
    Einsum kernels [H, N, D] / [N, D, H] and biases [N, D] become the original 2-D / 1-D shapes.
    """
    prefix_path = resolve_checkpoint(checkpoint)
    reader = checkpoints.reader(prefix_path)
    keys = [k for k in reader.get_variable_to_shape_map() if k.endswith(_TFM_VALUE) and "OPTIMIZER_SLOT" not in k]
    anchors = [k for k in keys if k.endswith("_embedding_layer/embeddings" + _TFM_VALUE)
               and not k.endswith(("_type_embedding_layer/embeddings" + _TFM_VALUE,
                                   "_position_embedding_layer/embeddings" + _TFM_VALUE))]
    if len(anchors) != 1:
        raise UserError(f"{prefix_path}: expected one tf-models-official BertEncoder (an "
                        f"`_embedding_layer/embeddings` entry), found {len(anchors)}")
    base = anchors[0][:-len("_embedding_layer/embeddings" + _TFM_VALUE)]

    def get(part):
        key = base + part + _TFM_VALUE
        if key not in reader.get_variable_to_shape_map():
            raise UserError(f"{prefix_path}: missing tf-models-official variable {key}")
        used.add(key)
        return reader.get_tensor(key).astype(np.float32)

    used = set()
    weights = collections.OrderedDict()
    for part, name in _TFM_TOP_PARTS:
        weights[name] = get(part)
    layer_ids = sorted({int(m.group(1)) for m in (re.match(re.escape(base) + r"_transformer_layers/(\d+)/", k)
                                                   for k in keys) if m})
    if layer_ids != list(range(len(layer_ids))) or not layer_ids:
        raise UserError(f"{prefix_path}: transformer layers {layer_ids} are not 0..N-1")
    heads = head_size = None
    for i in layer_ids:
        for part, name in _TFM_LAYER_PARTS:
            value = get(f"_transformer_layers/{i}/{part}")
            if part.endswith(("_query_dense/kernel", "_key_dense/kernel", "_value_dense/kernel")):
                heads, head_size = value.shape[1], value.shape[2]
                value = value.reshape(value.shape[0], -1)
            elif part.endswith(("_query_dense/bias", "_key_dense/bias", "_value_dense/bias")):
                value = value.reshape(-1)
            elif part.endswith("_output_dense/kernel") and value.ndim == 3:
                value = value.reshape(-1, value.shape[-1])
            weights[f"bert/encoder/layer_{i}/{name}"] = value
    for part, name in _TFM_POOLER_PARTS:
        weights[name] = get(part)
    for key in sorted(set(keys) - used):
        logging.info("tf-models-official checkpoint entry not converted: %s", key)
    word = weights["bert/embeddings/word_embeddings"]
    config = encoder.BertConfig(
        vocab_size=int(word.shape[0]), hidden_size=int(word.shape[1]), num_hidden_layers=len(layer_ids),
        num_attention_heads=int(heads), intermediate_size=int(weights["bert/encoder/layer_0/intermediate/dense/bias"]
                                                             .shape[0]),
        hidden_act=hidden_act,
        max_position_embeddings=int(weights["bert/embeddings/position_embeddings"].shape[0]),
        type_vocab_size=int(weights["bert/embeddings/token_type_embeddings"].shape[0]))
    if heads * head_size != config.hidden_size:
        raise UserError(f"{prefix_path}: {heads} heads x {head_size} != hidden size {config.hidden_size}")
    return weights, config


def tfm_to_original(checkpoint, output_dir, vocab_file=None, hidden_act="gelu"):
    """Converts a Model Garden BertEncoder checkpoint into bert_model.ckpt + bert_config.json (+ vocab.txt)."""
    weights, config = tfm_to_original_weights(checkpoint, hidden_act=hidden_act)
    check_weights_against_config(weights, config, source=resolve_checkpoint(checkpoint))
    tf.io.gfile.makedirs(output_dir)
    prefix = os.path.join(output_dir, ORIGINAL_CHECKPOINT_NAME)
    save_checkpoint(prefix, weights)
    config.to_json_file(os.path.join(output_dir, "bert_config.json"))
    if vocab_file:
        tokenization.check_vocab_size(vocab_file, config.vocab_size)
        tf.io.gfile.copy(vocab_file, os.path.join(output_dir, "vocab.txt"), overwrite=True)
    logging.info("Wrote %s (%d variables) and bert_config.json", prefix, len(weights))
    return prefix
