"""A JSON Schema for sweep files: the sections as the `SweepFile` model declares them
(its `model_json_schema()`, so a section added there is in the schema), the knobs of
`fixed` and `params` from the same knob table that validates them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from msexp.knobs import METRICS, Knob
from msexp.spec.file import SweepFile


def knob_value_schema(knob: Knob) -> dict[str, Any]:
    """The schema of one value of `knob`, as pydantic states its type, choices and bounds."""
    kind: Any = Literal[knob.choices] if knob.choices is not None else knob.type
    bounds = {b: getattr(knob, b) for b in ("ge", "gt", "le", "lt")
              if getattr(knob, b) is not None}
    schema = TypeAdapter(Annotated[kind, Field(description=knob.help, **bounds)]).json_schema()
    if knob.default is not None:
        schema["default"] = knob.default
    return schema


def _param_schema(knob: Knob) -> dict[str, Any]:
    value = knob_value_schema(knob)
    values = {"type": "array", "items": value, "minItems": 1}
    when = {"type": "object"}
    forms: list[dict[str, Any]] = [
        values,
        {"type": "object", "additionalProperties": False, "required": ["values"],
         "properties": {"values": values, "when": when}},
    ]
    if knob.type in (int, float):
        number = {k: v for k, v in value.items() if k not in ("enum", "default")}
        forms.append({"type": "object", "additionalProperties": False,
                      "required": ["low", "high"],
                      "properties": {"low": number, "high": number, "log": {"type": "boolean"},
                                     "step": {"type": "number", "exclusiveMinimum": 0},
                                     "when": when}})
    return {"description": knob.help, "anyOf": forms}


def _metric_is(names: list[str]) -> dict[str, Any]:
    return {"properties": {"metric": {"enum": names}}}


def _known_rules(knobs: Mapping[str, Knob], metrics: tuple[str, ...],
                 known: tuple[str, ...]) -> dict[str, Any]:
    """A `known` experiment takes only `knobs` (in `when` too) and reports only `metrics`;
    any other experiment or command may add names of its own."""
    named = _metric_is(list(metrics))
    conditions = {name: {"properties": {"when": {"propertyNames": {"enum": list(knobs)}}}}
                  for name in knobs}
    return {
        "if": {"required": ["experiment"],
               "properties": {"experiment": {"enum": list(known)}}},
        "then": {"properties": {
            "fixed": {"additionalProperties": False, "properties": {n: {} for n in knobs}},
            "params": {"additionalProperties": False, "properties": conditions},
            "objective": {"anyOf": [{"type": "object", **named},
                                    {"type": "array", "items": named}]},
            "constraints": {"items": named},
        }},
    }


def _without_titles(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_titles(v) for k, v in node.items()
                if not (k == "title" and isinstance(v, str))}
    if isinstance(node, list):
        return [_without_titles(v) for v in node]
    return node


def sweep_schema(knobs: Mapping[str, Knob], metrics: tuple[str, ...] = METRICS,
                 known: tuple[str, ...] = ()) -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of a sweep file whose experiment has `knobs`.

    Files of the `known` experiments are held to `knobs` and `metrics` exactly; a file of
    another experiment may set names of its own, and a command's any name and value.
    """
    schema = _without_titles(SweepFile.model_json_schema())
    props = schema["properties"]
    props["experiment"]["description"] = ("built-in name, package.module:build, "
                                          "path/to/file.py:build, or a mapping with a command")
    props["fixed"] = props["params"] = {"type": "object"}  # a command's: any name, any value
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "msexp sweep file", **schema,
            "allOf": [_knob_rules(knobs), _known_rules(knobs, metrics, known)]}


def _knob_rules(knobs: Mapping[str, Knob]) -> dict[str, Any]:
    """An experiment msexp builds (named by a string, not a command) types msexp's knobs."""
    return {
        "if": {"required": ["experiment"], "properties": {"experiment": {"type": "string"}}},
        "then": {"properties": {
            "fixed": {"properties": {n: knob_value_schema(k) for n, k in knobs.items()}},
            "params": {"properties": {n: _param_schema(k) for n, k in knobs.items()}},
        }},
    }
