"""The house rules: no import cycles, dependencies in one order, lazy imports say why."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "msexp"

# Each folder may import its own layer and the layers before it; spec and execution are
# peers that never import each other.
LAYERS = [{"nouns", "secrets", "os_tools"}, {"training"}, {"spec", "execution"}, {"hooks"},
          {"tracking"}, {"search"}, {"tune"}, {"cluster"}, {"cli", "api"}]


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """msexp modules that `name` imports anywhere in its file, function-level included."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            while target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in known and target != name:
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    # importing a package's own __init__ re-exports is not a dependency on its modules
    return {name: {t for t in imports(name, path, known) if known[t].name != "__init__.py"}
            for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def layer(module: str) -> int:
    parts = module.split(".")
    folder = parts[1] if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()) \
        else "nouns"
    return next(i for i, names in enumerate(LAYERS) if folder in names)


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_the_cycle_finder_sees_a_function_level_cycle(tmp_path: Path) -> None:
    known = {"p.a": tmp_path / "a.py", "p.b": tmp_path / "b.py"}
    known["p.a"].write_text("import p.b\n")
    known["p.b"].write_text("def f():\n    from p.a import x\n")
    edges = {name: imports(name, path, known) for name, path in known.items()}
    assert cycles(edges) == [["p.a", "p.b"]]


@pytest.mark.parametrize("module", sorted(modules()))
def test_imports_follow_the_dependency_order(module: str) -> None:
    own = layer(module)
    for target in graph()[module]:
        there = layer(target)
        assert there < own or (there == own and target.split(".")[1] == module.split(".")[1]
                               ) or own == there == 0, f"{module} imports {target}"


def test_every_lazy_import_says_why() -> None:
    """An import inside a function is kept only to save start-up time, and its block of
    imports says why on its first line."""
    silent = []
    for name, path in modules().items():
        lines = path.read_text(encoding="utf-8").splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            body = sorted((s for s in ast.walk(node)
                           if isinstance(s, (ast.Import, ast.ImportFrom))), key=lambda s: s.lineno)
            explained_until = -1
            for sub in body:
                text = " ".join(lines[sub.lineno - 1:sub.end_lineno])
                if "#" in text:
                    explained_until = sub.end_lineno
                elif explained_until < sub.lineno - 2:  # not in an explained block
                    silent.append(f"{name}:{sub.lineno}")
                else:
                    explained_until = sub.end_lineno
    assert silent == []


MAX_MODULE_LINES, MAX_FUNCTION_LINES = 300, 50
FOLDERS = sorted({path.parent for path in PACKAGE.rglob("*.py")})


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: str(f.relative_to(PACKAGE.parent)))
def test_every_module_and_function_is_small(folder: Path) -> None:
    too_big = []
    for path in sorted(folder.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > MAX_MODULE_LINES:
            too_big.append(f"{path.name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_big.append(f"{path.name}:{node.name}: {length} lines")
    assert too_big == []



# A trial's claim marks (`TrialKey`): who holds it, its heartbeat, its attempts, what a
# rerun copies. `search/claims.py` alone reads and writes them.
CLAIM_MARKS = {"OWNER", "HEARTBEAT", "ATTEMPT", "RERUN_OF"}
CLAIMS = PACKAGE / "search" / "claims.py"
ATTR_WRITERS = {"set_user_attr", "set_trial_user_attr"}


def claim_mark_uses(source: str) -> list[int]:
    """Lines that name a claim mark (`TrialKey.OWNER`, ...) or use its stored name as a
    trial attribute (`user_attrs["owner"]`, `user_attrs.get("attempt")`,
    `set_user_attr("heartbeat", ...)`)."""
    from msexp.keys import TrialKey

    stored = {getattr(TrialKey, mark) for mark in CLAIM_MARKS}

    def is_stored(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and node.value in stored

    def on_user_attrs(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "user_attrs"

    lines = []
    for node in ast.walk(ast.parse(source)):
        named = (isinstance(node, ast.Attribute) and node.attr in CLAIM_MARKS
                 and isinstance(node.value, ast.Name) and node.value.id == "TrialKey")
        indexed = (isinstance(node, ast.Subscript) and on_user_attrs(node.value)
                   and is_stored(node.slice))
        called = (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and (node.func.attr in ATTR_WRITERS or on_user_attrs(node.func.value))
                  and any(is_stored(arg) for arg in node.args))
        if named or indexed or called:
            lines.append(node.lineno)
    return sorted(lines)


def test_only_the_claims_module_reads_or_writes_a_trials_claim_marks() -> None:
    # mutation: `t.user_attrs.get(TrialKey.OWNER)` back in cli/studies.py fails it
    found = {str(path.relative_to(PACKAGE.parent)): lines for path in PACKAGE.rglob("*.py")
             if path != CLAIMS and (lines := claim_mark_uses(path.read_text(encoding="utf-8")))}
    assert found == {}
    assert claim_mark_uses(CLAIMS.read_text(encoding="utf-8")), "the claims module uses them"


def test_the_claim_mark_finder_sees_each_way_to_use_a_mark() -> None:
    source = ("TrialKey.ATTEMPT\n"
              "trial.user_attrs['owner']\n"
              "trial.user_attrs.get('heartbeat', 0)\n"
              "trial.set_user_attr('retry_of', 3)\n"
              "storage.set_trial_user_attr(7, 'attempt', 1)\n"
              "document['owner'], trial.user_attrs.get('status'), TrialKey.ERROR\n")
    assert claim_mark_uses(source) == [1, 2, 3, 4, 5]
