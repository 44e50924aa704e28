"""kill -9 of `msexp tune` in mid-phase: `msexp status` shows the MLflow runs it left
RUNNING, and the next `msexp tune` ends them KILLED (the child in flight then gets its
record, which waited in the spool, delivered), so no run of the experiment stays RUNNING."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from msexp.keys import RunTag
from msexp.tune.record import PHASE
from tests.conftest import msexp_cmd, write
from tests.fault.conftest import (
    DEADLINE_S,
    assert_no_process_left,
    tracking_client,
    wait_for,
)

pytestmark = pytest.mark.slow  # trials in worker processes (tests/README.md: tiers)

SWEEP = """
    name: killed-tune
    experiment: broken:build
    objective: [{metric: eval_accuracy, direction: maximize}]
    budget: {trial_timeout: 120, workers: 1, repeats: 1}
    fixed: {hidden: 16, epochs: 1}
    params: {lr: [0.01, 0.02, 0.03]}
"""


def runs_of(experiment: str) -> list:
    """Its runs; none before msexp has made the store (a client opening a missing SQLite
    store creates it in place, under the sweep's feet)."""
    if not Path("mlruns/mlflow.db").exists():
        return []
    client = tracking_client()
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id]) if found else []


def profiled(pid: int) -> bool:
    """Whether tune `pid`'s profile phase has its parent run and a child of it."""
    runs = runs_of("killed-tune")
    parents = {r.info.run_id for r in runs if r.data.tags.get(RunTag.OWNER, "").endswith(f":{pid}")}
    return any(r.data.tags.get("mlflow.parentRunId") in parents for r in runs)


def test_the_runs_a_killed_tune_left_running_are_shown_then_ended_killed(mark: str) -> None:
    sweep = write(Path.cwd() / "tune.yaml", SWEEP)
    said = Path.cwd() / "first-tune.log"
    with said.open("w") as log:
        first = subprocess.Popen(msexp_cmd("tune", str(sweep), "--updates", "4"),
                                 stdout=log, stderr=subprocess.STDOUT)
    assert wait_for("a profile recorded", lambda: profiled(first.pid), first), said.read_text()
    first.kill()
    first.wait()
    assert_no_process_left(mark)
    left = {r.info.run_id: r for r in runs_of("killed-tune") if r.info.status == "RUNNING"}
    parents = [r for r in left.values() if r.data.tags.get(PHASE) == "profile"
               and "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1, "the profile phase's parent run was left RUNNING"

    status = subprocess.run(msexp_cmd("status", str(sweep)), capture_output=True, text=True,
                            timeout=DEADLINE_S)
    shown = [line for line in status.stdout.splitlines() if "left by msexp tune" in line]
    assert {line.split("(")[1].split(")")[0] for line in shown} == set(left), status.stdout
    assert all(f"the next `msexp tune {sweep}` ends it KILLED" in line for line in shown)

    again = subprocess.run(msexp_cmd("tune", str(sweep), "--updates", "4"),
                           capture_output=True, text=True, timeout=DEADLINE_S)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"ended {len(left)} MLflow run(s) that a killed msexp tune left RUNNING" in \
        again.stderr
    runs = runs_of("killed-tune")
    after = {r.info.run_id: r.info.status for r in runs}
    children = {run_id for run_id, run in left.items() if RunTag.PARENT in run.data.tags}
    assert {run_id: after.get(run_id) for run_id in set(left) - children} == dict.fromkeys(
        set(left) - children, "KILLED"), "each phase's parent run ended KILLED"
    for run_id in children:  # in flight: its record waited in the spool, and is delivered
        trial = {k: left[run_id].data.tags[k] for k in (RunTag.PARENT, RunTag.TRIAL)}
        (delivered,) = [r for r in runs if {k: r.data.tags.get(k) for k in trial} == trial]
        assert delivered.info.run_id != run_id and delivered.info.status == "FINISHED"
    assert not list(Path("mlruns/spool").glob("*.json")), "every record delivered"
    assert "RUNNING" not in after.values()
    assert set(after.values()) == {"KILLED", "FINISHED"}, "the rerun's own runs finished"
    assert_no_process_left(mark)
