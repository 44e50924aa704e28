"""A trial's MLflow run while it trains, and a trial's end between Optuna and MLflow: the
run is made, with its params, before the trial ends; a sweep killed -9 after Optuna has a
trial but before MLflow does loses nothing, and the next sweep finishes that same run."""

from __future__ import annotations

import contextlib
import fcntl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import child_runs, msexp_cmd, write
from tests.fault.conftest import (
    DEADLINE_S,
    assert_invariants,
    completed,
    load_study,
    wait_for,
)

pytestmark = pytest.mark.slow  # trials in worker processes (tests/README.md: tiers)


@contextlib.contextmanager
def mlflow_writers_held() -> Iterator[None]:
    """Hold the embedded store's writer lock (`Tracker.writing`): no sweep writes to
    MLflow meanwhile."""
    with Path("mlruns/mlflow.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def runs_of(name: str, number: int) -> list:
    if not Path("mlruns/mlflow.db").exists():  # made whole, then renamed into place
        return []
    try:
        return [r for r in child_runs(name) if r.data.tags["msexp.trial"] == str(number)]
    except AttributeError:  # no experiment yet
        return []


def test_a_trials_run_is_made_while_it_trains_and_a_kill_after_the_tell_loses_nothing(
        mark: str) -> None:
    gates = Path.cwd() / "gates"
    gates.mkdir()
    sweep = write(Path.cwd() / "recording.yaml", f"""
        name: recording
        experiment: tests.fault.gated:build
        fixed: {{gate_dir: {gates}}}
        params:
          point: [0, 1]
    """)
    proc = subprocess.Popen(msexp_cmd("sweep", str(sweep)), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_for("trial 0's run, with its params, while it waits at its gate",
                        lambda: any(r.data.params for r in runs_of("recording", 0)), proc)
        (running,) = runs_of("recording", 0)
        assert running.info.status == "RUNNING" and running.data.params["point"] == "0"
        assert not running.data.metrics
        with mlflow_writers_held():
            (gates / "go-0").touch()
            assert wait_for("Optuna told of trial 0", lambda: completed("recording") == 1, proc)
            spooled = list(Path("mlruns/spool").glob("*-00000.json"))
            assert spooled, "the trial waits in the spool until MLflow has it"
            proc.kill()  # kill -9: the spool's lock goes with the process
            proc.wait(timeout=DEADLINE_S)
    finally:
        proc.kill()
        proc.communicate(timeout=DEADLINE_S)
    (gates / "go-1").touch()
    again = subprocess.run(msexp_cmd("sweep", str(sweep)), capture_output=True, text=True,
                           timeout=DEADLINE_S)
    assert again.returncode == 0, again.stdout + again.stderr
    assert_invariants("recording", "recording", mark, [{"point": 0}, {"point": 1}])
    (kept,) = runs_of("recording", 0)
    assert kept.info.run_id == running.info.run_id, "the run made as it trained, finished"
    assert kept.data.metrics["eval_accuracy"] > 0
    told = next(t for t in load_study("recording").trials if t.number == 0)
    assert told.user_attrs["mlflow_run_id"] == kept.info.run_id
