"""The branches of msexp's modules changed since a commit, and the test that reaches each.

Reads a coverage data file recorded with branch measurement and per-test contexts
(`pytest --cov=msexp --cov-branch --cov-context=test`, tests/README.md: branches) and prints,
for each module changed between SINCE and HEAD (`git diff SINCE HEAD -- msexp`), its branch
count and branches reached, each unreached branch (`line->line`, a negative target is an exit
from the function starting there) with its function, and, with --reached, each reached branch
with one test that reaches it ("import" where only importing or collecting reached it).

    .venv/bin/python tests/branches.py [--data .coverage] [--since 9015a28] [--reached]
        [--summary]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import coverage

ROOT = Path(__file__).resolve().parent.parent


def changed_modules(since: str) -> list[str]:
    """msexp's Python files that exist at HEAD and differ from SINCE's."""
    out = subprocess.run(
        ["git", "diff", "--name-only", "--diff-filter=d", since, "HEAD", "--", "msexp"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return sorted(p for p in out.split() if p.endswith(".py"))


def branch_report(data: Path, modules: list[str]) -> dict[str, dict]:
    """coverage's own JSON report of the modules: branch counts, executed and missing arcs."""
    cov = coverage.Coverage(data_file=str(data), config_file=str(ROOT / "pyproject.toml"))
    cov.load()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        cov.json_report(morfs=[str(ROOT / m) for m in modules], outfile=str(out),
                        ignore_errors=True)
        files = json.loads(out.read_text())["files"]
    return {str(Path(name).resolve().relative_to(ROOT)) if Path(name).is_absolute() else name:
            report for name, report in files.items()}


def reaching_tests(data: Path) -> dict[tuple[str, int], dict[int, str]]:
    """One test per arc in the data, by module and line, then target: a call phase first."""
    db = sqlite3.connect(f"file:{data}?mode=ro", uri=True)
    rows = db.execute("select file.path, arc.fromno, arc.tono, context.context from arc "
                      "join file on file.id = arc.file_id "
                      "join context on context.id = arc.context_id")
    best: dict[tuple[str, int], dict[int, tuple[tuple, str]]] = {}
    for path, start, end, context in rows:
        name = str(Path(path).relative_to(ROOT)) if path.startswith(str(ROOT)) else path
        test = context.rsplit("|", 1)[0] or "import"
        rank = (not context.endswith("|run"), test == "import", test)
        ends = best.setdefault((name, start), {})
        if end not in ends or rank < ends[end][0]:
            ends[end] = (rank, test)
    return {key: {end: test for end, (_, test) in ends.items()} for key, ends in best.items()}


def reacher(tests: dict[tuple[str, int], dict[int, str]], module: str, start: int, end: int,
            report: dict) -> str:
    """The test that reached the branch; for a branch that coverage's analysis maps (an exit
    through a `with` or a `finally`: recorded as an arc to another line), the test of a
    recorded arc from its line to none of the line's other branch targets."""
    ends = tests.get((module, start), {})
    if end in ends:
        return ends[end]
    others = {e for s, e in report["executed_branches"] + report["missing_branches"]
              if s == start and e != end}
    found = sorted(test for e, test in ends.items() if e not in others)
    return found[0] if found else "?"


def function_of(report: dict, line: int) -> str:
    """The name of the innermost function of the report holding the line, or ''."""
    spans = [(f["start_line"], name) for name, f in report.get("functions", {}).items()
             if name and line in f["executed_lines"] + f["missing_lines"]]
    return max(spans)[1] if spans else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT / ".coverage")
    parser.add_argument("--since", default="9015a28")
    parser.add_argument("--reached", action="store_true", help="list reached branches too")
    parser.add_argument("--summary", action="store_true", help="only the table (markdown)")
    args = parser.parse_args()
    modules = changed_modules(args.since)
    reports = branch_report(args.data, modules)
    tests = {} if args.summary else reaching_tests(args.data.resolve())
    total = reached = 0
    print("| module | branches | reached | % |\n|---|---|---|---|")
    rows = []
    for module in modules:
        report = reports.get(module)
        if report is None or not report["summary"]["num_branches"]:
            continue
        count = report["summary"]["num_branches"]
        hit = report["summary"]["covered_branches"]
        total, reached = total + count, reached + hit
        print(f"| `{module}` | {count} | {hit} | {100 * hit / count:.0f} |")
        rows.append((module, report))
    print(f"| all {len(rows)} | {total} | {reached} | {100 * reached / max(total, 1):.0f} |")
    if args.summary:
        return 0
    for module, report in rows:
        lines = (ROOT / module).read_text().splitlines()
        print(f"\n{module}: {report['summary']['covered_branches']} of "
              f"{report['summary']['num_branches']} branches reached")
        for start, end in sorted(map(tuple, report["missing_branches"])):
            where = function_of(report, start)
            print(f"  unreached {start}->{end} {where}: {lines[start - 1].strip()[:70]}")
        if args.reached:
            executed = sorted(map(tuple, report["executed_branches"]))
            for start, end in executed:
                print(f"  reached   {start}->{end} by {reacher(tests, module, start, end, report)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
