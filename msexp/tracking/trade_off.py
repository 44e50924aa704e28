"""The sweep's trade-off picture on its MLflow parent run: the objective against the
training memory, a point per complete trial labelled with its knobs. MLflow shows an image
logged under a key in the run's charts, so it is the first picture of the sweep there."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from msexp.keys import StudyKey, TrialKey
from msexp.tracking.effect_plots import files_backend, three_digits
from msexp.tracking.runs import Tracker
from msexp.tracking.study_plots import varied_knobs

_log = logging.getLogger("msexp")
KEY = "trade_off"  # the image's key: its card in the UI's charts
COSTS = ("train_mem_mb", "peak_mem_mb", "wall_s")  # the x axis: the first some trial has
MAX_LABELS = 40  # trials labelled with their knobs; more would cover the points


def log_trade_off(study: optuna.Study, tracker: Tracker, objective: str) -> bool:
    """Log the picture on the study's parent run (one step per complete trial: the UI's
    slider goes through the sweep's history); False where there is nothing to draw."""
    run_id = study.user_attrs.get(StudyKey.PARENT_RUN)
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    cost = next((c for c in COSTS if any(c in _metrics(t) for t in trials)), None)
    if not run_id or cost is None or not tracker.has_run(run_id):
        return False
    figure = trade_off_figure(trials, objective, cost)
    try:
        with tracker.writing():
            tracker.client.log_image(run_id, _pixels(figure), key=KEY, step=len(trials))
    finally:
        _close(figure)
    return True


def trade_off_figure(trials: list[FrozenTrial], objective: str, cost: str) -> Any:
    """The objective (y) against `cost` (x), a point per trial coloured by the first knob
    that varies, each labelled with the knobs that vary."""
    import matplotlib.pyplot as plt  # lazy: matplotlib takes about a second to import

    files_backend()
    knobs = varied_knobs(trials)
    shown = [t for t in trials if objective in _metrics(t) and cost in _metrics(t)]
    figure, axes = plt.subplots(figsize=(8, 5))
    colour = knobs[0] if knobs else None
    values = sorted({repr(t.params.get(colour)) for t in shown}) if colour else ["all"]
    palette = plt.get_cmap("viridis", max(len(values), 2))
    for index, value in enumerate(values):
        group = [t for t in shown if colour is None or repr(t.params.get(colour)) == value]
        axes.scatter([_metrics(t)[cost] for t in group], [_metrics(t)[objective] for t in group],
                     s=60, color=palette(index), label=f"{colour}={group[0].params.get(colour)}"
                     if colour else None, edgecolors="black", linewidths=0.5, zorder=3)
    for t in shown[:MAX_LABELS]:
        label = f"#{t.number} " + " ".join(f"{k}={t.params.get(k)}" for k in knobs[1:3])
        axes.annotate(label.strip(), (_metrics(t)[cost], _metrics(t)[objective]), fontsize=8,
                      xytext=(4, 4), textcoords="offset points")
    axes.set_xlabel(cost)
    axes.set_ylabel(objective)
    axes.yaxis.set_major_formatter(three_digits())
    axes.set_title(f"{objective} against {cost}, a point per complete trial")
    axes.grid(alpha=0.3)
    if colour:
        axes.legend(fontsize=8)
    figure.tight_layout()
    return figure


def _metrics(trial: FrozenTrial) -> dict[str, float]:
    found = trial.user_attrs.get(TrialKey.METRICS) or {}
    return {k: float(v) for k, v in found.items() if isinstance(v, (int, float))}


def _pixels(figure: Any) -> Any:
    """The figure as an RGB array, which `log_image` takes."""
    figure.canvas.draw()
    return np.asarray(figure.canvas.buffer_rgba())[..., :3].copy()


def _close(figure: Any) -> None:
    import matplotlib.pyplot as plt  # lazy: as above

    plt.close(figure)
