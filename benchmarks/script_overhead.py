"""A script trial through msexp vs the same script run by hand, side by side.

The script is tests/assets/scripts/train_digits.py: a LeNet-style network on the
bundled digits, written the tutorials' way (argparse, a dataset pipeline, Model.train
with LossMonitor and TimeMonitor, Model.eval). Each repeat runs, in alternation:
  hand   python train_digits.py --epochs N          (wall time of the process)
  msexp  the same command as one msexp trial: a worker process, the command started
         with the trial's flags, its output copied to the trial log and read for
         metrics (TrialResult.wall_s, the trial as the sweep times it)
Prints the medians and the ratio msexp / hand.

Usage: python benchmarks/script_overhead.py [--epochs 10] [--repeats 3]
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from msexp.execution.host import Host  # noqa: E402
from msexp.execution.protocol import Command, TrialRequest  # noqa: E402
from msexp.execution.result import Status  # noqa: E402

SCRIPTS = ROOT / "tests" / "assets" / "scripts"
SCRIPT = "train_digits.py"


def by_hand(epochs: int) -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, SCRIPT, f"--epochs={epochs}"], cwd=SCRIPTS, check=True,
                   capture_output=True)
    return time.perf_counter() - began


def through_msexp(epochs: int, folder: Path) -> tuple[float, float]:
    """(trial wall seconds, eval accuracy) of one msexp trial of the script."""
    runner = Host(cwd=ROOT)
    runner.prewarm()  # a sweep starts its workers while it opens the stores
    time.sleep(3)
    command = Command(["python", SCRIPT], str(SCRIPTS), "flags",
                      [r"'Accuracy': (?P<eval_accuracy>[0-9.]+)"])
    try:
        result = runner.run(TrialRequest(SCRIPT, {"epochs": epochs}, folder, command=command),
                            timeout=3600)
    finally:
        runner.kill()
    if result.status is not Status.COMPLETE:
        raise SystemExit(f"{result.status.value}: {result.error}\n{result.log_tail()}")
    return result.wall_s, result.metrics["eval_accuracy"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("GLOG_v", "2")
    hand, msexp = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            hand.append(by_hand(args.epochs))
            wall, accuracy = through_msexp(args.epochs, Path(tmp) / f"t{i}")
            msexp.append(wall)
            print(f"repeat {i}: hand {hand[-1]:.2f} s, msexp {wall:.2f} s "
                  f"(eval_accuracy {accuracy:.3f})", flush=True)
    h, m = statistics.median(hand), statistics.median(msexp)
    print(f"{SCRIPT}, {args.epochs} epochs, median of {args.repeats}")
    print(f"| run | wall_s |\n|---|---|\n| by hand | {h:.2f} |\n| msexp trial | {m:.2f} |")
    print(f"msexp / hand: wall-time ratio {m / h:.3f} (target <= 1.05)")


if __name__ == "__main__":
    main()
