"""kill -9, SIGTERM and SIGINT at random points of a sweep (seeded): after every signal no
process is left (kill -9 included: the trial processes die with their parent) and no
finished trial has two runs; after the final resume every promise holds."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import child_runs, mlflow_client, msexp_cmd, write
from tests.fault.conftest import (
    DEADLINE_S,
    assert_invariants,
    assert_no_process_left,
    completed,
    load_study,
    wait_for,
)

pytestmark = pytest.mark.slow  # trials in worker processes (tests/README.md: tiers)

CHAINS, SIGNALS_PER_CHAIN = 5, 4  # 20 signals in all
SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)
POINTS = [{"lr": 0.01}, {"lr": 0.02}, {"lr": 0.03}]
SWEEP = """
    name: faults
    experiment: broken:build
    budget: {retries: 20}
    fixed: {epochs: 2, hidden: 16}
    params:
      lr: [0.01, 0.02, 0.03]
"""
# what a stopped sweep may exit with: its own code (0 when the signal came after the last
# trial), or death by the signal when it lands while Python starts (a shell shows 128 + it)
EXITS = {signal.SIGKILL: {-9}, signal.SIGTERM: {143, -15, 0}, signal.SIGINT: {130, -2, 1, 0}}


def stages(study: str, k: int) -> dict[str, Callable[[], bool]]:
    """Points of a sweep to signal at, each an event the test can see."""
    folder = Path(f"mlruns/trials/{study}/trial-{k:04d}")
    return {
        "start": lambda: True,
        "trial": lambda: (folder / "events.jsonl").exists(),
        "epoch": lambda: '"epoch"' in _text(folder / "events.jsonl"),
        "told": lambda: completed(study) > k,
    }


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@pytest.mark.parametrize("chain", range(CHAINS))
def test_signals_at_random_points_keep_every_promise(chain: int, mark: str) -> None:
    rng = random.Random(1500 + chain)
    sweep = write(Path.cwd() / "faults.yaml", SWEEP)
    study = f"faults-{chain}"
    for _ in range(SIGNALS_PER_CHAIN):
        signum, k = rng.choice(SIGNALS), rng.randrange(len(POINTS))
        stage = rng.choice(list(stages(study, k)))
        proc = subprocess.Popen(msexp_cmd("sweep", str(sweep), "--study", study),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if wait_for(f"{stage} of trial {k}", stages(study, k)[stage], proc):
            time.sleep(rng.uniform(0, 0.5))
            proc.send_signal(signum)
        output, _ = proc.communicate(timeout=DEADLINE_S)
        assert proc.returncode in EXITS[signum], f"{signum!r} at {stage} {k}: {output}"
        assert_no_process_left(mark)
    final = subprocess.run(msexp_cmd("sweep", str(sweep), "--study", study),
                           capture_output=True, text=True, timeout=DEADLINE_S)
    assert final.returncode == 0, final.stdout + final.stderr
    assert_invariants(study, "faults", mark, POINTS)


def test_a_trial_out_of_retries_after_kill_9_has_its_one_failed_run(mark: str) -> None:
    """kill -9 of the sweep in mid-trial without retries: the next sweep finds the trial
    stale and fails it out of retries, and records it in MLflow first (FAILED, with the
    log its attempt left), so the point has one finished trial and one run."""
    sweep = write(Path.cwd() / "once.yaml", """
        name: once
        experiment: broken:build
        budget: {retries: 0}
        fixed: {epochs: 30, hidden: 16, pause_s: 0.3}
        params: {lr: [0.01]}
    """)
    first = subprocess.Popen(msexp_cmd("sweep", str(sweep)), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    assert wait_for("the trial trains", stages("once", 0)["epoch"], first)
    first.kill()
    first.wait()
    assert_no_process_left(mark)
    again = subprocess.run(msexp_cmd("sweep", str(sweep)), capture_output=True, text=True,
                           timeout=DEADLINE_S)
    assert again.returncode == 1 and "every trial failed" in again.stderr, again.stdout
    (trial,) = load_study("once").trials
    assert trial.state.name == "FAIL" and "out of retries" in trial.user_attrs["error"]
    (run,) = child_runs("once")
    assert run.info.status == "FAILED" and "out of retries" in run.data.tags["error"]
    assert trial.user_attrs["mlflow_run_id"] == run.info.run_id
    assert {k: run.data.params.get(k) for k in ("lr", "epochs", "pause_s")} == {
        "lr": "0.01", "epochs": "30", "pause_s": "0.3"}, "its params, as a run of it logs them"
    artifacts = {a.path for a in mlflow_client().list_artifacts(run.info.run_id)}
    assert {"trial.log", "events.jsonl"} <= artifacts
    assert_invariants("once", "once", mark, [{"lr": 0.01}], may_fail=True)
