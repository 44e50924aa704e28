"""What watches a sweep's trials: the MLflow recorder, the progress display, the pruning
bridge, fail fast. Each is a `Subscriber`; the search driver calls them in one order, and
a watcher that decides (stop a trial, start no more) returns its `Decision` from its hook,
as Ray Tune's `TrialScheduler` does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from msexp.execution.protocol import Epoch
from msexp.execution.result import TrialResult


class TrialHandle(Protocol):
    """What a watcher may tell the search of a trial through its handle (an
    `optuna.Trial` in a sweep): an intermediate value, and whether its pruner stops it."""

    def report(self, value: float, step: int) -> None: ...

    def should_prune(self) -> bool: ...


@dataclass(frozen=True)
class Decision:
    """A watcher's decision, returned from its hook (None: go on). From `on_trial_epoch`:
    stop the trial now; from `on_trial_end`: the sweep starts no more trials.

    Attributes:
        stop: stop the trial, or the sweep's trials not started yet.
        reason: a trial stopped without one ends PRUNED; with one (e.g. it will not
            report its objective) it fails with it. A sweep's stop: why, as its line says.
        rule: a sweep's stop: the setting that decided it ("budget.fail_fast: 2").
    """

    stop: bool = False
    reason: str | None = None
    rule: str | None = None

    def line(self, not_started: int) -> str:
        """A sweep's stop as one line: why, and what it saved."""
        return (f"{self.reason}; {not_started} trial{'s' * (not_started != 1)} not started"
                + (f" ({self.rule})" if self.rule else ""))


CONTINUE = Decision()
PRUNE = Decision(stop=True)


@dataclass(frozen=True)
class TrialInfo:
    """One attempt at a trial, as its subscribers see it (a record: none writes into it).

    Attributes:
        number: the trial's number in the study.
        name: "#3 lr=0.1 micro_size=2": the number and the sampled params.
        params: every param, as the trial runs them.
        logged: what MLflow logs as the run's params.
        started: when the attempt started (time.time()).
        later_attempt: an earlier attempt of its number ran, and may have recorded it.
        handle: the search's handle on the trial, for its pruner (None: none prunes it).
        best: the study's best so far, once the trial is told.
    """

    number: int
    name: str
    params: dict[str, Any]
    logged: dict[str, Any]
    started: float
    later_attempt: bool = False
    handle: TrialHandle | None = None
    best: str = "-"


class Subscriber:
    """Hooks called as a sweep runs; each does nothing unless overridden."""

    def on_sweep_start(self, total: int, done: int, best: str = "-") -> None:
        """The sweep starts with `done` of its `total` trials finished; `best`: the
        study's best so far (`search.tell.best_so_far`)."""

    def on_mlflow_open(self, runs: str, parent: str, serve: str | None) -> None:
        """The sweep's MLflow parent run exists: the links of its runs table and of it, and
        the command that serves the store (None: a tracking server serves it)."""

    def on_sweep_stopping(self, running: list[int], opening: bool, hurried: bool) -> None:
        """A stop signal came (told at once, from its handler): the `running` trials go
        back to the queue, to resume from their last checkpoints; `opening`: MLflow is
        still opening, and the sweep waits for it; `hurried`: a second stop, after which
        it waits no more."""

    def on_trial_start(self, trial: TrialInfo) -> None:
        """A trial was claimed and its process is starting it."""

    def on_trial_epoch(self, trial: TrialInfo, epoch: Epoch) -> Decision | None:
        """A trial reported an epoch; a `Decision` to stop it, or None (`CONTINUE`)."""
        return None

    def on_trial_ending(self, trial: TrialInfo, result: TrialResult) -> dict[str, Any]:
        """A trial ended, judged, and Optuna is not told yet: a recorder keeps it now (so
        it is recorded before the study says it is done). Returns what Optuna is to keep
        of it (e.g. the MLflow run id), or {}."""
        return {}

    def on_trial_end(self, trial: TrialInfo, result: TrialResult) -> Decision | None:
        """A trial ended and Optuna was told (`trial.best` is the study's best now); a
        `Decision` to start no more trials (its line says why), or None."""
        return None

    def on_trial_dropped(self, trial: TrialInfo) -> None:
        """This process records no end of the trial: put back (a stop) or taken by
        another process."""


class Recorder(Subscriber):
    """The subscriber that keeps every trial's record (`tracking.recorder.MlflowRecorder`):
    told of each trial before the others, its record kept before Optuna is told. The
    sweep stops when it can no longer record."""

    def ready(self) -> bool:
        """Whether `failure` answers at once (a store that opens in the background has
        opened, or failed to)."""
        return True

    def failure(self) -> BaseException | None:
        """Why it cannot record any more (the sweep then stops), or None."""
        return None

    def close(self, ending: str) -> None:
        """Deliver what waits and end the sweep's record with `ending` (FINISHED, KILLED,
        FAILED)."""

    def ui_links(self) -> tuple[str, str, str | None]:
        """Where the records are shown, once `ready` and without a `failure`: the runs
        table, the sweep's own record, and the command that serves the store (None: a
        server serves it)."""
        raise NotImplementedError(f"{type(self).__name__} shows no records")
