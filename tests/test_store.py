"""A new embedded MLflow store is made whole, in place of a dead creator's partial one
(in-process; test_store_creation kills real creators at every step, in the slow tier)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from mlflow.tracking import MlflowClient

from msexp.keys import RunTag
from msexp.tracking.store import RunningRun, create_sqlite_store, read_running_runs
from msexp.tune.record import with_makers


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


# mutations: the listing ignores the run's status, its experiment, its deletion, a tag's
# key, or the order MLflow's search_runs gives (newest first)
def test_running_runs_are_read_from_the_store_without_mlflow(tmp_path: Path) -> None:
    path = tmp_path / "mlflow.db"
    create_sqlite_store(path)
    client = MlflowClient(f"sqlite:///{path}")
    ours, other = (client.create_experiment(name) for name in ("ours", "other"))
    assert read_running_runs(path, "ours") == []
    client.create_run(other, run_name="elsewhere")  # RUNNING, in another experiment
    done = client.create_run(ours)
    client.set_terminated(done.info.run_id, "FINISHED")
    deleted = client.create_run(ours)
    client.delete_run(deleted.info.run_id)
    assert read_running_runs(path, "ours") == []
    parent = client.create_run(ours, run_name="tune-profile", start_time=1000,
                               tags={RunTag.OWNER: "vm:12", "msexp.role": "sweep"})
    child = client.create_run(ours, run_name="#0 x=1", start_time=2000,
                              tags={RunTag.PARENT: parent.info.run_id})
    assert read_running_runs(path, "ours") == [
        RunningRun(child.info.run_id, "#0 x=1", parent.info.run_id, None),
        RunningRun(parent.info.run_id, "tune-profile", None, "vm:12")]
    assert [run.run_id for run in read_running_runs(path, "ours")] == \
        [run.info.run_id for run in client.search_runs([ours], "attributes.status = 'RUNNING'")]
    (tmp_path / "not.db").write_text("not a store")
    assert read_running_runs(tmp_path / "not.db", "ours") is None, "MLflow is asked"


# mutations: a child keeps its own (empty) owner; parents listed first
def test_a_running_child_is_made_by_its_running_parents_tune() -> None:
    parent = RunningRun("p", "tune-halve", None, "vm:12")
    child = RunningRun("c", "#3 O2", "p", None)
    orphan = RunningRun("o", "#4 O0", "gone-parent", "vm:13")
    sweep = RunningRun("s", "scale", None, None)
    assert with_makers([sweep, parent, child, orphan]) == [
        (child, "vm:12"), (orphan, "vm:13"), (sweep, None), (parent, "vm:12")]
