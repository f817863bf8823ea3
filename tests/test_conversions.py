"""conversions.py: checkpoints to and from HF (safetensors, MiniLM-L6 against HF's and the original's outputs) and
tf-models-official, through convert_checkpoint.py too; the HF folder as HF transformers and keras-hub open it:
tokenizer files that give the project's ids (cased and uncased), the casing kept through hf_to_original and back,
bad input refused whole."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import cli
import conversions
import encoder
import tokenization
from model_options import ModelOptions
from tests import tiny
from tests.processes import assert_user_error, run_script
from tests.shared_data import minilm_dir, shared_path, vocab
from tests.tokenizers import reference


def _tiny():
    return tiny.original_dir(), tiny.original_config_file(), vocab()


def _texts(name, count):
    return [record["text"] for record in reference(name)[:count]]


def _random_checkpoint(folder, vocab_file, **config_values):
    """A small random original checkpoint (bert_model.ckpt + bert_config.json) over vocab_file's vocabulary."""
    values = dict(vocab_size=len(tokenization.load_vocab(vocab_file)), hidden_size=32, num_hidden_layers=1,
                  num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    values.update(config_values)
    config = encoder.BertConfig(**values)
    bert = encoder.BertEncoder(config)
    os.makedirs(folder)
    checkpoints.save_checkpoint(os.path.join(folder, "bert_model.ckpt"),
                                {name: v.numpy() for name, v in bert.variables_by_name().items()})
    config.to_json_file(os.path.join(folder, "bert_config.json"))
    return os.path.join(folder, "bert_config.json")


def _leftovers(path):
    parent = os.path.dirname(path)
    return [name for name in os.listdir(parent) if ".partial-" in name]


def _assert_same_ids(hf_tokenizer, texts, do_lower_case, vocab_file):
    ours = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    for text in texts:
        expected = ours.convert_tokens_to_ids(ours.tokenize(text))
        assert hf_tokenizer(text, add_special_tokens=False)["input_ids"] == expected, text
    pair = hf_tokenizer(texts[0], texts[1])
    ids_a, ids_b = (ours.convert_tokens_to_ids(ours.tokenize(t)) for t in texts[:2])
    vocab = ours.vocab
    assert pair["input_ids"] == [vocab["[CLS]"]] + ids_a + [vocab["[SEP]"]] + ids_b + [vocab["[SEP]"]]
    assert pair["token_type_ids"] == [0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1)


@pytest.mark.hf
@pytest.mark.slow
def test_hf_folder_tokenizes_as_the_project_cased_and_uncased(tmp_path):
    import transformers
    folder, config_file, vocab = _tiny()
    out = str(tmp_path / "uncased_hf")
    proc = run_script("convert_checkpoint.py", "--mode=original_to_hf", f"--init_checkpoint={folder}",
                      f"--bert_config_file={config_file}", f"--vocab_file={vocab}", f"--output_dir={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(os.listdir(out)) == sorted(conversions.HF_FILES)
    tokenizer_config = json.load(open(os.path.join(out, "tokenizer_config.json")))
    assert tokenizer_config["do_lower_case"] is True and tokenizer_config["model_max_length"] == 512
    assert tokenizer_config["tokenizer_class"] == "BertTokenizer"
    assert json.load(open(os.path.join(out, "special_tokens_map.json")))["cls_token"] == "[CLS]"
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert hf_tokenizer.model_max_length == 512
    _assert_same_ids(hf_tokenizer, _texts("uncased", 1500), True, vocab)

    # A cased vocabulary: the casing is never guessed; with the flag, HF keeps the case as the project does.
    cased_vocab = shared_path("vocab", "cased", "vocab.txt")
    cased_config = _random_checkpoint(str(tmp_path / "cased"), cased_vocab)
    cased_out = str(tmp_path / "cased_hf")
    args = ["--mode=original_to_hf", f"--init_checkpoint={tmp_path / 'cased'}", f"--bert_config_file={cased_config}",
            f"--vocab_file={cased_vocab}", f"--output_dir={cased_out}"]
    assert_user_error(run_script("convert_checkpoint.py", *args), "--do_lower_case is required", cased_vocab,
                      "is cased")
    assert not os.path.exists(cased_out) and not _leftovers(cased_out)
    proc = run_script("convert_checkpoint.py", *args, "--do_lower_case=false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(cased_out)
    assert hf_tokenizer.model_max_length == 64
    assert hf_tokenizer.tokenize("Hello Jim Henson") == ["Hello", "Jim", "He", "##nson"]
    _assert_same_ids(hf_tokenizer, _texts("cased", 1500) + ["a [CLS] written in the text, [SEP] and [MASK]"],
                     False, cased_vocab)


@pytest.mark.slow
def test_round_trip_keeps_the_casing_and_the_scripts_read_it(tmp_path, monkeypatch):
    warnings = []
    monkeypatch.setattr(conversions.logging, "warning", lambda msg, *args: warnings.append(msg % args))
    hf_dir = minilm_dir()
    source = json.load(open(os.path.join(hf_dir, "tokenizer_config.json")))
    original = str(tmp_path / "original")
    prefix = conversions.hf_to_original(hf_dir, original)
    assert json.load(open(os.path.join(original, "tokenizer_config.json"))) == source
    assert tokenization.recorded_do_lower_case(original)[0] is True

    # The scripts read the record: a contradicting --do_lower_case is refused.
    options = ModelOptions(bert_config_file=os.path.join(original, "bert_config.json"),
                           vocab_file=os.path.join(original, "vocab.txt"), init_checkpoint=prefix,
                           do_lower_case=False)
    with pytest.raises(cli.UserError, match=r"--do_lower_case=False contradicts .*tokenizer_config.json, which "
                                            r"records do_lower_case=True"):
        options.check()
    options.do_lower_case = True
    options.check()
    out = str(tmp_path / "mrpc")
    assert_user_error(run_script("run_classifier.py", "--task_name=MRPC", f"--init_checkpoint={prefix}",
                                 f"--bert_config_file={options.bert_config_file}", f"--vocab_file={options.vocab_file}",
                                 "--do_lower_case=false", f"--output_dir={out}", f"--export_dir={out}/export"),
                      "--do_lower_case=False contradicts", "records do_lower_case=True")
    assert not os.path.exists(out)

    hf_out = str(tmp_path / "hf")
    conversions.original_to_hf(original, os.path.join(original, "bert_config.json"),
                               os.path.join(original, "vocab.txt"), hf_out)
    back = json.load(open(os.path.join(hf_out, "tokenizer_config.json")))
    assert {k: v for k, v in back.items() if k != "split_special_tokens"} == source
    assert back["split_special_tokens"] is True
    # Beside the original checkpoint (the vocabulary and the casing record are shared), then never twice.
    conversions.original_to_hf(original, os.path.join(original, "bert_config.json"),
                               os.path.join(original, "vocab.txt"), original)
    assert set(conversions.HF_FILES) < set(os.listdir(original))
    assert json.load(open(os.path.join(original, "tokenizer_config.json"))) == back
    with pytest.raises(cli.UserError, match=r"already holds an export \(config.json, model.safetensors\)"):
        conversions.original_to_hf(original, os.path.join(original, "bert_config.json"),
                                   os.path.join(original, "vocab.txt"), original)
    # MiniLM computes exact (erf) GELU, which keras-hub does not: the export says so.
    assert [w for w in warnings if "keras-hub's BertBackbone always computes tanh GELU" in w]
    with pytest.raises(cli.UserError, match="contradicts"):
        conversions.original_to_hf(original, os.path.join(original, "bert_config.json"),
                                   os.path.join(original, "vocab.txt"), str(tmp_path / "hf2"), do_lower_case=False)
    with pytest.raises(cli.UserError, match="contradicts"):
        conversions.hf_to_original(hf_dir, str(tmp_path / "original2"), do_lower_case=False)
    assert not os.path.exists(tmp_path / "hf2") and not os.path.exists(tmp_path / "original2")


def test_bad_input_is_refused_whole(tmp_path, monkeypatch):
    folder, config_file, vocab = _tiny()
    out = str(tmp_path / "hf")
    # Through the command line: an output folder that already holds an export.
    os.makedirs(out)
    with open(os.path.join(out, "config.json"), "w") as f:
        f.write("{}")
    assert_user_error(run_script("convert_checkpoint.py", "--mode=original_to_hf", f"--init_checkpoint={folder}",
                                 f"--bert_config_file={config_file}", f"--vocab_file={vocab}",
                                 f"--output_dir={out}"),
                      f"--output_dir={out} already holds an export (config.json)")
    assert os.listdir(out) == ["config.json"] and not _leftovers(out)

    fresh = str(tmp_path / "fresh")
    small_config = str(tmp_path / "small.json")
    with open(small_config, "w") as f:
        json.dump(dict(encoder.BertConfig.from_json_file(config_file).to_dict(), vocab_size=30600), f)
    with pytest.raises(cli.UserError, match=r"has 30522 tokens but --bert_config_file=.* says vocab_size 30600"):
        conversions.original_to_hf(folder, small_config, vocab, fresh)
    head_only = str(tmp_path / "head")
    checkpoints.save_checkpoint(os.path.join(head_only, "model.ckpt-1"),
                                {"output_weights": np.zeros((2, 128), np.float32),
                                 "output_bias": np.zeros(2, np.float32)})
    with pytest.raises(cli.UserError, match=r"holds no BERT encoder variables .*output_bias"):
        conversions.original_to_hf(head_only, config_file, vocab, fresh)
    # A failure while writing leaves nothing behind.
    import safetensors.numpy

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device", "model.safetensors")

    monkeypatch.setattr(safetensors.numpy, "save", fail)
    with pytest.raises(OSError, match="No space left"):
        conversions.original_to_hf(folder, config_file, vocab, fresh)
    assert not os.path.exists(fresh) and not _leftovers(fresh)


def test_casing_of_a_vocabulary():
    assert tokenization.cased_entry(tokenization.load_vocab(shared_path("vocab", "uncased", "vocab.txt"))) is None
    assert tokenization.cased_entry(tokenization.load_vocab(shared_path("vocab", "chinese", "vocab.txt"))) is None
    assert tokenization.cased_entry(tokenization.load_vocab(shared_path("vocab", "cased", "vocab.txt"))) == "A"
    assert tokenization.resolve_do_lower_case(None, None, {"[CLS]": 0, "the": 1}, "v.txt") is True
    assert tokenization.resolve_do_lower_case(None, False, {"The": 1}, "v.txt") is False
    with pytest.raises(cli.UserError, match="--do_lower_case is required: vocab_file v.txt is cased"):
        tokenization.resolve_do_lower_case(None, None, {"[CLS]": 0, "The": 1}, "v.txt")


@pytest.mark.clients
def test_keras_hub_loads_the_folder(tmp_path):
    import keras_hub
    folder, config_file, vocab = _tiny()
    out = str(tmp_path / "hf")
    conversions.original_to_hf(folder, config_file, vocab, out)
    classifier = keras_hub.models.TextClassifier.from_preset(out, num_classes=3)
    tokenizer = keras_hub.tokenizers.BertTokenizer.from_preset(out)
    ours = tokenization.FullTokenizer(vocab, do_lower_case=True)
    # keras-hub's own tokenizer gives the project's ids on printable ASCII text (not always elsewhere: the README's
    # "keras-hub" says where it differs).
    texts = [text for text in _texts("uncased", 400) if text.isascii() and text.isprintable()]
    assert len(texts) > 200
    for text in texts:
        assert np.asarray(tokenizer(text)).tolist() == ours.convert_tokens_to_ids(ours.tokenize(text)), text
    # The backbone equals the project's encoder (the tiny model's GELU is tanh, as keras-hub's).
    config = encoder.BertConfig.load(config_file)
    bert = encoder.BertEncoder(config)
    checkpoints.init_from_checkpoint(bert.variables_by_name(), folder)
    ids = np.array([[101] + ours.convert_tokens_to_ids(ours.tokenize(t))[:30] + [102] + [0] * 3 for t in texts[:4]
                    if len(ours.tokenize(t)) >= 30], np.int32)
    mask = (ids > 0).astype(np.int32)
    theirs = classifier.backbone({"token_ids": ids, "padding_mask": mask, "segment_ids": np.zeros_like(ids)})
    mine = bert(tf.constant(ids), tf.constant(mask), tf.zeros_like(ids), training=False)
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(theirs["sequence_output"])[real], mine["sequence_output"].numpy()[real],
                               atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(theirs["pooled_output"]), mine["pooled_output"].numpy(), atol=1e-5,
                               rtol=0)
    assert classifier.predict(["a sentence", "another one"], verbose=0).shape == (2, 3)


def _compare_minilm(model, ref, tol=1e-4):
    out = model(ref["input_ids"], ref["input_mask"], ref["segment_ids"])
    mask = ref["input_mask"].astype(bool)
    np.testing.assert_allclose(out["sequence_output"].numpy()[mask], ref["sequence_output"][mask], atol=tol, rtol=0)
    np.testing.assert_allclose(out["pooled_output"], ref["pooled_output"], atol=tol, rtol=0)
    n = ref["embedding_output"].shape[0]
    np.testing.assert_allclose(out["embedding_output"].numpy()[:n][mask[:n]], ref["embedding_output"][mask[:n]],
                               atol=tol, rtol=0)
    for i, layer in enumerate(out["all_encoder_layers"]):
        np.testing.assert_allclose(layer.numpy()[:n][mask[:n]], ref["all_encoder_layers"][i][mask[:n]],
                                   atol=tol, rtol=0, err_msg=f"layer {i}")


def test_minilm_hf_import_matches_hf_and_original(tmp_path):
    hf_dir = minilm_dir()
    ref_hf = np.load(shared_path("reference", "minilm", "minilm_hf_gelu_exact.npz"))
    ref_orig = np.load(shared_path("reference", "minilm", "minilm_original_gelu_tanh.npz"))

    config, weights = conversions.read_hf(hf_dir)
    assert config.hidden_act == "gelu_exact" and config.num_hidden_layers == 6
    model = encoder.BertEncoder(config)
    for name, var in model.variables_by_name().items():
        var.assign(weights[name])
    _compare_minilm(model, ref_hf)

    out_dir = str(tmp_path / "original")
    prefix = conversions.hf_to_original(hf_dir, out_dir)
    assert sorted(os.listdir(out_dir)) == sorted([
        "bert_config.json", "vocab.txt", "bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001",
        "tokenizer_config.json"])
    config2 = encoder.BertConfig.from_json_file(os.path.join(out_dir, "bert_config.json"))
    config2.hidden_act = "gelu"
    model2 = encoder.BertEncoder(config2)
    loaded, new, unused = checkpoints.init_from_checkpoint(model2.variables_by_name(), prefix)
    assert new == [] and unused == []
    _compare_minilm(model2, ref_orig)


def test_hf_export_round_trip(tmp_path):
    from safetensors.numpy import load_file
    hf_dir = minilm_dir()
    out_dir = str(tmp_path / "original")
    conversions.hf_to_original(hf_dir, out_dir)
    hf_out = str(tmp_path / "hf")
    conversions.original_to_hf(out_dir, os.path.join(out_dir, "bert_config.json"),
                               os.path.join(out_dir, "vocab.txt"), hf_out)
    source = load_file(os.path.join(hf_dir, "model.safetensors"))
    exported = load_file(os.path.join(hf_out, "model.safetensors"))
    source.pop("embeddings.position_ids")
    assert sorted(source) == sorted(exported)
    for name in source:
        np.testing.assert_array_equal(source[name], exported[name], err_msg=name)
    hf_config = json.load(open(os.path.join(hf_out, "config.json")))
    assert hf_config["hidden_act"] == "gelu" and hf_config["hidden_size"] == 384
    config, _ = conversions.read_hf(hf_out)
    assert config.hidden_act == "gelu_exact"


def test_hf_export_with_pretraining_heads(tmp_path):
    from safetensors.numpy import load_file
    folder = tiny.original_dir()
    conversions.original_to_hf(folder, os.path.join(folder, "bert_config.json"),
                               shared_path("vocab", "uncased", "vocab.txt"), str(tmp_path))
    state = load_file(str(tmp_path / "model.safetensors"))
    assert "bert.embeddings.word_embeddings.weight" in state
    assert state["cls.seq_relationship.weight"].shape == (2, 128)
    assert not any(k.endswith(("adam_m", "adam_v")) or "global_step" in k for k in state)
    back = conversions.hf_to_original_weights(state)
    reader = tf.train.load_checkpoint(folder)
    names = [n for n in tiny.original_names() if n != "global_step" and not n.endswith(("adam_m", "adam_v"))]
    assert list(back) == names
    for name in names:
        np.testing.assert_array_equal(back[name], reader.get_tensor(name), err_msg=name)


def test_bad_hf_and_vocab_inputs(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        conversions.read_hf(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 10, "hidden_size": 8,
                                                      "num_attention_heads": 2}))
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        conversions.read_hf(str(tmp_path))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(f"tok{i}" for i in range(12)) + "\n")
    config = encoder.BertConfig(vocab_size=10)
    with pytest.raises(ValueError, match="vocab.txt has 12 tokens but the config's vocab_size is 10"):
        tokenization.check_vocab_size(str(vocab), config.vocab_size)
    with pytest.raises(ValueError, match="hidden_act"):
        conversions.hf_config_to_bert_config({"vocab_size": 10, "hidden_act": "swish"})
    with pytest.raises(ValueError, match="no BERT counterpart"):
        conversions.hf_to_original_weights({"encoder.layer.0.crossattention.weight": np.zeros(2)})


def test_hf_config_keys_left_out_take_hf_defaults(monkeypatch):
    infos = []
    monkeypatch.setattr(conversions.logging, "info", lambda msg, *args: infos.append(msg % args))
    full = json.load(open(os.path.join(minilm_dir(), "config.json")))
    config = conversions.hf_config_to_bert_config(full)
    assert (config.hidden_size, config.num_hidden_layers, config.type_vocab_size) == (384, 6, 2)
    # A complete config gets no line about defaults (it used to read "using the original's defaults for
    # hidden_size, num_hidden_layers, ..." on every conversion).
    assert not [m for m in infos if "defaults" in m]
    partial = {k: v for k, v in full.items() if k not in ("type_vocab_size", "max_position_embeddings")}
    config = conversions.hf_config_to_bert_config(partial)
    assert (config.type_vocab_size, config.max_position_embeddings) == (2, 512)  # HF's defaults; the original's is 16
    assert infos == ["HF config: using HF's defaults for max_position_embeddings, type_vocab_size"]


def test_hf_weights_not_matching_config(tmp_path):
    hf_dir = minilm_dir()
    config = json.load(open(os.path.join(hf_dir, "config.json")))
    config["vocab_size"] = 30000
    (tmp_path / "config.json").write_text(json.dumps(config))
    os.symlink(os.path.join(hf_dir, "model.safetensors"), str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"bert/embeddings/word_embeddings: .* \[30522, 384\] vs config "
                                         r"\[30000, 384\]"):
        conversions.read_hf(str(tmp_path))


@pytest.mark.tf_models
def test_tf_models_official_encoder_import(tmp_path):
    import tf_keras
    from official.nlp.modeling import networks
    peer_encoder = networks.BertEncoderV2(
        vocab_size=99, hidden_size=32, num_layers=2, num_attention_heads=4, inner_dim=64, type_vocab_size=2,
        max_sequence_length=64, output_dropout=0.0, attention_dropout=0.0,
        inner_activation=lambda x: tf_keras.activations.gelu(x, approximate=True))
    rng = np.random.RandomState(1)
    mask = np.array([[1] * 12 + [0] * 4, [1] * 16], np.int32)
    ids = rng.randint(1, 99, size=[2, 16]).astype(np.int32) * mask
    types = (np.arange(16)[None, :] >= 7).astype(np.int32) * mask
    peer = peer_encoder({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types})
    saved = tf.train.Checkpoint(encoder=peer_encoder).save(str(tmp_path / "tfm" / "ckpt"))

    import convert_checkpoint
    prefix = convert_checkpoint.run(convert_checkpoint.ConvertOptions(
        "tfm_to_original", output_dir=str(tmp_path / "original"), init_checkpoint=saved))
    config = encoder.BertConfig.from_json_file(str(tmp_path / "original" / "bert_config.json"))
    assert (config.num_hidden_layers, config.num_attention_heads, config.intermediate_size) == (2, 4, 64)
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
    model = encoder.BertEncoder(config)
    loaded, new, unused = checkpoints.init_from_checkpoint(model.variables_by_name(), prefix)
    assert new == [] and unused == []
    ours = model(ids, mask, types)
    keep = mask.astype(bool)
    np.testing.assert_allclose(ours["sequence_output"].numpy()[keep], peer["sequence_output"].numpy()[keep],
                               atol=1e-5, rtol=0)
    np.testing.assert_allclose(ours["pooled_output"], peer["pooled_output"], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="expected one tf-models-official BertEncoder"):
        conversions.tfm_to_original_weights(tiny.original_dir())
