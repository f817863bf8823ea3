"""runner.py: parallel tokenization, real-length prediction, XLA's bucketed widths (the model's checks before
anything is written: tests/test_model_options.py; record files: tests/test_records.py)."""
import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import cli
import encoder
import packing
import run_classifier as rc
import runner
import tokenization
import training
from tests.shared_data import shared_path


@pytest.fixture(scope="module")
def tokenizer():
    return tokenization.FullTokenizer(shared_path("vocab", "uncased", "vocab.txt"), do_lower_case=True)


def test_parallel_tokenization_equals_one_process(tokenizer):
    examples = rc.MrpcProcessor().get_dev_examples(shared_path("data", "glue", "MRPC"))
    texts = [e.text_a for e in examples] * 6 + ["", None]
    one = tokenization.tokenize_in_processes(texts, tokenizer)
    two = tokenization.tokenize_in_processes(texts, tokenizer, num_workers=2, chunk_size=300)
    assert one == two and one[-2:] == [[], []] and len(one) == len(texts)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_real_length_batches_give_the_full_length_outputs(tokenizer, dtype, tmp_path):
    """MRPC dev pairs average about a third of max_seq_length 128: sorted, cut batches give the outputs of
    full-length batches in input order (to float rounding, as between batch sizes), and the same classes."""
    examples = rc.MrpcProcessor().get_dev_examples(shared_path("data", "glue", "MRPC"))
    arrays = rc.examples_to_arrays(examples, ["0", "1"], 128, tokenizer, log_examples=0)
    assert arrays["input_mask"].sum(1).mean() < 64
    config = encoder.BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=128, initializer_range=0.2)
    task = rc.ClassifierTask(config, 2)
    tf.keras.utils.set_random_seed(5)  # the same random model whatever ran before
    model = task.build_model()
    model.head.output_weights.assign(model.head.output_weights * 20.0)  # probabilities far apart
    checkpoint = checkpoints.CheckpointManager(str(tmp_path)).save(model.variables_by_name(), 0)
    predict_config = training.TrainingConfig(predict_batch_size=16, dtype=dtype)
    training.set_precision_policy(dtype)
    try:
        real = runner.predict_arrays(task, arrays, predict_config, checkpoint_path=checkpoint)
        full = runner.predict_arrays(task, arrays, predict_config, checkpoint_path=checkpoint, real_lengths=False)
    finally:
        training.set_precision_policy("float32")
    assert real["probabilities"].shape == (408, 2)
    assert full["probabilities"][:, 1].std() > 0.01  # the random model tells the pairs apart
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    np.testing.assert_allclose(real["probabilities"], full["probabilities"], atol=tolerance, rtol=0)
    np.testing.assert_allclose(real["per_example_loss"], full["per_example_loss"], atol=tolerance * 10, rtol=0)
    agree = (real["probabilities"].argmax(1) == full["probabilities"].argmax(1)).mean()
    assert agree == 1.0 if dtype == "float32" else agree > 0.97
    np.testing.assert_array_equal(real["is_real_example"], arrays["is_real_example"])


def test_under_xla_prediction_cuts_batches_to_a_few_widths_with_the_full_length_outputs(tokenizer, tmp_path):
    """Under XLA (one compile per input shape) the sorted batches are cut to the bucket of their longest sequence
    (packing.bucket_widths), not to every multiple of 8: a few shapes, the outputs of full-length batches."""
    examples = rc.MrpcProcessor().get_dev_examples(shared_path("data", "glue", "MRPC"))
    arrays = rc.examples_to_arrays(examples, ["0", "1"], 128, tokenizer, log_examples=0)
    buckets = packing.bucket_widths(128)
    assert buckets == [32, 64, 128]
    order = np.argsort(-arrays["input_mask"].sum(1), kind="stable")
    batches = runner.array_input_fn({k: v[order] for k, v in arrays.items()}, False, buckets=buckets)(16)
    widths = [int(batch["input_ids"].shape[1]) for batch in batches]
    assert set(widths) == {128, 64, 32}, widths  # MRPC dev: 7 to 103 pieces
    config = encoder.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=64, initializer_range=0.2)
    task = rc.ClassifierTask(config, 2)
    tf.keras.utils.set_random_seed(5)
    model = task.build_model()
    model.head.output_weights.assign(model.head.output_weights * 20.0)
    checkpoint = checkpoints.CheckpointManager(str(tmp_path)).save(model.variables_by_name(), 0)
    xla = runner.predict_arrays(task, arrays, training.TrainingConfig(predict_batch_size=16, use_xla=True),
                                checkpoint_path=checkpoint)
    full = runner.predict_arrays(task, arrays, training.TrainingConfig(predict_batch_size=16, use_xla=False),
                                 checkpoint_path=checkpoint, real_lengths=False)
    assert full["probabilities"][:, 1].std() > 0.01
    np.testing.assert_allclose(xla["probabilities"], full["probabilities"], atol=1e-5, rtol=0)
    np.testing.assert_array_equal(xla["is_real_example"], arrays["is_real_example"])


def test_output_dropout_prob_flag_reaches_the_output_layer():
    import run_ner
    config = encoder.BertConfig(vocab_size=30522, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=16)
    for options, task in ((rc.ClassifierOptions, lambda p: rc.ClassifierTask(config, 2, output_dropout=p)),
                          (run_ner.NerOptions, lambda p: run_ner.NerTask(config, 3, output_dropout=p))):
        assert options().output_dropout_prob == 0.1  # the original's keep_prob=0.9
        assert task(0.0).build_model().head.dropout == 0.0
        for bad in (1.0, -0.1):
            with pytest.raises(cli.UserError, match=r"--output_dropout_prob=%s: expected a probability in \[0, 1\)"
                               % bad):
                options(output_dropout_prob=bad)


def test_shuffle_buffer_size_flag(tmp_path):
    assert rc.ClassifierOptions().shuffle_buffer_size == 100  # the original's
    with pytest.raises(cli.UserError, match=r"--shuffle_buffer_size=-1: expected 0 \(all training records\) or a "
                                            "positive number of records"):
        rc.ClassifierOptions(shuffle_buffer_size=-1)
