"""The ask/tell loop: one Optuna study drives every method, trials run in worker processes."""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import optuna
from optuna.trial import TrialState

from msexp.errors import MsexpError
from msexp.execution.pool import TrialProcess, start_workers
from msexp.execution.protocol import (
    Checkpointing,
    Command,
    Epoch,
    Status,
    TrialRequest,
    TrialResult,
)
from msexp.keys import StudyKey, TrialKey
from msexp.knobs import value_text
from msexp.paths import TRIALS_DIR
from msexp.search.storage import storage_label
from msexp.search.study import (
    claim_waiting,
    fail_stale_trials,
    finished_count,
    open_study,
    owner,
    put_back,
    retry_failed,
    started_count,
)
from msexp.spec import Method, Objective, SweepSpec
from msexp.spec.command import split_command
from msexp.spec.space import derived
from msexp.tracking.curves import epoch_table
from msexp.tracking.report import best_trials, log_best, log_best_checkpoint
from msexp.tracking.runs import Tracker
from msexp.urls import redact

_log = logging.getLogger("msexp")

_OPTUNA_STATE = {Status.COMPLETE: TrialState.COMPLETE, Status.PRUNED: TrialState.PRUNED,
                 Status.FAILED: TrialState.FAIL, Status.TIMEOUT: TrialState.FAIL}
HEARTBEAT_S = 5.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # Ctrl-C; Slurm, Kubernetes and systemd
PARENT_WAIT_S = 30.0


class Progress(Protocol):
    """What a sweep tells its user interface."""

    def start(self, total: int, done: int) -> None: ...

    def trial_started(self, number: int, name: str, epochs: int | None) -> None: ...

    def trial_epoch(self, number: int, epoch: Epoch) -> None: ...

    def trial_done(self, number: int, result: TrialResult, best: str) -> None: ...


@dataclass
class SweepOutcome:
    """What a sweep leaves behind for the summary."""

    study: optuna.Study
    experiment_id: str
    parent_run_id: str
    tracker: Tracker
    interrupted: int = 0  # the signal that stopped the sweep (SIGINT, SIGTERM), or 0
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
        self.held: dict[int, optuna.Trial] = {}  # trials this process took and has not told
        self.interrupted = 0
        self.error: Exception | None = None  # what stopped the sweep outside any trial
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
                run_id = self.study.user_attrs.get(StudyKey.PARENT_RUN)
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
             "msexp.experiment": self.spec.experiment.ref,
             "msexp.storage": storage_label(self.storage_url)}, self.spec.path,
            {**self.spec.fixed, **{p.name: p.describe() for p in self.spec.space.params}})
        with self.lock:
            self.study.set_user_attr(StudyKey.PARENT_RUN, run_id)
        return run_id

    def run(self) -> SweepOutcome:
        """Run until the budget is spent; Ctrl-C stops cleanly and leaves the rest to resume.

        Raises:
            MsexpError: the MLflow tracking store cannot be reached (the trials that ran
                meanwhile are queued again, for the next run), or an error outside any
                trial stopped the sweep (its unfinished trials are queued again).
        """
        fail_stale_trials(self.study)
        self._keep_workers(self._pending())
        self.progress.start(self.total, finished_count(self.study))
        threads = [threading.Thread(target=self._work, args=(p,), daemon=True)
                   for p in self.processes]
        # Ctrl-C stops the trials; the threads then record them for the next run. (A
        # KeyboardInterrupt inside Thread.join can leave CPython reporting a running thread
        # as dead, so the signal is handled here instead.)
        handled = threading.current_thread() is threading.main_thread()
        previous = {sig: signal.signal(sig, self._interrupt) for sig in STOP_SIGNALS} \
            if handled else {}
        try:
            for t in threads:
                t.start()
            failed = self.mlflow.exception()
            if failed is not None:
                self._stop()
            for t in threads:
                t.join()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for p in self.processes:
                p.close()  # a stop has killed them already
        if self.error is not None:
            self._release_held()
        if failed is not None:
            raise failed
        tracker, experiment_id, parent_id = self.mlflow.result()
        ending = "FAILED" if self.error else "KILLED" if self.interrupted else "FINISHED"
        try:
            tracker.flush_spool()
            log_best(self.study, tracker)
            if self.spec.checkpoint.log == "best_trial":
                log_best_checkpoint(self.study, tracker)
            tracker.client.set_terminated(parent_id, ending)
        except Exception as exc:  # the results are safe in Optuna and the spool
            _log.warning(f"MLflow unreachable at the end of the sweep ({type(exc).__name__});"
                          " run `msexp sync` and `msexp report` when it is back")
        if self.error is not None:
            raise MsexpError(f"sweep {self.study.study_name} stopped: {_describe(self.error)}"
                             " (finished trials are kept; run the same command to resume)")
        return SweepOutcome(self.study, experiment_id, parent_id, tracker, self.interrupted,
                            self.results)

    def _pending(self) -> int:
        """Trials no worker has taken yet: queued ones, and for samplers the rest of the
        budget."""
        waiting = len(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
        if self.spec.method is Method.grid:
            return waiting
        return waiting + max(0, self.total - started_count(self.study))

    def _keep_workers(self, count: int) -> None:
        """Stop the workers beyond `count`: they would have no trial to run."""
        for process in self.processes[count:]:
            process.kill()
        self.processes = self.processes[:count]

    def _interrupt(self, signum: int, frame: object) -> None:
        if self.stopping.is_set():
            raise KeyboardInterrupt  # a second Ctrl-C: leave at once
        self.interrupted = signum
        self._stop()

    def _stop(self) -> None:
        self.stopping.set()
        for p in self.processes:
            p.kill()

    def _abort(self, exc: Exception) -> None:
        """Stop the sweep for an error outside any trial; `run` reports the first one."""
        with self.lock:
            self.error = self.error or exc
        self._stop()

    def _release_held(self) -> None:
        """Fail and queue again the trials an aborted sweep took but did not finish."""
        error = f"sweep stopped: {_describe(self.error)}"[:1000]
        for trial in list(self.held.values()):
            try:
                with self.lock:
                    self._put_back(trial, error)
            except Exception:  # told meanwhile, or the storage failed (the next run finds it stale)
                continue

    def _put_back(self, trial: optuna.Trial, reason: str) -> None:
        """Queue a trial this process took again, as it is; no attempt is counted."""
        put_back(self.study, trial._trial_id, trial.user_attrs.get(TrialKey.ATTEMPT, 0),
                 False, reason)

    def _next_trial(self) -> optuna.Trial | None:
        with self.lock:
            if self.stopping.is_set():
                return None
            trial = claim_waiting(self.study)
            if trial is None and self.spec.method is not Method.grid \
                    and started_count(self.study) < self.total:
                trial = self.study.ask()
            if trial is not None:
                self.held[trial.number] = trial
                trial.set_user_attr(TrialKey.OWNER, owner())
                trial.set_user_attr(TrialKey.HEARTBEAT, time.time())
            return trial

    def _work(self, process: TrialProcess) -> None:
        """Run trials until none are left; an error outside any trial stops the sweep."""
        try:
            while (trial := self._next_trial()) is not None:
                self._attempt(trial, process)
        except Exception as exc:
            self._abort(exc)

    def _attempt(self, trial: optuna.Trial, process: TrialProcess) -> None:
        """Run one trial; an error while running it fails that trial, not the sweep."""
        started = time.time()
        try:  # the heartbeat goes on until the trial is told: recording can take a minute
            with _Heartbeat(self.study, trial, self.lock):
                self._run_trial(trial, process)
        except Exception as exc:
            process.kill()  # it may be in the middle of the trial
            self._fail_trial(trial, exc, started)
        with self.lock:
            self.held.pop(trial.number, None)

    def _fail_trial(self, trial: optuna.Trial, exc: Exception, started: float) -> None:
        """Record a trial that raised as FAILED, in Optuna and (if it is up) MLflow."""
        result = TrialResult(Status.FAILED, error=_describe(exc), wall_s=time.time() - started)
        with self.lock:
            try:
                trial.set_user_attr(TrialKey.ERROR, result.error[:1000])
            except optuna.exceptions.UpdateFinishedTrialError:
                _log.warning(f"trial {trial.number} was recorded, then: {result.error}")
                return
            trial.set_user_attr(TrialKey.STATUS, result.status.value)
            self.study.tell(trial, state=TrialState.FAIL)
        if self.mlflow.exception() is None:
            tracker, experiment_id, parent_id = self.mlflow.result()
            logged = {**trial.params, "experiment": self.spec.experiment.ref}
            tracker.record_trial(experiment_id, parent_id, trial.number, logged, result,
                                 started)
        with self.lock:
            self.results[trial.number] = result
            self.progress.trial_done(trial.number, result, self._best_text())

    def _run_trial(self, trial: optuna.Trial, process: TrialProcess) -> None:
        spec = self.spec
        assigned = spec.space.suggest(trial)
        params = spec.space.resolve(assigned)
        folder = (TRIALS_DIR / self.study.study_name / f"trial-{trial.number:04d}").resolve()
        request = trial_request(spec, params, folder)
        rerun = TrialKey.ATTEMPT in trial.user_attrs  # an earlier attempt may have logged
        name = " ".join([f"#{trial.number}",
                         *(f"{k}={value_text(v)}" for k, v in assigned.items())])
        started = time.time()
        self.progress.trial_started(trial.number, name, params.get("epochs"))
        result = process.run(request, spec.budget.trial_timeout, self._epoch_hook(trial))
        result.error = redact(result.error) if result.error else result.error
        unrecordable = self.mlflow.exception() is not None
        if unrecordable or self.stopping.is_set():
            with self.lock:  # interrupted, not finished: the next run continues it
                self._put_back(trial, "MLflow unreachable" if unrecordable else "interrupted")
            return
        tracker, experiment_id, parent_id = self.mlflow.result()
        logged = {**params, **derived(params), "experiment": spec.experiment.ref}
        feasible = spec.feasible(result.metrics) if spec.constraints else None
        tags = {} if feasible is None else {TrialKey.FEASIBLE: str(feasible).lower()}
        run_id = tracker.record_trial(experiment_id, parent_id, trial.number, logged, result,
                                      started, replace=rerun,
                                      log_checkpoint=spec.checkpoint.log == "all", name=name,
                                      tags=tags)
        with self.lock:
            trial.set_user_attr(TrialKey.PARAMS, params)
            if feasible is not None:
                trial.set_user_attr(TrialKey.FEASIBLE, feasible)
            if result.checkpoint:
                trial.set_user_attr(TrialKey.CHECKPOINT, str(result.checkpoint))
        with self.lock:
            self._tell(trial, result, run_id)
            self.results[trial.number] = result
            self.progress.trial_done(trial.number, result, self._best_text())

    def _epoch_hook(self, trial: optuna.Trial):
        """Each epoch: show it, report it to the pruner; True when the trial is pruned."""
        pruning = self.spec.pruner.type != "none"
        metric = self.spec.objectives[0].metric

        def on_epoch(epoch: Epoch) -> bool:
            self.progress.trial_epoch(trial.number, epoch)
            value = epoch.metrics.get(metric)
            if not pruning or value is None or not math.isfinite(value):
                return False
            with self.lock:
                trial.report(value, epoch.epoch)
                return trial.should_prune()

        return on_epoch

    def _tell(self, trial: optuna.Trial, result: TrialResult, run_id: str | None) -> None:
        metrics = result.metrics or result.last_epoch_metrics()
        metrics = {**metrics, "wall_s": result.wall_s}
        trial.set_user_attr(TrialKey.STATUS, result.status.value)
        trial.set_user_attr(TrialKey.METRICS,
                            {k: v for k, v in metrics.items() if math.isfinite(v)})
        trial.set_user_attr(TrialKey.RUN_ID, run_id or "spooled")
        trial.set_user_attr(TrialKey.EPOCHS, epoch_table(result.epochs))
        if result.error:
            trial.set_user_attr(TrialKey.ERROR, result.error[:1000])
        values = None
        state = _OPTUNA_STATE[result.status]
        if result.status is Status.COMPLETE:
            values = [objective_value(o, metrics, result.epochs) for o in self.spec.objectives]
            if not all(math.isfinite(v) for v in values):
                missing = [o.metric for o, v in zip(self.spec.objectives, values)
                           if not math.isfinite(v)]
                trial.set_user_attr(TrialKey.ERROR,
                                    f"objective not available: {', '.join(missing)}")
                trial.set_user_attr(TrialKey.MISSING, missing)
                state, values = TrialState.FAIL, None
        self.study.tell(trial, values, state=state if values is None else None)

    def _best_text(self) -> str:
        chosen = best_trials(self.study)
        if len(self.spec.objectives) > 1:
            return f"pareto {len(chosen)}"
        if not chosen:
            return "-"
        return f"{self.spec.objectives[0].metric}={chosen[0].value:.4g} (#{chosen[0].number})"


class _Heartbeat:
    """Writes the trial's heartbeat while it runs, so a dead orchestrator can be told."""

    def __init__(self, study: optuna.Study, trial: optuna.Trial, lock: threading.Lock):
        self.study, self.trial, self.lock = study, trial, lock
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while not self.done.wait(HEARTBEAT_S):
            with self.lock:
                try:
                    self.trial.set_user_attr(TrialKey.HEARTBEAT, time.time())
                except optuna.exceptions.UpdateFinishedTrialError:
                    return  # told: nothing is left to beat for

    def __enter__(self) -> _Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()


def trial_request(spec: SweepSpec, params: dict[str, Any], folder: Path) -> TrialRequest:
    """The request of one trial of `spec` with complete `params`, its files in `folder`."""
    first = spec.objectives[0]
    checkpoint = Checkpointing(spec.checkpoint.every, spec.checkpoint.keep, first.metric,
                               first.direction == "maximize")
    if spec.command is not None:
        command = Command(split_command(str(spec.path), spec.command.command), str(spec.folder),
                          spec.command.args, list(spec.command.metrics))
        return TrialRequest(spec.experiment.ref, params, folder, spec.target(), None, command,
                            checkpoint)
    return TrialRequest(_experiment_ref(spec.experiment.ref), params, folder, spec.target(),
                        spec.data_section(), checkpoint=checkpoint, cold=spec.budget.cold)


def objective_value(objective: Objective, metrics: dict[str, float], epochs: list[Epoch]
                    ) -> float:
    """The value told to Optuna: the final one, or with `reduce: best` the best epoch's."""
    if objective.reduce == "best":
        values = [e.metrics[objective.metric] for e in epochs
                  if math.isfinite(e.metrics.get(objective.metric, math.nan))]
        if values:
            return max(values) if objective.direction == "maximize" else min(values)
    return metrics.get(objective.metric, math.nan)


def _describe(exc: Exception) -> str:
    """An error as one line, redacted: an MsexpError's own text, else its type and text."""
    text = redact(" ".join(str(exc).split()))[:300]
    return text if isinstance(exc, MsexpError) else f"{type(exc).__name__}: {text}"


def _experiment_ref(ref: str) -> str:
    target, sep, attr = ref.partition(":")
    if target.endswith(".py") or "/" in target:
        return str(Path(target).resolve()) + sep + attr
    return ref


def run_sweep(spec: SweepSpec, progress: Progress,
              processes: list[TrialProcess] | None = None, tracking_uri: str | None = None,
              storage_url: str | None = None, study_name: str | None = None,
              retry: bool = False) -> SweepOutcome:
    """Open (or resume) the sweep's study and run its remaining trials; with `retry`, first
    queue the FAILED and TIMEOUT trials of a resumed study again.

    `processes` (see `execution.pool.start_workers`, default: `budget.workers` of them)
    run the trials and are killed when this returns.
    """
    processes = processes or start_workers(spec.budget.workers)
    try:
        study, created = open_study(spec, storage_url, study_name)
        if retry:
            retry_failed(study)
    except BaseException:
        for process in processes:
            process.kill()
        raise
    return Sweep(spec, tracking_uri, study, created, storage_url, processes, progress).run()
