"""The house rules: no import cycles, dependencies in one order, lazy imports say why, and
ARCHITECTURE.md's map true to the package."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "msexp"
PAGE = PACKAGE.parent / "ARCHITECTURE.md"
NOUNS = "nouns"  # the folder name of the package's own modules (`msexp/*.py`)
MAX_LOOSE_MODULES = 9

# ARCHITECTURE.md's layer lines, the one source of the dependency order:
# - **N** `folder/` — what the layer is for: module, module, subpackage/ (module, ...)
LAYER_LINE = re.compile(r"^- \*\*(\d+)\*\* `(msexp/\*\.py|[a-z_]+/)` — [^:]*: (.+)$")
NAME = re.compile(r"([a-z_0-9]+/)(?: \(([^)]*)\))?|([a-z_0-9]+)")


def listed(names: str) -> set[str]:
    """The modules a layer line lists: `a, host/ (b, c)` -> a, host/, host/b, host/c."""
    found = set()
    for package, inside, module in NAME.findall(names):
        if package:
            found |= {package} | {package + n.strip() for n in inside.split(",") if n.strip()}
        else:
            found.add(module)
    return found


def page_layers(text: str) -> dict[str, tuple[int, set[str]]]:
    """Each folder's layer and the modules its line lists."""
    found = {}
    for line in text.splitlines():
        if match := LAYER_LINE.match(line):
            folder = NOUNS if match[2] == "msexp/*.py" else match[2].rstrip("/")
            found[folder] = (int(match[1]), listed(match[3]))
    return found


# Each folder may import its own modules and the layers before it; folders of one layer
# are peers that never import each other (layer 0 excepted).
LAYERS = page_layers(PAGE.read_text(encoding="utf-8"))


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


@functools.cache  # parsed once: every module's test reads it (173 parses took 2 min)
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
        else NOUNS
    assert folder in LAYERS, f"ARCHITECTURE.md has no layer line for {folder}/"
    return LAYERS[folder][0]


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


def folders() -> dict[str, Path]:
    """Every folder that has a layer: the package's own modules and its top packages."""
    return {NOUNS: PACKAGE} | {path.parent.name: path.parent
                               for path in PACKAGE.glob("*/__init__.py")}


def modules_in(folder: str) -> set[str]:
    """What a folder's layer line must list: its modules, and its subpackages (`host/`)
    with theirs (`host/link`)."""
    root = folders()[folder]
    paths = root.glob("*.py") if folder == NOUNS else root.rglob("*.py")
    found = set()
    for path in paths:
        relative = path.relative_to(root)
        if path.name not in ("__init__.py", "__main__.py"):
            found.add(relative.with_suffix("").as_posix())
        elif len(relative.parts) > 1:
            found.add(relative.parent.as_posix() + "/")
    return found


@pytest.mark.parametrize("folder", sorted(folders()))
def test_each_layer_line_lists_its_folders_modules(folder: str) -> None:
    # mutation: a module added to search/ and not to its line, or a line naming a module
    # that was renamed, fails it
    assert folder in LAYERS, f"ARCHITECTURE.md has no layer line for {folder}"
    listed_there, on_disk = LAYERS[folder][1], modules_in(folder)
    assert {"missing from the line": on_disk - listed_there,
            "named but absent": listed_there - on_disk} == \
        {"missing from the line": set(), "named but absent": set()}


def test_the_layer_lines_name_only_folders_that_exist() -> None:
    assert set(LAYERS) - set(folders()) == set()
    assert LAYERS[NOUNS][0] == 0, "the shared nouns come first"


SPAN = re.compile(r"`([^`\n]+)`")


def defines(path: Path, name: str) -> bool:
    """Whether a module defines `name` at its top level (a function, class or value)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == name:
                return True
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
    return False


def wrong_references(text: str) -> list[str]:
    """The modules a text names in backticks (`search/claims.py`, `execution/host/`,
    `knobs.py: KNOBS`) that do not exist, or that do not define the name given."""
    wrong = []
    for span in SPAN.findall(text):
        reference, _, name = span.partition(": ")
        first = reference.split("/")[0]
        if not (reference.endswith(".py") or "/" in reference and first in folders()) \
                or "*" in reference:
            continue
        path = next((root / reference for root in (PACKAGE, PACKAGE.parent)
                     if (root / reference).exists()), None)
        if path is None or (name and not (path.suffix == ".py" and defines(path, name))):
            wrong.append(span)
    return wrong


def test_the_page_names_only_modules_that_exist() -> None:
    assert wrong_references(PAGE.read_text(encoding="utf-8")) == []


def test_the_reference_finder_sees_a_missing_module_and_name() -> None:
    text = ("`search/claims.py` `search/nope.py` `execution/host/` `execution/nope/` "
            "`knobs.py: KNOBS` `knobs.py: NOPE` `mlruns/spool/` `nope.py` `msexp/*.py` "
            "`tests/test_architecture.py` `msexp sweep`")
    assert wrong_references(text) == ["search/nope.py", "execution/nope/", "knobs.py: NOPE",
                                      "nope.py"]


def test_the_layer_line_parser() -> None:
    line = "- **2** `execution/` — running one trial: protocol, host/ (server, link), result"
    assert page_layers(line) == {"execution": (2, {"protocol", "host/", "host/server",
                                                   "host/link", "result"})}


def test_at_most_nine_loose_modules() -> None:
    """Modules outside any package are the shared nouns; more than a handful are packages
    waiting to be named."""
    loose = sorted(path.name for path in PACKAGE.glob("*.py")
                   if path.name not in ("__init__.py", "__main__.py"))
    assert len(loose) <= MAX_LOOSE_MODULES, loose


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
