"""What watches a sweep's trials: the MLflow recorder, the progress display, the pruning
bridge. Each is a `Subscriber`; the search driver calls them in one order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from msexp.execution.protocol import Epoch
from msexp.execution.result import TrialResult


@dataclass
class TrialInfo:
    """One attempt at a trial, as its subscribers see it.

    Attributes:
        number: the trial's number in the study.
        name: "#3 lr=0.1 micro_size=2": the number and the sampled params.
        params: every param, as the trial runs them.
        logged: what MLflow logs as the run's params.
        started: when the attempt started (time.time()).
        rerun: an earlier attempt may have recorded it.
        handle: the search's own handle on the trial (an optuna.Trial).
        attrs: what Optuna keeps of the trial, added by subscribers (the MLflow run id).
        best: the study's best so far, once the trial is told.
    """

    number: int
    name: str
    params: dict[str, Any]
    logged: dict[str, Any]
    started: float
    rerun: bool = False
    handle: Any = None
    attrs: dict[str, Any] = field(default_factory=dict)
    best: str = "-"


class Subscriber:
    """Hooks called as a sweep runs; each does nothing unless overridden."""

    def on_sweep_start(self, total: int, done: int) -> None:
        """The sweep starts with `done` of its `total` trials finished."""

    def on_trial_start(self, trial: TrialInfo) -> None:
        """A trial was claimed and its process is starting it."""

    def on_trial_epoch(self, trial: TrialInfo, epoch: Epoch) -> None:
        """A trial reported an epoch."""

    def on_trial_end(self, trial: TrialInfo, result: TrialResult) -> None:
        """A trial ended; recorders are called before Optuna is told, others after."""
