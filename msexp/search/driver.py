"""The search driver: claim a trial, run it in a slot, let subscribers see it, tell Optuna.

As in Optuna's `_run_trial` (ask, run, tell, callbacks) and Ray Tune's controller with
its callbacks: the driver only asks and tells; where trials come from is the
`TrialSource`, where they run is a `HostPool` (a host per slot), and who watches is the
subscribers: the recorder first, then the watchers, whose hooks return their decisions (a
trial stopped, no more trials started), as Ray Tune's `TrialScheduler` does.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from msexp.console.interrupts import handled
from msexp.errors import MsexpError, describe
from msexp.execution import Decision, Epoch, Recorder, Status, Subscriber, TrialInfo, TrialResult
from msexp.execution.host import Host, HostPool
from msexp.search.prepare import prepare_trial, stale, unprepared
from msexp.search.source import TrialSource
from msexp.search.tell import Judged, best_so_far, judge, tell
from msexp.spec import Method, SweepSpec

AHEAD = 10  # trials a slot may end while MLflow opens (a new store takes seconds)
BEST_EVERY_S = 1.0  # the shown best is looked up at most this often: a look reads every trial
WAKE_S = 0.1  # how often an end waiting for MLflow's opening looks for a second stop


@dataclass
class SweepOutcome:
    """What a sweep leaves behind for the summary."""

    study: optuna.Study
    recorder: Recorder  # its tracker gives the UI links
    interrupted: int = 0  # the signal that stopped the sweep (SIGINT, SIGTERM), or 0
    results: dict[int, TrialResult] = field(default_factory=dict)
    fail_fast: str | None = None  # why the sweep started no more trials (`Decision.line`)


class Sweep:
    """Runs a study's remaining trials, one per slot at a time."""

    def __init__(self, spec: SweepSpec, study: optuna.Study, source: TrialSource,
                 hosts: HostPool, recorder: Recorder, watchers: Sequence[Subscriber]):
        """`hosts`: one per slot; `recorder` is told of each trial first (a subscriber that
        keeps its record before Optuna is told), `watchers` after it, in their order."""
        self.spec, self.study, self.source, self.hosts = spec, study, source, hosts
        self.recorder = recorder
        self.blind = spec.method in (Method.grid, Method.random) and spec.pruner.type == "none"
        self.watchers: list[Subscriber] = [recorder, *watchers]
        self.stopped: Decision | None = None  # a watcher's: no more trials start
        self.stopping = threading.Event()
        self.hurried = threading.Event()  # a second stop signal: no more waiting for MLflow
        self.closing = False  # the trials are over; the sweep's record is being closed
        self.results: dict[int, TrialResult] = {}
        self.running: dict[int, Host] = {}  # trial number: the host running it
        self.waiting: list[threading.Thread] = []  # ends waiting for MLflow to open
        self.best, self.best_at = "-", -math.inf  # the shown best, and when it was looked up
        self.best_lock = threading.Lock()
        source.listen(self._lost, self._record_failed)
        self.interrupted = 0
        self.error: Exception | None = None  # what stopped the sweep outside any trial

    def run(self) -> SweepOutcome:
        """Run until the budget is spent; a stop signal ends the trials, which the next
        run continues.

        Raises:
            MsexpError: MLflow cannot be reached (the trials that ran meanwhile are queued
                again), or an error outside any trial stopped the sweep.
        """
        self.hosts.keep(self.source.pending())
        done = self.source.finished()
        best = self._best() if done else "-"
        for watcher in self.watchers:
            watcher.on_sweep_start(self.spec.n_trials(), done, best)
        with handled(self._interrupt):
            stopped_early = self._run_trials()
            self.closing = True  # from here a second stop leaves at once (KeyboardInterrupt)
            return self._close_sweep(stopped_early)

    def _run_trials(self) -> str | None:
        """Run trials in every slot until none are left or a stop; the line of a watcher's
        decision that stopped the sweep starting trials (fail fast), if one did."""
        try:
            try:
                self.hosts.each(lambda host: self._guarded(self._work, host),
                                self._stop_if_unrecordable)
                for waiting in self.waiting:
                    waiting.join()
            finally:
                self.hosts.close()  # a stop has killed them already
            if self.stopped is not None and self.error is None:
                return self.stopped.line(self.source.pending())
            return None
        finally:
            self.source.close()

    def _close_sweep(self, stopped_early: str | None) -> SweepOutcome:
        """Queue again what is still held, end the sweep's MLflow record (not after a
        second stop: what waits stays in the spool for the next run) and say how it ended.
        """
        if self.error is not None:
            self.source.release_all(f"sweep stopped: {describe(self.error)}"[:1000])
        elif self.interrupted:
            self.source.release_all("interrupted")
        if not self.hurried.is_set():
            failure = self.recorder.failure()
            if failure is not None:
                raise failure
            self.recorder.close(self._ending())
        if self.error is not None:
            raise MsexpError(f"sweep {self.study.study_name} stopped: {describe(self.error)}"
                             " (finished trials are kept; run the same command to resume)")
        return SweepOutcome(self.study, self.recorder, self.interrupted, self.results,
                            stopped_early)

    def _ending(self) -> str:
        """The parent run's status: FAILED when every trial of this run failed."""
        if self.error:
            return "FAILED"
        if self.interrupted:
            return "KILLED"
        ran = [r.status for r in self.results.values()]
        return "FAILED" if ran and Status.COMPLETE not in ran and \
            Status.PRUNED not in ran else "FINISHED"

    def _stop_if_unrecordable(self) -> None:
        if self._await_recorder() and self.recorder.failure() is not None:
            self._stop()

    def _await_recorder(self) -> bool:
        """Wait until MLflow has opened (or failed to), or a second stop; whether it has."""
        while not self.recorder.ready():
            if self.hurried.wait(WAKE_S):
                return False
        return True

    def _interrupt(self, signum: int) -> None:
        """A stop signal, in its handler: said at once; the first stops the trials (they
        go back to the queue), a second stops waiting for MLflow, and leaves at once
        where the sweep's record is being closed."""
        first = not self.interrupted
        self.interrupted = self.interrupted or signum
        if first or not self.hurried.is_set():
            running, opening = sorted(self.running.copy()), not self.recorder.ready()
            for watcher in self.watchers:
                watcher.on_sweep_stopping(running, opening, not first)
        if not first:
            self.hurried.set()
        self.stopping.set()
        # a handler never waits for a host's lock, which the main thread may hold
        threading.Thread(target=self.hosts.stop, daemon=True).start()
        if not first and self.closing:
            raise KeyboardInterrupt

    def _stop(self) -> None:
        self.stopping.set()
        self.hosts.stop()

    def _work(self, host: Host) -> None:
        """Run trials in `host` until none are left."""
        while not self.stopping.is_set() and self.stopped is None and \
                (handle := self.source.claim()) is not None:
            self._run_trial(handle, host)

    def _guarded(self, call: Callable[..., None], *args: Any) -> None:
        """`call(*args)` in a thread of the sweep: an error outside any trial stops it."""
        try:
            call(*args)
        except Exception as exc:
            self.error = self.error or exc
            self._stop()

    def _run_trial(self, handle: optuna.Trial, host: Host) -> None:
        try:
            trial, request = prepare_trial(self.spec, self.study, handle)
        except Exception as exc:  # params that cannot be sampled fail the trial, not the sweep
            trial = unprepared(self.spec, handle)
            self._end(handle, trial, judge(self.spec, trial, TrialResult(
                Status.FAILED, error=describe(exc))))
            return
        if self.stopping.is_set():  # stopped while it was claimed: queued again, untouched
            self.source.put_back(handle, self._put_back_reason())
            return
        for watcher in self.watchers:  # the recorder's MLflow run is made while it trains
            watcher.on_trial_start(trial)
        self.running[trial.number] = host
        reasons: list[str] = []  # why the watchers stopped it, if it fails for that
        try:
            result = host.run(request, self.spec.budget.trial_timeout,
                              lambda epoch: self._on_epoch(trial, epoch, reasons))
        except Exception as exc:  # an error while running it fails the trial, not the sweep
            host.kill()
            result = TrialResult(Status.FAILED, error=describe(exc),
                                 wall_s=time.time() - trial.started)
        finally:
            self.running.pop(trial.number, None)
        cut = self.stopping.is_set() and result.status is not Status.COMPLETE  # by the stop
        judged = judge(self.spec, trial, result, reasons[0] if reasons else None)
        if cut or self.recorder.ready() or not self._may_wait(judged.result):
            self._close(handle, trial, judged, cut)
            return
        waiting = threading.Thread(target=self._guarded, daemon=True,  # the slot goes on
                                   args=(self._close, handle, trial, judged))
        self.waiting.append(waiting)
        waiting.start()

    def _may_wait(self, result: TrialResult) -> bool:
        """Whether a trial's end may wait for MLflow's opening while its slot runs the next
        trial: where no choice reads earlier results (`blind`: a grid or random search
        without a pruner), for one that ran (a failure is seen at once, for `fail_fast`),
        while fewer than AHEAD ends per slot wait (the work put back if MLflow never opens).
        """
        waiting = sum(thread.is_alive() for thread in self.waiting)
        return self.blind and result.status in (Status.COMPLETE, Status.PRUNED) and \
            waiting < AHEAD * len(self.hosts.hosts)

    def _close(self, handle: optuna.Trial, trial: TrialInfo, judged: Judged,
               cut: bool = False) -> None:
        """End the trial; put it back instead where a stop `cut` it short, MLflow cannot
        record it, or a second stop leaves no time to wait for MLflow to open. A trial
        that ran to its end before a stop is kept."""
        if cut or not self._await_recorder() or self.recorder.failure() is not None:
            self.source.put_back(handle, self._put_back_reason())  # the next run continues it
            self._dropped(trial)
            return
        self._end(handle, trial, judged)

    def _put_back_reason(self) -> str:
        failed = self.recorder.ready() and self.recorder.failure() is not None
        return "MLflow unreachable" if failed else "interrupted"

    def _lost(self, number: int) -> None:
        """Another process holds trial `number` now: stop this process's run of it (its
        host goes; the slot's next trial gets a new one). `_end` then leaves it alone."""
        host = self.running.get(number)
        if host is not None:
            host.kill()

    def _record_failed(self, frozen: FrozenTrial, error: str) -> dict[str, Any]:
        """Record in MLflow a trial of a dead orchestrator that is failed out of retries
        (before Optuna is told, as every trial); what to keep on it."""
        trial, result = stale(self.spec, self.study, frozen, error)
        self.recorder.on_trial_start(trial)  # its run, made now: its id goes on the trial
        return self.recorder.on_trial_ending(trial, result)

    def _on_epoch(self, trial: TrialInfo, epoch: Epoch, reasons: list[str]) -> bool:
        """Show the epoch to every watcher; True when the trial is to stop: a stop, or a
        watcher's decision (pruned; or sure not to report its objective: its reason goes
        to `reasons`, for the trial's judge)."""
        stop = self.stopping.is_set()
        for watcher in self.watchers:
            decision = watcher.on_trial_epoch(trial, epoch)
            if decision is not None and decision.stop:
                stop = True
                if decision.reason is not None and not reasons:
                    reasons.append(decision.reason)
        return stop

    def _end(self, handle: optuna.Trial, trial: TrialInfo, judged: Judged) -> None:
        """The one order of a judged trial's end: recorded in MLflow, told to Optuna,
        shown. A trial whose claim another process took meanwhile is left to it. A
        watcher's decision to stop the sweep's trials is kept (the first one)."""
        if not self.source.still_held(handle):
            self.source.done(handle)
            self._dropped(trial)
            return
        result, kept = judged.result, dict(judged.kept)
        for watcher in self.watchers:  # the recorder keeps it for MLflow now
            kept.update(watcher.on_trial_ending(trial, result))
        tell(self.study, self.spec, handle, trial, result, kept)
        self.source.done(handle)
        self.results[trial.number] = result
        told = dataclasses.replace(trial, best=self._best())
        for watcher in self.watchers:
            decision = watcher.on_trial_end(told, result)
            if decision is not None and decision.stop and self.stopped is None:
                self.stopped = decision

    def _best(self) -> str:
        """The study's best, looked up again once BEST_EVERY_S have passed (one look at a
        time: trials' ends run in threads of their own)."""
        with self.best_lock:
            if time.monotonic() - self.best_at >= BEST_EVERY_S:
                self.best, self.best_at = best_so_far(self.study, self.spec), time.monotonic()
            return self.best

    def _dropped(self, trial: TrialInfo) -> None:
        for watcher in self.watchers:
            watcher.on_trial_dropped(trial)
