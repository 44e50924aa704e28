"""Bad input and faults: one line, the right exit code, before anything runs (issue 15)."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from msexp.cli import app
from msexp.search.storage import open_storage
from msexp.search.study import open_study
from msexp.spec import load_spec
from tests.conftest import write


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


def one_line(result) -> str:
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


def test_a_range_with_an_infinite_bound_is_refused(workdir: Path) -> None:
    sweep = write(workdir / "inf.yaml", """
        name: inf
        experiment: mlp_digits
        method: random
        params:
          lr: {low: 0.001, high: .inf}
    """)
    result = invoke("validate", str(sweep))
    assert result.exit_code == 2
    assert one_line(result) == f"{sweep}: params.lr.high: must be a finite number, got inf"


def test_a_storage_in_a_missing_folder_is_one_line_at_once(workdir: Path) -> None:
    started = time.monotonic()
    result = invoke("status", "--study", "x", "--storage", "sqlite:////nonexistent/x.db")
    assert result.exit_code == 1
    assert one_line(result) == ("cannot open the Optuna storage sqlite:////nonexistent/x.db "
                                "(folder /nonexistent does not exist)")
    assert time.monotonic() - started < 8, "no retries for a storage that is not there"


def test_a_sqlite_file_that_is_not_a_database_is_one_line(workdir: Path) -> None:
    write(workdir / "notes.db", "these are notes, not a database\n")
    result = invoke("status", "--study", "x", "--storage", "sqlite:///notes.db")
    assert result.exit_code == 1
    assert one_line(result) == ("cannot open the Optuna storage sqlite:///notes.db "
                                "(DatabaseError: file is not a database)")


def test_a_database_of_another_application_is_refused_and_left_alone(workdir: Path) -> None:
    with sqlite3.connect(workdir / "app.db") as db:
        db.execute("create table alembic_version (version_num text)")
        db.execute("create table experiments (id integer)")
    result = invoke("status", "--study", "x", "--storage", "sqlite:///app.db")
    assert result.exit_code == 1
    assert one_line(result) == ("sqlite:///app.db is not an Optuna database (it holds another "
                                "application's tables); give Optuna a database of its own")
    with sqlite3.connect(workdir / "app.db") as db:
        tables = {r[0] for r in db.execute("select name from sqlite_master")}
    assert tables == {"alembic_version", "experiments"}


def test_an_unreachable_postgresql_is_one_line_in_seconds(workdir: Path) -> None:
    started = time.monotonic()
    result = invoke("status", "--study", "x", "--storage", "postgresql://u:s3cret@127.0.0.1:9/x")
    assert result.exit_code == 1
    line = one_line(result)
    assert line.startswith("cannot open the Optuna storage postgresql://u:***@127.0.0.1:9/x (")
    assert "Connection refused" in line and "s3cret" not in line
    assert time.monotonic() - started < 8, "connection refused must not be retried"


@pytest.fixture
def journal(workdir: Path) -> Path:
    """A study in the default journal, as a sweep leaves it."""
    open_study(load_spec(write(workdir / "j.yaml", SWEEP)), None)
    return workdir / "mlruns/optuna.journal"


SWEEP = """
    name: j
    experiment: mlp_digits
    params: {micro_size: [1, 2]}
"""


def test_a_garbage_line_in_the_journal_is_refused_with_how_to_recover(journal: Path) -> None:
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join([*lines[:3], '{"op_code": 4, garbage\n', *lines[3:]]))
    result = invoke("status", "--study", "j")
    assert result.exit_code == 1
    assert one_line(result) == (f"{journal}: line 4 is not an Optuna journal record; keep a "
                                "copy, delete that line (or restore the file from a backup) "
                                "and run again")


def test_a_torn_last_journal_line_is_cut_before_the_next_append(journal: Path) -> None:
    whole = journal.read_bytes()
    journal.write_bytes(whole + b'{"op_code":5,"worker_id":"a')  # killed during a write
    study, created = open_study(load_spec(Path("j.yaml")), None)
    assert not created
    study.set_user_attr("after", 1)
    text = journal.read_bytes()
    assert text.startswith(whole) and text.endswith(b"\n")
    assert all(isinstance(json.loads(line), dict) for line in text.splitlines())
    assert optuna.load_study(study_name="j", storage=open_storage(None)).user_attrs["after"] == 1


def test_an_unwritable_mlruns_is_one_line(workdir: Path) -> None:
    write(workdir / "mlruns", "a file where the stores go\n")
    result = invoke("status", "--study", "x")
    assert result.exit_code == 1
    assert one_line(result).startswith("cannot use the Optuna storage mlruns/optuna.journal "
                                       "(FileExistsError: File exists: ")
    result = invoke("sync")
    assert result.exit_code == 1
    assert one_line(result).startswith("cannot reach the MLflow tracking store "
                                       "sqlite:///mlruns/mlflow.db (FileExistsError: ")
