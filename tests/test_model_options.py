"""model_options.py: the model a script starts from (config, vocabulary, sequence length, init checkpoint), checked
before anything is written, each error naming its flag."""
import dataclasses

import pytest

import cli
import encoder
import run_classifier as rc
from model_options import ModelOptions
from tests.shared_data import vocab


def test_model_and_job_checks_name_the_flag_and_write_nothing(tmp_path):
    config_file = tmp_path / "bert_config.json"
    encoder.BertConfig(vocab_size=30522, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=16, max_position_embeddings=64).to_json_file(str(config_file))
    out = tmp_path / "out"
    model = ModelOptions(bert_config_file=str(config_file), vocab_file=vocab(), max_seq_length=64)
    bert_config, tokenizer = model.check()
    assert bert_config.hidden_size == 8 and "[CLS]" in tokenizer.vocab
    with pytest.raises(cli.UserError, match="--max_seq_length=65: cannot use sequence length 65 because the BERT "
                                            "model was only trained up to sequence length 64"):
        dataclasses.replace(model, max_seq_length=65).check()
    with pytest.raises(cli.UserError, match="--max_seq_length=2: expected at least 3"):
        dataclasses.replace(model, max_seq_length=2).check()
    with pytest.raises(cli.UserError, match="--output_dir is required"):
        rc.Job(cli.build_options(rc.ClassifierOptions, task_name="mrpc", bert_config_file=str(config_file),
                                 vocab_file=vocab(), max_seq_length=64))
    with pytest.raises(FileNotFoundError, match="--init_checkpoint=.*nowhere: checkpoint not found"):
        dataclasses.replace(model, init_checkpoint=str(tmp_path / "nowhere")).check()
    small = tmp_path / "small_vocab.txt"
    small.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n")
    big_config = tmp_path / "big.json"
    encoder.BertConfig(vocab_size=4, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=16).to_json_file(str(big_config))
    with pytest.raises(cli.UserError, match="small_vocab.txt has 5 tokens but the config's vocab_size is 4"):
        ModelOptions(bert_config_file=str(big_config), vocab_file=str(small), max_seq_length=64).check()
    assert not out.exists()
