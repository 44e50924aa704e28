"""A restart of the study storage ridden out: a call that finds PostgreSQL or msexp's gRPC
proxy down waits and tries again for up to `patience_s()`, saying once per outage what it
waits for; past that it stops with the real cause in one line.

Optuna and SQLAlchemy retry nothing once a connection fails (`pool_pre_ping` only replaces
a pooled connection that died while idle): the retry is msexp's own, around each call.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from datetime import datetime
from typing import Any, Callable, TypeVar

import optuna
from optuna.trial import FrozenTrial, TrialState

from msexp.errors import MsexpError
from msexp.search import unanswered
from msexp.search.optuna_private import (
    CACHED_BACKEND_CALLS,
    PREPARE_NEW_TRIAL,
    BaseHeartbeat,
    backend_of,
    reconnect,
    trial_id,
)
from msexp.search.outages import AnswerLost, unreachable
from msexp.secrets.redaction import redact

PATIENCE_S = 90.0  # a restart of up to a minute, with room; MSEXP_STORAGE_PATIENCE_S sets it
_BACKOFF_S = (0.25, 0.5, 1.0, 2.0)  # then every 2 s: back within 2 s of the server
_log = logging.getLogger("msexp")
_local = threading.local()  # a call inside a retried call is retried by the outer one only
T = TypeVar("T")
_CREATES = ("create_new_trial", "_create_new_trial")


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
            began = time.monotonic()
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
                self._answered(began)
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

    def _answered(self, asked: float) -> None:
        """A call asked at `asked` was answered: the outage is over if it was asked after
        the outage began (one asked before may be answered while the server shuts down)
        and no call waits unanswered (a proxy answers some from its cache meanwhile)."""
        if self.began is None or asked < self.began or unanswered.CALLS.late(self):
            return
        with self.lock:
            if self.began is not None and asked >= self.began:
                self.began, self.ended = None, time.monotonic()
                _log.info(f"the study storage {self.url} answers again")

    def unanswered(self) -> None:
        """A call unanswered for STALL_S: its server waits out an outage of its own (msexp's
        proxy, while the PostgreSQL behind it restarts), said once as this process's."""
        with self.lock:
            if self.began is None:
                self.began = time.monotonic()
                _log.warning(f"waiting for the study storage {self.url}: no answer for "
                             f"{unanswered.STALL_S:g} s")

    def stalled(self) -> None:
        """A call was answered only after STALL_S: an outage behind the server just ended."""
        with self.lock:
            self.ended = time.monotonic()

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


def outage_within(storage: optuna.storages.BaseStorage, seconds: float) -> bool:
    """Whether this process found `storage` down within the last `seconds` (or now)."""
    patience = getattr(backend_of(storage), "msexp_patience", None)
    return patience is not None and patience.recovered_within(seconds)


def patient(cls: type[T]) -> type[T]:
    """`cls` (an Optuna storage) whose every storage call rides out an outage: a subclass,
    so Optuna still sees an `RDBStorage` (its cache, its heartbeat) or a gRPC proxy. The
    private calls Optuna's cache makes on an RDB storage are retried too."""
    calls = {name for base in (optuna.storages.BaseStorage, BaseHeartbeat)
             for name in vars(base) if not name.startswith("__") and hasattr(cls, name)
             and callable(getattr(cls, name))}
    calls |= {name for name in CACHED_BACKEND_CALLS if hasattr(cls, name)}
    wrapped = {name: _retried(getattr(cls, name), name) for name in sorted(calls)}
    if hasattr(cls, PREPARE_NEW_TRIAL):
        wrapped[PREPARE_NEW_TRIAL] = _prepared_once(getattr(cls, PREPARE_NEW_TRIAL))
    return type(f"Patient{cls.__name__}", (cls,), wrapped)  # type: ignore[return-value]


def _retried(method: Callable[..., Any], name: str) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        patience = getattr(self, "msexp_patience", None)
        if patience is None:
            return method(self, *args, **kwargs)
        since = datetime.now()  # Optuna stamps a trial's start with this clock too
        tried: list[bool] = []

        def once() -> Any:
            if tried:  # the first try's write may have landed, only its answer lost
                landed = _landed(self, name, args, kwargs, since)
                if landed is not None:
                    return landed
            tried.append(True)
            if name in _CREATES:
                _local.prepared = False  # see `_prepared_once`
            with unanswered.CALLS.asking(patience):
                return method(self, *args, **kwargs)

        asked = time.monotonic()
        try:
            return patience.call(once, lambda: reconnect(self) if isinstance(
                self, optuna.storages.GrpcStorageProxy) else None)
        finally:
            if time.monotonic() - asked > unanswered.STALL_S:
                patience.stalled()

    return call


def _prepared_once(method: Callable[..., Any]) -> Callable[..., Any]:
    """`method` (`_get_prepared_new_trial`) once per try of a patient create."""
    @functools.wraps(method)
    def prepare(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "msexp_patience", None) is not None:
            if getattr(_local, "prepared", False):
                raise AnswerLost("a trial's creation was cut off before its answer")
            _local.prepared = True
        return method(self, *args, **kwargs)

    return prepare


def _landed(storage: Any, name: str, args: tuple, kwargs: dict[str, Any], since: datetime
            ) -> Any:
    """What a write that was cut off answers if it landed before the cut, else None: a
    retried write is not applied twice (a trial created twice, a claim or a tell refused as
    if another process had made it). Writes not named here are idempotent."""
    if name in _CREATES:
        made = _created(storage, _arg(args, kwargs, 0, "study_id"),
                        _arg(args, kwargs, 1, "template_trial"), since)
        return made if made is None or name == "_create_new_trial" else trial_id(made)
    if name == "set_trial_state_values":
        state, values = _arg(args, kwargs, 1, "state"), _arg(args, kwargs, 2, "values")
        frozen = storage.get_trial(_arg(args, kwargs, 0, "trial_id"))
        told = values is None or list(frozen.values or []) == list(values)
        return True if told and _in_state(frozen, state, since) else None
    return None


def _arg(args: tuple, kwargs: dict[str, Any], index: int, keyword: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(keyword)


def _created(storage: Any, study: int, template: FrozenTrial | None, since: datetime
             ) -> FrozenTrial | None:
    """The trial a cut-off create made: one queued from `template` (msexp queues each
    trial with a mark of its own, its grid point or the trial it reruns, so an equal one is
    this call's), or, without a template (a sampler's new trial), one started since the
    call with no claim marked on it yet (the caller holds the study lock)."""
    state = template.state if template is not None else TrialState.RUNNING
    for frozen in storage.get_all_trials(study, deepcopy=False, states=(state,)):
        if template is not None and (frozen.user_attrs, frozen.system_attrs, frozen.params) \
                == (template.user_attrs, template.system_attrs, template.params):
            return frozen
        if template is None and not frozen.user_attrs and frozen.datetime_start is not None \
                and frozen.datetime_start >= since:
            return frozen
    return None


# claims.py's heartbeat reader; until given, claimed since: no cut-off claim counts as landed
_last_beat: list[Callable[[FrozenTrial], float | None]] = [lambda frozen: float("inf")]


def read_beats_with(last_beat: Callable[[FrozenTrial], float | None]) -> None:
    """How `_in_state` reads a trial's last heartbeat (the claims module's reader)."""
    _last_beat[0] = last_beat


def _in_state(frozen: FrozenTrial, state: TrialState, since: datetime) -> bool:
    """Whether the trial is where a cut-off `set_trial_state_values(state)` put it: a
    finished state (told), WAITING (put back), or RUNNING since the call and not claimed
    since (no heartbeat since: taken by this call; the claim holds the study lock)."""
    if state is TrialState.RUNNING:
        beat = _last_beat[0](frozen)
        return frozen.state is state and frozen.datetime_start is not None and \
            frozen.datetime_start >= since and (beat is None or beat < since.timestamp())
    return frozen.state is state
