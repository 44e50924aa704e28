"""msexp trial vs hand-written MindSpore loop: same configuration, side by side.

Each repeat runs, in alternation:
  msexp       one trial through msexp's runner (fresh process, import included) and its
              MLflow recording (child run, batched metrics, artifacts);
  hand/fused  python benchmarks/handwritten_mlp.py (grad + optimizer in one ms.jit step);
  hand/split  the same with grad and optimizer in two ms.jit functions;
  hand/buffers grads added into parameter buffers, then optimizer step (seed 000's
              Accumulator, the step msexp runs): msexp / hand/buffers is msexp's overhead.
Prints median wall time and training throughput of each, and the ratios msexp / hand.

Usage: python benchmarks/trial_overhead.py [--epochs 10] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from msexp.execution.host import Host  # noqa: E402
from msexp.execution.protocol import TrialRequest  # noqa: E402
from msexp.spec import trial_params  # noqa: E402
from msexp.spec.space import derived  # noqa: E402
from msexp.tracking.delivery import record_trial  # noqa: E402
from msexp.tracking.runs import Tracker  # noqa: E402


def msexp_trial(epochs: int, batch: int, folder: Path, tracker: Tracker, exp_id: str,
                parent: str, number: int) -> tuple[float, float]:
    params = trial_params("mlp_digits", {"epochs": epochs, "batch_size": batch})
    request = TrialRequest("mlp_digits", params, folder / str(number))
    runner = Host(cwd=ROOT)
    began = time.perf_counter()
    result = runner.run(request, timeout=600)
    record_trial(tracker, exp_id, parent, number, {**params, **derived(params)}, result,
                 time.time())
    wall = time.perf_counter() - began
    runner.kill()
    assert result.status.value == "COMPLETE", result.error
    return wall, result.metrics["samples_per_s"]


def handwritten(epochs: int, batch: int, style: str) -> tuple[float, float]:
    began = time.perf_counter()
    out = subprocess.run([sys.executable, "benchmarks/handwritten_mlp.py", str(epochs),
                          str(batch), style], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    wall = time.perf_counter() - began
    return wall, json.loads(out.stdout.strip().splitlines()[-1])["samples_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        tracker = Tracker(f"sqlite:///{folder / 'mlflow.db'}")
        exp_id = tracker.experiment_id("overhead")
        parent = tracker.client.create_run(exp_id).info.run_id
        runs: dict[str, list[tuple[float, float]]] = {
            "msexp": [], "hand/fused": [], "hand/split": [], "hand/buffers": []}
        for i in range(args.repeats):
            runs["msexp"].append(msexp_trial(args.epochs, args.batch, folder, tracker, exp_id,
                                             parent, i))
            runs["hand/fused"].append(handwritten(args.epochs, args.batch, "fused"))
            runs["hand/split"].append(handwritten(args.epochs, args.batch, "split"))
            runs["hand/buffers"].append(handwritten(args.epochs, args.batch, "buffers"))
    med = {k: (statistics.median(w for w, _ in v), statistics.median(s for _, s in v))
           for k, v in runs.items()}
    print(f"mlp_digits, {args.epochs} epochs, batch {args.batch}, "
          f"median of {args.repeats} alternating runs")
    print(f"{'':12} {'wall_s':>8} {'samples/s':>10}")
    for name, (wall, sps) in med.items():
        print(f"{name:12} {wall:8.2f} {sps:10.0f}")
    for hand in ("hand/fused", "hand/split", "hand/buffers"):
        print(f"msexp / {hand}: wall-time ratio {med['msexp'][0] / med[hand][0]:.3f}, "
              f"throughput ratio {med['msexp'][1] / med[hand][1]:.3f}")


if __name__ == "__main__":
    main()
