"""Warm trials: an 80-trial TPE study over lr and momentum, warm and cold, side by side.

Every trial has the same graphs (mlp_digits, hidden 64, 1 epoch, batch 256): only
Parameter values differ. Each study runs as the `msexp sweep` command in a fresh folder
(fresh stores), once as shipped (warm: a worker reuses its last trial's graphs) and once
with `--cold` (every trial compiles). Prints the wall time per trial of each, the ratio,
how many trials ran warm, what the trials report as compile time, and the
orchestration time per trial outside one start-up and the trials' own clocks
(see `_sweeps`).

Usage: python benchmarks/warm_trials.py [--trials 80] [--warm-only]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._sweeps import SweepRun, run_sweep, startup_s  # noqa: E402


def study(trials: int, cold: bool) -> SweepRun:
    """One `msexp sweep` of the study, warm (as shipped) or `--cold`."""
    sweep = {"name": "warm", "experiment": "mlp_digits", "method": "tpe",
             "budget": {"trials": trials, "workers": 1},
             "fixed": {"epochs": 1, "batch_size": 256, "hidden": 64},
             "params": {"lr": {"low": 1e-3, "high": 0.3, "log": True},
                        "momentum": {"low": 0.5, "high": 0.99}}}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "warm.yaml"
        path.write_text(yaml.safe_dump(sweep))
        return run_sweep(path, *(["--cold"] if cold else []))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=80)
    parser.add_argument("--warm-only", action="store_true", help="skip the cold study")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    start = startup_s()
    runs = {"warm": study(args.trials, cold=False)}
    if not args.warm_only:
        runs["cold"] = study(args.trials, cold=True)
    print(f"{args.trials}-trial TPE study, mlp_digits hidden 64, 1 epoch, batch 256, 1 worker; "
          f"one start-up {start:.2f} s")
    print(f"{'':6} {'wall s':>8} {'s/trial':>8} {'warm trials':>11} {'compile_s':>10} "
          f"{'outside s/trial':>15}")
    for name, run in runs.items():
        print(f"{name:6} {run.wall_s:8.1f} {run.wall_s / args.trials:8.3f} {run.warm:11d} "
              f"{statistics.median(run.compile_s):10.3f} {run.outside_per_trial_s(start):15.3f}")
    if "cold" in runs:
        print(f"cold / warm: {runs['cold'].wall_s / runs['warm'].wall_s:.2f}x")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
