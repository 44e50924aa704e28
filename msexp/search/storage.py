"""The Optuna storage a study lives in: a journal file by default, or an RDB URL (SQLite,
PostgreSQL), or msexp's gRPC proxy of a PostgreSQL database."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
from optuna.storages.journal import JournalFileBackend

from msexp.console.library_warnings import warnings_to_log
from msexp.errors import MsexpError
from msexp.os_tools.locking import flock
from msexp.paths import JOURNAL, not_regular
from msexp.search.heartbeat import HEARTBEAT_S, STALE_AFTER_S
from msexp.search.lock import check_lockable, grpc_address, sqlite_folder
from msexp.search.optuna_private import BaseJournalFileLock
from msexp.search.patience import Patience, patience_of, patient
from msexp.secrets.redaction import redact

_log = logging.getLogger("msexp")
_OPTUNA_TABLES = {"studies", "version_info", "trials", "study_directions"}
_TAIL_CHUNK = 1 << 16
# one RDB storage (one pool of connections) per database and process: each open would
# keep a pool of its own, and a worker's connections would grow with every open
_OPENED: dict[tuple[int, str], optuna.storages.RDBStorage] = {}


class _RDB(optuna.storages.RDBStorage):
    msexp_patience: Patience | None = None  # given once it opened; `search.patience` reads it


class _Proxy(optuna.storages.GrpcStorageProxy):
    msexp_patience: Patience | None = None  # as above


_PatientRDB, _PatientProxy = patient(_RDB), patient(_Proxy)


def open_storage(url: str | None) -> optuna.storages.BaseStorage:
    """A journal file (`*.journal`, default `mlruns/optuna.journal`), an RDB URL, or
    msexp's gRPC proxy of a PostgreSQL database (`grpc://HOST:PORT`, `search.grpc_proxy`).

    Raises:
        MsexpError: the storage cannot be opened, is not Optuna's, or is corrupt (one
            line naming it).
    """
    with storage_errors(url):
        if url is None or url.endswith(".journal"):
            return _open_journal(Path(url or JOURNAL).resolve())
        check_lockable(url)
        if url.startswith("grpc://"):
            return _open_proxy(url)
        opened = _OPENED.get((os.getpid(), url))
        if opened is not None:
            return opened
        _probe(url)
        for attempt in range(4):
            try:
                _OPENED[(os.getpid(), url)] = _rdb_storage(url)
                return _OPENED[(os.getpid(), url)]
            except Exception as exc:
                if not _is_db_error(exc):  # e.g. a schema of another Optuna version
                    raise MsexpError(f"cannot open the Optuna storage {redact(url)} "
                                     f"({_reason(exc)})") from None
                time.sleep(1 + attempt)  # another process is creating the same schema now
        return _rdb_storage(url)


def _rdb_storage(url: str) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage with its heartbeat on (see `search.heartbeat`), riding out a
    restart of its database (`search.patience`; a pooled connection that died meanwhile
    is replaced on checkout: `pool_pre_ping`); Optuna's warning that the heartbeat is
    experimental goes to the log."""
    with warnings_to_log():
        storage = _PatientRDB(url, heartbeat_interval=HEARTBEAT_S, grace_period=STALE_AFTER_S,
                              engine_kwargs={"pool_pre_ping": True})
    storage.msexp_patience = patience_of(url)
    return storage


def _open_proxy(url: str, timeout_s: float = 10.0) -> optuna.storages.BaseStorage:
    """Optuna's client of the proxy at `grpc://HOST:PORT`, once the proxy answers."""
    host, port = grpc_address(url)
    try:
        import grpc  # noqa: F401  (lazy: only a gRPC storage needs it)
    except ImportError:
        raise MsexpError("a grpc:// storage needs grpcio: pip install grpcio") from None
    with warnings_to_log():  # Optuna's proxy is experimental
        proxy = _PatientProxy(host=host, port=port)
    try:
        proxy.wait_server_ready(timeout=timeout_s)
    except ConnectionError:
        proxy.close()
        raise MsexpError(f"cannot open the Optuna storage {url} (no gRPC proxy answered "
                         f"within {timeout_s:.0f} s)") from None
    proxy.msexp_patience = patience_of(url)  # once it answered: a restart is ridden out
    return proxy


@contextlib.contextmanager
def storage_errors(url: str | None) -> Iterator[None]:
    """Report an error of the storage itself (a file, a folder, a database) as one
    MsexpError line naming the storage."""
    try:
        yield
    except MsexpError:
        raise
    except Exception as exc:
        if not (isinstance(exc, OSError) or _is_db_error(exc)):
            raise
        raise MsexpError(f"cannot use the Optuna storage {storage_label(url)} "
                         f"({_reason(exc)})") from None


def _open_journal(path: Path) -> optuna.storages.JournalStorage:
    kind = not_regular(path.stat().st_mode) if path.exists() else None
    if kind:  # a device or a FIFO: Optuna would read it without end, or block
        raise MsexpError(f"cannot use the Optuna storage {path} (it is a {kind}, not a "
                         "regular file)")
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FlockLock(str(path) + ".flock")
    if not path.exists() or os.access(path, os.W_OK):
        _cut_torn_tail(path, lock)
    try:
        journal = optuna.storages.JournalStorage(JournalFileBackend(str(path), lock_obj=lock))
        if _last_line_bad(path):  # Optuna reads past it, until a record is appended after it
            raise ValueError("not a record")
        return journal
    except (ValueError, KeyError, TypeError):  # a line that is not a journal record
        line = _first_bad_line(path)
        raise MsexpError(f"{path}: line {line} is not an Optuna journal record; keep a copy, "
                         "delete that line (or restore the file from a backup) and run "
                         "again") from None


def _last_line_bad(path: Path, window: int = 1 << 22) -> bool:
    """Whether the last line (whole, with its newline) is not a journal record (a last
    line longer than `window` bytes is not judged)."""
    with path.open("rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - window))
        lines = f.read().splitlines()
    if not lines or (len(lines) == 1 and size > window):
        return False
    try:
        record = json.loads(lines[-1])
    except ValueError:
        return True
    return not isinstance(record, dict) or "op_code" not in record


def _cut_torn_tail(path: Path, lock: FlockLock) -> None:
    """Cut a last line left without its newline by a writer that died mid-append, so the
    next record starts on a line of its own instead of corrupting the journal.

    Writers append whole lines under the lock, so under the lock a missing newline at
    the end can only be such a remnant.
    """
    if not path.exists() or _ends_a_line(path):
        return
    lock.acquire()
    try:
        with path.open("rb+") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0 or _ends_a_line(path):
                return
            keep = _after_last_newline(f, size)
            f.truncate(keep)
            os.fsync(f.fileno())
    finally:
        lock.release()
    _log.warning(f"{path}: cut a partial last record ({size - keep} bytes) left by an "
                 "interrupted write")


def _ends_a_line(path: Path) -> bool:
    with path.open("rb") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return True
        f.seek(size - 1)
        return f.read(1) == b"\n"


def _after_last_newline(f: Any, size: int) -> int:
    end = size
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        f.seek(start)
        found = f.read(end - start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0


def _first_bad_line(path: Path) -> int:
    number = 0
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            try:
                record = json.loads(line)
            except ValueError:
                return number
            if not isinstance(record, dict) or "op_code" not in record:
                return number
    return number


def _probe(url: str) -> None:
    """Connect once, failing fast: the retries in `open_storage` are for a schema another
    process is creating, not for a database that is not there."""
    import sqlalchemy  # lazy: only RDB storages need it

    folder = sqlite_folder(url)
    if folder is not None and not folder.is_dir():
        raise MsexpError(f"cannot open the Optuna storage {redact(url)} (folder {folder} "
                         "does not exist)")
    args = {"connect_timeout": 5} if url.startswith("postgresql") else {}
    try:
        engine = sqlalchemy.create_engine(url, connect_args=args)
        try:
            tables = set(sqlalchemy.inspect(engine).get_table_names())
        finally:
            engine.dispose()
    except Exception as exc:
        raise MsexpError(f"cannot open the Optuna storage {redact(url)} "
                         f"({_reason(exc)})") from None
    if "alembic_version" in tables and not tables & _OPTUNA_TABLES:
        raise MsexpError(f"{redact(url)} is not an Optuna database (it holds another "
                         "application's tables); give Optuna a database of its own")


def _is_db_error(exc: Exception) -> bool:
    return any(t.__module__.startswith("sqlalchemy") for t in type(exc).__mro__)


def _reason(exc: Exception) -> str:
    """The first line of what went wrong, without SQLAlchemy's wrapping."""
    cause = getattr(exc, "orig", None) or exc
    if isinstance(cause, OSError) and cause.strerror:
        text = cause.strerror + (f": {cause.filename}" if cause.filename else "")
    else:
        text = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
    return redact(f"{type(cause).__name__}: {text}"[:300])


class FlockLock(BaseJournalFileLock):
    """A journal lock the kernel releases when its holder dies, even by kill -9.

    Optuna's default lock files outlive a killed holder and block others for 30 s.
    """

    def __init__(self, path: str):
        self.path = path
        self._held: dict[int, contextlib.ExitStack] = {}  # by thread

    def acquire(self) -> bool:
        held = contextlib.ExitStack()
        held.enter_context(flock(self.path))
        self._held[threading.get_ident()] = held
        return True

    def release(self) -> None:
        self._held.pop(threading.get_ident()).close()


def storage_label(url: str | None) -> str:
    """The storage as shown in MLflow and reports, with secrets redacted."""
    return redact(url) if url else str(JOURNAL)
