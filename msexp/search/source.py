"""Where a sweep's trials come from: claimed from the queue or asked of the sampler,
kept alive by heartbeats, and put back when they cannot finish."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any, Callable

import optuna
from optuna.trial import FrozenTrial, TrialState

from msexp.execution.process import kill_processes, marked, owner
from msexp.keys import StudyKey, TrialKey
from msexp.search.heartbeat import STALE_AFTER_S, Beating, TrialHeartbeat, owner_is_dead
from msexp.search.lock import study_lock
from msexp.search.optuna_private import pop_waiting, set_waiting, storage_of, trial_id
from msexp.search.study import finished_count, started_count

OnFail = Callable[[FrozenTrial, str], dict[str, Any]]
_log = logging.getLogger("msexp")


class TrialSource:
    """Claims trials for one process: WAITING ones first (grid points, trials put back,
    retries), then, when `samples`, new ones while fewer than `total` have started.

    Before every claim, the trials of dead or silent processes are queued again. The
    budget check and the ask hold the study lock, so no number of processes exceeds it.
    """

    def __init__(self, study: optuna.Study, storage_url: str | None, total: int,
                 samples: bool):
        self.study, self.storage_url = study, storage_url
        self.total, self.samples = total, samples
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
            requeue_stale_trials(self.study, self.heartbeat, self.on_fail)
            trial = pop_waiting(self.study)
            if trial is None and self.samples and started_count(self.study) < self.total:
                trial = self.study.ask()
            if trial is None:
                return None
            trial.set_user_attr(TrialKey.OWNER, me)
            self.heartbeat.record_heartbeat(trial_id(trial))
            self.held[trial.number] = trial
            return trial

    def pending(self) -> int:
        """Trials no process has taken yet: queued ones (those of dead or silent
        processes included), and the rest of a sampler's budget."""
        with self._lock, study_lock(self.storage_url):
            requeue_stale_trials(self.study, self.heartbeat, self.on_fail)
        waiting = len(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
        return waiting + (max(0, self.total - started_count(self.study)) if self.samples else 0)

    def finished(self) -> int:
        """Trials of the study that ended (see `finished_count`)."""
        return finished_count(self.study)

    def still_held(self, trial: optuna.Trial) -> bool:
        """Whether the trial is still this process's: RUNNING under its claim. A process
        frozen past its heartbeat finds it queued again or claimed by another."""
        frozen = storage_of(self.study).get_trial(trial_id(trial))
        return frozen.state is TrialState.RUNNING and \
            frozen.user_attrs.get(TrialKey.OWNER) == owner()

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
                put_back(self.study, trial_id(trial),
                         trial.user_attrs.get(TrialKey.ATTEMPT, 0), reason)
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


def put_back(study: optuna.Study, trial: int, attempts: int, reason: str) -> bool:
    """Queue the unfinished trial with id `trial` again as it is (WAITING): same number,
    params, folder and checkpoints, so the next attempt continues it. A stop (a signal, an
    unreachable MLflow, an aborted sweep) is not the trial's fault: its `attempts` counted
    against `budget.retries` stay as they are. Returns whether it was queued."""
    storage = storage_of(study)
    storage.set_trial_user_attr(trial, TrialKey.ATTEMPT, attempts)
    storage.set_trial_user_attr(trial, TrialKey.ERROR, reason)
    return set_waiting(study, trial)


def requeue_stale_trials(study: optuna.Study, heartbeat: TrialHeartbeat | None = None,
                         on_fail: OnFail = lambda trial, error: {}) -> list[int]:
    """Queue again the RUNNING trials whose orchestrator died or went silent (see
    `TrialHeartbeat.stale_trials`), each as `requeue_orphan` says; returns their numbers.
    What a dead owner's trial processes left running (a daemon, a `setsid` helper) is
    killed first, found by their marker."""
    orphans = (heartbeat or TrialHeartbeat(study)).stale_trials()
    running = Counter(frozen.user_attrs.get(TrialKey.OWNER, "") for frozen in orphans)
    stale = []
    for frozen in orphans:
        name = frozen.user_attrs.get(TrialKey.OWNER, "")
        if owner_is_dead(name):
            kill_processes(marked(name))
        try:
            requeue_orphan(study, frozen, running[name],
                           lambda error, frozen=frozen: on_fail(frozen, error))
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # its owner told it meanwhile: it was slow, not dead
        stale.append(frozen.number)
    return stale


def requeue_orphan(study: optuna.Study, frozen: FrozenTrial, running: int,
                   before_fail: Callable[[str], dict[str, Any]] = lambda error: {}) -> bool:
    """Queue again a trial whose orchestrator died or went silent while it ran `running`
    trials, this one included; returns whether it was queued.

    With other trials running, the death is not the trial's fault: its count of attempts
    against `budget.retries` starts over. As the only trial running, the death counts:
    a trial past its retries, the only one running at each of those deaths in a row, may
    be what takes its orchestrator down (memory, a kill of its parent). It is failed once
    `before_fail` (given the error) has recorded it, and one line names it.
    """
    storage, number = storage_of(study), trial_id(frozen)
    name = frozen.user_attrs.get(TrialKey.OWNER, "") or "?"
    how = "died" if owner_is_dead(name) else f"went silent (no heartbeat for {STALE_AFTER_S} s)"
    retries = study.user_attrs.get(StudyKey.RETRIES, 0)
    attempts = frozen.user_attrs.get(TrialKey.ATTEMPT, 0) + 1 if running == 1 else 0
    storage.set_trial_user_attr(number, TrialKey.ATTEMPT, attempts)
    if running > 1:
        reason = (f"orchestrator {name} {how} while it ran {running} trials: not counted "
                  "against budget.retries")
    elif attempts <= retries:
        reason = (f"orchestrator {name} {how} with only this trial running ({attempts} of "
                  f"budget.retries {retries} in a row)")
    else:
        error = (f"orchestrator {name} {how} with only this trial running, {attempts} "
                 f"time{'s' if attempts > 1 else ''} in a row: it may take its orchestrator "
                 f"down; out of retries (budget.retries {retries})")
        kept = {**before_fail(error), TrialKey.ERROR: error}
        for key, value in kept.items():
            storage.set_trial_user_attr(number, key, value)
        storage.set_trial_state_values(number, TrialState.FAIL)
        _log.warning(f"study {study.study_name}: trial {frozen.number} failed: {error}; "
                     "--retry-failed runs it again")
        return False
    storage.set_trial_user_attr(number, TrialKey.ERROR, reason)
    return set_waiting(study, number)
