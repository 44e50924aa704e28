"""Optuna names that are not public, each kept for a reason its public API cannot serve.

`tests/test_optuna_private.py` fails the day Optuna renames or changes one of them.
"""

from __future__ import annotations

import optuna
from optuna.storages._grpc.server import (  # noqa: F401  (re-exported)
    make_server as make_grpc_server,  # the proxy's server, not started: msexp adds its lock
)
from optuna.storages._heartbeat import (  # noqa: F401  (re-exported)
    BaseHeartbeat,  # the heartbeat contract: not exported under a public name
)
from optuna.storages.journal._file import (  # noqa: F401  (re-exported)
    BaseJournalFileLock,  # the journal's lock interface: msexp's lock dies with its holder
)
from optuna.trial import TrialState

# What Optuna's cache of an RDB storage (`_CachedStorage`, which Optuna puts around every
# `RDBStorage` a study is given) calls on it by private names, besides the storage and
# heartbeat contracts: `search.patience` rides out an outage in these calls too
CACHED_BACKEND_CALLS = ("_create_new_trial", "_set_trial_param", "_get_best_trial_id",
                        "_get_trials", "_get_stale_trial_ids")
# The step of `RDBStorage._create_new_trial` that its own retries (five, for deadlocks)
# repeat: after a commit whose answer was lost, a repeat creates the trial twice
PREPARE_NEW_TRIAL = "_get_prepared_new_trial"


def pop_waiting(study: optuna.Study) -> optuna.Trial | None:
    """Take a WAITING trial, or None when none waits: the first whose WAITING -> RUNNING
    write this process won. The storage refuses that write for a trial another process
    took or finished since the listing, so no two processes take one trial, with or
    without the study lock.

    `Study.ask` pops one the same way but samples a new trial when none waits; a grid
    study must run only the points it queued.
    """
    storage = study._storage
    for frozen in storage.get_all_trials(study._study_id, deepcopy=False,
                                         states=(TrialState.WAITING,)):
        try:
            won = storage.set_trial_state_values(frozen._trial_id, TrialState.RUNNING)
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # finished by another process since the listing
        if won:
            return optuna.Trial(study, frozen._trial_id)
    return None


def set_waiting(study: optuna.Study, trial_id: int) -> bool:
    """RUNNING back to WAITING, so the trial runs again under its own number and folder.

    Optuna has no public way back: its retry callbacks queue a copy under a new number.
    """
    return study._storage.set_trial_state_values(trial_id, TrialState.WAITING)


def storage_of(study: optuna.Study) -> optuna.storages.BaseStorage:
    """The study's storage, to write a trial by id when no `Trial` object is at hand (a
    stale trial of another process)."""
    return study._storage


def trial_id(trial: optuna.Trial | optuna.trial.FrozenTrial) -> int:
    """A trial's id in its storage: storage methods take ids, trials show only numbers."""
    return trial._trial_id


def study_id(study: optuna.Study) -> int:
    """A study's id in its storage, which `BaseHeartbeat._get_stale_trial_ids` takes."""
    return study._study_id


def reconnect(proxy: optuna.storages.GrpcStorageProxy) -> None:
    """A new channel for Optuna's gRPC client, tried at once: a channel that lost its server
    waits out gRPC's reconnect backoff (up to 120 s) before it tries again. The old one is
    left to calls still on it (they fail, and are retried on the new one)."""
    proxy._setup()


def backend_of(storage: optuna.storages.BaseStorage) -> optuna.storages.BaseStorage:
    """The storage behind Optuna's cache of an RDB storage (the storage itself otherwise):
    where msexp keeps what it knows of the storage's outages."""
    return getattr(storage, "_backend", storage)
