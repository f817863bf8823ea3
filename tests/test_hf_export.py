"""convert_checkpoint.py's HF folder as HF transformers and keras-hub open it: tokenizer files that give the
project's ids (cased and uncased), the casing kept through hf_to_original and back, bad input refused whole."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import cli
import conversions
import modeling
import tokenization
from model_options import ModelOptions
from tests.shared_data import minilm_dir, shared_path
from tests.test_faults import assert_user_error, run_script


def _tiny():
    folder = shared_path("reference", "original_checkpoint_tiny")
    return folder, os.path.join(folder, "bert_config.json"), shared_path("vocab", "uncased", "vocab.txt")


def _texts(name, count):
    with open(shared_path("reference", "tokenization", f"{name}.jsonl"), encoding="utf-8") as f:
        return [json.loads(line)["text"] for _, line in zip(range(count), f)]


def _random_checkpoint(folder, vocab_file, **config_values):
    """A small random original checkpoint (bert_model.ckpt + bert_config.json) over vocab_file's vocabulary."""
    values = dict(vocab_size=len(tokenization.load_vocab(vocab_file)), hidden_size=32, num_hidden_layers=1,
                  num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    values.update(config_values)
    config = modeling.BertConfig(**values)
    encoder = modeling.BertEncoder(config)
    os.makedirs(folder)
    checkpoints.save_checkpoint(os.path.join(folder, "bert_model.ckpt"),
                                {name: v.numpy() for name, v in encoder.variables_by_name().items()})
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
        json.dump(dict(modeling.BertConfig.from_json_file(config_file).to_dict(), vocab_size=30600), f)
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
    config = modeling.BertConfig.load(config_file)
    encoder = modeling.BertEncoder(config)
    checkpoints.init_from_checkpoint(encoder.variables_by_name(), folder)
    ids = np.array([[101] + ours.convert_tokens_to_ids(ours.tokenize(t))[:30] + [102] + [0] * 3 for t in texts[:4]
                    if len(ours.tokenize(t)) >= 30], np.int32)
    mask = (ids > 0).astype(np.int32)
    theirs = classifier.backbone({"token_ids": ids, "padding_mask": mask, "segment_ids": np.zeros_like(ids)})
    mine = encoder(tf.constant(ids), tf.constant(mask), tf.zeros_like(ids), training=False)
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(theirs["sequence_output"])[real], mine["sequence_output"].numpy()[real],
                               atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(theirs["pooled_output"]), mine["pooled_output"].numpy(), atol=1e-5,
                               rtol=0)
    assert classifier.predict(["a sentence", "another one"], verbose=0).shape == (2, 3)
