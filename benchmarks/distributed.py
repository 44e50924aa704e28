"""One process vs data-parallel msrun ranks on the same trial and the same global batch.

Each repeat runs, in alternation, the trial with `devices: 1` and with `devices: N`
through msexp's runner (fresh processes, start-up included in wall_s). Prints the
median training throughput (samples/s over the global batch, steady-state updates) and
wall time of each, and the ratio N / 1.

Then the study's own cost per trial: msexp's storage calls for one trial (claim a
queued grid point, suggest its params, mark the owner and heartbeat, tell the result
with its metrics) on the default journal file and on PostgreSQL (started by
`msexp.services`, no MLflow), no training, median over a 40-point grid.

Usage: python benchmarks/distributed.py [--epochs 3] [--batch 64 256] [--devices 2]
       [--repeats 3] [--storage-only]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _trials import run_trial


def trial(folder: Path, name: str, epochs: int, batch: int, devices: int) -> tuple[float, float]:
    """(wall_s, samples_per_s) of one mlp_digits trial."""
    fixed = {"epochs": epochs, "batch_size": batch, "devices": devices}
    began = time.perf_counter()
    result = run_trial("mlp_digits", fixed, folder, name)
    return time.perf_counter() - began, result.metrics["samples_per_s"]


def storage_ms_per_trial(url: str | None, folder: Path, points: int = 40) -> float:
    """Median milliseconds of msexp's storage work for one trial (no training)."""
    from msexp.keys import TrialKey
    from msexp.search.optuna_private import pop_waiting
    from msexp.search.study import open_study
    from msexp.spec import parse_spec

    text = (f"name: cost-{'pg' if url else 'journal'}\nexperiment: mlp_digits\n"
            f"params: {{lr: {[round(0.001 * (i + 1), 4) for i in range(points)]}}}\n")
    spec = parse_spec(text, "storage.yaml")
    study, _ = open_study(spec, url or str(folder / "optuna.journal"))
    costs = []
    while True:
        began = time.perf_counter()
        trial = pop_waiting(study)
        if trial is None:
            break
        params = spec.space.resolve(spec.space.suggest(trial))
        trial.set_user_attr(TrialKey.OWNER, "benchmark:0")
        trial.set_user_attr(TrialKey.HEARTBEAT, time.time())
        trial.set_user_attr(TrialKey.METRICS, {"eval_accuracy": params["lr"], "wall_s": 1.0})
        trial.set_user_attr(TrialKey.STATUS, "COMPLETE")
        study.tell(trial, [params["lr"]])
        costs.append(time.perf_counter() - began)
    return 1000 * statistics.median(costs)


def storage_overhead() -> None:
    import os

    from msexp.cluster import services

    with tempfile.TemporaryDirectory() as tmp:
        journal = storage_ms_per_trial(None, Path(tmp))
        root = Path(tmp) / "services"
        running = services.up(root, mlflow=False)
        os.environ["PGPASSFILE"] = str(running.pgpass)
        try:
            postgres = storage_ms_per_trial(running.storage_url, Path(tmp))
        finally:
            services.down(root)
    print(f"study cost per trial: journal {journal:.1f} ms, PostgreSQL {postgres:.1f} ms "
          f"(+{postgres - journal:.1f} ms, {postgres / journal:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--storage-only", action="store_true")
    args = parser.parse_args()
    if args.storage_only:
        storage_overhead()
        return
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
    storage_overhead()


if __name__ == "__main__":
    main()
