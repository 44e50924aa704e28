"""The sweep file as written: its sections, keys and types, and their errors as one line."""

from __future__ import annotations

import math
from enum import Enum
from typing import Annotated, Any, Literal, Optional, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from msexp.datasets import FORMATS
from msexp.errors import SpecError
from msexp.paths import NAME_PATTERN
from msexp.spec.near import allowed_keys, did_you_mean
from msexp.spec.yaml_text import load_yaml

Valid = TypeVar("Valid", bound=BaseModel)
FAIL_FAST = 3  # identical failures, none completed, after which a sweep starts no more trials


class Method(str, Enum):
    """How trials are chosen."""

    grid = "grid"
    random = "random"
    tpe = "tpe"
    cmaes = "cmaes"
    nsga2 = "nsga2"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Objective(_Strict):
    """A metric to optimize, and optionally a target that defines `epochs_to_target`.

    `reduce: best` takes the best epoch's value instead of the last one.
    """

    metric: str
    direction: Literal["maximize", "minimize"] = "maximize"
    target: Optional[float] = None
    reduce: Literal["last", "best"] = "last"


class Budget(_Strict):
    """How many trials, how long each may run, how many run at once, how many seeds
    each configuration runs with (`repeats`), whether trials may reuse the graphs an
    earlier trial compiled in the same worker (`cold: true` forbids it), and after how
    many identical failures, with none completed, a sweep starts no more trials
    (`fail_fast`; 0 or false: never, and no checks before or during the first trials)."""

    trials: Optional[int] = Field(None, ge=1)
    trial_timeout: float = Field(600.0, gt=0)
    workers: int = Field(1, ge=1)
    retries: int = Field(1, ge=0)
    repeats: int = Field(1, ge=1)
    cold: bool = False
    fail_fast: int = Field(FAIL_FAST, ge=0)

    @field_validator("fail_fast", mode="before",
                     json_schema_input_type=Union[bool, Annotated[int, Field(ge=0)]])
    @classmethod
    def _switch(cls, value: Any) -> Any:
        """`true` is the default count, `false` is 0."""
        return (FAIL_FAST if value else 0) if isinstance(value, bool) else value


class Pruner(_Strict):
    """Early stopping of unpromising trials on their per-epoch values."""

    type: Literal["none", "median", "percentile", "hyperband"] = "none"
    warmup_epochs: int = Field(1, ge=0)
    startup_trials: int = Field(2, ge=0)
    percentile: float = Field(25.0, gt=0, lt=100)
    reduction_factor: int = Field(3, ge=2)


class Data(_Strict):
    """Where a workload reads its data; without it the workload uses its built-in data."""

    format: Literal[tuple(FORMATS)]  # type: ignore[valid-type]
    path: str = Field(min_length=1)


class Constraint(_Strict):
    """A bound a trial's final metric must keep to be feasible (e.g. a memory budget)."""

    model_config = ConfigDict(json_schema_extra={"anyOf": [{"required": ["max"]},
                                                           {"required": ["min"]}]})

    metric: str
    max: Optional[float] = None
    min: Optional[float] = None

    @model_validator(mode="after")
    def _bounded(self) -> Constraint:
        if self.max is None and self.min is None:
            raise ValueError("needs max or min")
        return self

    def violation(self, metrics: dict[str, float]) -> float:
        """How far `metrics` is outside the bound (<= 0: kept); a missing metric violates."""
        value = metrics.get(self.metric)
        if value is None or value != value:
            return 1.0
        over = value - self.max if self.max is not None else -math.inf
        under = self.min - value if self.min is not None else -math.inf
        return max(over, under)


class Checkpoint(_Strict):
    """Checkpoints per trial: how often, which to keep, which to log to MLflow."""

    every: int = Field(1, ge=1)
    keep: Literal["last", "best", "all", "none"] = "last"
    log: Literal["best_trial", "all", "none"] = "best_trial"


class CommandSection(_Strict):
    """`experiment:` as the user's own command, run unchanged once per trial."""

    command: str = Field(min_length=1)
    args: Literal["flags", "hydra", "none"] = "flags"
    metrics: list[str] = Field(default_factory=list)
    # `plan --check`: a text runs the command once with these arguments (`--help`); a
    # mapping runs it for real, with these values over the first trial's (a tiny budget)
    check: Union[str, dict[str, Any]] = "--help"
    switches: Optional[list[str]] = None  # None: the flags `--help` shows without a value
    hooks: Optional[bool] = None  # the script uses msexp.hooks; None: seen in its imports
    own: list[str] = Field(default_factory=list)  # names that are the script's, not msexp's
    # environment variables the command gets though their names say they hold a secret
    pass_env: list[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]] = Field(
        default_factory=list)

    @field_validator("metrics", mode="before", json_schema_input_type=Union[str, list[str]])
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class SweepFile(_Strict):
    """The YAML document as written, checked for keys and types; `fixed` and `params` as
    any mapping here, typed by an experiment's knobs in `spec/model.py`."""

    name: str = Field(pattern=NAME_PATTERN, max_length=100)
    experiment: Union[Annotated[str, Field(min_length=1)], CommandSection]
    method: Method = Method.grid
    objective: list[Objective] = Field(
        default_factory=lambda: [Objective(metric="eval_accuracy")], min_length=1)
    budget: Budget = Budget()
    fixed: dict[str, Any] = Field(default_factory=dict)
    params: dict[str, Any] = Field(default_factory=dict)
    pruner: Pruner = Pruner()
    data: Optional[Data] = None
    checkpoint: Checkpoint = Checkpoint()
    constraints: list[Constraint] = Field(default_factory=list)

    @field_validator("objective", mode="before", json_schema_input_type=Union[
        Objective, Annotated[list[Objective], Field(min_length=1)]])
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @field_validator("method", mode="before")
    @classmethod
    def _method_name(cls, value: Any) -> Any:
        return Method(value) if value in Method._value2member_map_ else value


PARAM_KEYS = ("values", "when", "low", "high", "log", "step")
FORMS = ("[list]", "[one]", "[values]", "[range]")
"""The tags of a param's written forms, as pydantic puts them in an error's key path."""
_KNOB_SECTIONS = (["fixed"], ["params"])


def read_file(text: str, source: str) -> SweepFile:
    """Parse and type-check sweep-file text; `source` names it in errors.

    Raises:
        SpecError: invalid YAML, or a key or type the file format does not allow.
    """
    return validate(SweepFile, read_data(text, source), source)


def read_data(text: str, source: str) -> dict[str, Any]:
    """The sweep file's YAML as a mapping of sections, not yet validated."""
    data = load_yaml(text, source) or {}
    if not isinstance(data, dict):
        raise SpecError(source, "", "the file must be a mapping of sections", data)
    return data


def validate(model: type[Valid], data: dict[str, Any], source: str) -> Valid:
    """`data` as `model` (a `SweepFile`, or part of one), or its first error as one line.

    Raises:
        SpecError: a key or value the model does not allow.
    """
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _first_error(source, exc, data, model) from None


def _first_error(source: str, exc: ValidationError, data: dict[str, Any],
                 model: type[BaseModel]) -> SpecError:
    err = _first_relevant(exc.errors(include_url=False), data.get("experiment"))
    if err is None:
        return SpecError(source, "experiment", "must be an experiment name (built-in, "
                         "package.module:build or file.py) or a mapping with a command",
                         data.get("experiment"))
    written = [str(p) for p in err["loc"]]
    loc = [p for p in written if p not in FORMS]
    key = ".".join(loc)
    kind = err["type"]
    if kind == "missing":
        return SpecError(source, key, "required key is missing", show_value=False)
    if kind == "enum" or key == "method":
        return SpecError(source, key, "must be one of " + ", ".join(m.value for m in Method),
                         err["input"])
    allowed = allowed_keys(model, written[:-1], FORMS) if kind == "extra_forbidden" else []
    rule = (_knob_rule(kind, loc, written, allowed) or _section_rule(kind, loc, allowed)
            or _reworded(err["msg"]))
    return SpecError(source, key, rule, err.get("input"))


def _knob_rule(kind: str, loc: list[str], written: list[str], allowed: list[str]
               ) -> str | None:
    """The wording of an error in `fixed`, `params` or a `when` (`allowed`: the keys there)."""
    parent = loc[:-1]
    if kind == "extra_forbidden" and (parent in _KNOB_SECTIONS or parent[-1:] == ["when"]):
        return ("is not a knob of msexp or of the experiment" + did_you_mean(loc[-1], allowed)
                + " (see `msexp knobs`)")
    if kind == "extra_forbidden" and parent[:1] == ["params"]:
        if "[values]" in written and loc[-1] in PARAM_KEYS:
            return "use either values or low/high"
        return ("unknown key" + did_you_mean(loc[-1], PARAM_KEYS) + " (allowed: "
                + ", ".join(PARAM_KEYS) + ")")
    if kind == "union_tag_not_found" and parent == ["params"]:
        return "must be a list of values or a mapping with values or low/high"
    if kind == "union_tag_invalid" and parent == ["params"]:
        return f"a range needs a numeric knob; {loc[-1]} takes a list of values"
    if kind == "model_type" and loc[-1:] == ["when"]:
        return "must map knob names to a value or a list of values"
    return None


def _section_rule(kind: str, loc: list[str], allowed: list[str]) -> str | None:
    if kind == "extra_forbidden":
        return ("unknown key" + did_you_mean(loc[-1], allowed) + " (allowed: "
                + ", ".join(allowed) + ")")
    if kind == "too_short":
        return "must be a non-empty list"
    if kind in ("model_type", "dict_type"):
        return "must be a mapping"
    return None


def _reworded(message: str) -> str:
    """pydantic's message as a rule: "Input should be X" becomes "must be X"."""
    rule = message.removeprefix("Value error, ")
    for prefix in ("Input should be ", "String should "):  # pydantic 2 wording
        if rule.startswith(prefix):
            rule = ("must " if prefix == "String should " else "must be ") + rule[len(prefix):]
    return rule[0].lower() + rule[1:]


def _first_relevant(errors: list[Any], experiment: Any) -> Any:
    """The first error; for `experiment` (a name or a command mapping), the error of the
    form the value was written in, without the form's name in the key path; None for a
    value of neither form."""
    meant = "CommandSection" if isinstance(experiment, dict) else "str"
    for err in errors:
        loc = err["loc"]
        if len(loc) < 2 or loc[0] != "experiment":
            return err
        if not isinstance(experiment, (str, dict)):
            return None
        if meant in str(loc[1]):
            return {**err, "loc": (loc[0], *loc[2:])}
    return None

