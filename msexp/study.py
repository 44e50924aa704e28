"""The ask/tell loop: one Optuna study drives every method, trials run in worker processes."""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import math
import os
import signal
import socket
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import optuna
import psutil
from optuna.storages.journal._file import BaseJournalFileLock
from optuna.trial import TrialState

from msexp.errors import MsexpError
from msexp.report import log_best
from msexp.runner import Status, TrialProcess, TrialResult, start_workers
from msexp.space import derived
from msexp.spec import Method, SweepSpec
from msexp.tracking import STORE_DIR, Tracker, redact

_log = logging.getLogger("msexp")
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

        path = Path(url or JOURNAL).resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(
            JournalFileBackend(str(path), lock_obj=FlockLock(str(path) + ".flock")))
    for attempt in range(4):
        try:
            return optuna.storages.RDBStorage(url)
        except Exception:  # another worker is creating the same schema right now
            time.sleep(1 + attempt)
    return optuna.storages.RDBStorage(url)


class FlockLock(BaseJournalFileLock):
    """A journal lock the kernel releases when its holder dies, even by kill -9.

    Optuna's default lock files outlive a killed holder and block others for 30 s.
    """

    def __init__(self, path: str):
        self.path = path
        self._handles: dict[int, Any] = {}

    def acquire(self) -> bool:
        handle = open(self.path, "a")  # noqa: SIM115  (closed in release)
        fcntl.flock(handle, fcntl.LOCK_EX)
        self._handles[threading.get_ident()] = handle
        return True

    def release(self) -> None:
        handle = self._handles.pop(threading.get_ident())
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


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
        Method.cmaes: lambda: optuna.samplers.CmaEsSampler(seed=seed,
                                                           warn_independent_sampling=False),
        Method.nsga2: lambda: optuna.samplers.NSGAIISampler(seed=seed),
    }
    return samplers[spec.method]()


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
    content = {"experiment": spec.file.experiment, "method": spec.method.value,
               "objective": [o.model_dump() for o in spec.objectives],
               "fixed": spec.file.fixed, "params": spec.file.params}
    text = json.dumps(content, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def open_study(spec: SweepSpec, storage_url: str | None, study_name: str | None = None
               ) -> tuple[optuna.Study, bool]:
    """Create the sweep's study, or load it to resume or join; returns (study, created).

    A new grid study enqueues its points; workers take them atomically, so no grid
    point runs twice, whatever the number of workers and machines.
    """
    name = study_name or spec.name
    storage = open_storage(storage_url)
    directions = [o.direction for o in spec.objectives]
    kwargs = dict(study_name=name, storage=storage, sampler=make_sampler(spec),
                  pruner=make_pruner(spec))
    created = True
    try:
        study = optuna.create_study(directions=directions, **kwargs)
    except optuna.exceptions.DuplicatedStudyError:
        created = False
        study = optuna.load_study(**kwargs)
        if study.user_attrs.get("msexp.fingerprint") not in (None, fingerprint(spec)):
            raise MsexpError(f"{spec.path}: study {name!r} in {storage_label(storage_url)} was "
                             "created from a different sweep; pass --study NEW_NAME") from None
        if [d.name.lower() for d in study.directions] != directions:
            raise MsexpError(
                f"{spec.path}: study {name!r} has other objective directions") from None
    if not created:
        _wait_for_creator(study)
    if "msexp.fingerprint" not in study.user_attrs:
        if spec.method is Method.grid:
            points = spec.space.grid()[:spec.n_trials()]
            by_name = {p.name: p for p in spec.space.params}
            for i, point in enumerate(points):
                study.enqueue_trial({k: by_name[k].optuna_value(v) for k, v in point.items()},
                                    user_attrs={"grid_point": i})
        study.set_user_attr("msexp.retries", spec.budget.retries)
        study.set_user_attr("msexp.total", spec.n_trials())
        study.set_user_attr("msexp.objectives", [o.metric for o in spec.objectives])
        study.set_user_attr("msexp.sweep", spec.name)
        study.set_user_attr("msexp.experiment", spec.file.experiment)
        study.set_user_attr("msexp.fingerprint", fingerprint(spec))  # last: marks it complete
    return study, created


HEARTBEAT_S = 5.0
PARENT_WAIT_S = 30.0
CREATOR_WAIT_S = 10.0
STALE_AFTER_S = 60.0


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _owner_is_dead(owner: str) -> bool:
    host, _, pid = owner.rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and not psutil.pid_exists(int(pid))


def requeue(study: optuna.Study, frozen: optuna.trial.FrozenTrial, count_attempt: bool) -> bool:
    """Queue a copy of an unfinished trial; False when its retries are used up."""
    attempts = frozen.user_attrs.get("attempt", 0) + count_attempt
    limit = study.user_attrs.get("msexp.retries", 0)
    if attempts > limit:
        return False
    attrs = {k: v for k, v in frozen.user_attrs.items() if k in ("grid_point",)}
    study.enqueue_trial(frozen.params or frozen.system_attrs.get("fixed_params", {}),
                        user_attrs={**attrs, "retry_of": frozen.number, "attempt": attempts})
    return True


def fail_stale_trials(study: optuna.Study) -> list[int]:
    """Fail RUNNING trials whose orchestrator died (no heartbeat), and retry them.

    A trial's owner writes a heartbeat every few seconds; a trial is stale when its
    owner is a dead process on this host, or its heartbeat is older than a minute.
    """
    failed = []
    now = time.time()
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = frozen.user_attrs.get("owner", "")
        beat = frozen.user_attrs.get("heartbeat", frozen.datetime_start.timestamp()
                                     if frozen.datetime_start else now)
        if owner == _owner() or not (_owner_is_dead(owner) or now - beat > STALE_AFTER_S):
            continue
        study._storage.set_trial_user_attr(frozen._trial_id, "error",
                                           "orchestrator stopped (no heartbeat)")
        if study._storage.set_trial_state_values(frozen._trial_id, TrialState.FAIL):
            requeue(study, frozen, count_attempt=True)
            failed.append(frozen.number)
    return failed


def _wait_for_creator(study: optuna.Study) -> None:
    """Give the process that just created the study time to enqueue its grid."""
    deadline = time.monotonic() + CREATOR_WAIT_S
    while time.monotonic() < deadline:
        if "msexp.fingerprint" in study.user_attrs:
            return
        time.sleep(0.2)


def _claim_waiting(study: optuna.Study) -> optuna.Trial | None:
    """Atomically take a WAITING (enqueued) trial, as Study.ask does, without sampling anew."""
    storage = study._storage
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        if storage.set_trial_state_values(frozen._trial_id, TrialState.RUNNING):
            return optuna.Trial(study, frozen._trial_id)
    return None


def finished_count(study: optuna.Study) -> int:
    """Trials that ended, not counting attempts that were queued again."""
    trials = study.get_trials(deepcopy=False)
    retried = {t.user_attrs.get("retry_of") for t in trials} - {None}
    return sum(t.state.is_finished() and t.number not in retried for t in trials)


def started_count(study: optuna.Study) -> int:
    """Trials taken from the budget: started ones, not counting queued retries."""
    trials = study.get_trials(deepcopy=False)
    return sum(t.state is not TrialState.WAITING and "retry_of" not in t.user_attrs
               for t in trials)


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
    """Runs a study's remaining trials with `workers` trial processes in parallel.

    MLflow opens in the background while the first trials train: a new store takes
    seconds to create, and no trial needs it before its result is in.
    """

    def __init__(self, spec: SweepSpec, tracking_uri: str | None, study: optuna.Study,
                 created: bool, storage_url: str | None, processes: list[TrialProcess],
                 progress: Progress):
        self.spec, self.study, self.progress = spec, study, progress
        self.storage_url, self.processes = storage_url, processes
        self.total = spec.n_trials()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.results: dict[int, TrialResult] = {}
        self.interrupted = False
        self.mlflow = Future()
        threading.Thread(target=self._open_mlflow, args=(tracking_uri, created),
                         daemon=True).start()

    def _open_mlflow(self, tracking_uri: str | None, created: bool) -> None:
        try:
            tracker = Tracker(tracking_uri)
            experiment_id = tracker.experiment_id(self.spec.name)
            parent_id = self._parent_run(tracker, experiment_id, created)
            self.mlflow.set_result((tracker, experiment_id, parent_id))
        except BaseException as exc:
            self.mlflow.set_exception(exc)

    def _parent_run(self, tracker: Tracker, experiment_id: str, created: bool) -> str:
        """The study's one parent run: made by the study's creator, found by every other.

        A joining worker waits for the creator's run only while no trial has ended: the
        creator makes its run before it records any trial.
        """
        deadline = time.monotonic() + (0 if created else PARENT_WAIT_S)
        while True:
            with self.lock:
                run_id = self.study.user_attrs.get("mlflow_parent_run_id")
                ended = any(t.state.is_finished() for t in self.study.get_trials(deepcopy=False))
            if run_id and tracker.has_run(run_id):
                tracker.reopen(run_id)
                return run_id
            if run_id or ended or time.monotonic() >= deadline:
                break  # another tracking store, or a creator that never made one
            time.sleep(0.5)
        run_id = tracker.parent_run(
            experiment_id, self.study.study_name,
            {"msexp.sweep": self.spec.name, "msexp.method": self.spec.method.value,
             "msexp.experiment": self.spec.file.experiment,
             "msexp.storage": storage_label(self.storage_url)}, self.spec.path)
        with self.lock:
            self.study.set_user_attr("mlflow_parent_run_id", run_id)
        return run_id

    def run(self) -> SweepOutcome:
        """Run until the budget is spent; Ctrl-C stops cleanly and leaves the rest to resume.

        Raises:
            MsexpError: the MLflow tracking store cannot be reached (the trials that ran
                meanwhile are queued again, for the next run).
        """
        fail_stale_trials(self.study)
        self.progress.start(self.total, finished_count(self.study))
        threads = [threading.Thread(target=self._work, args=(p,), daemon=True)
                   for p in self.processes]
        # Ctrl-C stops the trials; the threads then record them for the next run. (A
        # KeyboardInterrupt inside Thread.join can leave CPython reporting a running thread
        # as dead, so the signal is handled here instead.)
        handled = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, self._interrupt) if handled else None
        try:
            for t in threads:
                t.start()
            failed = self.mlflow.exception()
            if failed is not None:
                self._stop()
            for t in threads:
                t.join()
        finally:
            if handled:
                signal.signal(signal.SIGINT, previous)
            for p in self.processes:
                p.kill()
        if failed is not None:
            raise failed
        tracker, experiment_id, parent_id = self.mlflow.result()
        try:
            tracker.flush_spool()
            log_best(self.study, tracker)
            tracker.client.set_terminated(parent_id,
                                          "KILLED" if self.interrupted else "FINISHED")
        except Exception as exc:  # the results are safe in Optuna and the spool
            _log.warning(f"MLflow unreachable at the end of the sweep ({type(exc).__name__});"
                          " run `msexp sync` and `msexp report` when it is back")
        return SweepOutcome(self.study, experiment_id, parent_id, tracker, self.interrupted,
                            self.results)

    def _interrupt(self, signum: int, frame: object) -> None:
        if self.stopping.is_set():
            raise KeyboardInterrupt  # a second Ctrl-C: leave at once
        self.interrupted = True
        self._stop()

    def _stop(self) -> None:
        self.stopping.set()
        for p in self.processes:
            p.kill()

    def _next_trial(self) -> optuna.Trial | None:
        with self.lock:
            if self.stopping.is_set():
                return None
            trial = _claim_waiting(self.study)
            if trial or self.spec.method is Method.grid:
                return self._own(trial)
            if started_count(self.study) >= self.total:
                return None
            return self._own(self.study.ask())

    def _own(self, trial: optuna.Trial | None) -> optuna.Trial | None:
        if trial is not None:
            trial.set_user_attr("owner", _owner())
            trial.set_user_attr("heartbeat", time.time())
        return trial

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
        with _Heartbeat(self.study, trial, self.lock):
            result = process.run(request, spec.budget.trial_timeout, self._pruning_hook(trial))
        unrecordable = self.mlflow.exception() is not None
        if unrecordable or self.stopping.is_set():
            with self.lock:  # interrupted, not finished: queue it again for the next run
                trial.set_user_attr("error", "MLflow unreachable" if unrecordable
                                    else "interrupted")
                frozen = self.study.tell(trial, state=TrialState.FAIL)
                requeue(self.study, frozen, count_attempt=False)
            return
        tracker, experiment_id, parent_id = self.mlflow.result()
        logged = {**params, **derived(params), "experiment": spec.file.experiment}
        run_id = tracker.record_trial(experiment_id, parent_id, trial.number, logged, result,
                                      started)
        with self.lock:
            self._tell(trial, result, run_id)
            self.results[trial.number] = result
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

    def _tell(self, trial: optuna.Trial, result: TrialResult, run_id: str | None) -> None:
        metrics = result.metrics or result.last_epoch_metrics()
        metrics = {**metrics, "wall_s": result.wall_s}
        trial.set_user_attr("status", result.status.value)
        trial.set_user_attr("metrics", {k: v for k, v in metrics.items() if math.isfinite(v)})
        trial.set_user_attr("mlflow_run_id", run_id or "spooled")
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


class _Heartbeat:
    """Writes the trial's heartbeat while it runs, so a dead orchestrator can be told."""

    def __init__(self, study: optuna.Study, trial: optuna.Trial, lock: threading.Lock):
        self.study, self.trial, self.lock = study, trial, lock
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while not self.done.wait(HEARTBEAT_S):
            with self.lock:
                self.trial.set_user_attr("heartbeat", time.time())

    def __enter__(self) -> _Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()


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


def run_sweep(spec: SweepSpec, progress: Progress,
              processes: list[TrialProcess] | None = None, tracking_uri: str | None = None,
              storage_url: str | None = None, study_name: str | None = None) -> SweepOutcome:
    """Open (or resume) the sweep's study and run its remaining trials.

    `processes` (see `runner.start_workers`, default: `budget.workers` of them) run the
    trials and are killed when this returns.
    """
    processes = processes or start_workers(spec.budget.workers)
    try:
        study, created = open_study(spec, storage_url, study_name)
    except BaseException:
        for process in processes:
            process.kill()
        raise
    return Sweep(spec, tracking_uri, study, created, storage_url, processes, progress).run()
