"""What pruning saves: one TPE study with the median pruner, one without.

Same seed, same trial budget, same search space (lr and momentum of mlp_digits). Prints
the compute each spent (sum of trial train+eval seconds, and epochs trained), the
compute saved by pruning, and the best eval_accuracy of each.

Usage: python benchmarks/pruning.py [--trials 16] [--epochs 10]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from msexp.execution.subscribers import Subscriber  # noqa: E402
from msexp.search.sweep import run_sweep  # noqa: E402
from msexp.spec import load_spec  # noqa: E402

SWEEP = """
name: pruning-{label}
experiment: mlp_digits
method: tpe
objective: {{metric: eval_accuracy, direction: maximize}}
budget: {{trials: {trials}}}
fixed: {{epochs: {epochs}, batch_size: 64, hidden: 128, optimizer: momentum, seed: 0}}
params:
  lr: {{low: 0.00001, high: 0.3, log: true}}
  momentum: {{low: 0.0, high: 0.95}}
pruner: {{type: {pruner}, warmup_epochs: 1, startup_trials: 3}}
"""


class Quiet(Subscriber):
    def on_trial_end(self, trial, result) -> None:
        print(f"  trial {trial.number}: {result.status.value}, {len(result.epochs)} epochs",
              flush=True)


def study(label: str, pruner: str, trials: int, epochs: int) -> tuple[float, int, float]:
    """(train+eval seconds, epochs trained, best eval_accuracy) of one study."""
    path = Path(f"{label}.yaml")
    path.write_text(SWEEP.format(label=label, pruner=pruner, trials=trials, epochs=epochs))
    spec = load_spec(path)
    print(f"{label}:", flush=True)
    outcome = run_sweep(spec, Quiet())
    seconds = sum(r.metrics.get("train_s", r.epochs[-1].elapsed_s if r.epochs else 0.0)
                  for r in outcome.results.values())
    trained = sum(len(r.epochs) for r in outcome.results.values())
    return seconds, trained, outcome.study.best_value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        full = study("no-pruner", "none", args.trials, args.epochs)
        pruned = study("median", "median", args.trials, args.epochs)
    print(f"{'':10} {'train_s':>8} {'epochs':>7} {'best acc':>9}")
    for name, (seconds, epochs, best) in (("none", full), ("median", pruned)):
        print(f"{name:10} {seconds:8.1f} {epochs:7d} {best:9.4f}")
    print(f"compute saved: {1 - pruned[0] / full[0]:.1%} of train+eval time, "
          f"{1 - pruned[1] / full[1]:.1%} of epochs")
    print(f"best objective difference: {100 * (pruned[2] - full[2]):+.2f} percentage points")


if __name__ == "__main__":
    main()
