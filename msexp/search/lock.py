"""The study lock: what must not interleave across the processes that share a study's
storage, on this machine or another. A storage it cannot lock is refused."""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msexp.errors import MsexpError
from msexp.os_tools.locking import flock
from msexp.paths import JOURNAL
from msexp.search.patience import patience_of
from msexp.secrets.redaction import redact

_ADVISORY_KEY = 0x6D736578  # "msex": msexp's study lock in a shared PostgreSQL
_IN_MEMORY = ("sqlite://", "sqlite:///", "sqlite:///:memory:")
_PROCESS_LOCK = threading.Lock()  # the study lock of an in-memory SQLite database
HOLD_METHOD = "/msexp.StudyLock/Hold"  # served by msexp's gRPC proxy (`search.grpc_proxy`)
GRANTED = b"held"
_ENGINES: dict[tuple[int, str], Any] = {}  # see `_lock_engine`
_ENGINES_LOCK = threading.Lock()


@contextlib.contextmanager
def study_lock(url: str | None) -> Iterator[None]:
    """Hold every other process that shares the storage, on this machine or another: a
    file lock beside a journal or SQLite file, an advisory lock in PostgreSQL (taken by
    msexp's gRPC proxy for a `grpc://` storage), a lock of this process for an in-memory
    SQLite database (no other process can share it).

    What must not interleave across processes holds it: setting up a new study, and
    taking a trial (stale check, budget check, claim) or putting one back.

    Raises:
        MsexpError: a storage msexp cannot lock (`open_storage` refuses it first).
    """
    check_lockable(url)
    path = _storage_file(url)
    if path is not None:
        with flock(f"{path}.study.flock"):
            yield
    elif url in _IN_MEMORY:
        with _PROCESS_LOCK:
            yield
    elif str(url).startswith("grpc://"):
        with _proxy_lock(str(url)):
            yield
    else:
        with advisory_lock(str(url)):  # PostgreSQL
            yield


def check_lockable(url: str | None) -> None:
    """Refuse a storage that `study_lock` cannot lock: without it two processes could take
    one trial (MySQL, for one).

    Raises:
        MsexpError: one line naming the storage.
    """
    if _storage_file(url) is None and url not in _IN_MEMORY and \
            not str(url).startswith(("postgresql", "grpc://")):
        raise MsexpError(f"cannot use the Optuna storage {redact(str(url))} (msexp locks a "
                         "study across processes in a journal file, SQLite (sqlite:///FILE), "
                         "PostgreSQL or msexp's gRPC proxy of PostgreSQL only; use one of "
                         "them)")


def _storage_file(url: str | None) -> Path | None:
    """The file that holds the storage: a journal or a SQLite database."""
    if url is None or url.endswith(".journal"):
        return Path(url or JOURNAL)
    return Path(url[len("sqlite:///"):]) if sqlite_folder(url) is not None else None


@contextlib.contextmanager
def advisory_lock(url: str, patient: bool = True) -> Iterator[None]:
    """The study lock of a PostgreSQL database: an advisory lock, held by one session.
    Waiters queue in PostgreSQL's lock manager, in order (FIFO); a restart of the database
    is waited out (`search.patience`), or, not `patient`, raises at once."""
    connection = (patience_of(url).call(lambda: _locked_session(url)) if patient
                  else _locked_session(url))
    try:
        yield
    finally:
        _unlock(connection)


def _locked_session(url: str) -> Any:
    """A session of the lock engine that holds the advisory lock."""
    import sqlalchemy  # lazy: only RDB storages need it

    connection = _lock_engine(url).connect()
    try:
        connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"),
                           {"key": _ADVISORY_KEY})
    except BaseException:
        connection.invalidate()  # not pooled: a lock it may have got ends with its session
        connection.close()
        raise
    return connection


def _unlock(connection: Any) -> None:
    """Release the lock; a session that cannot (its database restarted, and the lock ended
    with the session) is closed, not pooled."""
    import sqlalchemy  # lazy: only RDB storages need it

    try:
        connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"),
                           {"key": _ADVISORY_KEY})
    except Exception:
        connection.invalidate()  # its session's lock ends with it
    finally:
        connection.close()


def _lock_engine(url: str) -> Any:
    """One engine per database and process, keeping one idle session for the lock: a new
    session per claim costs a PostgreSQL backend's start and a login each time."""
    import sqlalchemy  # lazy: only RDB storages need it

    key = (os.getpid(), url)  # a forked child must not share its parent's sessions
    with _ENGINES_LOCK:
        if key not in _ENGINES:
            _ENGINES[key] = sqlalchemy.create_engine(url, pool_size=1, max_overflow=8,
                                                     pool_pre_ping=True)
        return _ENGINES[key]


def grpc_address(url: str) -> tuple[str, int]:
    """(host, port) of `grpc://HOST:PORT`.

    Raises:
        MsexpError: the URL has no host or no port number.
    """
    host, _, port = url[len("grpc://"):].rstrip("/").rpartition(":")
    if not host or not port.isdigit():
        raise MsexpError(f"cannot use the Optuna storage {redact(url)} (a gRPC proxy is "
                         "given as grpc://HOST:PORT)")
    return host.strip("[]"), int(port)


@contextlib.contextmanager
def _proxy_lock(url: str) -> Iterator[None]:
    """Hold the study lock of the PostgreSQL behind msexp's proxy at `url` while the call
    stays open: the proxy grants it in the order asked (FIFO) and releases it when the call
    ends, or when this process dies and its connection closes. A restart of the proxy is
    waited out (`search.patience`), each try on a new channel (one that lost its server
    waits out gRPC's reconnect backoff first)."""
    host, port = grpc_address(url)
    channels: list[Any] = []
    try:
        call = patience_of(url).call(lambda: _granted(url, host, port, channels))
        try:
            yield
        finally:
            call.cancel()
    finally:
        for channel in channels:
            channel.close()


def _granted(url: str, host: str, port: int, channels: list[Any]) -> Any:
    """An open `Hold` call that the proxy granted the lock."""
    import grpc  # lazy: only a gRPC storage needs it

    channels.append(grpc.insecure_channel(f"{host}:{port}"))
    hold = channels[-1].unary_stream(HOLD_METHOD)
    while True:
        call = hold(b"")
        try:
            if next(call) == GRANTED:
                return call
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.UNAVAILABLE:
                raise  # the proxy is down: waited out
            if exc.code() is not grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise MsexpError(f"cannot take the study lock through {redact(url)} "
                                 f"({exc.code().name}: {exc.details()}); is it msexp's "
                                 "proxy (msexp services proxy)?") from None
        time.sleep(random.uniform(0.05, 0.5))  # every lock thread of the proxy waits


def sqlite_folder(url: str) -> Path | None:
    """The folder of a SQLite database file's URL; None for another URL or in memory."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or url[len(prefix):] in ("", ":memory:"):
        return None
    return Path(url[len(prefix):]).parent
