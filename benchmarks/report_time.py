"""`msexp report` on a finished accum sweep: its wall and CPU time, and what it writes.

Runs `msexp sweep sweeps/accum.yaml` (8 LeNet trials) in a fresh folder, or takes the
folder of one already run (--folder), then times `msexp report accum.yaml` as a user runs
it: its first call (the report's files drawn and logged on the parent run) and the calls
after it on the same trials (nothing new to draw or log). Each call is a fresh process.
Prints the load average before and after, each call's wall and CPU seconds (user + system
of the process), the files written under mlruns/reports/accum/ and what the parent run's
report/ folder holds.

--source DIR (repeatable) times each checkout of msexp given (an older commit, say) on the
same sweep with the same Python, one after the other: a before and an after on one
machine. The sweep's mlruns/ is put back as it was found before each (MLflow keeps
absolute artifact paths, so a copy of the folder would still log into the original).

Usage: python benchmarks/report_time.py [--folder DIR] [--repeats 3] [--source DIR]...
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "sweeps" / "accum.yaml"


def run_msexp(source: Path, folder: Path, *args: str) -> tuple[float, float, str]:
    """`python -m msexp ARGS` from checkout `source` in `folder`: wall s, CPU s, output."""
    env = {**os.environ, "PYTHONPATH": str(source), "COLUMNS": "160"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "msexp", *args], cwd=folder, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"msexp {' '.join(args)} exited {done.returncode}:\n{done.stdout}"
                         f"{done.stderr}")
    return wall, cpu, done.stdout


def sizes(folder: Path) -> list[str]:
    return [f"{p.relative_to(folder)} {p.stat().st_size / 1024:.0f} KiB"
            for p in sorted(folder.rglob("*")) if p.is_file()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, help="a folder where accum.yaml was swept")
    parser.add_argument("--repeats", type=int, default=3, help="calls after the first")
    parser.add_argument("--source", type=Path, action="append",
                        help="an msexp checkout to time (default: this one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="report-time-") as scratch:
        swept = args.folder
        if swept is None:
            swept = Path(scratch, "swept")
            swept.mkdir()
            shutil.copy(SWEEP, swept / "accum.yaml")
            wall, _, _ = run_msexp(ROOT, swept, "sweep", "accum.yaml")
            print(f"sweep: {wall:.1f} s")
        found = Path(scratch, "found")
        shutil.copytree(swept / "mlruns", found)
        try:
            for source in args.source or [ROOT]:
                shutil.rmtree(swept / "mlruns")
                shutil.copytree(found, swept / "mlruns")
                time_reports(source.resolve(), swept, args.repeats)
        finally:
            shutil.rmtree(swept / "mlruns")
            shutil.copytree(found, swept / "mlruns")


def time_reports(source: Path, swept: Path, repeats: int) -> None:
    print(f"msexp from {source}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    output = ""
    for call in range(1 + repeats):
        wall, cpu, output = run_msexp(source, swept, "report", "accum.yaml")
        print(f"report call {call + 1}{' (first)' if call == 0 else ''}: wall "
              f"{wall:.2f} s, CPU {cpu:.2f} s")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("written under mlruns/reports/accum/:")
    for line in sizes(swept / "mlruns" / "reports" / "accum"):
        print(f"  {line}")
    print("logged on the parent run (report/):")
    for folder in (swept / "mlruns").rglob("artifacts/report"):
        for line in sizes(folder):
            print(f"  {line}")
    print("last call's last lines:")
    for line in output.strip().splitlines()[-3:]:
        print(f"  {line}")


if __name__ == "__main__":
    main()
