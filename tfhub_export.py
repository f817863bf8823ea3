"""A checkpoint as TF Hub's pair of SavedModels for text (the "Common SavedModel API for Text", Transformer
encoders): an encoder and its matching preprocessor, as tf-models-official's export_tfhub writes them, so that
`hub.KerasLayer` (and TensorFlow's BERT tutorials) load them.

  export(init_checkpoint, bert_config_file, vocab_file, do_lower_case, output_dir) checks its inputs, then writes
  output_dir/encoder and output_dir/preprocessor (into a temporary folder first, moved into place at the end: a
  failed export leaves nothing).

The encoder (a reusable SavedModel; float32):
  encoder(dict(input_word_ids=, input_mask=, input_type_ids=), training=False): int32 [batch, seq] (any batch,
    seq up to max_position_embeddings; the inputs are checked in the graph) -> dict of pooled_output
    [batch, width], sequence_output [batch, seq, width], encoder_outputs (one [batch, seq, width] per layer, the
    last = sequence_output), default (= pooled_output); training=True applies dropout.
  encoder.variables, .trainable_variables (the encoder's weights), .regularization_losses (none), so that
    hub.KerasLayer(path, trainable=True) fine-tunes them; encoder.vocab_file (an asset) and
    encoder.do_lower_case (a variable), as tf-models-official's encoders keep them.
  encoder.mlm(dict(..., masked_lm_positions=int32 [batch, positions]), training=False) -> the same outputs and
    mlm_logits [batch, positions, vocab] (the masked-LM head's logits before the softmax), present only where the
    checkpoint holds the pre-training head (cls/predictions/...); encoder.mlm.variables add the head's weights.
The preprocessor (no variables; loading it needs TensorFlow and `import tensorflow_text` only):
  preprocessor(strings [batch]) -> input_word_ids, input_mask, input_type_ids int32 [batch, 128] (one segment;
    the model's max_position_embeddings where that is shorter).
  preprocessor.tokenize(strings) -> int32 RaggedTensor [batch, (words), (pieces)] (fast_tokenization's ids: the
    original tokenizer's); preprocessor.tokenize.get_special_tokens_dict() -> vocab_size, start_of_sequence_id,
    end_of_segment_id, padding_id (and mask_id) as int32 scalars.
  preprocessor.bert_pack_inputs([segment_a(, segment_b)], seq_length=128) -> the three tensors [batch, seq_length]
    from one or two int32 RaggedTensors ([batch, (pieces)] or [batch, (words), (pieces)]), packed by packing.py as
    run_classifier.py packs its features (the original's pair truncation): any seq_length >= 3.
"""
import os

import tensorflow as tf
from absl import logging

import checkpoints
import cli
import encoder
import fast_tokenization
import filesystem
import model_options
import packing
import serving
import tokenization

ENCODER_DIR = "encoder"
PREPROCESSOR_DIR = "preprocessor"
DEFAULT_SEQ_LENGTH = 128
MLM_PREFIX = "cls/predictions/"
INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")


def _tf_variable(variable):
    """The tf.Variable behind a (Keras) variable: what a traced function captures and the SavedModel keeps."""
    value = getattr(variable, "value", None)
    return value if isinstance(value, tf.Variable) else variable


def _reusable(obj, variables):
    """Gives a SavedModel object the attributes of TF Hub's reusable SavedModels."""
    obj.variables = [_tf_variable(v) for v in variables]
    obj.trainable_variables = [v for v in obj.variables if v.trainable]
    obj.regularization_losses = []
    return obj


def _input_spec(extra=()):
    return {name: tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUT_NAMES + tuple(extra)}


# The op seed of the random op that seeds an exported encoder's dropout masks on each call.
DROPOUT_OP_SEED = 1804


class _Encoder:
    """The encoder's computation over encoder.BertEncoder (and MaskedLMHead), traced into the SavedModel."""

    def __init__(self, bert, mlm_head=None):
        self.bert = bert
        self.mlm_head = mlm_head
        self.config = bert.config

    def outputs(self, inputs, training):
        c = self.config
        input_ids, input_mask, type_ids = serving.check_ids(*(inputs[name] for name in INPUT_NAMES),
                                                            c.vocab_size, c.type_vocab_size,
                                                            c.max_position_embeddings, names=INPUT_NAMES)
        if training:
            # Dropout from stateless ops seeded per call by one random op with a seed of its own: it runs where
            # the caller enabled op determinism (tf.config.experimental.enable_op_determinism), which refuses
            # random ops without a seed; each call still draws new masks.
            seed = tf.random.uniform([2], maxval=tf.int64.max, dtype=tf.int64, seed=DROPOUT_OP_SEED)
            out = self.bert(input_ids, input_mask, type_ids, training=True, dropout_seed=seed)
        else:
            out = self.bert(input_ids, input_mask, type_ids, training=False)
        return {"pooled_output": out["pooled_output"], "sequence_output": out["sequence_output"],
                "encoder_outputs": list(out["all_encoder_layers"]), "default": out["pooled_output"]}

    def mlm_outputs(self, inputs, training):
        out = self.outputs(inputs, training)
        positions = tf.cast(inputs["masked_lm_positions"], tf.int32)
        hidden = encoder.gather_indexes(out["sequence_output"], positions)
        logits = self.mlm_head.logits(hidden, self.bert.embedding_table)
        shape = tf.shape(positions)
        out["mlm_logits"] = tf.reshape(logits, [shape[0], shape[1], self.config.vocab_size])
        return out


def _traced(function, spec):
    """A tf.function `f(inputs, training=False)` traced for both values of training."""
    def call(inputs, training=False):
        return function(inputs, training)
    traced = tf.function(call, autograph=False)
    for training in (False, True):
        traced.get_concrete_function(spec, training=training)
    return traced


def encoder_module(bert, vocab_file, do_lower_case, mlm_head=None):
    """The encoder SavedModel's root object (see the module's docstring) over a loaded BertEncoder."""
    encoder = _Encoder(bert, mlm_head)
    root = tf.train.Checkpoint()
    root.__call__ = _traced(encoder.outputs, _input_spec())
    _reusable(root, bert.variables_by_name().values())
    root.vocab_file = tf.saved_model.Asset(vocab_file)
    root.do_lower_case = tf.Variable(bool(do_lower_case), trainable=False, name="do_lower_case")
    if mlm_head is not None:
        mlm = tf.train.Checkpoint()
        mlm.__call__ = _traced(encoder.mlm_outputs, _input_spec(["masked_lm_positions"]))
        _reusable(mlm, list(bert.variables_by_name().values()) + list(mlm_head.variables_by_name().values()))
        root.mlm = mlm
    return root


def special_token_ids(vocab, vocab_file):
    """The ids TF Hub's get_special_tokens_dict() reports, from the vocabulary."""
    tokenization.check_special_tokens(vocab, vocab_file)
    ids = {"vocab_size": max(vocab.values()) + 1, "start_of_sequence_id": vocab["[CLS]"],
           "end_of_segment_id": vocab["[SEP]"], "padding_id": vocab.get("[PAD]", 0)}
    if "[MASK]" in vocab:
        ids["mask_id"] = vocab["[MASK]"]
    return ids


def preprocessor_module(vocab_file, do_lower_case, seq_length=DEFAULT_SEQ_LENGTH):
    """The preprocessor SavedModel's root object (see the module's docstring)."""
    tokenizer = fast_tokenization.FastBertTokenizer(vocab_file, do_lower_case)
    special = special_token_ids(tokenizer.vocab, vocab_file)
    cls_id, sep_id = special["start_of_sequence_id"], special["end_of_segment_id"]
    strings = tf.TensorSpec([None], tf.string, name="sentences")

    def tokenize(sentences):
        words = tokenizer.tokenize_words(sentences)
        return words.with_flat_values(tf.cast(words.flat_values, tf.int32))

    def pack(segments, seq_length=seq_length):
        if not 1 <= len(segments) <= 2:
            raise ValueError(f"bert_pack_inputs packs one or two segments, got {len(segments)}")
        ids = [segment.merge_dims(1, -1) if segment.ragged_rank > 1 else segment for segment in segments]
        seq_length = tf.cast(seq_length, tf.int32)
        check = tf.debugging.assert_greater_equal(seq_length, 3, message="seq_length must be >= 3")
        with tf.control_dependencies([check]):
            seq_length = tf.identity(seq_length)
        packed = packing.pack_pair(ids[0], ids[1] if len(ids) > 1 else None, seq_length, cls_id, sep_id)
        return dict(zip(INPUT_NAMES, packed))

    root = tf.train.Checkpoint()
    root.tokenizer = tokenizer
    root.tokenize = tf.train.Checkpoint()
    root.tokenize.__call__ = tf.function(tokenize, input_signature=[strings], autograph=False)
    root.tokenize.get_special_tokens_dict = tf.train.Checkpoint()
    root.tokenize.get_special_tokens_dict.__call__ = tf.function(
        lambda: {name: tf.constant(value, tf.int32) for name, value in special.items()}, input_signature=[])
    root.bert_pack_inputs = tf.train.Checkpoint()
    root.bert_pack_inputs.__call__ = tf.function(pack, autograph=False)
    for ragged_rank in (1, 2):
        for num_segments in (1, 2):
            root.bert_pack_inputs.__call__.get_concrete_function(
                [tf.RaggedTensorSpec([None] * (ragged_rank + 1), tf.int32, ragged_rank=ragged_rank,
                                     row_splits_dtype=tf.int64)] * num_segments,
                seq_length=tf.TensorSpec([], tf.int32))
    root.__call__ = tf.function(lambda sentences: pack([tokenize(sentences)], seq_length),
                                input_signature=[strings], autograph=False)
    _reusable(root, [])
    return root


def check_inputs(init_checkpoint, bert_config_file, vocab_file, do_lower_case, output_dir):
    """Every check before anything is written: returns (BertConfig, checkpoint prefix, {name: shape} of the
    checkpoint, do_lower_case: the flag's, else the casing recorded beside the checkpoint, else uncased for a
    vocabulary without upper-case entries; a cased one needs the flag)."""
    if not init_checkpoint:
        raise cli.UserError("--init_checkpoint is required for --mode=original_to_tfhub")
    if not output_dir:
        raise cli.UserError("--output_dir is required")
    filesystem.require_file(vocab_file, "--vocab_file")
    do_lower_case = tokenization.checkpoint_casing(do_lower_case, init_checkpoint, tokenization.load_vocab(
        vocab_file), vocab_file)
    options = model_options.ModelOptions(bert_config_file=bert_config_file, vocab_file=vocab_file,
                                         do_lower_case=do_lower_case, init_checkpoint=init_checkpoint,
                                         max_seq_length=3)
    config, _ = options.check()
    tokenization.require_vocab_of(vocab_file, config.vocab_size, bert_config_file)
    prefix, names = checkpoints.require_encoder(init_checkpoint)
    return config, prefix, names, do_lower_case


def _load_model(config, prefix, names):
    """BertEncoder in float32 with the checkpoint's weights, and the MaskedLMHead where the checkpoint (`names`)
    holds it whole (None otherwise; an incomplete head is said in the log)."""
    bert = serving.float32_encoder(config, prefix)
    with serving.float32_policy():
        if not any(name.startswith(MLM_PREFIX) for name in names):
            return bert, None
        head = encoder.MaskedLMHead(config, name="predictions")
        head.build(None)
        head_vars = {MLM_PREFIX + name: variable for name, variable in head.variables_by_name().items()}
        missing = [name for name in head_vars if name not in names]
        if missing:
            logging.warning("%s has an incomplete masked-LM head (lacks %s): the encoder gets no mlm", prefix,
                            " ".join(missing))
            return bert, None
        checkpoints.init_from_checkpoint(head_vars, prefix, required=MLM_PREFIX)
        return bert, head


def export(init_checkpoint, bert_config_file, vocab_file, do_lower_case, output_dir):
    """Writes output_dir/encoder and output_dir/preprocessor; returns output_dir. Checks first; writes into a
    temporary folder beside output_dir and moves the two SavedModels into place once both are written."""
    config, prefix, names, do_lower_case = check_inputs(init_checkpoint, bert_config_file, vocab_file,
                                                        do_lower_case, output_dir)
    with filesystem.staged_folder(filesystem.normpath(output_dir), "--output_dir",
                                  clashing=(ENCODER_DIR, PREPROCESSOR_DIR)) as staging:
        bert, head = _load_model(config, prefix, names)
        tf.saved_model.save(encoder_module(bert, vocab_file, do_lower_case, head),
                            os.path.join(staging, ENCODER_DIR))
        seq_length = min(DEFAULT_SEQ_LENGTH, config.max_position_embeddings)
        tf.saved_model.save(preprocessor_module(vocab_file, do_lower_case, seq_length),
                            os.path.join(staging, PREPROCESSOR_DIR))
    if head is None:
        logging.warning("%s has no masked-LM head (cls/predictions/...): the encoder has no `mlm`", prefix)
    logging.info("Wrote the TF Hub encoder%s and preprocessor to %s", " (with mlm)" if head else "", output_dir)
    return output_dir
