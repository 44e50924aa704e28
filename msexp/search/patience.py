"""A restart of the study storage ridden out: a call that finds PostgreSQL or msexp's gRPC
proxy down waits and tries again for up to `patience_s()`, saying once per outage what it
waits for; past that it stops with the real cause in one line.

Optuna and SQLAlchemy retry nothing once a connection fails (`pool_pre_ping` only replaces
a pooled connection that died while idle), so the retry is msexp's own, around each of
the storage's calls.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from typing import Any, Callable, TypeVar

import optuna
from optuna.trial import TrialState

from msexp.errors import MsexpError
from msexp.search.optuna_private import BaseHeartbeat, reconnect
from msexp.secrets.redaction import redact

PATIENCE_S = 90.0  # a restart of up to a minute, with room; MSEXP_STORAGE_PATIENCE_S sets it
_BACKOFF_S = (0.25, 0.5, 1.0, 2.0)  # then every 2 s: back within 2 s of the server
_log = logging.getLogger("msexp")
_local = threading.local()  # a call inside a retried call is retried by the outer one only
T = TypeVar("T")


def patience_s() -> float:
    """How long a call waits for the storage to answer again."""
    return float(os.environ.get("MSEXP_STORAGE_PATIENCE_S", PATIENCE_S))


class Patience:
    """The outages of one storage seen by this process: when the current one began, and
    when the last one ended."""

    def __init__(self, url: str):
        self.url = redact(url)
        self.lock = threading.Lock()
        self.began: float | None = None
        self.ended = -float("inf")

    def call(self, call: Callable[[], T], before_retry: Callable[[], object] = lambda: None
             ) -> T:
        """`call()`, tried again (after `before_retry()`) while it fails for want of the
        storage.

        Raises:
            MsexpError: the storage did not answer within `patience_s()` (its cause).
        """
        if getattr(_local, "inside", False):
            return call()
        _local.inside = True
        try:
            return self._patiently(call, before_retry)
        finally:
            _local.inside = False

    def _patiently(self, call: Callable[[], T], before_retry: Callable[[], object]) -> T:
        tries = 0
        while True:
            try:
                answer = call()
            except Exception as exc:
                reason = unreachable(exc)
                if reason is None:
                    raise
                self._wait(reason, tries)
                tries += 1
                before_retry()
            else:
                self._answered()
                return answer

    def _wait(self, reason: str, tries: int) -> None:
        with self.lock:
            if self.began is None:
                self.began = time.monotonic()
                _log.warning(f"waiting for the study storage {self.url}: {reason} "
                             f"(retrying for up to {patience_s():.0f} s)")
            waited = time.monotonic() - self.began
        if waited > patience_s():
            raise MsexpError(f"the study storage {self.url} did not answer for "
                             f"{patience_s():.0f} s ({reason})")
        time.sleep(_BACKOFF_S[min(tries, len(_BACKOFF_S) - 1)])

    def _answered(self) -> None:
        if self.began is None:
            return
        with self.lock:
            if self.began is not None:
                self.began, self.ended = None, time.monotonic()
                _log.info(f"the study storage {self.url} answers again")

    def recovered_within(self, seconds: float) -> bool:
        """Whether an outage is going on or ended less than `seconds` ago: heartbeats
        missed meanwhile say nothing of their owners."""
        return self.began is not None or time.monotonic() - self.ended < seconds


_PATIENCE: dict[str, Patience] = {}
_PATIENCE_LOCK = threading.Lock()


def patience_of(url: str) -> Patience:
    """One `Patience` per storage and process: the storage and its study lock share it."""
    with _PATIENCE_LOCK:
        return _PATIENCE.setdefault(url, Patience(url))


def unreachable(exc: BaseException) -> str | None:
    """Why the storage did not answer, in one line, if `exc` (or what caused it) says the
    server cannot be reached or cut the connection; None for any other error."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        reason = _rpc_unavailable(exc) or _disconnected(exc)
        if reason:
            return reason
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return None


def _rpc_unavailable(exc: BaseException) -> str | None:
    code = getattr(exc, "code", None)
    if not callable(code) or not hasattr(exc, "details"):
        return None
    try:
        unavailable = code().name == "UNAVAILABLE"
    except Exception:  # not a gRPC call's error
        return None
    return _line(f"gRPC {exc.details()}") if unavailable else None


def _disconnected(exc: BaseException) -> str | None:
    """A lost or refused database connection (SQLAlchemy's or psycopg's own error)."""
    kinds = {t.__module__.split(".")[0] + "." + t.__name__ for t in type(exc).__mro__}
    if not kinds & {"sqlalchemy.OperationalError", "sqlalchemy.InterfaceError",
                    "psycopg.OperationalError", "psycopg.InterfaceError"} \
            and not getattr(exc, "connection_invalidated", False):
        return None
    cause = getattr(exc, "orig", None) or exc
    return _line(str(cause) or type(cause).__name__)


def _line(text: str) -> str:
    """The last line that says something: psycopg's and gRPC's own words, cut short."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return redact(lines[-1] if lines else text)[:200]


def patient(cls: type[T]) -> type[T]:
    """`cls` (an Optuna storage) whose every storage call rides out an outage: a subclass,
    so Optuna still sees an `RDBStorage` (its cache, its heartbeat) or a gRPC proxy."""
    calls = {name for base in (optuna.storages.BaseStorage, BaseHeartbeat)
             for name in vars(base) if not name.startswith("__") and hasattr(cls, name)
             and callable(getattr(cls, name))}
    wrapped = {name: _retried(getattr(cls, name), name) for name in sorted(calls)}
    return type(f"Patient{cls.__name__}", (cls,), wrapped)  # type: ignore[return-value]


def _retried(method: Callable[..., Any], name: str) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        patience = getattr(self, "msexp_patience", None)
        if patience is None:
            return method(self, *args, **kwargs)
        tried: list[bool] = []

        def once() -> Any:
            again = bool(tried)
            tried.append(True)
            try:
                return method(self, *args, **kwargs)
            except optuna.exceptions.UpdateFinishedTrialError:
                if again and name == "set_trial_state_values" and _landed(self, args, kwargs):
                    return True  # the first try's write landed; only its answer was lost
                raise

        return patience.call(once, lambda: reconnect(self) if isinstance(
            self, optuna.storages.GrpcStorageProxy) else None)

    return call


def _landed(storage: Any, args: tuple, kwargs: dict[str, Any]) -> bool:
    """Whether the trial is in the state a `set_trial_state_values` asked for."""
    trial_id = args[0] if args else kwargs["trial_id"]
    state = args[1] if len(args) > 1 else kwargs["state"]
    return state is not TrialState.RUNNING and storage.get_trial(trial_id).state is state
