"""run_pretraining's original API (model_fn_builder, get_masked_lm_output, get_next_sentence_output,
gather_indexes, input_fn_builder) and run_squad's (create_model, model_fn_builder) on TensorFlow 2: the original's
outputs on the tiny original checkpoint (reference_outputs.npz, made by the original's own heads), eagerly and
under tf.function; a training step equal to create_optimizer's over the original's model_fn written by hand."""
import os

import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import modeling
import optimization
import run_pretraining
import run_squad
from tests.shared_data import shared_path
from tests.original_algorithms import pretraining_loss

pytestmark = pytest.mark.usefixtures("modeling_defaults")  # the original's API: a fresh namespace

MODES = ["eager", "tf.function"]


@pytest.fixture(scope="module")
def tiny():
    folder = shared_path("reference", "original_checkpoint_tiny")
    ref = np.load(os.path.join(folder, "reference_outputs.npz"))
    config = modeling.BertConfig.from_json_file(os.path.join(folder, "bert_config.json"))
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0  # as the reference outputs
    features = {name[3:]: ref[name] for name in ref.files if name.startswith("in_")}
    return folder, os.path.join(folder, "model.ckpt-30"), ref, config, features


def _original_model_names(folder):
    import json
    with open(os.path.join(folder, "variable_names.json")) as f:
        return [name for name in json.load(f) if not name.endswith(("/adam_m:0", "/adam_v:0", "global_step:0"))]


@pytest.mark.parametrize("mode", MODES)
def test_pretraining_model_fn_evaluates_as_the_original(tiny, mode):
    folder, ckpt, ref, config, features = tiny
    model_fn = run_pretraining.model_fn_builder(config, ckpt, 1e-3, 100, 10, False, False)

    def evaluate(batch):
        spec = model_fn(batch, None, modeling.ModeKeys.EVAL, {"batch_size": 8})
        assert spec.train_op is None
        return dict(spec.predictions, loss=spec.loss)

    got = evaluate(features) if mode == "eager" else tf.function(evaluate)(features)
    assert [v.name for v in modeling.trainable_variables()] == _original_model_names(folder)
    np.testing.assert_allclose(got["loss"], ref["out_total_loss"], atol=1e-5)
    np.testing.assert_allclose(got["masked_lm_example_loss"], ref["out_mlm_example_loss"], atol=1e-4)
    np.testing.assert_allclose(np.asarray(got["masked_lm_log_probs"])[:, :1000], ref["out_mlm_log_probs__vocab0_1000"],
                               atol=1e-4)
    np.testing.assert_allclose(got["next_sentence_example_loss"], ref["out_nsp_example_loss"], atol=1e-5)
    np.testing.assert_allclose(got["next_sentence_log_probs"], ref["out_nsp_log_probs"], atol=1e-5)
    with pytest.raises(ValueError, match="Only TRAIN and EVAL modes are supported: infer"):
        model_fn(features, None, modeling.ModeKeys.PREDICT, None)


def test_pretraining_heads_as_the_originals_functions(tiny):
    """The heads composed by hand, as a user's model_fn adapting pre-training composes them."""
    folder, ckpt, ref, config, features = tiny
    model = modeling.BertModel(config=config, is_training=False, input_ids=features["input_ids"],
                               input_mask=features["input_mask"], token_type_ids=features["segment_ids"])
    gathered = run_pretraining.gather_indexes(model.get_sequence_output(), features["masked_lm_positions"])
    assert gathered.shape == (8 * 20, config.hidden_size)
    run_pretraining.get_masked_lm_output(config, model.get_sequence_output(), model.get_embedding_table(),
                                         features["masked_lm_positions"], features["masked_lm_ids"],
                                         features["masked_lm_weights"])
    run_pretraining.get_next_sentence_output(config, model.get_pooled_output(), features["next_sentence_labels"])
    names = [name[:-2] for name in _original_model_names(folder)]
    modeling.init_from_checkpoint(ckpt, {name: name for name in names})
    sequence_output = model.get_sequence_output()
    np.testing.assert_allclose(run_pretraining.gather_indexes(sequence_output, features["masked_lm_positions"]),
                               tf.reshape(tf.gather(sequence_output, features["masked_lm_positions"], batch_dims=1),
                                          [-1, config.hidden_size]))
    loss, per_example_loss, log_probs = run_pretraining.get_masked_lm_output(
        config, sequence_output, model.get_embedding_table(), features["masked_lm_positions"],
        features["masked_lm_ids"], features["masked_lm_weights"])
    np.testing.assert_allclose(loss, ref["out_mlm_loss"], atol=1e-5)
    np.testing.assert_allclose(per_example_loss, ref["out_mlm_example_loss"], atol=1e-4)
    assert log_probs.shape == (160, config.vocab_size)
    loss, per_example_loss, log_probs = run_pretraining.get_next_sentence_output(
        config, model.get_pooled_output(), features["next_sentence_labels"])
    np.testing.assert_allclose(loss, ref["out_nsp_loss"], atol=1e-5)
    np.testing.assert_allclose(log_probs, ref["out_nsp_log_probs"], atol=1e-5)


def _weights_after_one_step(step, start):
    loss = step()
    return float(loss), {name: v.numpy() for name, v in modeling._NAMESPACE.variables.items()
                         if name in start}


def test_pretraining_model_fn_trains_as_create_optimizer_over_the_originals_model_fn(tiny):
    folder, ckpt, ref, config, features = tiny
    model_fn = run_pretraining.model_fn_builder(config, ckpt, 1e-3, 100, 10, False, False)
    spec = model_fn(features, None, modeling.ModeKeys.TRAIN, None)
    np.testing.assert_allclose(spec.loss, ref["out_total_loss"], atol=1e-5)  # from the loaded checkpoint
    trained = [v.name[:-2] for v in modeling.trainable_variables()]
    start = {name: v.numpy() for name, v in modeling._NAMESPACE.variables.items()}
    ours = _weights_after_one_step(spec.train_op, start)
    assert int(modeling.get_or_create_global_step().numpy()) == 1
    again = model_fn(features, None, modeling.ModeKeys.TRAIN, None)  # the same optimizer, the next step
    again.train_op()
    assert int(modeling.get_or_create_global_step().numpy()) == 2

    modeling.reset_variables()  # the original's model_fn written by hand, from the same weights
    train_op = optimization.create_optimizer(lambda f: pretraining_loss(config, f), 1e-3, 100, 10, False)
    pretraining_loss(config, features)
    for name, value in start.items():
        if name in modeling._NAMESPACE.variables:
            modeling._NAMESPACE.variables[name].assign(value)
    theirs = _weights_after_one_step(lambda: train_op(features), start)
    np.testing.assert_allclose(ours[0], theirs[0], atol=1e-6)
    assert len(trained) == 39 + 7 and all(name.startswith(("bert/", "cls/")) for name in trained)
    for name in trained:
        np.testing.assert_allclose(ours[1][name], theirs[1][name], atol=1e-6, rtol=0, err_msg=name)
        assert not np.array_equal(ours[1][name], start[name]), name


def test_pretraining_input_fn_builder_reads_the_originals_records(tiny):
    folder, ckpt, ref, config, features = tiny
    records_file = shared_path("reference", "pretraining_data", "sample_text_default.tfrecord")
    first = next(iter(run_pretraining.input_fn_builder([records_file], 128, 20, False)({"batch_size": 8})))
    assert sorted(first) == sorted(features)
    for name, value in features.items():
        assert first[name].dtype == value.dtype, name
        np.testing.assert_array_equal(first[name].numpy().reshape(value.shape), value, err_msg=name)
    training = run_pretraining.input_fn_builder([records_file], 128, 20, True, num_cpu_threads=2)
    batches = list(training({"batch_size": 8}).take(30))  # repeated: more batches than one pass holds
    assert all(batch["input_ids"].shape == (8, 128) for batch in batches)


# ---------------------------------------------------------------------------------------------------------
# run_squad: create_model and model_fn_builder, equal to the project's SquadModel with the same weights.


def _squad_checkpoint(tmp_path, ckpt, config):
    weights = {name: value for name, value in checkpoints.load_checkpoint(ckpt).items() if name.startswith("bert/")}
    rng = np.random.RandomState(0)
    weights["cls/squad/output_weights"] = rng.normal(0, 0.2, [2, config.hidden_size]).astype(np.float32)
    weights["cls/squad/output_bias"] = np.array([0.3, -0.2], np.float32)
    return checkpoints.save_checkpoint(str(tmp_path / "model.ckpt-1"), weights), weights


def _squad_setup(tiny, tmp_path):
    """(config, a fine-tuned SQuAD checkpoint of the tiny weights, a batch, SquadModel with its weights, the
    model_fn of run_squad.model_fn_builder over that checkpoint)."""
    folder, ckpt, ref, config, features = tiny
    squad_ckpt, weights = _squad_checkpoint(tmp_path, ckpt, config)
    batch = {"unique_ids": np.arange(1000000000, 1000000008, dtype=np.int32), "input_ids": features["input_ids"],
             "input_mask": features["input_mask"], "segment_ids": features["segment_ids"],
             "start_positions": np.array([0, 3, 5, 9, 0, 1, 2, 7], np.int32),
             "end_positions": np.array([0, 4, 5, 12, 0, 1, 6, 7], np.int32)}
    model = modeling.SquadModel(config)
    for name, variable in model.variables_by_name().items():
        variable.assign(weights[name])
    return config, weights, batch, model, run_squad.model_fn_builder(config, squad_ckpt, 3e-5, 10, 1, False, False)


@pytest.mark.parametrize("mode", MODES)
def test_squad_model_fn_predicts_as_squad_model(tiny, tmp_path, mode):
    _, _, batch, model, model_fn = _squad_setup(tiny, tmp_path)
    want_start, want_end = model(batch, training=False)

    def predict(features):
        return model_fn(features, None, modeling.ModeKeys.PREDICT, None).predictions

    got = predict(batch) if mode == "eager" else tf.function(predict)(batch)
    np.testing.assert_array_equal(got["unique_ids"], batch["unique_ids"])
    np.testing.assert_allclose(got["start_logits"], want_start, atol=1e-5)
    np.testing.assert_allclose(got["end_logits"], want_end, atol=1e-5)
    assert [v.name for v in modeling.trainable_variables()][-2:] == ["cls/squad/output_weights:0",
                                                                     "cls/squad/output_bias:0"]
    with pytest.raises(ValueError, match="Only TRAIN and PREDICT modes are supported: eval"):
        model_fn(batch, None, modeling.ModeKeys.EVAL, None)


@pytest.mark.parametrize("mode", MODES)
def test_squad_create_model_and_model_fn_train(tiny, tmp_path, mode):
    config, weights, batch, model, model_fn = _squad_setup(tiny, tmp_path)
    want = run_squad.squad_loss(*model(batch, training=True), batch["start_positions"], batch["end_positions"])
    spec = model_fn(batch, None, modeling.ModeKeys.TRAIN, None)
    np.testing.assert_allclose(spec.loss, want, atol=1e-5)
    first = float(spec.train_op())
    np.testing.assert_allclose(first, want, atol=1e-5)

    def train(features):
        return model_fn(features, None, modeling.ModeKeys.TRAIN, None).train_op()

    step = train if mode == "eager" else tf.function(train)
    for _ in range(3):  # the same optimizer: the global step goes on
        last = float(step(batch))
    assert int(modeling.get_or_create_global_step().numpy()) == 4 and last < first
    start_logits, end_logits = run_squad.create_model(config, False, batch["input_ids"], batch["input_mask"],
                                                      batch["segment_ids"], False)
    assert start_logits.shape == end_logits.shape == (8, 128)
    assert not np.array_equal(modeling.trainable_variables()[-1].numpy(), weights["cls/squad/output_bias"])
