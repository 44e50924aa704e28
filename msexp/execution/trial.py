"""The trial process: runs `TrialRequest`s and writes their events (see `protocol`).

It never talks to Optuna or MLflow. `python -m msexp.execution.trial` imports MindSpore
once, then runs the requests it reads on stdin, one JSON line each, until stdin closes;
on CPU each trial runs in a child forked for it (see `serve`). Each trial gets its own
log (stdout and stderr at the file descriptor level, so MindSpore's C++ logs land there
too) and its own events file. A data-parallel trial (`devices` > 1) runs through msrun
(see `msrun`).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import traceback
from typing import IO, Any, Callable

from msexp.execution import output, process
from msexp.execution.command import CommandFailed, run_command
from msexp.execution.link import HostEnd
from msexp.execution.local import Emit, WarmGraphs, train_request
from msexp.execution.protocol import (
    End,
    Error,
    EventWriter,
    Result,
    TrialRequest,
    decode,
    reusable,
)
from msexp.experiment import load_experiment
from msexp.training.records import Diverged, Stopped
from msexp.urls import known_secrets


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
    kind = {Diverged: "diverged", Stopped: "stopped"}.get(type(exc), "exception")
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


def serve(channel: int) -> None:
    """Run the requests the sweep sends on the socket `channel` (see `link`) until it closes.

    On CPU this process is a zygote: it imports MindSpore and msexp's training code once
    and forks a trial child per trial, so every trial starts clean (own memory, own
    graphs) without paying the import (see `Zygote`). Elsewhere (GPU, Ascend: device
    runtimes do not survive a fork), or with MSEXP_FORK=0, it runs each trial itself, and
    its last trial's graphs stay in this process for the next.
    """
    fork = _preload()
    adopts = process.become_subreaper()  # what a trial orphans stays in this tree, to be killed
    zygote = Zygote(channel, int(os.environ.get("MSEXP_WARM", "1")))
    stop, warm = StopFlag(), WarmGraphs()
    if fork:  # a trial child that ignores its stop is killed; this process stays
        link = HostEnd(channel, lambda: zygote.signal(signal.SIGUSR1),
                       lambda: zygote.signal(signal.SIGKILL))
    else:  # the trial runs here: one that ignores its stop takes this process with it
        link = HostEnd(channel, stop.stop, lambda: os.kill(os.getpid(), signal.SIGKILL))
    link.say_ready(adopts)  # the sweep's trial clocks start now
    try:
        for line in link:
            zygote.reap()
            request = TrialRequest.from_json(line)
            if fork:
                zygote.run(request, line)
            else:
                _run_logged(request, stop, warm)
    finally:
        zygote.close()


class Zygote:
    """Forks a trial child per trial; keeps the last `warm` (MSEXP_WARM) while warm."""

    def __init__(self, channel: int, warm: int = 1):
        self.channel = channel  # the sweep's socket, which no trial child may hold
        self.warm = max(1, warm)
        self.idle: list[_Child] = []  # least recently used first
        self.running: _Child | None = None

    def reap(self) -> None:
        """Reap the orphans this process adopted that have exited (killed by the sweep)."""
        process.reap_adopted([child.pid for child in [*self.idle, self.running] if child])

    def signal(self, signum: int) -> None:
        """Signal the running trial child, if any (SIGUSR1: stop; SIGKILL)."""
        child = self.running
        if child is not None and child.status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signum)

    def run(self, request: TrialRequest, line: str) -> None:
        if request.command is None:
            _import_once(request.experiment)
        # this attempt's events file, held open: should another attempt of the trial
        # begin meanwhile (in new files), an end written here is not read as its own
        with request.events_path.open("a+", encoding="utf-8") as events:
            child = self._child_for(request.graph_signature)
            self.running = child
            try:
                warm = child.run(line)
            finally:
                self.running = None
            if warm:
                self.idle.append(child)
            else:
                _report_exit(events, request, child.status)

    def _child_for(self, signature: str | None) -> _Child:
        """An idle child that holds graphs of `signature`, else a freshly forked one, once
        the least recently used idle children have ended to leave room for it."""
        for idle in list(self.idle):
            if not idle.alive():
                self.idle.remove(idle)
                idle.end()
            elif reusable(idle.signature, signature):
                self.idle.remove(idle)
                return idle
        while len(self.idle) >= self.warm:
            self.idle.pop(0).end()
        return _Child(signature, self.channel)

    def close(self) -> None:
        while self.idle:
            self.idle.pop().end()


class _Child:
    """A forked trial child: runs each request sent, then says "idle" if warm, or exits."""

    def __init__(self, signature: str | None, channel: int):
        self.signature = signature
        self.status: int | None = None  # wait status, once reaped
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            for fd in (request_w, reply_r, channel):
                os.close(fd)
            os._exit(_child_main(os.fdopen(request_r), os.fdopen(reply_w, "w")))
        os.close(request_r)
        os.close(reply_w)
        self._requests, self._replies = os.fdopen(request_w, "w"), os.fdopen(reply_r)

    def run(self, line: str) -> bool:
        """Send one request and wait for it: True if the child is now idle and warm, False
        if it exited (its wait status in `status`)."""
        try:
            self._requests.write(line if line.endswith("\n") else line + "\n")
            self._requests.flush()
        except BrokenPipeError:
            self.end()
            return False
        while self.alive():  # a process the trial forked may hold the pipe open: poll
            if select.select([self._replies], [], [], 0.2)[0]:
                if self._replies.readline() == "idle\n":
                    return True
                self.status = os.waitpid(self.pid, 0)[1]  # closed: it is exiting
        self.end()
        return False

    def alive(self) -> bool:
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
        return self.status is None

    def end(self) -> None:
        """Close the pipes, make sure the child is gone and reap it."""
        with contextlib.suppress(OSError):
            self._requests.close()
        self._replies.close()
        if self.status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)  # idle, or already exiting: nothing to lose
            self.status = os.waitpid(self.pid, 0)[1]


def _child_main(requests: Any, replies: Any) -> int:
    """In a forked child: run the trials sent, until one leaves no graphs to reuse or
    the zygote closes the pipe; return the exit code (sys.exit's, if the trial exits)."""
    process.die_with_parent()
    stop, warm = StopFlag().listen(), WarmGraphs()
    for line in requests:
        try:
            _run_logged(TrialRequest.from_json(line), stop, warm)
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
            return 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        if not warm.held:
            return 0
        replies.write("idle\n")
        replies.flush()
    return 0


def _preload() -> bool:
    """Import what every trial needs; return whether trials may run in forked children."""
    try:  # a failure here re-raises inside the trial, where its log shows it
        import mindspore as ms  # here, not at the top: a failure must reach the trial's log

        import msexp.training.loop  # noqa: F401

        threads = os.environ.get("MSEXP_THREADS")
        if threads:
            ms.set_context(runtime_num_threads=int(threads))
        device = ms.get_context("device_target")
        slot = os.environ.get("MSEXP_SLOT")
        if device != "CPU" and slot is not None:  # one device per host, round robin
            count = getattr(ms.device_context, device.lower()).device_count()
            ms.set_device(device, int(slot) % max(1, count))
    except Exception:
        return False
    return device == "CPU" and os.environ.get("MSEXP_FORK", "1") != "0"


def _import_once(experiment: str) -> None:
    """Import the experiment's module in the zygote, so forked trials share the import
    (never `build`: each trial builds its own workload). Failures show in the trial."""
    with contextlib.suppress(Exception, SystemExit):
        load_experiment(experiment)


def _report_exit(events: IO[str], request: TrialRequest, status: int) -> None:
    """End the trial of a child that died first, with the reason, in its open `events`."""
    events.seek(0)
    text = events.read()
    if any(isinstance(decode(line), End) for line in text[:text.rfind("\n") + 1].splitlines()
           if line.strip()):
        return
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    emit = EventWriter(events, known_secrets(request.params))
    emit(Error("exit", process.exit_reason(code)))
    emit(End())


def _run_logged(request: TrialRequest, stop: StopFlag, warm: WarmGraphs) -> None:
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


if __name__ == "__main__":
    serve(int(sys.argv[1]))
