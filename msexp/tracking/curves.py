"""Learning curves: a trial's eval metrics by epoch, stored compactly in its user attrs."""

from __future__ import annotations

import math
from collections.abc import Sequence

from optuna.trial import FrozenTrial

from msexp.keys import StudyKey, TrialKey
from msexp.knobs import EPOCH_METRICS
from msexp.training.records import Epoch

CURVE_METRICS = tuple(m for m in EPOCH_METRICS if m.startswith("eval_"))


def epoch_table(epochs: Sequence[Epoch]) -> dict[str, list[float | None]]:
    """`{"epoch": [1, 2], "eval_accuracy": [0.8, 0.9], ...}`: what `TrialKey.EPOCHS` holds."""
    table: dict[str, list[float | None]] = {"epoch": [e.epoch for e in epochs]}
    for metric in CURVE_METRICS:
        values = [e.metrics.get(metric) for e in epochs]
        if any(v is not None for v in values):
            table[metric] = [float(f"{v:.6g}") if v is not None and math.isfinite(v) else None
                             for v in values]
    return table


def curves_of(trial: FrozenTrial, objective: str) -> dict[str, list[tuple[int, float]]]:
    """metric -> [(epoch, value)]: from `TrialKey.EPOCHS`, or else the objective's
    intermediate values (reported to the pruner)."""
    table = trial.user_attrs.get(TrialKey.EPOCHS)
    if table:
        return {m: [(e, v) for e, v in zip(table["epoch"], values) if v is not None]
                for m, values in table.items() if m != "epoch"}
    if trial.intermediate_values:
        return {objective: sorted(trial.intermediate_values.items())}
    return {}


def objective_name(user_attrs: dict) -> str:
    names = user_attrs.get(StudyKey.OBJECTIVES)
    return names[0] if names else "value"
