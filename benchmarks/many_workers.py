"""Many workers against one PostgreSQL study: every point runs once, no claim is lost.

Starts a PostgreSQL of its own (`msexp.cluster.services`, initdb in a temporary folder),
creates a grid study of `--points` points (a command experiment whose trial exits at
once), and forks `--workers` worker processes after msexp's imports (copy-on-write: a
fresh import is about 80 MB of RSS each). Each worker claims trials through msexp's own
`TrialSource` (the study lock, the stale check, the claim, the heartbeat: what `msexp
worker` claims with), runs `python -c "print('score: 1')"` and tells the trial, until the
study has none left. Storages:
  direct  every worker holds its own connections to PostgreSQL (`postgresql://`);
  grpc    every worker reaches the study through msexp's gRPC proxy (`grpc://`), which
          alone holds database connections (`msexp services up --proxy`).
Prints: the trials each point ran (must be 1 each), claims that failed or were lost,
the claim latency (median, p99, max; fair claims: p99 at most 5x the median), claims per
second, the peak of PostgreSQL connections, and errors.

Usage: python benchmarks/many_workers.py [--workers 200] [--points 600]
       [--storage direct|grpc] [--max-connections 100]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import warnings  # noqa: E402

import sqlalchemy  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from msexp.cluster import services  # noqa: E402
from msexp.execution.process_tree import kill_marked  # noqa: E402
from msexp.search.source import TrialSource  # noqa: E402
from msexp.search.study import open_study  # noqa: E402
from msexp.spec import load_spec  # noqa: E402

warnings.filterwarnings("ignore", category=Warning, module="optuna")

SWEEP = """name: many
method: grid
experiment:
  command: python -c "print('score 1')"
objective: {{metric: score, direction: maximize}}
params:
  x: [{points}]
"""


def worker(spec_path: Path, url: str, out: Path, go: Path) -> None:
    """One worker (a forked child): claim, run, tell until nothing is left."""
    while not go.exists():
        time.sleep(0.05)
    lines = []
    try:
        spec = load_spec(spec_path, local=False)
        study, _ = open_study(spec, url)
        source = TrialSource(study, url, spec.n_trials(), samples=False,
                             kill_owned=kill_marked)
        while True:
            began = time.perf_counter()
            trial = source.claim()
            claimed = time.perf_counter() - began
            if trial is None:
                break
            subprocess.run([sys.executable, "-c", "print('score 1')"], check=True,
                           capture_output=True)
            study.tell(trial, 1.0)
            source.done(trial)
            lines.append({"number": trial.number, "claim_s": claimed})
        source.close()
    except Exception as exc:  # counted and shown by the parent
        lines.append({"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"})
    out.write_text("".join(json.dumps(line) + "\n" for line in lines))


def connections_peak(url: str, stop: threading.Event) -> list[int]:
    """Poll PostgreSQL's count of client sessions until `stop`; returns [peak]."""
    peak = [0]

    def poll() -> None:
        engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
        while not stop.wait(0.5):
            try:
                with engine.connect() as connection:
                    count = connection.execute(sqlalchemy.text(
                        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = "
                        "'client backend'")).scalar()
                peak[0] = max(peak[0], int(count))
            except Exception:
                continue  # out of connections: the workers will say so
        engine.dispose()

    threading.Thread(target=poll, daemon=True).start()
    return peak


def run(args: argparse.Namespace, folder: Path) -> None:
    running = services.up(folder / "services", mlflow=False, proxy=args.storage == "grpc",
                          max_connections=args.max_connections)
    os.environ["PGPASSFILE"] = str(running.pgpass)
    try:
        url = running.proxy_url if args.storage == "grpc" else running.storage_url
        spec_path = folder / "many.yaml"
        spec_path.write_text(SWEEP.format(points=", ".join(map(str, range(args.points)))))
        study, _ = open_study(load_spec(spec_path, local=False), running.storage_url)
        go = folder / "go"
        children = []
        for index in range(args.workers):
            pid = os.fork()
            if pid == 0:
                worker(spec_path, url, folder / f"w{index}.jsonl", go)
                os._exit(0)
            children.append(pid)
        stop = threading.Event()
        peak = connections_peak(running.storage_url, stop)
        began = time.perf_counter()
        go.touch()
        for pid in children:
            os.waitpid(pid, 0)
        wall = time.perf_counter() - began
        stop.set()
        summarize(args, folder, study, wall, peak[0])
    finally:
        services.down(folder / "services")


def summarize(args: argparse.Namespace, folder: Path, study, wall: float, peak: int) -> None:
    lines = [json.loads(line) for i in range(args.workers)
             for line in (folder / f"w{i}.jsonl").read_text().splitlines()]
    errors = Counter(line["error"] for line in lines if "error" in line)
    taken = Counter(line["number"] for line in lines if "number" in line)
    latencies = sorted(line["claim_s"] for line in lines if "claim_s" in line)
    states = Counter(t.state.name for t in study.get_trials(deepcopy=False))
    told_once = sorted(taken) == list(range(args.points)) and set(taken.values()) == {1}
    complete = states.get(TrialState.COMPLETE.name, 0)
    print(f"{args.workers} workers, {args.points} points, storage {args.storage}, "
          f"max_connections {args.max_connections}: {wall:.1f} s, load "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"points run: {len(taken)} of {args.points}; run more than once: "
          f"{sum(n > 1 for n in taken.values())}; every point exactly once: {told_once}")
    print(f"study: {dict(states)}; claims lost (taken, not told): "
          f"{args.points - complete if told_once else 'see above'}")
    if latencies:
        p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
        median = statistics.median(latencies)
        print(f"claim latency: median {median * 1000:.0f} ms, "
              f"p99 {p99 * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms "
              f"({len(latencies)} claims); p99 / median {p99 / median:.1f} (fair: <= 5)")
        print(f"claims per second: {len(latencies) / wall:.2f}")
    print(f"PostgreSQL client sessions, peak: {peak}")
    print(f"workers that failed: {sum(errors.values())}"
          + "".join(f"\n  {n} x {error}" for error, n in errors.most_common(5)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=200)
    parser.add_argument("--points", type=int, default=600)
    parser.add_argument("--storage", choices=("direct", "grpc"), default="direct")
    parser.add_argument("--max-connections", type=int, default=100,
                        help="PostgreSQL's max_connections (its default: 100)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="many-workers-") as tmp:
        run(args, Path(tmp))


if __name__ == "__main__":
    main()
