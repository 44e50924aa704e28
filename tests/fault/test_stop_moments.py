"""Ctrl-C, SIGTERM and a second Ctrl-C at each moment of a real `mlp_digits` sweep: each
is acknowledged at once with one "stopping:" line, then the trials table (or, before any
trial finished, a line that says so) and the resume line, with exit 130 (143 for
SIGTERM) and no traceback; no process is left, and the next run resumes: in the end
every point has one trial and one run, and a trial stopped after an epoch resumed from
its checkpoint."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import msexp_cmd, write
from tests.fault.conftest import (
    DEADLINE_S,
    assert_invariants,
    assert_no_process_left,
    load_study,
    wait_for,
)

pytestmark = pytest.mark.slow  # real sweeps in worker processes (tests/README.md: tiers)

POINTS = [{"lr": 0.01}, {"lr": 0.02}, {"lr": 0.03}]
SWEEP = """
    name: {name}
    experiment: mlp_digits
    fixed: {{epochs: 6, batch_size: 16, hidden: 64}}
    params:
      lr: [0.01, 0.02, 0.03]
"""
RESUME = "interrupted: run the same command again to resume"
NOTHING_YET = "no trial has finished yet"
ACK = re.compile(r"^stopping: (no trial running|trials? ([\d, and]+) will resume from "
                 r"(its|their) last checkpoints?)", re.MULTILINE)
SIGTERM_BIT = 1 << (signal.SIGTERM - 1)  # in /proc/PID/status SigCgt: msexp's handlers are in


class Running:
    """`msexp ARGS` in a process, its output read as it comes."""

    def __init__(self, *args: str):
        self.launched = time.time()
        self.proc = subprocess.Popen(msexp_cmd(*args), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def said(self, text: str) -> Callable[[], bool]:
        return lambda: text in self.output

    def handlers_in(self) -> bool:
        """msexp has its stop handlers (Python itself catches only SIGINT)."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        caught = int(re.search(r"SigCgt:\s*([0-9a-f]+)", status).group(1), 16)
        return bool(caught & SIGTERM_BIT)

    def at(self, what: str, done: Callable[[], bool], signum: int) -> bool:
        """Send `signum` once `done()`; False if the process ended first."""
        if not wait_for(what, done, self.proc):
            return False
        self.proc.send_signal(signum)
        return True

    def end(self) -> tuple[int, str]:
        self.proc.wait(DEADLINE_S)
        self.reader.join(DEADLINE_S)
        return self.proc.returncode, self.output


def attempt_events(study: str, launched: float) -> list[list[dict]]:
    """The events of each trial attempt started after `launched`."""
    found = []
    for path in Path(f"mlruns/trials/{study}").glob("trial-*/events.jsonl"):
        try:
            events = [json.loads(line) for line in path.read_text().splitlines() if line]
        except (OSError, ValueError):  # being written
            continue
        if events and events[0].get("event") == "start" and events[0]["t"] > launched:
            found.append(events)
    return found


def compiling(study: str, run: Running) -> Callable[[], bool]:
    """A trial of this run has started and reported no epoch of its own yet."""
    return lambda: any(not _trained(events) for events in attempt_events(study, run.launched))


def training(study: str, run: Running) -> Callable[[], bool]:
    """A trial of this run has trained an epoch beyond the checkpoint it resumed from."""
    return lambda: any(_trained(events) for events in attempt_events(study, run.launched))


def _trained(events: list[dict]) -> bool:
    resumed = events[0].get("resumed_from", 0)
    return any(e["event"] == "epoch" and e["epoch"] > resumed for e in events)


def assert_reported(code: int, output: str, signum: int, study: str, mark: str,
                    running: list[int] | None = None) -> list[int]:
    """The stop's exit code, its acknowledgement (naming `running` where given), the table
    (or the line for a study with no finished trial) and the resume line, in that order;
    no traceback, no process left. Returns the trials the acknowledgement named."""
    assert code == 128 + signum, output
    assert "Traceback" not in output, output
    ack = ACK.search(output)
    assert ack, output
    named = [int(n) for n in re.findall(r"\d+", ack.group(2) or "")]
    if running is not None:
        assert named == running, output
    after = output[ack.end():]
    table = after.find(f"{study}: trials")
    shown = table if table >= 0 else after.find(NOTHING_YET)
    assert 0 <= shown < after.find(RESUME), output
    assert_no_process_left(mark)
    return named


def assert_named_trials_wait(study: str, named: list[int]) -> None:
    """The trials the acknowledgement named are queued again, to resume."""
    states = {t.number: t.state.name for t in load_study(study).trials}
    assert all(states[n] == "WAITING" for n in named), states


def test_a_stop_at_each_moment_is_reported_and_resumed(mark: str) -> None:
    # mutation: `interrupts.install(held=False)` in __main__ fails it at start-up (130 and
    # nothing printed); no `on_sweep_stopping` call in Sweep._interrupt fails it at compiling
    sweep = str(write(Path.cwd() / "moments.yaml", SWEEP.format(name="moments")))

    starting = Running("sweep", sweep)  # before any store exists
    assert starting.at("msexp's handlers", starting.handlers_in, signal.SIGINT)
    assert_reported(*starting.end(), signal.SIGINT, "moments", mark, running=[])
    assert NOTHING_YET in starting.output
    assert not Path("mlruns/optuna.journal").exists(), "a stop at start-up makes no store"

    stores = Running("sweep", sweep)  # the study's store being made
    assert stores.at("the journal", Path("mlruns/optuna.journal").exists, signal.SIGINT)
    assert_named_trials_wait("moments", assert_reported(*stores.end(), signal.SIGINT,
                                                        "moments", mark))

    compiled = Running("sweep", sweep)
    assert compiled.at("trial 0 compiles", compiling("moments", compiled), signal.SIGINT)
    assert_reported(*compiled.end(), signal.SIGINT, "moments", mark, running=[0])
    assert_named_trials_wait("moments", [0])

    trained = Running("sweep", sweep)
    assert trained.at("trial 0 trains", training("moments", trained), signal.SIGTERM)
    assert_reported(*trained.end(), signal.SIGTERM, "moments", mark, running=[0])
    assert_named_trials_wait("moments", [0])

    between = Running("worker", sweep)  # a worker's stop: the same report
    assert between.at("trial 0 ends", between.said("trial 0: COMPLETE"), signal.SIGINT)
    assert_named_trials_wait("moments", assert_reported(*between.end(), signal.SIGINT,
                                                        "moments", mark))
    assert re.search(r"│ 0 │ COMPLETE", between.output), "the table shows the finished trial"

    twice = Running("sweep", sweep)  # the second lands wherever the stop is by then
    assert twice.at("a trial trains", training("moments", twice), signal.SIGINT)
    twice.at("the stop's acknowledgement", twice.said("stopping:"), signal.SIGINT)
    assert_named_trials_wait("moments", assert_reported(*twice.end(), signal.SIGINT,
                                                        "moments", mark))

    final = Running("sweep", sweep)
    code, output = final.end()
    assert code == 0, output
    assert_invariants("moments", "moments", mark, POINTS)
    (start, *_) = [json.loads(line) for line in
                   Path("mlruns/trials/moments/trial-0000/events.jsonl").read_text().splitlines()]
    assert start["resumed_from"] >= 1, "trial 0 resumed from the checkpoint its SIGTERM left"


def test_mlflow_still_opening_then_a_second_ctrl_c(mark: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A tracking server that never answers: MLflow is still opening when the first Ctrl-C
    comes, so the sweep says it waits for it; the second stops the wait."""
    # mutation: Sweep._interrupt raising KeyboardInterrupt at a second stop (the old exit)
    # fails it: no "stopping now"
    sweep = str(write(Path.cwd() / "opening.yaml", SWEEP.format(name="opening")))
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "600")
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        run = Running("sweep", sweep, "--tracking-uri", uri)
        assert run.at("trial 0 trains", training("opening", run), signal.SIGINT)
        assert run.at("the stop's acknowledgement", run.said("MLflow is still opening"),
                      signal.SIGINT)
        code, output = run.end()
    assert_reported(code, output, signal.SIGINT, "opening", mark, running=[0])
    assert "stopping now, without waiting for MLflow" in output
    assert_named_trials_wait("opening", [0])
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_TIMEOUT")
    final = Running("sweep", sweep)
    code, output = final.end()
    assert code == 0, output
    assert_invariants("opening", "opening", mark, POINTS)
