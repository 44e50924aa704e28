"""What `msexp tune` compares: every configuration of the values the sweep file lists for
the knobs it sweeps, and the baseline among them; what tune refuses (`check_tunable`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msexp.errors import SpecError
from msexp.knobs import value_text
from msexp.spec import SweepSpec

HOOKS = re.compile(r"\bMsexpCallback\b|\bmsexp\.hooks\b|from msexp import hooks")


@dataclass(frozen=True)
class Candidate:
    """One configuration: the swept knobs' values (`point`) and its complete params."""

    point: dict[str, Any]
    params: dict[str, Any]

    @property
    def label(self) -> str:
        """`micro_size=2 amp_level=O2`: the swept knobs, as run names show them."""
        return " ".join(f"{k}={value_text(v)}" for k, v in self.point.items()) or "fixed"

    @property
    def micro_batch(self) -> int:
        return self.params["batch_size"] // self.params.get("micro_size", 1)


def candidates(spec: SweepSpec) -> list[Candidate]:
    """Every grid point without the seed (each runs the file's first seed), in grid order;
    the first is the baseline: each swept knob at the first value the file lists.

    Raises:
        SpecError: a swept knob is a range (tune profiles each value, so it needs a list).
    """
    for param in spec.space.params:
        if param.values is None and param.name != "seed":
            raise SpecError(str(spec.path), f"params.{param.name}", "msexp tune needs a list "
                            "of values to profile each, not a range", param.describe())
    seed = _first_seed(spec)
    found: dict[str, Candidate] = {}
    for point in spec.space.iter_grid():
        point = {k: v for k, v in point.items() if k != "seed"}
        params = spec.space.resolve({**point, **({"seed": seed} if seed is not None else {})})
        found.setdefault(json.dumps(params, sort_keys=True, default=str),
                         Candidate(point, params))
    return list(found.values())


def _swept_seeds(spec: SweepSpec) -> tuple[Any, ...] | None:
    """The seed values the file lists under `params` (or `budget.repeats` put there)."""
    return next((p.values for p in spec.space.params if p.name == "seed"), None)


def _first_seed(spec: SweepSpec) -> int | None:
    """The file's first seed (None: a command whose knobs have no seed)."""
    seeds = _swept_seeds(spec)
    return seeds[0] if seeds else spec.space.resolve({}).get("seed")


def seeds(spec: SweepSpec) -> list[int | None]:
    """The seeds the confirm phase trains each configuration with: those the file sweeps
    (`budget.repeats` sweeps them too), else its one seed and the next, so that the keep
    rule measures the objective's noise between seeds (None: a command without a seed,
    trained once)."""
    swept = _swept_seeds(spec)
    if swept and len(swept) > 1:
        return list(swept)
    seed = _first_seed(spec)
    return [None] if seed is None else [seed, seed + 1]


def check_noise(spec: SweepSpec, tolerance: float) -> None:
    """Refuse a run whose keep rule would have nothing to judge by: a command without a
    seed knob (each configuration trains once) and no `--tolerance`.

    Raises:
        SpecError: one line saying what to add.
    """
    if tolerance == 0 and seeds(spec) == [None]:
        raise SpecError(str(spec.path), "params.seed", "msexp tune keeps a candidate whose "
                        "objective is within its noise between seeds of the baseline's: give "
                        "the script a seed (budget.repeats: 2) or set --tolerance", "no seed")


def check_tunable(spec: SweepSpec) -> None:
    """Refuse what tune cannot profile: data-parallel trials, and a command that does not
    report through `msexp.hooks` (its step_ms would be unknown).

    Raises:
        SpecError: one line saying what to change.
    """
    source = str(spec.path)
    if spec.command is not None:
        script = _script(spec)
        text = script.read_text(encoding="utf-8", errors="replace") if script else ""
        if not HOOKS.search(text):
            raise SpecError(source, "command", "msexp tune needs the script to report "
                            "step_ms: add msexp.hooks.MsexpCallback() to its Model.train "
                            "callbacks", spec.command.command)
    if any(c.params.get("devices", 1) > 1 for c in candidates(spec)):
        raise SpecError(source, "fixed.devices", "msexp tune profiles one process a trial; "
                        "tune with devices 1", ">1")


def _script(spec: SweepSpec) -> Path | None:
    """The Python script a command runs, if one of its words names a file."""
    assert spec.command is not None
    for word in spec.command.command.split():
        path = spec.folder / word
        if word.endswith(".py") and path.is_file():
            return path
    return None
