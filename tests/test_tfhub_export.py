"""convert_checkpoint.py --mode=original_to_tfhub: TF Hub's encoder + preprocessor SavedModels, opened as their
users open them (tf.saved_model.load; hub.KerasLayer in tf-keras, in a process of its own; a Keras 3 layer) and
compared with the project's own encoder, run_classifier.py's features and the original release's outputs."""
import json
import logging
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401

import checkpoints
import cli
import convert_checkpoint
import encoder
import run_classifier
import tfhub_export
import tokenization
from tests.shared_data import minilm_dir, shared_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ("reference", "original_checkpoint_tiny")
NAMES = tfhub_export.INPUT_NAMES
FEATURES = ("input_ids", "input_mask", "segment_ids")
FIT_EXAMPLES, FIT_EPOCHS = 8, 6  # fine-tuning checks: one batch of MRPC pairs, this many steps


def tiny_flags():
    return {"init_checkpoint": shared_path(*TINY), "bert_config_file": shared_path(*TINY, "bert_config.json"),
            "vocab_file": shared_path("vocab", "uncased", "vocab.txt"), "do_lower_case": True}


def command(output_dir, **flags):
    flags = dict(mode="original_to_tfhub", output_dir=output_dir, **flags)
    return [sys.executable, os.path.join(ROOT, "convert_checkpoint.py")] + [f"--{k}={v}" for k, v in flags.items()]


def run_command(args, cwd):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_USE_LEGACY_KERAS", None)
    return subprocess.run(args, capture_output=True, text=True, env=env, cwd=str(cwd), timeout=600)


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory):
    """The tiny original checkpoint (with its pre-training heads) exported by the command a user types."""
    out = tmp_path_factory.mktemp("tfhub") / "tiny"
    proc = run_command(command(out, **tiny_flags()), out.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(os.listdir(out)) == ["encoder", "preprocessor"]
    assert sorted(os.listdir(out.parent)) == ["tiny"]  # the staging folder is gone
    return str(out)


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    """Real weights without the pre-training heads: the MiniLM package converted from HF (hf_to_original), then
    exported (convert_checkpoint.run, as the command does). Returns (flags, export folder, the warnings logged)."""
    folder = tmp_path_factory.mktemp("minilm")
    convert_checkpoint.run(convert_checkpoint.ConvertOptions("hf_to_original", hf_dir=minilm_dir(),
                                                             output_dir=str(folder / "original")))
    flags = {"init_checkpoint": str(folder / "original" / "bert_model.ckpt"),
             "bert_config_file": str(folder / "original" / "bert_config.json"),
             "vocab_file": str(folder / "original" / "vocab.txt"), "do_lower_case": True}
    warnings = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warnings.append(record.getMessage())
    logging.getLogger("absl").addHandler(handler)
    try:
        convert_checkpoint.run(convert_checkpoint.ConvertOptions("original_to_tfhub", output_dir=str(folder / "tfhub"),
                                                                 **flags))
    finally:
        logging.getLogger("absl").removeHandler(handler)
    return flags, str(folder / "tfhub"), "\n".join(warnings)


def own_encoder(flags):
    """The project's BertEncoder with the checkpoint's weights."""
    config = encoder.BertConfig.from_json_file(flags["bert_config_file"])
    bert = encoder.BertEncoder(config)
    checkpoints.init_from_checkpoint(bert.variables_by_name(), flags["init_checkpoint"])
    return bert


def mrpc_examples(count):
    return run_classifier.MrpcProcessor().get_train_examples(shared_path("data", "glue", "MRPC"))[:count]


def classifier_features(examples, length, single=False):
    """run_classifier.py's input_ids, input_mask, segment_ids of the examples (text_a alone with single)."""
    tokenizer = tokenization.FullTokenizer(shared_path("vocab", "uncased", "vocab.txt"), do_lower_case=True)
    if single:
        examples = [run_classifier.InputExample(e.guid, e.text_a, None, e.label) for e in examples]
    arrays = run_classifier.examples_to_arrays(examples, ["0", "1"], length, tokenizer, log_examples=0)
    return {name: arrays[name] for name in FEATURES}


def encoder_inputs(features):
    return {name: tf.constant(features[feature], tf.int32) for name, feature in zip(NAMES, FEATURES)}


def test_encoder_equals_ours_and_the_original(tiny_export):
    encoder = tf.saved_model.load(os.path.join(tiny_export, "encoder"))
    bert = own_encoder(tiny_flags())
    ref = np.load(shared_path(*TINY, "reference_outputs.npz"))
    inputs = {name: tf.constant(ref[f"in_{feature}"], tf.int32) for name, feature in zip(NAMES, FEATURES)}
    out = encoder(inputs)
    assert sorted(out) == ["default", "encoder_outputs", "pooled_output", "sequence_output"]
    # The original release's outputs for this checkpoint (its dropout off), and our encoder's.
    np.testing.assert_allclose(out["sequence_output"], ref["out_sequence_output"], atol=1e-5)
    np.testing.assert_allclose(out["pooled_output"], ref["out_pooled_output"], atol=1e-5)
    ours = bert(*inputs.values())
    np.testing.assert_allclose(out["pooled_output"], ours["pooled_output"], atol=1e-5)
    assert len(out["encoder_outputs"]) == 2
    for mine, theirs in zip(out["encoder_outputs"], ours["all_encoder_layers"]):
        np.testing.assert_allclose(mine, theirs, atol=1e-5)
    np.testing.assert_array_equal(out["encoder_outputs"][-1], out["sequence_output"])
    np.testing.assert_array_equal(out["default"], out["pooled_output"])

    # Any batch and length up to max_position_embeddings (512); longer is refused.
    rng = np.random.default_rng(0)
    for batch, length in ((1, 512), (3, 7)):
        ids = {"input_word_ids": rng.integers(0, 30522, [batch, length]), "input_mask": np.ones([batch, length]),
               "input_type_ids": rng.integers(0, 2, [batch, length])}
        ids = {k: tf.constant(v, tf.int32) for k, v in ids.items()}
        np.testing.assert_allclose(encoder(ids)["sequence_output"], bert(*ids.values())["sequence_output"],
                                   atol=1e-5)
    too_long = {name: tf.zeros([1, 513], tf.int32) for name in NAMES}
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_position_embeddings 512"):
        encoder(too_long)
    with pytest.raises(tf.errors.InvalidArgumentError, match="input_word_ids must be < vocab_size 30522"):
        encoder(dict(inputs, input_word_ids=inputs["input_word_ids"] + 30522))

    # training=True applies dropout (a new mask each call); training=False does not. Also where op determinism
    # is on (the scripts' --deterministic turns it on for the process; it refuses random ops without a seed).
    tf.config.experimental.enable_op_determinism()
    train_1, train_2 = (encoder(inputs, training=True)["pooled_output"] for _ in range(2))
    assert np.abs(train_1 - out["pooled_output"]).max() > 1e-2
    assert np.abs(train_1 - train_2).max() > 1e-2
    np.testing.assert_array_equal(encoder(inputs, training=False)["pooled_output"], out["pooled_output"])

    # What TF Hub's reusable SavedModels carry.
    names = list(bert.variables_by_name())
    assert [v.shape for v in encoder.variables] == [v.shape for v in bert.variables_by_name().values()]
    assert len(encoder.trainable_variables) == len(names) and list(encoder.regularization_losses) == []
    assert bool(encoder.do_lower_case.numpy()) is True
    assert tf.io.gfile.exists(encoder.vocab_file.asset_path.numpy().decode())

    # encoder.mlm: the masked-LM logits, whose log-softmax is the original's.
    positions = tf.constant(ref["in_masked_lm_positions"], tf.int32)
    mlm = encoder.mlm(dict(inputs, masked_lm_positions=positions))
    assert mlm["mlm_logits"].shape == [8, positions.shape[1], 30522]
    log_probs = tf.nn.log_softmax(mlm["mlm_logits"]).numpy().reshape([-1, 30522])
    np.testing.assert_allclose(log_probs[:, :1000].ravel(), ref["out_mlm_log_probs__vocab0_1000"].ravel(),
                               atol=1e-5)
    np.testing.assert_allclose(mlm["pooled_output"], out["pooled_output"], atol=1e-6)
    assert len(encoder.mlm.trainable_variables) == len(names) + 5


def test_preprocessor_equals_run_classifier_features(tiny_export):
    preprocessor = tf.saved_model.load(os.path.join(tiny_export, "preprocessor"))
    examples = mrpc_examples(12)
    texts_a = tf.constant([e.text_a for e in examples])
    texts_b = tf.constant([e.text_b for e in examples])
    tokens = preprocessor.tokenize(texts_a)
    assert isinstance(tokens, tf.RaggedTensor) and tokens.ragged_rank == 2 and tokens.dtype == tf.int32
    tokenizer = tokenization.FullTokenizer(shared_path("vocab", "uncased", "vocab.txt"), do_lower_case=True)
    assert tokens.merge_dims(1, 2).to_list() == [
        tokenizer.convert_tokens_to_ids(tokenizer.tokenize(e.text_a)) for e in examples]
    for length in (128, 24):  # at 24 most pairs are truncated, as the original truncates
        packed = preprocessor.bert_pack_inputs([tokens, preprocessor.tokenize(texts_b)], seq_length=length)
        expected = classifier_features(examples, length)
        for name, feature in zip(NAMES, FEATURES):
            np.testing.assert_array_equal(packed[name], expected[feature])
    single = classifier_features(examples, 128, single=True)
    for packed in (preprocessor(texts_a), preprocessor.bert_pack_inputs([tokens.merge_dims(1, 2)])):
        for name, feature in zip(NAMES, FEATURES):
            np.testing.assert_array_equal(packed[name], single[feature])
    special = {k: int(v) for k, v in preprocessor.tokenize.get_special_tokens_dict().items()}
    assert special == {"vocab_size": 30522, "start_of_sequence_id": 101, "end_of_segment_id": 102,
                       "padding_id": 0, "mask_id": 103}


@pytest.mark.slow
@pytest.mark.clients
def test_tutorial_models_on_hub_keras_layer(minilm, tmp_path):
    """TensorFlow's BERT tutorials' models in tf-keras on hub.KerasLayer (MiniLM's export), in a process with
    TF_USE_LEGACY_KERAS=1 that imports TensorFlow and tensorflow_text alone to load the two SavedModels."""
    flags, export_dir, _ = minilm
    examples = mrpc_examples(FIT_EXAMPLES)
    cases = {"texts_a": np.array([e.text_a for e in examples]), "texts_b": np.array([e.text_b for e in examples]),
             "labels": np.array([int(e.label) for e in examples])}
    for length in (128, 30):
        for kind, single in (("pair", False), ("single", True)):
            for feature, values in classifier_features(examples, length, single).items():
                cases[f"{kind}_{length}_{feature}"] = values
    ids = classifier_features(examples[:4], 64)
    outputs = own_encoder(flags)(*encoder_inputs(ids).values())
    cases.update({f"ids_{feature}": values for feature, values in ids.items()})
    cases.update({f"out_{key}": outputs[key].numpy() for key in ("pooled_output", "sequence_output")})
    cases["out_default"] = cases["out_pooled_output"]
    cases.update({f"out_layer_{i}": layer.numpy() for i, layer in enumerate(outputs["all_encoder_layers"])})
    np.savez(tmp_path / "cases.npz", **cases)
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH="")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tfhub_client.py"), export_dir,
                           str(tmp_path / "cases.npz"), str(tmp_path / "result.json"), str(FIT_EPOCHS)],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())
    print("tf-keras client:", result)
    assert result["modules_loaded"] == []  # nothing of this repository
    assert all(result["ids_equal"].values()), result["ids_equal"]
    assert max(result["encoder_diff"].values()) < 1e-5 and result["encoder_outputs_diff"] < 1e-5, result
    assert result["last_layer_is_sequence_output"]
    assert result["keras"].startswith("tf_keras"), result["keras"]
    assert result["hub_layer_diff"] < 1e-5
    assert result["trainable_weights"] == result["weights_changed"] == 103
    for before, after in (result["single_losses"], result["pair_losses"]):
        assert after < 0.7 * before, result


def readme_snippet(marker):
    """The README's code block (indented four spaces, in its TF Hub section) that holds `marker`, dedented."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    start = readme.index("### TF Hub (hub.KerasLayer)")
    section = re.split(r"\n##+ ", readme[start + 1:])[0]
    blocks = re.findall(r"(?:^(?:    .*)?\n)+", section, re.M)
    code = next(block for block in blocks if marker in block)
    return "\n".join(line[4:] for line in code.splitlines())


@pytest.mark.slow
def test_keras_3_fine_tunes_the_reloaded_encoder(minilm):
    """The README's Keras 3 way: the encoder in a Keras 3 layer that tracks its variables; model.fit trains them,
    and the loss falls."""
    import keras
    _, export_dir, _ = minilm
    keras.utils.set_random_seed(1)
    namespace = {}
    exec(readme_snippet("class HubEncoder").replace("/tmp/bert_tfhub", export_dir), namespace)  # noqa: S102
    model, preprocessor = namespace["model"], namespace["preprocessor"]
    layer = next(layer for layer in model.layers if isinstance(layer, namespace["HubEncoder"]))
    # XLA (Keras's jit_compile="auto" compiles the step on a CPU too) only adds compile time here.
    model.compile(optimizer=keras.optimizers.Adam(1e-4), loss=keras.losses.BinaryCrossentropy(from_logits=True),
                  jit_compile=False)
    examples = mrpc_examples(FIT_EXAMPLES)
    dataset = tf.data.Dataset.from_tensor_slices(([e.text_a for e in examples], [e.text_b for e in examples],
                                                  [float(e.label) for e in examples])).batch(FIT_EXAMPLES)
    dataset = dataset.map(lambda a, b, label: (
        preprocessor.bert_pack_inputs([preprocessor.tokenize(a), preprocessor.tokenize(b)], seq_length=32), label))
    first = layer.encoder.trainable_variables[0].numpy()
    assert len(model.trainable_weights) == len(layer.encoder.trainable_variables) + 2 == 103 + 2
    losses = model.fit(dataset, epochs=FIT_EPOCHS, verbose=0).history["loss"]
    assert losses[-1] < 0.7 * losses[0], losses
    assert not np.array_equal(first, layer.encoder.trainable_variables[0].numpy())


def test_loaded_under_a_strategy_scope_the_variables_are_distributed(tiny_export):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        distributed = tf.saved_model.load(os.path.join(tiny_export, "encoder"))
    assert all(isinstance(v, tf.distribute.DistributedValues) for v in distributed.trainable_variables)
    ref = np.load(shared_path(*TINY, "reference_outputs.npz"))
    inputs = {name: tf.constant(ref[f"in_{feature}"], tf.int32) for name, feature in zip(NAMES, FEATURES)}
    pooled = strategy.run(lambda x: distributed(x)["pooled_output"], args=(inputs,))
    np.testing.assert_allclose(pooled, ref["out_pooled_output"], atol=1e-5)


def test_bad_input_is_one_line_and_writes_nothing(tiny_export, tmp_path):
    # An output folder that already holds an export: one `error:` line from the command, nothing changed.
    before = sorted(os.listdir(tiny_export))
    proc = run_command(command(tiny_export, **tiny_flags()), tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith("error: --output_dir="), \
        proc.stderr[-2000:]
    assert "already holds an export" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(os.listdir(tiny_export)) == before

    def convert(out, **changes):
        flags = dict(tiny_flags(), **changes)
        options = convert_checkpoint.ConvertOptions("original_to_tfhub", output_dir=str(out), **flags)
        return convert_checkpoint.run(options)

    out = tmp_path / "out"
    cased = shared_path("vocab", "cased", "vocab.txt")
    with pytest.raises(cli.UserError, match=r"--vocab_file=.* has 28996 tokens but "
                                            r"--bert_config_file=.* says vocab_size 30522"):
        convert(out, vocab_file=cased, do_lower_case=False)
    with pytest.raises(cli.UserError, match="--do_lower_case is required: vocab_file .* is cased"):
        convert(out, vocab_file=cased, do_lower_case=None)
    heads_only = str(tmp_path / "heads" / "model.ckpt-1")
    weights = checkpoints.load_checkpoint(tiny_flags()["init_checkpoint"])
    checkpoints.save_checkpoint(heads_only, {k: v for k, v in weights.items() if k.startswith("cls/")})
    with pytest.raises(cli.UserError, match="holds no BERT encoder variables"):
        convert(out, init_checkpoint=heads_only)
    partial = str(tmp_path / "partial" / "model.ckpt-1")
    checkpoints.save_checkpoint(partial, {k: v for k, v in weights.items() if "layer_1" not in k})
    with pytest.raises(cli.UserError, match="lacks 16 encoder variable"):
        convert(out, init_checkpoint=partial)
    assert sorted(os.listdir(tmp_path)) == ["heads", "partial"]


def test_remote_output_and_a_failed_write(tiny_export, tmp_path, monkeypatch):
    """On a file system without folder renames (ram:// here, like gs://) the export is copied into place; a failure
    while writing leaves no output (the SavedModels are written into a staging folder first)."""
    remote = "ram://tfhub_test/export"
    tfhub_export.export(**tiny_flags(), output_dir=remote)
    assert sorted(tf.io.gfile.listdir("ram://tfhub_test")) == ["export"]
    inputs = {name: tf.ones([2, 9], tf.int32) for name in NAMES}
    local = tf.saved_model.load(os.path.join(tiny_export, "encoder"))(inputs)["pooled_output"]
    np.testing.assert_array_equal(tf.saved_model.load(remote + "/encoder")(inputs)["pooled_output"], local)
    assert tf.saved_model.load(remote + "/preprocessor")(tf.constant(["Hello"]))["input_word_ids"].shape == [1, 128]
    tf.io.gfile.rmtree("ram://tfhub_test")

    def failing_save(obj, path, **kwargs):  # the encoder is written whole, then the disk is full
        real_save(obj, path, **kwargs)
        raise OSError("disk full")

    real_save = tf.saved_model.save
    monkeypatch.setattr(tf.saved_model, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        tfhub_export.export(**tiny_flags(), output_dir=str(tmp_path / "out"))
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_minilm_without_heads(minilm):
    """Real weights: equal to HF's outputs and to ours; without the pre-training heads the encoder has no mlm, and
    the command says so."""
    flags, export_dir, warnings = minilm
    assert "has no masked-LM head (cls/predictions/...): the encoder has no `mlm`" in warnings
    encoder = tf.saved_model.load(os.path.join(export_dir, "encoder"))
    assert not hasattr(encoder, "mlm")
    ref = np.load(shared_path("reference", "minilm", "minilm_hf_gelu_exact.npz"))
    inputs = {name: tf.constant(ref[feature], tf.int32) for name, feature in zip(NAMES, FEATURES)}
    out = encoder(inputs)
    mask = ref["input_mask"].astype(bool)
    np.testing.assert_allclose(out["sequence_output"].numpy()[mask], ref["sequence_output"][mask], atol=5e-5)
    np.testing.assert_allclose(out["pooled_output"], ref["pooled_output"], atol=5e-5)
    ours = own_encoder(flags)(*inputs.values())
    np.testing.assert_allclose(out["sequence_output"].numpy()[mask], ours["sequence_output"].numpy()[mask],
                               atol=1e-5)
    np.testing.assert_allclose(out["pooled_output"], ours["pooled_output"], atol=1e-5)
    assert len(out["encoder_outputs"]) == 6
    preprocessor = tf.saved_model.load(os.path.join(export_dir, "preprocessor"))
    examples = mrpc_examples(6)
    packed = preprocessor.bert_pack_inputs([preprocessor.tokenize([e.text_a for e in examples]),
                                            preprocessor.tokenize([e.text_b for e in examples])], seq_length=64)
    np.testing.assert_array_equal(packed["input_word_ids"], classifier_features(examples, 64)["input_ids"])
