"""Rules that need more than one section: method and objectives, and the built workload.

The workload is built at most once per validation: for an experiment that is not
built in (to check what `build` returns), and for THOR split indices (to count the
network's THOR layers).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from msexp.console.interrupts import import_mindspore
from msexp.errors import ExperimentError, SpecError
from msexp.experiment import (
    Experiment,
    Workload,
    describe_failure,
    is_builtin,
    local_cell_classes,
    workload_problem,
)
from msexp.knobs import EPOCH_METRICS
from msexp.spec.file import Method, Objective, Pruner
from msexp.spec.space import Space

SPLIT_KNOB = "thor.split_indices"


def check_method(source: str, method: Method, objectives: list[Objective], pruner: Pruner,
                 space: Space) -> None:
    """Grids need value lists; several objectives exclude cmaes and pruning."""
    if method is Method.grid:
        for param in space.params:
            if param.values is None:
                raise SpecError(source, f"params.{param.name}",
                                "grid needs a list of values", param.written)
    if len(objectives) > 1:
        if method is Method.cmaes:
            raise SpecError(source, "method", "cmaes optimizes a single objective; "
                            "use nsga2, tpe, random or grid with several", method.value)
        if pruner.type != "none":
            raise SpecError(source, "pruner.type", "pruning needs a single objective",
                            pruner.type)


def check_objectives(source: str, objectives: list[Objective], pruner: Pruner,
                     experiment: Experiment) -> None:
    """Objectives name a metric once each; targets and pruning need per-epoch ones.

    A command may report any metric, each epoch or at its end, so its names are its own.
    """
    per_epoch = EPOCH_METRICS + experiment.metrics  # an experiment's own metrics: each eval
    seen = set()
    for i, objective in enumerate(objectives):
        if objective.metric in seen:
            raise SpecError(source, f"objective.{i}.metric", "is listed twice", objective.metric)
        seen.add(objective.metric)
        if (objective.target is not None and objective.metric not in per_epoch
                and not experiment.is_command):
            raise SpecError(source, f"objective.{i}.target", "a target needs a per-epoch metric ("
                            + ", ".join(per_epoch) + ")", objective.metric)
    if (pruner.type != "none" and objectives[0].metric not in per_epoch
            and not experiment.is_command):
        raise SpecError(source, "pruner.type", "pruning needs a per-epoch objective ("
                        + ", ".join(per_epoch) + ")", objectives[0].metric)


def check_reported(source: str, objectives: list[Objective], space: Space,
                   experiment: Experiment) -> None:
    """Refuse an objective no trial can report: a metric the training loop reports only
    under a condition that no trial of the sweep meets."""
    if experiment.is_command:
        return
    for i, objective in enumerate(objectives):
        condition = _reported_only(objective.metric, objectives, space)
        if condition:
            raise SpecError(source, f"objective.{i}.metric", f"is reported only {condition}, "
                            "and no trial of this sweep has that", objective.metric)


def _reported_only(metric: str, objectives: list[Objective], space: Space) -> str | None:
    """The condition under which `metric` is reported, if no trial meets it."""
    if metric in ("epochs_to_target", "time_to_target_s"):
        return None if any(o.target is not None for o in objectives) else \
            "when an objective has a target"
    if metric == "loss_scale" and not _may_be(space, "loss_scale", ("fixed", "dynamic")):
        return "with loss_scale fixed or dynamic"
    if metric == "thor_inverse_s" and not _may_use_thor(space):
        return "with optimizer thor"
    return None


def _may_be(space: Space, name: str, values: tuple[Any, ...]) -> bool:
    param = next((p for p in space.params if p.name == name), None)
    if param is not None:
        return param.values is None or any(v in values for v in param.values)
    return space.resolve({}).get(name) in values


def check_command_sweep(source: str, pruner: Pruner, data: Any, space: Space) -> None:
    """What a command sweep cannot use: a data section (the script reads its own data)
    and hyperband without `epochs` (its budget is epochs)."""
    if data is not None:
        raise SpecError(source, "data", "a command reads its own data; pass its folder as "
                        "an argument in fixed", data.model_dump())
    if pruner.type == "hyperband" and "epochs" not in space.resolve({}):
        raise SpecError(source, "pruner.type", "hyperband with a command needs fixed.epochs",
                        pruner.type)


def check_workload(source: str, experiment: Experiment, space: Space,
                   data: dict[str, Any] | None) -> None:
    """Build the workload once, if a rule needs it, and check what `build` returned and the
    THOR split indices against it.

    Raises:
        ExperimentError: `build` raised or returned something msexp cannot train.
        SpecError: split indices that are unsorted, repeated or beyond the THOR layers.
    """
    if experiment.is_command:
        return
    splits = [(key, value) for key, value in _written_splits(space) if value != []]
    splits = splits if _may_use_thor(space) else []
    own = not is_builtin(experiment.ref)  # built-ins are covered by the test suite
    if not (own or splits):
        return
    params = space.resolve({"optimizer": "thor"} if splits else {})
    workload = _build(source, experiment, {**params, "data": data})
    if own:
        problem = workload_problem(workload, experiment.metrics)
        if problem:
            raise ExperimentError(source, "experiment", problem, experiment.ref)
        local = local_cell_classes(workload.network)
        if local and "O1" in _amp_levels(space):
            raise ExperimentError(source, "experiment", "amp_level O1 rewrites the network "
                                  "from its classes' source, so define them at module level, "
                                  f"not inside a function ({', '.join(local)})", experiment.ref)
    if splits:
        from msexp.training.thor_factors import count_layers, split_rule  # imports MindSpore

        n_layers = count_layers(workload.network)
        for key, value in splits:
            rule = split_rule(value, n_layers)
            if rule:
                raise SpecError(source, key, f"{rule} ({experiment.ref} has {n_layers} "
                                "THOR layers)", value)


def _build(source: str, experiment: Experiment, params: dict[str, Any]) -> Workload:
    import_mindspore()  # build() imports it: never interrupted half-way
    try:
        return experiment.build(dict(params))
    except Exception as exc:
        raise ExperimentError(source, "experiment", "build() raised " + describe_failure(exc),
                              experiment.ref) from None


def _written_splits(space: Space) -> Iterator[tuple[str, Any]]:
    if SPLIT_KNOB in space.fixed:
        yield f"fixed.{SPLIT_KNOB}", space.fixed[SPLIT_KNOB]
    param = next((p for p in space.params if p.name == SPLIT_KNOB), None)
    if param is not None and param.values is not None:
        prefix = f"params.{SPLIT_KNOB}" + (".values" if "when" in param.written else "")
        for i, value in enumerate(param.values):
            yield f"{prefix}.{i}", value


def _amp_levels(space: Space) -> set[Any]:
    return {space.resolve(p).get("amp_level") for p in space.combos({"amp_level"}) or [{}]}


def _may_use_thor(space: Space) -> bool:
    optimizer = next((p for p in space.params if p.name == "optimizer"), None)
    if optimizer is not None:
        return optimizer.values is None or "thor" in optimizer.values
    return space.resolve({}).get("optimizer") == "thor"


def batch_statistics_warning(source: str, layers: int, space: Space, dropout: int = 0,
                             seeded: int = 0) -> str | None:
    """The line `validate --check`, `plan --check` and the sweep print where trials split
    the batch of a network with `layers` BatchNorm layers, `dropout` Dropout layers of
    MindSpore's masks or `seeded` of msexp's; None where none does."""
    splits = set()
    for combo in space.combos({"micro_size", "batch_size", "devices"}):
        values = space.resolve(combo)
        parts, batch = values.get("micro_size", 1) * values.get("devices", 1), values.get(
            "batch_size", 0)
        if parts > 1:
            splits.add((batch // parts, batch, parts))
    if not (layers or dropout or seeded) or not splits:
        return None
    seen = [f"{micro} of {batch}" if batch else f"1/{parts} of the batch"
            for micro, batch, parts in sorted(splits)]
    ours = (f"dropout: the network's {seeded} nn.Dropout layer(s) draw msexp's seeded masks, "
            "each micro-batch the rows of the batch's mask: they leave the update the "
            "full-batch one where a layer's input has the batch first, and a seeded trial "
            "repeats (docs/how-a-trial-runs.md#dropout)") if seeded else ""
    if not (layers or dropout):
        return f"{source}: {ours} (micro-batches: {', '.join(seen)})"
    kinds, has, docs = [], [], []
    if layers:
        kinds.append("batch statistics")
        has.append(f"{layers} BatchNorm layer(s), which normalise each micro-batch by its "
                   "own mean and variance")
        docs.append("docs/how-a-trial-runs.md#batch-statistics")
    if dropout:
        kinds.append("dropout")
        has.append(f"{dropout} Dropout layer(s), which draw a mask per micro-batch, so the "
                   "update equals the full-batch one only in distribution")
        docs.append("docs/how-a-trial-runs.md#dropout")
    return (f"{source}: {' and '.join(kinds)}: the network has {' and '.join(has)} "
            f"(micro-batches: {', '.join(seen)}): where the batch is split, the update is "
            "not the full-batch one, and loss and accuracy move with micro_size "
            f"({', '.join(docs)})" + (f"; {ours}" if ours else ""))
