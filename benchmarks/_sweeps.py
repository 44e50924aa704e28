"""Shared by the benchmarks: run `msexp sweep` in a fresh folder and hold it to its limit.

The physical limit of a sweep on one slot is one process start-up (Python, MindSpore and
msexp's training loop imported) plus, over its trials, what each trial measures inside
itself: `train_s`, the loop's clock from the first update to the end of the last
evaluation (graph compile, updates and evaluations). Everything else is orchestration:
claims, the MLflow and Optuna writes, the trial's workload build, events.
"""

from __future__ import annotations

import ctypes
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from msexp.execution.protocol import Result, Start, read_events  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
IMPORTS = "import mindspore, msexp.training.loop"


def _die_with_parent() -> None:
    """In a busy child: SIGKILL when this benchmark dies, even by SIGKILL (Linux)."""
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


@contextmanager
def busy(count: int) -> Iterator[None]:
    """`count` processes spinning on a CPU each (`while True: pass`), killed on leaving
    however it is left: the contention a loaded run is measured under."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                 preexec_fn=_die_with_parent) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


@dataclass
class SweepRun:
    """One `msexp sweep`: its wall time and what its trials measured inside themselves."""

    wall_s: float
    train_s: list[float]
    compile_s: list[float]
    warm: int
    metrics: list[dict]
    output: str

    def limit_s(self, startup_s: float) -> float:
        return startup_s + sum(self.train_s)

    def outside_per_trial_s(self, startup_s: float) -> float:
        """Seconds per trial spent outside one start-up and the trials' own clocks."""
        return (self.wall_s - self.limit_s(startup_s)) / len(self.train_s)


def run_sweep(sweep_file: Path, *flags: str) -> SweepRun:
    """`msexp sweep SWEEP_FILE FLAGS` in a fresh folder (new MLflow and Optuna stores)."""
    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "msexp", "sweep", str(sweep_file),
                               *flags], cwd=tmp, check=True, capture_output=True, text=True,
                              env={**ENV, "COLUMNS": "120"})
        wall = time.perf_counter() - began
        metrics, warm = [], 0
        for path in sorted(Path(tmp, "mlruns", "trials").glob("*/*/events.jsonl")):
            for event in read_events(path):
                warm += isinstance(event, Start) and event.warm
                if isinstance(event, Result):
                    metrics.append(event.metrics)
    return SweepRun(wall, [m["train_s"] for m in metrics],
                    [m.get("compile_s", 0.0) for m in metrics], warm, metrics, done.stdout)


def startup_s(repeats: int = 3) -> float:
    """Median wall time of a fresh Python process that imports MindSpore and msexp's loop."""
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", IMPORTS], check=True, env=ENV, cwd=ROOT,
                       capture_output=True)
        times.append(time.perf_counter() - began)
    return statistics.median(times)
