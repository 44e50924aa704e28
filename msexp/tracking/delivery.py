"""The one way a trial reaches MLflow, for a sweep (`recorder`), `tune` and the tests: its
record kept in the spool first (on disk, locked while this process delivers it), then
delivered as the trial's one child run; a record MLflow does not take waits in the spool
for the next delivery or `msexp sync`, with the ends of parent runs that waited for it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from msexp.errors import Suggestion
from msexp.execution.result import TrialResult
from msexp.secrets.redaction import redact
from msexp.tracking.runs import Tracker
from msexp.tracking.spool import Held, SpooledTrial

_log = logging.getLogger("msexp")


def record_trial(tracker: Tracker, experiment_id: str, parent_id: str, number: int,
                 params: Mapping[str, Any], result: TrialResult, started: float,
                 **more: Any) -> str | None:
    """Deliver what waits in the spool, then keep this trial's record there and deliver it.

    Returns the run id, or None where MLflow did not take it (the record waits). `more`:
    the `SpooledTrial` fields `name`, `tags`, `log_checkpoint`, `run_id`, `replace`.
    """
    flush_spool(tracker)
    held = tracker.spool.hold(tracker.uri, experiment_id, parent_id, number, dict(params),
                              result, started, **more)
    return deliver(tracker, held)


def deliver(tracker: Tracker, held: Held) -> str | None:
    """Deliver a record this process holds: the run's id, or None where MLflow did not take
    it (then the record waits in the spool, and a warning says how to deliver it)."""
    try:
        run_id = write_run(tracker, held.record)
    except Exception as exc:  # unreachable server, broken store: the record waits
        held.release()
        warn_kept(tracker, held.record.number, exc, held.path)
        return None
    held.delivered()
    return run_id


def write_run(tracker: Tracker, record: SpooledTrial) -> str:
    """Record a trial as its one child run: the run made as it started, if that is still
    there, else a new one, finished; then any other run of the trial goes (one a delivery
    that failed midway made; with `record.replace`, an earlier attempt's). Written again,
    it leaves the same run."""
    kept = record.run_id if record.run_id and tracker.active(record.run_id) else None
    run_id = kept or tracker.start_trial(record.experiment_id, record.parent_id,
                                         record.number, record.params, record.started,
                                         record.name)
    tracker.finish_trial(run_id, record.trial_result, record.started, record.tags,
                         record.log_checkpoint, record.params)
    if kept is None or record.replace:
        with tracker.writing():
            tracker.delete_trial_runs(record.experiment_id, record.parent_id, record.number,
                                      keep=run_id)
    return run_id


def warn_kept(tracker: Tracker, number: int, exc: BaseException, path: Path) -> None:
    """Say that trial `number` waits in the spool file `path`, and how to deliver it."""
    _log.warning("MLflow at %s did not take trial %d (%s); kept in %s, delivered later or "
                 "by: %s", redact(tracker.uri), number, type(exc).__name__, path,
                 Suggestion(("sync",), tracking_uri=tracker.uri))


def flush_spool(tracker: Tracker) -> int:
    """Deliver the records of this tracking store that wait in the spool, then the ends of
    parent runs that waited for them; returns how many trials were delivered."""
    delivered = 0
    for path, record in tracker.spool.pending(tracker.uri):
        try:
            write_run(tracker, record)
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
