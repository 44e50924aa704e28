"""A sweep against its physical limit: `msexp sweep` wall time over one process start-up
plus the compile, train and eval time its trials measure inside themselves.

Runs the sweep file (default `sweeps/accum.yaml`, the README's main command) as the
`msexp sweep` command in a fresh folder (new MLflow and Optuna stores), `--repeats`
times, and measures one start-up (a fresh Python importing MindSpore and msexp's loop,
median of 3) before each run. Prints per run: wall, limit, wall / limit (target <= 1.10),
the orchestration time per trial outside the trials' own clocks, and the trials'
compile time; then the median and spread over the runs (see `_sweeps` for the limit).

Usage: python benchmarks/sweep_efficiency.py [--sweep sweeps/accum.yaml] [--repeats 3] [--show]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._sweeps import run_sweep, startup_s  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=Path, default=ROOT / "sweeps" / "accum.yaml")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--show", action="store_true", help="print each sweep's output")
    args = parser.parse_args()
    sweep = args.sweep.resolve()
    print(f"{sweep.name}, {args.workers} worker(s), {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    print(f"{'run':>3} {'wall s':>7} {'start-up s':>10} {'sum train_s':>11} {'limit s':>7} "
          f"{'wall/limit':>10} {'outside s/trial':>15} {'sum compile_s':>13} {'warm':>4}")
    ratios, outside, walls = [], [], []
    for i in range(args.repeats):
        start = startup_s()
        run = run_sweep(sweep, "--workers", str(args.workers))
        limit = run.limit_s(start)
        ratios.append(run.wall_s / limit)
        outside.append(run.outside_per_trial_s(start))
        walls.append(run.wall_s)
        print(f"{i + 1:>3} {run.wall_s:7.1f} {start:10.2f} {sum(run.train_s):11.1f} "
              f"{limit:7.1f} {ratios[-1]:10.3f} {outside[-1]:15.3f} "
              f"{sum(run.compile_s):13.2f} {run.warm:4d}", flush=True)
        if args.show:
            print(run.output, flush=True)
        accuracy = Counter(round(m["eval_accuracy"], 4) for m in run.metrics)
        print(f"    eval_accuracy (value: trials) {dict(accuracy)}", flush=True)
    print(f"median of {args.repeats}: wall {statistics.median(walls):.1f} s "
          f"({min(walls):.1f}-{max(walls):.1f}), wall/limit {statistics.median(ratios):.3f} "
          f"({min(ratios):.3f}-{max(ratios):.3f}), outside {statistics.median(outside):.3f} "
          f"s/trial ({min(outside):.3f}-{max(outside):.3f}); load average at the end "
          f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
