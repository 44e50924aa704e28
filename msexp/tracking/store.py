"""A new embedded MLflow store is created whole or not at all.

MLflow creates a SQLite store's tables in dozens of migrations; a process killed
midway leaves a database that every later client refuses ("duplicate column name").
So a new store is made under a temporary name and renamed into place when complete.

The RUNNING runs `msexp status` lists are read here with raw SQL on MLflow's `runs`,
`experiments` and `tags` tables (`read_running_runs`), read-only; where MLflow changed
them, the caller asks MLflow.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from typing import NamedTuple

from msexp.keys import RunTag

_PARTIAL = ".creating-"
# MLflow's own tables (unchanged since MLflow 1.0): an experiment's active RUNNING runs,
# newest first (as `search_runs` orders them), each with its parent and owner tags
_RUNNING = ("SELECT runs.run_uuid, runs.name, parent.value, owner.value FROM runs "
            "JOIN experiments ON runs.experiment_id = experiments.experiment_id "
            "LEFT JOIN tags AS parent ON parent.run_uuid = runs.run_uuid AND parent.key = ? "
            "LEFT JOIN tags AS owner ON owner.run_uuid = runs.run_uuid AND owner.key = ? "
            "WHERE experiments.name = ? AND runs.status = 'RUNNING' AND "
            "runs.lifecycle_stage = 'active' ORDER BY runs.start_time DESC")


class RunningRun(NamedTuple):
    """A RUNNING MLflow run: its id, name, parent run's id and owner tag (a tune's)."""

    run_id: str
    name: str
    parent: str | None
    owner: str | None


def create_sqlite_store(path: Path) -> None:
    """Create the MLflow store at `path` if it is missing, atomically.

    The caller holds the store's writer lock, so any partial store left beside it is
    from a creator that died, and is removed.
    """
    if path.exists():
        return
    from mlflow.store.tracking.sqlalchemy_store import (
        SqlAlchemyStore,  # lazy: MLflow's import takes seconds
    )

    path.parent.mkdir(parents=True, exist_ok=True)
    for leftover in path.parent.glob(f".{path.name}{_PARTIAL}*"):
        leftover.unlink()
    partial = path.with_name(f".{path.name}{_PARTIAL}{os.getpid()}")
    store = SqlAlchemyStore(f"sqlite:///{partial}", (path.parent / "artifacts").as_uri())
    store.engine.dispose()  # no connection may outlive the rename
    os.replace(partial, path)


def read_running_runs(path: Path, experiment: str) -> list[RunningRun] | None:
    """The active RUNNING runs of `experiment` in the embedded store at `path`, read with
    SQLite alone, read-only (MLflow's import takes seconds, and `msexp status` during a
    sweep always finds its runs RUNNING); None where the store does not answer (not one,
    or tables MLflow changed): ask MLflow."""
    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro",
                                                uri=True, timeout=30)) as store:
            rows = store.execute(_RUNNING, (RunTag.PARENT, RunTag.OWNER, experiment))
            return [RunningRun(*row) for row in rows.fetchall()]
    except sqlite3.Error:
        return None
