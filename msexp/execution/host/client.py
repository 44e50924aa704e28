"""The sweep's handle on a host: a process that imports MindSpore once and runs one trial at a
time in a child, with timeouts and stops.

A failed trial is data, not an exception: `Host.run` always returns a `TrialResult`
whose status says what happened.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

from msexp.execution.exits import exit_reason
from msexp.execution.host.family import Family
from msexp.execution.host.link import KILL, RUN, STOP, SweepEnd, socket_pair
from msexp.execution.process_tree import die_with_parent, kill_group
from msexp.execution.protocol import End, Epoch, EventReader, TrialRequest
from msexp.execution.result import Status, TrialResult
from msexp.keys import TrialEnv
from msexp.os_tools.identity import owner
from msexp.os_tools.waiting import wait_until
from msexp.trial_folder import Fence

EPOCHS_S = 0.1  # how often a running trial's events are read for epochs; its end is read
# at once, woken by the host's `ended` (`link`)
CLOSE_S = 10.0  # for a host to end its warm trial child and exit
READY_S = 600.0  # a host's start-up (MindSpore's import) on a loaded machine, at most
STOP_GRACE_S = 1.5  # for a pruned trial to stop by itself before its child is killed
END_S = 10.0  # for a host to write the end of a trial whose child was killed
FAMILY_S = 0.5  # how often a running trial's process tree is noted


OnEpoch = Callable[[Epoch], bool]
"""Called with each epoch; returns True to stop (prune) the trial."""


class Host:
    """A host process (`python -m msexp.execution.host.server`) that runs one trial at a time.

    The host imports MindSpore once; on CPU it forks a trial child per trial, so trials
    stay independent without paying the import each time, and keeps that child for the
    next trial of the same graph signature (a warm trial: no compile). A host that
    dies, or is killed for a timeout, is replaced by a new one.

    One duplex channel joins the sweep and the host (see `link`): requests and stops go
    down, "ready" comes up; everything the trial says is in its events.jsonl, the
    durable record.

    Every process a host starts carries its marker (`TrialEnv.MARKER`, this sweep's
    host:pid and a serial), the host adopts what its trials orphan (a subreaper), and the
    tree is noted while a trial runs: what a trial leaves behind (`setsid` daemons
    included) is killed when the trial ends, and everything when the host is killed.
    After a kill -9 of the sweep, the next one finds the leftovers of its stale trials by
    the marker (`search.source`).
    """

    def __init__(self, threads: int | None = None, cwd: Path | None = None,
                 slot: int | None = None, warm: int = 1, preload: bool = True):
        self.threads, self.cwd, self.slot, self.warm = threads, cwd, slot, warm
        self.preload = preload  # False: a command's trials, each its own process
        self.marker = f"{owner()}/{uuid.uuid4().hex[:12]}"
        self._family = Family(self.marker, warm)  # the processes its trials started
        self._proc: subprocess.Popen | None = None
        self._link: SweepEnd | None = None
        self._ready = False
        self._adopts = False  # the host adopts its trials' orphans (see `Family`)
        self._killing = threading.Lock()  # the slot's thread and the beat's may both kill

    def _spawn(self) -> tuple[subprocess.Popen, SweepEnd]:
        env = dict(os.environ)
        env[TrialEnv.MARKER] = self.marker
        if self.threads:
            env["MSEXP_THREADS"] = str(self.threads)
            env["OMP_NUM_THREADS"] = str(self.threads)
        if self.slot is not None:
            env["MSEXP_SLOT"] = str(self.slot)
        env["MSEXP_WARM"] = str(self.warm)
        env["MSEXP_PRELOAD"] = "1" if self.preload else "0"
        env.setdefault("GLOG_v", "2")
        link, theirs = socket_pair()
        with theirs:
            proc = subprocess.Popen(
                [sys.executable, "-m", "msexp.execution.host.server", str(theirs.fileno())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),), cwd=self.cwd, env=env, start_new_session=True,
                preexec_fn=die_with_parent)
        return proc, link

    @property
    def pid(self) -> int | None:
        """The host process's pid while it runs."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def prewarm(self) -> None:
        """Start the host now, so it imports MindSpore before the first trial."""
        if self._proc is None or self._proc.poll() is not None:
            if self._link is not None:
                self._link.close()
            (self._proc, self._link), self._ready = self._spawn(), False

    def run(self, request: TrialRequest, timeout: float, on_epoch: OnEpoch | None = None
            ) -> TrialResult:
        """Run one trial; never raises for anything the trial does."""
        result = TrialResult(Status.FAILED, log_path=request.log_path,
                             events_path=request.events_path)
        proc, link = self._ready_for(request)
        started = time.monotonic()  # the trial's own time: a new host's import is not
        link.send(RUN, request.to_json())  # a host that died is found by its exit code
        ended, stop_sent_at = self._follow(proc, link, result, on_epoch, started + timeout)
        if ended:
            host = self._proc.pid if self._proc else None  # what the trial started goes
            self._family.kill_all_but_warm(host, self._adopts, result.pid)
        else:
            self.kill()  # whatever is left of this trial goes; the next trial gets a new host
        now = time.monotonic()
        result.wall_s = now - started
        if not ended and result.status is Status.TIMEOUT:
            result.error = f"exceeded trial_timeout of {timeout:g} s"
        if stop_sent_at is not None:
            result.stop_s = now - stop_sent_at
        return result

    def _ready_for(self, request: TrialRequest) -> tuple[subprocess.Popen, SweepEnd]:
        """Take the trial's folder for this attempt, empty its log and events files; the
        host, started and ready."""
        request.events_path.parent.mkdir(parents=True, exist_ok=True)
        if request.attempt is not None:
            Fence(request.events_path.parent, request.attempt).take()
        for path in (request.events_path, request.log_path):  # new files: whatever still
            path.unlink(missing_ok=True)  # holds the old ones open writes where no one reads
            path.write_text("")
        self.prewarm()
        proc, link = self._proc, self._link  # a stop may kill the host at any moment
        if proc is None or link is None:
            raise RuntimeError("the host was stopped before the trial started")
        if not self._ready:
            self._adopts = link.wait_ready(lambda: proc.poll() is None, READY_S)
            self._ready = True
        return proc, link

    def _follow(self, proc: subprocess.Popen, link: SweepEnd, result: TrialResult,
                on_epoch: OnEpoch | None, deadline: float) -> tuple[bool, float | None]:
        """Read the trial's events until its end, its host's death, its deadline or a
        stop it ignored; returns (whether it ended, when a stop was sent)."""
        assert result.events_path is not None, "run() gives every result its events file"
        reader = EventReader(result.events_path)
        stop_sent_at: float | None = None
        noted = time.monotonic()  # a trial's end finds its tree anew (`Family`)
        while True:
            for event in reader.read():
                if self._absorb(event, result, on_epoch):
                    return True, stop_sent_at
                if result.status is Status.PRUNED and stop_sent_at is None:
                    stop_sent_at = time.monotonic()
                    link.send(STOP)
            now = time.monotonic()
            if proc.poll() is not None:
                if any(self._absorb(event, result, on_epoch) for event in reader.read()):
                    return True, stop_sent_at
                if result.status is not Status.PRUNED:
                    result.status, result.error = Status.FAILED, exit_reason(proc.returncode)
                return False, stop_sent_at
            if now > deadline:
                result.status = Status.TIMEOUT
                return False, stop_sent_at
            if stop_sent_at is not None and now - stop_sent_at > STOP_GRACE_S:
                return self._end_child(link, reader), stop_sent_at
            if now - noted > FAMILY_S:
                noted = now
                self._family.note(proc.pid)
            link.wait(EPOCHS_S)

    @staticmethod
    def _absorb(event, result: TrialResult, on_epoch: OnEpoch | None) -> bool:
        ended = result.absorb(event)
        if (isinstance(event, Epoch) and on_epoch and result.status is not Status.PRUNED
                and on_epoch(event)):
            result.status = Status.PRUNED
        return ended

    def _end_child(self, link: SweepEnd, reader: EventReader) -> bool:
        """Have the host kill a trial child that ignored its stop, and wait for the host
        to end the trial; the host stays, with its import, for the next trial. True if
        it ended. A host that runs trials itself (GPU, Ascend) dies instead, and is
        replaced."""
        link.send(KILL)
        ended = False

        def settled() -> bool:  # the trial's end read, or its host gone (killed meanwhile)
            nonlocal ended
            if self.pid is None:
                return True
            ended = any(isinstance(event, End) for event in reader.read())
            return ended

        wait_until(settled, END_S, EPOCHS_S, sleep=link.wait)
        return ended

    def close(self) -> None:
        """End the host after its last trial: told by the end of its channel, it ends the
        trial child it kept warm and exits; killed if it has not within CLOSE_S."""
        proc, link = self._proc, self._link
        if proc is not None and link is not None and proc.poll() is None:
            link.finish()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(CLOSE_S)
        self.kill()

    def kill(self) -> None:
        """Kill the host's process group, its trial and everything they started (found
        by the marker or noted while the trial ran), `setsid` descendants included. A
        host already reaped is not signalled by its pid, which another process may have
        now: what it started was noted while it ran."""
        with self._killing:  # one at a time: never the trial child while its host lives
            proc, self._proc = self._proc, None
            link, self._link = self._link, None
            if proc is not None and proc.poll() is None:  # not reaped: the pid is its own
                self._family.note(proc.pid)
                kill_group(proc.pid)
            if link is not None:
                link.close()
            self._family.kill_all()
            if proc is not None:
                proc.wait()
