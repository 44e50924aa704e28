"""Runs the tuner's trials on the sweep's hosts: probes (a few updates) and trainings
(the sweep's epochs), each in its own folder, inside the sweep's trial timeout."""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from msexp.execution.host import Host, HostPool
from msexp.execution.protocol import TrialRequest
from msexp.execution.result import Status, TrialResult
from msexp.search.requests import trial_request
from msexp.spec import SweepSpec
from msexp.training.records import Probe


@dataclass
class Job:
    """One trial to run: its key, name (also its folder's) and params, probed or trained."""

    key: Hashable
    name: str
    params: dict[str, Any]
    probe: Probe | None = None


@dataclass
class Ran:
    """A job and what came of it, with the times it started (for MLflow) and ended."""

    job: Job
    result: TrialResult
    started: float
    ended: float

    @property
    def middle(self) -> float:
        """Halfway through it, in time."""
        return (self.started + self.ended) / 2


class Runner:
    """Runs jobs of one sweep file on its hosts, a job per host at a time, and says one line
    as each ends (`say`: the phases say theirs through it too)."""

    def __init__(self, spec: SweepSpec, hosts: HostPool, folder: Path,
                 say: Callable[[str], None] = lambda line: None):
        self.spec, self.hosts, self.folder, self.say = spec, hosts, folder, say
        self.ended, self.counting = 0, threading.Lock()

    def request(self, job: Job) -> TrialRequest:
        """The job's request: the sweep's trial request, without checkpoints. A probe of a
        command reaches its script (MSEXP_PROBE), whose `msexp.hooks` end it there."""
        params, probe = job.params, job.probe
        folder = self.folder / job.name
        folder.mkdir(parents=True, exist_ok=True)
        request = trial_request(self.spec, params, folder, f"{self.folder.name}/{job.name}")
        cold = request.cold or bool(probe and probe.lr_high)
        return dataclasses.replace(request, checkpoint=None, probe=probe, cold=cold)

    def run(self, jobs: list[Job], hosts: int | None = None) -> list[Ran]:
        """Run `jobs` on the first `hosts` hosts (all by default); results in job order.
        A job that fails, runs out of memory or passes the trial timeout ends as its
        result's status says; none raises."""
        todo: queue.Queue[Job] = queue.Queue()
        for job in jobs:
            todo.put(job)
        done: dict[int, Ran] = {}

        def work(host: Host) -> None:
            while True:
                try:
                    job = todo.get_nowait()
                except queue.Empty:
                    return
                started = time.time()
                result = host.run(self.request(job), self.spec.budget.trial_timeout)
                done[id(job)] = Ran(job, result, started, time.time())
                self._said(done[id(job)])

        self.hosts.each(work, slots=hosts)
        return [done[id(job)] for job in jobs]


    def _said(self, ran: Ran) -> None:
        with self.counting:
            self.ended += 1
        updates = f"{ran.job.probe.updates} updates, " if ran.job.probe else ""
        self.say(f"  {self.ended:>3} {ran.job.name}: {updates}{time.time() - ran.started:.1f} s"
                 + (f", {failure(ran.result)}" if failure(ran.result) else ""))


def failure(result: TrialResult) -> str | None:
    """Why a trial gave no figures (None: it completed), in one line."""
    if result.status is Status.COMPLETE:
        return None
    if result.status is Status.TIMEOUT:
        return f"passed the trial timeout ({result.error or 'no end'})"
    return f"{result.status.value.lower()}: {(result.error or 'no error reported')[:200]}"
