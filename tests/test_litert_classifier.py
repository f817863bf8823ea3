"""litert_classifier.py: the LiteRT classifier matches the SavedModel on MRPC dev; its tokenizer gives the
original's ids."""

import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import cli
import encoder
import litert_classifier
import run_classifier as rc
import tokenization
from tests.shared_data import glue, mrpc_pairs, vocab
from tests.tokenizers import REFERENCES, reference


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_lite_tokenizer_gives_the_reference_ids(name):
    """Every line of the reference files (English, Chinese, Japanese, accents, control characters, emoji)."""
    vocab_file = vocab(name)
    records = reference(name)
    tokenizer = litert_classifier.LiteTokenizer(vocab_file, REFERENCES[name])
    ids, splits = tokenizer.tokenize(tf.constant([r["text"] for r in records]))
    got = tf.RaggedTensor.from_row_splits(ids, splits).to_list()
    wrong = [(r["text"], r["ids"], g) for r, g in zip(records, got) if r["ids"] != g]
    assert len(records) == 5308 and not wrong, wrong[:3]


@pytest.mark.slow
def test_litert_classifier_matches_the_saved_model_on_mrpc_dev(tmp_path):
    config_file = tmp_path / "bert_config.json"
    config = encoder.BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=128, type_vocab_size=2, initializer_range=0.2)
    config.to_json_file(str(config_file))
    vocab_file = vocab()
    tf.keras.utils.set_random_seed(1)
    model = encoder.ClassifierModel(config, 2)
    model.head.output_weights.assign(model.head.output_weights * 20.0)  # probabilities far apart
    # Centre the two classes on the dev set, so that both are predicted.
    examples = rc.MrpcProcessor().get_dev_examples(glue("MRPC"))
    arrays = rc.examples_to_arrays(examples, ["0", "1"], 128, tokenization.FullTokenizer(vocab_file), log_examples=0)
    logits = model({k: tf.constant(arrays[k]) for k in ("input_ids", "input_mask", "segment_ids")}).numpy()
    model.head.output_bias.assign([0.0, -float(np.median(logits[:, 1] - logits[:, 0]))])
    output_dir = tmp_path / "out"
    checkpoints.CheckpointManager(str(output_dir)).save(model.variables_by_name(), 0)
    export_dir, tflite, int8 = str(tmp_path / "saved_model"), tmp_path / "mrpc.tflite", tmp_path / "mrpc_int8.tflite"
    flags = dict(output_dir=str(output_dir), bert_config_file=str(config_file), task_name="MRPC",
                 vocab_file=vocab_file, max_seq_length=128)
    rc.run(cli.build_options(rc.ClassifierOptions, **flags, export_dir=export_dir, export_tflite=str(tflite)))
    # Under --use_xla the LiteRT model is converted from a plain float32 export of its own (LiteRT lacks the ops
    # of an XLA export's padding).
    rc.run(cli.build_options(rc.ClassifierOptions, **flags, export_tflite=str(int8), tflite_quantize=True,
                             use_xla=True))
    assert sorted(litert_classifier.custom_ops(tflite.read_bytes())) == sorted(litert_classifier.CUSTOM_OPS)
    assert int8.stat().st_size < tflite.stat().st_size / 2  # the tokenizer tables (2 MB) are not quantized

    text_a, text_b = mrpc_pairs()
    expected = tf.saved_model.load(export_dir).signatures["serving_text"](text_a=tf.constant(text_a),
                                                                            text_b=tf.constant(text_b))
    want = expected["probabilities"].numpy()
    assert 0.3 < want.argmax(1).mean() < 0.7
    results = {}
    for path in (tflite, int8):
        run = litert_classifier.interpreter(path).get_signature_runner()
        outputs = [run(text_a=np.array([a]), text_b=np.array([b])) for a, b in zip(text_a, text_b)]
        results[path.name] = (np.concatenate([o["probabilities"] for o in outputs]),
                              [o["label"][0].decode() for o in outputs])
    got, labels = results["mrpc.tflite"]
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
    assert labels == [label.decode() for label in expected["label"].numpy()]
    quantized, _ = results["mrpc_int8.tflite"]
    agreement = float(np.mean(quantized.argmax(1) == want.argmax(1)))
    print(f"int8 LiteRT: argmax agreement {agreement:.4f}, max |p - p_float| "
          f"{np.abs(quantized - want).max():.3g} on {len(want)} MRPC dev pairs")
    assert agreement > 0.95
    # A batch of requests in one call gives the same as one request at a time.
    run = litert_classifier.interpreter(tflite).get_signature_runner()
    batch = run(text_a=np.array(text_a[:16]), text_b=np.array(text_b[:16]))
    np.testing.assert_allclose(batch["probabilities"], want[:16], atol=1e-4, rtol=0)
