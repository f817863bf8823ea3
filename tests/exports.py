"""What the encoder-export tests share (LiteRT in test_litert_export.py, ONNX in test_onnx_export.py):
convert_checkpoint.py's export of the original's tiny checkpoint, the original's outputs to compare with, and how
close an int8 model's outputs must come to the float ones."""
import os

import numpy as np

from tests import tiny
from tests.processes import assert_ran, run_script


def original_batch():
    """The original's inputs and outputs on the tiny checkpoint (dropout off)."""
    reference = np.load(os.path.join(tiny.original_dir(), "reference_outputs.npz"))
    inputs = {name: reference["in_" + name].astype(np.int32) for name in ("input_ids", "input_mask", "segment_ids")}
    return inputs, reference["out_sequence_output"], reference["out_pooled_output"]


def convert_encoder(mode, output_dir, *extra):
    """`convert_checkpoint.py --mode=MODE` of the original's tiny checkpoint into output_dir, as a user types it;
    returns the finished process."""
    return assert_ran(run_script("convert_checkpoint.py", f"--mode={mode}", f"--init_checkpoint={tiny.original_dir()}",
                                 f"--bert_config_file={tiny.original_config_file()}", f"--output_dir={output_dir}",
                                 *extra))


def assert_close_to_int8(got, expected):
    """Outputs of an int8 model: each vector points where the float one does, none far off."""
    got, expected = got.reshape(-1, got.shape[-1]), expected.reshape(-1, expected.shape[-1])
    cosine = (got * expected).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(expected, axis=-1)
    assert cosine.min() > 0.99, cosine.min()
    assert np.abs(got - expected).max() < 0.25 * np.abs(expected).max()
