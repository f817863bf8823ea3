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
import sys

import numpy as np
import pytest

import checkpoints
from tests.cluster import run_workers, worker_env
from tests.shared_data import shared_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_CONFIG = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=64, max_position_embeddings=128)
WRITES = re.compile(r"(?:Wrote \d+ records to|Wrote|Saved checkpoint|Exported \S+ to) (\S+)")


def _head(src, dst, lines):
    with open(src, encoding="utf-8") as f:
        text = "".join(f.readlines()[:lines])
    with open(dst, "w", encoding="utf-8") as f:
        f.write(text)


def _two_workers(command):
    """Runs command as workers 0 (the chief) and 1 of a two-worker cluster; returns their logs."""
    statuses, logs = run_workers(command, 2, cwd=ROOT)
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
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps(TINY_CONFIG))
    vocab = shared_path("vocab", "uncased", "vocab.txt")
    common = [sys.executable, os.path.join(ROOT, script), f"--vocab_file={vocab}", f"--bert_config_file={config}",
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
    one = subprocess.run(common + inference_flags + [f"--init_checkpoint={os.path.join(multi, state)}",
                                                     f"--output_dir={single}", "--distribution_strategy=mirrored"],
                         cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    assert _files(single, outputs) == _files(multi, outputs)


@pytest.mark.both_tf
@pytest.mark.slow
def test_classifier_two_workers(tmp_path):
    data = tmp_path / "mrpc"
    data.mkdir()
    for split, lines in (("train", 65), ("dev", 33), ("test", 33)):
        _head(shared_path("data", "glue", "MRPC", f"{split}.tsv"), data / f"{split}.tsv", lines)
    _check(tmp_path, "run_classifier.py", ["--task_name=MRPC", f"--data_dir={data}", "--max_seq_length=32"],
           ["--do_train", "--num_train_epochs=1"], ["--do_eval", "--do_predict"],
           ["eval_results.txt", "test_results.tsv"])


@pytest.mark.second_tf
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


@pytest.mark.second_tf
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


@pytest.mark.second_tf
@pytest.mark.slow
def test_pretraining_two_workers_in_float16_with_xla(tmp_path):
    """run_pretraining.py on two workers with --dtype=float16 (dynamic loss scaling) and --use_xla=true: both
    once ended in merge_call errors (the update inside the XLA step and inside the loss scaling's tf.cond, the
    batch's all-reduce inside the XLA step). Three steps, every one applied on both workers."""
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps(TINY_CONFIG))
    out = tmp_path / "out"
    logs = _two_workers([
        sys.executable, os.path.join(ROOT, "run_pretraining.py"), "--do_train",
        "--input_file=" + shared_path("reference", "pretraining_data", "sample_text_default.tfrecord"),
        f"--output_dir={out}", f"--bert_config_file={config}", "--train_batch_size=8", "--max_seq_length=128",
        "--max_predictions_per_seq=20", "--num_train_steps=3", "--num_warmup_steps=0", "--iterations_per_loop=3",
        "--dtype=float16", "--use_xla=true", "--distribution_strategy=multi_worker_mirrored"])
    for log in logs:
        assert "step 3/3: loss = " in log and "loss_scale = 32768" in log, log[-3000:]
    saved = checkpoints.load_checkpoint(str(out / "model.ckpt-3"))
    assert int(saved["global_step"]) == 3 and int(saved["loss_scale_good_steps"]) == 3


def _line_steps(log):
    return [int(step) for step in re.findall(r"training\.py:\d+\] step (\d+)/\d+: loss = ", log)]


@pytest.mark.both_tf
@pytest.mark.slow
def test_two_workers_end_the_loops_a_due_progress_line_cuts_short_together(tmp_path):
    """run_pretraining.py on two workers whose progress lines come due at different times (--log_every_secs=0.3 on
    the chief, 1000 on the other): every loop the chief's clock cuts short ends after the same step on both (agreed
    in the preemption notice's all-reduce; a worker leaving its loop alone would wait in a collective the other
    never joins), the other worker logs its line there too, and the weights equal those of the same two workers
    without the cuts, bit for bit."""
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps(TINY_CONFIG))

    def run(name, per_worker=None):
        out = tmp_path / name
        statuses, logs = run_workers([
            sys.executable, os.path.join(ROOT, "run_pretraining.py"), "--do_train",
            "--input_file=" + shared_path("reference", "pretraining_data", "sample_text_default.tfrecord"),
            f"--output_dir={out}", f"--bert_config_file={config}", "--train_batch_size=8", "--max_seq_length=128",
            "--max_predictions_per_seq=20", "--num_train_steps=30", "--num_warmup_steps=0", "--deterministic"],
            2, cwd=ROOT, per_worker=per_worker)
        assert statuses == [0, 0], [log[-3000:] for log in logs]
        return logs, checkpoints.load_checkpoint(str(out / "model.ckpt-30"))

    (chief, worker), cut = run("cut", [["--log_every_secs=0.3"], ["--log_every_secs=1000"]])
    chief_steps, worker_steps = _line_steps(chief), _line_steps(worker)
    assert len(worker_steps) >= 5 and worker_steps[-1] == 30, worker[-3000:]  # the chief's cuts, not its own
    assert set(worker_steps) <= set(chief_steps), (chief_steps, worker_steps)
    _, plain = run("plain")
    assert sorted(cut) == sorted(plain) and int(cut["global_step"]) == 30
    for name in cut:
        np.testing.assert_array_equal(cut[name], plain[name], err_msg=name)
