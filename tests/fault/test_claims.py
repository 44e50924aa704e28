"""A claim lost while frozen: a sweep stopped (SIGSTOP, with its host and trial child) past
its heartbeat's grace period wakes up to find its trial re-claimed by another sweep. It
stops its own run of that trial at once, before that run writes more (no second result
in the trial's folder), and leaves the trial to the other sweep."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from msexp.keys import TrialKey
from msexp.search.heartbeat import STALE_AFTER_S
from tests.conftest import msexp_cmd, write
from tests.fault.conftest import DEADLINE_S, assert_invariants, load_study, wait_for

pytestmark = pytest.mark.slow  # two sweeps and a freeze past the grace period (about 2 min)

FOLDER = Path("mlruns/trials/lost/trial-0000")


def events(name: str) -> list[dict]:
    path = FOLDER / "events.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [e for e in map(json.loads, filter(None, lines)) if e["event"] == name]


def trial_zero() -> dict:
    return dict(load_study("lost").trials[0].user_attrs)


def signal_all(processes: list[psutil.Process], signum: int) -> None:
    for proc in processes:
        try:
            proc.send_signal(signum)
        except psutil.NoSuchProcess:
            continue


def test_a_sweep_that_wakes_after_losing_its_claim_stops_its_run(mark: str) -> None:
    """Both runs write the same events file, which the second one emptied when it began:
    an epoch written twice there is one the frozen run wrote after it woke."""
    sweep = write(Path("lost.yaml"), """
        name: lost
        experiment: broken:build
        fixed: {epochs: 40, hidden: 16, pause_s: 0.5}
        budget: {retries: 2}
        params: {lr: [0.1]}
    """)
    first = subprocess.Popen(msexp_cmd("sweep", str(sweep)), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    second = None
    frozen: list[psutil.Process] = []
    try:
        # late enough that its reader's offset is past the other run's first lines
        assert wait_for("the first sweep's trial trains",
                        lambda: len(events("epoch")) >= 12, first)
        frozen = [psutil.Process(first.pid), *psutil.Process(first.pid).children(recursive=True)]
        signal_all(frozen, signal.SIGSTOP)
        first_owner = trial_zero()[TrialKey.OWNER]
        (first_start,) = events("start")
        wait_for("its heartbeat goes stale", lambda: time.time() - trial_zero()[
            TrialKey.HEARTBEAT] > STALE_AFTER_S + 1, deadline_s=DEADLINE_S + STALE_AFTER_S)
        second = subprocess.Popen(msexp_cmd("sweep", str(sweep)), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        assert wait_for("the second sweep's run of the trial trains", lambda: any(
            e["pid"] != first_start["pid"] for e in events("start")) and bool(events("epoch")),
            second)
        assert trial_zero()[TrialKey.OWNER] != first_owner
        signal_all(frozen, signal.SIGCONT)
        out_first, _ = first.communicate(timeout=DEADLINE_S)
        out_second, _ = second.communicate(timeout=DEADLINE_S)
    finally:
        signal_all(frozen, signal.SIGCONT)
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert first.returncode == 0, out_first
    assert second.returncode == 0, out_second + "\n--- the first sweep:\n" + out_first
    epochs = [e["epoch"] for e in events("epoch")]
    again = [epoch for i, epoch in enumerate(epochs) if epoch in epochs[:i]]
    assert len(again) <= 1, f"the frozen run went on after it woke: epochs {again} again"
    assert len(events("result")) == 1
    assert_invariants("lost", "lost", mark, [{"lr": 0.1}])
