"""The knob-effects report as files: a PNG per knob, learning curves and a Markdown
summary, drawn with matplotlib."""

from __future__ import annotations

import math
import os
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from msexp.tracking.curves import curves_of, objective_name, update_curves_of
from msexp.tracking.effects import KnobEffects, SweptKnob, metric_of, short

PANEL_W, PANEL_H = 3.6, 2.6  # inches per metric panel at a few levels
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"  # a Jupyter kernel's
MAX_CURVES = 300  # trials drawn in the learning curves; more only blur into one another


def write_effects(study: optuna.Study, found: KnobEffects, folder: Path,
                  color_by: str | None = None) -> list[Path]:
    """Write effects_<knob>.png, learning_curves.png and effects.md."""
    files_backend()
    folder.mkdir(parents=True, exist_ok=True)
    pngs = [save(figure, folder / f"{name}.png")
            for name, figure in effect_figures(study, found, color_by)]
    summary = folder / "effects.md"
    summary.write_text(_markdown(study, found, pngs), encoding="utf-8")
    return [*pngs, summary]


def effect_figures(study: optuna.Study, found: KnobEffects, color_by: str | None = None
                   ) -> Iterator[tuple[str, Any]]:
    """The knob effects' matplotlib figures, one at a time, each named as its file is:
    `effects_<knob>` per swept knob, then `learning_curves` (coloured by `color_by`, else
    the first knob) where there is one. The report saves them; the Python API shows them."""
    for knob in found.knobs:
        if found.metrics:
            yield f"effects_{_safe(knob.name)}", _knob_figure(knob, found.metrics, found.points)
    colour = next((k for k in found.knobs if k.name == color_by), None) or \
        (found.knobs[0] if found.knobs else None)
    curves = _curves_figure(study, colour)
    if curves is not None:
        yield "learning_curves", curves


def files_backend() -> None:
    """matplotlib draws into files only, never a window. A Jupyter kernel's inline backend
    (which opens none) is kept: the notebook's own figures, and the Python API's, still
    show in its cells."""
    import matplotlib  # lazy: matplotlib takes about a second to import

    if os.environ.get("MPLBACKEND") != INLINE_BACKEND:
        matplotlib.use("Agg")


def _knob_figure(knob: SweptKnob, metrics: list[str], points: frozenset[str]) -> Any:
    import matplotlib.pyplot as plt  # lazy: as above

    columns = min(3, len(metrics))
    rows = math.ceil(len(metrics) / columns)
    hidden = (f" ({knob.hidden} rarer values, {knob.hidden_trials} trials, not shown)"
              if knob.hidden else "")
    title = (f"{knob.name}: {len(knob.trials())} trials{hidden}; right axis against "
             f"{knob.name}={knob.base.label}")
    width = PANEL_W * (1 + max(0, len(knob.levels) - 4) * 0.12)  # wider for many categories
    size = (max(width * columns, 0.095 * len(title)), PANEL_H * rows + 0.5)  # the title fits
    figure, axes = plt.subplots(rows, columns, figsize=size, squeeze=False)
    # margins in inches, set once: a constrained layout measured every panel's ticks and
    # doubled the time to draw the figure (1.3 s against 2.4 s for 10 panels, loaded)
    below = 0.9 if len(knob.levels) > 5 else 0.6  # tick labels turned for many values
    figure.subplots_adjust(left=0.7 / size[0], right=1 - 0.7 / size[0], bottom=below / size[1],
                           top=1 - 0.8 / size[1], wspace=0.6, hspace=0.8)
    for ax, metric in zip(axes.flat, metrics):
        (_range_panel if knob.is_range else _levels_panel)(ax, knob, metric)
        _baseline_axis(ax, knob, metric, metric in points)
        ax.set_title(metric, fontsize=10)
        ax.set_xlabel(knob.name)
    for ax in list(axes.flat)[len(metrics):]:
        ax.set_visible(False)
    figure.suptitle(title, fontsize=11)
    return figure


def _levels_panel(ax: Any, knob: SweptKnob, metric: str) -> None:
    """A box per value with every trial as a jittered point."""
    jitter = random.Random(0)  # the same picture every time
    data = [[v for t in level.trials if not math.isnan(v := metric_of(t, metric))]
            for level in knob.levels]
    positions = list(range(len(knob.levels)))
    ax.boxplot([d or [math.nan] for d in data], positions=positions, widths=0.5,
               showfliers=False, medianprops={"color": "tab:orange"})
    size = max(4.0, 30 / math.sqrt(max(1, max(map(len, data)))))
    for x, values in zip(positions, data):
        xs = [x + jitter.uniform(-0.15, 0.15) for _ in values]
        ax.scatter(xs, values, s=size, alpha=0.6, color="tab:blue", zorder=3, linewidths=0)
    ax.set_xticks(positions, [level.label for level in knob.levels],
                  rotation=30 if len(knob.levels) > 5 else 0, fontsize=8)


def _range_panel(ax: Any, knob: SweptKnob, metric: str) -> None:
    """Every trial as a point, with the bins' means (what the ratios compare) as a trend."""
    trials = knob.trials()
    xs = [t.params[knob.name] for t in trials]
    ys = [metric_of(t, metric) for t in trials]
    ax.scatter(xs, ys, s=max(4.0, 40 / math.sqrt(len(xs))), alpha=0.5, linewidths=0)
    trend = [(level.value, level.mean(metric)) for level in knob.levels
             if not math.isnan(level.mean(metric))]
    if trend:
        ax.plot(*zip(*trend), color="tab:orange", marker="o")
    if knob.log:
        ax.set_xscale("log")
    ax.xaxis.set_major_formatter(three_digits())


def _baseline_axis(ax: Any, knob: SweptKnob, metric: str, points: bool) -> None:
    """A dashed line at the baseline's mean, and a right axis in ratio (or, for a
    fraction, percentage points) to it."""
    base = knob.base.mean(metric)
    if math.isnan(base):
        return
    ax.axhline(base, color="grey", linestyle="--", linewidth=0.8)
    ax.yaxis.set_major_formatter(three_digits())
    if points:
        right = ax.secondary_yaxis("right", functions=(lambda v: 100 * (v - base),
                                                       lambda d: base + d / 100))
        right.set_ylabel("pp vs baseline", fontsize=8)
    elif base:
        right = ax.secondary_yaxis("right", functions=(lambda v: v / base,
                                                       lambda r: r * base))
        right.set_ylabel("x baseline", fontsize=8)
    else:
        return
    right.yaxis.set_major_formatter(three_digits())
    right.tick_params(labelsize=8)
    ax.tick_params(labelsize=8)


def _curves_figure(study: optuna.Study, knob: SweptKnob | None) -> Any:
    """Eval metrics by epoch, a line per trial, coloured by the knob's value; where no trial
    ran two epochs (one point each is no curve), the training loss by update instead. None:
    nothing to draw."""
    import matplotlib.pyplot as plt  # lazy: as above
    from matplotlib import colormaps, colors

    objective = objective_name(study.user_attrs)
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    trials = trials[-MAX_CURVES:]
    curves = {t.number: c for t in trials if (c := curves_of(t, objective))}
    along = "epoch"
    if all(len(points) <= 1 for c in curves.values() for points in c.values()):
        curves, along = {t.number: c for t in trials if (c := update_curves_of(t))}, "update"
    metrics = list(dict.fromkeys(m for c in curves.values() for m in c))
    if not metrics:
        return None
    by_number = {t.number: t for t in trials}
    figure, axes = plt.subplots(1, len(metrics), figsize=(max(7.5, 5.5 * len(metrics)), 3.8),
                                squeeze=False, layout="constrained")
    color = _colors(knob, colormaps, colors)
    alpha = 0.9 if len(curves) <= 10 else max(0.15, 3 / math.sqrt(len(curves)))
    for ax, metric in zip(axes.flat, metrics):
        for number, curve in curves.items():
            if curve.get(metric):
                steps, values = zip(*curve[metric])
                ax.plot(steps, values, color=color(by_number[number]), alpha=alpha,
                        linewidth=1.2, marker="o" if len(steps) == 1 else None, markersize=3)
        ax.set_xlabel(along)
        ax.set_title(metric, fontsize=10)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.yaxis.set_major_formatter(three_digits())
    _legend(figure, axes[0][-1], knob, colormaps, colors)
    title = (f"learning curves of {len(curves)} trials" if along == "epoch" else
             f"learning curves of {len(curves)} trials by update (one epoch each)")
    figure.suptitle(title + (f", coloured by {knob.name}" if knob else ""), fontsize=11)
    return figure


def _colors(knob: SweptKnob | None, colormaps: Any, colors: Any) -> Any:
    if knob is None:
        return lambda trial: "tab:blue"
    if knob.is_range:
        values = [t.params[knob.name] for t in knob.trials()]
        norm = (colors.LogNorm if knob.log else colors.Normalize)(min(values), max(values))
        return lambda trial: (colormaps["viridis"](norm(trial.params[knob.name]))
                              if knob.name in trial.params else "lightgrey")
    palette = colormaps["tab10" if len(knob.levels) <= 10 else "tab20"]
    by_value = {repr(level.value): palette(i) for i, level in enumerate(knob.levels)}
    return lambda trial: by_value.get(repr(trial.params.get(knob.name)), "lightgrey")


def _legend(figure: Any, ax: Any, knob: SweptKnob | None, colormaps: Any, colors: Any) -> None:
    if knob is None:
        return
    if knob.is_range:
        values = [t.params[knob.name] for t in knob.trials()]
        norm = (colors.LogNorm if knob.log else colors.Normalize)(min(values), max(values))
        mappable = figure.colorbar(
            scalar_mappable(norm, colormaps["viridis"]), ax=ax, format=three_digits())
        mappable.set_label(knob.name)
        return
    from matplotlib.lines import Line2D  # lazy: as above

    color = _colors(knob, colormaps, colors)
    handles = [Line2D([], [], color=color(level.trials[0]), label=level.label)
               for level in knob.levels]
    ax.legend(handles=handles, title=knob.name, fontsize=8, title_fontsize=8,
              loc="center left", bbox_to_anchor=(1.02, 0.5))


def scalar_mappable(norm: Any, cmap: Any) -> Any:
    from matplotlib.cm import ScalarMappable  # lazy: as above

    return ScalarMappable(norm=norm, cmap=cmap)


def three_digits() -> Any:
    from matplotlib.ticker import FuncFormatter  # lazy: as above

    return FuncFormatter(lambda v, _pos: short(float(v)))


def save(figure: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt  # lazy: as above

    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _markdown(study: optuna.Study, found: KnobEffects, pngs: list[Path]) -> str:
    lines = [f"# {study.study_name}: knob effects", "",
             "Each knob's baseline against its farthest value: ratios of the means (x), "
             "percentage points (pp) for fractions (accuracy-like metrics in [0, 1]), +/- "
             "the seed-to-seed spread where configurations ran with repeats.", "",
             found.markdown(), *(f"Note: {note}" for note in found.notes)]
    lines += [f"![{p.stem}]({p.name})" for p in pngs]
    return "\n".join(lines) + "\n"
