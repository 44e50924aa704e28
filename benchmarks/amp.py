"""O0 vs O2 on one workload: throughput and peak memory side by side, and their ratios.

Each run is one trial through msexp's runner (`Host`: a fresh process, so peak
memory is the trial's own), O0 and O2 alternating, everything else equal. Peak memory is
the device allocator's peak where MindSpore reports one, else the process's peak RSS.

Usage: python benchmarks/amp.py [--experiment resnet_cifar] [--epochs 1] [--repeats 2]
                                [--loss-scale none] [--set width=8 ...]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

import yaml
from _trials import run_trial

LEVELS = ("O0", "O2")
COLUMNS = ("samples_per_s", "peak_mem_mb", "step_ms", "compile_s", "eval_loss", "eval_accuracy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="resnet_cifar")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--loss-scale", default="none", choices=("none", "fixed", "dynamic"))
    parser.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE",
                        help="another knob for both levels (repeatable)")
    args = parser.parse_args()
    fixed: dict[str, Any] = {"epochs": args.epochs, "loss_scale": args.loss_scale}
    for item in args.set:
        key, _, text = item.partition("=")
        fixed[key] = yaml.safe_load(text)
    runs: dict[str, list[dict[str, float]]] = {level: [] for level in LEVELS}
    with tempfile.TemporaryDirectory(prefix="msexp-amp-") as tmp:
        for repeat in range(args.repeats):
            for level in LEVELS:
                runs[level].append(run_trial(args.experiment, {**fixed, "amp_level": level},
                                             Path(tmp), f"{level}-{repeat}").metrics)
    median = {level: {c: statistics.median(r[c] for r in runs[level]) for c in COLUMNS}
              for level in LEVELS}
    shown = ", ".join(f"{k}={v}" for k, v in fixed.items())
    print(f"{args.experiment} ({shown}), median of {args.repeats} alternating runs per level")
    print(f"{'':8}" + "".join(f"{c:>15}" for c in COLUMNS))
    for level in LEVELS:
        print(f"{level:8}" + "".join(f"{median[level][c]:>15.4g}" for c in COLUMNS))
    print(f"{'O2/O0':8}" + "".join(
        f"{median['O2'][c] / median['O0'][c]:>15.3f}" if median["O0"][c] else f"{'-':>15}"
        for c in COLUMNS))


if __name__ == "__main__":
    main()
