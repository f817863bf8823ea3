"""convert_checkpoint.py: the command line of every conversion; a round trip here. Each mode's own tests: HF
(original_to_hf, hf_to_original) tests/test_conversions.py; TF Hub tests/test_tfhub_export.py; LiteRT
tests/test_litert_export.py; ONNX tests/test_onnx_export.py."""
import os

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file

import convert_checkpoint
import encoder
from tests import tiny
from tests.processes import assert_ran, run_script
from tests.shared_data import vocab


@pytest.mark.slow
def test_convert_checkpoint_cli_round_trip(tmp_path):
    """original_to_hf by the command line, hf_to_original by run(): the original's tiny checkpoint back by name,
    bit for bit, its config too; a mode without its flags is refused naming them."""
    folder = tiny.original_dir()
    hf_out, orig_out = str(tmp_path / "hf"), str(tmp_path / "orig")
    assert_ran(run_script("convert_checkpoint.py", "--mode=original_to_hf", f"--init_checkpoint={folder}",
                          f"--bert_config_file={tiny.original_config_file()}", f"--vocab_file={vocab()}",
                          f"--output_dir={hf_out}", quiet=True))
    convert_checkpoint.run(convert_checkpoint.ConvertOptions("hf_to_original", output_dir=orig_out, hf_dir=hf_out))
    assert "cls.predictions.bias" in load_file(os.path.join(hf_out, "model.safetensors"))
    back = tf.train.load_checkpoint(os.path.join(orig_out, "bert_model.ckpt"))
    original = tf.train.load_checkpoint(folder)
    names = [n for n in tiny.original_names() if n != "global_step" and not n.endswith(("adam_m", "adam_v"))]
    assert sorted(back.get_variable_to_shape_map()) == sorted(names)
    for name in names:
        np.testing.assert_array_equal(back.get_tensor(name), original.get_tensor(name), err_msg=name)
    assert encoder.BertConfig.from_json_file(os.path.join(orig_out, "bert_config.json")) == \
        encoder.BertConfig.from_json_file(os.path.join(folder, "bert_config.json"))
    with pytest.raises(ValueError, match="--init_checkpoint, --bert_config_file"):
        convert_checkpoint.run(convert_checkpoint.ConvertOptions("original_to_hf", output_dir=hf_out, vocab_file=vocab()))
