"""A JSON Schema for sweep files, made from the same knob table that validates them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from msexp.knobs import METRICS, Knob
from msexp.spec import file as sections

_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array"}


def knob_value_schema(knob: Knob) -> dict[str, Any]:
    """The schema of one value of `knob`."""
    schema: dict[str, Any] = {"type": _JSON_TYPES[knob.type], "description": knob.help}
    if knob.choices is not None:
        schema["enum"] = list(knob.choices)
    for bound, key in (("ge", "minimum"), ("gt", "exclusiveMinimum"), ("le", "maximum"),
                       ("lt", "exclusiveMaximum")):
        if getattr(knob, bound) is not None:
            schema[key] = getattr(knob, bound)
    if knob.default is not None:
        schema["default"] = knob.default
    return schema


def _param_schema(knob: Knob, knobs: Mapping[str, Knob]) -> dict[str, Any]:
    value = knob_value_schema(knob)
    values = {"type": "array", "items": value, "minItems": 1}
    when = {"type": "object", "propertyNames": {"enum": list(knobs)}}
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


def _model_schema(model: Any) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    schema["additionalProperties"] = False
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema


def sweep_schema(knobs: Mapping[str, Knob], metrics: tuple[str, ...] = METRICS
                 ) -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of a sweep file whose experiment has `knobs`."""
    objective = _model_schema(sections.Objective)
    objective["properties"]["metric"] = {"enum": list(metrics)}
    objective["required"] = ["metric"]
    fixed = {name: knob_value_schema(k) for name, k in knobs.items()}
    params = {name: _param_schema(k, knobs) for name, k in knobs.items()}
    file_props = sections.SweepFile.model_fields
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "msexp sweep file",
        "type": "object",
        "additionalProperties": False,
        "required": [n for n, f in file_props.items() if f.is_required()],
        "properties": {
            "name": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                     "maxLength": 100},
            "experiment": {"anyOf": [
                {"type": "string", "minLength": 1,
                 "description": "built-in name, package.module:build or path/to/file.py:build"},
                _model_schema(sections.CommandSection)]},
            "method": {"enum": [m.value for m in sections.Method], "default": "grid"},
            "objective": {"anyOf": [objective, {"type": "array", "items": objective,
                                                "minItems": 1}]},
            "budget": _model_schema(sections.Budget),
            "pruner": _model_schema(sections.Pruner),
            "data": _model_schema(sections.Data),
            "checkpoint": _model_schema(sections.Checkpoint),
            "fixed": {"type": "object", "additionalProperties": False, "properties": fixed},
            "params": {"type": "object", "additionalProperties": False, "properties": params},
        },
    }
