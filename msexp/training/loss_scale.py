"""Loss scaling with the functional `amp.StaticLossScaler` / `amp.DynamicLossScaler`."""

from __future__ import annotations

from typing import Any

from mindspore import amp


def make_scaler(params: dict[str, Any]) -> tuple[amp.LossScaler | None, bool]:
    """Return (scaler, drop_overflow_update) for `params["loss_scale"]`; (None, False) if none."""
    kind = params["loss_scale"]
    if kind == "none":
        return None, False
    if kind == "fixed":
        return amp.StaticLossScaler(params["loss_scale_value"]), params["drop_overflow_update"]
    return amp.DynamicLossScaler(params["loss_scale_value"], params["loss_scale_factor"],
                                 params["loss_scale_window"]), True
