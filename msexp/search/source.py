"""Where a sweep's trials come from: claimed from the queue or asked of the sampler,
kept alive by heartbeats, and put back when they cannot finish. A trial's claim marks
are read and written by `search.claims` only."""

from __future__ import annotations

import threading
from typing import Callable

import optuna
from optuna.trial import TrialState

from msexp.os_tools.identity import owner
from msexp.search import claims
from msexp.search.claims import (
    KillOwned,
    OnFail,
    TrialHeartbeat,
    finished_count,
    started_count,
)
from msexp.search.heartbeat import Beating
from msexp.search.lock import study_lock
from msexp.search.optuna_private import pop_waiting, storage_of, trial_id


class TrialSource:
    """Claims trials for one process: WAITING ones first (grid points, trials put back,
    reruns), then, when `samples`, new ones while fewer than `total` have started.

    Before every claim, the trials of dead or silent processes are queued again, what a
    dead one left running killed by `kill_owned(owner)`. The budget check and the ask
    hold the study lock, so no number of processes exceeds it.
    """

    def __init__(self, study: optuna.Study, storage_url: str | None, total: int,
                 samples: bool, *, kill_owned: KillOwned):
        self.study, self.storage_url = study, storage_url
        self.total, self.samples = total, samples
        self.kill_owned = kill_owned
        self.heartbeat = TrialHeartbeat(study)
        self.held: dict[int, optuna.Trial] = {}  # claimed and not told yet
        self.on_lost: Callable[[int], None] = lambda number: None
        self.on_fail: OnFail = lambda trial, error: {}
        self._lock = threading.Lock()  # this process's threads: one claim at a time
        self._beating = Beating(self.heartbeat, self._held_ids)

    def listen(self, on_lost: Callable[[int], None], on_fail: OnFail) -> None:
        """Who hears of the source's trials: `on_lost(number)` when another process took a
        held trial (its run is to stop), and `on_fail(frozen, error)` to record a stale
        trial failed out of retries (in MLflow) before it is failed, returning the
        attributes to keep on it."""
        self.on_lost, self.on_fail = on_lost, on_fail

    def _held_ids(self) -> list[int]:
        """The trials to beat for: those still held. One whose claim was lost (this
        process was frozen past its heartbeat, and another took the trial) is dropped,
        and `on_lost` is told its number, so its slot stops it before it writes more."""
        with self._lock:
            held = list(self.held.values())
        kept = []
        for trial in held:
            try:
                mine = self.still_held(trial)
            except Exception:  # the storage is down: the claim will tell
                mine = True
            if mine:
                kept.append(trial_id(trial))
            else:
                self.done(trial)
                self.on_lost(trial.number)
        return kept

    def claim(self) -> optuna.Trial | None:
        """The next trial for this process, or None when the study has none left."""
        me = owner()  # before any trial is taken: a failure here leaves none RUNNING
        with self._lock, study_lock(self.storage_url):
            self._requeue_stale()
            trial = pop_waiting(self.study)
            if trial is None and self.samples and started_count(self.study) < self.total:
                trial = self.study.ask()
            if trial is None:
                return None
            claims.mark_claimed(trial, me, self.heartbeat)
            self.held[trial.number] = trial
            return trial

    def pending(self) -> int:
        """Trials no process has taken yet: queued ones (those of dead or silent
        processes included), and the rest of a sampler's budget."""
        with self._lock, study_lock(self.storage_url):
            self._requeue_stale()
        waiting = len(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
        return waiting + (max(0, self.total - started_count(self.study)) if self.samples else 0)

    def _requeue_stale(self) -> None:
        claims.requeue_stale_trials(self.study, self.kill_owned, self.heartbeat,
                                    self.on_fail)

    def finished(self) -> int:
        """Trials of the study that ended (see `finished_count`)."""
        return finished_count(self.study)

    def still_held(self, trial: optuna.Trial) -> bool:
        """Whether the trial is still this process's: RUNNING under its claim. A process
        frozen past its heartbeat finds it queued again or claimed by another."""
        return claims.held_by(storage_of(self.study).get_trial(trial_id(trial)), owner())

    def done(self, trial: optuna.Trial) -> None:
        """The trial was told: stop beating for it."""
        with self._lock:
            self.held.pop(trial.number, None)

    def put_back(self, trial: optuna.Trial, reason: str) -> None:
        """Queue a trial this process took again, as it is; no attempt is counted. A
        trial whose claim was lost stays with its new owner (under the study lock, so no
        claim of another process comes between the check and the write)."""
        with study_lock(self.storage_url):
            if self.still_held(trial):
                claims.put_back(self.study, trial, reason)
        self.done(trial)

    def release_all(self, reason: str) -> None:
        """Queue again every trial still held (an aborted sweep)."""
        for trial in list(self.held.values()):
            try:
                self.put_back(trial, reason)
            except Exception:  # told meanwhile, or the storage failed (the next run finds it stale)
                continue

    def close(self) -> None:
        self._beating.close()
