"""How many files of the log corpus (tests/assets/logs/) catch each mutant of the log
reader (`msexp/execution/log_lines.py`, `log_metrics.py`); issue 40 asks for two or more.

    .venv/bin/python tests/mutation/log_corpus.py [--json OUT] [--show N] [--only PART...]

The mutants are mutmut's own (its `create_mutations`, the operators `tests/mutation.sh`
runs), each applied to a fresh copy of the module, named after mutmut's scheme
(`msexp.execution.log_lines.x_pairs__mutmut_3`); mutmut leaves module-level code alone,
but the reader's regexes and word sets live there, so those are mutated too (named
`msexp.execution.log_lines.<module>__mutmut_N`). Each mutant is judged per corpus file by
`tests/test_log_metrics.py`'s own test of that file, in this process: a file catches a
mutant when its test fails, raises or runs past `TIMEOUT_S`. A mutant whose module does
not import is caught by every file. Results: tests/README.md, "The log corpus".
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import types
from collections import Counter
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider
from mutmut.mutation.file_mutation import create_mutations, deep_replace

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
MODULES = ["msexp.execution.log_lines", "msexp.execution.log_metrics"]  # import order
TIMEOUT_S = 10


class Timeout(Exception):
    pass


def mutants(module: str) -> list[tuple[str, int, str, str]]:
    """Each mutant of a module: its name, line, the changed code and the whole source."""
    path = ROOT / (module.replace(".", "/") + ".py")
    tree, mutations, _, _ = create_mutations(str(path), path.read_text(encoding="utf-8"))
    positions = MetadataWrapper(tree, unsafe_skip_copy=True).resolve(PositionProvider)
    owners = _owners(tree)
    numbers: Counter[str] = Counter()
    found = []
    for mutation in mutations:
        owner = owners.get(mutation.contained_by_top_level_function, "<module>")
        numbers[owner] += 1
        name = f"{module}.{owner}__mutmut_{numbers[owner]}"
        line = positions[mutation.original_node].start.line
        change = f"{_code(mutation.original_node)} -> {_code(mutation.mutated_node)}"
        found.append((name, line, change, deep_replace(tree, mutation.original_node,
                                                       mutation.mutated_node).code))
    return found


def _owners(tree: cst.Module) -> dict[cst.CSTNode, str]:
    """mutmut's name of each top-level function and method (`x_pairs`, `xǁClsǁfeed`)."""
    owners: dict[cst.CSTNode, str] = {}
    for node in tree.body:
        if isinstance(node, cst.FunctionDef):
            owners[node] = f"x_{node.name.value}"
        elif isinstance(node, cst.ClassDef) and isinstance(node.body, cst.IndentedBlock):
            for method in node.body.body:
                if isinstance(method, cst.FunctionDef):
                    owners[method] = f"xǁ{node.name.value}ǁ{method.name.value}"
    return owners


def _code(node: cst.CSTNode) -> str:
    text = cst.Module(body=[]).code_for_node(node).strip().replace("\n", " ")
    return text if len(text) <= 70 else text[:67] + "..."


def load(sources: dict[str, str]) -> types.ModuleType:
    """`log_metrics` built from these sources (a module not given: its file)."""
    saved = {name: sys.modules.get(name) for name in MODULES}
    try:
        for name in MODULES:
            path = ROOT / (name.replace(".", "/") + ".py")
            module = types.ModuleType(name)
            module.__file__ = str(path)
            sys.modules[name] = module
            source = sources.get(name) or path.read_text(encoding="utf-8")
            exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102
        return sys.modules[MODULES[-1]]
    finally:
        for name, module in saved.items():
            if module is not None:
                sys.modules[name] = module


def catching_files(sources: dict[str, str], logs: list[str]) -> list[str]:
    """The corpus files whose test fails with these sources."""
    try:
        reader = load(sources)
    except Exception:  # noqa: BLE001 - a mutant that does not import
        return list(logs)
    corpus = sys.modules["tests.test_log_metrics"]
    kept = corpus.MetricReader, corpus.read_log, corpus.bounded_lines
    corpus.MetricReader, corpus.read_log, corpus.bounded_lines = (
        reader.MetricReader, reader.read_log, reader.bounded_lines)
    caught = []
    try:
        for log in logs:
            signal.alarm(TIMEOUT_S)
            try:
                corpus.test_each_real_log_yields_its_metrics_and_no_configuration(log)
            except (Exception, Timeout):  # noqa: BLE001 - an assertion, a crash or a hang
                caught.append(log)
            finally:
                signal.alarm(0)
    finally:
        corpus.MetricReader, corpus.read_log, corpus.bounded_lines = kept
    return caught


def _timeout(*_: object) -> None:
    raise Timeout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write every mutant's result here")
    parser.add_argument("--show", type=int, default=1,
                        help="list the mutants caught by at most this many files")
    parser.add_argument("--only", nargs="+", metavar="PART",
                        help="judge only the mutants whose name holds one of these "
                             "(`x_pairs__`, `monitor__mutmut_19`)")
    args = parser.parse_args()
    signal.signal(signal.SIGALRM, _timeout)
    import tests.test_log_metrics as corpus  # noqa: PLC0415 - after sys.path is set

    logs = sorted(corpus.EXPECTED)
    assert catching_files({}, logs) == [], "the unchanged reader must pass every file"
    results = []
    for module in MODULES:
        for name, line, change, source in mutants(module):
            if args.only and not any(part in name for part in args.only):
                continue
            caught = catching_files({module: source}, logs)
            results.append({"name": name, "line": line, "change": change, "files": caught})
    counts = Counter(min(len(r["files"]), 2) for r in results)
    print(f"{len(results)} mutants over {len(logs)} files: caught by no file {counts[0]}, "
          f"by one {counts[1]}, by two or more {counts[2]}")
    for r in results:
        if len(r["files"]) <= args.show:
            print(f"{len(r['files'])} {r['name']} (line {r['line']}): {r['change']}"
                  f"  {r['files']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
