"""The cost of checkpointing every epoch: the same trial with and without, side by side.

For mlp_digits and lenet_digits, each repeat runs, in alternation, one trial without
checkpoints and one with `checkpoint: {every: 1, keep: last}` (network, optimizer and
loss-scale state saved atomically after every epoch), both through msexp's worker, and
compares their train+eval seconds (`train_s`, which the save is part of).

Usage: python benchmarks/checkpoint_cost.py [--epochs 10] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from msexp.execution.host import Host  # noqa: E402
from msexp.execution.protocol import Checkpointing, TrialRequest  # noqa: E402
from msexp.execution.result import Status  # noqa: E402
from msexp.spec import trial_params  # noqa: E402


def train_s(runner: Host, experiment: str, epochs: int, folder: Path,
            checkpoint: Checkpointing | None) -> float:
    params = trial_params(experiment, {"epochs": epochs}, "benchmark")
    result = runner.run(TrialRequest(experiment, params, folder, checkpoint=checkpoint), 3600)
    if result.status is not Status.COMPLETE:
        raise SystemExit(f"{experiment}: {result.status.value} {result.error}")
    if checkpoint is not None:
        assert result.checkpoint and result.checkpoint.is_file()
    return result.metrics["train_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runner = Host(cwd=ROOT)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for experiment in ("mlp_digits", "lenet_digits"):
                plain, saved = [], []
                for i in range(args.repeats):
                    folder = Path(tmp) / f"{experiment}-{i}"
                    plain.append(train_s(runner, experiment, args.epochs, folder / "a", None))
                    saved.append(train_s(runner, experiment, args.epochs, folder / "b",
                                         Checkpointing(every=1, keep="last")))
                    print(f"{experiment} repeat {i}: {plain[-1]:.2f} s without, "
                          f"{saved[-1]:.2f} s with checkpoints", flush=True)
                rows.append((experiment, statistics.median(plain), statistics.median(saved)))
    finally:
        runner.kill()
    print(f"{args.epochs} epochs, median of {args.repeats}, train+eval seconds")
    print("| workload | no checkpoint | every: 1 | ratio |\n|---|---|---|---|")
    for experiment, plain_s, saved_s in rows:
        print(f"| {experiment} | {plain_s:.2f} | {saved_s:.2f} | {saved_s / plain_s:.3f} |")


if __name__ == "__main__":
    main()
