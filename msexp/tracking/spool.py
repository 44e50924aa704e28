"""The spool: every trial's record on disk before MLflow has it, kept while the store
cannot take it.

One JSON file per trial under `mlruns/spool/`, and one `.ending` file per sweep whose
parent run could not be ended. Every trial is recorded through here (`delivery`): a
sweep writes its record before Optuna is told and delivers it in the background, `tune`
writes and delivers it at once. While a process delivers its record, it holds the
record's lock, and the deliveries of other processes pass it by; if it dies, the lock
goes with it and the next delivery takes the record. A record names its store by the URL
without credentials, so moving a password from the URL into MLFLOW_TRACKING_PASSWORD
still finds it, and no spool file holds a secret (a record is redacted as a whole).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

from msexp.errors import MsexpError
from msexp.execution.exits import space_note
from msexp.execution.result import TrialResult
from msexp.os_tools.locking import lock_file
from msexp.paths import SPOOL_DIR, write_atomic
from msexp.secrets.redaction import known_secrets, redact_known, redact_params


def store_key(uri: str) -> str:
    """The tracking store a URI names, without user, password, query or trailing slash."""
    parts = urlsplit(uri)
    if not parts.netloc:
        return uri
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


@dataclass
class SpooledTrial:
    """A trial result waiting for its MLflow store."""

    store: str
    experiment_id: str
    parent_id: str
    number: int
    params: dict[str, Any]
    result: dict[str, Any]
    started: float
    run_id: str | None = None  # the child run made as the trial started, if any
    name: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    log_checkpoint: bool = False  # its model attached to its run
    replace: bool = True  # runs of an earlier attempt may be there: they go

    @property
    def trial_result(self) -> TrialResult:
        return TrialResult.from_json(self.result)


class Held:
    """A record whose writer is delivering it: its lock keeps other deliveries off."""

    def __init__(self, path: Path, handle: IO[str], record: SpooledTrial):
        self.path, self._handle, self.record = path, handle, record

    def delivered(self) -> None:
        """The store has the trial: the record goes."""
        self.path.unlink(missing_ok=True)
        self.release()

    def release(self) -> None:
        """Leave the record for a later delivery (`delivery.flush_spool`, `msexp sync`)."""
        self._handle.close()


class Spool:
    """Spooled trials in a folder, oldest first."""

    def __init__(self, folder: Path = SPOOL_DIR):
        self.folder = folder

    def hold(self, uri: str, experiment_id: str, parent_id: str, number: int,
             params: dict[str, Any], result: TrialResult, started: float,
             **more: Any) -> Held:
        """Write one trial's record (atomically) and keep its lock until it is delivered
        or released. `more`: the other `SpooledTrial` fields (`run_id`, `name`, ...)."""
        with self._full_disk(f"trial {number}'s result"):
            record = SpooledTrial(store_key(uri), experiment_id, parent_id, number,
                                  redact_params(params), result.to_json(), started, **more)
            path, text = self._file(record, params)
            return Held(path, self._locked_write(path, text), record)

    @staticmethod
    def _locked_write(path: Path, text: str) -> IO[str]:
        """Write `text` to `path` (atomically), locked; the lock stays held."""
        partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        handle = None
        try:
            handle = partial.open("w", encoding="utf-8")
            lock_file(handle)  # the lock stays with the file as renamed
            handle.write(text)
            handle.flush()
            os.replace(partial, path)
        except OSError as exc:  # a failed write names no file: say where (a full disk)
            if handle is not None:
                handle.close()
            partial.unlink(missing_ok=True)
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        return handle

    @contextlib.contextmanager
    def _full_disk(self, what: str) -> Iterator[None]:
        """A full disk as the one line other full disks get (`exits.space_note`)."""
        try:
            yield
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            where = self.folder.resolve()
            note = space_note(self.folder) or f"; no space left on the device of {where}"
            raise MsexpError(f"cannot keep {what} in the spool{note}") from None

    def _file(self, record: SpooledTrial, params: dict[str, Any]) -> tuple[Path, str]:
        """The record's file and its text, without the secrets among `params` (as given)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        return (self.folder / f"{record.parent_id}-{record.number:05d}.json",
                redact_known(json.dumps(asdict(record), default=str), known_secrets(params)))

    def pending(self, uri: str) -> Iterator[tuple[Path, SpooledTrial]]:
        """The records for the store `uri` names, oldest first, each locked while the
        caller has it; those another delivery holds are passed by."""
        key = store_key(uri)
        for path in self.files():
            try:
                handle = path.open(encoding="utf-8")
            except FileNotFoundError:  # delivered meanwhile
                continue
            with handle:
                if not lock_file(handle, blocking=False):
                    continue
                if not _same_file(handle, path):  # delivered just before the lock
                    continue
                data = json.loads(handle.read())
                data.setdefault("store", store_key(data.pop("uri", "")))  # written by 0.1
                data.pop("uri", None)
                if data["store"] == key:
                    yield path, SpooledTrial(**data)

    def files(self) -> list[Path]:
        """Every spooled trial record, whatever its store."""
        return sorted(self.folder.glob("*.json")) if self.folder.is_dir() else []

    def keep_ending(self, uri: str, parent_id: str, ending: str) -> Path:
        """Keep how a sweep's parent run is to end (FINISHED, FAILED, KILLED)."""
        path = self.folder / f"{parent_id}.ending"
        with self._full_disk("how the sweep's run ends"):
            self.folder.mkdir(parents=True, exist_ok=True)
            write_atomic(path, json.dumps({"store": store_key(uri), "parent_id": parent_id,
                                           "ending": ending}))
        return path

    def endings(self, uri: str) -> Iterator[tuple[Path, str, str]]:
        """(file, parent run id, ending) of the parent runs of the store `uri` names."""
        for path in self.ending_files():
            data = json.loads(path.read_text(encoding="utf-8"))
            if data["store"] == store_key(uri):
                yield path, data["parent_id"], data["ending"]

    def ending_files(self) -> list[Path]:
        return sorted(self.folder.glob("*.ending")) if self.folder.is_dir() else []


def _same_file(handle: IO[str], path: Path) -> bool:
    """Whether `path` still names the file `handle` has open."""
    try:
        return os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
    except FileNotFoundError:
        return False
