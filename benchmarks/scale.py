"""msexp at scale: N one-second command trials against a shell loop, side by side.

For each N (100 and 1,000; 10,000 with --slow), in one fresh folder:
  shell  `seq N | xargs -P 2` running `python job.py` (sleeps 1 s, prints `score: 1`);
  msexp  `msexp sweep` of the same script, random search, `budget.workers: 2`.
Prints both walls and msexp / shell. From the sweep's own study it then prints:
  - the per-trial cost of trials 1-100 against trials N-100..N: seconds per completed
    trial (the span of their completions x workers / 100) and the median time from a
    trial's claim to its tell, beyond the script's own 1 s;
  - `status`, `best`, `report` and `plan` wall times on that study (a real one);
  - the size of `mlruns/` per trial.
Every study is a real one: each of its trials ran through `msexp sweep` (N=10,000 takes
about 1.5 hours at 2 workers).

`--no-shell` runs only msexp's side and prints its wall against the physical limit
(N x 1 s / workers): a 10,000-trial study without the shell loop's own 1.5 hours.

`--busy 1` runs both sides beside one process spinning on a core (the loaded condition).

`--sleep 0` makes the job exit at once: a 10,000-trial study for the commands' timings in
a third of the time (the trials' own cost is then msexp's and Python's start only).

Usage: python benchmarks/scale.py [--sizes 100 1000] [--slow] [--method grid]
                                  [--workers 2] [--no-shell] [--busy 1]
                                  [--sleep 1]
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
sys.path.insert(0, str(ROOT / "benchmarks"))

import optuna  # noqa: E402
from _sweeps import busy  # noqa: E402

WORKERS = 2
SLEEP_S = 1.0
JOB = """import argparse, time
parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float, default=0.0)
parser.parse_args()
time.sleep({sleep})
print("score: 1")
"""
SWEEP = """name: scale
method: {method}
experiment:
  command: python job.py
objective: {{metric: score, direction: maximize}}
budget: {{trials: {trials}, workers: {workers}}}
params:
  x: {space}
"""
COMMANDS = (("status", []), ("best", []), ("report", []), ("plan", []))
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"}


def write_sweep(folder: Path, trials: int, method: str = "random") -> Path:
    (folder / "job.py").write_text(JOB.format(sleep=SLEEP_S))
    space = "{low: 0.0, high: 1.0}" if method == "random" else \
        "[" + ", ".join(str(i) for i in range(trials)) + "]"
    path = folder / "sweep.yaml"
    path.write_text(SWEEP.format(method=method, trials=trials, workers=WORKERS, space=space))
    return path


def shell_loop(folder: Path, trials: int) -> float:
    """The same runs through `xargs -P WORKERS`, each one's output to a file of its own."""
    logs = folder / "shell-logs"
    logs.mkdir()
    line = (f"seq 0 {trials - 1} | xargs -P {WORKERS} -I{{}} sh -c "
            f"'{sys.executable} job.py --x=0.{{}} > {logs}/{{}}.log'")
    began = time.perf_counter()
    subprocess.run(["bash", "-c", line], cwd=folder, check=True)
    return time.perf_counter() - began


def msexp(folder: Path, *args: str, check: bool = True) -> float:
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "msexp", *args], cwd=folder, env=ENV,
                          capture_output=True, text=True)
    wall = time.perf_counter() - began
    if check and done.returncode:
        raise SystemExit(f"msexp {' '.join(args)} exited {done.returncode}:\n"
                         f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return wall


def window_costs(trials: list[optuna.trial.FrozenTrial], first: bool) -> tuple[float, float]:
    """(seconds per completed trial, median claim-to-tell beyond SLEEP_S) over 100 trials
    in the order they completed: the first 100 or the last 100."""
    done = sorted((t for t in trials if t.datetime_complete), key=lambda t: t.datetime_complete)
    part = done[:100] if first else done[-100:]
    ends = [t.datetime_complete.timestamp() for t in part]
    previous = done[len(done) - 101].datetime_complete.timestamp() if not first and \
        len(done) > 100 else part[0].datetime_start.timestamp()
    per_trial = (ends[-1] - previous) * WORKERS / len(part)
    latency = statistics.median((t.datetime_complete - t.datetime_start).total_seconds()
                                for t in part) - SLEEP_S
    return per_trial, latency


def study_trials(folder: Path) -> list[optuna.trial.FrozenTrial]:
    from msexp.search.storage import open_storage  # after the sweep: its own journal

    cwd = os.getcwd()
    os.chdir(folder)
    try:
        storage = open_storage(None)
        name = optuna.get_all_study_names(storage)[-1]
        return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
    finally:
        os.chdir(cwd)


def command_walls(folder: Path, sweep: Path) -> dict[str, float]:
    return {name: msexp(folder, name, str(sweep), *extra) for name, extra in COMMANDS}


def size_per_trial(folder: Path, trials: int) -> float:
    total = sum(p.stat().st_size for p in (folder / "mlruns").rglob("*") if p.is_file())
    return total / trials / 1024


def one_size(trials: int, method: str, shell: bool) -> None:
    with tempfile.TemporaryDirectory(prefix=f"scale{trials}-") as tmp:
        folder = Path(tmp)
        sweep = write_sweep(folder, trials, method)
        if shell:
            loop = shell_loop(folder, trials)
            print(f"N={trials}: shell loop {loop:.1f} s (load {load()})", flush=True)
        print(f"N={trials}: msexp sweep starts (load {load()})", flush=True)
        swept = msexp(folder, "sweep", str(sweep))
        limit = trials * SLEEP_S / WORKERS
        print(f"N={trials}: msexp sweep {swept:.1f} s (load {load()})" + (
            f"; msexp / the physical limit ({limit:.0f} s) {swept / limit:.3f}" if limit
            else ""), flush=True)
        if shell:
            print(f"N={trials}: msexp / shell **{swept / loop:.3f}** "
                  f"(target <= 1.10 at N=1,000)", flush=True)
        report_study(folder, sweep, trials)


def report_study(folder: Path, sweep: Path, trials: int) -> None:
    found = study_trials(folder)
    complete = sum(t.state.name == "COMPLETE" for t in found)
    print(f"N={trials}: {complete} of {len(found)} trials COMPLETE")
    if trials >= 200:
        first, first_latency = window_costs(found, first=True)
        last, last_latency = window_costs(found, first=False)
        print(f"N={trials}: s per trial, trials 1-100 {first:.3f}, trials "
              f"{trials - 100}-{trials} {last:.3f}: last / first **{last / first:.3f}**; "
              f"claim-to-tell beyond the script's {SLEEP_S:.0f} s: {first_latency:.3f} "
              f"against {last_latency:.3f}")
    walls = command_walls(folder, sweep)
    print(f"N={trials} (real study): " + ", ".join(f"{k} {v:.2f} s" for k, v in walls.items()))
    print(f"N={trials}: mlruns/ {size_per_trial(folder, trials):.1f} KiB per trial",
          flush=True)


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--slow", action="store_true", help="also N=10,000")
    parser.add_argument("--method", choices=("random", "grid"), default="random")
    parser.add_argument("--workers", type=int, default=2,
                        help="concurrent trials, on both sides")
    parser.add_argument("--no-shell", action="store_true",
                        help="msexp's side only, against N x 1 s / workers")
    parser.add_argument("--busy", type=int, default=0,
                        help="processes spinning on a core each, beside both sides")
    parser.add_argument("--sleep", type=float, default=1.0,
                        help="seconds each job sleeps (0: it exits at once)")
    args = parser.parse_args()
    global WORKERS, SLEEP_S  # every helper reads them: the one run's parallelism and job
    WORKERS, SLEEP_S = args.workers, args.sleep
    sizes = [*args.sizes, *([10_000] if args.slow else [])]
    print(f"{os.cpu_count()} CPUs, {WORKERS} workers, {args.busy} busy processes, load "
          f"{load()}", flush=True)
    with busy(args.busy):
        for trials in sizes:
            one_size(trials, args.method, shell=not args.no_shell)


if __name__ == "__main__":
    main()
