"""resnet_cifar: depth rules, synthetic data, and BatchNorm modes inside the jitted loop."""

from __future__ import annotations

from typing import Any

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn

from msexp.experiment import Workload
from msexp.training.loop import train
from tests.conftest import builtin

resnet_cifar = builtin("resnet_cifar")
blocks_per_stage, build, resnet = resnet_cifar.blocks_per_stage, resnet_cifar.build, \
    resnet_cifar.resnet
patterns = resnet_cifar.patterns  # from _patterns.py beside it

@pytest.mark.parametrize(("depth", "block", "n"), [(8, "basic", 1), (20, "basic", 3),
                                                   (11, "bottleneck", 1), (20, "bottleneck", 2)])
def test_depth_sets_blocks_per_stage(depth: int, block: str, n: int) -> None:
    assert blocks_per_stage(depth, block) == n


@pytest.mark.parametrize(("depth", "block"), [(9, "basic"), (8, "bottleneck"), (8, "wide")])
def test_impossible_depth_or_block_is_refused(depth: int, block: str) -> None:
    with pytest.raises(ValueError, match="depth must be|block must be"):
        blocks_per_stage(depth, block)


@pytest.mark.parametrize("block", ["basic", "bottleneck"])
def test_network_shape_and_size_follow_depth_and_width(block: str) -> None:
    depth = 8 if block == "basic" else 11
    small, wide = resnet(depth, 4, block), resnet(depth, 8, block)
    convs = sum(isinstance(c, nn.Conv2d) for _, c in small.cells_and_names())
    projections = 2 if block == "basic" else 3  # 1x1 shortcuts where the shape changes
    assert convs == depth - 1 + projections  # every weighted layer but the Dense head
    assert any(isinstance(c, nn.BatchNorm2d) for _, c in small.cells_and_names())
    size = sum(p.size for p in small.trainable_params())
    assert sum(p.size for p in wide.trainable_params()) > 3 * size
    small.set_train(False)
    logits = small(ms.Tensor(np.zeros((2, 3, 32, 32), np.float32)))
    assert logits.shape == (2, 10)


def test_synthetic_data_is_seeded_normalised_and_balanced() -> None:
    x_train, y_train, x_eval, y_eval, description = patterns()
    assert x_train.shape[1:] == (3, 32, 32) and x_train.dtype == np.float32
    assert y_train.dtype == np.int32 and set(y_train) == set(range(10)) == set(y_eval)
    assert abs(float(x_train.mean())) < 0.05 and abs(float(x_train.std()) - 1) < 0.05
    patterns.cache_clear()
    assert np.array_equal(patterns()[0], x_train)
    assert "synthetic 32x32x3" in description
    assert build({"depth": 8, "width": 4, "block": "basic", "data": None}).data_source \
        == description


@pytest.mark.slow  # over 3 s: the fast tier stays under 5 min
def test_batchnorm_trains_on_batch_stats_and_evaluates_on_moving_stats() -> None:
    """The loop's two jitted graphs keep their modes across set_train toggles.

    Evaluation runs in batches of 512: a sample placed both in the first batch and alone
    in the second gets the same logits only if BatchNorm uses its moving statistics.
    """
    network = resnet(8, 4)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 3, 8, 8)).astype(np.float32)  # small images keep it quick
    y = rng.integers(0, 10, 32).astype(np.int32)
    x_eval = np.concatenate([x, rng.standard_normal((480, 3, 8, 8)).astype(np.float32), x[:1]])
    y_eval = np.concatenate([y, rng.integers(0, 10, 480).astype(np.int32), y[:1]])
    first_bn = next(c for _, c in network.cells_and_names() if isinstance(c, nn.BatchNorm2d))
    seen: list[dict[str, Any]] = []

    def observe(logits: np.ndarray, labels: np.ndarray) -> float:
        seen.append({"moving_mean": first_bn.moving_mean.asnumpy().copy(),
                     "gap": float(np.abs(logits[0] - logits[512]).max())})
        return seen[-1]["gap"]

    workload = Workload(network, nn.CrossEntropyLoss(), (x, y), (x_eval, y_eval),
                        metrics={"gap": observe})
    params = {"batch_size": 16, "micro_size": 1, "epochs": 2, "seed": 0, "lr": 0.05,
              "optimizer": "momentum", "momentum": 0.9, "weight_decay": 0.0,
              "lr_schedule": "constant", "warmup_epochs": 0, "amp_level": "O2",
              "amp_dtype": "float16", "keep_batchnorm_fp32": True, "loss_scale": "none"}
    train(workload, params, lambda event: None)
    assert len(seen) == 2
    for epoch in seen:
        assert epoch["gap"] < 1e-3, "evaluation used batch statistics"
    assert np.abs(seen[0]["moving_mean"]).max() > 0, "training did not update moving stats"
    assert not np.allclose(seen[0]["moving_mean"], seen[1]["moving_mean"]), \
        "after set_train(True) the second epoch did not train on batch statistics"
    assert np.array_equal(first_bn.moving_mean.asnumpy(), seen[1]["moving_mean"])
