"""The MLflow runs of a sweep's experiment that are RUNNING, for `msexp status`: a killed
`msexp tune` leaves its runs so until the next tune ends them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from msexp.cli.options import console
from msexp.paths import MLFLOW_DB
from msexp.tracking.runs import Tracker
from msexp.tracking.store import read_running_runs


def mlflow_running(experiment: str, tracking_uri: str | None) -> list[dict[str, Any]]:
    """The RUNNING runs of MLflow experiment `experiment` (none where the embedded store
    was never made): `left` where the tune process that made them is gone."""
    from msexp.tune.record import gone, running_runs, with_makers  # lazy: tune imports the engine

    embedded = tracking_uri is None and os.environ.get("MLFLOW_TRACKING_URI") is None
    if embedded and not MLFLOW_DB.exists():
        return []
    found = read_running_runs(MLFLOW_DB, experiment) if embedded else None
    if found is not None:
        runs = with_makers(found)
    else:  # a server, or a store SQLite cannot read: MLflow (its import takes seconds)
        tracker = Tracker(tracking_uri)
        known = tracker.client.get_experiment_by_name(experiment)
        runs = running_runs(tracker, known.experiment_id) if known else []
    return [{"run_id": run.run_id, "name": run.name, "made_by": maker, "left": gone(maker)}
            for run, maker in runs]


def show_mlflow_running(runs: list[dict[str, Any]], file: Path | None) -> None:
    """`msexp status`'s lines of `mlflow_running`'s runs, saying what to do with those
    left."""
    if runs:
        console.print(f"MLflow runs RUNNING: {len(runs)}", highlight=False)
    for run in runs:
        left = (f": left by msexp tune {run['made_by']}, which is gone; the next "
                f"`msexp tune {file or 'FILE'}` ends it KILLED" if run["left"] else "")
        console.print(f"  {run['name']} ({run['run_id']}){left}", markup=False,
                      highlight=False)
