"""An experiment's source: where its file is (msexp's own, in `experiments/`, included: a
checkout's, or the copy a wheel installs in `share/msexp/experiments`) and what it says
without running it: its `DEFAULTS` and `PARAMS`, where it writes them as literals (what
`msexp plan` shows a trial gets, on any machine)."""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path
from typing import Any

from msexp.errors import ExperimentError, MsexpError

DECLARED = ("DEFAULTS", "PARAMS")
BUILTINS = ("lenet_digits", "mlp_digits", "resnet_cifar")  # the files of msexp's experiments/


def written_declarations(ref: str) -> dict[str, dict[str, Any]] | None:
    """An experiment's `DEFAULTS` and `PARAMS` read from its source, not imported ({} for
    one it lacks): where each is a dict literal the module assigns once and names nowhere
    else. None where running the module could tell otherwise (a value computed, changed,
    imported), or its source is not found."""
    source = _source(ref.partition(":")[0])
    try:
        tree = ast.parse(source.read_bytes()) if source else None
    except (OSError, SyntaxError, ValueError):
        return None
    if tree is None or _star_import(tree):
        return None
    found: dict[str, dict[str, Any]] = {name: {} for name in DECLARED}
    assigned = {name: [node for node in tree.body if _assigns(node, name)] for name in DECLARED}
    for name, nodes in assigned.items():
        named = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name or
                 isinstance(n, ast.alias) and (n.asname or n.name) == name]
        if len(named) != len(nodes) or len(nodes) > 1:
            return None
        if nodes:
            try:
                found[name] = ast.literal_eval(nodes[0].value)  # type: ignore[attr-defined]
            except ValueError:
                return None
            if not isinstance(found[name], dict):
                return None
    return found


def _assigns(node: ast.stmt, name: str) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else \
        [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else []
    return len(targets) == 1 and isinstance(targets[0], ast.Name) and targets[0].id == name


def _star_import(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)
               for n in ast.walk(tree))


def _source(target: str) -> Path | None:
    """The file of a `file.py` or `package.module` experiment, found without importing."""
    if target.endswith(".py") or "/" in target:
        return Path(target) if Path(target).is_file() else None
    if target in BUILTINS:
        return builtin_file(target)
    *package, module = target.split(".")
    found = (Path(entry or ".", *package, f"{module}.py") for entry in sys.path)
    return next((path for path in found if path.is_file()), None)


def builtin_names() -> list[str]:
    """The names of msexp's own experiments."""
    return list(BUILTINS)


def builtin_file(name: str, source: str = "experiment") -> Path:
    """The file of msexp's own experiment `name`.

    Raises:
        ExperimentError: msexp has no experiment of that name.
    """
    if name not in BUILTINS:
        raise ExperimentError(source, "experiment", f"no built-in experiment named {name} "
                              f"(built-ins: {', '.join(BUILTINS)})", name)
    return builtin_folder() / f"{name}.py"


@functools.lru_cache(maxsize=1)
def builtin_folder() -> Path:
    """msexp's `experiments/` folder, for this installed package (see `shipped_folder`)."""
    return shipped_folder(Path(__file__).resolve().parent)


def shipped_folder(package: Path) -> Path:
    """msexp's `experiments/` for the package folder `package`: beside it in a checkout (an
    editable install), else where a wheel put it, `share/msexp/experiments` of the install's
    prefix (pyproject's data-files), the nearest above it (a venv's, ~/.local's, /usr's).

    Raises:
        MsexpError: neither is there.
    """
    places = [package.parent / "experiments",
              *(prefix / "share" / "msexp" / "experiments" for prefix in package.parents)]
    for folder in places:
        if (folder / f"{BUILTINS[0]}.py").is_file():
            return folder
    raise MsexpError(f"msexp's experiments are missing (neither {places[0]} nor a "
                     "share/msexp/experiments above it): reinstall msexp")
