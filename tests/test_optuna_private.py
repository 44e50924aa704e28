"""The private Optuna names msexp uses (`search/optuna_private.py`) still mean what they
did: this fails the day Optuna renames or changes one of them."""

from __future__ import annotations

import inspect
import re

import optuna
from optuna.storages import _cached_storage
from optuna.trial import TrialState

from msexp.search import optuna_private
from msexp.search.patience import patient


def test_the_heartbeat_contract_has_the_methods_msexp_implements() -> None:
    assert optuna_private.BaseHeartbeat.__abstractmethods__ == {
        "record_heartbeat", "_get_stale_trial_ids", "get_heartbeat_interval",
        "get_heartbeat_stale_trial_callback"}


def test_the_journal_lock_interface_is_acquire_and_release() -> None:
    assert optuna_private.BaseJournalFileLock.__abstractmethods__ == {"acquire", "release"}


def test_popping_waiting_trials_and_putting_one_back_work_on_a_real_study() -> None:
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    assert optuna_private.pop_waiting(study) is None, "nothing queued: nothing sampled"
    study.enqueue_trial({"x": 1.0})
    study.enqueue_trial({"x": 2.0})
    first = optuna_private.pop_waiting(study)
    assert isinstance(first, optuna.Trial) and first.number == 0
    assert first.suggest_float("x", 0, 3) == 1.0, "the popped trial keeps its queued params"
    frozen = study.get_trials()[0]
    assert optuna_private.trial_id(first) == optuna_private.trial_id(frozen)
    assert optuna_private.set_waiting(study, optuna_private.trial_id(first))
    assert [t.state for t in study.get_trials()] == [TrialState.WAITING] * 2
    assert optuna_private.storage_of(study).get_trial(optuna_private.trial_id(frozen)).number == 0
    assert "trial_id" in inspect.signature(optuna.Trial.__init__).parameters
    storage = optuna_private.storage_of(study)
    assert storage.get_study_id_from_name(study.study_name) == optuna_private.study_id(study)


def test_the_private_calls_of_optunas_cache_are_the_ones_msexp_rides_out() -> None:
    """# mutation: a private call of `_CachedStorage` left out of CACHED_BACKEND_CALLS (the
    reads of `get_all_trials` went through `_get_trials` unretried: a PostgreSQL restart
    stopped the sweep with "invalid data in the commit")"""
    source = inspect.getsource(_cached_storage)
    called = set(re.findall(r"self\._backend\.(_[a-z]\w*)", source))
    assert called == set(optuna_private.CACHED_BACKEND_CALLS)
    rdb = patient(optuna.storages.RDBStorage)
    for name in called:
        assert name in vars(rdb), f"{name} is retried through an outage"
    create = inspect.getsource(optuna.storages.RDBStorage._create_new_trial)
    assert f"self.{optuna_private.PREPARE_NEW_TRIAL}(" in create.split("for n_retries")[1], \
        "the step Optuna's own retries of a creation repeat"
    cached = optuna.storages.get_storage(optuna.storages.RDBStorage("sqlite://"))
    assert optuna_private.backend_of(cached) is not cached
    memory = optuna.storages.InMemoryStorage()
    assert optuna_private.backend_of(memory) is memory
