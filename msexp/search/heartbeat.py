"""Heartbeats of running trials through Optuna's `BaseHeartbeat` contract, and the
trials that have gone silent.

An RDB storage beats in Optuna's own heartbeat table (`open_storage` turns it on) and
tells the silent trials itself. Optuna's journal storage has no heartbeat, so msexp's
beats there as a trial attribute. Both also keep that attribute, which `msexp status`
shows.
"""

from __future__ import annotations

import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterable

import optuna
import psutil
from optuna.trial import FrozenTrial, TrialState

from msexp.execution.process import owner
from msexp.keys import TrialKey
from msexp.search.optuna_private import BaseHeartbeat, storage_of, study_id, trial_id

# Optuna warns on each `Study.ask` of a storage that beats, expecting `Study.optimize`
# to run the trials; msexp's trial source beats for the trials it asks for.
warnings.filterwarnings("ignore", "Heartbeat of storage is supposed", UserWarning)

HEARTBEAT_S = 5
STALE_AFTER_S = 60  # seconds without a heartbeat (Optuna's grace period: whole seconds)


class TrialHeartbeat(BaseHeartbeat):
    """The heartbeat of one study's trials, in the study's own storage."""

    def __init__(self, study: optuna.Study):
        self.study = study
        storage = storage_of(study)
        beats = isinstance(storage, BaseHeartbeat) and storage.get_heartbeat_interval()
        self.optuna: BaseHeartbeat | None = storage if beats else None  # RDB: Optuna's own

    def record_heartbeat(self, trial_id: int) -> None:
        if self.optuna is not None:
            self.optuna.record_heartbeat(trial_id)
        storage_of(self.study).set_trial_user_attr(trial_id, TrialKey.HEARTBEAT, time.time())

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        return [trial_id(trial) for trial in self.stale_trials()]

    def stale_trials(self) -> list[FrozenTrial]:
        """RUNNING trials of other processes whose owner died on this host, or whose
        heartbeat is older than STALE_AFTER_S (by Optuna's table in an RDB storage)."""
        silent = self._silent()
        return [trial for trial in
                self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                if trial.user_attrs.get(TrialKey.OWNER, "") != owner()
                and (owner_is_dead(trial.user_attrs.get(TrialKey.OWNER, "")) or silent(trial))]

    def _silent(self) -> Callable[[FrozenTrial], bool]:
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
        return None  # a stale trial is queued again under its own number (search.source)


def owner_is_dead(name: str) -> bool:
    """Whether `name` (host:pid) is a process of this host that no longer exists."""
    host, _, pid = name.rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and not psutil.pid_exists(int(pid))


class Beating:
    """A thread that beats for every trial `held()` returns, until closed."""

    def __init__(self, heartbeat: BaseHeartbeat, held: Callable[[], Iterable[int]]):
        self.heartbeat, self.held = heartbeat, held
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)
        self.thread.start()

    def _beat(self) -> None:
        while not self.done.wait(self.heartbeat.get_heartbeat_interval()):
            for held in self.held():
                try:
                    self.heartbeat.record_heartbeat(held)
                except optuna.exceptions.UpdateFinishedTrialError:
                    continue  # told meanwhile
                except Exception:  # the storage is down: the claim will tell, not the beat
                    continue

    def close(self) -> None:
        self.done.set()
        self.thread.join()
