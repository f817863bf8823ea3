"""runner.py: checks before anything is written, parallel tokenization, real-length prediction."""
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import cli
import modeling
import packing
import records
import run_classifier as rc
import runner
import tokenization
import training
from model_options import ModelOptions
from tests.shared_data import shared_path


@pytest.fixture(scope="module")
def tokenizer():
    return tokenization.FullTokenizer(shared_path("vocab", "uncased", "vocab.txt"), do_lower_case=True)


def test_model_and_job_checks_name_the_flag_and_write_nothing(tmp_path):
    config_file = tmp_path / "bert_config.json"
    modeling.BertConfig(vocab_size=30522, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=64).to_json_file(str(config_file))
    vocab = shared_path("vocab", "uncased", "vocab.txt")
    out = tmp_path / "out"
    model = ModelOptions(bert_config_file=str(config_file), vocab_file=vocab, max_seq_length=64)
    bert_config, tokenizer = model.check()
    assert bert_config.hidden_size == 8 and "[CLS]" in tokenizer.vocab
    with pytest.raises(cli.UserError, match="--max_seq_length=65: cannot use sequence length 65 because the BERT "
                                            "model was only trained up to sequence length 64"):
        dataclasses.replace(model, max_seq_length=65).check()
    with pytest.raises(cli.UserError, match="--max_seq_length=2: expected at least 3"):
        dataclasses.replace(model, max_seq_length=2).check()
    with pytest.raises(cli.UserError, match="--output_dir is required"):
        rc.Job(cli.build_options(rc.ClassifierOptions, task_name="mrpc", bert_config_file=str(config_file),
                                 vocab_file=vocab, max_seq_length=64))
    with pytest.raises(FileNotFoundError, match="--init_checkpoint=.*nowhere: checkpoint not found"):
        dataclasses.replace(model, init_checkpoint=str(tmp_path / "nowhere")).check()
    small = tmp_path / "small_vocab.txt"
    small.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n")
    big_config = tmp_path / "big.json"
    modeling.BertConfig(vocab_size=4, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=16).to_json_file(str(big_config))
    with pytest.raises(cli.UserError, match="small_vocab.txt has 5 tokens but the config's vocab_size is 4"):
        ModelOptions(bert_config_file=str(big_config), vocab_file=str(small), max_seq_length=64).check()
    assert not out.exists()


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
    config = modeling.BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
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
    config = modeling.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
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


def test_a_record_format_is_what_its_writer_writes_and_its_reader_reads(tmp_path):
    record_format = records.classifier(4, is_regression=True)
    row = {"input_ids": [101, 7, 102, 0], "input_mask": [1, 1, 1, 0], "segment_ids": [0, 0, 0, 0],
           "label_ids": [2.5], "is_real_example": [1]}
    path = str(tmp_path / "x.tf_record")
    writer = records.RecordFile(path, record_format)
    writer.write(row)
    with pytest.raises(ValueError, match="are not the record format's"):
        writer.write({name: row[name] for name in reversed(row)})
    writer.close()
    parsed = next(iter(tf.data.TFRecordDataset(path).map(lambda r: records.decode(r, record_format))))
    assert parsed["label_ids"].dtype == tf.float32 and float(parsed["label_ids"]) == 2.5
    assert parsed["input_ids"].dtype == tf.int32 and parsed["input_ids"].numpy().tolist() == row["input_ids"]
    example = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(path))).numpy()).features.feature
    assert [example[name].WhichOneof("kind") for name in record_format] == [
        "float_list" if kind == records.FLOAT else "int64_list" for _, kind in record_format.values()]


@pytest.mark.parametrize("record_format", [records.classifier(32, False), records.classifier(32, True),
                                           records.squad(64, True), records.squad(64, False)])
def test_record_files_are_the_bytes_of_tensorflows_writer(tmp_path, record_format):
    """records.RecordFile (numpy) writes what tf.io.TFRecordWriter writes for tf.train.Example with TensorFlow's
    deterministic serialization, record by record and by columns, over several blocks."""
    rng = np.random.default_rng(0)
    rows = 2 * records.RecordFile.BLOCK + 3
    arrays = {}
    for name, (length, kind) in record_format.items():
        shape = (rows, length) if length else (rows,)
        arrays[name] = (rng.standard_normal(shape).astype(np.float32) if kind == records.FLOAT else
                        rng.integers(0, 1 << 40 if name == "unique_ids" else 30522, shape))
    expected = str(tmp_path / "tf.tf_record")
    with tf.io.TFRecordWriter(expected) as writer:
        for i in range(rows):
            feature = {name: tf.train.Feature(float_list=tf.train.FloatList(value=np.ravel(values[i]).tolist()))
                       if record_format[name][1] == records.FLOAT else
                       tf.train.Feature(int64_list=tf.train.Int64List(value=np.ravel(values[i]).tolist()))
                       for name, values in arrays.items()}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(
                deterministic=True))
    by_columns = str(tmp_path / "columns.tf_record")
    assert records.write_file(by_columns, arrays, record_format) == rows
    by_rows = records.RecordFile(str(tmp_path / "rows.tf_record"), record_format)
    for i in range(rows):
        by_rows.write({name: values[i] for name, values in arrays.items()})
    by_rows.close()
    want = open(expected, "rb").read()
    assert open(by_columns, "rb").read() == want and open(by_rows.path, "rb").read() == want


def _training_order(path, record_format, rows, **shuffle):
    """The rows (input_ids[0]) of the first two passes' training batches of 32 over `rows` records, as one list."""
    batches = 2 * rows // 32 + 1
    dataset = records.input_fn(path, record_format, True, True, records.Shuffle(seed=1, **shuffle))(32).take(batches)
    return [row for batch in dataset.as_numpy_iterator() for row in batch["input_ids"][:, 0].tolist()]


def test_shuffle_buffer_0_mixes_a_sorted_training_file(tmp_path):
    # CoLA's train.tsv is sorted by source (17 of them): the original's 100-record buffer fills each batch from
    # one or two of them; shuffling all records draws every batch from across the file, a new order each pass.
    lines = open(shared_path("data", "glue", "CoLA", "train.tsv"), encoding="utf-8").read().splitlines()
    sources = [line.split("\t")[0] for line in lines]
    n = len(sources)
    assert len(set(sources)) == 17
    record_format = records.classifier(2, is_regression=False)
    path = str(tmp_path / "train.tf_record")
    writer = records.RecordFile(path, record_format)
    for row in range(n):
        writer.write({"input_ids": [row, 0], "input_mask": [1, 0], "segment_ids": [0, 0], "label_ids": [0],
                      "is_real_example": [1]})
    writer.close()

    def sources_per_batch(order):
        return np.mean([len({sources[row] for row in order[i:i + 32]}) for i in range(0, n - 31, 32)])

    assert sources_per_batch(_training_order(path, record_format, n)) < 2.5
    shuffled = _training_order(path, record_format, n, buffer=0, num_records=n)
    assert sources_per_batch(shuffled) > 9
    first, second = shuffled[:n], shuffled[n:2 * n]
    assert sorted(first) == sorted(second) == list(range(n)) and first != second  # a new permutation each pass
    with pytest.raises(ValueError, match="needs num_records"):
        records.input_fn(path, record_format, True, True, records.Shuffle(buffer=0))


def test_output_dropout_prob_flag_reaches_the_output_layer():
    import run_ner
    config = modeling.BertConfig(vocab_size=30522, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
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
