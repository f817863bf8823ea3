"""On a GPU: training runs there, XLA and graph steps agree, float16 with dynamic loss scaling converges like
float32 over 200 steps, and MirroredStrategy on one GPU equals the default strategy. Skipped without a GPU."""
import numpy as np
import pytest

import checkpoints
import run_pretraining as rp
from tests import test_training
from tests.event_files import summary_scalars
from tests.test_training import float32_policy, pretraining_input_fn, tiny_config  # noqa: F401

pytestmark = pytest.mark.gpu


def _train(output_dir, steps, **kwargs):
    """test_training's tiny pre-training run, one checkpoint at the end, loops of at most 50 steps."""
    return test_training._train(output_dir, steps=steps, save_checkpoints_steps=steps,
                                iterations_per_loop=min(steps, 50), **kwargs)


def test_training_places_the_model_on_the_gpu(tmp_path):
    task = rp.PretrainingTask(tiny_config())
    model = task.build_model()
    features = next(iter(pretraining_input_fn()(4)))
    out = model(features, training=False)
    assert "GPU" in out["total_loss"].device.upper()
    assert all("GPU" in getattr(v, "value", v).device.upper() for v in model.variables_by_name().values())


def test_xla_steps_equal_graph_steps(tmp_path):
    graph = str(tmp_path / "graph")
    _train(graph, 5)
    xla = str(tmp_path / "xla")
    _train(xla, 5, use_xla=True, init_checkpoint=f"{graph}/model.ckpt-0")
    a, b = checkpoints.load_checkpoint(f"{graph}/model.ckpt-5"), checkpoints.load_checkpoint(f"{xla}/model.ckpt-5")
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=2e-3, atol=2e-4, err_msg=name)


def test_mirrored_on_one_gpu_equals_the_default_strategy(tmp_path):
    default = str(tmp_path / "default")
    r1 = _train(default, 10)
    mirrored = str(tmp_path / "mirrored")
    r2 = _train(mirrored, 10, distribution_strategy="mirrored", init_checkpoint=f"{default}/model.ckpt-0")
    assert r1["loss"] == pytest.approx(r2["loss"], rel=1e-4)


def test_float16_200_steps_converge_like_float32(tmp_path):
    fp32 = str(tmp_path / "fp32")
    _train(fp32, 200)
    fp16 = str(tmp_path / "fp16")
    result = _train(fp16, 200, dtype="float16", init_checkpoint=f"{fp32}/model.ckpt-0")
    losses32 = [v for _, v in summary_scalars(fp32)["loss"]]
    losses16 = [v for _, v in summary_scalars(fp16)["loss"]]
    assert len(losses16) == 4 and all(np.isfinite(losses16)), losses16
    assert losses16[-1] < losses16[0] - 1.0, losses16
    assert abs(losses16[-1] - losses32[-1]) < 0.05 * losses32[-1], (losses16, losses32)
    assert result["loss_scale"] >= 1.0
