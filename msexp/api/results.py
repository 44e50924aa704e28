"""A study's results from Python: `msexp.load_sweep` opens what a sweep recorded (the
study `msexp report` and `msexp best` read, found the same way) without running anything."""

from __future__ import annotations

from typing import TYPE_CHECKING

import optuna

from msexp.api.quiet import native_output_to_log, quiet
from msexp.api.sources import Source, load, sweep_file, sweep_name
from msexp.api.trials import Trial, trial_of, trials_frame
from msexp.errors import MsexpError
from msexp.experiment import Workload
from msexp.keys import StudyKey
from msexp.search.existing import existing_study
from msexp.spec import SweepSpec
from msexp.tracking.effects import KnobEffects, knob_effects
from msexp.tracking.report import best_trials

if TYPE_CHECKING:
    import pandas
    from matplotlib.figure import Figure


class SweepResults:
    """What a sweep's study holds: its trials, the best of them, the knobs' effects and
    the report's figures; read from its stores each time it is asked."""

    def __init__(self, study: optuna.Study, spec: SweepSpec | None, source: Source | None,
                 tracking_uri: str | None, storage: str | None) -> None:
        """Prefer `msexp.sweep` or `msexp.load_sweep`, which make one; `spec` is read from
        `source` when a model is first loaded."""
        self.study, self.spec, self.source = study, spec, source
        self.tracking_uri, self.storage = tracking_uri, storage

    @property
    def study_name(self) -> str:
        """The study's name (NAME, or NAME-v2, ... after `restart`)."""
        return self.study.study_name

    @property
    def objectives(self) -> list[str]:
        """The objectives' metrics, in the sweep's order."""
        names: list[str] = self.study.user_attrs.get(StudyKey.OBJECTIVES) or []
        return names

    def trials(self) -> list[Trial]:
        """Every trial of the study, by number."""
        return [trial_of(t, self.study_name) for t in self.study.get_trials(deepcopy=False)]

    def trials_dataframe(self) -> pandas.DataFrame:
        """The trials as a pandas DataFrame, one row per trial: number, status, the swept
        knobs, seed, `value` (or `value_<metric>`), the metrics under their one meaning,
        feasible, run_id (MLflow), folder, checkpoint, error."""
        return trials_frame(self.trials(), self.objectives)

    dataframe = trials_dataframe  # Ray Tune's `get_dataframe`, MLflow's frames: one word

    def best_trials(self) -> list[Trial]:
        """The best feasible trial, or the feasible Pareto set of several objectives (as
        `msexp best` and `msexp report` judge: a trial that breaks a constraint is never
        best); [] before any completed."""
        return [trial_of(t, self.study_name) for t in best_trials(self.study)]

    @property
    def best_trial(self) -> Trial:
        """The best trial (the first of the Pareto set for several objectives).

        Raises:
            MsexpError: no trial completed within the constraints yet.
        """
        found = self.best_trials()
        if not found:
            raise MsexpError(f"no trial of study {self.study_name!r} completed within its "
                             "constraints yet")
        return found[0]

    def knob_effects(self, baselines: dict[str, str] | None = None) -> KnobEffects:
        """Each swept knob's effect on the objective and every recorded metric, against
        its baseline value (`baselines`: knob -> value; default each knob's first), with
        the seed-to-seed spread where the sweep ran repeats; `.lines()` says them as
        `msexp report` does."""
        return knob_effects(self.study, baselines)

    def figures(self, baselines: dict[str, str] | None = None, color_by: str | None = None
                ) -> dict[str, Figure]:
        """The report's figures as matplotlib Figures (a notebook shows each inline),
        named as `msexp report` names their PNGs: history, pareto_front, importances,
        parallel_coordinates, effects_<knob>, learning_curves (where they apply)."""
        from msexp.api.figures import report_figures  # lazy: matplotlib, a second

        return report_figures(self.study, baselines, color_by)

    def load_model(self, trial: Trial | None = None) -> Workload:
        """The trained model of `trial` (default the best): its experiment's workload, built
        as the trial ran, with the network's weights loaded from the trial's checkpoint
        and set to evaluate; `.network` is the model, `.eval` its validation data.

        Raises:
            MsexpError: the trial kept no checkpoint, it is not on this machine, or the
                experiment is a command (its network is its own script's).
        """
        from msexp.api.models import trained  # lazy: MindSpore, seconds

        chosen = trial or self.best_trial
        with quiet(), native_output_to_log():
            return trained(self._spec(), self.study, chosen)

    def _spec(self) -> SweepSpec:
        if self.spec is None:
            if self.source is None:
                raise MsexpError(f"study {self.study_name!r} was opened by name: give the "
                                 "sweep (its file or dict) to load_sweep to build its model")
            self.spec = load(self.source)
        return self.spec

    def __repr__(self) -> str:
        states = ", ".join(f"{n} {s.lower()}" for s, n in sorted(self._states().items()))
        return f"<SweepResults {self.study_name}: {states or 'no trials'}>"

    def _states(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for trial in self.trials():
            counts[trial.status] = counts.get(trial.status, 0) + 1
        return counts


def load_sweep(source: Source | None = None, *, study: str | None = None,
               storage: str | None = None, tracking_uri: str | None = None) -> SweepResults:
    """Open the results of a sweep that ran, without running anything: the study of
    `source` (a sweep file's path or dict), or the one `study` names, as `msexp report`
    finds it (the newest version of the sweep's, unless `study` names one).

    Args:
        source: the sweep file's path, or its dict; None with `study`.
        study: the study's name (`--study`).
        storage: the Optuna storage URL the sweep used (`--storage`).
        tracking_uri: the MLflow tracking URI it used (`--tracking-uri`).

    Raises:
        TypeError: neither `source` nor `study` given.
        MsexpError: no such study (one line: run the sweep first); nothing is made.
    """
    if source is None and study is None:
        raise TypeError("load_sweep() needs a sweep file (its path or dict) or study=NAME")
    with quiet():
        name = sweep_name(source) if source is not None else None
        found = existing_study(sweep_file(source), study, storage, name)
    return SweepResults(found, None, source, tracking_uri, storage)
