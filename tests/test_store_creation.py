"""A kill -9 at any moment of a store's creation leaves a store the next run can use.

The kill points are events of the creation itself (the Nth SQL statement of MLflow's
migrations, the Nth record or half a record of the Optuna journal), not sleeps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each kill point starts a Python that imports MLflow

ROOT = Path(__file__).resolve().parents[1]

# Loaded into the killed process (sitecustomize): SIGKILL at the Nth statement.
_KILL_AT_STATEMENT = """
import os, signal
from sqlalchemy import event
from sqlalchemy.engine import Engine
count = [0]
@event.listens_for(Engine, "before_cursor_execute")
def _count(*args, **kwargs):
    count[0] += 1
    with open(os.environ["COUNT_FILE"], "w") as f:
        f.write(str(count[0]))
    if count[0] == int(os.environ.get("KILL_AT", "0")):
        os.kill(os.getpid(), signal.SIGKILL)
"""

# SIGKILL in the middle of the Nth append to the journal: half of its bytes are written.
_KILL_IN_APPEND = """
import json, os, signal
from optuna.storages.journal import JournalFileBackend
appended = [0]
original = JournalFileBackend.append_logs
def append_logs(self, logs):
    appended[0] += 1
    if appended[0] == int(os.environ["KILL_AT"]):
        text = "".join(json.dumps(log, separators=(",", ":")) + "\\n" for log in logs)
        with open(self._file_path, "ab") as f:
            f.write(text.encode()[: len(text) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    original(self, logs)
JournalFileBackend.append_logs = append_logs
"""


def _run_killed(tmp_path: Path, hook: str, code: str, kill_at: int) -> int:
    hooks = tmp_path / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(hook)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hooks), str(ROOT)]),
           "KILL_AT": str(kill_at), "COUNT_FILE": str(tmp_path / "count")}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path,
                          env=env, timeout=600).returncode


_OPEN_TRACKER = """
from msexp.tracking.runs import Tracker
Tracker()
"""
_CREATE_TRACKER = """
from msexp.tracking.runs import Tracker
Tracker().experiment_id("kept")
"""


def test_a_kill_at_any_statement_of_the_mlflow_store_creation_leaves_a_usable_store(
        tmp_path, monkeypatch):
    from msexp.tracking.runs import Tracker

    (tmp_path / "uncut").mkdir()
    assert _run_killed(tmp_path / "uncut", _KILL_AT_STATEMENT, _OPEN_TRACKER, 0) == 0
    total = int((tmp_path / "uncut" / "count").read_text())  # creation, then one query
    assert total > 50  # the migrations are many statements: the points below fall inside
    for kill_at in sorted({1, 2, total // 8, total // 3, total // 2, total - 5}):
        folder = tmp_path / f"kill-{kill_at}"
        folder.mkdir()
        assert _run_killed(folder, _KILL_AT_STATEMENT, _CREATE_TRACKER, kill_at) == -9
        if kill_at <= total // 2:  # surely inside the migrations: no store, not half of one
            assert not (folder / "mlruns" / "mlflow.db").exists()
        monkeypatch.chdir(folder)
        tracker = Tracker()
        experiment = tracker.experiment_id("after-the-kill")
        assert tracker.client.get_experiment(experiment).name == "after-the-kill"
        assert not list((folder / "mlruns").glob(".mlflow.db.creating-*"))


def test_a_kill_after_the_store_exists_keeps_what_it_holds(tmp_path, monkeypatch):
    from msexp.tracking.runs import Tracker

    monkeypatch.chdir(tmp_path)
    Tracker().experiment_id("kept")
    # the store exists: a new client runs no creation, and a kill at its first statement
    assert _run_killed(tmp_path, _KILL_AT_STATEMENT, _CREATE_TRACKER, 1) == -9
    assert Tracker().client.get_experiment_by_name("kept") is not None


_CREATE_STUDY = """
from msexp.search.study import open_study
from msexp.spec import load_spec
open_study(load_spec("sweep.yaml"), None)
"""


@pytest.mark.parametrize("kill_at", [1, 2, 3, 5, 8])
def test_a_kill_in_the_middle_of_any_journal_write_of_a_new_study_leaves_it_usable(
        tmp_path, monkeypatch, kill_at):
    from msexp.search.study import open_study
    from msexp.spec import load_spec

    (tmp_path / "sweep.yaml").write_text(textwrap.dedent("""
        name: killed-at-birth
        experiment: mlp_digits
        method: grid
        fixed: {epochs: 1}
        params:
          lr: [0.01, 0.1]
          micro_size: [1, 2]
        """))
    assert _run_killed(tmp_path, _KILL_IN_APPEND, _CREATE_STUDY, kill_at) == -9
    monkeypatch.chdir(tmp_path)
    study, _ = open_study(load_spec("sweep.yaml"), None)
    points = sorted(json.dumps(t.system_attrs["fixed_params"], sort_keys=True)
                    for t in study.get_trials())
    assert len(points) == 4 and len(set(points)) == 4  # every grid point queued once
