"""The ask/tell loop: one Optuna study drives every method, trials run in worker processes."""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import optuna
from optuna.trial import TrialState

from msexp.errors import MsexpError
from msexp.runner import Status, TrialProcess, TrialResult
from msexp.space import derived
from msexp.spec import Method, SweepSpec
from msexp.tracking import STORE_DIR, Tracker, redact

JOURNAL = STORE_DIR / "optuna.journal"
TRIALS_DIR = STORE_DIR / "trials"

_OPTUNA_STATE = {Status.COMPLETE: TrialState.COMPLETE, Status.PRUNED: TrialState.PRUNED,
                 Status.FAILED: TrialState.FAIL, Status.TIMEOUT: TrialState.FAIL}

optuna.logging.set_verbosity(optuna.logging.WARNING)


class Progress(Protocol):
    """What a sweep tells its user interface."""

    def start(self, total: int, done: int) -> None: ...

    def trial_done(self, number: int, result: TrialResult, best: str) -> None: ...


def open_storage(url: str | None) -> optuna.storages.BaseStorage:
    """The Optuna storage: a journal file by default, or any RDB URL (PostgreSQL, SQLite)."""
    if url is None or url.endswith(".journal"):
        from optuna.storages.journal import JournalFileBackend

        path = Path(url or JOURNAL)
        path.parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    return optuna.storages.RDBStorage(url)


def storage_label(url: str | None) -> str:
    """The storage as shown in MLflow and reports, with secrets redacted."""
    return redact(url) if url else str(JOURNAL)


def make_sampler(spec: SweepSpec) -> optuna.samplers.BaseSampler:
    """The sampler for the sweep's method; grid points are enqueued, so grid samples nothing."""
    seed = spec.space.resolve({}).get("seed", 0)
    samplers = {
        Method.grid: lambda: optuna.samplers.RandomSampler(seed=seed),
        Method.random: lambda: optuna.samplers.RandomSampler(seed=seed),
        Method.tpe: lambda: optuna.samplers.TPESampler(seed=seed, multivariate=True,
                                                       group=True),
        Method.cmaes: lambda: optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False),
        Method.nsga2: lambda: optuna.samplers.NSGAIISampler(seed=seed),
    }
    return samplers[spec.method]()


def make_pruner(spec: SweepSpec) -> optuna.pruners.BasePruner:
    """The pruner the sweep file asks for, acting on per-epoch values."""
    p = spec.pruner
    if p.type == "median":
        return optuna.pruners.MedianPruner(n_warmup_steps=p.warmup_epochs)
    if p.type == "percentile":
        return optuna.pruners.PercentilePruner(p.percentile, n_warmup_steps=p.warmup_epochs)
    if p.type == "hyperband":
        epochs = spec.space.resolve({})["epochs"]
        return optuna.pruners.HyperbandPruner(min_resource=max(1, p.warmup_epochs),
                                              max_resource=epochs,
                                              reduction_factor=p.reduction_factor)
    return optuna.pruners.NopPruner()


def fingerprint(spec: SweepSpec) -> str:
    """Identifies what a study samples, so a changed sweep file is not resumed by mistake."""
    content = {"experiment": spec.file.experiment, "method": spec.method.value,
               "objective": [o.model_dump() for o in spec.objectives],
               "fixed": spec.file.fixed, "params": spec.file.params}
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:16]


def open_study(spec: SweepSpec, storage_url: str | None, study_name: str | None = None
               ) -> optuna.Study:
    """Create the sweep's study, or load it to resume; a new grid study enqueues its points."""
    name = study_name or spec.name
    storage = open_storage(storage_url)
    directions = [o.direction for o in spec.objectives]
    kwargs = dict(study_name=name, storage=storage, sampler=make_sampler(spec),
                  pruner=make_pruner(spec))
    try:
        study = optuna.create_study(directions=directions, **kwargs)
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(**kwargs)
        if study.user_attrs.get("msexp.fingerprint") not in (None, fingerprint(spec)):
            raise MsexpError(f"{spec.path}: study {name!r} in {storage_label(storage_url)} was "
                             "created from a different sweep; pass --study NEW_NAME") from None
        if [d.name.lower() for d in study.directions] != directions:
            raise MsexpError(f"{spec.path}: study {name!r} has other objective directions")
    if "msexp.fingerprint" not in study.user_attrs:
        if spec.method is Method.grid:
            points = spec.space.grid()[:spec.n_trials()]
            by_name = {p.name: p for p in spec.space.params}
            for i, point in enumerate(points):
                study.enqueue_trial({k: by_name[k].optuna_value(v) for k, v in point.items()},
                                    user_attrs={"grid_point": i})
        study.set_user_attr("msexp.sweep", spec.name)
        study.set_user_attr("msexp.experiment", spec.file.experiment)
        study.set_user_attr("msexp.fingerprint", fingerprint(spec))
    return study


def _claim_waiting(study: optuna.Study) -> optuna.Trial | None:
    """Atomically take a WAITING (enqueued) trial, as Study.ask does, without sampling anew."""
    storage = study._storage
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        if storage.set_trial_state_values(frozen._trial_id, TrialState.RUNNING):
            return optuna.Trial(study, frozen._trial_id)
    return None


def finished_count(study: optuna.Study) -> int:
    """Trials that ended, not counting attempts that were retried."""
    trials = study.get_trials(deepcopy=False)
    retried = {t.system_attrs.get("failed_trial") for t in trials} - {None}
    return sum(t.state.is_finished() and t.number not in retried for t in trials)


@dataclass
class SweepOutcome:
    """What a sweep leaves behind for the summary."""

    study: optuna.Study
    experiment_id: str
    parent_run_id: str
    tracker: Tracker
    interrupted: bool = False
    results: dict[int, TrialResult] = field(default_factory=dict)


class Sweep:
    """Runs a study's remaining trials with `workers` trial processes in parallel."""

    def __init__(self, spec: SweepSpec, tracker: Tracker, study: optuna.Study,
                 storage_url: str | None, workers: int, progress: Progress):
        self.spec, self.tracker, self.study, self.progress = spec, tracker, study, progress
        self.storage_url, self.workers = storage_url, workers
        self.total = spec.n_trials()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        threads = max(1, (os.cpu_count() or 1) // workers)
        self.processes = [TrialProcess(threads=threads, cwd=Path.cwd()) for _ in range(workers)]
        self.experiment_id = tracker.experiment_id(spec.name)
        self.parent_id = tracker.parent_run(
            self.experiment_id, study.study_name,
            {"msexp.sweep": spec.name, "msexp.method": spec.method.value,
             "msexp.experiment": spec.file.experiment,
             "msexp.storage": storage_label(storage_url)}, spec.path)
        self.outcome = SweepOutcome(study, self.experiment_id, self.parent_id, tracker)

    def run(self) -> SweepOutcome:
        """Run until the budget is spent; Ctrl-C stops cleanly and leaves the rest to resume."""
        self.progress.start(self.total, finished_count(self.study))
        threads = [threading.Thread(target=self._work, args=(p,), daemon=True)
                   for p in self.processes]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(timeout=0.2)
        except KeyboardInterrupt:
            self.outcome.interrupted = True
            self.stopping.set()
            for p in self.processes:
                p.kill()
            for t in threads:
                t.join(timeout=30)
        finally:
            for p in self.processes:
                p.close()
        best = self._best_metrics()
        self.tracker.finish_parent(self.parent_id, best,
                                   "KILLED" if self.outcome.interrupted else "FINISHED")
        return self.outcome

    def _next_trial(self) -> optuna.Trial | None:
        with self.lock:
            if self.stopping.is_set():
                return None
            trial = _claim_waiting(self.study)
            if trial or self.spec.method is Method.grid:
                return trial
            started = sum(t.state is not TrialState.WAITING
                          for t in self.study.get_trials(deepcopy=False))
            return self.study.ask() if started < self.total else None

    def _work(self, process: TrialProcess) -> None:
        while (trial := self._next_trial()) is not None:
            self._run_trial(trial, process)

    def _run_trial(self, trial: optuna.Trial, process: TrialProcess) -> None:
        spec = self.spec
        assigned = spec.space.suggest(trial)
        params = spec.space.resolve(assigned)
        folder = (TRIALS_DIR / self.study.study_name / f"trial-{trial.number:04d}").resolve()
        request = {"experiment": _experiment_ref(spec.file.experiment), "params": params,
                   "events": str(folder / "events.jsonl"), "log": str(folder / "trial.log"),
                   "target": _target(spec),
                   "data": spec.file.data.model_dump() if spec.file.data else None}
        started = time.time()
        result = process.run(request, spec.budget.trial_timeout, self._pruning_hook(trial))
        if self.stopping.is_set():
            with self.lock:  # interrupted, not finished: give it back for the next run
                self.study.tell(trial, state=TrialState.FAIL)
                self.study.enqueue_trial(trial.params, user_attrs=dict(trial.user_attrs))
            return
        logged = {**params, **derived(params), "experiment": spec.file.experiment}
        run_id = self.tracker.log_trial(self.experiment_id, self.parent_id, trial.number,
                                        logged, result, started)
        with self.lock:
            self._tell(trial, result, run_id)
            self.outcome.results[trial.number] = result
            self.progress.trial_done(trial.number, result, self._best_text())

    def _pruning_hook(self, trial: optuna.Trial):
        if self.spec.pruner.type == "none":
            return None
        metric = self.spec.objectives[0].metric

        def on_epoch(event: dict[str, Any]) -> bool:
            value = event["metrics"].get(metric)
            if value is None or not math.isfinite(value):
                return False
            with self.lock:
                trial.report(value, event["epoch"])
                return trial.should_prune()

        return on_epoch

    def _tell(self, trial: optuna.Trial, result: TrialResult, run_id: str) -> None:
        metrics = result.metrics or result.last_epoch_metrics()
        metrics = {**metrics, "wall_s": result.wall_s}
        trial.set_user_attr("status", result.status.value)
        trial.set_user_attr("metrics", {k: v for k, v in metrics.items() if math.isfinite(v)})
        trial.set_user_attr("mlflow_run_id", run_id)
        if result.error:
            trial.set_user_attr("error", result.error[:1000])
        values = None
        state = _OPTUNA_STATE[result.status]
        if result.status is Status.COMPLETE:
            values = [metrics.get(o.metric, math.nan) for o in self.spec.objectives]
            if not all(math.isfinite(v) for v in values):
                missing = [o.metric for o, v in zip(self.spec.objectives, values)
                           if not math.isfinite(v)]
                trial.set_user_attr("error", f"objective not available: {', '.join(missing)}")
                state, values = TrialState.FAIL, None
        self.study.tell(trial, values, state=state if values is None else None)

    def _best_text(self) -> str:
        if len(self.spec.objectives) > 1:
            return f"pareto {len(self.study.best_trials)}"
        try:
            best = self.study.best_trial
        except ValueError:
            return "-"
        return f"{self.spec.objectives[0].metric}={best.value:.4g} (#{best.number})"

    def _best_metrics(self) -> dict[str, float]:
        if len(self.spec.objectives) > 1:
            return {}
        try:
            return dict(self.study.best_trial.user_attrs.get("metrics", {}))
        except ValueError:
            return {}


def _experiment_ref(ref: str) -> str:
    target, sep, attr = ref.partition(":")
    if target.endswith(".py") or "/" in target:
        return str(Path(target).resolve()) + sep + attr
    return ref


def _target(spec: SweepSpec) -> dict[str, Any] | None:
    for o in spec.objectives:
        if o.target is not None:
            return {"metric": o.metric, "value": o.target, "maximize": o.direction == "maximize"}
    return None


def run_sweep(spec: SweepSpec, progress: Progress, tracking_uri: str | None = None,
              storage_url: str | None = None, study_name: str | None = None,
              workers: int | None = None) -> SweepOutcome:
    """Open (or resume) the sweep's study and run its remaining trials."""
    study = open_study(spec, storage_url, study_name)
    tracker = Tracker(tracking_uri)
    sweep = Sweep(spec, tracker, study, storage_url, workers or spec.budget.workers, progress)
    return sweep.run()
