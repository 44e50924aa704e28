"""Sweep efficiency on benchmarks/accum_mlp.yaml: msexp with 1 and 2 workers vs a shell loop.

Prints, side by side in one run:
  efficiency = sum(train+eval time of the trials) / (sweep wall time x workers)
  for 1 and 2 workers, the 2-vs-1 speed-up, and msexp's wall time against a plain
  shell loop that runs a hand-written MindSpore script once per configuration. The same
  loop run two scripts at a time shows how much two parallel jobs gain on this machine.
Each msexp sweep runs as the `msexp sweep` command in a fresh folder (fresh stores).

Usage: python benchmarks/sweep_efficiency.py [--sweep benchmarks/accum_mlp.yaml]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from msexp.execution.protocol import Result, read_events  # noqa: E402


def msexp_sweep(sweep: Path, workers: int) -> tuple[float, float]:
    """(wall seconds of `msexp sweep`, sum of the trials' train+eval seconds)."""
    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        subprocess.run([sys.executable, "-m", "msexp", "sweep", str(sweep), "--workers",
                        str(workers)], cwd=tmp, check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
        wall = time.perf_counter() - began
        busy = 0.0
        for events in Path(tmp, "mlruns", "trials").glob("*/*/events.jsonl"):
            busy += sum(e.metrics["train_s"] for e in read_events(events)
                        if isinstance(e, Result))
    return wall, busy


def shell_loop(sweep: Path, at_once: int = 1) -> float:
    """Wall seconds of a bash loop running the hand-written script once per configuration,
    `at_once` scripts at a time."""
    spec = yaml.safe_load(sweep.read_text())
    fixed = spec["fixed"]
    micro_sizes = spec["params"]["micro_size"]
    script = (f"{sys.executable} benchmarks/handwritten_mlp.py {fixed['epochs']} "
              f"{fixed['batch_size']} fused")
    batches = [micro_sizes[i:i + at_once] for i in range(0, len(micro_sizes), at_once)]
    loop = "; ".join(" & ".join(f"{script} {m} > /dev/null" for m in batch) + "; wait"
                     for batch in batches)
    began = time.perf_counter()
    subprocess.run(["bash", "-c", loop], cwd=ROOT, check=True)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=Path, default=ROOT / "benchmarks" / "accum_mlp.yaml")
    args = parser.parse_args()
    sweep = args.sweep.resolve()
    loop = shell_loop(sweep)
    loop_pairs = shell_loop(sweep, at_once=2)
    one_wall, one_busy = msexp_sweep(sweep, 1)
    two_wall, two_busy = msexp_sweep(sweep, 2)
    print(f"{sweep.name}: {len(yaml.safe_load(sweep.read_text())['params']['micro_size'])} "
          f"trials, {os.cpu_count()} cores")
    print(f"{'':24} {'wall_s':>8} {'busy_s':>8} {'efficiency':>10}")
    print(f"{'shell loop':24} {loop:8.2f}")
    print(f"{'shell loop, 2 at a time':24} {loop_pairs:8.2f}")
    print(f"{'msexp, 1 worker':24} {one_wall:8.2f} {one_busy:8.2f} {one_busy / one_wall:10.2f}")
    print(f"{'msexp, 2 workers':24} {two_wall:8.2f} {two_busy:8.2f} "
          f"{two_busy / (2 * two_wall):10.2f}")
    print(f"msexp 1 worker / shell loop wall time: {one_wall / loop:.2f}")
    print(f"2 workers speed-up over 1: {one_wall / two_wall:.2f}x "
          f"(the machine's ceiling: the shell loop 2 at a time is {loop / loop_pairs:.2f}x "
          "faster than 1 at a time)")


if __name__ == "__main__":
    main()
