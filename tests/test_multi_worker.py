"""Two workers (MultiWorkerMirroredStrategy over TF_CONFIG) on one output_dir: each fine-tuning runner's files
are written once, by the chief, and its evaluation and predictions are those of one worker with the same model.

Each runner trains, evaluates, predicts and exports with two worker processes of its command line; then one
process (mirrored on its one device) evaluates and predicts from the checkpoint the two wrote. The files must be
equal (the chief evaluates on its own devices, over the whole data), and every write the logs report ("Wrote",
"Saved checkpoint", "Exported") must come from the chief, the other worker's feature records going to a scratch
folder of its own.
"""
import json
import os
import re
import subprocess

import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import encoder
from tests import tiny
from tests.processes import ROOT, assert_ran, run_workers, script_command, script_env
from tests.shared_data import glue, pretraining_records, shared_path, vocab

WRITES = re.compile(r"(?:Wrote \d+ records to|Wrote|Saved checkpoint|Exported \S+ to) (\S+)")


def _head(src, dst, lines):
    with open(src, encoding="utf-8") as f:
        text = "".join(f.readlines()[:lines])
    with open(dst, "w", encoding="utf-8") as f:
        f.write(text)


def _two_workers(command):
    """Runs command as workers 0 (the chief) and 1 of a two-worker cluster; returns their logs."""
    statuses, logs = run_workers(command, 2)
    for status, log in zip(statuses, logs):
        assert status == 0, log[-3000:]
    return logs


def _files(folder, names):
    out = {}
    for name in names:
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            out[name] = f.read()
    return out


def _check(tmp_path, script, data_flags, train_flags, inference_flags, outputs):
    config = tiny.config_file(tmp_path / "bert_config.json")
    common = [*script_command(script), f"--vocab_file={vocab()}", f"--bert_config_file={config}",
              "--train_batch_size=8", "--eval_batch_size=8", "--predict_batch_size=8", "--save_checkpoints_steps=100",
              "--iterations_per_loop=100"] + data_flags
    multi = str(tmp_path / "multi")
    chief, worker = _two_workers(common + train_flags + inference_flags + [f"--output_dir={multi}",
                                                                           f"--export_dir={tmp_path / 'export'}"])
    chief_writes, worker_writes = WRITES.findall(chief), WRITES.findall(worker)
    written = [os.path.relpath(path, multi) for path in chief_writes if path.startswith(multi)]
    assert sorted(set(written)) == sorted(written), "a file written twice by the chief"
    assert set(outputs) <= set(written) and any(name.startswith("model.ckpt-") for name in written)
    assert any(path.startswith(str(tmp_path / "export")) for path in chief_writes)
    assert not [path for path in worker_writes if path.startswith((multi, str(tmp_path / "export")))], worker_writes
    if script != "run_ner.py":  # NER trains from arrays in memory; the others write training records
        assert [os.path.basename(path) for path in worker_writes] == ["train.tf_record"], worker_writes
    # The same model on one worker: the same evaluation and predictions.
    state = open(os.path.join(multi, "checkpoint")).readline().split('"')[1]
    single = str(tmp_path / "single")
    assert_ran(subprocess.run(common + inference_flags + [f"--init_checkpoint={os.path.join(multi, state)}",
                                                          f"--output_dir={single}", "--distribution_strategy=mirrored"],
                              cwd=ROOT, env=script_env(), capture_output=True, text=True, timeout=600))
    assert _files(single, outputs) == _files(multi, outputs)


@pytest.mark.slow
def test_classifier_two_workers(tmp_path):
    data = tmp_path / "mrpc"
    data.mkdir()
    for split, lines in (("train", 65), ("dev", 33), ("test", 33)):
        _head(os.path.join(glue("MRPC"), f"{split}.tsv"), data / f"{split}.tsv", lines)
    _check(tmp_path, "run_classifier.py", ["--task_name=MRPC", f"--data_dir={data}", "--max_seq_length=32"],
           ["--do_train", "--num_train_epochs=1"], ["--do_eval", "--do_predict"],
           ["eval_results.txt", "test_results.tsv"])


@pytest.mark.slow
def test_ner_two_workers(tmp_path):
    data = tmp_path / "conll"
    data.mkdir()
    for split in ("train", "dev", "test"):
        _head(shared_path("data", "conll2003", f"{split}.txt"), data / f"{split}.txt", 300)
    _check(tmp_path, "run_ner.py", [f"--data_dir={data}", "--max_seq_length=32"],
           ["--do_train", "--num_train_epochs=1"], ["--do_eval", "--do_predict"],
           ["label_list.txt", "eval_results.txt", "test_results.txt", "eval_predictions.txt", "test_predictions.txt",
            "eval_conlleval.txt", "test_conlleval.txt"])


@pytest.mark.slow
def test_squad_two_workers(tmp_path):
    with open(shared_path("data", "squad", "v1.1", "dev-v1.1.json"), encoding="utf-8") as f:
        squad = json.load(f)
    squad["data"] = [{"title": "t", "paragraphs": squad["data"][0]["paragraphs"][:3]}]
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(squad))
    _check(tmp_path, "run_squad.py", [f"--predict_file={path}", "--max_seq_length=64", "--doc_stride=32",
                                      "--max_query_length=16"],
           ["--do_train", f"--train_file={path}", "--train_first_answer", "--num_train_epochs=1"], ["--do_predict"],
           ["predictions.json", "nbest_predictions.json", "eval_results.json"])


# ---------------------------------------------------------------------------------------------------------
# run_pretraining.py (two workers stopped and resumed, ending their loops together: tests/test_preemption.py).


@pytest.mark.slow
def test_pretraining_two_workers_in_float16_with_xla(tmp_path):
    """run_pretraining.py on two workers with --dtype=float16 (dynamic loss scaling) and --use_xla=true: both
    once ended in merge_call errors (the update inside the XLA step and inside the loss scaling's tf.cond, the
    batch's all-reduce inside the XLA step). Three steps, every one applied on both workers."""
    config = tiny.config_file(tmp_path / "bert_config.json")
    out = tmp_path / "out"
    logs = _two_workers(script_command(
        "run_pretraining.py", "--do_train", f"--input_file={pretraining_records()}", f"--output_dir={out}",
        f"--bert_config_file={config}", "--train_batch_size=8", "--max_seq_length=128",
        "--max_predictions_per_seq=20", "--num_train_steps=3", "--num_warmup_steps=0", "--iterations_per_loop=3",
        "--dtype=float16", "--use_xla=true"))
    for log in logs:
        assert "step 3/3: loss = " in log and "loss_scale = 32768" in log, log[-3000:]
    saved = checkpoints.load_checkpoint(str(out / "model.ckpt-3"))
    assert int(saved["global_step"]) == 3 and int(saved["loss_scale_good_steps"]) == 3


@pytest.mark.slow
def test_two_workers_equal_one_worker_with_the_same_global_batch(tmp_path):
    """run_pretraining.py's command line as two workers (multi_worker_mirrored, TF_CONFIG) and as one (mirrored on
    its one device): the same weights for the same global batch (dropout off: its masks are drawn per replica),
    checkpoints written by the chief alone."""
    values = dict(num_hidden_layers=1, max_position_embeddings=512, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0)
    config_file = tiny.config_file(tmp_path / "bert_config.json", **values)
    init_dir = str(tmp_path / "init")
    with tf.device("/cpu:0"):
        model = encoder.PretrainingModel(tiny.config(**values))
    checkpoints.CheckpointManager(init_dir).save(model.variables_by_name(), 0)
    flags = [f"--init_checkpoint={os.path.join(init_dir, 'model.ckpt-0')}", "--save_checkpoints_steps=10",
             "--iterations_per_loop=2"]
    assert_ran(subprocess.run(tiny.pretraining_command(config_file, tmp_path / "single", 4, *flags,
                                                       "--distribution_strategy=mirrored", warmup=0),
                              env=script_env(), cwd=ROOT, capture_output=True, text=True, timeout=300))
    statuses, logs = run_workers(tiny.pretraining_command(config_file, tmp_path / "multi", 4, *flags, warmup=0),
                                 timeout=300)
    assert statuses == [0, 0], [log[-3000:] for log in logs]
    assert "Saved checkpoint" in logs[0] and "Saved checkpoint" not in logs[1]
    one = checkpoints.load_checkpoint(os.path.join(tmp_path / "single", "model.ckpt-4"))
    two = checkpoints.load_checkpoint(os.path.join(tmp_path / "multi", "model.ckpt-4"))
    assert sorted(one) == sorted(two) and int(two["global_step"]) == 4
    assert len([name for name in one if "adam" not in name and name != "global_step"]) == len(
        model.variables_by_name())
    for name in one:
        np.testing.assert_allclose(two[name], one[name], rtol=1e-5, atol=1e-6, err_msg=name)
