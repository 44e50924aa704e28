"""The mutants of commit NEW that make the same change as mutmut's mutants NAMES of OLD
(tests/README.md: a draw re-run on a later commit, whose mutants' numbers moved):

    python tests/mutation/port_names.py OLD NEW NAMESFILE > MAPPED   # unmapped: stderr

A mutant of NEW maps when its function's mutated source equals the OLD one's (up to the
function's name); a function changed since maps none of its mutants."""
import ast
import subprocess
import sys
from pathlib import Path

from mutmut.mutation.file_mutation import mutate_file_contents


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def module_path(rev: str, module: str) -> str | None:
    for path in (module.replace(".", "/") + ".py", module.replace(".", "/") + "/__init__.py"):
        found = subprocess.run(["git", "cat-file", "-e", f"{rev}:{path}"], capture_output=True)
        if found.returncode == 0:
            return path
    return None


def mutated_sources(rev: str, path: str) -> dict[str, str]:
    """Each mutant function's source in `path` at `rev`, its name replaced by F."""
    mutated = mutate_file_contents(path, git("show", f"{rev}:{path}")).code
    lines = mutated.splitlines()
    return {node.name: "\n".join(lines[node.lineno - 1:node.end_lineno]).replace(node.name, "F", 1)
            for node in ast.walk(ast.parse(mutated))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and "__mutmut_" in node.name}


def main(old: str, new: str, names: list[str]) -> None:
    cache: dict[tuple[str, str], dict[str, str]] = {}
    for name in names:
        module, _, function = name.rpartition(".x")
        paths = module_path(old, module), module_path(new, module)
        if None in paths:
            print("unmapped", name, file=sys.stderr)
            continue
        for rev, path in zip((old, new), paths):
            cache.setdefault((rev, path), mutated_sources(rev, path))  # type: ignore[arg-type]
        source = cache[(old, paths[0])].get("x" + function)  # type: ignore[index]
        base = "x" + function.rsplit("__mutmut_", 1)[0] + "__mutmut_"
        same = [n for n, s in cache[(new, paths[1])].items()  # type: ignore[index]
                if n.startswith(base) and not n.endswith("orig") and s == source]
        print(f"{module}.{same[0]}" if same else f"unmapped {name}",
              file=sys.stdout if same else sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]).read_text().split())
