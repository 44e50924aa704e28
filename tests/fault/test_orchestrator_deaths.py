"""Deaths of the orchestrator are not the trial's fault: kill -9 of a sweep running two
trials costs neither a retry, however often; a trial that was the only one running each
time its sweep died, past its retries, is failed in one line that names it."""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

import pytest
from optuna.trial import TrialState

from tests.conftest import msexp_cmd, write
from tests.fault.conftest import (
    DEADLINE_S,
    assert_invariants,
    assert_no_process_left,
    load_study,
    wait_for,
)

pytestmark = pytest.mark.slow  # trials in worker processes (tests/README.md: tiers)

KILLS = 4


def claimed_by(study: str, pid: int, count: int) -> bool:
    """Whether `count` trials of `study` are RUNNING under the sweep `pid`'s claim."""
    try:
        trials = load_study(study).get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    except (KeyError, OSError, ValueError):
        return False
    me = f"{socket.gethostname()}:{pid}"
    return sum(t.user_attrs.get("owner") == me for t in trials) == count


def test_kills_of_a_sweep_running_two_trials_cost_no_retry(mark: str) -> None:
    """retries 0: one counted death would fail a trial. Each kill -9 lands while the sweep
    runs both trials, so neither is to blame; the plain rerun after them completes both."""
    sweep = write(Path.cwd() / "pair.yaml", """
        name: pair
        experiment: broken:build
        budget: {retries: 0, workers: 2}
        fixed: {epochs: 3, hidden: 16, pause_s: 0.3}
        params: {lr: [0.01, 0.02]}
    """)
    for _ in range(KILLS):
        proc = subprocess.Popen(msexp_cmd("sweep", str(sweep)), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        assert wait_for("both trials claimed", lambda proc=proc: claimed_by("pair", proc.pid, 2),
                        proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert_no_process_left(mark)
    final = subprocess.run(msexp_cmd("sweep", str(sweep)), capture_output=True, text=True,
                           timeout=DEADLINE_S)
    assert final.returncode == 0, final.stdout + final.stderr
    assert "may take its orchestrator down" not in final.stdout + final.stderr
    trials = load_study("pair").trials
    assert [(t.state.name, t.user_attrs["attempt"]) for t in trials] == [("COMPLETE", 0)] * 2
    # mutation: a completed trial keeps why its last sweep died ("orchestrator ... died
    # while it ran 2 trials"): its error is cleared as it completes
    assert [t.user_attrs.get("error") for t in trials] == [None, None]
    assert_invariants("pair", "pair", mark, [{"lr": 0.01}, {"lr": 0.02}])


def test_a_trial_that_kills_its_sweep_each_time_is_failed_in_a_line_naming_it(
        mark: str) -> None:
    """retries 1: the trial that kills its sweep is queued again after the first death and
    failed at the second; the other trial completes, and no third sweep dies."""
    sweep = write(Path.cwd() / "killer.yaml", """
        name: killer
        experiment: broken:build
        budget: {retries: 1}
        fixed: {epochs: 1, hidden: 16}
        params: {mode: [kills_sweep, works]}
    """)
    died = 0
    while (done := subprocess.run(msexp_cmd("sweep", str(sweep)), capture_output=True,
                                  text=True, timeout=DEADLINE_S)).returncode == -9:
        died += 1
        assert died <= 2, "the killer ran a third time"
        assert_no_process_left(mark)
    assert died == 2
    trials = {t.params["mode"]: t for t in load_study("killer").trials}
    killer = trials["kills_sweep"]
    assert killer.state is TrialState.FAIL and trials["works"].state is TrialState.COMPLETE
    named = [line for line in (done.stdout + done.stderr).splitlines()
             if "may take its orchestrator down" in line]
    assert len(named) == 1 and f"trial {killer.number} failed: orchestrator " in named[0], \
        done.stdout + done.stderr
    assert "only this trial running, 2 times in a row" in killer.user_attrs["error"]
    assert_invariants("killer", "killer", mark, [{"mode": "kills_sweep"}, {"mode": "works"}],
                      may_fail=True)
