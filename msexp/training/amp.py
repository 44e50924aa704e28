"""Automatic mixed precision: O0-O3 through `mindspore.amp.auto_mixed_precision`."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import mindspore as ms
from mindspore import amp, nn

_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.LayerNorm, nn.GroupNorm)


def apply_amp(network: nn.Cell, params: dict[str, Any]) -> nn.Cell:
    """Cast `network` for `params["amp_level"]`; O0 returns it unchanged.

    O1 casts only MindSpore's white-listed ops (convolutions, matmuls) and leaves
    normalisation in float32. O2 and O3 cast every cell; `keep_batchnorm_fp32` then
    decides whether normalisation layers stay in float32.
    """
    level = params["amp_level"]
    if level == "O0":
        return network
    dtype = getattr(ms, params["amp_dtype"])
    if level == "O1":
        with _scratch_cwd():  # O1 rewrites the network's source into ./rewritten_network/
            return amp.auto_mixed_precision(network, level, dtype=dtype)
    network = amp.auto_mixed_precision(network, level, dtype=dtype)
    if level in ("O2", "O3"):
        norm_dtype = ms.float32 if params["keep_batchnorm_fp32"] else dtype
        for _, cell in network.cells_and_names():
            if isinstance(cell, _NORMS):
                cell.to_float(norm_dtype)
    return network


@contextmanager
def _scratch_cwd() -> Iterator[None]:
    """Run in a private folder that lives until exit: compiling reads the rewritten source."""
    previous, scratch = os.getcwd(), tempfile.mkdtemp(prefix="msexp-amp-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    os.chdir(scratch)
    try:
        yield
    finally:
        os.chdir(previous)
