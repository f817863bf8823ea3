"""--export_onnx: the token-ids signature as an ONNX model that ONNX Runtime answers as the SavedModel does, with
serving_default's input checks kept."""
import csv
import os

import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import cli
import encoder
import onnx_export
import packing
import serving
import tokenization
from tests.shared_data import shared_path
from tests.exports import assert_close_to_int8, convert_encoder, original_batch
from tests.processes import run_script


def _classifier_checkpoint(folder, features):
    """The tiny original checkpoint with a two-label classifier head: what a fine-tuned MRPC model holds. The head
    is centred on the tiny model's (nearly constant) pooled outputs of `features`: both labels occur."""
    tiny = shared_path("reference", "original_checkpoint_tiny")
    config_file = os.path.join(tiny, "bert_config.json")
    weights = {name: value for name, value in checkpoints.load_checkpoint(tiny).items()
               if not name.endswith(("adam_m", "adam_v")) and name != "global_step"}
    bert = encoder.BertEncoder(encoder.BertConfig.load(config_file))
    checkpoints.init_from_checkpoint(bert.variables_by_name(), tiny)
    pooled = bert(*(tf.constant(features[name]) for name in onnx_export.INPUT_NAMES))["pooled_output"].numpy()
    direction = np.random.default_rng(0).normal(size=pooled.shape[1]).astype(np.float32)
    direction *= 20 / np.linalg.norm(direction)  # a large head (a fine-tuned one is about 1): float rounding grows
    weights["output_weights"] = np.stack([direction, -direction])
    bias = -(pooled.mean(axis=0) @ direction)
    weights["output_bias"] = np.array([bias, -bias], np.float32)
    checkpoints.save_checkpoint(os.path.join(folder, "model.ckpt-1"), weights)
    return os.path.join(folder, "model.ckpt-1"), config_file


def _mrpc_dev_pairs(count):
    with open(shared_path("data", "glue", "MRPC", "dev.tsv"), encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:count + 1]
    return [row[3] for row in rows], [row[4] for row in rows]


@pytest.mark.clients
@pytest.mark.slow
def test_onnx_runtime_answers_as_the_saved_model(tmp_path):
    import onnxruntime
    import tensorflow_text  # noqa: F401  (the SavedModel's text signature)
    vocab = shared_path("vocab", "uncased", "vocab.txt")
    tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
    texts_a, texts_b = _mrpc_dev_pairs(64)
    ids_a = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(t)) for t in texts_a]
    ids_b = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(t)) for t in texts_b]
    features = packing.pack_pairs(tokenizer, ids_a, ids_b, 128)
    init_checkpoint, config_file = _classifier_checkpoint(str(tmp_path / "ckpt"), features)
    export_dir, onnx_file = str(tmp_path / "saved_model"), str(tmp_path / "onnx" / "mrpc.onnx")
    proc = run_script("run_classifier.py", "--task_name=MRPC", f"--vocab_file={vocab}",
                      f"--bert_config_file={config_file}", f"--init_checkpoint={init_checkpoint}",
                      "--max_seq_length=128", f"--output_dir={tmp_path / 'out'}", f"--export_dir={export_dir}",
                      f"--export_onnx={onnx_file}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Wrote the ONNX model" in proc.stderr

    serve = tf.saved_model.load(export_dir).signatures["serving_default"]
    expected = serve(**{name: tf.constant(value) for name, value in features.items()})
    session = onnxruntime.InferenceSession(onnx_file, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == list(onnx_export.INPUT_NAMES)
    label, probabilities = session.run(["label", "probabilities"], features)
    np.testing.assert_allclose(probabilities, expected["probabilities"].numpy(), atol=1e-5, rtol=0)
    decided = np.abs(expected["probabilities"].numpy()[:, 1] - 0.5) > 1e-5  # not a tie within the tolerance
    assert decided.sum() > 50
    assert ([x.encode() for x in label[decided]] == list(expected["label"].numpy()[decided]))
    assert len(set(label)) == 2 and np.ptp(probabilities[:, 1]) > 1e-3  # the answers differ from pair to pair
    # A request cut to its longest sequence answers the same (any width).
    width = int(features["input_mask"].sum(axis=1).max())
    short = {name: np.ascontiguousarray(value[:8, :width]) for name, value in features.items()}
    np.testing.assert_allclose(session.run(["probabilities"], short)[0], probabilities[:8], atol=1e-5, rtol=0)

    # serving_default's checks hold in ONNX Runtime: a bad request is refused, naming the check.
    good = {name: value[:2, :16].copy() for name, value in features.items()}
    bad_requests = {
        "input_ids_must_be_non_negative": dict(good, input_ids=np.where(good["input_ids"] == 101, -1,
                                                                         good["input_ids"]).astype(np.int32)),
        "input_ids_must_be_below_vocab_size": dict(good, input_ids=good["input_ids"] + 30522),
        "segment_ids_must_be_below_type_vocab_size": dict(good, segment_ids=good["segment_ids"] + 2),
        "segment_ids_must_be_non_negative": dict(good, segment_ids=good["segment_ids"] - 1),
        "input_mask_must_have_the_shape_of_input_ids": dict(good, input_mask=good["input_mask"][:, :1].copy()),
        "segment_ids_must_have_the_shape_of_input_ids": dict(good, segment_ids=good["segment_ids"][:1].copy()),
    }
    for check, request in bad_requests.items():
        with pytest.raises(Exception, match=f"Gather node. Name:'{check}'"):
            session.run(None, request)
        with pytest.raises(tf.errors.InvalidArgumentError):
            serve(**{name: tf.constant(value) for name, value in request.items()})


def test_missing_converter_is_one_line(monkeypatch):
    import importlib.util
    # Installed or not here (TensorFlow 2.20's test environment has neither), what each case says.
    for missing, said in ((("tf2onnx",), "tf2onnx is"), (("tf2onnx", "onnx"), "tf2onnx and onnx are")):
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *args, gone=missing: None if name in gone else object())
        with pytest.raises(cli.UserError, match=rf"--export_onnx converts with tf2onnx, and {said} not installed: "
                                                r"pip install tf2onnx onnx"):
            onnx_export.require_converter()


def test_exports_of_a_checkpoint_without_the_head_hold_the_same_head():
    """A checkpoint without the task's head (a pre-trained one): each export (SavedModel, ONNX) builds the model
    anew, and both draw the untrained head from one seed, so the two answer alike."""
    tiny = shared_path("reference", "original_checkpoint_tiny")
    config = encoder.BertConfig.load(os.path.join(tiny, "bert_config.json"))
    heads = []
    for _ in range(2):
        tf.random.uniform([3])  # random state moved between the exports
        module = serving.build_module(lambda: encoder.ClassifierModel(config, 2), tiny, lambda model: model)
        heads.append(module.variables_by_name()["output_weights"].numpy())
        assert module.variables_by_name()["bert/pooler/dense/kernel"].numpy().std() > 0
    np.testing.assert_array_equal(heads[0], heads[1])
    assert 0.005 < heads[0].std() < 0.05  # the initializer's truncated normal (stddev 0.02), not zeros


@pytest.mark.clients
@pytest.mark.slow
def test_encoder_onnx_models_answer_as_the_original(tmp_path):
    """convert_checkpoint.py --mode=original_to_onnx [--quantize]: ONNX Runtime gives the original's encoder
    outputs (float32), or outputs close to them in a model about 4x smaller (int8)."""
    import onnxruntime
    inputs, sequence_output, pooled_output = original_batch()
    convert_encoder("original_to_onnx", tmp_path / "f32")
    session = onnxruntime.InferenceSession(str(tmp_path / "f32" / "encoder.onnx"), providers=["CPUExecutionProvider"])
    got_sequence, got_pooled = session.run(["sequence_output", "pooled_output"], inputs)
    np.testing.assert_allclose(got_sequence, sequence_output, atol=2e-5, rtol=0)
    np.testing.assert_allclose(got_pooled, pooled_output, atol=2e-5, rtol=0)

    proc = convert_encoder("original_to_onnx", tmp_path / "int8", "--quantize")
    assert "(int8, opset" in proc.stderr
    int8_file = tmp_path / "int8" / "encoder.onnx"
    assert int8_file.stat().st_size < 0.4 * (tmp_path / "f32" / "encoder.onnx").stat().st_size
    session = onnxruntime.InferenceSession(str(int8_file), providers=["CPUExecutionProvider"])
    assert {node.op_type for node in __import__("onnx").load(str(int8_file)).graph.node} >= {"MatMulInteger"}
    got_sequence, got_pooled = session.run(["sequence_output", "pooled_output"], inputs)
    real = inputs["input_mask"] == 1
    assert_close_to_int8(got_sequence[real], sequence_output[real])
    assert_close_to_int8(got_pooled, pooled_output)
    with pytest.raises(Exception, match="input_ids_must_be_below_vocab_size"):
        session.run(None, dict(inputs, input_ids=inputs["input_ids"] + 30522))


def test_onnx_quantize_without_onnxruntime_is_one_line(monkeypatch):
    import importlib.util
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name == "onnxruntime" else object())
    with pytest.raises(cli.UserError, match=r"--onnx_quantize quantizes with ONNX Runtime's onnxruntime.quantization, "
                                            r"and onnxruntime is not installed: pip install onnxruntime"):
        onnx_export.require_converter(quantize=True)
    onnx_export.require_converter(quantize=False)
