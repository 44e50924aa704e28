"""Two workers on one study, one of them stopped midway; an MLflow server that dies and
comes back mid-sweep. Every promise holds after each."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from tests.conftest import msexp_cmd, write
from tests.fault.conftest import (
    DEADLINE_S,
    MlflowServer,
    assert_invariants,
    completed,
    load_study,
    wait_for,
)

pytestmark = pytest.mark.slow  # trials in worker processes (tests/README.md: tiers)

GRID = """
    name: two-grid
    experiment: broken:build
    budget: {retries: 20}
    fixed: {epochs: 2, hidden: 16}
    params:
      lr: [0.01, 0.02, 0.03, 0.04]
"""
TPE = """
    name: two-tpe
    experiment: broken:build
    method: tpe
    budget: {trials: 4, retries: 20}
    fixed: {epochs: 2, hidden: 16}
    params:
      lr: {low: 0.001, high: 0.1, log: true}
"""
GRID_POINTS = [{"lr": lr} for lr in (0.01, 0.02, 0.03, 0.04)]


@pytest.mark.parametrize(("text", "planned", "signum"), [
    (GRID, GRID_POINTS, signal.SIGKILL), (TPE, 4, signal.SIGTERM)], ids=["grid", "tpe"])
def test_two_workers_one_stopped_midway(mark: str, text: str, planned: list | int,
                                        signum: int) -> None:
    name = "two-grid" if planned != 4 else "two-tpe"
    sweep = write(Path.cwd() / f"{name}.yaml", text)
    workers = [subprocess.Popen(msexp_cmd("worker", str(sweep)), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    wait_for("a first trial", lambda: completed(name) > 0, workers[1])
    workers[0].send_signal(signum)
    outputs = [w.communicate(timeout=DEADLINE_S)[0] for w in workers]
    assert workers[1].returncode == 0, outputs[1]
    again = subprocess.run(msexp_cmd("worker", str(sweep)), capture_output=True, text=True,
                           timeout=DEADLINE_S)
    assert again.returncode == 0, again.stdout + again.stderr
    assert_invariants(name, name, mark, planned)


def test_an_mlflow_server_that_dies_and_comes_back_loses_no_result(mark: str) -> None:
    gates = Path.cwd() / "gates"
    gates.mkdir()
    server = MlflowServer(Path.cwd() / "server")
    server.start()
    try:
        sweep = write(Path.cwd() / "outage.yaml", f"""
            name: outage
            experiment: tests.fault.gated:build
            fixed: {{gate_dir: {gates}}}
            params:
              point: [0, 1, 2]
        """)
        proc = subprocess.Popen(msexp_cmd("sweep", str(sweep), "--tracking-uri", server.uri),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        (gates / "go-0").touch()
        assert wait_for("trial 0 recorded", lambda: _run_id(0) not in (None, "spooled"), proc)
        server.kill()
        (gates / "go-1").touch()
        spool = Path("mlruns/spool")
        assert wait_for("trial 1 spooled", lambda: any(spool.glob("*.json")), proc)
        server.start()
        (gates / "go-2").touch()
        output, _ = proc.communicate(timeout=DEADLINE_S)
        assert proc.returncode == 0, output
        assert "kept in" in output
        assert_invariants("outage", "outage", mark, [{"point": p} for p in range(3)],
                          tracking_uri=server.uri)
    finally:
        server.kill()


def _run_id(number: int) -> str | None:
    try:
        trials = load_study("outage").get_trials(deepcopy=False)
    except (KeyError, OSError, ValueError):
        return None
    return next((t.user_attrs.get("mlflow_run_id") for t in trials if t.number == number
                 and t.state.is_finished()), None)
