"""A new embedded MLflow store is created whole or not at all.

MLflow creates a SQLite store's tables in dozens of migrations; a process killed
midway leaves a database that every later client refuses ("duplicate column name").
So a new store is made under a temporary name and renamed into place when complete.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

_PARTIAL = ".creating-"
# MLflow's own tables (unchanged since MLflow 1.0): does an experiment have an active run
# that is RUNNING?
_RUNNING = ("SELECT 1 FROM runs JOIN experiments ON runs.experiment_id = "
            "experiments.experiment_id WHERE experiments.name = ? AND runs.status = "
            "'RUNNING' AND runs.lifecycle_stage = 'active' LIMIT 1")


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


def has_running_runs(path: Path, experiment: str) -> bool | None:
    """Whether the embedded store at `path` holds an active RUNNING run of `experiment`,
    read with SQLite alone, read-only (MLflow's import takes seconds: `msexp status` pays
    it only where the answer is yes); None where the store does not answer (not one, or
    tables MLflow changed): ask MLflow."""
    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro",
                                                uri=True, timeout=30)) as store:
            return store.execute(_RUNNING, (experiment,)).fetchone() is not None
    except sqlite3.Error:
        return None
