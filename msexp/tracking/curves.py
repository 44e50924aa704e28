"""Learning curves: a trial's eval metrics by epoch and its training loss by update, stored
compactly in its user attrs."""

from __future__ import annotations

import math
from collections.abc import Sequence

from optuna.trial import FrozenTrial

from msexp.keys import StudyKey, TrialKey
from msexp.knobs import EPOCH_METRICS
from msexp.training.records import Epoch

CURVE_METRICS = tuple(m for m in EPOCH_METRICS if m.startswith("eval_"))
UPDATE_SERIES = ("train_loss",)  # per-update series kept for a one-epoch trial's curves
UPDATES = "updates"  # the epoch table's key of the per-update series
MAX_UPDATE_POINTS = 200  # per series: every update up to this, else evenly spaced ones


def epoch_table(epochs: Sequence[Epoch]) -> dict[str, list[float | None]]:
    """`{"epoch": [1, 2], "eval_accuracy": [0.8, 0.9], ...}`: what `TrialKey.EPOCHS` holds.
    A trial of one epoch, whose epoch curve would be one point, also keeps its per-update
    series: `"updates": {"train_loss": [[1, 2.3], [2, 2.2], ...]}`, at most
    `MAX_UPDATE_POINTS` evenly spaced points, the last update's always."""
    table: dict[str, list[float | None]] = {"epoch": [e.epoch for e in epochs]}
    for metric in CURVE_METRICS:
        values = [e.metrics.get(metric) for e in epochs]
        if any(v is not None for v in values):
            table[metric] = [_compact(v) for v in values]
    if len(epochs) == 1:
        updates = {name: points for name in UPDATE_SERIES
                   if (points := _update_points(epochs[0].series.get(name) or []))}
        if updates:
            table[UPDATES] = updates  # type: ignore[assignment]  # the one nested entry
    return table


def _update_points(series: list[float]) -> list[list[float]]:
    """[[update, value]] of an epoch's series, its finite values, thinned out evenly."""
    finite = [[i + 1, float(f"{v:.6g}")] for i, v in enumerate(series) if math.isfinite(v)]
    if len(finite) <= MAX_UPDATE_POINTS:
        return finite
    stride = len(finite) / MAX_UPDATE_POINTS
    return [*(finite[int(i * stride)] for i in range(MAX_UPDATE_POINTS - 1)), finite[-1]]


def _compact(value: float | None) -> float | None:
    return float(f"{value:.6g}") if value is not None and math.isfinite(value) else None


def curves_of(trial: FrozenTrial, objective: str) -> dict[str, list[tuple[int, float]]]:
    """metric -> [(epoch, value)]: from `TrialKey.EPOCHS`, or else the objective's
    intermediate values (reported to the pruner)."""
    table = trial.user_attrs.get(TrialKey.EPOCHS)
    if table:
        return {m: [(e, v) for e, v in zip(table["epoch"], values) if v is not None]
                for m, values in table.items() if m not in ("epoch", UPDATES)}
    if trial.intermediate_values:
        return {objective: sorted(trial.intermediate_values.items())}
    return {}


def update_curves_of(trial: FrozenTrial) -> dict[str, list[tuple[int, float]]]:
    """series -> [(update, value)]: the per-update series `TrialKey.EPOCHS` keeps (none for
    a trial recorded before msexp kept them)."""
    kept = (trial.user_attrs.get(TrialKey.EPOCHS) or {}).get(UPDATES) or {}
    return {name: [(int(u), v) for u, v in points] for name, points in kept.items() if points}


def objective_name(user_attrs: dict) -> str:
    names = user_attrs.get(StudyKey.OBJECTIVES)
    return names[0] if names else "value"
