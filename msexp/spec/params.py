"""The `fixed` and `params` sections parsed into a `Space`: each param's written form
(list, values, range, `when`), and the order in which conditions can be resolved."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from msexp.errors import SpecError
from msexp.knobs import Knob
from msexp.spec.space import Param, Space


def parse_params(source: str, knobs: Mapping[str, Knob], fixed: Mapping[str, Any],
                 params: Mapping[str, Any]) -> Space:
    """Build the search space of `fixed` and `params`, values the sweep file's model
    (`spec/model.py`) has checked, and check the rules across their keys."""
    parsed = []
    for name, written in params.items():
        key = f"params.{name}"
        if name in fixed:
            raise SpecError(source, key, "is also set in fixed; set a knob in one place", written)
        parsed.append(_parse_param(source, key, knobs[name], written))
    return Space(source, knobs, fixed, _dependency_order(source, parsed, knobs))


def _parse_param(source: str, key: str, knob: Knob, written: Any) -> Param:
    form = {"values": written} if isinstance(written, list) else written
    when = _parse_when(source, f"{key}.when", knob.name, form.get("when") or {})
    if "values" in form:
        values = form["values"]
        if len({repr(v) for v in values}) != len(values):
            raise SpecError(source, key, "values must be unique", values)
        return Param(knob.name, form, values=tuple(values), when=when)
    return _parse_range(source, key, knob, form, when)


def _parse_range(source: str, key: str, knob: Knob, written: dict, when: dict) -> Param:
    low, high = written["low"], written["high"]
    log, step = written.get("log", False), written.get("step")
    if low > high:
        raise SpecError(source, key, "low <= high must hold",
                        f"low={low} high={high}")
    if log and low <= 0:
        raise SpecError(source, f"{key}.low", "a log range needs low > 0", low)
    if log and step is not None:
        raise SpecError(source, f"{key}.step", "a log range takes no step", step)
    return Param(knob.name, written, low=low, high=high, log=log, step=step,
                 is_int=knob.type is int, when=when)


def _parse_when(source: str, key: str, owner: str, written: dict[str, Any]
                ) -> dict[str, tuple[Any, ...]]:
    if owner in written:
        raise SpecError(source, f"{key}.{owner}", "a param cannot depend on itself",
                        written[owner])
    return {name: tuple(allowed) if isinstance(allowed, list) else (allowed,)
            for name, allowed in written.items()}


def _dependency_order(source: str, params: list[Param], knobs: Mapping[str, Knob]) -> list[Param]:
    """Order params so every param comes after the params its condition refers to."""
    by_name = {p.name: p for p in params}
    ordered: list[Param] = []
    visiting: set[str] = set()

    def visit(param: Param) -> None:
        if param in ordered:
            return
        if param.name in visiting:
            raise SpecError(source, f"params.{param.name}.when",
                            "conditions must not form a cycle", dict(param.when))
        visiting.add(param.name)
        for dep in (*param.when, *knobs[param.name].when):
            if dep in by_name:
                visit(by_name[dep])
        visiting.discard(param.name)
        ordered.append(param)

    for param in params:
        visit(param)
    return ordered
