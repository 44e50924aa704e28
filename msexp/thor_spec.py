"""Plan-time checks of THOR knobs that need the network: `thor.split_indices`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from msexp.errors import ExperimentError, SpecError

if TYPE_CHECKING:
    from msexp.spec import SweepSpec

KNOB = "thor.split_indices"


def check_split_indices(source: str, spec: SweepSpec) -> None:
    """Reject split indices that are unsorted, repeated or beyond the network's THOR layers.

    Builds the network once (importing MindSpore) only when a trial can use THOR with
    non-empty indices. The layer count comes from the network built with the fixed
    values and defaults.

    Raises:
        SpecError: naming the key, the rule with the layer count, and the indices.
    """
    written = [(key, value) for key, value in _written(spec) if value != []]
    if not written or not _may_use_thor(spec):
        return
    from msexp.training.thor import split_rule

    n_layers = _count_layers(source, spec)
    for key, value in written:
        rule = split_rule(value, n_layers)
        if rule:
            raise SpecError(source, key, f"{rule} ({spec.file.experiment} has {n_layers} "
                            "THOR layers)", value)


def _written(spec: SweepSpec) -> Iterator[tuple[str, Any]]:
    if KNOB in spec.file.fixed:
        yield f"fixed.{KNOB}", spec.file.fixed[KNOB]
    param = next((p for p in spec.space.params if p.name == KNOB), None)
    if param is not None and param.values is not None:
        prefix = f"params.{KNOB}" + (".values" if "when" in param.written else "")
        for i, value in enumerate(param.values):
            yield f"{prefix}.{i}", value


def _may_use_thor(spec: SweepSpec) -> bool:
    optimizer = next((p for p in spec.space.params if p.name == "optimizer"), None)
    if optimizer is not None:
        return optimizer.values is None or "thor" in optimizer.values
    return spec.space.resolve({}).get("optimizer") == "thor"


def _count_layers(source: str, spec: SweepSpec) -> int:
    from msexp.training.thor import count_layers

    params = spec.space.resolve({"optimizer": "thor"})
    data = spec.file.data.model_dump() if spec.file.data else None
    try:
        network = spec.experiment.build({**params, "data": data}).network
    except Exception as exc:
        raise ExperimentError(source, "experiment", f"build() raised {type(exc).__name__}: "
                              f"{exc} (needed to count THOR layers)", spec.file.experiment
                              ) from None
    return count_layers(network)
