"""msexp's seeded Dropout masks (msexp/training/dropout.py): the same masks in every process
for one seed, other masks for another seed and for each layer, each micro-batch the rows of
the batch's mask, the rate kept, and nothing drawn in eval mode."""

from __future__ import annotations

import subprocess
import sys

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, nn

from msexp.training.dropout import SeededMask, seed_dropouts

_MASKS = """
import hashlib, sys
import numpy as np, mindspore as ms
from mindspore import nn, Tensor
from msexp.training.dropout import seed_dropouts
ms.set_context(mode=ms.GRAPH_MODE)
net = nn.SequentialCell(nn.Dropout(p=0.5), nn.Dropout(p=0.3))
seed_dropouts(net, int(sys.argv[1]))
net.set_train(True)
x = Tensor(np.ones((64, 96), np.float32))
print(hashlib.sha256(b"".join(net(x).asnumpy().tobytes() for _ in range(12))).hexdigest())
"""


@pytest.fixture(autouse=True)
def graph_mode():
    """Graph mode, as msexp's train steps compile the network (`ms.jit`)."""
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    yield
    ms.set_context(mode=mode)


def _masks_in_a_new_process(seed: int) -> str:
    done = subprocess.run([sys.executable, "-c", _MASKS, str(seed)], capture_output=True,
                          text=True, check=True, timeout=300)
    return done.stdout.split()[-1]


def _network(seed: int) -> nn.Cell:
    network = nn.SequentialCell(nn.Dropout(p=0.5), nn.Dropout(p=0.25))
    assert seed_dropouts(network, seed) == 2
    network.set_train(True)
    return network


def test_a_seed_draws_the_same_masks_in_every_process_and_another_seed_others() -> None:
    # mutation: SeededMask seeding its stream with 0 (a random stream per process)
    first, second = _masks_in_a_new_process(3), _masks_in_a_new_process(3)
    assert first == second
    assert _masks_in_a_new_process(4) != first


def test_micro_batches_in_order_draw_the_rows_of_the_batchs_mask() -> None:
    x = Tensor(np.ones((48, 20), np.float32))
    batch, split = _network(0), _network(0)
    whole = [batch(x).asnumpy() for _ in range(3)]
    parts = [np.concatenate([split(x[i:i + 12]).asnumpy() for i in range(0, 48, 12)])
             for _ in range(3)]
    for batch, micro in zip(whole, parts):
        np.testing.assert_array_equal(micro, batch)
    assert not np.array_equal(whole[0], whole[1]), "each call draws a new mask"


def test_each_layer_draws_its_own_mask_at_its_rate_and_none_in_eval() -> None:
    network = nn.SequentialCell(nn.Dropout(p=0.5), nn.Dropout(p=0.5))
    seed_dropouts(network, 0)
    first, second = (cell.dropout for cell in network.cells())
    assert isinstance(first, SeededMask) and isinstance(second, SeededMask)
    x = Tensor(np.ones((200, 100), np.float32))
    out_first, mask_first = (t.asnumpy() for t in first(x))
    _, mask_second = (t.asnumpy() for t in second(x))
    assert not np.array_equal(mask_first, mask_second), "two layers, two streams"
    assert mask_first.mean() == pytest.approx(0.5, abs=0.02)
    np.testing.assert_allclose(out_first, mask_first / 0.5)  # kept values scaled by 1/(1-p)
    lower = nn.Dropout(p=0.2)
    seed_dropouts(lower, 0)
    assert lower.dropout(x)[1].asnumpy().mean() == pytest.approx(0.8, abs=0.02)
    network.set_train(False)
    np.testing.assert_array_equal(network(x).asnumpy(), x.asnumpy())


def test_a_rate_of_0_and_other_dropout_kinds_are_left_alone() -> None:
    network = nn.SequentialCell(nn.Dropout(p=0.0), nn.Dropout2d(0.5))
    assert seed_dropouts(network, 0) == 0
    assert not any(isinstance(getattr(c, "dropout", None), SeededMask)
                   for c in network.cells())
    twice = nn.SequentialCell(nn.Dropout(p=0.5))
    assert seed_dropouts(twice, 0) == seed_dropouts(twice, 0) == 1, "seeded once, counted"
