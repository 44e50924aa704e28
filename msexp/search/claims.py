"""Who holds a trial, and the only code that reads or writes a trial's claim marks:

- `owner`: the process (host:pid) that holds a RUNNING trial;
- `heartbeat`: when that process last said it is alive (an RDB storage beats in Optuna's
  own heartbeat table too);
- `attempt`: present once an earlier attempt of the trial's number ran; counts the
  orchestrator deaths in a row that it ran through alone (against `budget.retries`);
- `retry_of` (`TrialKey.RERUN_OF`): on a rerun (`--retry-failed`), the failed trial it
  copies under a new number.

`search.source.TrialSource` (the budget, the trials this process holds, the study lock
around a claim) and `msexp status` go through these functions. What a dead owner's trial
processes left running is killed by the callable the caller passes in.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from msexp.keys import StudyKey, TrialKey
from msexp.os_tools.identity import owner
from msexp.search.heartbeat import HEARTBEAT_S, STALE_AFTER_S, owner_is_dead
from msexp.search.lock import study_lock
from msexp.search.optuna_private import (
    BaseHeartbeat,
    set_waiting,
    storage_of,
    study_id,
    trial_id,
)
from msexp.search.patience import outage_within, read_beats_with

Trial = optuna.Trial | FrozenTrial
OnFail = Callable[[FrozenTrial, str], dict[str, Any]]
KillOwned = Callable[[str], None]  # given a dead owner (host:pid), kills what its trials left
_log = logging.getLogger("msexp")


class TrialHeartbeat(BaseHeartbeat):
    """The heartbeat of one study's trials, in the study's own storage. Optuna's journal
    storage has no heartbeat, so msexp's beats there as the `heartbeat` mark, which every
    storage keeps and `msexp status` shows."""

    def __init__(self, study: optuna.Study):
        self.study = study
        storage = storage_of(study)
        self.optuna: BaseHeartbeat | None = None  # an RDB storage's: Optuna's own
        if isinstance(storage, BaseHeartbeat) and storage.get_heartbeat_interval():
            self.optuna = storage

    def record_heartbeat(self, trial_id: int) -> None:
        if self.optuna is not None:
            self.optuna.record_heartbeat(trial_id)
        storage_of(self.study).set_trial_user_attr(trial_id, TrialKey.HEARTBEAT, time.time())

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        return [trial_id(trial) for trial in self.stale_trials()]

    def stale_trials(self) -> list[FrozenTrial]:
        """RUNNING trials of other processes whose owner died on this host, or whose
        heartbeat is older than STALE_AFTER_S (by Optuna's table in an RDB storage); and
        RUNNING trials without an owner: a claim marks its trial under the study lock, which
        the caller holds, so such a claim was cut short (its process died between the
        trial's RUNNING write and its owner mark)."""
        silent = self._silent()
        return [trial for trial in
                self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                if not owner_of(trial) or (owner_of(trial) != owner()
                                           and (owner_is_dead(owner_of(trial)) or silent(trial)))]

    def _silent(self) -> Callable[[FrozenTrial], bool]:
        """Whether a trial's owner went silent. Not after this process found the storage
        down within STALE_AFTER_S: heartbeats missed meanwhile say nothing of their owners
        (a live one beats again within seconds of the storage's return)."""
        if outage_within(storage_of(self.study), STALE_AFTER_S):
            return lambda trial: False
        if self.optuna is not None:
            ids = set(self.optuna._get_stale_trial_ids(study_id(self.study)))
            return lambda trial: trial_id(trial) in ids
        now = time.time()

        def silent(trial: FrozenTrial) -> bool:
            started = trial.datetime_start.timestamp() if trial.datetime_start else now
            return now - trial.user_attrs.get(TrialKey.HEARTBEAT, started) > STALE_AFTER_S

        return silent

    def get_heartbeat_interval(self) -> int:
        return HEARTBEAT_S

    def get_heartbeat_stale_trial_callback(self) -> None:
        return None  # a stale trial is queued again under its own number (`requeue_orphan`)


def mark_claimed(trial: optuna.Trial, me: str, heartbeat: TrialHeartbeat) -> None:
    """Write a trial this process just took as its own (`me`: its host:pid), beating."""
    trial.set_user_attr(TrialKey.OWNER, me)
    heartbeat.record_heartbeat(trial_id(trial))


def owner_of(trial: Trial) -> str:
    """The process (host:pid) that claimed the trial last, or "" (none did)."""
    return trial.user_attrs.get(TrialKey.OWNER, "")


def held_by(frozen: FrozenTrial, me: str) -> bool:
    """Whether the trial is RUNNING under the claim of process `me`."""
    return frozen.state is TrialState.RUNNING and owner_of(frozen) == me


def last_heartbeat(trial: Trial) -> float | None:
    """When the trial's owner last beat for it (seconds since the epoch), if it did."""
    return trial.user_attrs.get(TrialKey.HEARTBEAT)


read_beats_with(last_heartbeat)  # a cut-off claim found landed by no heartbeat since


def is_later_attempt(trial: Trial) -> bool:
    """Whether an earlier attempt of the trial's number ran (and may have recorded it)."""
    return TrialKey.ATTEMPT in trial.user_attrs


def put_back(study: optuna.Study, trial: Trial, reason: str) -> bool:
    """Queue the unfinished trial again as it is (WAITING): same number, params, folder and
    checkpoints, so the next attempt continues it. A stop (a signal, an unreachable MLflow,
    an aborted sweep) is not the trial's fault: its attempts counted against
    `budget.retries` stay as they are. Returns whether it was queued."""
    storage, number = storage_of(study), trial_id(trial)
    attempts = trial.user_attrs.get(TrialKey.ATTEMPT, 0)
    storage.set_trial_user_attr(number, TrialKey.ATTEMPT, attempts)
    storage.set_trial_user_attr(number, TrialKey.ERROR, reason)
    return set_waiting(study, number)


def requeue_stale_trials(study: optuna.Study, kill_owned: KillOwned,
                         heartbeat: TrialHeartbeat | None = None,
                         on_fail: OnFail = lambda trial, error: {}) -> list[int]:
    """Queue again the RUNNING trials whose orchestrator died or went silent (see
    `TrialHeartbeat.stale_trials`), each as `requeue_orphan` says; returns their numbers.
    What a dead owner's trial processes left running (a daemon, a `setsid` helper) goes
    first, through `kill_owned(owner)`."""
    orphans = (heartbeat or TrialHeartbeat(study)).stale_trials()
    running = Counter(owner_of(frozen) for frozen in orphans)
    stale = []
    for frozen in orphans:
        if not owner_of(frozen):  # never started: no attempt spent
            put_back(study, frozen, "its claim was cut short: the claiming process died")
            stale.append(frozen.number)
            continue
        if owner_is_dead(owner_of(frozen)):
            kill_owned(owner_of(frozen))
        try:
            requeue_orphan(study, frozen, running[owner_of(frozen)],
                           functools.partial(on_fail, frozen))
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
    a trial past `budget.retries`, the only one running at each of those deaths in a row, may
    be what takes its orchestrator down (memory, a kill of its parent). It is failed once
    `before_fail` (given the error) has recorded it, and one line names it.
    """
    storage, number = storage_of(study), trial_id(frozen)
    name = owner_of(frozen) or "?"
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


def rerun_failed(study: optuna.Study, storage_url: str | None = None) -> int:
    """Queue a rerun of every FAILED or TIMEOUT trial that has none yet: a fresh copy under
    a new number (same params; it starts from scratch); return how many. Under the study
    lock, so processes that do it at once rerun each trial once."""
    with study_lock(storage_url):
        trials = study.get_trials(deepcopy=False)
        count = 0
        for frozen in _failed(trials):
            attrs = {k: v for k, v in frozen.user_attrs.items() if k == TrialKey.GRID_POINT}
            study.enqueue_trial(frozen.params or frozen.system_attrs.get("fixed_params", {}),
                                user_attrs={**attrs, TrialKey.RERUN_OF: frozen.number})
            count += 1
        return count


def failed_trials(study: optuna.Study) -> list[FrozenTrial]:
    """FAILED or TIMEOUT trials that no rerun has replaced."""
    return _failed(study.get_trials(deepcopy=False))


def _failed(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    rerun = _rerun(trials)
    return [t for t in trials if t.state is TrialState.FAIL and t.number not in rerun]


def _rerun(trials: list[FrozenTrial]) -> set[int]:
    """The numbers of the trials some rerun copies."""
    return {t.user_attrs[TrialKey.RERUN_OF] for t in trials if TrialKey.RERUN_OF in t.user_attrs}


def finished_count(study: optuna.Study) -> int:
    """Trials that ended, not counting the failed ones a rerun replaced."""
    trials = study.get_trials(deepcopy=False)
    rerun = _rerun(trials)
    return sum(t.state.is_finished() and t.number not in rerun for t in trials)


def started_count(study: optuna.Study) -> int:
    """Trials taken from the budget: started ones, not counting reruns."""
    trials = study.get_trials(deepcopy=False)
    return sum(t.state is not TrialState.WAITING and TrialKey.RERUN_OF not in t.user_attrs
               for t in trials)
