"""filesystem.py: files and folders named by flags (local); and every path on a TensorFlow file system: each stage
end to end with its inputs and outputs on ram://.

ram:// is TensorFlow's in-memory file system (one per process), so these runs stay in this process. It stands
in for gs://, s3:// and hdfs:// (the same tf.io.gfile calls); where it differs from a bucket: it reports a
checkpoint prefix (model.ckpt-30, which has files model.ckpt-30.index, ...) as a folder, which a bucket does not.
"""
import json
import os
import uuid

import numpy as np
import pytest
import tensorflow as tf

import cli
import conversions
import filesystem
import create_pretraining_data
import extract_features
import run_classifier
import run_ner
import run_pretraining
import run_squad
from tests.shared_data import shared_path

TINY_CONFIG = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=64, max_position_embeddings=128)


def _copy(src, dst, lines=None):
    tf.io.gfile.makedirs(os.path.dirname(dst))
    with open(src, "rb") as f:
        data = f.read()
    if lines is not None:
        data = b"".join(data.splitlines(keepends=True)[:lines])
    with tf.io.gfile.GFile(dst, "wb") as f:
        f.write(data)


def _read(path):
    with tf.io.gfile.GFile(path, "r") as f:
        return f.read()


def _options(options_class, root, output, **flags):
    """options_class (flat flags, cli.build_options) of a job writing to root/output, its config in root."""
    values = dict(output_dir=f"{root}/{output}", bert_config_file=f"{root}/bert_config.json", train_batch_size=4,
                  eval_batch_size=4, predict_batch_size=4, save_checkpoints_steps=4, iterations_per_loop=4,
                  deterministic=True)
    values.update(flags)
    return cli.build_options(options_class, **values)


@pytest.fixture(scope="module")
def ram(tmp_path_factory):
    """A fresh ram:// root holding the inputs: vocab, config, corpus, MRPC, CoNLL and SQuAD subsets."""
    root = f"ram://bert-{uuid.uuid4().hex[:8]}"
    _copy(shared_path("vocab", "uncased", "vocab.txt"), f"{root}/vocab.txt")
    with tf.io.gfile.GFile(f"{root}/bert_config.json", "w") as f:
        f.write(json.dumps(TINY_CONFIG))
    _copy(shared_path("data", "text", "sample_text.txt"), f"{root}/corpus.txt")
    for split, lines in (("train", 41), ("dev", 17), ("test", 17)):
        _copy(shared_path("data", "glue", "MRPC", f"{split}.tsv"), f"{root}/mrpc/{split}.tsv", lines)
        _copy(shared_path("data", "conll2003", f"{split}.txt"), f"{root}/conll/{split}.txt", 200)
    with open(shared_path("data", "squad", "v1.1", "dev-v1.1.json"), encoding="utf-8") as f:
        squad = json.load(f)
    squad["data"] = [{"title": "t", "paragraphs": squad["data"][0]["paragraphs"][:2]}]
    with tf.io.gfile.GFile(f"{root}/squad/dev.json", "w") as f:
        f.write(json.dumps(squad))
    local = tmp_path_factory.mktemp("cwd")
    cwd = os.getcwd()
    os.chdir(local)  # a path mistaken for a local one would land here
    try:
        yield root
    finally:
        os.chdir(cwd)
    assert os.listdir(local) == [], "something meant for ram:// was written to the working directory"


@pytest.fixture(scope="module")
def pretrained(ram):
    """create_pretraining_data -> run_pretraining (train, eval) on ram://; returns the checkpoint prefix."""
    written = create_pretraining_data.run(cli.build_options(
        create_pretraining_data.CreatePretrainingDataOptions, input_file=f"{ram}/corpus.txt",
        output_file=f"{ram}/records/train.tfrecord", vocab_file=f"{ram}/vocab.txt", max_seq_length=64,
        max_predictions_per_seq=10, dupe_factor=2))
    assert list(written) == [f"{ram}/records/train.tfrecord"] and sum(written.values()) > 4
    result = run_pretraining.run(_options(
        run_pretraining.PretrainingOptions, ram, "pretrain", num_train_steps=4, num_warmup_steps=1,
        input_file=f"{ram}/records/*.tfrecord", max_seq_length=64, max_predictions_per_seq=10, do_train=True,
        do_eval=True, max_eval_steps=2))
    assert result["train"]["global_step"] == 4
    assert "masked_lm_accuracy" in _read(f"{ram}/pretrain/eval_results.txt")
    assert tf.io.gfile.exists(f"{ram}/pretrain/checkpoint")
    assert tf.io.gfile.isdir(f"{ram}/pretrain/model.ckpt-4")  # ram:// calls a checkpoint prefix a folder
    # Starting another run from that prefix (a prefix, not a folder, although ram:// says folder).
    again = run_pretraining.run(_options(
        run_pretraining.PretrainingOptions, ram, "pretrain2", num_train_steps=1, num_warmup_steps=0,
        init_checkpoint=f"{ram}/pretrain/model.ckpt-4", input_file=f"{ram}/records/train.tfrecord",
        max_seq_length=64, max_predictions_per_seq=10, do_train=True))
    assert again["train"]["global_step"] == 1
    return f"{ram}/pretrain/model.ckpt-4"


def _load_saved_model(export_dir):
    import tensorflow_text  # noqa: F401  (the tokenizer ops of serving_text)
    return tf.saved_model.load(export_dir)


@pytest.mark.slow
def test_classifier_on_ram_equals_the_same_job_on_local_disk(ram, pretrained, tmp_path):
    def job(root, data_dir, init_checkpoint, vocab_file, config_file, predict_input):
        return run_classifier.run(_options(
            run_classifier.ClassifierOptions, root, "mrpc", init_checkpoint=init_checkpoint,
            bert_config_file=config_file, task_name="MRPC", data_dir=data_dir, vocab_file=vocab_file, max_seq_length=32,
            do_train=True, do_eval=True, do_predict=True, num_train_epochs=1.0, export_dir=f"{root}/mrpc/export",
            predict_input=predict_input, predict_output=f"{root}/mrpc/streamed.tsv"))

    with tf.io.gfile.GFile(f"{ram}/requests.tsv", "w") as f:
        f.write("He said hi.\tHi, he said.\nIt rained.\tThe sun shone.\n")
    remote = job(ram, f"{ram}/mrpc", pretrained, f"{ram}/vocab.txt", f"{ram}/bert_config.json",
                 f"{ram}/requests.tsv")
    assert remote["train"]["global_step"] == 10 and remote["streamed"] == 2
    for name in ("eval_results.txt", "test_results.tsv", "train.tf_record", "model.ckpt-10.index", "checkpoint"):
        assert tf.io.gfile.exists(f"{ram}/mrpc/{name}"), name
    assert len(_read(f"{ram}/mrpc/test_results.tsv").splitlines()) == 16
    assert len(_read(f"{ram}/mrpc/streamed.tsv").splitlines()) == 2
    serve = _load_saved_model(f"{ram}/mrpc/export").signatures["serving_text"]
    answer = serve(text_a=tf.constant(["He said hi."]), text_b=tf.constant(["Hi, he said."]))
    assert answer["label"].numpy()[0] in (b"0", b"1")

    # The same job with every file on local disk gives the same numbers and files.
    local = str(tmp_path)
    for name in ("vocab.txt", "bert_config.json", "requests.tsv", "mrpc/train.tsv", "mrpc/dev.tsv", "mrpc/test.tsv"):
        os.makedirs(os.path.dirname(os.path.join(local, name)), exist_ok=True)
        tf.io.gfile.copy(f"{ram}/{name}", os.path.join(local, name))
    init = os.path.join(local, "init", "model.ckpt-4")
    os.makedirs(os.path.dirname(init))
    for suffix in (".index", ".data-00000-of-00001"):
        tf.io.gfile.copy(pretrained + suffix, init + suffix)
    on_disk = job(local, os.path.join(local, "mrpc"), init, os.path.join(local, "vocab.txt"),
                  os.path.join(local, "bert_config.json"), os.path.join(local, "requests.tsv"))
    assert on_disk["eval"] == remote["eval"]
    for name in ("test_results.tsv", "eval_results.txt", "streamed.tsv"):
        with open(os.path.join(local, "mrpc", name)) as f:
            assert f.read() == _read(f"{ram}/mrpc/{name}"), name


@pytest.mark.slow
def test_ner_squad_and_features_on_ram(ram, pretrained):
    ner = run_ner.run(_options(
        run_ner.NerOptions, ram, "ner", init_checkpoint=pretrained, data_dir=f"{ram}/conll",
        vocab_file=f"{ram}/vocab.txt", max_seq_length=32, do_train=True, do_eval=True, do_predict=True,
        num_train_epochs=1.0, export_dir=f"{ram}/ner/export"))
    assert ner["train"]["global_step"] > 0 and 0.0 <= ner["eval"]["eval_f1"] <= 1.0
    for name in ("label_list.txt", "eval_results.txt", "test_results.txt", "eval_predictions.txt",
                 "test_predictions.txt", "eval_conlleval.txt", "test_conlleval.txt"):
        assert tf.io.gfile.exists(f"{ram}/ner/{name}"), name
    tagged = _load_saved_model(f"{ram}/ner/export").signatures["serving_text"](
        sentence=tf.constant(["Japan beat Syria ."]))
    assert int(tagged["num_words"][0]) == 4

    squad = run_squad.run(_options(
        run_squad.SquadOptions, ram, "squad", init_checkpoint=pretrained, vocab_file=f"{ram}/vocab.txt",
        train_file=f"{ram}/squad/dev.json", predict_file=f"{ram}/squad/dev.json", max_seq_length=64, doc_stride=32,
        max_query_length=16, do_train=True, do_predict=True, num_train_epochs=1.0, train_first_answer=True,
        export_dir=f"{ram}/squad/export"))
    predictions = json.loads(_read(f"{ram}/squad/predictions.json"))
    assert len(predictions) == len(squad["predict"]) > 10 and squad["eval"]["f1"] >= 0
    assert json.loads(_read(f"{ram}/squad/eval_results.json")).keys() >= {"exact_match", "f1"}
    assert tf.io.gfile.exists(f"{ram}/squad/nbest_predictions.json")
    answer = _load_saved_model(f"{ram}/squad/export").signatures["serving_text"](
        question=tf.constant(["Who won?"]), context=tf.constant(["The Broncos won the game."]))
    assert answer["answer"].shape == (1,)

    with tf.io.gfile.GFile(f"{ram}/sentences.txt", "w") as f:
        f.write("Who was Jim Henson ? ||| Jim Henson was a puppeteer\nHello world\n")
    extract_features.run(cli.build_options(
        extract_features.ExtractFeaturesOptions,
        input_file=f"{ram}/sentences.txt", output_file=f"{ram}/features.jsonl",
        bert_config_file=f"{ram}/bert_config.json", init_checkpoint=pretrained, vocab_file=f"{ram}/vocab.txt",
        layers="-1,-2", max_seq_length=32, batch_size=2, sentence_vector="mean"))
    lines = [json.loads(line) for line in _read(f"{ram}/features.jsonl").splitlines()]
    assert [line["linex_index"] for line in lines] == [0, 1] and len(lines[1]["sentence_vector"]) == 32


@pytest.mark.slow
def test_checkpoint_conversion_round_trip_on_ram(ram, pretrained):
    conversions.original_to_hf(pretrained, f"{ram}/bert_config.json", f"{ram}/vocab.txt", f"{ram}/hf")
    assert tf.io.gfile.exists(f"{ram}/hf/model.safetensors") and tf.io.gfile.exists(f"{ram}/hf/config.json")
    prefix = conversions.hf_to_original(f"{ram}/hf", f"{ram}/back")
    import checkpoints
    before, after = checkpoints.load_checkpoint(pretrained), checkpoints.load_checkpoint(prefix)
    for name, value in after.items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)


def test_files_and_folders_named_by_flags(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    (tmp_path / "b.txt").write_text("x")
    (tmp_path / "sub").mkdir()
    assert filesystem.input_files(f"{tmp_path}/*.txt, {tmp_path / 'a.txt'}") == [
        str(tmp_path / "a.txt"), str(tmp_path / "b.txt"), str(tmp_path / "a.txt")]
    with pytest.raises(cli.MissingFileError, match=r"--input_file pattern '.*nothing\*' matches no file"):
        filesystem.input_files(f"{tmp_path}/nothing*")
    with pytest.raises(cli.UserError, match="--input_file is required"):
        filesystem.input_files("")
    with pytest.raises(FileNotFoundError, match="--vocab_file=.*sub: is a folder, expected a file"):
        filesystem.require_file(str(tmp_path / "sub"), "--vocab_file")
    deeper = tmp_path / "new" / "deeper"
    assert filesystem.make_dir(str(deeper), "--output_dir") and deeper.is_dir()
    with pytest.raises(cli.UserError, match=r"--output_dir=.*a.txt/out: cannot create the folder: .*a.txt is a file"):
        filesystem.make_dir(str(tmp_path / "a.txt" / "out"), "--output_dir")
    assert filesystem.make_parent_dir(str(tmp_path / "p" / "q" / "f.tfrecord"), "--output_file")
    assert (tmp_path / "p" / "q").is_dir()
    with pytest.raises(cli.UserError, match="--output_file=.*sub: is a folder, expected a file name"):
        filesystem.make_parent_dir(str(tmp_path / "sub"), "--output_file")
