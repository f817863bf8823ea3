"""Opens a TF Hub export (convert_checkpoint.py --mode=original_to_tfhub) as TensorFlow's BERT tutorials do, in a
process of its own with TF_USE_LEGACY_KERAS=1 (tf-keras, as TF Hub's docs tell Keras 3 users), and writes what it
saw as JSON for tests/test_tfhub_export.py.

  python tests/tfhub_client.py EXPORT_DIR CASES.npz RESULT.json EPOCHS

CASES.npz (written by the test from the project's own code): texts_a, texts_b, labels (MRPC pairs, fitted EPOCHS
times as one batch); for each checked sequence length N, pair_N_* and single_N_* (run_classifier.py's input_ids,
input_mask, segment_ids of the pairs and of texts_a alone); ids_* and out_* (token ids and the project's encoder
outputs on them).
First only TensorFlow and tensorflow_text are imported (the preprocessor and the encoder need nothing else),
then tensorflow_hub with tf-keras.
"""
import json
import os
import sys
import time

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

NAMES = ("input_word_ids", "input_mask", "input_type_ids")
FEATURES = ("input_ids", "input_mask", "segment_ids")


def max_diff(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def same_ids(packed, cases, prefix):
    return all(np.array_equal(np.asarray(packed[name]), cases[f"{prefix}_{feature}"])
               for name, feature in zip(NAMES, FEATURES))


def check_plain_tensorflow(export_dir, cases, result):
    """The preprocessor and the encoder with TensorFlow + tensorflow_text alone (also in a tf.data map)."""
    preprocessor = tf.saved_model.load(os.path.join(export_dir, "preprocessor"))
    encoder = tf.saved_model.load(os.path.join(export_dir, "encoder"))
    result["modules_loaded"] = sorted(name for name in ("encoder", "modeling", "fast_tokenization", "packing",
                                                        "tfhub_export") if name in sys.modules)
    texts_a, texts_b = tf.constant(cases["texts_a"]), tf.constant(cases["texts_b"])
    lengths = sorted({int(key.split("_")[1]) for key in cases.files if key.startswith("pair_")})
    ids_equal = {}
    for length in lengths:
        pair = preprocessor.bert_pack_inputs([preprocessor.tokenize(texts_a), preprocessor.tokenize(texts_b)],
                                             seq_length=length)
        single = preprocessor.bert_pack_inputs([preprocessor.tokenize(texts_a)], seq_length=length)
        ids_equal[f"pair_{length}"] = same_ids(pair, cases, f"pair_{length}")
        ids_equal[f"single_{length}"] = same_ids(single, cases, f"single_{length}")
    ids_equal["default_128"] = same_ids(preprocessor(texts_a), cases, "single_128")
    dataset = tf.data.Dataset.from_tensor_slices((cases["texts_a"], cases["texts_b"])).batch(5).map(
        lambda a, b: preprocessor.bert_pack_inputs([preprocessor.tokenize(a), preprocessor.tokenize(b)],
                                                   seq_length=lengths[0]))
    batches = list(dataset)
    ids_equal["tf_data_map"] = same_ids({name: np.concatenate([b[name] for b in batches]) for name in NAMES},
                                        cases, f"pair_{lengths[0]}")
    result["ids_equal"] = ids_equal
    inputs = {name: tf.constant(cases[f"ids_{feature}"]) for name, feature in zip(NAMES, FEATURES)}
    outputs = encoder(inputs, training=False)
    real = cases["ids_input_mask"].astype(bool)  # outputs at padding positions mean nothing
    result["encoder_diff"] = {key: max_diff(outputs[key], cases[f"out_{key}"]) for key in ("pooled_output", "default")}
    result["encoder_diff"]["sequence_output"] = max_diff(outputs["sequence_output"].numpy()[real],
                                                         cases["out_sequence_output"][real])
    result["encoder_outputs_diff"] = max(max_diff(o.numpy()[real], cases[f"out_layer_{i}"][real])
                                         for i, o in enumerate(outputs["encoder_outputs"]))
    result["last_layer_is_sequence_output"] = bool(np.array_equal(outputs["encoder_outputs"][-1],
                                                                  outputs["sequence_output"]))
    return inputs


def fit_losses(model, x, y, epochs):
    """The training loss of the first and the last of `epochs` steps on (x, y), one batch."""
    model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate=1e-4),
                  loss=tf.keras.losses.BinaryCrossentropy(from_logits=True))
    losses = model.fit(x, y, epochs=epochs, batch_size=len(y), verbose=0).history["loss"]
    return losses[0], losses[-1]


def check_hub_keras_layer(export_dir, cases, inputs, result, epochs):
    """The tutorial's model ("Classify text with BERT") and its pair version ("Solve GLUE tasks using BERT")."""
    import tensorflow_hub as hub
    result["keras"] = tf.keras.__name__ if hasattr(tf.keras, "__name__") else str(tf.keras)
    preprocessor_path, encoder_path = (os.path.join(export_dir, name) for name in ("preprocessor", "encoder"))
    tf.keras.utils.set_random_seed(1)
    labels = cases["labels"].astype(np.float32)

    text_input = tf.keras.layers.Input(shape=(), dtype=tf.string, name="text")
    preprocessing_layer = hub.KerasLayer(preprocessor_path, name="preprocessing")
    encoder = hub.KerasLayer(encoder_path, trainable=True, name="BERT_encoder")
    outputs = encoder(preprocessing_layer(text_input))
    net = tf.keras.layers.Dropout(0.1)(outputs["pooled_output"])
    net = tf.keras.layers.Dense(1, name="classifier")(net)
    model = tf.keras.Model(text_input, net)
    result["hub_layer_diff"] = max_diff(encoder(inputs)["pooled_output"], cases["out_pooled_output"])
    before = [v.numpy() for v in encoder.trainable_weights]
    t = time.time()
    result["single_losses"] = fit_losses(model, cases["texts_a"], labels, epochs)
    result["seconds_single_fit"] = time.time() - t
    result["trainable_weights"] = len(encoder.trainable_weights)
    result["weights_changed"] = sum(not np.array_equal(b, v.numpy())
                                    for b, v in zip(before, encoder.trainable_weights))

    preprocessor = hub.load(preprocessor_path)
    text_inputs = [tf.keras.layers.Input(shape=(), dtype=tf.string, name=name) for name in ("a", "b")]
    tokenize = hub.KerasLayer(preprocessor.tokenize)
    segments = [tokenize(text) for text in text_inputs]
    packer = hub.KerasLayer(preprocessor.bert_pack_inputs, arguments=dict(seq_length=32))
    encoder = hub.KerasLayer(encoder_path, trainable=True)
    net = tf.keras.layers.Dropout(0.1)(encoder(packer(segments))["pooled_output"])
    model = tf.keras.Model(text_inputs, tf.keras.layers.Dense(1)(net))
    t = time.time()
    result["pair_losses"] = fit_losses(model, [cases["texts_a"], cases["texts_b"]], labels, epochs)
    result["seconds_pair_fit"] = time.time() - t


def main(export_dir, cases_file, result_file, epochs):
    cases = np.load(cases_file)
    result = {}
    start = time.time()
    inputs = check_plain_tensorflow(export_dir, cases, result)
    result["seconds_plain_tensorflow"] = time.time() - start
    check_hub_keras_layer(export_dir, cases, inputs, result, int(epochs))
    result["seconds"] = time.time() - start
    with open(result_file, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:5])
