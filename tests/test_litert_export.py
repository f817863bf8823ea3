"""litert_export.py: LiteRT models of the token-ids signature; convert_checkpoint.py's encoder exports (LiteRT here,
ONNX in test_onnx_export.py) against the original release's outputs."""
import numpy as np
import pytest

import checkpoints
import litert_export
from tests import tiny
from tests.exports import assert_close_to_int8, convert_encoder, original_batch
from tests.processes import assert_user_error, run_script
from tests.shared_data import vocab


@pytest.mark.slow
def test_encoder_litert_models_answer_as_the_original(tmp_path):
    inputs, sequence_output, pooled_output = original_batch()
    convert_encoder("original_to_tflite", tmp_path / "f32")
    run = litert_export.interpreter(tmp_path / "f32" / "encoder.tflite").get_signature_runner()
    got = run(**inputs)
    np.testing.assert_allclose(got["sequence_output"], sequence_output, atol=2e-5, rtol=0)
    np.testing.assert_allclose(got["pooled_output"], pooled_output, atol=2e-5, rtol=0)
    # Any width: the rows cut to their longest real length answer as at 128.
    width = int(inputs["input_mask"][:2].sum(axis=1).max())
    assert width < 128
    short = run(**{name: np.ascontiguousarray(value[:2, :width]) for name, value in inputs.items()})
    np.testing.assert_allclose(short["pooled_output"], pooled_output[:2], atol=2e-5, rtol=0)
    # A request outside the vocabulary is refused, not answered from another row.
    bad = dict(inputs, input_ids=inputs["input_ids"] + 30522)
    with pytest.raises(RuntimeError, match="out of bounds"):
        run(**bad)

    proc = convert_encoder("original_to_tflite", tmp_path / "int8", "--quantize")
    assert "dynamic-range int8" in proc.stderr
    int8_file = tmp_path / "int8" / "encoder.tflite"
    assert int8_file.stat().st_size < 0.4 * (tmp_path / "f32" / "encoder.tflite").stat().st_size
    got = litert_export.interpreter(int8_file).get_signature_runner()(**inputs)
    real = inputs["input_mask"] == 1
    assert_close_to_int8(got["sequence_output"][real], sequence_output[real])
    assert_close_to_int8(got["pooled_output"], pooled_output)


def test_encoder_export_refuses_bad_input_in_one_line(tmp_path):
    config = tiny.original_config_file()
    heads_only = str(tmp_path / "heads" / "model.ckpt-1")
    checkpoints.save_checkpoint(heads_only, {k: v for k, v in checkpoints.load_checkpoint(tiny.original_dir()).items()
                                             if k.startswith("cls/")})
    out = tmp_path / "out"
    assert_user_error(run_script("convert_checkpoint.py", "--mode=original_to_tflite", f"--init_checkpoint={heads_only}",
                                 f"--bert_config_file={config}", f"--output_dir={out}"),
                      "holds no BERT encoder variables")
    assert_user_error(run_script("convert_checkpoint.py", "--mode=original_to_tflite", f"--output_dir={out}"),
                      "--init_checkpoint, --bert_config_file required for --mode=original_to_tflite")
    assert not out.exists()
    out.mkdir()
    (out / "encoder.tflite").write_bytes(b"earlier")
    assert_user_error(run_script("convert_checkpoint.py", "--mode=original_to_tflite", f"--init_checkpoint={tiny.original_dir()}",
                                 f"--bert_config_file={config}", f"--output_dir={out}"),
                      "already holds an export (encoder.tflite)")
    assert (out / "encoder.tflite").read_bytes() == b"earlier"


def test_quantize_flags_without_their_export_are_one_line(tmp_path):
    """--tflite_quantize or --onnx_quantize alone would write nothing quantized: refused before the job starts."""
    common = [f"--vocab_file={vocab()}",
              f"--bert_config_file={tiny.original_config_file()}", f"--init_checkpoint={tiny.original_dir()}",
              f"--output_dir={tmp_path / 'out'}"]
    assert_user_error(run_script("run_ner.py", *common, f"--data_dir={tmp_path}", "--tflite_quantize"),
                      "--tflite_quantize quantizes the model of --export_tflite, which is not given")
    assert_user_error(run_script("run_squad.py", *common, "--onnx_quantize"),
                      "--onnx_quantize quantizes the model of --export_onnx, which is not given")
    (tmp_path / "folder.tflite").mkdir()
    assert_user_error(run_script("run_ner.py", *common, f"--data_dir={tmp_path}",
                                 f"--export_tflite={tmp_path / 'folder.tflite'}"),
                      "is a folder, expected a file name")
    assert not (tmp_path / "out").exists()
