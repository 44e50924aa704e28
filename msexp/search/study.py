"""The sweep's Optuna study: sampler, pruner, grid queue, retries and stale trials."""

from __future__ import annotations

import hashlib
import json
import time
import uuid

import optuna
from optuna.trial import TrialState

from msexp.errors import MsexpError
from msexp.execution.process import owner
from msexp.keys import StudyKey, TrialKey
from msexp.search.storage import open_storage, storage_errors, storage_label, study_lock
from msexp.spec import Method, SweepSpec
from msexp.urls import redact

optuna.logging.set_verbosity(optuna.logging.WARNING)

CREATOR_WAIT_S = 10.0


def make_sampler(spec: SweepSpec, joiner: str | None = None) -> optuna.samplers.BaseSampler:
    """The sampler for the sweep's method; grid points are enqueued, so grid samples nothing.

    `joiner` names a process other than the study's creator (see `sampler_seed`).
    """
    seed = sampler_seed(spec.space.resolve({}).get("seed", 0), joiner)
    samplers = {
        Method.grid: lambda: optuna.samplers.RandomSampler(seed=seed),
        Method.random: lambda: optuna.samplers.RandomSampler(seed=seed),
        Method.tpe: lambda: optuna.samplers.TPESampler(seed=seed, multivariate=True,
                                                       group=True),
        Method.cmaes: lambda: optuna.samplers.CmaEsSampler(seed=seed,
                                                           warn_independent_sampling=False),
        Method.nsga2: lambda: optuna.samplers.NSGAIISampler(seed=seed),
    }
    return samplers[spec.method]()


def sampler_seed(seed: int, joiner: str | None) -> int:
    """The sampler seed of one process: the study's `seed` for the process that creates
    the study, a hash of `seed` and `joiner` (host:pid) for every process that joins or
    resumes it, so no two processes draw the same points. The threads of one process
    share its sampler, so they never draw the same points either."""
    if joiner is None:
        return seed
    digest = hashlib.sha256(f"{seed}:{joiner}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def make_pruner(spec: SweepSpec) -> optuna.pruners.BasePruner:
    """The pruner the sweep file asks for, acting on per-epoch values."""
    p = spec.pruner
    if p.type == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=p.startup_trials,
                                           n_warmup_steps=p.warmup_epochs)
    if p.type == "percentile":
        return optuna.pruners.PercentilePruner(p.percentile, n_startup_trials=p.startup_trials,
                                               n_warmup_steps=p.warmup_epochs)
    if p.type == "hyperband":
        epochs = spec.space.resolve({})["epochs"]
        return optuna.pruners.HyperbandPruner(min_resource=max(1, p.warmup_epochs),
                                              max_resource=epochs,
                                              reduction_factor=p.reduction_factor)
    return optuna.pruners.NopPruner()


def fingerprint(spec: SweepSpec) -> str:
    """Identifies what a study samples, so a changed sweep file is not resumed by mistake."""
    content = {"experiment": spec.experiment.ref, "method": spec.method.value,
               "objective": [o.model_dump() for o in spec.objectives],
               "fixed": spec.fixed, "params": spec.params}
    text = json.dumps(content, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def open_study(spec: SweepSpec, storage_url: str | None, study_name: str | None = None
               ) -> tuple[optuna.Study, bool]:
    """Create the sweep's study, or load it to resume or join; returns (study, created).

    A new grid study enqueues its points; processes take them atomically, so no grid
    point runs twice, whatever the number of processes and machines.

    Raises:
        MsexpError: the storage cannot be opened or written (one line naming it), or
            holds a study of that name from another sweep.
    """
    with storage_errors(storage_url):
        return _open_study(spec, storage_url, study_name or spec.name)


def _open_study(spec: SweepSpec, storage_url: str | None, name: str
                ) -> tuple[optuna.Study, bool]:
    storage = open_storage(storage_url)
    directions = [o.direction for o in spec.objectives]
    kwargs = dict(study_name=name, storage=storage, pruner=make_pruner(spec))
    created = True
    try:
        study = optuna.create_study(directions=directions, sampler=make_sampler(spec),
                                    **kwargs)
    except optuna.exceptions.DuplicatedStudyError:
        created = False
        study = optuna.load_study(sampler=make_sampler(spec, owner()), **kwargs)
        if study.user_attrs.get(StudyKey.FINGERPRINT) not in (None, fingerprint(spec)):
            raise MsexpError(f"{spec.path}: study {name!r} in {storage_label(storage_url)} was "
                             "created from a different sweep; pass --study NEW_NAME") from None
        if [d.name.lower() for d in study.directions] != directions:
            raise MsexpError(
                f"{spec.path}: study {name!r} has other objective directions") from None
    if not created:
        _wait_for_creator(study)
    with study_lock(storage_url):
        if StudyKey.FINGERPRINT not in study.user_attrs:
            _set_up(study, spec)
    return study, created


def _set_up(study: optuna.Study, spec: SweepSpec) -> None:
    """Queue a new study's grid and write what it is; a set-up that a kill cut short is
    finished by the next process, without queueing a point twice."""
    if spec.method is Method.grid:
        _enqueue_grid(study, spec)
    study.set_user_attr(StudyKey.RETRIES, spec.budget.retries)
    study.set_user_attr(StudyKey.TOTAL, spec.n_trials())
    study.set_user_attr(StudyKey.OBJECTIVES, [o.metric for o in spec.objectives])
    study.set_user_attr(StudyKey.SWEEP, spec.name)
    study.set_user_attr(StudyKey.EXPERIMENT, redact(spec.experiment.ref))
    study.set_user_attr(StudyKey.UID, uuid.uuid4().hex)
    study.set_user_attr(StudyKey.FINGERPRINT, fingerprint(spec))  # last: marks it complete


def _enqueue_grid(study: optuna.Study, spec: SweepSpec) -> None:
    """Enqueue the grid's points (the first `n_trials`) not queued yet, in the order
    `Space.queue_order` gives (the order `plan` numbers)."""
    by_name = {p.name: p for p in spec.space.params}
    queued = {t.user_attrs.get(TrialKey.GRID_POINT) for t in study.get_trials(deepcopy=False)}
    for i, point in spec.space.queue_order(spec.n_trials()):
        if i not in queued:
            study.enqueue_trial({k: by_name[k].optuna_value(v) for k, v in point.items()},
                                user_attrs={TrialKey.GRID_POINT: i})


def retry_failed(study: optuna.Study, storage_url: str | None = None) -> int:
    """Queue a fresh copy of every FAILED or TIMEOUT trial not retried yet (same params;
    the copy starts from scratch); return how many. Under the study lock, so processes
    that do it at once retry each trial once."""
    with study_lock(storage_url):
        return _retry_failed(study)


def _retry_failed(study: optuna.Study) -> int:
    trials = study.get_trials(deepcopy=False)
    retried = {t.user_attrs.get(TrialKey.RETRY_OF) for t in trials}
    count = 0
    for frozen in trials:
        if frozen.state is not TrialState.FAIL or frozen.number in retried:
            continue
        attrs = {k: v for k, v in frozen.user_attrs.items() if k == TrialKey.GRID_POINT}
        study.enqueue_trial(frozen.params or frozen.system_attrs.get("fixed_params", {}),
                            user_attrs={**attrs, TrialKey.RETRY_OF: frozen.number})
        count += 1
    return count


def failed_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """FAILED or TIMEOUT trials that no retry has replaced."""
    trials = study.get_trials(deepcopy=False)
    retried = {t.user_attrs.get(TrialKey.RETRY_OF) for t in trials}
    return [t for t in trials if t.state is TrialState.FAIL and t.number not in retried]




def _wait_for_creator(study: optuna.Study) -> None:
    """Give the process that just created the study time to enqueue its grid."""
    deadline = time.monotonic() + CREATOR_WAIT_S
    while time.monotonic() < deadline:
        if StudyKey.FINGERPRINT in study.user_attrs:
            return
        time.sleep(0.2)




def finished_count(study: optuna.Study) -> int:
    """Trials that ended, not counting attempts that were queued again."""
    trials = study.get_trials(deepcopy=False)
    retried = {t.user_attrs.get(TrialKey.RETRY_OF) for t in trials} - {None}
    return sum(t.state.is_finished() and t.number not in retried for t in trials)


def started_count(study: optuna.Study) -> int:
    """Trials taken from the budget: started ones, not counting queued retries."""
    trials = study.get_trials(deepcopy=False)
    return sum(t.state is not TrialState.WAITING and TrialKey.RETRY_OF not in t.user_attrs
               for t in trials)
