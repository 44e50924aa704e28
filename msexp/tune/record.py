"""MLflow for `msexp tune`: each phase a parent run, each trial of it a tagged child,
recorded through `tracking/delivery.py` as a sweep's are; what a killed tune left RUNNING
is ended KILLED by the next."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from msexp.keys import RunTag
from msexp.os_tools.identity import owner
from msexp.search.heartbeat import owner_is_dead
from msexp.tracking.delivery import record_trial
from msexp.tracking.runs import Tracker
from msexp.tracking.store import RunningRun
from msexp.tune.runner import Ran

PHASE = "msexp.tune.phase"
DROPPED = "msexp.tune.dropped"


class PhaseRuns:
    """The parent runs of one tune run's phases, in one MLflow experiment (the sweep's)."""

    def __init__(self, tracker: Tracker, experiment: str, name: str, sweep_file: Path):
        self.tracker, self.name, self.sweep_file = tracker, name, sweep_file
        self.experiment_id = tracker.experiment_id(experiment)
        self.parents: dict[str, str] = {}
        self.counts: dict[str, int] = {}

    def parent(self, phase: str, params: dict[str, Any] | None = None) -> str:
        """The parent run of `phase`, created on first use."""
        if phase not in self.parents:
            self.parents[phase] = self.tracker.parent_run(
                self.experiment_id, f"{self.name}-{phase}", {PHASE: phase, RunTag.OWNER: owner()},
                self.sweep_file, params)
        return self.parents[phase]

    def children(self, phase: str, runs: list[Ran], dropped: dict[int, str]) -> None:
        """Record each run as a child of `phase` (spool first, as a sweep's trials are),
        tagged with the phase and why it dropped."""
        parent = self.parent(phase)
        for i, ran in enumerate(runs):
            number = self.counts.get(phase, 0)
            self.counts[phase] = number + 1
            tags = {PHASE: phase, **({DROPPED: dropped[i][:5000]} if i in dropped else {})}
            record_trial(self.tracker, self.experiment_id, parent, number, ran.job.params,
                         ran.result, ran.started, name=ran.job.name, tags=tags)

    def attach(self, phase: str, path: Path) -> None:
        """Log a file (the plot, the sweep file written) to `phase`'s parent run."""
        self.tracker.client.log_artifact(self.parent(phase), str(path))

    def close(self) -> None:
        for run_id in self.parents.values():
            self.tracker.client.set_terminated(run_id, "FINISHED")

    def end_left(self) -> list[str]:
        """End as KILLED what a killed tune of this host left RUNNING in the experiment:
        each phase's parent run whose process is gone, and its child in flight; returns
        their ids, children first."""
        left = [run.run_id for run, maker in running_runs(self.tracker,
                                                               self.experiment_id)
                if gone(maker)]
        with self.tracker.writing():
            for run_id in left:
                self.tracker.client.set_terminated(run_id, "KILLED")
        return left


def running_runs(tracker: Tracker, experiment_id: str) -> list[tuple[RunningRun, str | None]]:
    """The experiment's RUNNING runs, asked of MLflow: see `with_makers`."""
    runs = tracker.client.search_runs([experiment_id], "attributes.status = 'RUNNING'")
    return with_makers([RunningRun(run.info.run_id, run.info.run_name,
                                   run.data.tags.get(RunTag.PARENT),
                                   run.data.tags.get(RunTag.OWNER)) for run in runs])


def with_makers(runs: list[RunningRun]) -> list[tuple[RunningRun, str | None]]:
    """RUNNING runs, children before their parents, each with the tune process (host:pid)
    that made it or its parent, or None (a sweep's runs)."""
    owners = {run.run_id: run.owner for run in runs}
    found = [(run, owners.get(run.parent or "", run.owner)) for run in runs]
    return sorted(found, key=lambda pair: pair[0].parent is None)


def gone(maker: str | None) -> bool:
    """Whether `maker` (see `running_runs`) is a process of this host that is gone: what
    it left RUNNING will never end by itself."""
    return bool(maker and owner_is_dead(maker))
