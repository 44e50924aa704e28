"""The one model of the sweep file: `SweepFile` with `fixed`, `params` and `when` generated
from an experiment's knobs (`sweep_model`). It validates, holds the defaults, and gives
the JSON Schema (`sweep_schema`, `msexp schema`) and the knob table (`knob_rows`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    WrapValidator,
    create_model,
    field_validator,
)
from pydantic_core import PydanticCustomError

from msexp.experiment_source import builtin_names
from msexp.knobs import KNOBS, Knob
from msexp.spec.file import CommandSection, Constraint, Objective, SweepFile

_LOG = Knob("log", bool, False, "sample on a log scale (needs low > 0)")


def _config(open_as: str) -> ConfigDict:
    """Strict; an open model (`open_as` names it) also takes names it does not declare."""
    return ConfigDict(extra="allow" if open_as else "forbid", strict=True, frozen=True)


def _ruled(rule: Callable[[Any], Optional[str]]) -> WrapValidator:
    """Check a value with msexp's own rule (its wording) before pydantic checks the type."""
    def validate(value: Any, handler: Callable[[Any], Any]) -> Any:
        broken = rule(value)
        if broken:
            raise PydanticCustomError("rule", broken)
        return handler(value)
    return WrapValidator(validate)


def knob_value(knob: Knob) -> Any:
    """The type of one value of `knob`: its type or choices, its bounds, its help."""
    kind: Any = Literal[knob.choices] if knob.choices is not None else knob.type
    kind = list[Any] if kind is list else kind
    bounds = {b: getattr(knob, b) for b in ("ge", "gt", "le", "lt") if getattr(knob, b) is not None}
    return Annotated[kind, Field(description=knob.help, **bounds), _ruled(knob.check)]


def _form(value: Any) -> Optional[str]:
    if isinstance(value, list):
        return "[list]"
    if isinstance(value, dict):
        return "[values]" if "values" in value else "[range]"
    return None


def _one_or_list(value: Any) -> str:
    return "[list]" if isinstance(value, list) else "[one]"


def _step_rule(knob: Knob) -> Callable[[Any], Optional[str]]:
    def rule(step: Any) -> Optional[str]:
        if isinstance(step, bool) or not isinstance(step, (int, float)) or step <= 0:
            return "must be a number > 0"
        if knob.type is int and not isinstance(step, int):
            return f"{knob.name} is an integer knob, so step must be an integer"
        return None
    return rule


def _fields(knobs: Mapping[str, Knob], field: Callable[[Knob], tuple[Any, Any]]
            ) -> dict[str, Any]:
    """One field per knob, under a safe Python name; the knob's name is the alias."""
    return {f"knob_{i}": (kind, Field(default, alias=knob.name, title=knob.name))
            for i, knob in enumerate(knobs.values()) for kind, default in [field(knob)]}


def _when_model(knobs: Mapping[str, Knob], open_as: str) -> type[BaseModel]:
    """`when`: knob names, each with one value or a list of values of that knob."""
    def field(knob: Knob) -> tuple[Any, Any]:
        value = knob_value(knob)
        return Annotated[Union[Annotated[value, Tag("[one]")],
                               Annotated[list[value], Tag("[list]")]],
                         Discriminator(_one_or_list)], None
    return create_model(_named("When", open_as), __config__=_config(open_as),
                        **_fields(knobs, field))


def _named(name: str, open_as: str) -> str:
    """The model's name; an open model's differs, as the schema holds each form."""
    return open_as + name.replace(".", "_")  # a `.` would not be kept in the schema's $defs


def _param_type(knob: Knob, when: type[BaseModel], open_as: str) -> Any:
    """A swept knob: a list of values, `{values, when}`, or for numbers `{low, high, ...}`."""
    return _forms(knob.name, knob_value(knob), _range_fields(knob), when, open_as, knob.help)


_OWN = Knob("own", float, None, "a knob of the experiment's own")


def _own_param(when: type[BaseModel], open_as: str) -> Any:
    """A knob the model does not know (a command's, an own experiment's): any values in a
    list or `{values, when}`, or a range of numbers."""
    return _forms("own", Any, _range_fields(_OWN), when, open_as, _OWN.help)


def _range_fields(knob: Knob) -> Optional[dict[str, Any]]:
    if knob.type not in (int, float):
        return None
    bound = knob_value(knob)
    step = Annotated[knob.type, Field(gt=0, description="sample low, low + step, ..."),
                     _ruled(_step_rule(knob))]
    return {"low": (bound, ...), "high": (bound, ...), "log": (knob_value(_LOG), False),
            "step": (step, None)}


def _forms(name: str, value: Any, ranged: Optional[dict[str, Any]], when: type[BaseModel],
           open_as: str, description: str) -> Any:
    values = Annotated[list[value], Field(min_length=1)]
    listed = create_model(_named(f"{name} values", open_as), __config__=_config(""),
                          values=(values, ...), when=(when, None))
    forms: list[Any] = [Annotated[values, Tag("[list]")], Annotated[listed, Tag("[values]")]]
    if ranged is not None:
        forms.append(Annotated[create_model(_named(f"{name} range", open_as),
                                            __config__=_config(""), **ranged,
                                            when=(when, None)), Tag("[range]")])
    return Annotated[Union[tuple(forms)], Discriminator(_form), Field(description=description)]


def _open(extra: Any) -> type[BaseModel]:
    """A base whose model also takes other names, each of type `extra`."""
    class Open(BaseModel):
        model_config = _config("Open")
        __pydantic_extra__: dict[str, extra]  # type: ignore[valid-type]
    return Open


def _metric(metrics: tuple[str, ...]) -> Any:
    rule = "must be one of " + ", ".join(metrics)
    return Annotated[Literal[metrics], _ruled(lambda m: None if m in metrics else rule)]


def _one_or_many(cls: Any, value: Any) -> Any:
    return [value] if isinstance(value, dict) else value


def _metric_fields(metrics: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`objective` and `constraints` whose metrics are `metrics`."""
    objective = create_model("KnownObjective", __base__=Objective, metric=(_metric(metrics), ...))
    constraint = create_model("KnownConstraint", __base__=Constraint,
                              metric=(_metric(metrics), ...))
    fields = {
        "objective": (list[objective], Field(  # type: ignore[valid-type]
            default_factory=lambda: [objective(metric="eval_accuracy")], min_length=1)),
        "constraints": (list[constraint], []),  # type: ignore[valid-type]
    }
    one = Union[objective, Annotated[list[objective], Field(min_length=1)]]  # type: ignore
    validators = {"_one_or_many": field_validator(
        "objective", mode="before", json_schema_input_type=one)(classmethod(_one_or_many))}
    return fields, validators


def _knob_sections(knobs: Mapping[str, Knob], open_as: str) -> dict[str, Any]:
    """`fixed` and `params`: a field per knob (the knob's default; a param's forms)."""
    when = _when_model(knobs, open_as)
    config: dict[str, Any] = ({"__base__": _open(Any)} if open_as
                              else {"__config__": _config("")})
    fixed = create_model(_named("Fixed", open_as), **config,
                         **_fields(knobs, lambda k: (knob_value(k), k.default)))
    if open_as:
        config = {"__base__": _open(_own_param(when, open_as))}
    params = create_model(_named("Params", open_as), **config,
                          **_fields(knobs, lambda k: (_param_type(k, when, open_as), None)))
    return {"fixed": (fixed, {}), "params": (params, {})}


_MODELS: dict[str, Any] = {}
"""Models built, by what they were built from: building one takes 0.1-0.3 s."""


def _built(build: Callable[..., Any], *args: Any) -> Any:
    key = repr((build.__name__, [list(a.values()) if isinstance(a, Mapping) else a
                                 for a in args]))
    if key not in _MODELS:
        _MODELS[key] = build(*args)
    return _MODELS[key]


def values_model(knobs: Mapping[str, Knob]) -> type[BaseModel]:
    """Only `fixed` and `params` of `sweep_model(knobs)`: one trial's values (`--set`)."""
    return _built(_values_model, knobs)


def _values_model(knobs: Mapping[str, Knob]) -> type[BaseModel]:
    return create_model("Values", __config__=_config(""), **_knob_sections(knobs, ""))


def sweep_model(knobs: Mapping[str, Knob], metrics: Optional[tuple[str, ...]] = None,
                experiment: Any = None, open_as: str = "") -> type[SweepFile]:
    """The sweep file of an experiment with `knobs` (and, if given, only `metrics`).

    An `open_as` model (the name its parts start with) also takes the names of knobs it
    does not know, as any values or a range; `experiment` narrows the `experiment` key's
    type (the schema's forms).
    """
    return _built(_sweep_model, knobs, metrics, experiment, open_as)


def _sweep_model(knobs: Mapping[str, Knob], metrics: Optional[tuple[str, ...]],
                 experiment: Any, open_as: str) -> type[SweepFile]:
    fields = _knob_sections(knobs, open_as)
    validators: dict[str, Any] = {}
    if metrics is not None:
        extra, validators = _metric_fields(metrics)
        fields.update(extra)
    if experiment is not None:
        fields["experiment"] = (experiment, ...)
    return create_model(_named("SweepFile", open_as), __base__=SweepFile,
                        __validators__=validators, **fields)


def sweep_schema(knobs: Mapping[str, Knob], metrics: tuple[str, ...],
                 known: tuple[str, ...]) -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of sweep files: one of three forms of the model.

    A file of a `known` experiment is held to `knobs` and `metrics` exactly; a file of
    another experiment (a built-in, or a name with a `:`, `.` or `/`) may add knobs of its
    own (msexp's keep their rules); a command's `fixed` and `params` take any name (a
    param still in one of the forms: a list, values or a range).
    """
    builtins = tuple(name for name in builtin_names() if name not in known)
    other: Any = Annotated[str, Field(pattern="[:./]", description="package.module:build or "
                                      "path/to/file.py:build", json_schema_extra={
                                          "not": {"enum": list(known)}})]
    other = Union[other, Literal[builtins]] if builtins else other
    forms = Union[
        Annotated[sweep_model(knobs, metrics, Literal[known]), Tag("known")],
        Annotated[sweep_model(KNOBS, None, other, "Open"), Tag("other")],
        Annotated[sweep_model({}, None, CommandSection, "Command"), Tag("command")],
    ]

    def form(data: Any) -> Optional[str]:
        experiment = data.get("experiment") if isinstance(data, dict) else None
        if isinstance(experiment, dict):
            return "command"
        return "known" if experiment in known else "other"

    schema = TypeAdapter(Annotated[forms, Discriminator(form)]).json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "msexp sweep file", **schema}


def knob_rows(knobs: Mapping[str, Knob]) -> list[dict[str, str]]:
    """The knob table as the model states it: per knob, its type, allowed values, default,
    condition, whether it shapes the graphs, and its meaning."""
    fixed = sweep_model(knobs).model_json_schema(mode="validation")
    properties = fixed["$defs"]["Fixed"]["properties"]
    return [_row(properties[knob.name], knob) for knob in knobs.values()]


_TYPES = {"integer": "int", "number": "float", "string": "str", "boolean": "bool",
          "array": "list"}
_BOUNDS = (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="),
           ("exclusiveMaximum", "<"))


def _row(schema: dict[str, Any], knob: Knob) -> dict[str, str]:
    allowed = (", ".join(map(str, schema["enum"])) if "enum" in schema else
               " ".join(f"{op} {_text(schema[key])}" for key, op in _BOUNDS if key in schema))
    when = ", ".join(f"{name} in {list(values)}" for name, values in knob.when.items())
    return {"knob": knob.name, "type": _TYPES[schema.get("type", "string")], "allowed": allowed,
            "default": _text(schema.get("default")), "when": when,
            "graph": "yes" if knob.graph else "no", "meaning": schema["description"]}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return "" if value is None else str(value)
