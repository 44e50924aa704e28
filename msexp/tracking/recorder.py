"""The MLflow recorder: a sweep's subscriber that keeps each trial as a child run of the
sweep's parent run."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from typing import Any

import optuna

from msexp import hints
from msexp.execution.protocol import TrialResult
from msexp.execution.subscribers import Subscriber, TrialInfo
from msexp.keys import RunTag, StudyKey, TrialKey
from msexp.spec import SweepSpec
from msexp.tracking.report import log_best, log_best_checkpoint
from msexp.tracking.runs import Tracker, mark_superseded

_log = logging.getLogger("msexp")
PARENT_WAIT_S = 30.0


class MlflowRecorder(Subscriber):
    """Records each ended trial in MLflow, before Optuna is told (see `search.driver`).

    MLflow opens in the background while the first trials train: a new store takes
    seconds to create, and no trial needs it before its result is in.
    """

    def __init__(self, spec: SweepSpec, study: optuna.Study, created: bool,
                 tracking_uri: str | None, storage_label: str, report_hint: str = ""):
        """`report_hint`: the `msexp report` command of this study, for a warning."""
        self.spec, self.study, self.report_hint = spec, study, report_hint
        self.opened: Future = Future()  # (tracker, experiment id, parent run id)
        threading.Thread(target=self._open, args=(tracking_uri, created, storage_label),
                         daemon=True).start()

    def _open(self, tracking_uri: str | None, created: bool, storage_label: str) -> None:
        try:
            tracker = Tracker(tracking_uri)
            experiment_id = tracker.experiment_id(self.spec.name)
            parent_id = self._parent_run(tracker, experiment_id, created, storage_label)
            self._supersede(tracker, parent_id)
            self.opened.set_result((tracker, experiment_id, parent_id))
        except BaseException as exc:
            self.opened.set_exception(exc)

    def failure(self) -> BaseException | None:
        """Why MLflow cannot be recorded to, once it has opened or failed (this waits)."""
        return self.opened.exception()

    def _parent_run(self, tracker: Tracker, experiment_id: str, created: bool,
                    storage_label: str) -> str:
        """The study's one parent run: made by the study's creator, found by every other.

        A joining process waits for the creator's run only while no trial has ended: the
        creator makes its run before it records any trial.
        """
        deadline = time.monotonic() + (0 if created else PARENT_WAIT_S)
        while True:
            run_id = self.study.user_attrs.get(StudyKey.PARENT_RUN)
            ended = any(t.state.is_finished() for t in self.study.get_trials(deepcopy=False))
            if run_id and tracker.has_run(run_id):
                tracker.reopen(run_id)
                return run_id
            if run_id or ended or time.monotonic() >= deadline:
                break  # another tracking store, or a creator that never made one
            time.sleep(0.5)
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

    def on_trial_end(self, trial: TrialInfo, result: TrialResult) -> None:
        tracker, experiment_id, parent_id = self.opened.result()
        tags: dict[str, Any] = {}
        if self.spec.constraints:
            tags[TrialKey.FEASIBLE] = str(self.spec.feasible(result.metrics)).lower()
        run_id = tracker.record_trial(
            experiment_id, parent_id, trial.number, trial.logged, result, trial.started,
            replace=trial.rerun, log_checkpoint=self.spec.checkpoint.log == "all",
            name=trial.name, tags=tags)
        trial.attrs[TrialKey.RUN_ID] = run_id or "spooled"

    def close(self, ending: str) -> None:
        """Deliver what waits, log the best trial and end the parent run as `ending`."""
        tracker, _, parent_id = self.opened.result()
        try:
            tracker.flush_spool()
            log_best(self.study, tracker)
            if self.spec.checkpoint.log == "best_trial":
                log_best_checkpoint(self.study, tracker)
            tracker.client.set_terminated(parent_id, ending)
            newer = self.study.user_attrs.get(StudyKey.SUPERSEDED_BY)
            if newer:  # restarted while this process ran: the end must not look final
                mark_superseded(tracker, parent_id, newer)
        except Exception as exc:  # the trials are safe in Optuna and the spool; so is this end
            tracker.spool.keep_ending(tracker.uri, parent_id, ending)
            sync = hints.command("sync", tracking_uri=tracker.uri)
            _log.warning(f"MLflow unreachable at the end of the sweep ({type(exc).__name__});"
                         f" when it is back, run: {sync} && {self.report_hint}")

    def ui_links(self) -> tuple[str, str, str | None]:
        """The runs table, the parent run, and the command that serves the store."""
        tracker, experiment_id, parent_id = self.opened.result()
        return tracker.ui_links(experiment_id, parent_id)
