"""What an exported SavedModel holds, per task, and how it is written.

Every SavedModel has `serving_default` on token ids (int32 input_ids, input_mask, segment_ids [batch, seq],
checked in the graph: the three of one shape, ids inside the vocabulary, segment ids inside type_vocab_size)
and, where the task reads raw text, `serving_text`, which tokenizes in the graph with
fast_tokenization.FastBertTokenizer and packs with packing.py exactly as the runner packs its records.
Loading one needs TensorFlow and `import tensorflow_text` (the tokenizer's ops), nothing from this repository.

  ClassifierServing: serving_text(text_a[, text_b]) -> label and probabilities (or score for regression).
  NerServing: serving_default -> per-token label probabilities.
  SquadServing: serving_text(question, context) -> the windows of convert_examples_to_features and their
    logits.
  export_saved_model(export_dir, build_model, checkpoint_path, make_module, labels=None) writes one.
"""
import contextlib
import os

import keras
import tensorflow as tf
from absl import logging

import checkpoints
import cli
import fast_tokenization
import packing
import tokenization

SERVING_DEFAULT = "serving_default"
SERVING_TEXT = "serving_text"
LABELS_FILE = os.path.join("assets.extra", "labels.txt")


@contextlib.contextmanager
def float32_policy():
    """Keras dtype policy float32 inside the block (exports serve in float32 whatever --dtype trained)."""
    policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    try:
        yield
    finally:
        keras.config.set_dtype_policy(policy)


def export_saved_model(export_dir, build_model, checkpoint_path, make_module, labels=None):
    """Builds the model in float32 with the weights of checkpoint_path, wraps it with make_module(model) and
    saves it with the module's signatures; writes assets.extra/labels.txt (one label per line) when given."""
    cli.make_dir(os.path.dirname(os.path.abspath(export_dir)), "--export_dir")
    with float32_policy():
        model = build_model()
        checkpoints.init_from_checkpoint(model.variables_by_name(), checkpoint_path)
        module = make_module(model)
        signatures = module.signatures()
        tf.saved_model.save(module, export_dir, signatures=signatures)
    if labels is not None:
        tf.io.gfile.makedirs(os.path.join(export_dir, "assets.extra"))
        with tf.io.gfile.GFile(os.path.join(export_dir, LABELS_FILE), "w") as f:
            f.write("".join("%s\n" % label for label in labels))
    logging.info("Exported %s to %s (signatures: %s)", checkpoint_path, export_dir, ", ".join(signatures))
    return export_dir


class _Serving(tf.Module):
    """A model with serving_default on token ids whose inputs are checked in the graph."""

    def __init__(self, model, name):
        super().__init__(name=name)
        self.model = model
        self.vocab_size = model.bert.config.vocab_size
        self.type_vocab_size = model.bert.config.type_vocab_size
        ids = tf.TensorSpec([None, None], tf.int32)
        self.serve_ids = tf.function(self._serve_ids, input_signature=[ids] * 3, autograph=False)

    def _check_ids(self, input_ids, input_mask, segment_ids):
        """The three inputs as the model needs them, or an InvalidArgumentError saying what is wrong."""
        shape = tf.shape(input_ids)
        checks = [
            tf.debugging.assert_equal(tf.shape(input_mask), shape,
                                      message="input_mask must have the shape of input_ids"),
            tf.debugging.assert_equal(tf.shape(segment_ids), shape,
                                      message="segment_ids must have the shape of input_ids"),
            tf.debugging.assert_non_negative(input_ids, message="input_ids must be >= 0"),
            tf.debugging.assert_less(input_ids, self.vocab_size,
                                     message=f"input_ids must be < vocab_size {self.vocab_size}"),
            tf.debugging.assert_non_negative(segment_ids, message="segment_ids must be >= 0"),
            tf.debugging.assert_less(segment_ids, self.type_vocab_size,
                                     message=f"segment_ids must be < type_vocab_size {self.type_vocab_size}"),
        ]
        with tf.control_dependencies(checks):
            return tf.identity(input_ids), tf.identity(input_mask), tf.identity(segment_ids)

    def _serve_ids(self, input_ids, input_mask, segment_ids):
        return self._outputs(*self._check_ids(input_ids, input_mask, segment_ids))

    def _outputs(self, input_ids, input_mask, segment_ids):
        raise NotImplementedError

    def signatures(self):
        return {SERVING_DEFAULT: self.serve_ids.get_concrete_function()}


class _TextInput:
    """The in-graph tokenizer of a vocabulary and its [CLS] / [SEP] ids."""

    def __init__(self, vocab_file, do_lower_case):
        vocab = tokenization.load_vocab(vocab_file)
        tokenization.check_special_tokens(vocab, vocab_file)
        self.tokenizer = fast_tokenization.FastBertTokenizer(vocab_file, do_lower_case)
        self.cls_id, self.sep_id = vocab["[CLS]"], vocab["[SEP]"]


class ClassifierServing(_Serving):
    """serving_default(input_ids, input_mask, segment_ids) and serving_text(text_a[, text_b]: string [batch])
    both return {"label": string [batch], "probabilities": [batch, num_labels]} ({"score": [batch]} for
    regression); `labels` holds the label of each column (also in assets.extra/labels.txt).

    serving_text packs at most max_seq_length pieces, then cuts the batch to its longest sequence (the model's
    [CLS] output does not depend on the padding), so short requests run at their own length."""

    def __init__(self, model, vocab_file, do_lower_case, max_seq_length, is_regression, is_pair, labels=None):
        super().__init__(model, name="classifier_export")
        text = _TextInput(vocab_file, do_lower_case)
        self.tokenizer, self.cls_id, self.sep_id = text.tokenizer, text.cls_id, text.sep_id
        self.max_seq_length = max_seq_length
        self.is_regression = is_regression
        self.is_pair = is_pair
        self.max_seq_length_value = tf.constant(max_seq_length, tf.int32)
        if not is_regression and labels is None:
            labels = [str(i) for i in range(model.num_labels)]
        self.labels = None if is_regression else tf.constant([str(label) for label in labels])
        spec = tf.TensorSpec([None], tf.string)
        if is_pair:
            self.serve_text = tf.function(self._serve_pair, input_signature=[spec, spec], autograph=False)
        else:
            self.serve_text = tf.function(self._serve_single, input_signature=[spec], autograph=False)

    def _outputs(self, input_ids, input_mask, segment_ids):
        logits = self.model({"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids},
                            training=False)
        if self.is_regression:
            return {"score": logits[:, 0]}
        return {"label": tf.gather(self.labels, tf.argmax(logits, axis=-1)),
                "probabilities": tf.nn.softmax(logits, axis=-1)}

    def _pack(self, text_a, text_b):
        ids_b = None if text_b is None else self.tokenizer.tokenize(text_b)
        packed = packing.pack_pair(self.tokenizer.tokenize(text_a), ids_b, self.max_seq_length, self.cls_id,
                                   self.sep_id)
        length = packing.real_length(packed[1])
        return [tensor[:, :length] for tensor in packed]

    def _serve_single(self, text_a):
        return self._outputs(*self._pack(text_a, None))

    def _serve_pair(self, text_a, text_b):
        return self._outputs(*self._pack(text_a, text_b))

    def signatures(self):
        out = super().signatures()
        out[SERVING_TEXT] = self.serve_text.get_concrete_function()
        return out


class NerServing(_Serving):
    """serving_default(input_ids, input_mask, segment_ids: int32 [batch, seq]) ->
    {"probabilities": float32 [batch, seq, num_labels]}."""

    def __init__(self, model):
        super().__init__(model, name="ner_export")

    def _outputs(self, input_ids, input_mask, segment_ids):
        logits = self.model({"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids},
                            training=False)
        return {"probabilities": tf.nn.softmax(logits, axis=-1)}


class SquadServing(_Serving):
    """serving_default(input_ids, input_mask, segment_ids: int32 [batch, seq]) returns
    {"start_logits", "end_logits": float32 [batch, seq]}. serving_text(question, context: string [batch])
    windows the pairs exactly as run_squad.py's records and returns, per window, the logits with example_index,
    doc_span_index, input_ids, input_mask, segment_ids, token_to_orig and token_is_max_context;
    run_squad.decode_text_outputs turns them into answers.
    """

    def __init__(self, model, vocab_file=None, do_lower_case=True, max_seq_length=384, doc_stride=128,
                 max_query_length=64):
        super().__init__(model, name="squad_export")
        self.serve_text = None
        if vocab_file:
            text = _TextInput(vocab_file, do_lower_case)
            self.tokenizer, self.cls_id, self.sep_id = text.tokenizer, text.cls_id, text.sep_id
            self.packing = (max_seq_length, doc_stride, max_query_length)
            self.packing_config = tf.constant(list(self.packing), tf.int32)
            self.do_lower_case = tf.constant(do_lower_case)
            spec = tf.TensorSpec([None], tf.string)
            self.serve_text = tf.function(self._serve_text, input_signature=[spec, spec], autograph=False)

    def _logits(self, input_ids, input_mask, segment_ids):
        return self.model({"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids},
                          training=False)

    def _outputs(self, input_ids, input_mask, segment_ids):
        start_logits, end_logits = self._logits(input_ids, input_mask, segment_ids)
        return {"start_logits": start_logits, "end_logits": end_logits}

    def _serve_text(self, question, context):
        packed = squad_text_windows(self.tokenizer, question, context, *self.packing, self.cls_id, self.sep_id)
        packed["start_logits"], packed["end_logits"] = self._logits(
            packed["input_ids"], packed["input_mask"], packed["segment_ids"])
        return packed

    def signatures(self):
        out = super().signatures()
        if self.serve_text is not None:
            out[SERVING_TEXT] = self.serve_text.get_concrete_function()
        return out


def squad_text_windows(tokenizer, questions, contexts, max_seq_length, doc_stride, max_query_length, cls_id,
                       sep_id):
    """packing.squad_windows of raw (question, context) strings: the context split into words as the original
    reader splits it, each word tokenized on its own (as run_squad.py tokenizes them)."""
    words = context_words(contexts)
    pieces = tokenizer.tokenize(words.flat_values)
    doc_pieces = tf.RaggedTensor.from_row_splits(pieces, words.row_splits, validate=False)
    return packing.squad_windows(tokenizer.tokenize(questions), doc_pieces, max_seq_length, doc_stride,
                                 max_query_length, cls_id, sep_id)


def context_words(contexts):
    """The words of SQuAD contexts as the original reader splits them (on space, tab, CR, LF and U+202F):
    ragged string [batch, (words)]."""
    spaced = tf.strings.regex_replace(tf.convert_to_tensor(contexts, tf.string), r"[\t\r\n\x{202F}]", " ")
    words = tf.strings.split(spaced, sep=" ")
    return tf.ragged.boolean_mask(words, tf.strings.length(words) > 0)
