"""Running trials in worker processes: timeouts, stops, crashes, logs.

A failed trial is data, not an exception: `TrialProcess.run` always returns a
`TrialResult` whose status says what happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Callable

POLL_S = 0.05
STOP_GRACE_S = 1.5
LOG_TAIL_LINES = 40


class Status(str, Enum):
    """How a trial ended."""

    COMPLETE = "COMPLETE"
    FAILED = "FAILED"
    PRUNED = "PRUNED"
    TIMEOUT = "TIMEOUT"


@dataclass
class TrialResult:
    """Everything a trial produced, whatever its status."""

    status: Status
    metrics: dict[str, float] = field(default_factory=dict)
    epochs: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""
    data_source: str = ""
    impl: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0
    log_path: Path | None = None
    events_path: Path | None = None
    stop_s: float | None = None
    rank_logs: Path | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready copy (for the spool of results waiting for MLflow)."""
        data = dict(self.__dict__)
        data["status"] = self.status.value
        for key in ("log_path", "events_path", "rank_logs"):
            data[key] = str(data[key]) if data[key] else None
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrialResult:
        """Inverse of `to_json`."""
        data = dict(data, status=Status(data["status"]))
        for key in ("log_path", "events_path", "rank_logs"):
            data[key] = Path(data[key]) if data.get(key) else None
        return cls(**data)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of the trial's log."""
        if not self.log_path or not self.log_path.exists():
            return ""
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def last_epoch_metrics(self) -> dict[str, float]:
        """Per-epoch metrics of the last epoch that finished (for pruned/failed trials)."""
        return dict(self.epochs[-1]["metrics"]) if self.epochs else {}


OnEpoch = Callable[[dict[str, Any]], bool]
"""Called with each epoch event; returns True to stop (prune) the trial."""


class TrialProcess:
    """A worker process (`python -m msexp.trial`) that runs one trial at a time.

    The worker imports MindSpore once; on CPU it forks a fresh child per trial, so trials
    stay independent (own memory, own graphs) without paying the import each time. A
    worker that dies, or is killed for a timeout, is replaced by a new one.
    """

    def __init__(self, threads: int | None = None, cwd: Path | None = None,
                 slot: int | None = None):
        self.threads, self.cwd, self.slot = threads, cwd, slot
        self._proc: subprocess.Popen | None = None

    def _spawn(self) -> subprocess.Popen:
        env = dict(os.environ)
        if self.threads:
            env["MSEXP_THREADS"] = str(self.threads)
            env["OMP_NUM_THREADS"] = str(self.threads)
        if self.slot is not None:
            env["MSEXP_SLOT"] = str(self.slot)
        env.setdefault("GLOG_v", "2")
        return subprocess.Popen(
            [sys.executable, "-m", "msexp.trial"], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.cwd, env=env,
            start_new_session=True, text=True, preexec_fn=_die_with_parent)

    def prewarm(self) -> None:
        """Start the worker now, so it imports MindSpore before the first trial."""
        if self._proc is None or self._proc.poll() is not None:
            self._proc = self._spawn()

    def run(self, request: dict[str, Any], timeout: float, on_epoch: OnEpoch | None = None
            ) -> TrialResult:
        """Run one trial; never raises for anything the trial does."""
        events_path, log_path = Path(request["events"]), Path(request["log"])
        events_path.parent.mkdir(parents=True, exist_ok=True)
        events_path.write_text("")
        log_path.write_text("")
        started = time.monotonic()
        self.prewarm()
        proc = self._proc
        result = TrialResult(Status.FAILED, log_path=log_path, events_path=events_path)
        try:
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the worker died at start-up; reported below from its exit code
        reader = _EventReader(events_path)
        stop_sent_at: float | None = None
        ended = False
        while not ended:
            for event in reader.read():
                ended |= self._absorb(event, result, on_epoch)
                if result.status is Status.PRUNED and stop_sent_at is None:
                    stop_sent_at = time.monotonic()
                    self._signal(signal.SIGUSR1)
            if ended:
                break
            now = time.monotonic()
            if proc.poll() is not None:
                for event in reader.read():
                    ended |= self._absorb(event, result, on_epoch)
                if not ended and result.status is not Status.PRUNED:
                    result.status = Status.FAILED
                    result.error = exit_reason(proc.returncode)
                break
            if now - started > timeout:
                result.status = Status.TIMEOUT
                result.error = f"exceeded trial_timeout of {timeout:g} s"
                break
            if stop_sent_at is not None and now - stop_sent_at > STOP_GRACE_S:
                break
            time.sleep(POLL_S)
        if not ended:
            self.kill()  # whatever is left of this trial goes; the next trial gets a new worker
        now = time.monotonic()
        result.wall_s = now - started
        if stop_sent_at is not None:
            result.stop_s = now - stop_sent_at
        return result

    @staticmethod
    def _absorb(event: dict[str, Any], result: TrialResult, on_epoch: OnEpoch | None) -> bool:
        kind = event.get("event")
        if kind == "launch":
            result.rank_logs = Path(event["rank_logs"])
        elif kind == "start":
            result.data_source = event.get("data_source", "")
            result.impl = event.get("impl", {})
        elif kind == "epoch":
            result.epochs.append(event)
            if on_epoch and result.status is not Status.PRUNED and on_epoch(event):
                result.status = Status.PRUNED
        elif kind == "result":
            result.metrics = event["metrics"]
            result.status = Status.COMPLETE
        elif kind == "error" and result.status is not Status.PRUNED:
            result.status = Status.FAILED
            result.error = event["message"]
        return kind == "end"

    def _signal(self, signum: int) -> None:
        if self._proc and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._proc.pid, signum)

    def kill(self) -> None:
        """Kill the worker's process group: the worker, its trial and what that started."""
        proc, self._proc = self._proc, None
        if proc is not None:
            _kill_group(proc)
            proc.wait()


def start_workers(count: int, cwd: Path | None = None) -> list[TrialProcess]:
    """`count` trial processes, started now so that they import MindSpore while the
    caller opens its stores. Worker i gets cores / count CPU threads and, on GPU or
    Ascend, device i modulo the device count."""
    threads = max(1, (os.cpu_count() or 1) // count)
    workers = [TrialProcess(threads, cwd or Path.cwd(), slot) for slot in range(count)]
    for worker in workers:
        worker.prewarm()
    return workers


def _die_with_parent() -> None:
    """In the child: get SIGKILL when the orchestrator dies, even by kill -9 (Linux)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


class _EventReader:
    """Reads complete JSON lines appended to an events file."""

    def __init__(self, path: Path):
        self.path, self.offset, self.partial = path, 0, ""

    def read(self) -> list[dict[str, Any]]:
        with self.path.open("r", encoding="utf-8") as f:
            f.seek(self.offset)
            chunk = f.read()
            self.offset = f.tell()
        lines = (self.partial + chunk).split("\n")
        self.partial = lines.pop()
        return [json.loads(line) for line in lines if line.strip()]


def exit_reason(code: int) -> str:
    """How a process ended, from its return code (negative: the signal)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"trial process killed by {name}"
    return f"trial process exited with code {code}"
