"""YAML as a sweep file may be written: `yaml.safe_load`, refusing a key given twice and
aliases that expand beyond a budget, with errors as one line naming the place."""

from __future__ import annotations

from typing import Any

import yaml

from msexp.errors import SpecError

ALIAS_BUDGET = 100_000
"""Values a file may expand to through YAML aliases (a billion-laughs file: 10**9)."""


def load_yaml(text: str, source: str) -> Any:
    """Parse YAML text as `yaml.safe_load` does, refusing a key given twice in a mapping
    and aliases that expand beyond ALIAS_BUDGET values.

    Raises:
        SpecError: invalid YAML, a key given twice, or an alias bomb (one line).
    """
    loader = None
    try:
        loader = StrictLoader(text)  # checks the characters first: a ReaderError
        loader.source = source
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise SpecError(source, _yaml_where(exc), f"invalid YAML ({_yaml_problem(exc)})",
                        show_value=False) from None
    except (RecursionError, ValueError) as exc:  # nested too deep; an integer too long
        raise SpecError(source, "", f"invalid YAML ({exc})", show_value=False) from None
    finally:
        if loader is not None:
            loader.dispose()


class StrictLoader(yaml.SafeLoader):
    """The safe loader, checking the document's nodes before building any value."""

    source = ""

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        _check_expansion(self.source, node)
        _check_keys(self.source, node, "", set())
        return self.construct_document(node)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _check_expansion(source: str, root: yaml.Node) -> None:
    """Count the values the document expands to, each node once (aliases share nodes)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node, path: str) -> int:
        key = id(node)
        if key not in sizes:
            if key in active:
                raise SpecError(source, path, "an alias must not refer to its own anchor",
                                show_value=False)
            active.add(key)
            sizes[key] = 1 + sum(size(child, path) for child in _children(node))
            active.discard(key)
        return sizes[key]

    total = size(root, "")
    if total > ALIAS_BUDGET and total > len(sizes):
        raise SpecError(source, _largest_key(root, sizes), "aliases must expand to at most "
                        f"{ALIAS_BUDGET} values, got {total}", show_value=False)


def _largest_key(node: yaml.Node, sizes: dict[int, int]) -> str:
    """The key path of the deepest mapping entry that expands beyond the budget."""
    path = ""
    while isinstance(node, yaml.MappingNode):
        entry = next(((k, v) for k, v in node.value if sizes[id(v)] > ALIAS_BUDGET), None)
        if entry is None:
            break
        path, node = _join(path, str(entry[0].value)), entry[1]
    return path


def _check_keys(source: str, node: yaml.Node, path: str, seen: set[int]) -> None:
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for i, child in enumerate(node.value):
            _check_keys(source, child, _join(path, str(i)), seen)
    if not isinstance(node, yaml.MappingNode):
        return
    names: set[str] = set()
    for key, value in node.value:
        name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
        if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
            if name in names:
                raise SpecError(source, _join(path, name), "is given twice", name)
            names.add(name)
        _check_keys(source, value, _join(path, name), seen)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _yaml_where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""


def _yaml_problem(exc: yaml.YAMLError) -> str:
    return getattr(exc, "problem", None) or str(exc).splitlines()[0]
