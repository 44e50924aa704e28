"""How often a sweep beats for the trials it holds, when a trial has gone silent, whether
an owner is dead, and the thread that beats.

What a beat writes and which trials are stale is `search.claims.TrialHeartbeat`: an RDB
storage beats in Optuna's own heartbeat table too (`open_storage` turns it on).
"""

from __future__ import annotations

import socket
import threading
import warnings
from collections.abc import Callable, Iterable

import optuna
import psutil

from msexp.search.optuna_private import BaseHeartbeat

# Optuna warns on each `Study.ask` of a storage that beats, expecting `Study.optimize`
# to run the trials; msexp's trial source beats for the trials it asks for.
warnings.filterwarnings("ignore", "Heartbeat of storage is supposed", UserWarning)

HEARTBEAT_S = 5
STALE_AFTER_S = 60  # seconds without a heartbeat (Optuna's grace period: whole seconds)


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
