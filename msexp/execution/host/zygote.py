"""The zygote: on CPU the host forks a trial child per trial, so every trial starts clean
(own memory, own graphs) without paying MindSpore's import, and keeps the last `warm`
children while they hold reusable graphs."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import traceback
from typing import Any

from msexp.execution import process_tree
from msexp.execution.host.running import StopFlag, import_once, report_exit, run_logged
from msexp.execution.local import WarmGraphs
from msexp.execution.protocol import (
    TrialRequest,
    reusable,
)


class Zygote:
    """Forks a trial child per trial; keeps the last `warm` (MSEXP_WARM) while warm."""

    def __init__(self, channel: int, warm: int = 1):
        self.channel = channel  # the sweep's socket, which no trial child may hold
        self.warm = max(1, warm)
        self.idle: list[_Child] = []  # least recently used first
        self.running: _Child | None = None

    def reap(self) -> None:
        """Reap the orphans this process adopted that have exited (killed by the sweep)."""
        process_tree.reap_adopted([child.pid for child in [*self.idle, self.running] if child])

    def signal(self, signum: int) -> None:
        """Signal the running trial child, if any (SIGUSR1: stop; SIGKILL)."""
        child = self.running
        if child is not None and child.status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signum)

    def run(self, request: TrialRequest, line: str) -> None:
        if request.command is None:
            import_once(request.experiment)
        # this attempt's events file, held open: should another attempt of the trial
        # begin meanwhile (in new files), an end written here is not read as its own
        with request.events_path.open("a+", encoding="utf-8") as events:
            child = self._child_for(request.graph_signature)
            self.running = child
            try:
                exited = child.run(line)
            finally:
                self.running = None
            if exited is None:
                self.idle.append(child)
            else:
                report_exit(events, request, exited)

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

    def run(self, line: str) -> int | None:
        """Send one request and wait for it: None if the child is now idle and warm, else
        its wait status (it exited)."""
        try:
            self._requests.write(line if line.endswith("\n") else line + "\n")
            self._requests.flush()
        except BrokenPipeError:
            return self.end()
        while self.alive():  # a process the trial forked may hold the pipe open: poll
            if select.select([self._replies], [], [], 0.2)[0]:
                if self._replies.readline() == "idle\n":
                    return None
                self.status = os.waitpid(self.pid, 0)[1]  # closed: it is exiting
        return self.end()

    def alive(self) -> bool:
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
        return self.status is None

    def end(self) -> int:
        """Close the pipes, make sure the child is gone and reap it; its wait status."""
        with contextlib.suppress(OSError):
            self._requests.close()
        self._replies.close()
        if self.status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)  # idle, or already exiting: nothing to lose
            self.status = os.waitpid(self.pid, 0)[1]
        return self.status


def _child_main(requests: Any, replies: Any) -> int:
    """In a forked child: run the trials sent, until one leaves no graphs to reuse or
    the zygote closes the pipe; return the exit code (sys.exit's, if the trial exits)."""
    process_tree.die_with_parent()
    stop, warm = StopFlag().listen(), WarmGraphs()
    for line in requests:
        try:
            run_logged(TrialRequest.from_json(line), stop, warm)
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
