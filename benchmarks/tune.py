"""`msexp tune` against the full grid over the same knobs (issue 29, item 5).

The sweep: micro_size [1, 2, 4] x amp_level [O0, O2] x loss_scale [none, dynamic] x
batch_size (two values): 24 configurations, `budget.repeats: 2`. In a fresh folder each,
`msexp tune FILE --json` and `msexp sweep FILE` (48 trainings) run as commands, timed.
From the grid: each configuration's mean objective and samples/s over its seeds; it
"keeps accuracy" if its mean objective is no worse than the baseline's (the first
configuration) by more than the baseline's seed-to-seed spread (the sample standard
deviation), the rule tune's confirm phase applies. Then the pick and the grid's fastest
accuracy-keeping configuration train side by side (SIDE_EPOCHS epochs), alternately,
`--runs` times each; their samples/s are compared as medians.

The default setting is one where tuning pays: a user tunes a training many times longer
than a compile. lenet_digits at EPOCHS epochs trains each configuration for 22 or 11 updates
an epoch (batch 64 or 128 over 1437 images), against a profile of 10 updates. The tune run's
probe costs (probes, how many compiled, their compile and update seconds) are read from
its trial folders.

Usage: python benchmarks/tune.py [--experiment lenet_digits] [--epochs EPOCHS]
       [--batch 64 128] [--runs 3] [--fixed KEY=VALUE ...] [--tune-only]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _trials import run_trial  # noqa: E402

from msexp.execution.host import Host  # noqa: E402
from msexp.search.storage import open_storage  # noqa: E402
from msexp.tracking.replicates import configurations  # noqa: E402
from msexp.tune.rules import keeps  # noqa: E402

OBJECTIVE = "eval_accuracy"
EPOCHS = 5
SIDE_EPOCHS = 2  # the side-by-side trainings: samples/s is a rate, 2 epochs measure it


def sweep_file(experiment: str, epochs: int, batches: list[int], fixed: dict[str, Any]
               ) -> dict[str, Any]:
    return {"name": "tunebench", "experiment": experiment, "method": "grid",
            "objective": [{"metric": OBJECTIVE, "direction": "maximize"}],
            "budget": {"trial_timeout": 1800, "workers": 1, "repeats": 2},
            "fixed": {"epochs": epochs, "lr": 0.01, "optimizer": "adam", **fixed},
            "params": {"micro_size": [1, 2, 4], "amp_level": ["O0", "O2"],
                       "loss_scale": ["none", "dynamic"], "batch_size": batches}}


def command(folder: Path, *args: str) -> tuple[float, str]:
    """(wall seconds, stdout) of one msexp command in `folder`; exit status 3 (tune's "no
    pick") is an answer, any other but 0 a failure."""
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "msexp", *args], cwd=folder,
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode not in (0, 3):
        raise subprocess.CalledProcessError(done.returncode, args, done.stdout, done.stderr)
    return time.perf_counter() - began, done.stdout


def grid(folder: Path) -> tuple[float, list[Any]]:
    """(wall seconds, configurations) of the full grid."""
    import optuna  # lazy: only here

    wall, _ = command(folder, "sweep", "tune.yaml")
    os.chdir(folder)  # the journal's path is relative to the sweep's folder
    study = optuna.load_study(study_name="tunebench", storage=open_storage(None))
    return wall, configurations(study, [OBJECTIVE, "samples_per_s"])


def side_by_side(experiment: str, fixed: dict[str, Any], configs: list[dict[str, Any]],
                 runs: int, folder: Path) -> list[float]:
    """Median samples/s of each configuration, trained alternately `runs` times each."""
    host = Host(cwd=ROOT)
    rates: list[list[float]] = [[] for _ in configs]
    try:
        for run in range(runs):
            for i, config in enumerate(configs):
                result = run_trial(experiment, {**fixed, **config}, folder, f"sbs-{run}-{i}",
                                   runner=host)
                rates[i].append(result.metrics["samples_per_s"])
    finally:
        host.kill()
    return [statistics.median(r) for r in rates]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="lenet_digits")
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--batch", type=int, nargs=2, default=[64, 128])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--fixed", nargs="*", default=[], metavar="KEY=VALUE",
                        help="more fixed params, e.g. width=8 for resnet_cifar")
    parser.add_argument("--tune-only", action="store_true",
                        help="run tune alone: its wall, probes and pick, no grid")
    args = parser.parse_args()
    fixed = {k: yaml.safe_load(v) for k, _, v in (item.partition("=") for item in args.fixed)}
    spec = sweep_file(args.experiment, args.epochs, args.batch, fixed)
    with tempfile.TemporaryDirectory() as tune_dir, tempfile.TemporaryDirectory() as grid_dir:
        for folder in (tune_dir, grid_dir):
            (Path(folder) / "tune.yaml").write_text(yaml.safe_dump(spec))
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load "
              f"{_load()} before", flush=True)
        tune_wall, out = command(Path(tune_dir), "tune", "tune.yaml", "--json")
        tuned = json.loads(out)
        print(f"tune wall {tune_wall:.1f} s, load {_load()}; halving rounds "
              f"{tuned['rounds']}, spread {tuned['spread']}; {_probe_costs(Path(tune_dir))}",
              flush=True)
        if args.tune_only:
            print(f"tune pick: {(tuned['pick'] or {}).get('config')}\n{out.strip()}")
            return
        grid_wall, groups = grid(Path(grid_dir))
        print(f"grid wall {grid_wall:.1f} s, load {_load()}", flush=True)
        base = groups[0]
        kept = [g for g in groups if keeps(g.values[OBJECTIVE], base.values[OBJECTIVE], True)]
        best = max(kept, key=lambda g: g.mean("samples_per_s"))
        pick = tuned["pick"]
        print(f"{args.experiment}, {len(groups)} configurations x 2 seeds, {args.epochs} "
              f"epoch(s), batch {args.batch}, fixed {spec['fixed']}")
        print(f"tune wall {tune_wall:.1f} s, grid wall {grid_wall:.1f} s: tune / grid "
              f"{tune_wall / grid_wall:.2f}")
        print(f"grid baseline {base.params}: {OBJECTIVE} {base.values[OBJECTIVE]}")
        print(f"grid keeps accuracy: {len(kept)} of {len(groups)}; fastest kept {best.params} "
              f"({best.mean('samples_per_s'):.1f} samples/s in the grid)")
        if pick is None:
            print("tune made no pick:", json.dumps(tuned["confirmed"], default=str))
            return
        print(f"tune pick {pick['config']}: {OBJECTIVE} {pick['objective']} against the "
              f"baseline's {tuned['baseline']['objective']}")
        fixed = {**spec["fixed"], "epochs": min(args.epochs, SIDE_EPOCHS)}
        rates = side_by_side(args.experiment, fixed, [pick["config"], best.params],
                             args.runs, Path(grid_dir))
        print(f"side by side, median of {args.runs}: pick {rates[0]:.1f}, grid's best "
              f"kept {rates[1]:.1f} samples/s: ratio {rates[0] / rates[1]:.3f}")
        print(f"pick in the grid: {_grid_rate(groups, pick['config'])}")
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {_load()} after")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _probe_costs(folder: Path) -> str:
    """What the tune run's probes cost: how many, how many compiled (not warm), the summed
    compile seconds and the summed seconds of their updates after the first."""
    from msexp.execution.protocol import Result, Start, read_events

    probes = compiled = 0
    compile_s = updates_s = 0.0
    for events in (folder / "mlruns" / "tune").rglob("events.jsonl"):
        read = read_events(events)
        start = next((e for e in read if isinstance(e, Start)), None)
        result = next((e for e in read if isinstance(e, Result)), None)
        if start is None or result is None or "updates" not in result.metrics:
            continue
        probes += 1
        compiled += not start.warm
        compile_s += result.metrics["compile_s"]
        updates_s += (result.metrics["updates"] - 1) * result.metrics["step_ms"] / 1000
    return (f"{probes} probes, {compiled} compiled: compile {compile_s:.1f} s, updates after "
            f"the first {updates_s:.1f} s (median step x updates)")


def _grid_rate(groups: list[Any], config: dict[str, Any]) -> str:
    for group in groups:
        if all(group.params.get(k) == v for k, v in config.items()):
            kept = group.values[OBJECTIVE]
            return f"{group.mean('samples_per_s'):.1f} samples/s, {OBJECTIVE} {kept}"
    return "not found"


if __name__ == "__main__":
    main()
