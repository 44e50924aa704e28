"""MLflow for `msexp tune`: each phase a parent run, each trial of it a tagged child."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from msexp.tracking.runs import Tracker
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
                self.experiment_id, f"{self.name}-{phase}", {PHASE: phase}, self.sweep_file,
                params)
        return self.parents[phase]

    def children(self, phase: str, runs: list[Ran], dropped: dict[int, str]) -> None:
        """Log each run as a child of `phase`, tagged with the phase and why it dropped."""
        parent = self.parent(phase)
        for i, ran in enumerate(runs):
            number = self.counts.get(phase, 0)
            self.counts[phase] = number + 1
            tags = {PHASE: phase, **({DROPPED: dropped[i][:5000]} if i in dropped else {})}
            self.tracker.record_trial(self.experiment_id, parent, number, ran.job.params,
                                      ran.result, ran.started, name=ran.job.name, tags=tags)

    def attach(self, phase: str, path: Path) -> None:
        """Log a file (the plot, the sweep file written) to `phase`'s parent run."""
        self.tracker.client.log_artifact(self.parent(phase), str(path))

    def close(self) -> None:
        for run_id in self.parents.values():
            self.tracker.client.set_terminated(run_id, "FINISHED")
