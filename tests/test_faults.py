"""Faults and bad input: nothing hangs, nothing is lost, nothing is silently wrong, a user error is one line.

Scripts run as a user runs them (a fresh process, TF_CPP_MIN_LOG_LEVEL unset): a user error ends with exit
status 2 and one line `error: ...` naming the flag or file, no traceback, no folder left behind.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import cli
import encoder
import records
import run_classifier as rc
import run_pretraining as rp
import serving
import training
from model_options import ModelOptions
from tests import tiny
from tests.processes import ROOT, assert_user_error, run_script, script_env, user_error
from tests.shared_data import pretraining_records, shared_path, vocab


def tiny_config_file(path, **overrides):
    """A one-layer model of 32 with two token types."""
    return tiny.config_file(path, num_hidden_layers=1, type_vocab_size=2, **overrides)


# ---------------------------------------------------------------------------------------------------------
# One line for a user error, none of TensorFlow's start-up noise.


@pytest.mark.slow
def test_bad_classifier_inputs_are_one_line_and_leave_no_folder(tmp_path):
    """run_classifier.py's user errors, each one line naming the flag or file, before --output_dir is made. The
    script's process as a user runs it for the first (and with --verbosity=1, its traceback for a bug report); the
    others through cli's same steps in this process (tests/processes.py's user_error)."""
    out = tmp_path / "out"
    assert_user_error(run_script("run_classifier.py", *tiny.classifier_flags(tmp_path, task_name="mrcp")),
                      "Task not found: 'mrcp' (--task_name)")

    def assert_error(*parts, **flags):
        last = user_error(rc.ClassifierOptions, rc.run, *tiny.classifier_flags(tmp_path, **flags))
        for part in parts:
            assert part in last, (part, last)

    assert_error("--data_dir=", "nowhere: no such folder", data_dir=tmp_path / "nowhere")
    assert_error("nov.txt does not exist", vocab_file=tmp_path / "nov.txt")
    no_cls = tmp_path / "no_cls.txt"
    no_cls.write_text("".join(t + "\n" for t in open(vocab(), encoding="utf-8").read().split("\n")[:30522]
                              if t != "[CLS]"))
    assert_error("no_cls.txt", "[CLS]", vocab_file=no_cls)
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    assert_error("--output_dir=", "a_file is a file", output_dir=blocker / "out")
    bad_dev = b"Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tcaf\xe9\tb\n"
    bad_dir = tiny.mrpc_subset(tmp_path / "bad_mrpc", dev_bytes=bad_dev)
    assert_error("dev.tsv line 2: not valid UTF-8", data_dir=bad_dir)
    config = tiny_config_file(tmp_path / "no_layers.json")
    with open(config) as f:
        values = json.load(f)
    del values["num_hidden_layers"]
    with open(config, "w") as f:
        json.dump(values, f)
    assert_error("no_layers.json: required key(s) `num_hidden_layers` missing", bert_config_file=config)
    assert_error("--shuffle_buffer_size=-5: expected 0 (all training records) or a positive number",
                 shuffle_buffer_size="-5")
    assert_error("--output_dropout_prob=1.5: expected a probability in [0, 1)", output_dropout_prob="1.5")
    assert not out.exists(), "a failed check left --output_dir behind"
    # --verbosity=1 (or BERT_TRACEBACK=1) shows the traceback for a bug report.
    shown = run_script("run_classifier.py", *tiny.classifier_flags(tmp_path, task_name="mrcp"), "--verbosity=1")
    assert shown.returncode != 0 and "Traceback" in shown.stderr and "Task not found" in shown.stderr


@pytest.mark.slow
def test_tensorflow_start_up_noise_is_not_printed(tmp_path):
    proc = run_script("run_classifier.py", *tiny.classifier_flags(tmp_path, do_eval="false", do_train="true",
                                                             train_batch_size="8", num_train_epochs="0.5",
                                                             use_xla="true"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for noise in ("cuInit", "absl::InitializeLog", "Compiled cluster using XLA", "oneDNN custom operations",
                  "cpu_feature_guard"):
        assert noise not in proc.stderr, noise
    assert "Training done at global step 2" in proc.stderr  # progress stays on the console
    # A user who sets the level sees TensorFlow's own lines again (which ones depends on the machine: oneDNN's
    # only where it is on by default, as on AVX-512 CPUs; the CPU feature guard where the build lacks some).
    shown = run_script("run_classifier.py", *tiny.classifier_flags(tmp_path, output_dir=tmp_path / "o2"),
                       TF_CPP_MIN_LOG_LEVEL="0")
    # TensorFlow 2.20's own format, and TensorFlow 2.21's (absl's: "I0000 00:00:1795726218.601252  8025 port.cc:153]").
    tensorflow_lines = re.findall(r"^(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWE] |[IWE]\d{4} \d\d:\d\d:[\d.]+ +\d+ )"
                                  r"\S+\.cc:\d+\]", shown.stderr, re.M)
    assert tensorflow_lines, shown.stderr[-3000:]


@pytest.mark.slow
def test_extract_features_and_create_pretraining_data_bad_input(tmp_path):
    text = tmp_path / "input.txt"
    text.write_bytes(b"hello world\nbad \xff byte\n")
    proc = run_script("extract_features.py", f"--input_file={text}", f"--output_file={tmp_path / 'o.jsonl'}",
                      "--layers=-1,-2",
                      f"--vocab_file={vocab()}",
                      f"--bert_config_file={shared_path('reference', 'original_checkpoint_tiny', 'bert_config.json')}",
                      "--init_checkpoint=" + os.path.join(shared_path("reference", "original_checkpoint_tiny"),
                                                          "model.ckpt-30"))
    assert_user_error(proc, "--input_file=", "input.txt line 2: not valid UTF-8")
    # Fast mode: a missing output folder is created; a non-UTF-8 byte is one line from the worker pool.
    corpus = shared_path("data", "text", "sample_text.txt")
    shards = tmp_path / "shards" / "deeper" / "tf_examples.tfrecord"
    proc = run_script("create_pretraining_data.py", f"--input_file={corpus}", f"--output_file={shards}",
                      f"--vocab_file={vocab()}", "--num_workers=2", "--dupe_factor=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(os.listdir(shards.parent)) == [f"tf_examples.tfrecord-0000{i}-of-00002" for i in range(2)]
    broken = tmp_path / "broken.txt"
    broken.write_bytes(open(corpus, "rb").read().replace(b"Text should be one-sentence-per-line",
                                                         b"Text should be \xc3\x28 per line"))
    proc = run_script("create_pretraining_data.py", f"--input_file={broken}", f"--output_file={tmp_path / 'x'}",
                      f"--vocab_file={vocab()}", "--num_workers=2", "--dupe_factor=1")
    assert_user_error(proc, "broken.txt line 2: not valid UTF-8 (invalid continuation byte at byte 125)")


# ---------------------------------------------------------------------------------------------------------
# Pre-training input: empty and corrupt records.


def _pretraining_args(config_file, output_dir, input_file, steps=4):
    return [f"--bert_config_file={config_file}", f"--input_file={input_file}", f"--output_dir={output_dir}",
            "--do_train", "--train_batch_size=8", f"--num_train_steps={steps}", "--num_warmup_steps=0",
            "--save_checkpoints_steps=2", "--iterations_per_loop=2"]


@pytest.mark.slow
def test_empty_and_corrupt_pretraining_records(tmp_path):
    """run_pretraining.py on records it cannot read: one line naming the file (and where a record breaks), the
    checkpoints written so far kept. The script's process for corrupt records; an empty file and truncated records
    through cli's same steps in this process."""
    config = tiny_config_file(tmp_path / "bert_config.json")
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    last = user_error(rp.PretrainingOptions, rp.run, *_pretraining_args(config, tmp_path / "out", empty))
    assert "--input_file: no records in" in last and "empty.tfrecord" in last, last
    data = open(pretraining_records(), "rb").read()
    corrupt = tmp_path / "corrupt.tfrecord"
    damaged = bytearray(data)
    damaged[len(data) // 3] ^= 0xFF
    corrupt.write_bytes(bytes(damaged))
    proc = run_script("run_pretraining.py", *_pretraining_args(config, tmp_path / "out2", corrupt, steps=40))
    last = assert_user_error(proc, "corrupt.tfrecord: corrupt or truncated TFRecord data after record")
    assert "checkpoints written so far are kept" in last
    assert re.search(r"\(corrupted record at byte \d+\)", last), last
    truncated = tmp_path / "truncated.tfrecord"
    truncated.write_bytes(data[:len(data) // 2])
    last = user_error(rp.PretrainingOptions, rp.run, *_pretraining_args(config, tmp_path / "out3", truncated,
                                                                         steps=40))
    assert "truncated.tfrecord" in last and "truncated record" in last, last
    assert re.search(r"\(truncated record at byte \d+: Read less bytes than requested\)", last), last
    assert rp.records.find_corrupt_record([pretraining_records(), str(truncated)])[:2] == (str(truncated), 58)


# ---------------------------------------------------------------------------------------------------------
# Checkpoints: resume from the newest that reads back whole, never start over, clean up, fail safely.


def _tiny_train(output_dir, steps, init_checkpoint=None):
    config = training.TrainingConfig(output_dir=str(output_dir), train_batch_size=8, learning_rate=1e-3,
                                     num_train_steps=steps, num_warmup_steps=0, save_checkpoints_steps=20,
                                     iterations_per_loop=20, deterministic=True)
    bert_config = encoder.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=64, type_vocab_size=2)
    input_fn = rp.pretraining_input_fn([pretraining_records()], records.pretraining(128, 20), is_training=True,
                                       seed=config.seed)
    return training.train(rp.PretrainingTask(bert_config), input_fn, config, init_checkpoint=init_checkpoint)


def _files(folder):
    return {name: open(os.path.join(folder, name), "rb").read() for name in sorted(os.listdir(folder))
            if name.startswith("model.ckpt-") and not name.startswith("model.ckpt-60") and "tempstate" not in name}


@pytest.mark.slow
def test_damaged_newest_checkpoint_resumes_from_the_previous_one(tmp_path, caplog):
    straight = tmp_path / "straight"
    _tiny_train(straight, 60)
    reference = checkpoints.load_checkpoint(str(straight / "model.ckpt-60"))
    for damage in ("delete_index", "truncate_data"):
        run = tmp_path / damage
        shutil.copytree(straight, run)
        if damage == "delete_index":
            os.remove(run / "model.ckpt-60.index")
        else:
            data = run / "model.ckpt-60.data-00000-of-00001"
            data.write_bytes(data.read_bytes()[:1000])
        (run / "model.ckpt-40.data-00000-of-00001.tempstate123").write_bytes(b"partial")
        older = _files(run)
        caplog.clear()
        result = _tiny_train(run, 60, init_checkpoint=str(tmp_path / "nowhere"))
        assert result["global_step"] == 60
        assert "model.ckpt-60 does not read back whole" in caplog.text
        assert "Resumed from %s" % (run / "model.ckpt-40") in caplog.text
        assert _files(run) == older, "an older checkpoint was rewritten"
        assert not list(run.glob("*tempstate*"))
        assert list(run.glob("model.ckpt-60.broken-*")), "the damaged checkpoint was not kept"
        resumed = checkpoints.load_checkpoint(str(run / "model.ckpt-60"))
        for name in reference:
            np.testing.assert_array_equal(resumed[name], reference[name], err_msg=name)


def test_unreadable_checkpoints_are_an_error_not_a_fresh_start(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "model.ckpt-20.data-00000-of-00001").write_bytes(b"garbage")
    (run / "model.ckpt-20.index").write_bytes(b"garbage")
    with pytest.raises(cli.UserError, match="holds checkpoints of its own but none reads back whole"):
        _tiny_train(run, 40)
    assert sorted(os.listdir(run)) == ["model.ckpt-20.data-00000-of-00001", "model.ckpt-20.index"]
    with pytest.raises(cli.UserError, match="holds checkpoint files but none reads back whole"):
        checkpoints.checkpoint_for_inference(str(run), None)


def test_failed_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    manager = checkpoints.CheckpointManager(str(tmp_path))
    variables = {"global_step": tf.Variable(3, dtype=tf.int64), "w": tf.Variable([1.0, 2.0])}
    manager.save(variables, 3)
    state = (tmp_path / "checkpoint").read_text()

    def full_disk(prefix, tensors_by_name):
        (tmp_path / "model.ckpt-6.data-00000-of-00001.tempstate99").write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoints, "save_checkpoint", full_disk)
    with pytest.raises(cli.UserError, match=r"cannot write checkpoint .*model.ckpt-6: .*No space left on device; "
                                            r"the previous checkpoint .*model.ckpt-3 is intact"):
        manager.save(variables, 6)
    assert (tmp_path / "checkpoint").read_text() == state
    assert not list(tmp_path.glob("*tempstate*"))
    assert checkpoints.CheckpointManager(str(tmp_path)).latest_checkpoint() == str(tmp_path / "model.ckpt-3")


_KILL_DURING_SAVE = r"""
import os, signal, sys
sys.path.insert(0, sys.argv[1])
import checkpoints
original_save, original_write = checkpoints.save_checkpoint, checkpoints._write_atomic
where = sys.argv[2]

def save(prefix, tensors):
    if prefix.endswith("model.ckpt-20") and where == "data":
        with open(prefix + ".data-00000-of-00001.tempstate8", "wb") as f:
            f.write(b"half a tensor")
        os.kill(os.getpid(), signal.SIGKILL)
    return original_save(prefix, tensors)

def write_state(path, text):
    if "model.ckpt-20" in text and where == "state":
        os.kill(os.getpid(), signal.SIGKILL)
    return original_write(path, text)

checkpoints.save_checkpoint, checkpoints._write_atomic = save, write_state
sys.argv = [sys.argv[1] + "/run_pretraining.py"] + sys.argv[3:]
import run_pretraining
run_pretraining.cli.main(run_pretraining.PretrainingOptions, run_pretraining.run)
"""


@pytest.mark.slow
def test_kill_during_a_save_resumes_to_the_same_weights(tmp_path):
    config = tiny_config_file(tmp_path / "bert_config.json")
    args = ["--bert_config_file=" + config, "--input_file=" + pretraining_records(), "--do_train", "--train_batch_size=8",
            "--num_train_steps=30", "--num_warmup_steps=5", "--save_checkpoints_steps=10",
            "--iterations_per_loop=5", "--deterministic"]
    straight = tmp_path / "straight"
    assert run_script("run_pretraining.py", *args, f"--output_dir={straight}").returncode == 0
    script = tmp_path / "kill.py"
    script.write_text(_KILL_DURING_SAVE)
    for where in ("data", "state"):
        run = tmp_path / where
        killed = subprocess.run([sys.executable, str(script), ROOT, where] + args + [f"--output_dir={run}"],
                                capture_output=True, text=True, env=script_env(quiet=False), timeout=300)
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
        resumed = run_script("run_pretraining.py", *args, f"--output_dir={run}")
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        expected_from = "model.ckpt-10" if where == "data" else "model.ckpt-20"
        assert "Resumed from %s" % (run / expected_from) in resumed.stderr
        assert not list(run.glob("*tempstate*"))
        a = checkpoints.load_checkpoint(str(straight / "model.ckpt-30"))
        b = checkpoints.load_checkpoint(str(run / "model.ckpt-30"))
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=f"{where}: {name}")


# ---------------------------------------------------------------------------------------------------------
# Silently wrong inputs.


def test_config_without_a_size_key_is_refused_by_name(tmp_path):
    for key in encoder.REQUIRED_KEYS:
        path = tiny_config_file(tmp_path / f"{key}.json")
        with open(path) as f:
            values = json.load(f)
        del values[key]
        with open(path, "w") as f:
            json.dump(values, f)
        with pytest.raises(cli.UserError, match=f"required key\\(s\\) `{key}` missing"):
            encoder.BertConfig.load(path)


def test_checkpoint_lacking_encoder_variables_is_an_error(tmp_path):
    folder = shared_path("reference", "original_checkpoint_tiny")
    config = encoder.BertConfig.from_json_file(os.path.join(folder, "bert_config.json"))
    deeper = encoder.BertConfig(**dict(config.to_dict(), num_hidden_layers=config.num_hidden_layers + 1))
    model = encoder.ClassifierModel(deeper, 2)
    with pytest.raises(cli.UserError, match=r"lacks 16 encoder variable\(s\) of the model: "
                                            r"bert/encoder/layer_2/attention/self/query/kernel"):
        checkpoints.init_from_checkpoint(model.variables_by_name(), os.path.join(folder, "model.ckpt-30"))
    loaded, new, _ = checkpoints.init_from_checkpoint(encoder.ClassifierModel(config, 2).variables_by_name(),
                                                      os.path.join(folder, "model.ckpt-30"))
    assert new == ["output_weights", "output_bias"] and loaded


@pytest.mark.slow
def test_exported_signature_checks_its_inputs(tmp_path):
    config = encoder.BertConfig(vocab_size=40, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=16, max_position_embeddings=64, type_vocab_size=2)
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("".join(t + "\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] +
                                  [f"w{i}" for i in range(36)]))
    model = encoder.ClassifierModel(config, 2)
    export = serving.ClassifierServing(model, ModelOptions(vocab_file=str(vocab_file), max_seq_length=16), False, True)
    tf.saved_model.save(export, str(tmp_path / "sm"), signatures=export.signatures())
    serve = tf.saved_model.load(str(tmp_path / "sm")).signatures["serving_default"]
    ids = tf.constant([[2, 5, 3] + [0] * 29] * 2, tf.int32)
    ones = tf.ones_like(ids)
    assert serve(input_ids=ids, input_mask=ones, segment_ids=tf.zeros_like(ids))["probabilities"].shape == (2, 2)
    bad = [(dict(input_mask=tf.zeros([2, 16], tf.int32)), "input_mask must have the shape of input_ids"),
           (dict(segment_ids=tf.ones([2, 31], tf.int32)), "segment_ids must have the shape of input_ids"),
           (dict(segment_ids=ones * 2), "segment_ids must be < type_vocab_size 2"),
           (dict(input_ids=ids + 40), "input_ids must be < vocab_size 40"),
           (dict(input_ids=ids - 3), "input_ids must be >= 0")]
    for override, message in bad:
        inputs = dict(input_ids=ids, input_mask=ones, segment_ids=tf.zeros_like(ids))
        inputs.update(override)
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            serve(**inputs)


# ---------------------------------------------------------------------------------------------------------
# Tokenizers: 100,000 random strings.


