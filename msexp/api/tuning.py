"""`msexp.tune_sweep`: `msexp tune` from Python, on the same engine (`tune.tuner.tuning`
and `tune.tuner.tune`): the pick, and what became of each candidate."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from msexp.api.quiet import quiet
from msexp.api.sources import Source, load
from msexp.api.trials import Value
from msexp.tune.candidates import check_noise, check_tunable
from msexp.tune.measure import Profile
from msexp.tune.outcome import Outcome, fate
from msexp.tune.tuner import Settings, tune, tuning

if TYPE_CHECKING:
    import pandas


@dataclass(frozen=True)
class TuneResult:
    """What a tune run found.

    Attributes:
        pick: the chosen configuration (swept knob -> value), or None: none fits the
            memory budget and keeps the objective.
        sweep_file: the pick's sweep file, to sweep or train it (None without a pick).
        plot: the throughput-against-memory plot.
        outcome: everything the run measured (`msexp.tune.outcome.Outcome`).
    """

    pick: dict[str, Value] | None
    sweep_file: Path | None
    plot: Path | None
    outcome: Outcome

    def candidates(self) -> pandas.DataFrame:
        """One row per candidate: its knobs, its throughput ratio to the baseline (the
        latest probe's) and spread, memory_mb, and `fate`: what became of it, as `msexp
        tune` says it (the pick, dropped and why, not kept and why, ranked ...)."""
        import pandas  # lazy: pandas takes a second to import

        return pandas.DataFrame([self._row(p) for p in self.outcome.profiles])

    def _row(self, profile: Profile) -> dict[str, Value]:
        return {**profile.candidate.point,
                "throughput_ratio": profile.ratios[-1] if profile.ratios else None,
                "spread": profile.spreads[-1] if profile.spreads else None,
                "memory_mb": profile.memory_mb, "fate": fate(self.outcome, profile)}


def tune_sweep(source: Source, *, memory_mb: float | None = None, updates: int = 10,
               top: int = 2, tolerance: float = 0.0, tracking_uri: str | None = None,
               progress: bool = True) -> TuneResult:
    """The fastest configuration of the sweep's listed values that fits the memory budget
    and keeps its objective, as `msexp tune FILE` finds it (profile, halve, confirm;
    docs/tune.md).

    Args:
        source: a sweep file's path, or a dict of its sections.
        memory_mb: the memory budget in MB (`--memory`); default the sweep's
            `train_mem_mb` constraint.
        updates: optimizer updates of a first profile (`--updates`).
        top: candidates the confirm phase trains against the baseline (`--top`).
        tolerance: how much worse than the baseline's objective a candidate may be
            (`--tolerance`).
        tracking_uri: the MLflow tracking URI (`--tracking-uri`).
        progress: print a line per probe and phase.

    Raises:
        SpecError: the sweep breaks a rule or is not tunable (the CLI's one line).
    """
    def say(line: str) -> None:
        if progress:
            print(line, file=sys.stderr, flush=True)

    with quiet():
        spec = load(source)
        check_tunable(spec)  # before the hosts start
        check_noise(spec, tolerance)
        with tuning(spec, spec.budget.workers, tracking_uri, say) as (runner, runs):
            found = tune(spec, Settings(updates, top, tolerance, memory_mb), runner, runs)
    return result_of(found)


def result_of(outcome: Outcome) -> TuneResult:
    """What a tune run found, as the API gives it."""
    pick = outcome.pick
    return TuneResult(dict(pick.profile.candidate.point) if pick is not None else None,
                      outcome.sweep_file, outcome.plot, outcome)
