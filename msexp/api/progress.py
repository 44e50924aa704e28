"""A sweep's progress as the Python API shows it: one plain line per trial on stdout,
which a Jupyter cell shows as it comes (no terminal control codes, no widget)."""

from __future__ import annotations

from types import TracebackType

from msexp.console import interrupts
from msexp.execution.result import TrialResult
from msexp.execution.subscribers import Subscriber, TrialInfo
from msexp.spec import SweepSpec


class Lines(Subscriber):
    """A line as the sweep starts, per finished trial (its status, objective, time and the
    best so far) and at a stop; `shown` False: none."""

    def __init__(self, spec: SweepSpec, shown: bool = True) -> None:
        self.spec, self.shown = spec, shown

    def __enter__(self) -> Lines:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        return None

    def say(self, line: str) -> None:
        if self.shown:
            print(line, flush=True)

    def on_sweep_start(self, total: int, done: int, best: str = "-") -> None:
        self.say(f"resuming {self.spec.name}: {done} of {total} trials already finished; "
                 f"best {best}" if done else f"{self.spec.name}: {total} trials")

    def on_mlflow_open(self, runs: str, parent: str, serve: str | None) -> None:
        self.say(f"compare trials: {runs}")

    def on_sweep_stopping(self, running: list[int], opening: bool, hurried: bool) -> None:
        if self.shown:  # from a signal handler: a write that never meets a print's buffer
            interrupts.say(interrupts.stopping_line(running))

    def on_trial_end(self, trial: TrialInfo, result: TrialResult) -> None:
        self.say(f"trial {trial.number}: {result.ended(self.spec.objectives[0].metric)}; "
                 f"best {trial.best}")
