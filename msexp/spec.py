"""The sweep file: schema, loading and every rule checked before anything runs."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from msexp.datasets import check_data
from msexp.device import check_precision
from msexp.errors import SpecError
from msexp.experiment import Experiment, check_build, is_builtin, load_experiment
from msexp.knobs import EPOCH_METRICS, METRICS
from msexp.space import Space, parse_params
from msexp.thor_spec import check_split_indices


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
    """A metric to optimize, and optionally a target that defines `epochs_to_target`."""

    metric: str
    direction: Literal["maximize", "minimize"] = "maximize"
    target: Optional[float] = None


class Budget(_Strict):
    """How many trials, how long each may run, and how many run at once."""

    trials: Optional[int] = Field(None, ge=1)
    trial_timeout: float = Field(600.0, gt=0)
    workers: int = Field(1, ge=1)
    retries: int = Field(1, ge=0)


class Pruner(_Strict):
    """Early stopping of unpromising trials on their per-epoch values."""

    type: Literal["none", "median", "percentile", "hyperband"] = "none"
    warmup_epochs: int = Field(1, ge=0)
    startup_trials: int = Field(2, ge=0)
    percentile: float = Field(25.0, gt=0, lt=100)
    reduction_factor: int = Field(3, ge=2)


class Data(_Strict):
    """Where a workload reads its data; without it the workload uses its built-in data."""

    format: Literal["mnist", "cifar10", "imagefolder"]
    path: str = Field(min_length=1)


class SweepFile(_Strict):
    """The YAML document as written, checked for keys and types."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=100)
    experiment: str = Field(min_length=1)
    method: Method = Method.grid
    objective: list[Objective] = Field(
        default_factory=lambda: [Objective(metric="eval_accuracy")], min_length=1)
    budget: Budget = Budget()
    fixed: dict[str, Any] = Field(default_factory=dict)
    params: dict[str, Any] = Field(default_factory=dict)
    pruner: Pruner = Pruner()
    data: Optional[Data] = None

    @field_validator("objective", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @field_validator("method", mode="before")
    @classmethod
    def _method_name(cls, value: Any) -> Any:
        return Method(value) if value in Method._value2member_map_ else value


class SweepSpec:
    """A validated sweep: the file's content, its experiment and its search space."""

    def __init__(self, path: Path, file: SweepFile, experiment: Experiment, space: Space):
        self.path, self.file, self.experiment, self.space = path, file, experiment, space

    @property
    def name(self) -> str:
        return self.file.name

    @property
    def method(self) -> Method:
        return self.file.method

    @property
    def objectives(self) -> list[Objective]:
        return self.file.objective

    @property
    def budget(self) -> Budget:
        return self.file.budget

    @property
    def pruner(self) -> Pruner:
        return self.file.pruner

    def n_trials(self) -> int:
        """Trials the sweep runs in all: the budget, capped by the grid size for grids."""
        if self.method is Method.grid:
            size = len(self.space.grid())
            return min(size, self.budget.trials or size)
        return self.budget.trials or 20


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a sweep file.

    Raises:
        SpecError: one line naming the file, the key path, the rule and the value.
    """
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(source, "", f"cannot read the file ({exc.strerror})",
                        show_value=False) from None
    return parse_spec(text, source, path)


def parse_spec(text: str, source: str, path: Path | None = None) -> SweepSpec:
    """Validate sweep-file text; `source` names it in errors."""
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise SpecError(source, _yaml_where(exc), f"invalid YAML ({_yaml_problem(exc)})",
                        show_value=False) from None
    if not isinstance(data, dict):
        raise SpecError(source, "", "the file must be a mapping of sections", data)
    try:
        file = SweepFile.model_validate(data)
    except ValidationError as exc:
        raise _first_error(source, exc, data) from None
    experiment = load_experiment(file.experiment, source)
    space = parse_params(source, experiment.knobs, file.fixed, file.params)
    spec = SweepSpec(path or Path(source), file, experiment, space)
    _check_method(source, spec)
    _check_objectives(source, spec)
    space.check_trials(spec.method is Method.grid)
    if file.data is not None:
        check_data(source, file.data.model_dump(), experiment.data_formats, file.experiment)
    check_precision(source, space)
    check_split_indices(source, spec)
    if not is_builtin(file.experiment):  # built-ins are covered by the test suite
        data = file.data.model_dump() if file.data else None
        check_build(experiment, {**space.resolve({}), "data": data}, source)
    return spec


def _check_method(source: str, spec: SweepSpec) -> None:
    if spec.method is Method.grid:
        for param in spec.space.params:
            if param.values is None:
                raise SpecError(source, f"params.{param.name}",
                                "grid needs a list of values", param.written)
    if len(spec.objectives) > 1:
        if spec.method is Method.cmaes:
            raise SpecError(source, "method", "cmaes optimizes a single objective; "
                            "use nsga2, tpe, random or grid with several", spec.method.value)
        if spec.pruner.type != "none":
            raise SpecError(source, "pruner.type", "pruning needs a single objective",
                            spec.pruner.type)


def _check_objectives(source: str, spec: SweepSpec) -> None:
    known = METRICS + spec.experiment.metrics
    seen = set()
    for i, objective in enumerate(spec.objectives):
        if objective.metric not in known:
            raise SpecError(source, f"objective.{i}.metric",
                            "must be one of " + ", ".join(known), objective.metric)
        if objective.metric in seen:
            raise SpecError(source, f"objective.{i}.metric", "is listed twice", objective.metric)
        seen.add(objective.metric)
        if objective.target is not None and objective.metric not in EPOCH_METRICS:
            raise SpecError(source, f"objective.{i}.target", "a target needs a per-epoch metric ("
                            + ", ".join(EPOCH_METRICS) + ")", objective.metric)
    if spec.pruner.type != "none" and spec.objectives[0].metric not in EPOCH_METRICS:
        raise SpecError(source, "pruner.type", "pruning needs a per-epoch objective ("
                        + ", ".join(EPOCH_METRICS) + ")", spec.objectives[0].metric)


def _first_error(source: str, exc: ValidationError, data: dict) -> SpecError:
    err = exc.errors(include_url=False)[0]
    loc = [str(p) for p in err["loc"]]
    key = ".".join(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1])
        return SpecError(source, key, "unknown key (allowed: " + ", ".join(allowed) + ")",
                         err["input"])
    if kind == "missing":
        return SpecError(source, key, "required key is missing", show_value=False)
    if kind == "enum" or key == "method":
        return SpecError(source, key, "must be one of " + ", ".join(m.value for m in Method),
                         err["input"])
    rule = err["msg"]
    for prefix in ("Input should be ", "Value should be ", "String should "):
        if rule.startswith(prefix):
            rule = ("must " if prefix == "String should " else "must be ") + rule[len(prefix):]
    return SpecError(source, key, rule[0].lower() + rule[1:], err.get("input"))


def _allowed_keys(loc: list[str]) -> list[str]:
    model: Any = SweepFile
    for part in loc:
        if part.isdigit():
            continue
        field = model.model_fields.get(part)
        annotation = field.annotation if field else None
        args = getattr(annotation, "__args__", ())
        model = next((a for a in (annotation, *args)
                      if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if model is None:
            return []
    return list(model.model_fields)


def _yaml_where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""


def _yaml_problem(exc: yaml.YAMLError) -> str:
    return getattr(exc, "problem", None) or str(exc).splitlines()[0]
