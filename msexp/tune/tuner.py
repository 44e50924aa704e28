"""`tune`: profile, halve and confirm, then the pick with its sweep file and plot."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from msexp.execution.host import HostPool
from msexp.paths import REPORTS_DIR, STORE_DIR
from msexp.spec import SweepSpec
from msexp.tracking.runs import Tracker
from msexp.tune import phases, rules
from msexp.tune.candidates import candidates, check_noise, check_tunable, seeds
from msexp.tune.measure import MEMORY, Budget
from msexp.tune.outcome import Outcome, choose
from msexp.tune.output import sweep_file, throughput_plot
from msexp.tune.phases import Verdict
from msexp.tune.record import PhaseRuns
from msexp.tune.runner import Runner

TUNE_DIR = STORE_DIR / "tune"
WARM_LIMIT = 32  # graphs of this many candidates at most stay warm on a host (memory)
_log = logging.getLogger("msexp")


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
                 if c.metric == MEMORY and c.max is not None), None)


def budget_of(spec: SweepSpec, memory_mb: float | None) -> Budget:
    return Budget([(c.metric, c.max, c.min) for c in spec.constraints],
                  memory_budget(spec, memory_mb))


def warm_children(spec: SweepSpec) -> int:
    """How many trial children a host keeps warm: one per candidate (up to WARM_LIMIT),
    so a candidate's halving profiles and trainings reuse the graphs its first profile
    compiled."""
    return max(1, min(len(candidates(spec)), WARM_LIMIT))


def run_folder(spec: SweepSpec) -> Path:
    """A fresh folder for this tune run's trials, mlruns/tune/NAME/TIME (TIME-2, ... where
    another run started in the same second); its name also names the run's files."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder, number = TUNE_DIR / spec.name / stamp, 1
    while True:
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            number += 1
            folder = TUNE_DIR / spec.name / f"{stamp}-{number}"


@contextmanager
def tuning(spec: SweepSpec, hosts: int, tracking_uri: str | None, say: Callable[[str], None]
           ) -> Iterator[tuple[Runner, PhaseRuns]]:
    """What a tune run runs on (`msexp tune`, the Python API's `msexp.tune_sweep`): `hosts`
    hosts and their runner, which says its lines through `say`, and the run's MLflow phase
    runs; first the MLflow runs a killed tune left RUNNING are ended, KILLED."""
    with HostPool(hosts, warm=warm_children(spec), preload=spec.command is None) as pool:
        runner = Runner(spec, pool, run_folder(spec).resolve(), say)
        runs = PhaseRuns(Tracker(tracking_uri), spec.name, f"{spec.name}-tune", spec.path)
        if ended := runs.end_left():
            _log.warning(f"ended {len(ended)} MLflow run(s) that a killed msexp tune left "
                         "RUNNING, as KILLED")
        yield runner, runs


def report_path(spec: SweepSpec, runner: Runner, kind: str, suffix: str) -> Path:
    """mlruns/reports/NAME-KIND-RUN.SUFFIX: a file of this run, named by its folder."""
    return REPORTS_DIR / f"{spec.name}-{kind}-{runner.folder.name}{suffix}"


def tune(spec: SweepSpec, settings: Settings, runner: Runner, runs: PhaseRuns) -> Outcome:
    """Profile every candidate, halve, confirm the top k against the baseline (and the next
    k where none of them keeps the objective); the pick is the one that trained fastest
    against the baseline among those kept and the baseline, beyond the noise (`choose`).
    Trials that fail are dropped with their reason. Says a line as each phase starts and
    ends."""
    check_tunable(spec)
    check_noise(spec, settings.tolerance)
    found, say = candidates(spec), runner.say
    budget = budget_of(spec, settings.memory_mb)
    say(f"profile: {len(found)} candidates, {settings.updates} updates each, in turns of "
        f"{rules.BETWEEN} between two probes of the baseline")
    profiles = phases.profile_all(runner, found, budget, settings.updates,
                                  lambda ran, dropped: runs.children("profile", ran, dropped))
    say(f"profile: {sum(p.dropped is None for p in profiles)} of {len(found)} stand")
    standing, spread, rounds, stopped = phases.halve(
        runner, profiles, budget, settings.updates, settings.top,
        lambda ran, dropped: runs.children("halve", ran, dropped))
    say(f"halve: {rounds} round(s), stopped: {stopped}; ranking: " + ", ".join(
        f"{p.candidate.label} {p.ratios[-1]:.2f}x" for p in standing[:settings.top + 2]))
    objective = spec.objectives[0]
    baseline_verdict: Verdict | None = None
    verdicts: list[Verdict] = []
    if standing:
        say(f"confirm: the baseline and the top {settings.top}, {objective.metric} over "
            f"seeds {seeds(spec)}")
        baseline_verdict, verdicts = phases.confirm(
            runner, standing, settings.top, profiles[0], seeds(spec), objective.metric,
            objective.direction == "maximize", settings.tolerance, budget,
            lambda ran, dropped: runs.children("confirm", ran, dropped))
    pick = choose(verdicts, baseline_verdict)
    say("confirm: " + (f"the pick is {pick.profile.candidate.label}" if pick else "no pick"))
    outcome = Outcome(profiles, standing, spread, rounds, baseline_verdict, verdicts, pick,
                      stopped=stopped)
    _write_files(spec, runner, outcome, budget, {k for c in found for k in c.point})
    for path in (outcome.plot, outcome.sweep_file):
        if path is not None:
            runs.attach("confirm" if standing else "profile", path)
    runs.close()
    outcome.parents, outcome.experiment_id = dict(runs.parents), runs.experiment_id
    return outcome


def _write_files(spec: SweepSpec, runner: Runner, outcome: Outcome, budget: Budget,
                 swept: set[str]) -> None:
    """The run's plot and, with a pick, its tuned sweep file, named by the run."""
    outcome.plot = throughput_plot(report_path(spec, runner, "tune", ".png"), outcome,
                                   budget.memory_mb, f"msexp tune {spec.name}: throughput "
                                   "against memory")
    if outcome.pick is not None:
        outcome.sweep_file = sweep_file(report_path(spec, runner, "tuned", ".yaml"),
                                        spec.path, f"{spec.name}-tuned",
                                        outcome.pick.profile.candidate.point, swept)
