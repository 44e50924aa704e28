"""Warm trials: an 80-trial TPE study over lr and momentum, warm and cold, side by side.

Every trial has the same graphs (mlp_digits, hidden 64, 1 epoch, batch 256): only
Parameter values differ. Each study runs as the `msexp sweep` command in a fresh folder
(fresh stores), once as shipped (warm: a worker reuses its last trial's graphs) and once
with `--cold` (every trial compiles). Prints the wall time per trial of each, the ratio,
how many trials ran warm, and what the trials report as compile time.

Usage: python benchmarks/warm_trials.py [--trials 80]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from msexp.execution.protocol import Result, Start, read_events  # noqa: E402


def study(trials: int, cold: bool) -> tuple[float, int, float]:
    """(wall seconds, trials run warm, median compile_s) of one `msexp sweep`."""
    sweep = {"name": "warm", "experiment": "mlp_digits", "method": "tpe",
             "budget": {"trials": trials, "workers": 1},
             "fixed": {"epochs": 1, "batch_size": 256, "hidden": 64},
             "params": {"lr": {"low": 1e-3, "high": 0.3, "log": True},
                        "momentum": {"low": 0.5, "high": 0.99}}}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "warm.yaml").write_text(yaml.safe_dump(sweep))
        began = time.perf_counter()
        subprocess.run([sys.executable, "-m", "msexp", "sweep", "warm.yaml",
                        *(["--cold"] if cold else [])], cwd=tmp, check=True,
                       capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        wall = time.perf_counter() - began
        warm, compile_s = 0, []
        for path in Path(tmp, "mlruns", "trials").glob("*/*/events.jsonl"):
            for event in read_events(path):
                warm += isinstance(event, Start) and event.warm
                if isinstance(event, Result):
                    compile_s.append(event.metrics.get("compile_s", 0.0))
    return wall, warm, statistics.median(compile_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=80)
    args = parser.parse_args()
    warm = study(args.trials, cold=False)
    cold = study(args.trials, cold=True)
    print(f"{args.trials}-trial TPE study, mlp_digits hidden 64, 1 epoch, batch 256, 1 worker")
    print(f"{'':6} {'wall s':>8} {'s/trial':>8} {'warm trials':>11} {'compile_s':>10}")
    for name, (wall, n_warm, compile_s) in (("warm", warm), ("cold", cold)):
        print(f"{name:6} {wall:8.1f} {wall / args.trials:8.3f} {n_warm:11d} {compile_s:10.3f}")
    print(f"cold / warm: {cold[0] / warm[0]:.2f}x")


if __name__ == "__main__":
    main()
