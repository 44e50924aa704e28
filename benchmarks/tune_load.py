"""The same pick under load (issue 39, item 6): `msexp tune FILE --json`, `--runs` times
idle and `--runs` times beside two busy CPU processes (`while True: pass`, started before
and killed after each loaded run), each run in a fresh folder (new MLflow store, new
warm graphs). The conditions alternate in pairs, idle-loaded then loaded-idle (ABBA), so
that a drifting machine load falls on both alike.

The pick of a run is the `pick.config` of its JSON (the knob values; "no pick" where tune
exits 3), its ratio `pick.throughput_ratio`: its confirm trainings' samples/s over the
baseline's trainings of the same seeds (docs/tune.md, "The three phases"). Printed: a
row per run, then each condition's modal pick, how many of its runs agree with it, and
how many loaded picks equal the idle modal pick. Disagreement is a result, not an error:
the exit status is 1 only if a tune run fails.

FILE defaults to benchmarks/lenet-tune-load.yaml (sweeps/lenet-tune.yaml, smaller; why
in its comment). `--keep DIR` writes each run's JSON there (run-NN-CONDITION.json), so
that a pick can be traced to the figures it came from.

Usage: python benchmarks/tune_load.py [FILE] [--runs 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _sweeps import ENV, ROOT, busy  # noqa: E402

DEFAULT_FILE = ROOT / "benchmarks/lenet-tune-load.yaml"
BUSY = 2  # busy processes beside a loaded run
NO_PICK = 3  # tune's exit status for "no pick"


@dataclass
class TuneRun:
    condition: str
    pick: str
    ratio: float | None
    wall_s: float
    load: float  # the 1-minute load average as the run started


def tune(sweep_file: Path, condition: str, keep: Path | None) -> TuneRun:
    """One `msexp tune --json` in a fresh folder, its JSON written to `keep` if given;
    raises SystemExit if it fails."""
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder:
        began = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "msexp", "tune", str(sweep_file),
                               "--json"], cwd=folder, capture_output=True, text=True, env=ENV)
        wall = time.perf_counter() - began
    if done.returncode not in (0, NO_PICK):
        raise SystemExit(f"msexp tune {sweep_file} ({condition}) exited {done.returncode}:\n"
                         + done.stderr[-2000:])
    if keep is not None:
        keep.write_text(done.stdout)
    pick = json.loads(done.stdout)["pick"]
    if pick is None:
        return TuneRun(condition, "no pick", None, wall, load)
    knobs = " ".join(f"{k}={v}" for k, v in pick["config"].items()) or "fixed"
    return TuneRun(condition, knobs, pick["throughput_ratio"], wall, load)


def order(runs: int) -> list[str]:
    """`runs` of each condition, in pairs alternately idle-first and loaded-first."""
    pairs = [("idle", "loaded") if i % 2 == 0 else ("loaded", "idle") for i in range(runs)]
    return [condition for pair in pairs for condition in pair]


def run(sweep_file: Path, condition: str, keep: Path | None) -> TuneRun:
    if condition == "idle":
        return tune(sweep_file, condition, keep)
    with busy(BUSY):
        return tune(sweep_file, condition, keep)


def report(results: list[TuneRun]) -> None:
    print(f"{'run':>3}  {'condition':<9} {'load':>5}  {'pick':<44} {'ratio':>6} {'wall s':>7}")
    for i, r in enumerate(results, 1):
        ratio = f"{r.ratio:.3f}" if r.ratio is not None else "-"
        print(f"{i:>3}  {r.condition:<9} {r.load:>5.2f}  {r.pick:<44} {ratio:>6} "
              f"{r.wall_s:>7.1f}")
    modal = {}
    for condition in ("idle", "loaded"):
        picks = Counter(r.pick for r in results if r.condition == condition)
        modal[condition], agree = picks.most_common(1)[0]
        print(f"{condition} modal pick: {modal[condition]} ({agree} of "
              f"{sum(picks.values())} runs agree)")
    same = sum(r.pick == modal["idle"] for r in results if r.condition == "loaded")
    loaded = sum(r.condition == "loaded" for r in results)
    print(f"loaded picks equal to the idle modal pick: {same} of {loaded}")


def _exit_on_term(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # so that busy() kills its processes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", nargs="?", type=Path, default=DEFAULT_FILE)
    parser.add_argument("--runs", type=int, default=5, help="runs of each condition")
    parser.add_argument("--keep", type=Path, help="a folder for each run's JSON")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _exit_on_term)
    sweep_file = args.file.resolve()
    results = []
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    for i, condition in enumerate(order(args.runs), 1):
        keep = args.keep / f"run-{i:02d}-{condition}.json" if args.keep else None
        results.append(run(sweep_file, condition, keep))
        r = results[-1]
        print(f"  {condition}: {r.pick}, {r.wall_s:.0f} s", file=sys.stderr, flush=True)
    report(results)


if __name__ == "__main__":
    main()
