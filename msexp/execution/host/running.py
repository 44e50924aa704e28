"""One trial in this process: a built-in workload, a user's command or msrun ranks, with
its own log (stdout and stderr at the file descriptor level, so MindSpore's C++ logs land
there too) and events file (see `protocol`). It never talks to Optuna or MLflow."""

from __future__ import annotations

import contextlib
import os
import signal
import traceback
from typing import IO, Callable

from msexp.execution import exits, output
from msexp.execution.command import CommandFailed, run_command
from msexp.execution.local import Emit, WarmGraphs, train_request
from msexp.execution.protocol import (
    End,
    Error,
    EventWriter,
    Result,
    TrialRequest,
    decode,
)
from msexp.experiment import load_experiment
from msexp.secrets.redaction import known_secrets
from msexp.training.records import Diverged, Stopped


def run(request: TrialRequest, emit: Emit, stop_requested: Callable[[], bool] = lambda: False,
        warm: WarmGraphs | None = None) -> dict[str, float]:
    """Run one trial (through msrun for `devices` > 1); emit its events, return its metrics.
    `warm` holds the graphs of this process's last trial, for the next to reuse."""
    if request.command is not None:
        metrics, checkpoint = run_command(request, emit, stop_requested)
        emit(Result(metrics, str(checkpoint) if checkpoint else None))
        return metrics
    if request.params.get("devices", 1) > 1:
        from msexp.execution.msrun import launch  # lazy: only data-parallel trials need it

        return launch(request, emit, stop_requested)
    return train_request(request, emit, stop_requested, warm=warm)[0]


def failure(exc: BaseException) -> Error:
    """The error event for an exception that ended a trial."""
    if isinstance(exc, CommandFailed):
        return Error("exit", str(exc))
    kinds: dict[type[BaseException], str] = {Diverged: "diverged", Stopped: "stopped"}
    kind = kinds.get(type(exc), "exception")
    return Error(kind, f"{type(exc).__name__}: {exc}")


class StopFlag:
    """Set when the running trial is to stop after its current step (a prune)."""

    def __init__(self) -> None:
        self.set = False

    def listen(self) -> StopFlag:
        """Set by SIGUSR1, as a trial child is told by its host."""
        signal.signal(signal.SIGUSR1, lambda signum, frame: self.stop())
        return self

    def stop(self) -> None:
        self.set = True

    def __call__(self) -> bool:
        return self.set


def import_once(experiment: str) -> None:
    """Import the experiment's module in the zygote, so forked trials share the import
    (never `build`: each trial builds its own workload). Failures show in the trial."""
    with contextlib.suppress(Exception, SystemExit):
        load_experiment(experiment)


def report_exit(events: IO[str], request: TrialRequest, status: int) -> None:
    """End the trial of a child that died first, with the reason, in its open `events`."""
    events.seek(0)
    text = events.read()
    if any(isinstance(decode(line), End) for line in text[:text.rfind("\n") + 1].splitlines()
           if line.strip()):
        return
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    emit = EventWriter(events, known_secrets(request.params))
    emit(Error("exit", exits.exit_reason(code)))
    emit(End())


def run_logged(request: TrialRequest, stop: StopFlag, warm: WarmGraphs) -> None:
    """Run one trial with its own log and events file, ending with an "end" event once
    its output is in its log; no secret of its params or of this process's environment
    is written to either (`output.redacted_output`)."""
    stop.set = False
    secrets = known_secrets(request.params)
    with EventWriter.open(request.events_path, secrets) as emit:
        with request.log_path.open("a", encoding="utf-8") as log, \
                output.redacted_output(log, secrets):
            try:
                run(request, emit, stop, warm)
            except Exception as exc:
                traceback.print_exc()
                emit(failure(exc))
        emit(End())
