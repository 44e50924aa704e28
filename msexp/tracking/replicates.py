"""Replicates: each configuration's mean and spread over seeds, and whether a knob's effect
stands out from the seed-to-seed spread."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from msexp.keys import TrialKey

SEED = "seed"


@dataclass
class Configuration:
    """The trials of one configuration (its params but the seed)."""

    params: dict[str, Any]
    values: dict[str, list[float]]  # metric -> one value per seed

    def mean(self, metric: str) -> float:
        return statistics.fmean(self.values[metric]) if self.values.get(metric) else math.nan

    def std(self, metric: str) -> float:
        values = self.values.get(metric, [])
        return statistics.stdev(values) if len(values) > 1 else math.nan


@dataclass
class Effect:
    """How much a knob moves a metric, against the seed-to-seed spread."""

    knob: str
    metric: str
    effect: float  # the largest minus the smallest mean over the knob's values
    spread: float  # pooled standard deviation over seeds

    @property
    def real(self) -> bool:
        return self.effect > self.spread

    def line(self) -> str:
        verdict = "larger than" if self.real else "within"
        return (f"{self.knob}: {self.metric} moves by {self.effect:.4g} across its values, "
                f"{verdict} the seed-to-seed spread ({self.spread:.4g})")


def configurations(study: optuna.Study, metrics: list[str]) -> list[Configuration]:
    """COMPLETE trials grouped by their params without the seed, in trial order."""
    groups: dict[str, Configuration] = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        params = {k: v for k, v in t.params.items() if k != SEED}
        key = json.dumps(params, sort_keys=True, default=str)
        group = groups.setdefault(key, Configuration(params, {m: [] for m in metrics}))
        recorded = t.user_attrs.get(TrialKey.METRICS, {})
        for metric in metrics:
            if isinstance(recorded.get(metric), (int, float)):
                group.values[metric].append(float(recorded[metric]))
    return list(groups.values())


def effects(groups: list[Configuration], metric: str) -> list[Effect]:
    """Each swept knob's effect on `metric`; [] unless some configuration has 2+ seeds."""
    variances = [c.std(metric) ** 2 for c in groups if len(c.values.get(metric, [])) > 1]
    if not variances:
        return []
    spread = math.sqrt(statistics.fmean(variances))
    found = []
    for knob in sorted({k for c in groups for k in c.params}):
        by_value: dict[str, list[float]] = {}
        for c in groups:
            if knob in c.params and not math.isnan(c.mean(metric)):
                by_value.setdefault(repr(c.params[knob]), []).append(c.mean(metric))
        if len(by_value) > 1:
            means = [statistics.fmean(v) for v in by_value.values()]
            found.append(Effect(knob, metric, max(means) - min(means), spread))
    return found


def markdown(groups: list[Configuration], metrics: list[str], found: list[Effect]) -> str:
    """The configurations' table (mean ± std, seeds) and the effects, as Markdown."""
    knobs = sorted({k for c in groups for k in c.params})
    rows = ["| " + " | ".join([*knobs, *metrics, "seeds"]) + " |",
            "|" + "---|" * (len(knobs) + len(metrics) + 1)]
    for c in groups:
        cells = [str(c.params.get(k, "-")) for k in knobs]
        cells += [f"{c.mean(m):.4g} ± {c.std(m):.2g}" for m in metrics]
        rows.append("| " + " | ".join([*cells, str(max(map(len, c.values.values())))]) + " |")
    return "\n".join(rows + [""] + [f"- {e.line()}" for e in found]) + "\n"
