"""Recording a trial in MLflow now, or keeping it in the spool on disk when MLflow cannot
take it (an unreachable server), and delivering what waits there later, with the ends of
parent runs that waited for it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from msexp.errors import Suggestion
from msexp.execution.result import TrialResult
from msexp.secrets.redaction import redact
from msexp.tracking.runs import Tracker
from msexp.tracking.spool import SpooledTrial

_log = logging.getLogger("msexp")


def record_trial(tracker: Tracker, experiment_id: str, parent_id: str, number: int,
                 params: Mapping[str, Any], result: TrialResult, started: float,
                 replace: bool = False, log_checkpoint: bool = False,
                 name: str | None = None, tags: Mapping[str, str] | None = None
                 ) -> str | None:
    """Log a trial; if MLflow cannot take it now, keep it in the spool on disk.

    Returns the run id, or None when the trial was spooled. Spooled trials are
    delivered before the next trial is logged, or by `msexp sync`. With `replace`
    (a trial that ran before), a run an earlier attempt left is deleted first, so
    a trial has one child run; `log_checkpoint` attaches the model it kept.
    """
    flush_spool(tracker)
    try:
        run_id = tracker.start_trial(experiment_id, parent_id, number, params, started,
                                     name, replace)
        tracker.finish_trial(run_id, result, started, tags, log_checkpoint, params)
        return run_id
    except Exception as exc:  # unreachable server, broken store: keep the result
        path = tracker.spool.keep(tracker.uri, experiment_id, parent_id, number, dict(params),
                               result, started, name=name, tags=dict(tags or {}))
        warn_kept(tracker, number, exc, path)
        return None


def warn_kept(tracker: Tracker, number: int, exc: BaseException, path: Path) -> None:
    """Say that trial `number` waits in the spool file `path`, and how to deliver it."""
    _log.warning("MLflow at %s did not take trial %d (%s); kept in %s, delivered later or "
                 "by: %s", redact(tracker.uri), number, type(exc).__name__, path,
                 Suggestion(("sync",), tracking_uri=tracker.uri))


def flush_spool(tracker: Tracker) -> int:
    """Deliver spooled trials of this tracking store, then the ends of parent runs
    that waited for them; returns how many trials were delivered."""
    delivered = 0
    for path, record in tracker.spool.pending(tracker.uri):
        try:
            deliver(tracker, record)
        except Exception:
            return delivered  # still unreachable: keep the rest for later
        path.unlink()
        delivered += 1
    for path, parent_id, ending in tracker.spool.endings(tracker.uri):
        try:
            tracker.client.set_terminated(parent_id, ending)
        except Exception:
            break
        path.unlink()
    return delivered

def deliver(tracker: Tracker, record: SpooledTrial) -> str:
    """Record a spooled trial as its one child run: the run made as it started, if
    that is still there, else a new one; any other run of the trial goes."""
    kept = record.run_id if record.run_id and tracker.active(record.run_id) else None
    with tracker.writing():  # an attempt that failed midway may have left a run
        tracker.delete_trial_runs(record.experiment_id, record.parent_id, record.number,
                                keep=kept)
    if kept is None:
        kept = tracker.start_trial(record.experiment_id, record.parent_id, record.number,
                                record.params, record.started, record.name)
    tracker.finish_trial(kept, record.trial_result, record.started, record.tags,
                      params=record.params)
    return kept
