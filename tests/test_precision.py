"""The elementwise dtype of a mixed-precision model (the models' elementwise_dtype, --elementwise_dtype): float32
(a CPU's) and compute (a GPU's) give the same model to half precision's rounding, forward and in training (which
the device decides: tests/test_device_setup.py)."""
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import encoder
import run_pretraining as rp
import training
from tests import tiny

pytestmark = pytest.mark.usefixtures("float32_policy")


def test_compute_runs_the_dense_layers_bias_and_activation_in_bfloat16():
    keras.config.set_dtype_policy("mixed_bfloat16")
    dense = encoder.Dense(16, "gelu", elementwise_dtype="compute", name="d")
    dense.build((None, 8))
    dense.bias.assign(tf.random.stateless_normal([16], seed=[3, 4]) * 0.37)
    x = tf.cast(tf.random.stateless_normal([4, 8], seed=[1, 2]), tf.bfloat16)
    product = tf.matmul(x, tf.cast(dense.kernel, tf.bfloat16))
    expected = encoder.gelu(product + tf.cast(dense.bias, tf.bfloat16))
    np.testing.assert_array_equal(dense(x).numpy().astype(np.float32), expected.numpy().astype(np.float32))


def _config(dropout=0.0):
    return encoder.BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=128, hidden_dropout_prob=dropout,
                              attention_probs_dropout_prob=dropout)


def test_the_loop_builds_the_model_with_the_configs_elementwise_dtype(tmp_path):
    """The elementwise dtype the device decided (the config's) reaches every layer that has one."""
    config = training.TrainingConfig(output_dir=str(tmp_path), dtype="bfloat16", elementwise_dtype="compute")
    model = training.build_training_state(rp.PretrainingTask(_config()), config, tf.distribute.get_strategy())[0]
    layers = [model.bert, model.bert.pooler, model.mlm_head.transform]
    for layer in model.bert.encoder_layers:
        layers += [layer, layer.intermediate]
    assert {layer.elementwise_dtype for layer in layers} == {"compute"}
    assert rp.PretrainingTask(_config()).build_model().bert.elementwise_dtype == "float32"


@pytest.mark.parametrize("dtype, rounding", [("bfloat16", 0.05), ("float16", 0.005)])
def test_both_elementwise_dtypes_give_the_float32_model_to_half_precisions_rounding(dtype, rounding):
    """The same weights, three ways: float32, and mixed `dtype` with each elementwise dtype. The encoder's output
    (about 1 in size) agrees to `rounding` (measured: bf16 0.015, fp16 0.002), the masked-LM log probabilities to
    half of it, the loss to 1e-4."""
    tf.keras.utils.set_random_seed(3)
    model = rp.PretrainingTask(_config()).build_model()
    weights = {name: v.numpy() for name, v in model.variables_by_name().items()}
    features = next(iter(tiny.pretraining_input_fn()(8)))
    outputs = {"float32": model(features, training=False)}
    for elementwise in encoder.ELEMENTWISE_DTYPES:
        training.set_precision_policy(dtype)
        mixed = rp.PretrainingTask(_config()).build_model(elementwise)
        for name, variable in mixed.variables_by_name().items():
            variable.assign(weights[name])
        outputs[elementwise] = mixed(features, training=False)
    reference = outputs["float32"]
    for elementwise in encoder.ELEMENTWISE_DTYPES:
        got = outputs[elementwise]
        np.testing.assert_allclose(np.float32(got["sequence_output"]), reference["sequence_output"], atol=rounding,
                                   err_msg=elementwise)
        np.testing.assert_allclose(got["mlm_log_probs"], reference["mlm_log_probs"], atol=rounding / 2,
                                   err_msg=elementwise)
        assert float(got["total_loss"]) == pytest.approx(float(reference["total_loss"]), rel=1e-4)
    np.testing.assert_allclose(np.float32(outputs["compute"]["sequence_output"]),
                               np.float32(outputs["float32"]["sequence_output"]), atol=rounding)


@pytest.mark.slow
def test_both_elementwise_dtypes_train_alike_in_bfloat16(tmp_path):
    """30 steps of bf16 pre-training from one checkpoint, with dropout, under each elementwise dtype: the losses
    fall alike (the final loss within 1 % of each other's)."""
    losses = {}
    init = None
    for elementwise in encoder.ELEMENTWISE_DTYPES:
        config = training.TrainingConfig(output_dir=str(tmp_path / elementwise), train_batch_size=16,
                                         learning_rate=1e-3, num_train_steps=30, num_warmup_steps=0,
                                         log_step_count_steps=10, save_checkpoints_steps=100, dtype="bfloat16",
                                         elementwise_dtype=elementwise)
        result = training.train(rp.PretrainingTask(_config(0.1)), tiny.pretraining_input_fn(), config,
                                training.create_strategy(config), init)
        init = init or os.path.join(str(tmp_path / elementwise), "model.ckpt-0")
        losses[elementwise] = result["loss"]
    start = 11.0  # an untrained model's: masked-LM about log(30522), next-sentence about 0.69
    assert all(loss < start - 2.0 for loss in losses.values()), losses
    assert losses["compute"] == pytest.approx(losses["float32"], rel=0.01), losses  # measured: 6.273, 6.275
