"""One process vs data-parallel msrun ranks on the same trial and the same global batch.

Each repeat runs, in alternation, the trial with `devices: 1` and with `devices: N`
through msexp's runner (fresh processes, start-up included in wall_s). Prints the
median training throughput (samples/s over the global batch, steady-state updates) and
wall time of each, and the ratio N / 1.

Usage: python benchmarks/distributed.py [--epochs 3] [--batch 64 256] [--devices 2]
       [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from msexp.experiment import load_experiment  # noqa: E402
from msexp.runner import TrialProcess  # noqa: E402
from msexp.space import parse_params  # noqa: E402


def trial(folder: Path, name: str, epochs: int, batch: int, devices: int) -> tuple[float, float]:
    """(wall_s, samples_per_s) of one mlp_digits trial."""
    knobs = load_experiment("mlp_digits").knobs
    fixed = {"epochs": epochs, "batch_size": batch, "devices": devices}
    params = parse_params("bench", knobs, fixed, {}).resolve({})
    request = {"experiment": "mlp_digits", "params": params, "target": None, "data": None,
               "events": str(folder / f"{name}.jsonl"), "log": str(folder / f"{name}.log")}
    runner = TrialProcess(cwd=ROOT)
    began = time.perf_counter()
    result = runner.run(request, timeout=600)
    wall = time.perf_counter() - began
    runner.close()
    assert result.status.value == "COMPLETE", result.error
    return wall, result.metrics["samples_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    counts = (1, args.devices)
    print(f"mlp_digits, {args.epochs} epochs, median of {args.repeats} alternating runs")
    print(f"{'batch':>5} {'devices':>7} {'wall_s':>8} {'samples/s':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for batch in args.batch:
            runs: dict[int, list[tuple[float, float]]] = {n: [] for n in counts}
            for i in range(args.repeats):
                for n in counts:
                    runs[n].append(trial(Path(tmp), f"b{batch}-d{n}-{i}", args.epochs, batch, n))
            med = {n: (statistics.median(w for w, _ in v), statistics.median(s for _, s in v))
                   for n, v in runs.items()}
            for n in counts:
                print(f"{batch:5d} {n:7d} {med[n][0]:8.2f} {med[n][1]:10.0f}")
            print(f"batch {batch}: {args.devices} / 1 process throughput ratio "
                  f"{med[args.devices][1] / med[1][1]:.3f}, wall-time ratio "
                  f"{med[args.devices][0] / med[1][0]:.3f}")


if __name__ == "__main__":
    main()
