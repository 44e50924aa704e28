"""The MLflow recorder: a sweep's subscriber that keeps each trial as a child run of the
sweep's parent run. A trial's run is made while it trains; its end is kept in the spool
before Optuna is told, and delivered (`tracking/delivery.py`) in a background thread."""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable

import optuna

from msexp.errors import Suggestion
from msexp.execution.result import TrialResult
from msexp.execution.subscribers import Recorder, Subscriber, TrialInfo
from msexp.keys import RunTag, StudyKey, TrialKey
from msexp.os_tools.waiting import wait_until
from msexp.spec import SweepSpec
from msexp.tracking.delivery import deliver, flush_spool
from msexp.tracking.report import log_best, log_best_checkpoint
from msexp.tracking.runs import Tracker
from msexp.tracking.spool import Held

_log = logging.getLogger("msexp")
PARENT_WAIT_S = 30.0
BACKLOG = 32  # ends held for the writer at once (a file open each); more wait for it


class MlflowRecorder(Recorder):
    """Records each trial as a child run of the sweep's parent run.

    MLflow opens in the background while the first trials train: a new store takes
    seconds to create, and no trial needs it before its result is in (the ends of those
    that ran wait for it while their slots go on: `search.driver`). The MLflow writes
    run in one background thread, off the path between two trials: a trial's run is
    made, with its params, while it trains (before the ends of earlier trials are
    logged, which its own end waits for); at its end its record goes to the
    spool on disk before Optuna is told (see `search.driver`), and the thread then
    delivers it (`delivery.deliver`: the one way a trial reaches MLflow). A sweep killed
    meanwhile leaves the record for the next delivery (`delivery.flush_spool`, `msexp
    sync`).
    """

    def __init__(self, spec: SweepSpec, study: optuna.Study, created: bool,
                 tracking_uri: str | None, storage_label: str, report: Suggestion,
                 watchers: Sequence[Subscriber] = ()):
        """`report`: the `msexp report` command of this study, for a warning; `watchers`
        are told the UI links once the parent run exists."""
        self.spec, self.study, self.report, self.watchers = spec, study, report, watchers
        self.opened: Future = Future()  # (tracker, experiment id, parent run id)
        self.writes = _Writes()
        self.runs: dict[int, Future] = {}  # trial number: its run id (None: not made)
        self.spooled = True  # records may wait in the spool: an earlier sweep's, or kept
        self.backlog = threading.BoundedSemaphore(BACKLOG)
        threading.Thread(target=self._open, args=(tracking_uri, created, storage_label),
                         daemon=True).start()

    def _open(self, tracking_uri: str | None, created: bool, storage_label: str) -> None:
        try:
            tracker = Tracker(tracking_uri)
            experiment_id = tracker.experiment_id(self.spec.name)
            parent_id = self._parent_run(tracker, experiment_id, created, storage_label)
            self._supersede(tracker, parent_id)
            self._tell_links(tracker.ui_links(experiment_id, parent_id, self._sweep_file()))
            self.opened.set_result((tracker, experiment_id, parent_id))
        except BaseException as exc:
            self.opened.set_exception(exc)

    def _tell_links(self, links: tuple[str, str, str | None]) -> None:
        """The watchers told the UI links, before anything waiting for MLflow goes on (the
        sweep's end prints them again)."""
        for watcher in self.watchers:
            try:
                watcher.on_mlflow_open(*links)
            except Exception as exc:  # a display: the sweep goes on without its links
                _log.debug(f"UI links not shown ({type(exc).__name__}: {exc})")

    def _sweep_file(self) -> Path | None:
        """The sweep file, for `msexp ui FILE` (None where it was read from a pipe)."""
        return self.spec.path if self.spec.path.is_file() else None

    def ready(self) -> bool:
        return self.opened.done()

    def failure(self) -> BaseException | None:
        """Why MLflow cannot be recorded to, once it has opened or failed (this waits)."""
        return self.opened.exception()

    def _parent_run(self, tracker: Tracker, experiment_id: str, created: bool,
                    storage_label: str) -> str:
        """The study's one parent run: made by the study's creator, found by every other.

        A joining process waits for the creator's run only while no trial has ended: the
        creator makes its run before it records any trial.
        """
        run_id = ""

        def settled() -> bool:  # a run id, or a trial ended before the creator made one
            nonlocal run_id
            run_id = self.study.user_attrs.get(StudyKey.PARENT_RUN) or ""
            return bool(run_id) or any(
                t.state.is_finished() for t in self.study.get_trials(deepcopy=False))

        wait_until(settled, 0 if created else PARENT_WAIT_S, 0.5)
        if run_id and tracker.has_run(run_id):
            tracker.reopen(run_id)
            return run_id
        # another tracking store, or a creator that never made one: a run of its own
        spec = self.spec
        run_id = tracker.parent_run(
            experiment_id, self.study.study_name,
            {"msexp.sweep": spec.name, "msexp.method": spec.method.value,
             "msexp.experiment": spec.experiment.ref, "msexp.storage": storage_label},
            spec.path, {**spec.fixed, **{p.name: p.describe() for p in spec.space.params}},
            {p.name: list(p.values or ()) for p in spec.space.params})
        self.study.set_user_attr(StudyKey.PARENT_RUN, run_id)
        return run_id

    def _supersede(self, tracker: Tracker, parent_id: str) -> None:
        """The parent run of the version this study replaced: tagged, described and, if
        it ended FINISHED, KILLED, so its green check no longer passes for a result."""
        old = self.study.user_attrs.get(StudyKey.SUPERSEDES_RUN)
        try:
            if not old or not tracker.has_run(old):
                return
            with tracker.writing():
                tracker.client.set_tag(parent_id, RunTag.SUPERSEDES,
                                       self.study.user_attrs[StudyKey.SUPERSEDES])
            mark_superseded(tracker, old, self.study.study_name)
        except Exception as exc:  # a mark, not a result: the sweep goes on
            _log.warning(f"could not mark MLflow run {old} superseded "
                         f"({type(exc).__name__})")

    def on_trial_start(self, trial: TrialInfo) -> None:
        """Make the trial's run while it trains, before the ends of earlier trials are
        logged: the trial's end waits for its run."""
        self.runs[trial.number] = self.writes.submit(self._start, trial, first=True)

    def _start(self, trial: TrialInfo) -> str | None:
        tracker, experiment_id, parent_id = self.opened.result()
        if self.spooled:  # what waits goes first (what still waits then goes at `close`)
            self.spooled = False  # not at every start: a look at every file of the spool
            flush_spool(tracker)
        try:
            return tracker.start_trial(experiment_id, parent_id, trial.number, trial.logged,
                                       trial.started, trial.name, replace=trial.later_attempt)
        except Exception as exc:  # its end keeps the whole trial in the spool
            _log.debug(f"MLflow run of trial {trial.number} not made ({type(exc).__name__})")
            return None

    def _run_of(self, trial: TrialInfo) -> str | None:
        """The id of the run made as the trial started (this waits), or None."""
        started = self.runs.pop(trial.number, None)
        try:
            return started.result() if started is not None else None
        except Exception:  # MLflow did not open: the sweep stops and puts the trial back
            return None

    def on_trial_ending(self, trial: TrialInfo, result: TrialResult) -> dict[str, Any]:
        """Keep the trial's record in the spool (on disk, before Optuna is told) and have
        the background thread deliver it into its run; Optuna keeps the run's id."""
        tracker, experiment_id, parent_id = self.opened.result()
        tags: dict[str, Any] = {}
        if self.spec.constraints:
            tags[TrialKey.FEASIBLE] = str(self.spec.feasible(result.final_metrics())).lower()
        run_id = self._run_of(trial)
        self.backlog.acquire()  # where trials end faster than MLflow logs them, they wait
        try:
            held = tracker.spool.hold(
                tracker.uri, experiment_id, parent_id, trial.number, trial.logged, result,
                trial.started, run_id=run_id, name=trial.name, tags=tags,
                log_checkpoint=self.spec.checkpoint.log == "all",
                replace=trial.later_attempt)  # what an earlier attempt made goes
        except BaseException:
            self.backlog.release()
            raise
        self.writes.submit(self._deliver, tracker, held)
        return {TrialKey.RUN_ID: run_id or "spooled"}

    def _deliver(self, tracker: Tracker, held: Held) -> None:
        try:
            if deliver(tracker, held) is None:  # the record waits: the next start looks
                self.spooled = True
        finally:
            self.backlog.release()

    def on_trial_dropped(self, trial: TrialInfo) -> None:
        """This process records no end of the trial (put back, or taken by another
        process): the run made as it started goes."""
        started = self.runs.pop(trial.number, None)
        if started is not None:
            self.writes.submit(self._drop, started)

    def _drop(self, started: Future) -> None:
        tracker = self.opened.result()[0]
        try:
            run_id = started.result()
            if run_id is not None:
                with tracker.writing():
                    tracker.client.delete_run(run_id)
        except Exception as exc:  # a later attempt replaces it anyway
            _log.debug(f"MLflow run left for a later attempt to replace ({type(exc).__name__})")

    def close(self, ending: str) -> None:
        """Finish the writes asked for, deliver what waits, log the best trial and end the
        parent run as `ending`."""
        self.writes.drain()
        tracker, _, parent_id = self.opened.result()
        try:
            flush_spool(tracker)
            log_best(self.study, tracker)
            self._log_trade_off(tracker)
            if self.spec.checkpoint.log == "best_trial":
                log_best_checkpoint(self.study, tracker)
            tracker.client.set_terminated(parent_id, ending)
            newer = self.study.user_attrs.get(StudyKey.SUPERSEDED_BY)
            if newer:  # restarted while this process ran: the end must not look final
                mark_superseded(tracker, parent_id, newer)
        except Exception as exc:  # the trials are safe in Optuna and the spool; so is this end
            tracker.spool.keep_ending(tracker.uri, parent_id, ending)
            _log.warning("MLflow unreachable at the end of the sweep (%s); when it is back, "
                         "run: %s && %s", type(exc).__name__,
                         Suggestion(("sync",), tracking_uri=tracker.uri), self.report)

    def _log_trade_off(self, tracker: Tracker) -> None:
        """The objective against memory on the parent run: a picture, so the sweep ends
        without it where it cannot be drawn."""
        from msexp.tracking.trade_off import log_trade_off  # lazy: matplotlib, a second

        try:
            log_trade_off(self.study, tracker, self.spec.objectives[0].metric)
        except Exception as exc:
            _log.debug(f"no trade-off picture ({type(exc).__name__}: {exc})")

    def ui_links(self) -> tuple[str, str, str | None]:
        """The runs table, the parent run, and the command that serves the store."""
        tracker, experiment_id, parent_id = self.opened.result()
        return tracker.ui_links(experiment_id, parent_id, self._sweep_file())


class _Writes:
    """Calls run in one background thread, in the order they were submitted; those
    submitted `first` go before the others that wait."""

    def __init__(self) -> None:
        self._queue: queue.PriorityQueue = queue.PriorityQueue()
        self._count = itertools.count()
        threading.Thread(target=self._serve, name="msexp-mlflow", daemon=True).start()

    def submit(self, call: Callable[..., Any], *args: Any, first: bool = False) -> Future:
        done: Future = Future()
        self._queue.put((0 if first else 1, next(self._count), done, call, args))
        return done

    def drain(self) -> None:
        """Wait for every call submitted so far."""
        self.submit(lambda: None).result()

    def _serve(self) -> None:
        while True:
            _, _, done, call, args = self._queue.get()
            try:
                done.set_result(call(*args))
            except BaseException as exc:
                done.set_exception(exc)


def mark_superseded(tracker: Tracker, run_id: str, newer: str) -> None:
    """Mark a sweep's parent run as replaced by study version `newer`: a tag, a note in its
    description and, where it ended FINISHED, the status KILLED (a FAILED run stays so)."""
    with tracker.writing():
        client = tracker.client
        client.set_tag(run_id, RunTag.SUPERSEDED_BY, newer)
        client.set_tag(run_id, RunTag.NOTE, f"Superseded by study {newer}: the sweep file "
                                            "changed and `msexp sweep --restart` started it.")
        if client.get_run(run_id).info.status == "FINISHED":
            client.set_terminated(run_id, "KILLED")
