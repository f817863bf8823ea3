"""The ONNX model of a task's token-ids signature (the SavedModel's serving_default), for ONNX Runtime.

  python run_classifier.py ... --export_onnx=model.onnx   (every fine-tuning runner has the flag)

    import numpy as np, onnxruntime
    session = onnxruntime.InferenceSession("model.onnx")
    session.run(None, {"input_ids": ids, "input_mask": mask, "segment_ids": segments})  # int32 [batch, seq]

export(path, module) converts a serving.py module's serving_default (int32 input_ids, input_mask, segment_ids
[batch, sequence] -> the task's outputs: the classifier's label and probabilities or score, NER's probabilities,
SQuAD's start_logits and end_logits) with tf2onnx in this process, from the model in float32 (whatever
--export_dtype says), without XLA. The text signature stays out: ONNX has no WordPiece tokenizer, so a client
tokenizes and packs (e.g. the HF folder's tokenizer, convert_checkpoint.py --mode=original_to_hf) and sends ids.

Input checks. ONNX has no operator that fails a request, and tf2onnx drops TensorFlow's asserts. Each of
serving_default's checks (the three inputs of one shape, ids inside the vocabulary, segment ids inside
type_vocab_size) is kept as a Gather from a one-element table at 0 (the check holds) or 1 (it fails), its node
named for the check: ONNX Runtime refuses a bad request with an error naming the node, e.g.
"Non-zero status code returned while running Gather node. Name:'input_ids_must_be_below_vocab_size' ... indices
element out of data bounds". What ONNX Runtime's execution provider does with an index out of bounds decides
this: its CPU provider refuses; a GPU provider may not check.
"""
import importlib.util
import logging as py_logging
import uuid

import tensorflow as tf
from absl import logging

import cli
import filesystem

OPSET = 17
INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")
INSTALL = "pip install tf2onnx onnx (the versions of requirements-clients.txt)"


def require_converter(flag="--export_onnx"):
    """An error saying what to install when tf2onnx (or onnx) is missing; checked before a job writes anything."""
    missing = [name for name in ("tf2onnx", "onnx") if importlib.util.find_spec(name) is None]
    if missing:
        raise cli.UserError(f"{flag} converts with tf2onnx, and {' and '.join(missing)} "
                            f"{'is' if len(missing) == 1 else 'are'} not installed: {INSTALL}")


def _refuse_unless(holds, name):
    """int32 0 when `holds`; else a Gather out of its one-element table's bounds, which ONNX Runtime refuses
    naming the node `name` (the check)."""
    return tf.gather(tf.zeros([1], tf.int32), tf.cast(tf.logical_not(holds), tf.int32), name=name)


def checked_ids(input_ids, input_mask, segment_ids, vocab_size, type_vocab_size):
    """The three inputs, made to depend on serving_default's checks in a form ONNX keeps (_refuse_unless)."""
    shape = tf.shape(input_ids)
    checks = [
        _refuse_unless(tf.reduce_all(tf.equal(tf.shape(input_mask), shape)),
                       "input_mask_must_have_the_shape_of_input_ids"),
        _refuse_unless(tf.reduce_all(tf.equal(tf.shape(segment_ids), shape)),
                       "segment_ids_must_have_the_shape_of_input_ids"),
        _refuse_unless(tf.reduce_all(input_ids >= 0), "input_ids_must_be_non_negative"),
        _refuse_unless(tf.reduce_all(input_ids < vocab_size), "input_ids_must_be_below_vocab_size"),
        _refuse_unless(tf.reduce_all(segment_ids >= 0), "segment_ids_must_be_non_negative"),
        _refuse_unless(tf.reduce_all(segment_ids < type_vocab_size), "segment_ids_must_be_below_type_vocab_size"),
    ]
    passed = checks[0]  # 0 when every check holds (else the request has been refused); Add, which ONNX Runtime
    for check in checks[1:]:  # runs on int32 (its Sum, tf.add_n's, does not)
        passed += check
    return input_ids + passed, input_mask + passed, segment_ids + passed


def export(path, module, flag="--export_onnx"):
    """Writes the ONNX model of module's serving_default (a serving._Serving built in float32, without XLA) to
    `path` (any file system; written whole or not at all); returns path."""
    require_converter(flag)
    py_logging.getLogger("tf2onnx").setLevel(py_logging.WARNING)
    import tf2onnx  # pylint: disable=import-outside-toplevel

    def serve(input_ids, input_mask, segment_ids):
        return module._outputs(*checked_ids(input_ids, input_mask, segment_ids, module.vocab_size,
                                            module.type_vocab_size))

    spec = [tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUT_NAMES]
    proto, _ = tf2onnx.convert.from_function(tf.function(serve, autograph=False), input_signature=spec,
                                             opset=OPSET)
    for graph_input in proto.graph.input:  # the three inputs share their dimensions' names
        dims = graph_input.type.tensor_type.shape.dim
        dims[0].dim_param, dims[1].dim_param = "batch", "sequence"
    filesystem.make_parent_dir(path, flag)
    scratch = f"{path}.partial-{uuid.uuid4().hex[:8]}"
    try:
        with tf.io.gfile.GFile(scratch, "wb") as f:
            f.write(proto.SerializeToString())
        tf.io.gfile.rename(scratch, path, overwrite=True)
    finally:
        if tf.io.gfile.exists(scratch):
            tf.io.gfile.remove(scratch)
    logging.info("Wrote the ONNX model %s (opset %d; inputs %s; outputs %s; %.1f MB)", path, OPSET,
                 ", ".join(INPUT_NAMES), ", ".join(o.name for o in proto.graph.output),
                 tf.io.gfile.stat(path).length / 1e6)
    return path
