"""run_classifier.create_model / model_fn_builder and extract_features.model_fn_builder, the original's, on MRPC dev
examples with the tiny original checkpoint: the original's outputs (tests/reference/original_classifier_outputs.json,
made by its own create_model) and those of the project's ClassifierModel and ExtractFeaturesTask with the same
weights, eagerly and under tf.function."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import extract_features
import modeling
import optimization
import run_classifier
from tests.shared_data import shared_path

pytestmark = pytest.mark.usefixtures("modeling_defaults")  # the original's API: a fresh namespace

REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference", "original_classifier_outputs.json")
MODES = ["eager", "tf.function"]


@pytest.fixture(scope="module")
def original():
    with open(REFERENCE) as f:
        reference = json.load(f)
    folder = shared_path("reference", "original_checkpoint_tiny")
    features = {name: np.array(value, np.int32) for name, value in reference["features"].items()}
    assert len(features["input_ids"]) == reference["inputs"]["examples"] == 16
    return reference, folder, features


def _bert_config(folder):
    return modeling.BertConfig.from_json_file(os.path.join(folder, "bert_config.json"))


def _finetuned_checkpoint(tmp_path, reference, folder):
    """The tiny checkpoint's weights with the reference's output layer: a fine-tuned classifier's checkpoint."""
    weights = checkpoints.load_checkpoint(os.path.join(folder, "model.ckpt-30"))
    weights = {name: value for name, value in weights.items() if name.startswith("bert/")}
    weights["output_weights"] = np.array(reference["output_weights"], np.float32)
    weights["output_bias"] = np.array(reference["output_bias"], np.float32)
    return checkpoints.save_checkpoint(str(tmp_path / "model.ckpt-1"), weights)


def _check(got, expected, names, atol=1e-5):
    for name in names:
        np.testing.assert_allclose(np.asarray(got[name]), np.asarray(expected[name]), atol=atol, rtol=0,
                                   err_msg=name)


@pytest.mark.parametrize("mode", MODES)
def test_create_model_gives_the_originals_outputs(original, tmp_path, mode):
    reference, folder, features = original
    bert_config = _bert_config(folder)

    def create_model(input_ids, input_mask, segment_ids, labels):
        loss, per_example_loss, logits, probabilities = run_classifier.create_model(
            bert_config, False, input_ids, input_mask, segment_ids, labels, 2, False)
        return {"loss": loss, "per_example_loss": per_example_loss, "logits": logits, "probabilities": probabilities}

    inputs = [tf.constant(features[k]) for k in ("input_ids", "input_mask", "segment_ids", "label_id")]
    run = create_model if mode == "eager" else tf.function(create_model)
    run(*inputs)
    tvars = modeling.trainable_variables()
    assert [v.name for v in tvars][-2:] == ["output_weights:0", "output_bias:0"] and len(tvars) == 41
    ckpt = _finetuned_checkpoint(tmp_path, reference, folder)
    assignment_map, _ = modeling.get_assignment_map_from_checkpoint(tvars, ckpt)
    assert len(assignment_map) == 41
    modeling.init_from_checkpoint(ckpt, assignment_map)
    outputs = run(*inputs)
    _check(outputs, reference["outputs"], ("loss", "per_example_loss", "logits", "probabilities"))

    # The project's own classifier with the same weights.
    ours = modeling.ClassifierModel(bert_config, 2)
    for name, variable in ours.variables_by_name().items():
        variable.assign(modeling._NAMESPACE.variables[name])
    logits = ours({"input_ids": inputs[0], "input_mask": inputs[1], "segment_ids": inputs[2]}, training=False)
    tolerance = 1e-6 if mode == "eager" else 1e-5  # a traced graph's optimisations round otherwise
    np.testing.assert_allclose(outputs["logits"], logits, atol=tolerance, rtol=0)
    loss, per_example_loss = run_classifier.classifier_loss(logits, inputs[3], False)
    np.testing.assert_allclose(outputs["per_example_loss"], per_example_loss, atol=tolerance, rtol=0)


def test_create_model_trains_with_dropout_and_create_optimizer(original):
    """is_training=True: 0.1 dropout before the output layer (and the config's in the encoder); the variables
    are modeling's, so create_optimizer's step trains them."""
    _, folder, features = original
    bert_config = _bert_config(folder)
    batch = [tf.constant(features[k][:8]) for k in ("input_ids", "input_mask", "segment_ids", "label_id")]

    def loss_fn(*batch):
        return run_classifier.create_model(bert_config, True, *batch, 2, False)[0]

    def loss_without_dropout():
        return float(run_classifier.create_model(bert_config, False, *batch, 2, False)[0])

    tf.random.set_seed(3)
    before = loss_without_dropout()  # the same variables: modeling's namespace makes them once
    weights = modeling._NAMESPACE.variables["output_weights"].numpy()
    train_op = optimization.create_optimizer(loss_fn, 1e-3, 10, 1, False)
    for _ in range(6):
        train_op(*batch)
    after = loss_without_dropout()
    # A single step's loss under dropout is noisy (4 steps once went 0.692 -> 0.697); the loss without it, on
    # the batch trained on, is not.
    assert int(train_op.global_step.numpy()) == 6 and after < before - 0.01, (before, after)
    assert np.abs(modeling._NAMESPACE.variables["output_weights"].numpy() - weights).max() > 1e-4


@pytest.mark.parametrize("mode", MODES)
def test_classifier_model_fn_predicts_from_a_finetuned_checkpoint(original, tmp_path, mode):
    reference, folder, features = original
    ckpt = _finetuned_checkpoint(tmp_path, reference, folder)
    model_fn = run_classifier.model_fn_builder(_bert_config(folder), 2, ckpt, 2e-5, 10, 1, False, False)
    batch = {"input_ids": features["input_ids"], "input_mask": features["input_mask"],
             "segment_ids": features["segment_ids"], "label_ids": features["label_id"]}

    def predict(batch):
        spec = model_fn(batch, None, modeling.ModeKeys.PREDICT, {"batch_size": 16})
        return {"probabilities": spec.predictions["probabilities"], "loss": spec.loss}

    run = predict if mode == "eager" else tf.function(predict)
    _check(run(batch), reference["outputs"], ("probabilities", "loss"))
    second = run({name: value[8:] for name, value in batch.items()})  # loaded once: the same weights
    np.testing.assert_allclose(second["probabilities"], np.array(reference["outputs"]["probabilities"])[8:],
                               atol=1e-5)
    evaluated = model_fn(batch, None, modeling.ModeKeys.EVAL, {})  # what the original's metric_fn read
    _check({"loss": evaluated.loss, "per_example_loss": evaluated.predictions["per_example_loss"]},
           reference["outputs"], ("loss", "per_example_loss"))
    np.testing.assert_array_equal(evaluated.predictions["label_ids"], batch["label_ids"])
    assert evaluated.predictions["logits"].shape == (16, 2) and evaluated.train_op is None


def test_classifier_model_fn_trains_with_one_optimizer(original, tmp_path):
    reference, folder, features = original
    bert_config = _bert_config(folder)
    bert_config.hidden_dropout_prob = bert_config.attention_probs_dropout_prob = 0.0
    ckpt = _finetuned_checkpoint(tmp_path, reference, folder)
    model_fn = run_classifier.model_fn_builder(bert_config, 2, ckpt, 1e-3, 10, 1, False, False)
    batch = {"input_ids": features["input_ids"], "input_mask": features["input_mask"],
             "segment_ids": features["segment_ids"], "label_ids": features["label_id"]}
    spec = model_fn(batch, None, modeling.ModeKeys.TRAIN, {})
    assert spec.predictions is None
    losses = [float(spec.train_op())]
    losses += [float(model_fn(batch, None, modeling.ModeKeys.TRAIN, {}).train_op()) for _ in range(3)]
    # The same optimizer goes on from step to step (training: the output layer's dropout of 0.1, as the original).
    assert int(modeling.get_or_create_global_step().numpy()) == 4 and losses[-1] < losses[0]


@pytest.mark.parametrize("mode", MODES)
def test_extract_features_model_fn_gives_the_encoder_layers(original, mode):
    reference, folder, features = original
    bert_config = _bert_config(folder)
    ckpt = os.path.join(folder, "model.ckpt-30")
    model_fn = extract_features.model_fn_builder(bert_config, ckpt, [-1, -2], False, False)
    batch = {"unique_ids": np.arange(16, dtype=np.int32), "input_ids": features["input_ids"],
             "input_mask": features["input_mask"], "input_type_ids": features["segment_ids"]}

    def predict(batch):
        return model_fn(batch, None, modeling.ModeKeys.PREDICT, {}).predictions

    run = predict if mode == "eager" else tf.function(predict)
    predictions = run(batch)
    assert sorted(predictions) == ["layer_output_0", "layer_output_1", "unique_id"]
    task = extract_features.ExtractFeaturesTask(bert_config, [-1, -2])
    encoder = task.build_model()
    checkpoints.init_from_checkpoint(encoder.variables_by_name(), ckpt)
    expected = task.predict_outputs(encoder, {k: tf.constant(v) for k, v in batch.items()})
    _check(predictions, expected, ("layer_output_0", "layer_output_1"), atol=1e-6)
    np.testing.assert_array_equal(predictions["unique_id"], batch["unique_ids"])
    with pytest.raises(ValueError, match="Only PREDICT modes are supported: train"):
        model_fn(batch, None, modeling.ModeKeys.TRAIN, {})
