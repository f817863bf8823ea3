"""The ONNX model of a task's token-ids signature (the SavedModel's serving_default), for ONNX Runtime.

  python run_classifier.py ... --export_onnx=model.onnx   (every fine-tuning runner has the flag)

    import numpy as np, onnxruntime
    session = onnxruntime.InferenceSession("model.onnx")
    session.run(None, {"input_ids": ids, "input_mask": mask, "segment_ids": segments})  # int32 [batch, seq]

export(path, module, quantize=False) converts a serving.py module's serving_default (int32 input_ids, input_mask,
segment_ids [batch, sequence] -> the task's outputs: the classifier's label and probabilities or score, NER's
probabilities, SQuAD's start_logits and end_logits; the encoder's sequence_output and pooled_output for
convert_checkpoint.py --mode=original_to_onnx) with tf2onnx in this process, from the model in float32 (whatever
--export_dtype says), without XLA.

--onnx_quantize (quantize): ONNX Runtime's dynamic int8 quantization (quantized): smaller and faster on a CPU
(int8 weights), but its activations are quantized per tensor, and a classifier keeps fewer of its float32 predictions
than with LiteRT's dynamic-range int8 (per token; litert_export.py): see benchmarks/SPEED.md.

The text signature stays out: ONNX has no WordPiece tokenizer, so a client tokenizes and packs (e.g. the HF
folder's tokenizer, convert_checkpoint.py --mode=original_to_hf) and sends ids.

Input checks. ONNX has no operator that fails a request, and tf2onnx drops TensorFlow's asserts. Each of
serving_default's checks (the three inputs of one shape, ids inside the vocabulary, segment ids inside
type_vocab_size) is kept as a Gather out of bounds when it fails (serving.gather_checked_ids), its node
named for the check: ONNX Runtime refuses a bad request with an error naming the node, e.g.
"Non-zero status code returned while running Gather node. Name:'input_ids_must_be_below_vocab_size' ... indices
element out of data bounds". What ONNX Runtime's execution provider does with an index out of bounds decides
this: its CPU provider refuses; a GPU provider may not check.
"""
import importlib.util
import logging as py_logging
import os
import tempfile

import tensorflow as tf
from absl import logging

import cli
import filesystem
import serving

OPSET = 17
INPUT_NAMES = serving.INPUT_NAMES
INSTALL = "pip install tf2onnx onnx (the versions of requirements-clients.txt)"
QUANTIZER_INSTALL = "pip install onnxruntime (the version of requirements-clients.txt)"
QUANTIZE_PER_CHANNEL = True


def require_converter(flag="--export_onnx", quantize=False):
    """An error saying what to install when tf2onnx (or onnx; with quantize, onnxruntime) is missing; checked
    before a job writes anything."""
    missing = [name for name in ("tf2onnx", "onnx") if importlib.util.find_spec(name) is None]
    if missing:
        raise cli.UserError(f"{flag} converts with tf2onnx, and {' and '.join(missing)} "
                            f"{'is' if len(missing) == 1 else 'are'} not installed: {INSTALL}")
    if quantize and importlib.util.find_spec("onnxruntime") is None:
        raise cli.UserError(f"--onnx_quantize quantizes with ONNX Runtime's onnxruntime.quantization, and onnxruntime "
                            f"is not installed: {QUANTIZER_INSTALL}")


def quantized(proto):
    """The bytes of proto quantized to int8 by ONNX Runtime's dynamic quantization: the weights of the MatMuls
    with a constant side (the dense layers; not attention's two activations) stored as int8 per output column,
    their activations quantized to uint8 per tensor as they come (MatMulInteger); the embedding tables int8
    (Gather, dequantized as read); everything else float32. The input checks' Gathers read int32 tables and
    stay as they are."""
    from onnxruntime.quantization import QuantType, quantize_dynamic  # pylint: disable=import-outside-toplevel
    with tempfile.TemporaryDirectory() as scratch:
        target = os.path.join(scratch, "int8.onnx")
        quantize_dynamic(proto, target, op_types_to_quantize=["MatMul", "Gather"], per_channel=QUANTIZE_PER_CHANNEL,
                         weight_type=QuantType.QInt8, extra_options={"MatMulConstBOnly": True})
        with open(target, "rb") as f:
            return f.read()


def export(path, module, flag="--export_onnx", quantize=False):
    """Writes the ONNX model of module's serving_default (a serving._Serving built in float32, without XLA) to
    `path` (any file system; written whole or not at all), in int8 with quantize (quantized); returns path."""
    require_converter(flag, quantize)
    py_logging.getLogger("tf2onnx").setLevel(py_logging.WARNING)
    import tf2onnx  # pylint: disable=import-outside-toplevel

    proto, _ = tf2onnx.convert.from_function(module.ids_function(), input_signature=module.ids_spec(),
                                             opset=OPSET)
    for graph_input in proto.graph.input:  # the three inputs share their dimensions' names
        dims = graph_input.type.tensor_type.shape.dim
        dims[0].dim_param, dims[1].dim_param = "batch", "sequence"
    filesystem.write_file_whole(path, quantized(proto) if quantize else proto.SerializeToString(), flag)
    logging.info("Wrote the ONNX model %s (%s, opset %d; inputs %s; outputs %s; %.1f MB)", path,
                 "int8" if quantize else "float32", OPSET,
                 ", ".join(INPUT_NAMES), ", ".join(o.name for o in proto.graph.output),
                 tf.io.gfile.stat(path).length / 1e6)
    return path
