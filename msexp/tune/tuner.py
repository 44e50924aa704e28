"""`tune`: profile, halve and confirm, then the pick with its sweep file and plot."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from msexp.paths import REPORTS_DIR, STORE_DIR
from msexp.spec import SweepSpec
from msexp.tune import phases
from msexp.tune.candidates import candidates, check_tunable, seeds
from msexp.tune.outcome import Outcome, choose
from msexp.tune.output import sweep_file, throughput_plot
from msexp.tune.phases import Budget
from msexp.tune.record import PhaseRuns
from msexp.tune.runner import Runner

TUNE_DIR = STORE_DIR / "tune"
WARM_LIMIT = 32  # graphs of this many candidates at most stay warm on a host (memory)


@dataclass(frozen=True)
class Settings:
    """The command's options: profile `updates`, `top` k to confirm, the objective's
    `tolerance`, and a memory budget in MB (None: the file's constraint, if any)."""

    updates: int = 10
    top: int = 2
    tolerance: float = 0.0
    memory_mb: float | None = None


def memory_budget(spec: SweepSpec, memory_mb: float | None) -> float | None:
    """`--memory`, else the sweep file's `train_mem_mb` constraint's max."""
    if memory_mb is not None:
        return memory_mb
    return next((c.max for c in spec.constraints
                 if c.metric == phases.MEMORY and c.max is not None), None)


def budget_of(spec: SweepSpec, memory_mb: float | None) -> Budget:
    return Budget([(c.metric, c.max, c.min) for c in spec.constraints],
                  memory_budget(spec, memory_mb))


def warm_children(spec: SweepSpec) -> int:
    """How many trial children a host keeps warm: one per candidate (up to WARM_LIMIT),
    so a candidate's halving profiles and trainings reuse the graphs its first profile
    compiled."""
    return max(1, min(len(candidates(spec)), WARM_LIMIT))


def run_folder(spec: SweepSpec) -> Path:
    """A fresh folder for this tune run's trials: mlruns/tune/NAME/TIME."""
    return TUNE_DIR / spec.name / time.strftime("%Y%m%d-%H%M%S")


def tune(spec: SweepSpec, settings: Settings, runner: Runner, runs: PhaseRuns) -> Outcome:
    """Profile every candidate, halve, confirm the top k against the baseline (and the next
    k where none of them keeps the objective); the pick is the one that trained fastest
    among those kept and the baseline (`choose`). Trials that fail are dropped with their
    reason."""
    check_tunable(spec)
    found = candidates(spec)
    budget = budget_of(spec, settings.memory_mb)
    profiles = phases.profile_all(runner, found, budget, settings.updates,
                                  lambda ran, dropped: runs.children("profile", ran, dropped))
    standing, spread, rounds = phases.halve(runner, profiles, budget, settings.updates,
                                    lambda ran, dropped: runs.children("halve", ran, dropped))
    objective = spec.objectives[0]
    baseline_verdict, verdicts = None, []
    if standing:
        baseline_verdict, verdicts = phases.confirm(
            runner, standing, settings.top, profiles[0], seeds(spec), objective.metric,
            objective.direction == "maximize", settings.tolerance, budget,
            lambda ran, dropped: runs.children("confirm", ran, dropped))
    pick = choose(verdicts, baseline_verdict)
    outcome = Outcome(profiles, standing, spread, rounds, baseline_verdict, verdicts, pick)
    outcome.plot = throughput_plot(REPORTS_DIR / f"{spec.name}-tune.png", outcome,
                                   budget.memory_mb, f"msexp tune {spec.name}: throughput "
                                   "against memory")
    if pick is not None:
        swept = {k for c in found for k in c.point}
        outcome.sweep_file = sweep_file(REPORTS_DIR / f"{spec.name}-tuned.yaml", spec.path,
                                        f"{spec.name}-tuned", pick.profile.candidate.point,
                                        swept)
    phase = "confirm" if standing else "profile"
    for path in (outcome.plot, outcome.sweep_file):
        if path is not None:
            runs.attach(phase, path)
    runs.close()
    outcome.parents, outcome.experiment_id = dict(runs.parents), runs.experiment_id
    return outcome
