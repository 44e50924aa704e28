"""The study's own pictures as PNGs, drawn with matplotlib: the objective by trial, the
Pareto front, the importances and parallel coordinates. Small files a person opens offline
(Optuna's plotly pages weighed 4.8 MB each)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from msexp.keys import TrialKey
from msexp.tracking.effect_plots import files_backend, save, scalar_mappable, three_digits
from msexp.tracking.effects import short
from msexp.tracking.replicates import SEED

MAX_LINES = 500  # trials drawn in parallel coordinates; more only blur into one another


def write_study_plots(study: optuna.Study, names: list[str], best: list[FrozenTrial],
                      importances: dict[str, float], folder: Path) -> list[Path]:
    """Write history.png (each of the objectives `names` by trial), and pareto_front.png
    (several objectives; `best`: the Pareto set), importances.png (two knobs ranked or
    more) and parallel_coordinates.png (two knobs varied or more)."""
    files_backend()
    folder.mkdir(parents=True, exist_ok=True)
    return [save(figure, folder / f"{name}.png")
            for name, figure in study_figures(study, names, best, importances)]


def study_figures(study: optuna.Study, names: list[str], best: list[FrozenTrial],
                  importances: dict[str, float]) -> Iterator[tuple[str, Any]]:
    """The study's matplotlib figures, one at a time, each named as its file is (see
    `write_study_plots`). The report saves them; the Python API shows them."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    yield "history", _history(complete, names, study.directions)
    if len(names) > 1:
        yield "pareto_front", _front(complete, best, names)
    if len(importances) > 1:
        yield "importances", _importances(importances, names[0])
    knobs = varied_knobs(complete)
    if len(knobs) > 1:
        yield "parallel_coordinates", _parallel(complete[-MAX_LINES:], knobs, names[0])


def varied_knobs(trials: list[FrozenTrial]) -> list[str]:
    """The params but the replicate seed that take two values or more over `trials`."""
    names = sorted({name for t in trials for name in t.params if name != SEED})
    return [n for n in names if len({repr(t.params.get(n)) for t in trials}) > 1]


def _history(trials: list[FrozenTrial], names: list[str],
             directions: list[optuna.study.StudyDirection]) -> Any:
    """Each objective by trial number, infeasible trials in grey, the best so far as a
    step line."""
    import matplotlib.pyplot as plt  # lazy: matplotlib takes about a second to import

    figure, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names), 3.6),
                                squeeze=False, layout="constrained")
    for i, (ax, name) in enumerate(zip(axes.flat, names)):
        maximize = directions[i] == optuna.study.StudyDirection.MAXIMIZE
        feasible = [t for t in trials if t.user_attrs.get(TrialKey.FEASIBLE, True)]
        others = [t for t in trials if t not in feasible]
        ax.scatter([t.number for t in feasible], [t.values[i] for t in feasible], s=14,
                   color="tab:blue", label="trial", zorder=3)
        if others:
            ax.scatter([t.number for t in others], [t.values[i] for t in others], s=14,
                       color="lightgrey", marker="x", label="infeasible", zorder=2)
        best, steps = None, []
        for t in sorted(feasible, key=lambda t: t.number):
            value = t.values[i]
            if best is None or (value > best if maximize else value < best):
                best = value
            steps.append((t.number, best))
        if steps:
            ax.step(*zip(*steps), where="post", color="tab:orange", label="best so far")
        ax.set_xlabel("trial")
        ax.set_title(f"{name} ({'max' if maximize else 'min'}imize)", fontsize=10)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=8)
    return figure


def _front(trials: list[FrozenTrial], best: list[FrozenTrial], names: list[str]) -> Any:
    """The first two objectives of every trial, the Pareto set highlighted."""
    import matplotlib.pyplot as plt  # lazy: as above

    figure, ax = plt.subplots(figsize=(5.5, 4.2), layout="constrained")
    front = {t.number for t in best}
    rest = [t for t in trials if t.number not in front]
    ax.scatter([t.values[0] for t in rest], [t.values[1] for t in rest], s=14,
               color="lightgrey", label="dominated or infeasible")
    ax.scatter([t.values[0] for t in best], [t.values[1] for t in best], s=22,
               color="tab:red", label="Pareto set", zorder=3)
    ax.set_xlabel(names[0])
    ax.set_ylabel(names[1])
    ax.legend(fontsize=8)
    suffix = f" (of {len(names)} objectives, the first two)" if len(names) > 2 else ""
    ax.set_title(f"Pareto front{suffix}", fontsize=10)
    return figure


def _importances(found: dict[str, float], objective: str) -> Any:
    import matplotlib.pyplot as plt  # lazy: as above

    ordered = sorted(found.items(), key=lambda item: item[1])
    figure, ax = plt.subplots(figsize=(5.5, max(2.2, 0.8 + 0.35 * len(ordered))),
                              layout="constrained")
    ax.barh([name for name, _ in ordered], [value for _, value in ordered],
            color="tab:blue")
    ax.set_xlabel(f"importance for {objective} (Optuna, fANOVA)")
    return figure


def _parallel(trials: list[FrozenTrial], knobs: list[str], objective: str) -> Any:
    """One axis per varied knob (its values in order, evenly spaced) and one for the
    objective; a line per trial, coloured by the objective."""
    import matplotlib.pyplot as plt  # lazy: as above
    from matplotlib import colormaps, colors

    values = [t.values[0] for t in trials]
    norm = colors.Normalize(min(values), max(values))
    columns = [_positions([t.params.get(k) for t in trials]) for k in knobs]
    low, high = min(values), max(values)
    columns.append(([(v - low) / (high - low) if high > low else 0.5 for v in values],
                    [(0.0, short(float(low))), (1.0, short(float(high)))]))
    figure, ax = plt.subplots(figsize=(1.8 * len(columns) + 1.5, 3.8), layout="constrained")
    alpha = 0.9 if len(trials) <= 20 else max(0.15, 4 / math.sqrt(len(trials)))
    for row, value in enumerate(values):
        ax.plot(range(len(columns)), [c[0][row] for c in columns],
                color=colormaps["viridis"](norm(value)), alpha=alpha, linewidth=1.2)
    for x, (_, ticks) in enumerate(columns):
        ax.axvline(x, color="black", linewidth=0.6)
        for y, label in ticks:
            ax.annotate(label, (x, y), xytext=(3, 0), textcoords="offset points",
                        fontsize=7, va="center")
    ax.set_xticks(range(len(columns)), [*knobs, objective], fontsize=9)
    ax.set_yticks([])
    ax.set_xlim(-0.2, len(columns) - 0.5)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    figure.colorbar(scalar_mappable(norm, colormaps["viridis"]), ax=ax, label=objective,
                    format=three_digits())
    ax.set_title(f"parallel coordinates of {len(trials)} trials", fontsize=10)
    return figure


def _positions(column: list[Any]) -> tuple[list[float], list[tuple[float, str]]]:
    """Each value's height on its axis (its rank among the distinct values, 0 to 1; a
    trial without the param at the bottom) and the axis's labels (at most 8)."""
    distinct = list(dict.fromkeys(v for v in column if v is not None))
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in distinct)
    order = sorted(distinct) if numeric else distinct
    step = 1 / max(1, len(order) - 1)
    at = {repr(v): i * step for i, v in enumerate(order)}
    every = max(1, math.ceil(len(order) / 8))
    labels = [(i * step, short(v)) for i, v in enumerate(order) if i % every == 0]
    return [at.get(repr(v), -0.05) for v in column], labels
