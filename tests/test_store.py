"""A new embedded MLflow store is made whole, in place of a dead creator's partial one
(in-process; test_store_creation kills real creators at every step, in the slow tier)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from mlflow.tracking import MlflowClient

from msexp.tracking.store import create_sqlite_store, has_running_runs


def test_a_missing_store_is_made_whole_in_a_new_folder_and_a_dead_creators_part_removed(
        tmp_path: Path) -> None:
    path = tmp_path / "new" / "deeper" / "mlflow.db"
    (tmp_path / "new" / "deeper").mkdir(parents=True)
    dead = path.with_name(".mlflow.db.creating-999999")
    dead.write_text("half a store")
    other = path.with_name(".other.db.creating-999999")  # another store's creator
    other.write_text("not ours")

    create_sqlite_store(path)

    assert not dead.exists()
    assert other.read_text() == "not ours"
    assert sorted(p.name for p in path.parent.iterdir()) == [".other.db.creating-999999",
                                                              "mlflow.db"]
    client = MlflowClient(f"sqlite:///{path}")
    # the default experiment's artifacts beside the store, not beside a temporary name
    default = client.get_experiment("0").artifact_location
    assert default == f"{(path.parent / 'artifacts').as_uri()}/0"
    tables = {row[0] for row in sqlite3.connect(path).execute(
        "select name from sqlite_master where type='table'")}
    assert {"experiments", "runs", "metrics", "alembic_version"} <= tables


def test_a_store_whose_folder_is_missing_gets_the_folder(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "mlflow.db"
    create_sqlite_store(path)
    assert path.is_file()
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]


def test_an_existing_store_is_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "mlflow.db"
    path.write_bytes(b"someone's store")
    left = tmp_path / f".mlflow.db.creating-{os.getpid() + 1}"
    left.write_text("x")  # a live creator's part is not this caller's to remove
    create_sqlite_store(path)
    assert path.read_bytes() == b"someone's store"
    assert left.exists()


# mutations: has_running_runs ignores the run's status, its experiment, or its deletion
def test_running_runs_are_read_from_the_store_without_mlflow(tmp_path: Path) -> None:
    path = tmp_path / "mlflow.db"
    create_sqlite_store(path)
    client = MlflowClient(f"sqlite:///{path}")
    ours, other = (client.create_experiment(name) for name in ("ours", "other"))
    assert has_running_runs(path, "ours") is False
    client.create_run(other)  # RUNNING, in another experiment
    done = client.create_run(ours)
    client.set_terminated(done.info.run_id, "FINISHED")
    assert has_running_runs(path, "ours") is False
    deleted = client.create_run(ours)
    client.delete_run(deleted.info.run_id)
    assert has_running_runs(path, "ours") is False
    client.create_run(ours)
    assert has_running_runs(path, "ours") is True
    (tmp_path / "not.db").write_text("not a store")
    assert has_running_runs(tmp_path / "not.db", "ours") is None, "MLflow is asked"
