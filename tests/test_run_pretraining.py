"""run_pretraining.py: input pipeline, the original's losses and update, convergence (killed, stopped and resumed runs:
tests/test_progress.py and tests/test_preemption.py; on two workers: tests/test_multi_worker.py)."""
import dataclasses
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import cli
import encoder
import filesystem
import records
import run_pretraining as rp
import training
from tests import tiny
from tests.shared_data import pretraining_records, vocab

def reference_batch():
    ref = np.load(os.path.join(tiny.original_dir(), "reference_outputs.npz"))
    return ref, {name: ref["in_" + name] for name in rp.FEATURE_NAMES}


# ---------------------------------------------------------------------------------------------------------
# Input pipeline.


def test_eval_input_is_the_records_in_order():
    ref, batch = reference_batch()
    input_fn = rp.pretraining_input_fn([pretraining_records()], records.pretraining(128, 20), is_training=False)
    batches = list(input_fn(8, None))
    assert sum(int(b["input_ids"].shape[0]) for b in batches) == 118
    for name, expected in batch.items():
        got = batches[0][name].numpy().reshape(expected.shape)
        np.testing.assert_array_equal(got, expected)
        assert batches[0][name].dtype == (tf.float32 if name == "masked_lm_weights" else tf.int32)


def test_training_input_is_deterministic_and_repeats():
    input_fn = rp.pretraining_input_fn([pretraining_records()], records.pretraining(128, 20), is_training=True, seed=7)
    first = [b["input_ids"].numpy() for b in input_fn(32, None).take(6)]
    second = [b["input_ids"].numpy() for b in input_fn(32, None).take(6)]
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    assert all(a.shape == (32, 128) for a in first)  # 6 x 32 > 118 records: repeats, full batches only
    assert not np.array_equal(first[0], first[1])


def test_record_not_matching_flags_names_file_and_feature():
    with pytest.raises(ValueError, match=r"sample_text_default.tfrecord.*masked_lm_positions.*10.*"
                                         r"max_predictions_per_seq"):
        rp.pretraining_input_fn([pretraining_records()], records.pretraining(128, 10), is_training=True)
    with pytest.raises(ValueError, match=r"sample_text_default.tfrecord.*input_ids.*max_seq_length"):
        rp.pretraining_input_fn([pretraining_records()], records.pretraining(64, 20), is_training=False)


def test_input_file_globs(tmp_path):
    records = pretraining_records()
    files = filesystem.input_files(f"{records}, {os.path.dirname(records)}/sample_text_*.tfrecord", "--input_file")
    assert files[0] == records and len(files) == 3
    with pytest.raises(ValueError, match="--input_file pattern .*nothing_here"):
        filesystem.input_files(str(tmp_path / "nothing_here*.tfrecord"), "--input_file")


def test_dynamic_masking_draws_new_masks():
    masker = rp.DynamicMasker(vocab(), 30522, 20, 0.15)
    input_fn = rp.pretraining_input_fn([pretraining_records()], records.pretraining(128, 20), is_training=True, seed=3)
    static = next(iter(input_fn(16, None)))
    original = rp.unmask_input_ids(static).numpy()
    assert (original != 103).all()  # every stored [MASK] restored to its original token
    dynamic = masker(static)
    ids, pos = dynamic["input_ids"].numpy(), dynamic["masked_lm_positions"].numpy()
    w, labels = dynamic["masked_lm_weights"].numpy(), dynamic["masked_lm_ids"].numpy()
    lengths = static["input_mask"].numpy().sum(1)
    assert not np.array_equal(pos, static["masked_lm_positions"].numpy())
    for row in range(16):
        sel = pos[row][w[row] > 0]
        assert 0 < len(sel) <= 20
        assert abs(len(sel) - 0.15 * (lengths[row] - 3)) <= 3  # [CLS], 2 x [SEP] never selected
        np.testing.assert_array_equal(labels[row][w[row] > 0], original[row][sel])
        assert (original[row][sel] != 101).all() and (original[row][sel] != 102).all()
        unmasked = np.setdiff1d(np.arange(128), sel)
        np.testing.assert_array_equal(ids[row][unmasked], original[row][unmasked])
    rows, cols = np.nonzero(w > 0)
    assert 0.6 < (ids[rows, pos[rows, cols]] == 103).mean() < 0.95  # 80% [MASK], 10% random, 10% kept
    with pytest.raises(ValueError, match="--vocab_file"):
        rp.DynamicMasker(None, 30522, 20)


# ---------------------------------------------------------------------------------------------------------
# The original's loss and update through the training loop.


def _copy_reference_checkpoint(output_dir):
    os.makedirs(output_dir, exist_ok=True)
    for name in os.listdir(tiny.original_dir()):
        if name.startswith("model.ckpt-30") or name == "checkpoint":
            shutil.copy(os.path.join(tiny.original_dir(), name), output_dir)


def test_first_step_loss_and_update_equal_the_original(tmp_path):
    """Resume from the original checkpoint (step 30, Adam slots) and train one step on the stored batch."""
    ref, batch = reference_batch()
    bert_config = encoder.BertConfig.from_json_file(os.path.join(tiny.original_dir(), "bert_config.json"))
    bert_config.hidden_dropout_prob = bert_config.attention_probs_dropout_prob = 0.0
    output_dir = str(tmp_path / "out")
    _copy_reference_checkpoint(output_dir)
    config = training.TrainingConfig(output_dir=output_dir, train_batch_size=8, learning_rate=1e-3,
                                     num_train_steps=100, num_warmup_steps=10, save_checkpoints_steps=1000)

    def input_fn(batch_size, input_context):
        assert batch_size == 8
        return tf.data.Dataset.from_tensors({k: tf.constant(v) for k, v in batch.items()}).repeat()

    result = training.train(rp.PretrainingTask(bert_config), input_fn, config, max_steps=31)
    assert result["global_step"] == 31
    np.testing.assert_allclose(result["loss"], ref["out_total_loss"], rtol=1e-6)
    np.testing.assert_allclose(result["masked_lm_loss"], ref["out_mlm_loss"], rtol=1e-6)
    np.testing.assert_allclose(result["next_sentence_loss"], ref["out_nsp_loss"], rtol=1e-6)
    after = checkpoints.load_checkpoint(os.path.join(output_dir, "model.ckpt-31"))
    compared = 0
    for key in ref.files:
        if not key.startswith("step_"):
            continue
        name = key[len("step_"):].replace("__rows0_500", "").replace("__", "/")
        name = name.replace("/adam/m", "/adam_m").replace("/adam/v", "/adam_v")
        got = after[name][:500] if key.endswith("__rows0_500") else after[name]
        np.testing.assert_allclose(got, ref[key], rtol=1e-4, atol=2e-6, err_msg=name)
        compared += 1
    assert compared == len([k for k in ref.files if k.startswith("step_")]) and compared > 90


@pytest.mark.slow
def test_100_steps_from_original_checkpoint_then_eval(tmp_path):
    """Continue the original checkpoint (global step 30, Adam slots) 100 steps, then eval: the masked LM has
    learnt (its loss down, its accuracy up against the eval of the checkpoint itself), eval_results.txt has the
    original's keys, and eval is reproducible run to run.

    Next-sentence prediction is left out: with this recipe (learning rate 1e-3, no warm-up) it is bimodal in the
    seed and in the CPU's kernels, for the original as for us. It either leaves its plateau (accuracy 0.95-1.0) or
    stays at the majority class (0.54); the original code run here under six graph seeds did the first 3 times of 6,
    ours too, and one CPU type gives the second mode for the default seed. (Here, after 100 steps: masked-LM loss
    5.65 -> 5.30, accuracy 0.030 -> 0.069.)"""
    output_dir = str(tmp_path / "out")
    _copy_reference_checkpoint(output_dir)
    options = cli.build_options(
        rp.PretrainingOptions, output_dir=output_dir,
        bert_config_file=os.path.join(tiny.original_dir(), "bert_config.json"), train_batch_size=32, eval_batch_size=8,
        learning_rate=1e-3, num_train_steps=130, num_warmup_steps=0, save_checkpoints_steps=130,
        iterations_per_loop=100, input_file=pretraining_records())
    before = rp.run(dataclasses.replace(options, do_eval=True))["eval"]
    assert before["global_step"] == 30
    result = rp.run(dataclasses.replace(options, do_train=True, do_eval=True))
    results = result["eval"]
    assert results["global_step"] == 130
    assert results["masked_lm_loss"] <= before["masked_lm_loss"] - 0.1, (before, results)
    assert results["masked_lm_accuracy"] >= 1.5 * before["masked_lm_accuracy"], (before, results)  # 0.030 -> 0.069
    lines = open(os.path.join(output_dir, "eval_results.txt")).read().splitlines()
    assert [line.split(" = ")[0] for line in lines] == [
        "global_step", "loss", "masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
        "next_sentence_loss"]
    assert lines[0] == "global_step = 130"
    # Eval is reproducible run to run.
    again = rp.run(dataclasses.replace(options, do_eval=True))["eval"]
    assert again == results
    assert open(os.path.join(output_dir, "eval_results.txt")).read().splitlines() == lines


def test_eval_metrics_are_the_originals_weighted_means(tmp_path):
    """masked_lm_accuracy weighted by masked_lm_weights, losses as means, loss = mean of batch losses."""
    ref, batch = reference_batch()
    path = str(tmp_path / "one.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for raw in tf.data.TFRecordDataset(pretraining_records()).take(8):
            writer.write(raw.numpy())
    results = rp.run(cli.build_options(
        rp.PretrainingOptions, output_dir=str(tmp_path / "out"),
        bert_config_file=os.path.join(tiny.original_dir(), "bert_config.json"),
        init_checkpoint=os.path.join(tiny.original_dir(), "model.ckpt-30"), eval_batch_size=8, input_file=path,
        do_eval=True))["eval"]
    w = ref["in_masked_lm_weights"].reshape(-1)
    np.testing.assert_allclose(results["masked_lm_loss"], np.sum(w * ref["out_mlm_example_loss"]) / w.sum(),
                               rtol=1e-5)
    np.testing.assert_allclose(results["next_sentence_loss"], ref["out_nsp_loss"], rtol=1e-5)
    np.testing.assert_allclose(results["loss"], ref["out_total_loss"], rtol=1e-5)
    nsp_pred = ref["out_nsp_log_probs"].argmax(-1)
    np.testing.assert_allclose(results["next_sentence_accuracy"],
                               np.mean(nsp_pred == ref["in_next_sentence_labels"].reshape(-1)))
    assert results["global_step"] == 30
