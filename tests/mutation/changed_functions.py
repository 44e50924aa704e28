"""The functions and methods of msexp/ written or changed since a commit, as a regex over
mutmut 3's mutant names (tests/mutation.sh: PROFILE=recent's MATCH; tests/README.md).

    python tests/mutation/changed_functions.py [--list] [BASE [TIP]]   # 9015a28 HEAD

From `git diff -U0 BASE TIP -- msexp` (the lines each hunk adds or changes, at TIP) and
the AST of each file at TIP (the draw of a sample depends on it: tests/README.md names the
TIP of each run): a top-level function, or a method of a top-level class (the
only ones mutmut 3 mutates; a nested function or class is part of the one around it), is
changed when one of its lines (decorators included) was added or changed, or when lines
were removed from inside it. A mutant of `msexp/a/b.py`'s function `f` is named
`msexp.a.b.x_f__mutmut_N`, of its class `C`'s method `m` `msexp.a.b.xǁCǁm__mutmut_N`
(`msexp.a` for `msexp/a/__init__.py`). `--list` prints one name a line instead of the
regex.
"""
import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=Path(__file__).parent,
                          check=True, capture_output=True, text=True).stdout.strip())
HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


def changed_lines(base: str, tip: str) -> dict[str, tuple[set[int], set[int]]]:
    """path -> (lines added or changed at `tip`, lines after which lines were removed)."""
    diff = subprocess.run(["git", "diff", "-U0", "--no-color", "-M", base, tip, "--", "msexp"],
                          cwd=ROOT, check=True, capture_output=True, text=True).stdout
    out: dict[str, tuple[set[int], set[int]]] = {}
    path = None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            path = None if line == "+++ /dev/null" else line[len("+++ b/"):]
            if path is not None:
                out.setdefault(path, (set(), set()))
        elif path is not None and (hunk := HUNK.match(line)):
            start, count = int(hunk[1]), int(hunk[2] if hunk[2] is not None else 1)
            if count:
                out[path][0].update(range(start, start + count))
            else:
                out[path][1].add(start)  # removed after line `start` of tip's file
    return out


def functions(source: str):
    """(mangled name, first line, last line) of each function mutmut 3 mutates."""
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"x_{node.name}", _first(node), node.end_lineno
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield f"xǁ{node.name}ǁ{item.name}", _first(item), item.end_lineno


def _first(node) -> int:
    return min([node.lineno] + [d.lineno for d in node.decorator_list])


def module_name(path: str) -> str:
    name = path[:-len(".py")].replace("/", ".")
    return name[:-len(".__init__")] if name.endswith(".__init__") else name


def changed_functions(base: str, tip: str = "HEAD") -> list[str]:
    names = []
    for path, (changed, removed_after) in sorted(changed_lines(base, tip).items()):
        if not path.endswith(".py"):
            continue
        source = subprocess.run(["git", "show", f"{tip}:{path}"], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout
        for mangled, first, last in functions(source):
            if (any(first <= n <= last for n in changed)
                    or any(first <= n < last for n in removed_after)):
                names.append(f"{module_name(path)}.{mangled}")
    return names


def main(argv: list[str]) -> None:
    listing = "--list" in argv
    argv = [a for a in argv if a != "--list"]
    base, tip = (argv + ["9015a28", "HEAD"][len(argv):])[:2]
    names = changed_functions(base, tip)
    if listing:
        print(*names, sep="\n")
    else:
        print("^(" + "|".join(re.escape(n) for n in names) + ")__mutmut_\\d+$")


if __name__ == "__main__":
    main(sys.argv[1:])
