"""LiteRT (TFLite) models of an export's token-ids signature, for CPUs, phones and servers without TensorFlow.

  python run_ner.py ... --export_tflite=ner.tflite [--tflite_quantize]     (run_squad.py has the same flags;
  python convert_checkpoint.py --mode=original_to_tflite ...                the encoder alone;
  run_classifier.py's --export_tflite takes raw text instead: litert_classifier.py)

    import numpy as np
    from ai_edge_litert.interpreter import Interpreter
    run = Interpreter(model_path="ner.tflite").get_signature_runner()
    run(input_ids=ids, input_mask=mask, segment_ids=segments)   # int32 [batch, sequence] -> the task's outputs

The model is the SavedModel's serving_default (serving.py: NER's probabilities, SQuAD's start_logits and
end_logits, the encoder's sequence_output and pooled_output) in float32, any batch and sequence length up to
max_position_embeddings. quantize: dynamic-range int8 (TFLite's Optimize.DEFAULT): weights stored as int8 per
output channel, the matmuls run in int8 on activations quantized as they come; softmax,
LayerNorm and the rest stay float32.

Input checks: LiteRT has no op that fails a request with a message, and asserts do not convert. serving_default's
checks (the three inputs of one shape, ids inside the vocabulary, segment ids inside type_vocab_size) are kept as
Gathers that go out of bounds when a check fails (serving.gather_checked_ids): the interpreter refuses the request
(a RuntimeError, "gather index out of bounds") instead of answering from wrong rows.
"""
import os
import tempfile

import tensorflow as tf
from absl import logging

import filesystem
import serving

SIGNATURE = "serving_default"


def converter(concrete_function, module, quantize=False, custom_ops=False):
    """A TFLiteConverter of one concrete function of `module` (TFLite builtins; custom_ops: let tensorflow-text's
    kernels through, litert_classifier checks which); quantize: dynamic-range int8."""
    result = tf.lite.TFLiteConverter.from_concrete_functions([concrete_function], module)
    result.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    result.allow_custom_ops = custom_ops
    if quantize:
        result.optimizations = [tf.lite.Optimize.DEFAULT]
    return result


def convert_ids(module, quantize=False):
    """The .tflite bytes of a serving.py module's serving_default (its checks as Gathers), built in float32
    without XLA; quantize: dynamic-range int8."""
    function = module.ids_function().get_concrete_function(*module.ids_spec())
    # Through a SavedModel: from the module itself, the converter would keep Keras's variables as resource
    # variables that nothing initializes in the interpreter; a loaded SavedModel's freeze into the model.
    with tempfile.TemporaryDirectory() as scratch:
        tf.saved_model.save(module, scratch, signatures={SIGNATURE: function})
        loaded = tf.saved_model.load(scratch)
        return converter(loaded.signatures[SIGNATURE], loaded, quantize).convert()


def export(path, module, quantize=False, flag="--export_tflite"):
    """Writes convert_ids(module, quantize) to `path` (any file system; whole or not at all); returns path."""
    model = convert_ids(module, quantize)
    filesystem.write_file_whole(path, model, flag)
    logging.info("Wrote the LiteRT model %s (%s; inputs %s, int32 [batch, sequence]; %.1f MB)", path,
                 "dynamic-range int8" if quantize else "float32", ", ".join(serving.INPUT_NAMES), len(model) / 1e6)
    return path


def interpreter(model_path, num_threads=None, custom_op_registerers=()):
    """An ai-edge-litert interpreter of a model written here (custom_op_registerers: litert_classifier's
    tensorflow-text kernels)."""
    from ai_edge_litert.interpreter import InterpreterWithCustomOps  # pylint: disable=import-outside-toplevel
    return InterpreterWithCustomOps(custom_op_registerers=list(custom_op_registerers),
                                    model_path=os.fspath(model_path), num_threads=num_threads)
