"""The report's figures as matplotlib Figures, drawn by the functions that draw its PNGs
(`tracking/study_plots`, `tracking/effect_plots`), for a notebook to show inline."""

from __future__ import annotations

from typing import TYPE_CHECKING

import optuna
from optuna.trial import TrialState

from msexp.console.library_warnings import warnings_to_log
from msexp.tracking.effect_plots import effect_figures
from msexp.tracking.report import build_report
from msexp.tracking.study_plots import study_figures

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def report_figures(study: optuna.Study, baselines: dict[str, str] | None,
                   color_by: str | None) -> dict[str, Figure]:
    """The figures `msexp report` saves, by the names of their PNGs; {} before a trial
    completed. None is left open in pyplot: a notebook shows each only where asked."""
    import matplotlib.pyplot as plt  # lazy: matplotlib takes about a second to import

    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return {}
    report = build_report(study, None, baselines, color_by)
    effects = report.knob_effects
    figures: dict[str, Figure] = {}
    with warnings_to_log():
        figures.update(study_figures(study, report.objective_names(), report.best,
                                     report.importances))
        if effects is not None:
            figures.update(effect_figures(study, effects,
                                          color_by or next(iter(report.importances), None)))
    for figure in figures.values():
        plt.close(figure)
    return figures
