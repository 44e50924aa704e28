"""The graph signature is proven, not declared: for every knob a sweep file can set, two
values either have different signatures (the second trial compiles anew) or the second
runs warm on the first's graphs and equals the same trial run cold, bit for bit.

A new knob in `msexp.knobs.KNOBS` is covered here without a new test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from msexp.errors import SpecError
from msexp.execution.host import Host
from msexp.execution.protocol import TrialRequest
from msexp.knobs import KNOBS, Knob
from msexp.spec import trial_params
from tests.conftest import ROOT
from tests.test_warm import TIMEOUT_S, same_training

pytestmark = pytest.mark.slow  # every knob trained twice: the fast tier's longest file

EXPERIMENT = "mlp_digits"
BASE = {"epochs": 1, "hidden": 16}  # small and short: most of a trial is its compile


@pytest.fixture(scope="module")
def host():
    """One worker for every knob: a trial runs warm after the one before it where it can."""
    worker = Host(cwd=ROOT)
    yield worker
    worker.kill()


def where_it_applies(knob: Knob) -> dict[str, Any]:
    """The base values, with each knob that `knob` depends on set so that it applies."""
    return {**BASE, **{name: allowed[0] for name, allowed in knob.when.items()}}


def other_values(knob: Knob, value: Any) -> list[Any]:
    """Values of `knob` other than `value`, to try in order."""
    if knob.choices:
        return [c for c in knob.choices if c != value]
    if knob.type is bool:
        return [not value]
    if knob.type is int:
        return [value + 1, value + 2]
    if knob.type is float:
        return [value / 2] if value else [0.01]
    return [[0], [1]]  # a list


def two_trials(name: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Params of two trials that differ only in knob `name`; None if this machine accepts
    only one value of it (bfloat16 on CPU)."""
    fixed = where_it_applies(KNOBS[name])
    first = trial_params(EXPERIMENT, fixed)
    for value in other_values(KNOBS[name], first[name]):
        try:
            return first, trial_params(EXPERIMENT, {**fixed, name: value})
        except SpecError:
            continue
    return None


@pytest.mark.parametrize("name", list(KNOBS))
def test_a_knob_changes_the_signature_or_leaves_a_warm_trial_exact(name: str, host,
                                                                 tmp_path: Path) -> None:
    # mutation: clip_grad_norm left out of the graph signature (graph=False)
    trials = two_trials(name)
    if trials is None:
        pytest.skip(f"{name}: this machine accepts one value only")
    first, second = (TrialRequest(EXPERIMENT, params, tmp_path / str(i))
                     for i, params in enumerate(trials))
    assert first.params[name] != second.params[name]
    if first.graph_signature != second.graph_signature or second.graph_signature is None:
        return  # the second trial compiles its own graphs
    host.run(first, TIMEOUT_S)
    warm = host.run(second, TIMEOUT_S)
    cold = host.run(TrialRequest(EXPERIMENT, second.params, tmp_path / "cold", cold=True),
                    TIMEOUT_S)
    assert warm.warm and not cold.warm
    same_training(warm, cold)
