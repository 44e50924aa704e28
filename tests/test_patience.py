"""A storage outage ridden out (msexp/search/patience.py), in-process on a SQLite RDB
storage whose connection is cut on cue: a write that landed before its answer was lost is
not applied twice, an outage is said once and its end too, and one past the patience stops
in one line with its cause (issue 53: branches that tests/fault/test_storage_restarts.py
reaches only by restarting a real PostgreSQL, where the cut's moment is left to chance)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
import sqlalchemy
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from msexp.errors import MsexpError
from msexp.os_tools.waiting import wait_until
from msexp.search import outages, unanswered
from msexp.search import patience as patience_module
from msexp.search.patience import Patience, patient

CUT = "server closed the connection unexpectedly"


class _Cut(optuna.storages.RDBStorage):
    """An RDB storage whose next `cut` writes land, then lose their answer (the connection
    dies between the commit and the reply)."""

    cut: frozenset[str] = frozenset()
    down = False
    stall_s = 0.0

    def _lost(self, name: str) -> None:
        if name in self.cut:
            self.cut = self.cut - {name}
            raise sqlalchemy.exc.OperationalError("COMMIT", {}, Exception(f"{CUT}\n"))

    def create_new_trial(self, study_id, template_trial=None):  # type: ignore[no-untyped-def]
        made = super().create_new_trial(study_id, template_trial)
        self._lost("create_new_trial")
        return made

    def set_trial_state_values(self, trial_id, state, values=None):  # type: ignore[no-untyped-def]
        done = super().set_trial_state_values(trial_id, state, values)
        self._lost("set_trial_state_values")
        return done

    def get_all_trials(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(self.stall_s)  # the server waits out an outage of its own first
        if self.down:  # the server is gone: every read fails
            raise sqlalchemy.exc.OperationalError("SELECT", {}, Exception(f"{CUT}\n"))
        return super().get_all_trials(*args, **kwargs)


_PatientCut = patient(_Cut)


@pytest.fixture
def storage(tmp_path: Path) -> optuna.storages.RDBStorage:
    opened = _PatientCut(f"sqlite:///{tmp_path / 'study.db'}")
    opened.msexp_patience = Patience(opened.url)
    return opened


@pytest.fixture
def said(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    """What msexp's logger said so far."""
    caplog.set_level(logging.INFO, logger="msexp")
    return lambda: [r.getMessage() for r in caplog.records if r.name == "msexp"]


def test_a_queued_trial_whose_creation_lost_its_answer_is_made_once(
        storage: optuna.storages.RDBStorage, said: Callable[[], list[str]]) -> None:
    study = optuna.create_study(storage=storage, study_name="s")
    other = optuna.trial.create_trial(state=TrialState.WAITING, params={"lr": 0.2},
                                      distributions={"lr": FloatDistribution(0, 1)},
                                      user_attrs={"grid": 1})
    storage.create_new_trial(study._study_id, other)  # an equal-looking trial of another mark
    mine = optuna.trial.create_trial(state=TrialState.WAITING, params={"lr": 0.2},
                                     distributions={"lr": FloatDistribution(0, 1)},
                                     user_attrs={"grid": 2})
    storage.cut = frozenset({"create_new_trial"})
    made = storage.create_new_trial(study._study_id, mine)
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == 2, "the retry found the trial the cut-off call made"
    assert made == trials[1]._trial_id and trials[1].user_attrs == {"grid": 2}
    assert said() == [f"waiting for the study storage {storage.url}: {CUT} (retrying for up to "
                            "90 s)", f"the study storage {storage.url} answers again"]


def test_a_samplers_new_trial_whose_creation_lost_its_answer_is_made_once(
        storage: optuna.storages.RDBStorage) -> None:
    study = optuna.create_study(storage=storage, study_name="s")
    claimed = storage.create_new_trial(study._study_id)
    storage.set_trial_user_attr(claimed, "owner", "another worker")  # its claim is marked
    storage.cut = frozenset({"create_new_trial"})
    made = storage.create_new_trial(study._study_id)
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    assert [t._trial_id for t in running] == [claimed, made], "one new trial, not two"


def test_a_tell_whose_answer_was_lost_is_not_refused_as_another_processs(
        storage: optuna.storages.RDBStorage) -> None:
    """Told again, Optuna would refuse: the trial is finished already."""
    study = optuna.create_study(storage=storage, study_name="s")
    trial = storage.create_new_trial(study._study_id)
    storage.cut = frozenset({"set_trial_state_values"})
    assert storage.set_trial_state_values(trial, TrialState.COMPLETE, [0.75]) is True
    (told,) = study.get_trials(deepcopy=False)
    assert (told.state, told.values) == (TrialState.COMPLETE, [0.75])


def test_an_outage_past_the_patience_stops_in_one_line_with_its_cause(
        storage: optuna.storages.RDBStorage, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MSEXP_STORAGE_PATIENCE_S", "1")
    monkeypatch.setattr(patience_module, "_BACKOFF_S", (0.1,))
    study = optuna.create_study(storage=storage, study_name="s")
    storage.down = True
    with pytest.raises(MsexpError) as stopped:
        storage.get_all_trials(study._study_id)
    assert str(stopped.value) == (f"the study storage {storage.url} did not answer for 1 s "
                                  f"({CUT})")


def test_a_grpc_proxy_that_cannot_be_reached_is_an_outage_named_by_its_details() -> None:
    """The gRPC proxy's UNAVAILABLE, however deep in the causes, is an outage in one line;
    another status is an error. Mutation (issue 53): `patience._rpc_unavailable` 1 (no
    gRPC error seen: a proxy's outage failed at once)."""
    import grpc

    class CallError(grpc.RpcError):
        def __init__(self, status: grpc.StatusCode, details: str) -> None:
            self.status, self.text = status, details

        def code(self) -> grpc.StatusCode:
            return self.status

        def details(self) -> str:
            return self.text

    down = CallError(grpc.StatusCode.UNAVAILABLE,
                     "failed to connect to all addresses")
    try:
        raise RuntimeError("the storage call failed") from down
    except RuntimeError as wrapped:
        assert outages.unreachable(wrapped) == "gRPC failed to connect to all addresses"
    refused = CallError(grpc.StatusCode.INVALID_ARGUMENT, "no such study")
    assert outages.unreachable(refused) is None


class _CutInside(optuna.storages.RDBStorage):
    """An RDB storage whose next new trial's commit lands, then loses its answer inside
    Optuna's own retried creation (which would make the trial again)."""

    cut = False

    def _get_prepared_new_trial(self, study_id, template_trial, session):  # type: ignore[no-untyped-def]
        made = super()._get_prepared_new_trial(study_id, template_trial, session)
        if self.cut:
            self.cut = False
            session.commit()
            raise sqlalchemy.exc.OperationalError("COMMIT", {}, Exception(f"{CUT}\n"))
        return made


def test_a_trial_whose_commit_lost_its_answer_inside_optunas_retry_is_made_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Optuna retries a creation whose commit failed; msexp stops that retry (the first
    try may have landed) and finds the trial the cut-off commit made. Mutation (issue 53):
    `patience.patient` 33 (Optuna's retry not stopped: two trials)."""
    from optuna.storages._rdb import storage as rdb

    monkeypatch.setattr(rdb.random, "random", lambda: 0.0)  # Optuna's wait before its retry
    storage = patient(_CutInside)(f"sqlite:///{tmp_path / 'study.db'}")
    storage.msexp_patience = Patience(storage.url)
    study = optuna.create_study(storage=storage, study_name="s")
    storage.cut = True
    made = storage.create_new_trial(study._study_id)
    assert [t._trial_id for t in study.get_trials(deepcopy=False)] == [made], "one trial"


def test_a_call_its_server_leaves_unanswered_says_once_what_it_waits_for(
        storage: optuna.storages.RDBStorage, said: Callable[[], list[str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """msexp's gRPC proxy holds its clients' calls while the PostgreSQL behind it restarts:
    a call unanswered for STALL_S says, once for all the calls waiting, that the sweep
    waits for its storage. A call the proxy answers meanwhile (from its cache) does not
    end that outage; the next call answered once none waits does."""
    monkeypatch.setattr(unanswered, "STALL_S", 0.4)
    study = optuna.create_study(storage=storage, study_name="s")
    storage.stall_s = 3.0

    def stalled_call(after_s: float) -> threading.Thread:
        caller = threading.Timer(after_s, storage.get_all_trials, args=(study._study_id,))
        caller.start()
        return caller

    callers = [stalled_call(0.0), stalled_call(0.0)]
    waiting = f"waiting for the study storage {storage.url}: no answer for 0.4 s"
    assert wait_until(lambda: said() == [waiting], 20, 0.05), said()
    assert storage.get_study_id_from_name("s") == study._study_id  # answered meanwhile
    assert said() == [waiting]  # the outage goes on: two calls wait
    callers.append(stalled_call(0.0))  # asked after the outage began
    for caller in callers:
        caller.join()
    assert said() == [waiting, f"the study storage {storage.url} answers again"]
    assert storage.msexp_patience.recovered_within(0.5)  # stale heartbeats say nothing yet
    storage.stall_s = 0.0
    storage.get_all_trials(study._study_id)
    assert len(said()) == 2


class _Refused(optuna.storages.RDBStorage):
    """An RDB storage whose connection the driver finds closed (SQLAlchemy's
    InterfaceError, as psycopg raises on a connection the server dropped)."""

    def get_all_trials(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise sqlalchemy.exc.InterfaceError("SELECT", {}, Exception("connection already closed"))


def test_a_closed_connection_is_an_outage_ridden_out_then_stopped_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, said: Callable[[], list[str]]) -> None:
    """A public storage call that finds its connection closed waits for the storage, says
    so, and past the patience stops in one line with the cause.
    (issue 53 fresh: patience._disconnected 15, patient 17)"""
    monkeypatch.setenv("MSEXP_STORAGE_PATIENCE_S", "0.3")
    monkeypatch.setattr(patience_module, "_BACKOFF_S", (0.1,))
    storage = patient(_Refused)(f"sqlite:///{tmp_path / 'study.db'}")
    storage.msexp_patience = Patience(storage.url)
    study = optuna.create_study(storage=storage, study_name="s")
    with pytest.raises(MsexpError) as stopped:
        storage.get_all_trials(study._study_id)
    assert str(stopped.value) == (f"the study storage {storage.url} did not answer for 0 s "
                                  "(connection already closed)")
    assert said() == [f"waiting for the study storage {storage.url}: connection already "
                      "closed (retrying for up to 0 s)"]


def test_a_creation_cut_off_inside_optunas_retry_says_why_it_waits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, said: Callable[[], list[str]]) -> None:
    """The line said while msexp looks for the trial a cut-off commit made names that cut.
    (issue 53 fresh: patience.unreachable 11)"""
    from optuna.storages._rdb import storage as rdb

    monkeypatch.setattr(rdb.random, "random", lambda: 0.0)
    storage = patient(_CutInside)(f"sqlite:///{tmp_path / 'study.db'}")
    storage.msexp_patience = Patience(storage.url)
    study = optuna.create_study(storage=storage, study_name="s")
    storage.cut = True
    storage.create_new_trial(study._study_id)
    assert said()[0].startswith(f"waiting for the study storage {storage.url}: a trial's "
                                "creation was cut off before its answer"), said()


def test_a_storage_and_its_study_lock_share_one_patience(tmp_path: Path) -> None:
    """One `Patience` per storage URL in a process: an outage the storage saw is the lock's
    too. (issue 53 fresh: patience.patience_of 3)"""
    from msexp.search.patience import patience_of

    url = f"sqlite:///{tmp_path / 'study.db'}"
    patience = patience_of(url)
    assert patience is patience_of(url) and patience is not patience_of(url + "-other")
    assert patience.call(lambda: "answered") == "answered"
