"""Heartbeats of running trials through Optuna's `BaseHeartbeat` contract, and the
trials that have gone silent.

Optuna's journal storage has no heartbeat, and its RDB heartbeat makes `Study.ask` warn
on every call outside `Study.optimize`; so one heartbeat of msexp's serves both, kept as
a trial attribute.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable

import optuna
import psutil
from optuna.trial import FrozenTrial, TrialState

from msexp.execution.process import owner
from msexp.keys import TrialKey
from msexp.search.optuna_private import BaseHeartbeat, storage_of, trial_id

HEARTBEAT_S = 5
STALE_AFTER_S = 60.0


class TrialHeartbeat(BaseHeartbeat):
    """The heartbeat of one study's trials, in the study's own storage."""

    def __init__(self, study: optuna.Study):
        self.study = study

    def record_heartbeat(self, trial_id: int) -> None:
        storage_of(self.study).set_trial_user_attr(trial_id, TrialKey.HEARTBEAT, time.time())

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        return [trial_id(trial) for trial in self.stale_trials()]

    def stale_trials(self) -> list[FrozenTrial]:
        """RUNNING trials of other processes whose owner died on this host, or whose
        heartbeat is older than STALE_AFTER_S."""
        now = time.time()
        stale = []
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            name = trial.user_attrs.get(TrialKey.OWNER, "")
            started = trial.datetime_start.timestamp() if trial.datetime_start else now
            beat = trial.user_attrs.get(TrialKey.HEARTBEAT, started)
            if name != owner() and (owner_is_dead(name) or now - beat > STALE_AFTER_S):
                stale.append(trial)
        return stale

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
