"""What an exported SavedModel holds, per task, and how it is written.

Every SavedModel has `serving_default` on token ids (int32 input_ids, input_mask, segment_ids [batch, seq],
checked in the graph: the three of one shape, ids inside the vocabulary, segment ids inside type_vocab_size)
and, where the task reads raw text, `serving_text`, which tokenizes in the graph with
fast_tokenization.FastBertTokenizer and packs with packing.py exactly as the runner packs its records.
Loading one needs TensorFlow and `import tensorflow_text` (the tokenizer's ops), nothing from this repository.

  EncoderServing: the encoder alone, serving_default -> sequence_output and pooled_output (the ONNX and LiteRT
    exports of convert_checkpoint.py; encoder_module(init_checkpoint, bert_config_file) builds one).
  ClassifierServing: serving_text(text_a[, text_b]) -> label and probabilities (or score for regression).
  NerServing: serving_text(sentence) -> words and one tag per word; serving_default -> per-token probabilities.
  SquadServing: serving_text(question, context) -> the answer, its character span, score and null_score_diff
    (chosen with run_squad.py's n-best rules), with the windows and their logits.
  export_saved_model(export_dir, build_model, checkpoint_path, make_module, labels=None, settings=ExportSettings())
    writes one: the model in float32, or mixed bfloat16 / float16 (variables float32, outputs float32); with
    xla_widths (packing.bucket_widths) the model's calls compiled with XLA at padded shapes: the batch padded to a
    power of two rows and its width to one of xla_widths, so that a few shapes are compiled whatever the requests
    (the padding's outputs are cut off again).
The modules take the model's flags as a model_options.ModelOptions (vocab, casing, sequence length), SQuAD's
windowing and answer rules as a SquadAnswering (run_squad.py's flags). Settings a client may want (labels,
packing) are variables of the module: loaded.labels.numpy().

What serving_text reads of a request (bounded_text, before tokenizing):
  * a text of which only the first N tokens count (the classifier's text_a and text_b, N = max_seq_length; SQuAD's
    question, N = max_query_length) is cut after at most text_cut_chars(N) = N * 201 characters, at the last
    point before that where a cut cannot change the tokens before it. Each of the first N tokens spans at most
    200 characters of its word (a longer word is one [UNK] however long) and one separating character, so their
    text lies within the cut for any text but one where runs of whitespace, control characters or accents, or
    words of over 200 characters, fill it; such a cut text must still give N tokens, or the request is refused
    (InvalidArgumentError): a cut never changes an answer.
  * NER's sentence and SQuAD's context are not cut: every word of a sentence gets a tag, and an answer may lie in
    any window of a context (a shorter context could change it).
  * Each input of a request holds at most MAX_REQUEST_BYTES bytes in all (after cutting), else the request is
    refused (InvalidArgumentError): this bounds the tokenizer's memory (about 25 bytes per byte of text).
  * Reading a request (cutting, tokenizing, windows, answers) takes memory and time linear in its bytes whatever
    the shapes of its rows (one long word beside many words, one long text beside many empty rows): what is
    computed over ragged rows goes through linear_ragged.py, never TensorFlow's ragged row ids, which tile a
    dense [rows x longest row].

What a call costs, and what is refused (every signature of an export_saved_model export):
  * The model runs over at most rows_per_step rows of a call at a time (SQuAD's serving_text: windows;
    --export_rows_per_step, ROWS_PER_STEP by default, recorded as loaded.rows_per_step): a call of more rows
    runs in steps, one after the other, so its peak memory is that of rows_per_step rows plus the request's own
    tokens and answers, whatever the number of rows or the length of a context; the first step runs outside any control flow (a
    call of up to rows_per_step rows is as fast as a whole call); a call of no rows is answered with no rows (of
    any width).
  * Refused, each by one InvalidArgumentError naming the input and the rule: serving_default's inputs of
    unequal shapes, ids outside the vocabulary, segment ids outside type_vocab_size, an input_mask other than 0
    and 1, rows of no position or of more than max_position_embeddings (check_ids); serving_text's two inputs of
    unequal rows (same_rows: never broadcast); NER sentences whose dense answer would exceed MAX_NER_TAGS
    (dense_bounded); the bounds above.
"""
import contextlib
import dataclasses
import os

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text
from absl import logging
from tensorflow.core.framework import attr_value_pb2

import checkpoints
import cli
import encoder
import fast_tokenization
import filesystem
import linear_ragged
import long_text
import packing
import tokenization

SERVING_DEFAULT = "serving_default"
SERVING_TEXT = "serving_text"
LABELS_FILE = os.path.join("assets.extra", "labels.txt")


EXPORT_DTYPES = ("float32", "bfloat16", "float16")
_POLICIES = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
# Row counts a batch is padded to under XLA (one compile per row count and width); a larger batch keeps its own.
XLA_ROWS = [2 ** i for i in range(13)]
# The most rows (SQuAD: windows) an exported model runs at once (--export_rows_per_step): a call of more rows
# runs in steps of this many, so that its memory is bounded by the export whatever the request (see SPEED.md).
ROWS_PER_STEP = 32


@contextlib.contextmanager
def dtype_policy(dtype):
    """Keras dtype policy of an export in `dtype` (EXPORT_DTYPES: float32, or mixed bfloat16 / float16) inside the
    block, whatever --dtype trained."""
    policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(_POLICIES[dtype])
    try:
        yield
    finally:
        keras.config.set_dtype_policy(policy)


def float32_policy():
    """dtype_policy("float32")."""
    return dtype_policy("float32")


@dataclasses.dataclass(frozen=True)
class ExportSettings:
    """How a SavedModel computes: its dtype (an EXPORT_DTYPES policy: --export_dtype), the widths its model's
    calls are compiled with XLA at (packing.bucket_widths; None: no XLA), the most rows its model runs at once
    (--export_rows_per_step; None: whole calls)."""
    dtype: str = "float32"
    xla_widths: tuple = None
    rows_per_step: int = ROWS_PER_STEP


def export_saved_model(export_dir, build_model, checkpoint_path, make_module, labels=None,
                       settings=ExportSettings()):
    """Builds the model in settings.dtype with the weights of checkpoint_path, wraps it with make_module(model)
    (its model calls compiled with XLA at padded shapes when settings.xla_widths are given; run over at most
    settings.rows_per_step rows at a time, _Serving.run_in_steps, unless None) and saves it with the module's
    signatures; writes assets.extra/labels.txt (one label per line) when given."""
    dtype, xla_widths, rows_per_step = settings.dtype, settings.xla_widths, settings.rows_per_step
    if dtype not in EXPORT_DTYPES:
        raise cli.UserError(f"--export_dtype={dtype!r}: expected one of {EXPORT_DTYPES}")
    parent = os.path.dirname(export_dir.rstrip("/"))
    if parent:
        filesystem.make_dir(parent, "--export_dir")
    with dtype_policy(dtype):
        module = build_module(build_model, checkpoint_path, make_module)
        if xla_widths:
            module.compile_with_xla(xla_widths)
        if rows_per_step:
            module.run_in_steps(rows_per_step)
        signatures = module.signatures()
        tf.saved_model.save(module, export_dir, signatures=signatures)
    if labels is not None:
        tf.io.gfile.makedirs(os.path.join(export_dir, "assets.extra"))
        with tf.io.gfile.GFile(os.path.join(export_dir, LABELS_FILE), "w") as f:
            f.write("".join("%s\n" % label for label in labels))
    logging.info("Exported %s to %s (signatures: %s; %s%s; %s)", checkpoint_path, export_dir, ", ".join(signatures),
                 dtype, f", XLA at widths {xla_widths}" if xla_widths else "",
                 f"the model over at most {rows_per_step} rows at a time" if rows_per_step else "whole calls")
    return export_dir


# The seed of the variables an export finds in no checkpoint (an untrained task head).
UNTRAINED_SEED = 12345


def build_module(build_model, checkpoint_path, make_module):
    """make_module(the model of build_model() with the weights of checkpoint_path), in the current dtype policy; a
    warning when the checkpoint lacks some of the model's variables (a task head never trained), which are then
    drawn from UNTRAINED_SEED (Keras's global seed), the same in every export."""
    model = build_model()
    _, new, _ = checkpoints.init_from_checkpoint(model.variables_by_name(), checkpoint_path)
    if new:
        logging.warning("%s holds no %s: the exported model's %s random (the initializer's, drawn from seed %d, so "
                        "every export of this checkpoint, SavedModel or ONNX, holds the same); export from a "
                        "fine-tuned checkpoint", checkpoint_path, ", ".join(new),
                        "values are" if len(new) > 1 else "value is", UNTRAINED_SEED)
        keras.utils.set_random_seed(UNTRAINED_SEED)
        model = build_model()
        checkpoints.init_from_checkpoint(model.variables_by_name(), checkpoint_path)
    return make_module(model)


def _setting(value, name):
    """A value a loaded SavedModel exposes as an attribute (loaded.labels.numpy(), ...): a constant variable."""
    return tf.Variable(value, trainable=False, name=name)


def check_ids(input_ids, input_mask, segment_ids, vocab_size, type_vocab_size, max_positions=None,
              names=packing.INPUT_NAMES):
    """The three model inputs [batch, seq] as a model needs them (one shape, ids inside vocab_size, mask 0 or 1,
    segment ids inside type_vocab_size; with max_positions, rows of 1 to max_positions positions, unless there
    are no rows), or an InvalidArgumentError naming the input (called by `names`) and the rule it breaks."""
    ids_name, mask_name, segments_name = names
    shape = tf.shape(input_ids)
    checks = [
        tf.debugging.assert_equal(tf.shape(input_mask), shape,
                                  message=f"{mask_name} must have the shape of {ids_name}"),
        tf.debugging.assert_equal(tf.shape(segment_ids), shape,
                                  message=f"{segments_name} must have the shape of {ids_name}"),
        tf.debugging.assert_non_negative(input_ids, message=f"{ids_name} must be >= 0"),
        tf.debugging.assert_less(input_ids, vocab_size, message=f"{ids_name} must be < vocab_size {vocab_size}"),
        tf.debugging.assert_equal(input_mask, input_mask * input_mask,  # m == m * m (mod 2^32): m is 0 or 1
                                  message=f"{mask_name} must be 0 (padding) or 1 (a token)"),
        tf.debugging.assert_non_negative(segment_ids, message=f"{segments_name} must be >= 0"),
        tf.debugging.assert_less(segment_ids, type_vocab_size,
                                 message=f"{segments_name} must be < type_vocab_size {type_vocab_size}"),
    ]
    if max_positions:
        width = tf.where(shape[0] > 0, shape[1], 1)  # a batch of no rows has any width
        checks += [
            tf.debugging.assert_positive(width, message=f"{ids_name} must have at least 1 position per row"),
            tf.debugging.assert_less_equal(width, max_positions, message=f"{ids_name} must have at most "
                                           f"max_position_embeddings {max_positions} positions per row"),
        ]
    with tf.control_dependencies(checks):
        return tf.identity(input_ids), tf.identity(input_mask), tf.identity(segment_ids)


# The token-ids signature's inputs, int32 [batch, sequence].
INPUT_NAMES = packing.INPUT_NAMES


def refuse_unless(holds, name):
    """int32 0 when `holds`; else a Gather out of its one-element table's bounds, which ONNX Runtime and LiteRT
    refuse, naming the node `name` (the check) where the runtime names nodes."""
    return tf.gather(tf.zeros([1], tf.int32), tf.cast(tf.logical_not(holds), tf.int32), name=name)


def gather_checked_ids(input_ids, input_mask, segment_ids, vocab_size, type_vocab_size, max_positions=None):
    """check_ids's checks in a form a model without asserts keeps (ONNX, LiteRT): the three inputs, made to depend
    on one Gather per check that goes out of bounds when the check fails (_refuse_unless)."""
    shape = tf.shape(input_ids)
    checks = [
        refuse_unless(tf.reduce_all(tf.equal(tf.shape(input_mask), shape)),
                       "input_mask_must_have_the_shape_of_input_ids"),
        refuse_unless(tf.reduce_all(tf.equal(tf.shape(segment_ids), shape)),
                       "segment_ids_must_have_the_shape_of_input_ids"),
        refuse_unless(tf.reduce_all(input_ids >= 0), "input_ids_must_be_non_negative"),
        refuse_unless(tf.reduce_all(input_ids < vocab_size), "input_ids_must_be_below_vocab_size"),
        refuse_unless(tf.reduce_all((input_mask >= 0) & (input_mask <= 1)), "input_mask_must_be_0_or_1"),
        refuse_unless(tf.reduce_all(segment_ids >= 0), "segment_ids_must_be_non_negative"),
        refuse_unless(tf.reduce_all(segment_ids < type_vocab_size), "segment_ids_must_be_below_type_vocab_size"),
    ]
    if max_positions:
        width = tf.where(shape[0] > 0, shape[1], 1)
        checks += [refuse_unless(width > 0, "input_ids_must_have_at_least_1_position"),
                   refuse_unless(width <= max_positions, "input_ids_must_have_at_most_max_position_embeddings")]
    passed = checks[0]  # 0 when every check holds (else the request has been refused); Add, which ONNX Runtime
    for check in checks[1:]:  # runs on int32 (its Sum, tf.add_n's, does not)
        passed += check
    return input_ids + passed, input_mask + passed, segment_ids + passed


def _cond_unlowered(pred, true_fn, false_fn):
    """tf.cond whose branches stay functions when the graph runs: only the branch taken is touched. Lowered to
    Switch/Merge, TensorFlow's default, the branch not taken (here a whole model in a loop) is walked on every
    call by dead tensors, a cost measured in benchmarks/SPEED.md. The attribute is TensorFlow's own and private:
    tests/test_serving.py checks on both TensorFlow versions that it is still the one TensorFlow sets and that
    an export keeps it."""
    graph = tf.compat.v1.get_default_graph()
    known = {op.name for op in graph.get_operations()}
    outputs = tf.cond(pred, true_fn, false_fn)
    for op in graph.get_operations():
        if op.name not in known and op.type in ("If", "StatelessIf"):
            op._set_attr("_lower_using_switch_merge", attr_value_pb2.AttrValue(b=False))
    return outputs


class _Serving(tf.Module):
    """A model with serving_default on token ids whose inputs are checked in the graph."""

    def __init__(self, model, name):
        super().__init__(name=name)
        self.model = model
        config = getattr(model, "bert", model).config  # a task model's encoder, or the encoder itself
        self.vocab_size = config.vocab_size
        self.type_vocab_size = config.type_vocab_size
        self.max_positions = config.max_position_embeddings
        ids = tf.TensorSpec([None, None], tf.int32)
        self.serve_ids = tf.function(self._serve_ids, input_signature=[ids] * 3, autograph=False)
        self.xla_widths = None
        self._xla_model = None
        self._rows_per_step = None

    def run_in_steps(self, rows_per_step):
        """From now on (before signatures()), the signatures run the model over at most rows_per_step rows of a
        call at a time (a call of more rows in steps, one after the other: its peak memory is that of
        rows_per_step rows, whatever the request); recorded in the export (loaded.rows_per_step)."""
        if int(rows_per_step) < 1:
            raise cli.UserError(f"--export_rows_per_step={rows_per_step}: expected a positive number of rows")
        self._rows_per_step = int(rows_per_step)
        self.rows_per_step = _setting(self._rows_per_step, "rows_per_step")

    def compile_with_xla(self, widths):
        """From now on (before signatures()), the model's calls run compiled with XLA, padded to XLA_ROWS rows
        and to one of `widths` (packing.bucket_widths)."""
        self.xla_widths = list(widths)
        ids = tf.TensorSpec([None, None], tf.int32)
        self._xla_model = tf.function(self._model_outputs, input_signature=[ids] * 3, jit_compile=True,
                                      autograph=False)

    def _model_outputs(self, input_ids, input_mask, segment_ids):
        return self.model({"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids},
                          training=False)

    def _run_model(self, input_ids, input_mask, segment_ids):
        """The model's outputs for the three inputs [batch, seq]: after run_in_steps, over at most rows_per_step
        rows at a time; under XLA (compile_with_xla) computed at padded shapes."""
        inputs = (input_ids, input_mask, segment_ids)
        if self._rows_per_step is None:
            return self._model_call(*inputs)
        rows, width = tf.shape(input_ids)[0], tf.shape(input_ids)[1]
        step = self._rows_per_step
        # The first step's rows outside any control flow (a call of up to rows_per_step rows runs as fast as a
        # whole call), at one position at least: a call of no rows may have none, which the model cannot take.
        some_width = tf.where(rows > 0, width, 1)
        inputs = [tf.pad(tensor, [[0, 0], [0, 1]])[:, :some_width] for tensor in inputs]
        first = self._model_call(*[tensor[:step] for tensor in inputs])
        if self.model.per_token:  # [0, 1, ...] back to [0, width, ...] for no rows (no change otherwise)
            first = tf.nest.map_structure(
                lambda t: tf.reshape(t, tf.concat([tf.shape(t)[:1], [width], tf.shape(t)[2:]], 0)), first)

        def no_more():
            return tf.nest.map_structure(lambda t: tf.zeros(tf.concat([[0], tf.shape(t)[1:]], 0), t.dtype), first)

        more = _cond_unlowered(rows > step,
                               lambda: self._in_steps([tensor[step:] for tensor in inputs], rows - step, step),
                               no_more)
        return tf.nest.map_structure(lambda a, b: tf.concat([a, b], 0), first, more)

    def _in_steps(self, inputs, rows, step):
        """The model's outputs over the rows of `inputs` in steps of `step` rows, one step after the other."""
        structure = self._output_structure()
        flat = tf.nest.flatten(structure)
        steps = (rows + step - 1) // step

        def one_step(i, parts):
            outputs = tf.nest.flatten(self._model_call(*[tensor[i * step:(i + 1) * step] for tensor in inputs]))
            return i + 1, [part.write(i, output) for part, output in zip(parts, outputs)]

        parts = [tf.TensorArray(spec.dtype, size=steps, infer_shape=False, element_shape=spec.shape)
                 for spec in flat]
        # parallel_iterations=1: one step's activations at a time.
        _, parts = tf.while_loop(lambda i, _: i < steps, one_step, (tf.constant(0), parts), parallel_iterations=1)
        return tf.nest.pack_sequence_as(structure, [part.concat() for part in parts])

    def _output_structure(self):
        """The TensorSpecs of the model's outputs (one trace of the model, kept)."""
        if getattr(self, "_outputs_spec", None) is None:
            ids = tf.TensorSpec([None, None], tf.int32)
            traced = tf.function(self._model_outputs, autograph=False).get_concrete_function(ids, ids, ids)
            self._outputs_spec = tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype),
                                                       traced.structured_outputs)
        return self._outputs_spec

    def _model_call(self, input_ids, input_mask, segment_ids):
        """The model's outputs for the three inputs [batch, seq] in one call; under XLA (compile_with_xla)
        computed at the padded shape and cut back (a padded row or position is masked out: the others do not
        change)."""
        if self._xla_model is None:
            return self._model_outputs(input_ids, input_mask, segment_ids)
        rows, width = tf.shape(input_ids)[0], tf.shape(input_ids)[1]
        padding = [[0, packing.bucket(rows, XLA_ROWS) - rows], [0, packing.bucket(width, self.xla_widths) - width]]
        outputs = self._xla_model(*[tf.pad(tensor, padding) for tensor in (input_ids, input_mask, segment_ids)])
        per_token = self.model.per_token
        return tf.nest.map_structure(lambda t: t[:rows, :width] if per_token else t[:rows], outputs)

    def _check_ids(self, input_ids, input_mask, segment_ids):
        """The three inputs as the model needs them, or an InvalidArgumentError saying what is wrong."""
        return check_ids(input_ids, input_mask, segment_ids, self.vocab_size, self.type_vocab_size,
                         self.max_positions)

    def _serve_ids(self, input_ids, input_mask, segment_ids):
        return self._outputs(*self._check_ids(input_ids, input_mask, segment_ids))

    def _outputs(self, input_ids, input_mask, segment_ids):
        raise NotImplementedError

    def ids_spec(self):
        """serving_default's inputs (INPUT_NAMES), int32 [batch, sequence]."""
        return [tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUT_NAMES]

    def ids_function(self):
        """serving_default's computation with its checks as Gathers (gather_checked_ids), for a converter to a
        runtime without asserts (onnx_export.py, litert_export.py)."""
        def serve(input_ids, input_mask, segment_ids):
            return self._outputs(*gather_checked_ids(input_ids, input_mask, segment_ids, self.vocab_size,
                                                     self.type_vocab_size, self.max_positions))
        return tf.function(serve, autograph=False)

    def _text_input(self, model_options):
        """The in-graph tokenizer of the model's vocabulary and its [CLS] / [SEP] ids, for serving_text."""
        vocab = tokenization.load_vocab(model_options.vocab_file)
        tokenization.check_special_tokens(vocab, model_options.vocab_file)
        self.tokenizer = fast_tokenization.FastBertTokenizer(model_options.vocab_file, model_options.do_lower_case)
        self.special_ids = packing.SpecialIds(vocab["[CLS]"], vocab["[SEP]"], self.tokenizer.unk_id)

    def signatures(self):
        out = {SERVING_DEFAULT: self.serve_ids.get_concrete_function()}
        if getattr(self, "serve_text", None) is not None:
            out[SERVING_TEXT] = self.serve_text.get_concrete_function()
        return out


class EncoderServing(_Serving):
    """The encoder alone (a encoder.BertEncoder): serving_default(input_ids, input_mask, segment_ids: int32
    [batch, seq]) -> {"sequence_output": float32 [batch, seq, hidden], "pooled_output": float32 [batch, hidden]}.
    For the ONNX and LiteRT exports of a pre-trained checkpoint (convert_checkpoint.py)."""

    def __init__(self, bert):
        super().__init__(bert, name="encoder_export")

    def _outputs(self, input_ids, input_mask, segment_ids):
        outputs = self.model(input_ids, input_mask, segment_ids, training=False)
        return {"sequence_output": tf.cast(outputs["sequence_output"], tf.float32),
                "pooled_output": tf.cast(outputs["pooled_output"], tf.float32)}


def float32_encoder(config, prefix):
    """encoder.BertEncoder in float32 with the encoder weights (bert/...) of the checkpoint `prefix`."""
    with float32_policy():
        bert = encoder.BertEncoder(config)
        checkpoints.init_from_checkpoint(bert.variables_by_name(), prefix, required=checkpoints.ENCODER_PREFIX)
    return bert


def encoder_module(init_checkpoint, bert_config_file):
    """EncoderServing of a checkpoint's encoder (bert/...) in float32; an error naming the flag when the checkpoint
    holds no encoder."""
    config = encoder.BertConfig.load(bert_config_file)
    prefix, _ = checkpoints.require_encoder(init_checkpoint)
    bert = float32_encoder(config, prefix)
    with float32_policy():
        return EncoderServing(bert)


class ClassifierServing(_Serving):
    """serving_default(input_ids, input_mask, segment_ids) and serving_text(text_a[, text_b]: string [batch])
    both return {"label": string [batch], "probabilities": [batch, num_labels]} ({"score": [batch]} for
    regression); `labels` holds the label of each column (also in assets.extra/labels.txt).

    serving_text reads a long text_a as the run trained (reading, a long_text.LongText, recorded as
    loaded.long_text, head_tokens, doc_stride, window_pooling, max_windows_per_document): truncate packs at most
    max_seq_length pieces; head_tail reads text_a whole and packs its head and tail; windows reads text_a whole,
    runs the model over its windows (in steps of rows_per_step windows) and pools their logits per text, and also
    returns "windows" (int32 [batch], the windows read of each text). serving_default takes one packed window
    per row. Batches are cut to their longest sequence (the model's [CLS] output does not depend on the padding),
    so short requests run at their own length."""

    def __init__(self, model, model_options, is_regression, is_pair, labels=None, reading=None):
        super().__init__(model, name="classifier_export")
        self._text_input(model_options)
        self.max_seq_length = model_options.max_seq_length
        self.is_regression = is_regression
        self.is_pair = is_pair
        self.max_seq_length_value = _setting(self.max_seq_length, "max_seq_length")
        self.reading = reading or long_text.LongText()
        self.head = self.reading.head_tokens_for(self.max_seq_length)
        self.long_text = _setting(self.reading.long_text, "long_text")
        self.head_tokens = _setting(-1 if self.head is None else self.head, "head_tokens")
        self.doc_stride = _setting(self.reading.doc_stride, "doc_stride")
        self.window_pooling = _setting(self.reading.window_pooling, "window_pooling")
        self.max_windows_per_document = _setting(self.reading.max_windows_per_document, "max_windows_per_document")
        if not is_regression and labels is None:
            labels = [str(i) for i in range(model.num_labels)]
        self.labels = None if is_regression else _setting([str(label) for label in labels], "labels")
        spec = tf.TensorSpec([None], tf.string)
        if is_pair:
            self.serve_text = tf.function(self._serve_pair, input_signature=[spec, spec], autograph=False)
        else:
            self.serve_text = tf.function(self._serve_single, input_signature=[spec], autograph=False)

    def _outputs(self, input_ids, input_mask, segment_ids):
        return self._answer(self._run_model(input_ids, input_mask, segment_ids))

    def _answer(self, logits):
        if self.is_regression:
            return {"score": logits[:, 0]}
        return {"label": tf.gather(self.labels, tf.argmax(logits, axis=-1)),
                "probabilities": tf.nn.softmax(logits, axis=-1)}

    def _text(self, text_a, text_b):
        """(text_a's ids, text_b's ids or None): text_a cut after its first max_seq_length tokens unless the
        reading needs all of it."""
        cut = None if self.reading.long_text != "truncate" else self.max_seq_length
        ids_a = self.tokenizer.tokenize(bounded_text(text_a, "text_a", self.tokenizer if cut else None, cut))
        ids_b = None
        if text_b is not None:
            ids_b = self.tokenizer.tokenize(bounded_text(text_b, "text_b", self.tokenizer, self.max_seq_length))
        return ids_a, ids_b

    def _serve(self, text_a, text_b):
        ids_a, ids_b = self._text(text_a, text_b)
        if not self.reading.windows:
            packed = packing.pack_pair(ids_a, ids_b, self.max_seq_length, self.special_ids.cls, self.special_ids.sep,
                                       self.head)
            length = packing.real_length(packed[1])
            return self._outputs(*[tensor[:, :length] for tensor in packed])
        windows = long_text.windows(ids_a, ids_b, self.max_seq_length, self.reading, self.special_ids)
        length = packing.real_length(windows["input_mask"])
        logits = self._run_model(*[windows[name][:, :length] for name in packing.INPUT_NAMES])
        answer = self._answer(long_text.pool(logits, windows["document"], tf.shape(text_a)[0],
                                             self.reading.window_pooling))
        answer["windows"] = tf.minimum(windows["num_windows"], self.reading.max_windows_per_document)
        return answer

    def _serve_single(self, text_a):
        return self._serve(text_a, None)

    def _serve_pair(self, text_a, text_b):
        text_a, text_b = same_rows(text_a, text_b, "text_a", "text_b")
        return self._serve(text_a, text_b)


class NerServing(_Serving):
    """serving_default(input_ids, input_mask, segment_ids: int32 [batch, seq]) ->
    {"probabilities": float32 [batch, seq, num_labels]}; with a vocabulary, serving_text(sentence: string
    [batch]) splits each sentence into words at whitespace, windows them as run_ner.py does (packing.ner_windows,
    without document context) and returns {"words", "tags": string [batch, most words] ("" past a sentence's
    end), "num_words": int32 [batch]}: one tag per word, from the window where its first piece has the most
    context."""

    def __init__(self, model, model_options=None, doc_stride=64, labels=None):
        super().__init__(model, name="ner_export")
        self.serve_text = None
        if model_options is not None and model_options.vocab_file:
            self._text_input(model_options)
            self.windowing = packing.Windowing(model_options.max_seq_length, doc_stride)
            self.labels = _setting([str(label) for label in labels], "labels")
            spec = tf.TensorSpec([None], tf.string)
            self.serve_text = tf.function(self._serve_text, input_signature=[spec], autograph=False)

    def _logits(self, input_ids, input_mask, segment_ids):
        return self._run_model(input_ids, input_mask, segment_ids)

    def _outputs(self, input_ids, input_mask, segment_ids):
        return {"probabilities": tf.nn.softmax(self._logits(input_ids, input_mask, segment_ids), axis=-1)}

    def _serve_text(self, sentence):
        words = dense_bounded(tf.strings.split(bounded_text(sentence, "sentence")))
        pieces = self.tokenizer.tokenize(words.flat_values)
        word_pieces = tf.RaggedTensor.from_row_splits(pieces, words.row_splits, validate=False)
        packed = packing.ner_windows(word_pieces, self.windowing, self.special_ids)
        predicted = tf.argmax(self._logits(packed["input_ids"], packed["input_mask"], packed["segment_ids"]),
                              axis=-1, output_type=tf.int32)
        scored = tf.where(packed["scored_word"] >= 0)
        at = tf.stack([tf.cast(tf.gather(packed["sentence_index"], scored[:, 0]), tf.int64),
                       tf.cast(tf.gather_nd(packed["scored_word"], scored), tf.int64)], axis=1)
        dense_words = words.to_tensor("")
        tag_ids = tf.scatter_nd(at, tf.gather_nd(predicted, scored) + 1, tf.shape(dense_words, out_type=tf.int64))
        tags = tf.gather(tf.concat([[""], self.labels], 0), tag_ids)
        return {"words": dense_words, "tags": tags, "num_words": tf.cast(words.row_lengths(), tf.int32)}

@dataclasses.dataclass
class SquadAnswering:
    """How run_squad.py windows a context and chooses an answer: its flags (the original's), for its predictions
    and for the SavedModel's serving_text."""
    doc_stride: int = cli.option(128, "When splitting up a long document into chunks, how much stride to take "
                                 "between chunks.")
    max_query_length: int = cli.option(64, "The maximum number of tokens for the question. Questions longer than "
                                       "this will be truncated to this length.")
    n_best_size: int = cli.option(20, "The total number of n-best predictions to generate in the "
                                  "nbest_predictions.json output file.")
    max_answer_length: int = cli.option(30, "The maximum length of an answer that can be generated. This is "
                                        "needed because the start and end predictions are not conditioned on one "
                                        "another.")
    version_2_with_negative: bool = cli.option(False, "If true, the SQuAD examples contain some that do not have "
                                               "an answer.")
    null_score_diff_threshold: float = cli.option(0.0, "If null_score - best_non_null is greater than the "
                                                  "threshold predict null.")


class SquadServing(_Serving):
    """serving_default(input_ids, input_mask, segment_ids: int32 [batch, seq]) returns
    {"start_logits", "end_logits": float32 [batch, seq]}. With a vocabulary, serving_text(question, context:
    string [batch]) returns each question's answer:

      answer: string [batch], the original's answer text (the predicted pieces' characters of the context's
        words, the words joined by single spaces), "" for no answer;
      start, end: int32 [batch], its character span [start, end) in the context (-1 for no answer);
      score: float32 [batch], start + end logit of the chosen span (-inf when no span is valid);
      null_score_diff: float32 [batch], the least null score of the question's windows minus `score` (SQuAD
        2.0 predicts "" when it exceeds null_score_diff_threshold)
    chosen with run_squad.py's rules: the n_best_size best starts and ends of every window, spans inside the
    context, starting where their window has the most context, at most max_answer_length pieces; the best sum,
    the first of equal ones in window, start and end order. The answer text follows get_final_text where the
    span is printable ASCII without [UNK]; where it starts or ends in another word, or holds [UNK], it is the
    whole words (get_final_text may cut those words further, or pick an earlier equal text within them).
    The windows (example_index, doc_span_index, input_ids, input_mask, segment_ids, token_to_orig,
    token_is_max_context) and their start_logits / end_logits come along, for run_squad.decode_text_outputs'
    full n-best decoding.
    """

    def __init__(self, model, model_options=None, answering=None):
        super().__init__(model, name="squad_export")
        self.serve_text = None
        if model_options is not None and model_options.vocab_file:
            answering = answering or SquadAnswering()
            self._text_input(model_options)
            self.windowing = packing.Windowing(model_options.max_seq_length, answering.doc_stride,
                                               answering.max_query_length)
            self.packing_config = _setting(list(dataclasses.astuple(self.windowing)), "packing_config")
            self.do_lower_case = _setting(model_options.do_lower_case, "do_lower_case")
            self.decoding = (answering.n_best_size, answering.max_answer_length, answering.version_2_with_negative,
                             answering.null_score_diff_threshold)
            spec = tf.TensorSpec([None], tf.string)
            self.serve_text = tf.function(self._serve_text, input_signature=[spec, spec], autograph=False)

    def _logits(self, input_ids, input_mask, segment_ids):
        return self._run_model(input_ids, input_mask, segment_ids)

    def _outputs(self, input_ids, input_mask, segment_ids):
        start_logits, end_logits = self._logits(input_ids, input_mask, segment_ids)
        return {"start_logits": start_logits, "end_logits": end_logits}

    def _serve_text(self, question, context):
        question, context = same_rows(question, context, "question", "context")
        question = bounded_text(question, "question", self.tokenizer, self.windowing.max_query_length)
        context = bounded_text(context, "context")
        packed, words, pieces = squad_text_windows(self.tokenizer, question, context, self.windowing,
                                                   self.special_ids)
        packed["start_logits"], packed["end_logits"] = self._logits(
            packed["input_ids"], packed["input_mask"], packed["segment_ids"])
        n_best_size, max_answer_length, version_2, threshold = self.decoding
        best = best_spans(packed, tf.shape(question)[0], n_best_size, max_answer_length)
        answers = answer_text(context, words, pieces, packed, best, self.special_ids.unk)
        if version_2:
            no_answer = best["null_score_diff"] > threshold
            answers["answer"] = tf.where(no_answer, "", answers["answer"])
            answers["start"] = tf.where(no_answer, -1, answers["start"])
            answers["end"] = tf.where(no_answer, -1, answers["end"])
        answers["score"] = best["score"]
        answers["null_score_diff"] = best["null_score_diff"]
        packed.pop("token_to_piece")
        packed.update(answers)
        return packed

def _gather_or_zero(values, index, valid):
    """values[index] along the first axis where valid, zeros (or "") elsewhere; values may be empty."""
    filler = tf.fill(tf.concat([[1], tf.shape(values)[1:]], 0), tf.constant("" if values.dtype == tf.string else 0,
                                                                             values.dtype))
    padded = tf.concat([values, filler], 0)
    return tf.gather(padded, tf.where(valid, tf.cast(index, tf.int64), tf.shape(values, out_type=tf.int64)[0]))


def best_spans(packed, num_questions, n_best_size, max_answer_length):
    """Each question's best valid span over its windows, by run_squad.py's n-best rules.

    Returns {"window", "start_slot", "end_slot": int64 [questions] (-1 for none), "score", "null_score_diff":
    float32 [questions]}.
    """
    start_logits, end_logits = packed["start_logits"], packed["end_logits"]
    k = tf.minimum(n_best_size, tf.shape(start_logits)[1])
    # Top starts and ends of every window; equal logits keep the lower slot first, as the original's sort.
    starts = tf.math.top_k(start_logits, k).indices
    ends = tf.math.top_k(end_logits, k).indices
    in_context = packed["token_to_orig"] >= 0

    def at(values, slots):
        return tf.gather(values, slots, batch_dims=1)

    pair_starts = tf.reshape(tf.tile(starts[:, :, tf.newaxis], [1, 1, k]), [-1, k * k])  # start rank major,
    pair_ends = tf.tile(ends, [1, k])  # end rank minor: [windows, k * k]
    valid = (at(in_context, pair_starts) & at(in_context, pair_ends) & at(packed["token_is_max_context"], pair_starts)
             & (pair_ends >= pair_starts) & (pair_ends - pair_starts + 1 <= max_answer_length))
    score = tf.where(valid, at(start_logits, pair_starts) + at(end_logits, pair_ends), -float("inf"))
    window_best = tf.reduce_max(score, axis=1)
    window_pair = tf.argmax(score, axis=1, output_type=tf.int64)
    question = tf.cast(packed["example_index"], tf.int64)
    best = tf.math.unsorted_segment_max(window_best, question, num_questions)
    windows = tf.range(tf.size(question, out_type=tf.int64))
    first = tf.where(tf.equal(window_best, tf.gather(best, question)) & tf.math.is_finite(window_best),
                     windows, tf.int64.max)
    window = tf.math.unsorted_segment_min(first, question, num_questions)
    found = window < tf.int64.max
    pair = _gather_or_zero(window_pair, window, found)
    start_slot = tf.gather(_gather_or_zero(pair_starts, window, found), pair, batch_dims=1)
    end_slot = tf.gather(_gather_or_zero(pair_ends, window, found), pair, batch_dims=1)
    null = tf.math.unsorted_segment_min(start_logits[:, 0] + end_logits[:, 0], question, num_questions)
    score = tf.where(found, best, -float("inf"))
    return {"window": tf.where(found, window, -1), "start_slot": tf.where(found, tf.cast(start_slot, tf.int64), -1),
            "end_slot": tf.where(found, tf.cast(end_slot, tf.int64), -1), "score": score,
            "null_score_diff": null - score}


def answer_text(context, words, pieces, packed, best, unk_id):
    """{"answer", "start", "end"} of the chosen spans (see SquadServing); words and pieces as squad_text_windows
    gives them."""
    words, word_begin, word_end = words
    doc_pieces, piece_begin, piece_end = pieces
    found = best["window"] >= 0
    window, first_slot, last_slot = best["window"], best["start_slot"], best["end_slot"]
    question = tf.range(tf.shape(found, out_type=tf.int64)[0])

    def window_values(name, slot):
        return tf.gather(_gather_or_zero(packed[name], window, found), tf.maximum(slot, 0), batch_dims=1)

    # Pieces and words of the whole batch, flat: a question's own start at its row offsets.
    word_base = tf.gather(words.row_splits, question)
    piece_base = tf.gather(doc_pieces.values.row_splits, word_base)
    first_piece = piece_base + tf.cast(window_values("token_to_piece", first_slot), tf.int64)
    last_piece = piece_base + tf.cast(window_values("token_to_piece", last_slot), tf.int64)
    first_word = word_base + tf.cast(window_values("token_to_orig", first_slot), tf.int64)
    last_word = word_base + tf.cast(window_values("token_to_orig", last_slot), tf.int64)
    # A span holding [UNK] is whole words, as get_final_text gives when it cannot find the predicted text.
    input_ids = _gather_or_zero(packed["input_ids"], window, found)
    span = tf.range(tf.shape(input_ids, out_type=tf.int64)[1])[tf.newaxis, :]
    holds_unk = tf.reduce_any((input_ids == unk_id) & (span >= first_slot[:, tf.newaxis])
                              & (span <= last_slot[:, tf.newaxis]), axis=1)
    word_length = word_end.flat_values - word_begin.flat_values
    cut_front = tf.where(holds_unk, tf.zeros_like(first_piece),
                         _gather_or_zero(piece_begin.flat_values, first_piece, found))
    cut_back = tf.where(holds_unk, tf.zeros_like(first_piece),
                        _gather_or_zero(word_length, last_word, found)
                        - _gather_or_zero(piece_end.flat_values, last_piece, found))
    # The original joins the span's words with single spaces, then cuts it to the predicted characters.
    word_rows = tf.ragged.range(tf.where(found, first_word, 0), tf.where(found, last_word + 1, 0))
    joined = tf.strings.unsorted_segment_join(tf.gather(words.flat_values, word_rows.flat_values),
                                              linear_ragged.row_ids(word_rows.row_splits),
                                              tf.shape(found, out_type=tf.int64)[0], separator=" ")
    length = tf.cast(tf.strings.length(joined), tf.int64) - cut_front - cut_back
    answer = tf.strings.substr(joined, cut_front, length)
    start_byte = _gather_or_zero(word_begin.flat_values, first_word, found) + cut_front
    end_byte = _gather_or_zero(word_end.flat_values, last_word, found) - cut_back

    def chars(byte):
        return tf.strings.length(tf.strings.substr(context, tf.zeros_like(byte), byte), unit="UTF8_CHAR")

    return {"answer": tf.where(found, answer, ""), "start": tf.where(found, chars(start_byte), -1),
            "end": tf.where(found, chars(end_byte), -1)}


def squad_text_windows(tokenizer, questions, contexts, windowing, special_ids):
    """packing.squad_windows of raw (question, context) strings (a packing.Windowing and packing.SpecialIds):
    the context split into words as the original reader splits
    it, each word tokenized on its own (as run_squad.py tokenizes them). Returns (the windows, (words, their byte
    begin, end), (pieces ragged [batch, (words), (pieces)], their byte begin, end within their word))."""
    words, word_begin, word_end = context_words_with_offsets(contexts)
    pieces, piece_begin, piece_end = tokenizer.tokenize_with_offsets(words.flat_values)
    doc_pieces = tf.RaggedTensor.from_row_splits(pieces, words.row_splits, validate=False)
    windows = packing.squad_windows(tokenizer.tokenize(questions), doc_pieces, windowing, special_ids)
    return windows, (words, word_begin, word_end), (doc_pieces, piece_begin, piece_end)


def context_words_with_offsets(contexts):
    """The words of SQuAD contexts as the original reader splits them (on space, tab, CR, LF and U+202F), with
    their byte spans: (words string, begin int64, end int64), each ragged [batch, (words)]."""
    return tf_text.regex_split_with_offsets(tf.convert_to_tensor(contexts, tf.string), r"[ \t\r\n\x{202F}]+")


# ----------------------------------------------------------------------------------------------------------
# What serving_text reads of a request (see the module docstring).
# ----------------------------------------------------------------------------------------------------------
MAX_REQUEST_BYTES = 1 << 22  # the most bytes one input of a serving_text request holds in all, after cutting


MAX_NER_TAGS = 1 << 21  # the most cells of NER's answer [rows, most words]: about 170 MB of words and tags


def dense_bounded(words):
    """NER's words (ragged [rows, (words)]), or an InvalidArgumentError when its dense answer (a tag for every
    word of the longest sentence in every row) would hold more than MAX_NER_TAGS cells. A sentence alone always
    fits (MAX_REQUEST_BYTES holds fewer words)."""
    most = tf.reduce_max(tf.concat([words.row_lengths(), [0]], 0))
    check = tf.debugging.assert_less_equal(
        words.nrows() * most, tf.constant(MAX_NER_TAGS, tf.int64),
        message=f"serving_text: sentence: the answer has a row per sentence and a column per word of the longest "
                f"one, and these rows x words exceed {MAX_NER_TAGS}: send long sentences in requests of their own")
    with tf.control_dependencies([check]):
        return tf.identity(words)


def same_rows(first, second, first_name, second_name):
    """The two inputs of a request (string [batch]), or an InvalidArgumentError unless they have as many rows:
    each row of one goes with the same row of the other (never broadcast)."""
    check = tf.debugging.assert_equal(
        tf.shape(second)[0], tf.shape(first)[0],
        message=f"serving_text: {second_name} must have as many rows as {first_name} (one {second_name} per "
                f"{first_name})")
    with tf.control_dependencies([check]):
        return tf.identity(first), tf.identity(second)


def text_cut_chars(max_tokens):
    """Characters of a text that hold its first max_tokens tokens: each spans at most MAX_INPUT_CHARS_PER_WORD
    characters of its word (a longer word is one [UNK]) and one character before it (a space)."""
    return max_tokens * (tokenization.MAX_INPUT_CHARS_PER_WORD + 1)


_SAFE_CUTS = []


def safe_cut_table():
    """bool [65536]: True for the characters before which a text can be cut without changing any token before
    the cut (with or without lower casing): whitespace (it ends BasicTokenizer's whitespace-split token, which
    str.lower() sees whole), CJK ideographs (spaced out before that split), and punctuation that is neither
    cased nor case-ignorable (a word of its own where str.lower()'s final-sigma context stops). Not control
    characters (dropped: the word goes on after them), letters, marks, or code points above U+FFFF."""
    if not _SAFE_CUTS:
        table = np.zeros(0x10000, bool)
        for cp in range(0x10000):
            char = chr(cp)
            table[cp] = (tokenization._is_whitespace(char) or tokenization._is_chinese_codepoint(cp)
                         or (tokenization._is_punctuation(char) and not fast_tokenization._case_class(char)))
        _SAFE_CUTS.append(table)
    return _SAFE_CUTS[0]


def bounded_text(strings, name, tokenizer=None, max_tokens=None):
    """What serving_text tokenizes of the input `name` (string [batch]); see the module docstring.

    With max_tokens (and the tokenizer): each text over text_cut_chars(max_tokens) characters is cut at its last
    safe point (safe_cut_table) within them, and must keep max_tokens tokens. Without: the texts are whole. Either
    way the input holds at most MAX_REQUEST_BYTES bytes after cutting. Over a bound, an InvalidArgumentError
    names the input and the bound.
    """
    strings = tf.convert_to_tensor(strings, tf.string)
    if max_tokens:
        limit = text_cut_chars(max_tokens)
        logging.info("serving_text: %s is cut after at most %d characters (its first %d tokens)", name, limit,
                     max_tokens)
        head = tf.strings.substr(strings, 0, limit + 1, unit="UTF8_CHAR")  # the character after the cut too
        long = tf.strings.length(head, unit="UTF8_CHAR") > limit
        strings = tf.cond(tf.reduce_any(long), lambda: _cut(strings, head, long, name, tokenizer, max_tokens),
                          lambda: strings)
    else:
        logging.info("serving_text: %s is read whole", name)
    size = tf.reduce_sum(tf.cast(tf.strings.length(strings), tf.int64))
    check = tf.debugging.assert_less_equal(
        size, tf.constant(MAX_REQUEST_BYTES, tf.int64),
        message=f"serving_text: {name} holds more than {MAX_REQUEST_BYTES} bytes of text in all (the request's "
                f"limit{', after cutting each text' if max_tokens else ''}): send fewer or shorter texts")
    with tf.control_dependencies([check]):
        return tf.identity(strings)


def _cut(strings, head, long, name, tokenizer, max_tokens):
    """The long texts cut at the last safe point of their head (limit + 1 characters), checked to give
    max_tokens tokens."""
    limit = text_cut_chars(max_tokens)
    chars, offsets = tf.strings.unicode_decode_with_offsets(head, "UTF-8", errors="replace")
    code_points, index = chars.flat_values, tf.ragged.range(chars.row_lengths(), dtype=tf.int64).flat_values
    safe = tf.gather(tf.constant(safe_cut_table()), tf.minimum(code_points, 0xFFFF)) & (code_points <= 0xFFFF)
    # A cut before character i (0 < i <= limit) keeps its first i characters: offsets[i] bytes.
    at = tf.where(safe & (index > 0) & (index <= limit), tf.cast(offsets.flat_values, tf.int64), 0)
    keep = tf.maximum(tf.math.unsorted_segment_max(at, linear_ragged.row_ids(chars.row_splits),
                                                   tf.shape(head, out_type=tf.int64)[0]), 0)
    keep = tf.cast(keep, tf.int32)
    cut = tf.where(long, tf.strings.substr(strings, tf.zeros_like(keep), keep), strings)
    tokens = tokenizer.tokenize(tf.boolean_mask(cut, long)).row_lengths()
    check = tf.debugging.assert_greater_equal(
        tokens, tf.cast(max_tokens, tokens.dtype),
        message=f"serving_text: a text of {name} over {limit} characters must hold its first {max_tokens} tokens "
                "within them (runs of whitespace, control characters or accents, or words of over 200 characters "
                "fill them): send it shorter")
    with tf.control_dependencies([check]):
        return tf.identity(cut)
