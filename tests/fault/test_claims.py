"""A claim lost while frozen: a sweep stopped (SIGSTOP, with its host and trial child) past
its heartbeat's grace period wakes up to find its trial claimed by another process. It
stops its own run of that trial at once, before that run writes more (the new attempt took
the trial's folder: no checkpoint of the old one is published there), and leaves the trial
to its new owner; the next sweep finishes it."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from msexp.execution.process_tree import kill_marked
from msexp.keys import TrialKey
from msexp.search.heartbeat import STALE_AFTER_S
from msexp.search.source import TrialSource
from msexp.trial_folder import Fence
from tests.conftest import msexp_cmd, write
from tests.fault.conftest import DEADLINE_S, assert_invariants, load_study, wait_for

pytestmark = pytest.mark.slow  # a freeze past the grace period (about 2 min)

FOLDER = Path("mlruns/trials/lost/trial-0000")
EVENTS = FOLDER / "events.jsonl"


def checkpoints() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (FOLDER / "checkpoints").iterdir()}


def events() -> list[dict]:
    lines = EVENTS.read_text().splitlines() if EVENTS.exists() else []
    return [json.loads(line) for line in lines if line.strip()]


def heartbeat_age() -> float:
    return time.time() - load_study("lost").trials[0].user_attrs[TrialKey.HEARTBEAT]


def signal_all(processes: list[psutil.Process], signum: int) -> None:
    for proc in processes:
        try:
            proc.send_signal(signum)
        except psutil.NoSuchProcess:
            continue


def test_a_sweep_that_wakes_after_losing_its_claim_stops_its_run(mark: str) -> None:
    """The other process is this test, claiming with msexp's own `TrialSource` (stale check
    included), so nothing but the woken sweep writes the trial's events file."""
    sweep = write(Path("lost.yaml"), """
        name: lost
        experiment: broken:build
        fixed: {epochs: 30, hidden: 16, pause_s: 0.5}
        budget: {retries: 2}
        params: {lr: [0.1]}
    """)
    first = subprocess.Popen(msexp_cmd("sweep", str(sweep)), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    frozen: list[psutil.Process] = []
    try:
        assert wait_for("the sweep's trial trains",
                        lambda: any(e["event"] == "epoch" for e in events()), first)
        frozen = [psutil.Process(first.pid), *psutil.Process(first.pid).children(recursive=True)]
        signal_all(frozen, signal.SIGSTOP)
        written = len(events())
        wait_for("its heartbeat goes stale", lambda: heartbeat_age() > STALE_AFTER_S + 1,
                 deadline_s=DEADLINE_S + STALE_AFTER_S)
        other = TrialSource(load_study("lost"), None, total=1, samples=False,
                            kill_owned=kill_marked)
        try:
            claimed = other.claim()
            assert claimed is not None and claimed.number == 0
            Fence(FOLDER, "the other process").take()  # as its host does before a trial
            kept = checkpoints()
            assert "state.json" in kept
            signal_all(frozen, signal.SIGCONT)
            out, _ = first.communicate(timeout=DEADLINE_S)
            assert first.returncode == 0, out
            after = events()[written:]
            assert len(after) <= 1 and not [e for e in after if e["event"] == "result"], \
                f"the woken sweep's run went on: {[e['event'] for e in after]}"
            assert checkpoints() == kept, "the woken run published a checkpoint"
            other.put_back(claimed, "the other process let go")
        finally:
            other.close()
    finally:
        signal_all(frozen, signal.SIGCONT)
        if first.poll() is None:
            first.kill()
            first.wait()
    done = subprocess.run(msexp_cmd("sweep", str(sweep)), capture_output=True, text=True,
                          timeout=DEADLINE_S)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_invariants("lost", "lost", mark, [{"lr": 0.1}])
