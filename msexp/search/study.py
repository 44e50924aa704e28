"""The sweep's Optuna study: sampler, pruner, grid queue, versions (`--restart`). A study
missing from its storage that ran before (its trial folders are there) is refused, not
run again."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid

import optuna

from msexp.errors import Refused, Suggestion
from msexp.keys import StudyKey, TrialKey
from msexp.os_tools.identity import owner
from msexp.os_tools.waiting import wait_until
from msexp.paths import TRIALS_DIR
from msexp.search.lock import study_lock
from msexp.search.storage import open_storage, storage_errors, storage_label
from msexp.search.versions import newest, newest_name, next_version, ran_before, study_attrs
from msexp.secrets.redaction import redact
from msexp.spec import Method, SweepSpec

optuna.logging.set_verbosity(optuna.logging.WARNING)
_log = logging.getLogger("msexp")

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


def open_study(spec: SweepSpec, storage_url: str | None, study_name: str | None = None,
               restart: bool = False) -> tuple[optuna.Study, bool]:
    """Create the sweep's study, or load it to resume or join; returns (study, created).

    Without `study_name`, the study is the newest version of the sweep's `name` (see
    `search.versions`). With `restart`, a newest version created from another sweep file
    is superseded by a new version, which this process creates (or joins, when another
    process restarted it first).

    A new grid study enqueues its points; processes take them atomically, so no grid
    point runs twice, whatever the number of processes and machines.

    Raises:
        MsexpError: the storage cannot be opened or written (one line naming it).
        Refused: it holds a study of that name from another sweep (without `restart`).
    """
    with storage_errors(storage_url):
        if restart:
            restarted = _restart(spec, storage_url, study_name or spec.name)
            if restarted is not None:
                return restarted, True
        name = study_name or newest_name(open_storage(storage_url), spec.name)
        return _open_study(spec, storage_url, name, study_name)


def _restart(spec: SweepSpec, storage_url: str | None, base: str) -> optuna.Study | None:
    """Under the study lock, so that processes restarting at once make one new version:
    the new version of `base`, or None when its newest version is this sweep's (or none)."""
    storage = open_storage(storage_url)
    with study_lock(storage_url):
        attrs = study_attrs(storage)
        current = newest(attrs, base)
        lost = current not in attrs and ran_before(current)
        if not lost and attrs.get(current, {}).get(StudyKey.FINGERPRINT) in (
                None, fingerprint(spec)):
            return None
        name, number = next_version(attrs, base, current)
        study = optuna.create_study(directions=[o.direction for o in spec.objectives],
                                    sampler=make_sampler(spec), pruner=make_pruner(spec),
                                    study_name=name, storage=storage)
        if not lost:
            optuna.load_study(study_name=current, storage=storage).set_user_attr(
                StudyKey.SUPERSEDED_BY, name)
        study.set_user_attr(StudyKey.VERSION, number)
        study.set_user_attr(StudyKey.SUPERSEDES, current)
        if attrs.get(current, {}).get(StudyKey.PARENT_RUN):
            study.set_user_attr(StudyKey.SUPERSEDES_RUN, attrs[current][StudyKey.PARENT_RUN])
        _set_up(study, spec)
    why = (f"study {current!r} is not in {storage_label(storage_url)} but ran before; "
           f"started its next version {name!r} beside its trials" if lost else
           f"the sweep file changed since study {current!r} was created; started its next "
           f"version {name!r} ({current!r} is marked superseded)")
    _log.warning(f"{spec.path}: {why}")
    return study


def _open_study(spec: SweepSpec, storage_url: str | None, name: str,
                given: str | None = None) -> tuple[optuna.Study, bool]:
    """Open study `name`; `given`: the --study the user gave, for the hint."""
    storage = open_storage(storage_url)
    if name not in study_attrs(storage) and ran_before(name):
        raise Refused(f"{spec.path}: study {name!r} is not in {storage_label(storage_url)}, "
                         f"but {TRIALS_DIR / name} holds its trials from an earlier run (was "
                         f"its storage emptied or changed?); to resume, pass the storage it "
                         f"used; to start anew beside them: ",
                         _restart_command(spec, given, storage_url))
    directions = [o.direction for o in spec.objectives]
    pruner = make_pruner(spec)
    created = True
    try:
        study = optuna.create_study(study_name=name, storage=storage, pruner=pruner,
                                    directions=directions, sampler=make_sampler(spec))
    except optuna.exceptions.DuplicatedStudyError:
        created = False
        study = optuna.load_study(study_name=name, storage=storage, pruner=pruner,
                                  sampler=make_sampler(spec, owner()))
        if study.user_attrs.get(StudyKey.FINGERPRINT) not in (None, fingerprint(spec)):
            raise Refused(f"{spec.path}: study {name!r} in {storage_label(storage_url)} was "
                             f"created from a different sweep file; to start its next "
                             f"version: ", _restart_command(spec, given, storage_url),
                             " (or pass --study NEW_NAME)") from None
        if [d.name.lower() for d in study.directions] != directions:
            raise Refused(
                f"{spec.path}: study {name!r} has other objective directions") from None
    if not created:
        _wait_for_creator(study)
    with study_lock(storage_url):
        if StudyKey.FINGERPRINT not in study.user_attrs:
            _set_up(study, spec)
    return study, created


def _restart_command(spec: SweepSpec, given: str | None, storage_url: str | None) -> Suggestion:
    """`msexp sweep FILE --restart`, on the study (`given`: the --study the user gave) and
    storage of the refused run."""
    return Suggestion(("sweep", str(spec.path), "--restart"), study=given, storage=storage_url)


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


def _wait_for_creator(study: optuna.Study) -> None:
    """Give the process that just created the study time to enqueue its grid."""
    wait_until(lambda: StudyKey.FINGERPRINT in study.user_attrs, CREATOR_WAIT_S, 0.2)
