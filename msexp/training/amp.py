"""Automatic mixed precision: O0-O3 through `mindspore.amp.auto_mixed_precision`."""

from __future__ import annotations

from typing import Any

import mindspore as ms
from mindspore import amp, nn

_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.LayerNorm, nn.GroupNorm)


def apply_amp(network: nn.Cell, params: dict[str, Any]) -> nn.Cell:
    """Cast `network` for `params["amp_level"]`; O0 returns it unchanged.

    O2 keeps normalisation layers in float32 and O3 casts them too; `keep_batchnorm_fp32`
    overrides that choice for both levels.
    """
    level = params["amp_level"]
    if level == "O0":
        return network
    dtype = getattr(ms, params["amp_dtype"])
    network = amp.auto_mixed_precision(network, level, dtype=dtype)
    if level in ("O2", "O3"):
        norm_dtype = ms.float32 if params["keep_batchnorm_fp32"] else dtype
        for _, cell in network.cells_and_names():
            if isinstance(cell, _NORMS):
                cell.to_float(norm_dtype)
    return network
