"""AMP levels: which cells really compute in FP16, checked on the cells and their outputs."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn

from msexp.training.amp import apply_amp


def conv_bn_dense() -> nn.Cell:
    return nn.SequentialCell(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                             nn.Dense(4 * 8 * 8, 10))


def amp(level: str, keep_batchnorm_fp32: bool = True) -> nn.Cell:
    return apply_amp(conv_bn_dense(), {"amp_level": level, "amp_dtype": "float16",
                                       "keep_batchnorm_fp32": keep_batchnorm_fp32})


def cells_of(network: nn.Cell, kind: type) -> list[nn.Cell]:
    return [cell for _, cell in network.cells_and_names() if type(cell) is kind]


def precision(cell: nn.Cell) -> str:
    """The type a cell casts its inputs (and weights) to: FP16, FP32 or NOTSET."""
    return cell.get_mixed_precision_type().name


def images(n: int = 2) -> ms.Tensor:
    return ms.Tensor(np.random.default_rng(0).standard_normal((n, 3, 8, 8)).astype(np.float32))


def test_o2_casts_conv_and_dense_to_fp16_but_keeps_batchnorm_fp32() -> None:
    network = amp("O2")
    (conv,), (bn,), (dense,) = (cells_of(network, k) for k in (nn.Conv2d, nn.BatchNorm2d,
                                                               nn.Dense))
    assert precision(conv) == "FP16"
    assert precision(dense) == "FP16"
    assert precision(bn) == "FP32"
    network.set_train(True)
    # what the cells compute, not what they are labelled: float32 in, float16 out
    assert conv(images()).dtype == ms.float16
    assert dense(ms.Tensor(np.ones((2, 256), np.float32))).dtype == ms.float16
    assert bn(conv(images())).dtype == ms.float32  # fed float16, computes in float32
    # master weights stay float32; the casts happen inside the cells
    assert all(p.dtype == ms.float32 for p in network.get_parameters())
    assert network(images()).dtype == ms.float32


def test_keep_batchnorm_fp32_false_casts_batchnorm_too() -> None:
    network = amp("O2", keep_batchnorm_fp32=False)
    (bn,) = cells_of(network, nn.BatchNorm2d)
    (conv,) = cells_of(network, nn.Conv2d)
    network.set_train(True)
    assert precision(bn) == "FP16"
    assert bn(conv(images())).dtype == ms.float16


def test_o3_casts_batchnorm_unless_kept() -> None:
    (cast,) = cells_of(amp("O3", keep_batchnorm_fp32=False), nn.BatchNorm2d)
    (kept,) = cells_of(amp("O3", keep_batchnorm_fp32=True), nn.BatchNorm2d)
    assert precision(cast) == "FP16"
    assert precision(kept) == "FP32"


def test_o0_leaves_the_network_alone() -> None:
    original = conv_bn_dense()
    network = apply_amp(original, {"amp_level": "O0"})
    assert network is original
    (conv,) = cells_of(network, nn.Conv2d)
    assert conv(images()).dtype == ms.float32


@pytest.mark.parametrize("level", ["O2", "O3"])
def test_fp16_forward_matches_fp32_within_half_precision(level: str) -> None:
    reference = conv_bn_dense()
    network = conv_bn_dense()
    ms.load_param_into_net(network, {p.name: ms.Parameter(p.data.copy(), p.name)
                                     for p in reference.get_parameters()})
    reference.set_train(False)
    low = apply_amp(network, {"amp_level": level, "amp_dtype": "float16",
                              "keep_batchnorm_fp32": True})
    low.set_train(False)
    want = reference(images(4)).asnumpy()
    got = low(images(4)).asnumpy()
    assert not np.array_equal(got, want)  # it really ran in lower precision
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * np.abs(want).max())


def test_o1_casts_white_listed_ops_and_writes_nothing_here(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    reference = conv_bn_dense()
    reference.set_train(False)
    want = reference(images(4)).asnumpy()
    low = apply_amp(reference, {"amp_level": "O1", "amp_dtype": "float16"})
    low.set_train(False)
    got = low(images(4)).asnumpy()
    assert got.dtype == np.float32
    assert not np.array_equal(got, want)  # conv and dense ran in float16
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * np.abs(want).max())
    assert list(tmp_path.iterdir()) == [], "O1's rewritten source must not land in the cwd"


@pytest.mark.slow
def test_an_o1_trial_leaves_no_scratch_folder(tmp_path, monkeypatch) -> None:
    """O1's rewritten source lives in a temp folder that the forked trial removes itself."""
    from msexp.execution.host import Host
    from msexp.execution.protocol import TrialRequest
    from msexp.execution.result import Status
    from msexp.spec import trial_params
    from tests.conftest import ROOT

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    params = trial_params("mlp_digits", {"amp_level": "O1", "epochs": 1, "hidden": 16})
    runner = Host(cwd=ROOT)
    try:
        result = runner.run(TrialRequest("mlp_digits", params, tmp_path / "trial"), 300)
    finally:
        runner.kill()
    assert result.status is Status.COMPLETE, result.error
    assert list(scratch.iterdir()) == []
