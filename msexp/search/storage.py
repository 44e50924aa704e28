"""The Optuna storage a study lives in: a journal file by default, or an RDB URL."""

from __future__ import annotations

import fcntl
import threading
import time
from pathlib import Path
from typing import Any

import optuna
from optuna.storages.journal import JournalFileBackend
from optuna.storages.journal._file import BaseJournalFileLock

from msexp.paths import JOURNAL
from msexp.urls import redact


def open_storage(url: str | None) -> optuna.storages.BaseStorage:
    """A journal file (`*.journal`, default `mlruns/optuna.journal`) or any RDB URL."""
    if url is None or url.endswith(".journal"):
        path = Path(url or JOURNAL).resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(
            JournalFileBackend(str(path), lock_obj=FlockLock(str(path) + ".flock")))
    for attempt in range(4):
        try:
            return optuna.storages.RDBStorage(url)
        except Exception:  # another worker is creating the same schema right now
            time.sleep(1 + attempt)
    return optuna.storages.RDBStorage(url)


class FlockLock(BaseJournalFileLock):
    """A journal lock the kernel releases when its holder dies, even by kill -9.

    Optuna's default lock files outlive a killed holder and block others for 30 s.
    """

    def __init__(self, path: str):
        self.path = path
        self._handles: dict[int, Any] = {}

    def acquire(self) -> bool:
        handle = open(self.path, "a")  # noqa: SIM115  (closed in release)
        fcntl.flock(handle, fcntl.LOCK_EX)
        self._handles[threading.get_ident()] = handle
        return True

    def release(self) -> None:
        handle = self._handles.pop(threading.get_ident())
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def storage_label(url: str | None) -> str:
    """The storage as shown in MLflow and reports, with secrets redacted."""
    return redact(url) if url else str(JOURNAL)
