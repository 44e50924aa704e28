"""A new embedded MLflow store is created whole or not at all.

MLflow creates a SQLite store's tables in dozens of migrations; a process killed
midway leaves a database that every later client refuses ("duplicate column name").
So a new store is made under a temporary name and renamed into place when complete.
"""

from __future__ import annotations

import os
from pathlib import Path

_PARTIAL = ".creating-"


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
