"""Automatic mixed precision: O0-O3 through `mindspore.amp.auto_mixed_precision`."""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import mindspore as ms
from mindspore import amp, nn

_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.LayerNorm, nn.GroupNorm)


def apply_amp(network: nn.Cell, params: dict[str, Any], scratch: Path | None = None) -> nn.Cell:
    """Cast `network` for `params["amp_level"]`; O0 returns it unchanged.

    O1 rewrites the network's source into `scratch`, which must outlive compiling the
    network's graphs; without one, a temporary folder lives as long as the network.

    O1 casts only MindSpore's white-listed ops (convolutions, matmuls) and leaves
    normalisation in float32. O2 and O3 cast every cell; `keep_batchnorm_fp32` then
    decides whether normalisation layers stay in float32.
    """
    level = params["amp_level"]
    if level == "O0":
        return network
    dtype = getattr(ms, params["amp_dtype"])
    if level == "O1":
        folder = scratch or Path(tempfile.mkdtemp(prefix="msexp-amp-"))
        with _cwd(folder):  # O1 rewrites the network's source into ./rewritten_network/
            cast = amp.auto_mixed_precision(network, level, dtype=dtype)
        if scratch is None:
            weakref.finalize(cast, shutil.rmtree, folder, True)
        return cast
    network = amp.auto_mixed_precision(network, level, dtype=dtype)
    if level in ("O2", "O3"):
        norm_dtype = ms.float32 if params["keep_batchnorm_fp32"] else dtype
        for _, cell in network.cells_and_names():
            if isinstance(cell, _NORMS):
                cell.to_float(norm_dtype)
    return network


@contextmanager
def _cwd(folder: Path) -> Iterator[None]:
    previous = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)
