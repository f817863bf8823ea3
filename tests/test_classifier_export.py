"""run_classifier export: the SavedModel's two signatures equal --do_predict on MRPC dev, in a fresh process."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import cli
import modeling
import run_classifier as rc
from tests.shared_data import shared_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_SEQ_LENGTH = 64  # MRPC pairs go up to ~100 pieces: the text signature must truncate like the Python path

LOAD_SCRIPT = r"""
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # registers the tokenizer's ops
for name in ("run_classifier", "tokenization", "modeling"):
    try:
        __import__(name)
        raise SystemExit("the project is importable from the loading process: " + name)
    except ImportError:
        pass
export_dir, work = sys.argv[1], sys.argv[2]
loaded = tf.saved_model.load(export_dir)
print("signatures", sorted(loaded.signatures.keys()))
ids = np.load(work + "/features.npz")
by_ids = loaded.signatures["serving_default"](
    input_ids=tf.constant(ids["input_ids"]), input_mask=tf.constant(ids["input_mask"]),
    segment_ids=tf.constant(ids["segment_ids"]))
texts = json.load(open(work + "/texts.json", encoding="utf-8"))
by_text = loaded.signatures["serving_text"](text_a=tf.constant(texts["a"]), text_b=tf.constant(texts["b"]))
single = loaded.serve_ids(tf.constant(ids["input_ids"][:2]), tf.constant(ids["input_mask"][:2]),
                          tf.constant(ids["segment_ids"][:2]))
np.savez(work + "/outputs.npz", by_ids=by_ids["probabilities"].numpy(),
         by_text=by_text["probabilities"].numpy(), single=single["probabilities"].numpy(),
         labels=np.array([label.decode() for label in by_text["label"].numpy()]),
         id_labels=np.array([label.decode() for label in by_ids["label"].numpy()]),
         label_list=np.array([label.decode() for label in loaded.labels.numpy()]))
"""


def tiny_config_file(path):
    config = modeling.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64, max_position_embeddings=128, type_vocab_size=2,
                                 initializer_range=0.2)
    config.to_json_file(path)
    return config


@pytest.fixture(scope="module")
def mrpc_job(tmp_path_factory):
    """A tiny classifier checkpoint in output_dir and a data dir whose test.tsv is MRPC dev."""
    work = tmp_path_factory.mktemp("export")
    data_dir, output_dir = work / "data", work / "output"
    data_dir.mkdir()
    shutil.copy(os.path.join(shared_path("data", "glue", "MRPC"), "dev.tsv"), data_dir / "test.tsv")
    config_file = str(work / "bert_config.json")
    bert_config = tiny_config_file(config_file)
    tf.keras.utils.set_random_seed(7)
    model = rc.ClassifierTask(bert_config, 2).build_model()
    # Large weights (and initializer_range 0.2 above) so that the random model's probabilities differ
    # clearly from example to example.
    model.head.output_bias.assign([0.3, -0.2])
    model.head.output_weights.assign(model.head.output_weights * 20.0)
    checkpoints.CheckpointManager(str(output_dir)).save(model.variables_by_name(), 0)
    return {"work": work, "data_dir": str(data_dir), "output_dir": str(output_dir), "config_file": config_file,
            "vocab": shared_path("vocab", "uncased", "vocab.txt")}


def _options(job, **overrides):
    """The MRPC job's ClassifierOptions on mrpc_job's data, vocab, config and output; overrides: flat flags."""
    values = dict(task_name="mrpc", data_dir=job["data_dir"], vocab_file=job["vocab"], max_seq_length=MAX_SEQ_LENGTH,
                  output_dir=job["output_dir"], bert_config_file=job["config_file"], predict_batch_size=32,
                  eval_batch_size=32)
    values.update(overrides)
    return cli.build_options(rc.ClassifierOptions, **values)


@pytest.mark.slow
def test_signatures_equal_do_predict_in_a_fresh_process(mrpc_job):
    export_dir = str(mrpc_job["work"] / "saved_model")
    results = rc.run(_options(mrpc_job, do_predict=True, export_dir=export_dir))
    rows = [line.rstrip("\n").split("\t") for line in
            open(os.path.join(mrpc_job["output_dir"], "test_results.tsv"), encoding="utf-8")]
    assert len(rows) == 408 and rows == [r.split("\t") for r in results["predict"]]
    expected = np.array(rows, dtype=np.float64)
    np.testing.assert_allclose(expected.sum(1), 1.0, atol=1e-6)
    assert expected.std(0).max() > 0.03  # the tiny model does tell examples apart
    assert open(os.path.join(export_dir, "assets.extra", "labels.txt")).read() == "0\n1\n"

    examples = rc.MrpcProcessor().get_test_examples(mrpc_job["data_dir"])
    tokenizer = rc.tokenization.FullTokenizer(mrpc_job["vocab"], True)
    features = rc.examples_to_arrays(examples, ["0", "1"], MAX_SEQ_LENGTH, tokenizer)
    work = mrpc_job["work"]
    np.savez(str(work / "features.npz"),
             **{name: features[name].astype(np.int32) for name in ("input_ids", "input_mask", "segment_ids")})
    with open(work / "texts.json", "w", encoding="utf-8") as f:
        json.dump({"a": [e.text_a for e in examples], "b": [e.text_b for e in examples]}, f)
    script = work / "load.py"
    script.write_text(LOAD_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-I", str(script), export_dir, str(work)], cwd=str(work), env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "signatures ['serving_default', 'serving_text']" in proc.stdout
    outputs = np.load(str(work / "outputs.npz"))
    np.testing.assert_allclose(outputs["by_ids"], expected, atol=1e-5)
    np.testing.assert_allclose(outputs["by_text"], expected, atol=1e-5)
    np.testing.assert_allclose(outputs["single"], expected[:2], atol=1e-5)
    # The label strings come with the probabilities (MRPC's labels are "0" and "1").
    assert outputs["label_list"].tolist() == ["0", "1"]
    assert outputs["labels"].tolist() == outputs["id_labels"].tolist() == [str(i) for i in expected.argmax(1)]
    assert len(set(outputs["labels"].tolist())) == 2


@pytest.mark.slow
def test_predict_input_streams_stdin_with_one_model_load(mrpc_job, tmp_path):
    """--predict_input=- in a subprocess: every stdin line predicted, equal to test_results.tsv."""
    examples = rc.MrpcProcessor().get_test_examples(mrpc_job["data_dir"])[:20]
    output_dir = mrpc_job["output_dir"]
    if not os.path.exists(os.path.join(output_dir, "test_results.tsv")):
        rc.run(_options(mrpc_job, do_predict=True))
    expected = np.loadtxt(os.path.join(output_dir, "test_results.tsv"), delimiter="\t")[:20]
    stdin = "".join("%s\t%s\n" % (e.text_a, e.text_b) for e in examples)
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "run_classifier.py"), "--task_name=MRPC",
         "--vocab_file=" + mrpc_job["vocab"], "--bert_config_file=" + mrpc_job["config_file"],
         "--output_dir=" + output_dir, "--max_seq_length=%d" % MAX_SEQ_LENGTH, "--predict_input=-",
         "--predict_batch_size=3"],
        input=stdin, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.array([line.split("\t") for line in proc.stdout.strip().split("\n")], dtype=np.float64)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert proc.stderr.count("Initializing from checkpoint") == 1
    assert "Predicted 20 inputs from <stdin>" in proc.stderr


def test_predict_input_bad_line_names_the_line(mrpc_job, tmp_path):
    path = tmp_path / "inputs.txt"
    path.write_text("first\tsecond\nno tab here\n")
    with pytest.raises(ValueError, match=r"inputs.txt line 2: expected text_a<TAB>text_b"):
        rc.run(_options(mrpc_job, data_dir=None, predict_input=str(path), predict_output=str(tmp_path / "out.tsv")))


def test_init_checkpoint_shape_mismatch_is_a_clear_error(mrpc_job, tmp_path):
    config_file = str(tmp_path / "bert_config.json")
    values = json.load(open(mrpc_job["config_file"]))
    values["hidden_size"] = 48
    json.dump(values, open(config_file, "w"))
    with pytest.raises(ValueError, match=r"Shape mismatch .*bert/embeddings/word_embeddings: model \[30522, 48\]"):
        rc.run(_options(mrpc_job, bert_config_file=config_file, output_dir=str(tmp_path / "out"), do_predict=True,
                        init_checkpoint=os.path.join(mrpc_job["output_dir"], "model.ckpt-0")))


def _loaded_text_outputs(export_dir, **texts):
    loaded = tf.saved_model.load(export_dir)
    serve = loaded.signatures["serving_text"]
    return {k: v.numpy() for k, v in serve(**{k: tf.constant(v) for k, v in texts.items()}).items()}


@pytest.mark.slow
def test_single_sentence_and_regression_exports_equal_do_predict(tmp_path):
    """CoLA (one text, MCC) and STS-B (regression score): predict, export, compare (random tiny models;
    training is covered in test_classifier.py)."""
    import itertools
    vocab = shared_path("vocab", "uncased", "vocab.txt")
    config_file = str(tmp_path / "bert_config.json")
    bert_config = tiny_config_file(config_file)

    def random_checkpoint(output_dir, num_labels, is_regression):
        tf.keras.utils.set_random_seed(11)
        model = rc.ClassifierTask(bert_config, num_labels, is_regression).build_model()
        model.head.output_weights.assign(model.head.output_weights * 20.0)
        checkpoints.CheckpointManager(output_dir).save(model.variables_by_name(), 0)

    cola = tmp_path / "cola"
    cola.mkdir()
    with open(os.path.join(shared_path("data", "glue", "CoLA"), "dev.tsv"), encoding="utf-8") as f:
        dev_lines = list(itertools.islice(f, 40))
    (cola / "dev.tsv").write_text("".join(dev_lines), encoding="utf-8")
    (cola / "test.tsv").write_text("index\tsentence\n" + "".join(
        "%d\t%s\n" % (i, line.rstrip("\n").split("\t")[3]) for i, line in enumerate(dev_lines)), encoding="utf-8")
    out = str(tmp_path / "cola_out")
    random_checkpoint(out, 2, False)
    rc.run(cli.build_options(rc.ClassifierOptions, output_dir=out, bert_config_file=config_file, eval_batch_size=16,
                             predict_batch_size=16, task_name="cola", data_dir=str(cola), vocab_file=vocab,
                             max_seq_length=32, do_eval=True, do_predict=True,
                             export_dir=str(tmp_path / "cola_export")))
    written = open(os.path.join(out, "eval_results.txt")).read()
    assert "eval_mcc = " in written and "eval_accuracy = " in written
    expected = np.loadtxt(os.path.join(out, "test_results.tsv"), delimiter="\t")
    texts = [line.rstrip("\n").split("\t")[3] for line in dev_lines]
    got = _loaded_text_outputs(str(tmp_path / "cola_export"), text_a=texts)
    np.testing.assert_allclose(got["probabilities"], expected, atol=1e-5)

    stsb = tmp_path / "stsb"
    stsb.mkdir()
    for name, n in (("test.tsv", 41),):
        with open(os.path.join(shared_path("data", "glue", "STS-B"), name), encoding="utf-8") as f:
            (stsb / name).write_text("".join(itertools.islice(f, n)), encoding="utf-8")
    out = str(tmp_path / "stsb_out")
    random_checkpoint(out, 1, True)
    rc.run(cli.build_options(rc.ClassifierOptions, output_dir=out, bert_config_file=config_file,
                             predict_batch_size=16, task_name="sts-b", data_dir=str(stsb), vocab_file=vocab,
                             max_seq_length=32, do_predict=True, export_dir=str(tmp_path / "stsb_export")))
    expected = np.loadtxt(os.path.join(out, "test_results.tsv"))
    assert expected.shape == (40,) and expected.std() > 0
    examples = rc.StsbProcessor().get_test_examples(str(stsb))
    got = _loaded_text_outputs(str(tmp_path / "stsb_export"), text_a=[e.text_a for e in examples],
                               text_b=[e.text_b for e in examples])
    assert list(got) == ["score"]
    np.testing.assert_allclose(got["score"], expected, atol=1e-5)
