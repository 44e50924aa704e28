"""A validated sweep (`SweepSpec`): load the file, check every rule before anything runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msexp.datasets import check_data
from msexp.errors import ExperimentError, SpecError
from msexp.experiment import (
    Experiment,
    Workload,
    declared_knobs,
    is_builtin,
    load_experiment,
)
from msexp.experiment_source import written_declarations
from msexp.knobs import KNOBS, METRICS, Knob, infer_knob
from msexp.paths import file_folder, read_bounded
from msexp.spec.checks import (
    check_command_sweep,
    check_method,
    check_objectives,
    check_reported,
    check_workload,
)
from msexp.spec.command import command_experiment
from msexp.spec.file import (
    Budget,
    Checkpoint,
    CommandSection,
    Constraint,
    Data,
    Method,
    Objective,
    Pruner,
    SweepFile,
    load_yaml,
    read_data,
    read_file,
    validate,
)
from msexp.spec.model import sweep_model, values_model
from msexp.spec.params import parse_params
from msexp.spec.precision import check_precision
from msexp.spec.space import Space
from msexp.training.records import Target

MAX_SWEEP_FILE_BYTES = 1 << 20


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep: the file's sections, its experiment and its search space.

    `fixed` and `params` are the sections as written; `space` is what they mean.
    """

    path: Path
    name: str
    experiment: Experiment
    method: Method
    objectives: list[Objective]
    budget: Budget
    pruner: Pruner
    data: Data | None
    fixed: dict[str, Any]
    params: dict[str, Any]
    space: Space
    command: CommandSection | None = None
    checkpoint: Checkpoint = Checkpoint()
    constraints: list[Constraint] = field(default_factory=list)

    def feasible(self, metrics: dict[str, float]) -> bool:
        """Whether final `metrics` keep every constraint."""
        return all(c.violation(metrics) <= 0 for c in self.constraints)

    @property
    def folder(self) -> Path:
        """The sweep file's folder, where a command experiment runs (the working directory
        for a sweep read from a pipe)."""
        return file_folder(self.path)

    def n_trials(self) -> int:
        """Trials the sweep runs in all: the budget, capped by the grid size for grids."""
        if self.method is Method.grid:
            size = self.space.grid_size()
            return min(size, self.budget.trials or size)
        return self.budget.trials or 20

    def data_section(self) -> dict[str, Any] | None:
        """The `data` section as the experiment's `build` receives it (params["data"])."""
        return self.data.model_dump() if self.data else None

    def target(self) -> Target | None:
        """The first objective's target, which defines epochs_to_target, if one is set."""
        for o in self.objectives:
            if o.target is not None:
                return Target(o.metric, o.target, o.direction == "maximize")
        return None


def load_spec(path: str | Path, local: bool = True) -> SweepSpec:
    """Read and validate a sweep file.

    `local=False` checks only what holds on any machine: a user's experiment is not
    imported (its params are typed by the values the file gives them, its metrics are
    those the file names) and this machine's device is not probed, so a GPU sweep can be
    planned or scheduled from a CPU login node.

    Raises:
        SpecError: one line naming the file, the key path, the rule and the value.
    """
    path = Path(path)
    return parse_spec(_read_text(path), str(path), path, local)


def parse_spec(text: str, source: str, path: Path | None = None, local: bool = True
               ) -> SweepSpec:
    """Validate sweep-file text; `source` names it in errors (`local`: see `load_spec`)."""
    return spec_of_data(read_data(text, source), source, path, local)


def spec_of_data(data: dict[str, Any], source: str, path: Path | None = None,
                 local: bool = True) -> SweepSpec:
    """Validate a sweep file's sections, as its YAML reads (a file's, or the Python API's
    dict); `source` names it in errors (`local`: see `load_spec`)."""
    file = validate(SweepFile, data, source)
    path = path or Path(source)
    command = file.experiment if isinstance(file.experiment, CommandSection) else None
    if command is None and (local or is_builtin(file.experiment)):
        experiment = load_experiment(file.experiment, source)
    elif command is None:
        experiment = unimported_experiment(source, file)
    fixed, params = with_repeats(source, file)
    if command is not None:  # the replicate seed goes to the script as its own --seed
        experiment = command_experiment(source, command, file_folder(path), fixed, params)
    metrics = None if command else METRICS + experiment.metrics  # a command's: any name
    validate(sweep_model(experiment.knobs, metrics), data, source)
    space = parse_params(source, experiment.knobs, fixed, params)
    spec = SweepSpec(path, file.name, experiment, file.method, file.objective, file.budget,
                     file.pruner, file.data, fixed, params, space, command, file.checkpoint,
                     file.constraints)
    check_method(source, spec.method, spec.objectives, spec.pruner, space)
    if command is not None:
        check_command_sweep(source, spec.pruner, spec.data, space)
    check_objectives(source, spec.objectives, spec.pruner, experiment)
    check_reported(source, spec.objectives, space, experiment)
    space.check_trials(spec.method is Method.grid, spec.n_trials())
    if spec.data is not None:
        check_data(source, spec.data_section(), experiment.data_formats, experiment.ref)
    if local:
        check_precision(source, space)
        check_workload(source, experiment, space, spec.data_section())
    return spec


def unimported_experiment(source: str, file: SweepFile) -> Experiment:
    """A user's experiment as its files describe it, its code not imported: msexp's knobs
    with the DEFAULTS its source writes, its own knobs (PARAMS) there, a knob for every
    other name the sweep file sets (typed by its first value) and the metrics the file
    names. Where its source does not say them for sure, it is not `known`."""
    declared = written_declarations(file.experiment)
    defaults, own = declared_knobs(source, file.experiment, *(
        (declared["DEFAULTS"], declared["PARAMS"]) if declared is not None else ({}, {})))
    for where, section in (("fixed", file.fixed), ("params", file.params)):
        for name, written in section.items():
            if name in KNOBS or name in own:
                continue
            try:
                own[name] = infer_knob(name, _first_value(written), "set in the sweep file")
            except TypeError as exc:
                raise SpecError(source, f"{where}.{name}", str(exc), written) from None
    metrics = tuple(dict.fromkeys(m.metric for m in [*file.objective, *file.constraints]))
    return Experiment(file.experiment, _not_imported(file.experiment), defaults, own, metrics,
                      known=declared is not None)


def _first_value(written: Any) -> Any:
    if isinstance(written, dict):
        written = written.get("values", [written.get("low", written)])
    return written[0] if isinstance(written, list) and written else written


def _not_imported(ref: str) -> Any:
    def build(params: dict[str, Any]) -> Workload:
        raise ExperimentError(ref, "experiment", "was not imported: this command checks "
                              "only what holds on any machine", ref)
    return build


def with_repeats(source: str, file: SweepFile) -> tuple[dict[str, Any], dict[str, Any]]:
    """`fixed` and `params` with `budget.repeats` seeds swept last, so the grid runs each
    configuration with seeds seed, seed+1, ... one after another."""
    repeats = file.budget.repeats
    if repeats == 1:
        return dict(file.fixed), dict(file.params)
    if file.method is not Method.grid:
        raise SpecError(source, "budget.repeats", "repeats need method grid (a sampler would "
                        "sample the seed); sweep seed as a param instead", repeats)
    if "seed" in file.params:
        raise SpecError(source, "params.seed", "budget.repeats sweeps the seed itself; drop "
                        "seed from params", file.params["seed"])
    fixed = dict(file.fixed)
    base = fixed.pop("seed", KNOBS["seed"].default)
    if not isinstance(base, int) or isinstance(base, bool):
        raise SpecError(source, "fixed.seed", "must be an integer", base)
    seeds = list(range(base, base + repeats))
    for i, seed in enumerate(seeds):
        rule = KNOBS["seed"].check(seed)  # MindSpore's set_seed range, a script's too
        if rule:
            raise SpecError(source, f"params.seed.{i}", rule, seed)
    return fixed, {**file.params, "seed": seeds}


def read_name(path: str | Path) -> str:
    """The sweep's `name`, read without validating the rest (for commands that only
    look a study up).

    Raises:
        SpecError: the file cannot be read, or has no valid name.
    """
    path = Path(path)
    source, text = str(path), _read_text(path)  # once: a FIFO gives its text once
    data = load_yaml(text, source) or {}
    name = data.get("name") if isinstance(data, dict) else None
    if not isinstance(name, str) or not name:
        return read_file(text, source).name  # says what is wrong, in one line
    return name


def trial_params(ref: str, fixed: Mapping[str, Any], source: str = "--set") -> dict[str, Any]:
    """The complete, checked params of one trial of experiment `ref` with `fixed` values.

    Raises:
        SpecError: a value breaks a knob's rule (one line naming `source` and the key).
    """
    knobs = load_experiment(ref, source).knobs
    check_values(source, knobs, fixed)
    space = parse_params(source, knobs, fixed, {})
    space.check_trials(is_grid=True)
    check_precision(source, space)
    return space.resolve({})


def check_values(source: str, knobs: Mapping[str, Knob], fixed: Mapping[str, Any]) -> None:
    """Check `fixed` values against the sweep file's model of an experiment with `knobs`.

    Raises:
        SpecError: one line naming `source` and the key (`fixed.NAME`).
    """
    validate(values_model(knobs), {"fixed": dict(fixed)}, source)


def _read_text(path: Path) -> str:
    try:
        return read_bounded(path, MAX_SWEEP_FILE_BYTES).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(str(path), "", f"must be UTF-8 text (byte {exc.start} is not)",
                        show_value=False) from None
    except OSError as exc:
        raise SpecError(str(path), "", f"cannot read the file ({exc.strerror})",
                        show_value=False) from None
