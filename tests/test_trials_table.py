"""The trials table of `msexp report` and of a sweep's end: no column that no trial filled."""

from __future__ import annotations

import optuna

from msexp.cli.options import console
from msexp.cli.render import trials_table
from msexp.keys import StudyKey, TrialKey


def table_of(objectives: list[str], metrics: list[dict[str, float]]) -> tuple[list[str], str]:
    """The header cells and the whole text of the table of a study whose trials reported
    `metrics`, one dict per trial."""
    study = optuna.create_study(study_name="t", directions=["maximize"] * len(objectives))
    study.set_user_attr(StudyKey.OBJECTIVES, objectives)
    for i, reported in enumerate(metrics):
        trial = optuna.trial.create_trial(
            params={"lr": 0.1 * (i + 1)},
            distributions={"lr": optuna.distributions.FloatDistribution(0.01, 1)},
            values=[reported.get(name, 0.0) for name in objectives],
            user_attrs={TrialKey.STATUS: "COMPLETE", TrialKey.METRICS: reported})
        study.add_trial(trial)
    with console.capture() as captured:
        trials_table(study)
    text = captured.get()
    header = next(line for line in text.splitlines() if line.startswith("┃"))
    return [cell.strip() for cell in header.strip("┃").split("┃")], text


def test_an_unchanged_scripts_table_shows_only_what_it_reported() -> None:
    # a command experiment without msexp.hooks: its log gave acc and msexp its wall time
    header, text = table_of(["acc"], [{"acc": 0.125, "wall_s": 30.0},
                                      {"acc": 0.25, "wall_s": 31.0}])
    assert header == ["#", "status", "lr", "acc", "wall_s"], header
    assert "0.125" in text and "0.25" in text


def test_a_metric_one_trial_reported_keeps_its_column() -> None:
    header, text = table_of(["eval_accuracy"], [
        {"eval_accuracy": 0.5, "samples_per_s": 900.0, "train_mem_mb": 4.5, "wall_s": 2.0},
        {"eval_accuracy": 0.75, "wall_s": 3.0}])
    assert header == ["#", "status", "lr", "eval_accuracy", "samples_per_s", "train_mem_mb",
                      "wall_s"], header
    row = next(line for line in text.splitlines() if line.startswith("│ 1"))
    assert [c.strip() for c in row.strip("│").split("│")][4:6] == ["-", "-"]


def test_an_objective_no_trial_reported_keeps_its_column() -> None:
    header, _ = table_of(["eval_accuracy"], [{"acc": 0.5, "wall_s": 2.0}])
    assert header == ["#", "status", "lr", "eval_accuracy", "wall_s"], header


# mutations: the table prints every row of a large study (seconds of rendering per
# thousand trials), or leaves rows out without saying so
def test_a_large_studys_table_shows_its_newest_rows_and_counts_the_rest(monkeypatch) -> None:
    from msexp.cli import render

    monkeypatch.setattr(render, "TABLE_ROWS", 3)
    _header, text = table_of(["acc"], [{"acc": i / 8} for i in range(5)])
    assert "0.5" in text and "0.375" in text and "0.25" in text  # the newest three
    assert "0.125" not in text, "an older row is left out"
    assert "2 earlier trials not shown" in text


def test_a_narrow_terminal_keeps_knobs_objective_and_status_whole(monkeypatch) -> None:
    """At 80 columns the swept knobs, the objective and the status are never cut; the
    other metrics that do not fit are left out and named. Mutation: no `_fitting` (Rich
    squeezes every column: `micro_…`, `eval_a…`, `COMPLE…`)."""
    from msexp.cli import render
    from msexp.cli.options import RedactingConsole

    narrow = RedactingConsole(width=80, force_terminal=True, color_system=None)
    monkeypatch.setattr(render, "console", narrow)
    study = optuna.create_study(study_name="narrow", directions=["maximize"])
    study.set_user_attr(StudyKey.OBJECTIVES, ["eval_accuracy"])
    params = {"micro_size": 4, "amp_level": "O2", "loss_scale": "dynamic", "optimizer": "adamw"}
    metrics = {"eval_accuracy": 0.9722, "samples_per_s": 12345.6, "train_mem_mb": 123.4,
               "peak_mem_mb": 812.5, "wall_s": 12.3}
    study.add_trial(optuna.trial.create_trial(
        params=params, values=[0.9722], user_attrs={
            TrialKey.STATUS: "COMPLETE", TrialKey.METRICS: metrics},
        distributions={k: optuna.distributions.CategoricalDistribution([v])
                       for k, v in params.items()}))
    with narrow.capture() as captured:
        trials_table(study)
    text = captured.get()
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "…" not in text, text
    for whole in ("micro_size", "amp_level", "loss_scale", "optimizer", "eval_accuracy",
                  "COMPLETE", "dynamic", "adamw", "0.9722"):
        assert whole in text, (whole, text)
    assert "not shown at 80 columns: " in text and "wall_s" in text.split("not shown")[1]


def test_an_objective_missing_in_two_trials_is_counted_in_the_plural() -> None:
    """Mutation (issue 53): `trial` for 2 (`n > 2`)."""
    from msexp.cli.render import missing_objectives

    study = optuna.create_study()
    for missing in (["acc"], ["acc", "loss"]):
        trial = study.ask()
        trial.set_user_attr(TrialKey.MISSING, missing)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    assert missing_objectives(study) == (
        "objective not reported by trials that ran to the end: acc (missing in 2 trials), "
        "loss (missing in 1 trial); Optuna failed those trials, so none of them can be best")


def test_a_study_with_constraints_shows_each_trials_feasibility() -> None:
    """Mutation (issue 53): the feasible column's cells left out."""
    study = optuna.create_study(study_name="t", directions=["maximize"])
    study.set_user_attr(StudyKey.OBJECTIVES, ["acc"])
    for i, feasible in enumerate((True, False)):
        study.add_trial(optuna.trial.create_trial(
            params={"lr": 0.1 * (i + 1)},
            distributions={"lr": optuna.distributions.FloatDistribution(0.01, 1)},
            values=[0.5], user_attrs={TrialKey.STATUS: "COMPLETE", TrialKey.FEASIBLE: feasible,
                                      TrialKey.METRICS: {"acc": 0.5}}))
    with console.capture() as captured:
        trials_table(study)
    rows = [[c.strip() for c in line.strip("┃│").split("┃" if "┃" in line else "│")]
            for line in captured.get().splitlines() if line.startswith(("┃", "│"))]
    assert rows[0][-1] == "feasible" and [row[-1] for row in rows[1:]] == ["yes", "no"], rows


def test_the_link_lines_serve_the_store_only_where_a_command_serves_it() -> None:
    """A server's store needs no serving command. Mutation (issue 53): the serve line
    always (`serve the store:  None`)."""
    from msexp.cli.render import link_lines

    assert link_lines("http://mlflow:5000/#/runs", None) == [
        "compare trials:   http://mlflow:5000/#/runs"]
    assert link_lines("http://127.0.0.1:5000/#/runs", "msexp ui") == [
        "serve the store:  msexp ui", "compare trials:   http://127.0.0.1:5000/#/runs"]


def test_a_sweeps_summary_ends_with_its_links_and_none_where_mlflow_did_not_open() -> None:
    """Mutation `render.summary` 20: each link line printed as `None`."""
    from types import SimpleNamespace

    from msexp.cli.render import summary

    study = optuna.create_study(study_name="t", directions=["maximize"])
    study.set_user_attr(StudyKey.OBJECTIVES, ["acc"])

    class Recorder:
        def __init__(self, ready: bool) -> None:
            self._ready = ready

        def ready(self) -> bool:
            return self._ready

        def failure(self) -> None:
            return None

        def ui_links(self) -> tuple[str, str, str]:
            return ("http://127.0.0.1:5000/#/runs", "http://127.0.0.1:5000/#/runs/p",
                    "msexp ui")

    def ending(ready: bool) -> list[str]:
        with console.capture() as captured:
            summary(SimpleNamespace(study=study, recorder=Recorder(ready)))
        return captured.get().splitlines()

    assert ending(True)[-3:] == ["serve the store:  msexp ui",
                                 "compare trials:   http://127.0.0.1:5000/#/runs",
                                 "sweep run:        http://127.0.0.1:5000/#/runs/p"]
    assert not any("5000" in line for line in ending(False))


def test_a_trial_that_failed_before_reporting_any_metric_keeps_its_row() -> None:
    """A trial that failed at once (no metrics recorded) is a row with its status and a
    dash for each metric, beside one that completed. (issue 53 fresh fcli:
    cli.render.finished_trials 16, a missing metrics record read as None: TypeError)"""
    study = optuna.create_study(study_name="t", directions=["maximize"])
    study.set_user_attr(StudyKey.OBJECTIVES, ["acc"])
    lr = {"lr": optuna.distributions.FloatDistribution(0.01, 1)}
    study.add_trial(optuna.trial.create_trial(
        params={"lr": 0.1}, distributions=lr, values=[0.5],
        user_attrs={TrialKey.STATUS: "COMPLETE", TrialKey.METRICS: {"acc": 0.5}}))
    study.add_trial(optuna.trial.create_trial(
        params={"lr": 0.2}, distributions=lr, state=optuna.trial.TrialState.FAIL,
        user_attrs={TrialKey.STATUS: "FAILED"}))
    with console.capture() as captured:
        trials_table(study)
    rows = [[c.strip() for c in line.strip("│").split("│")]
            for line in captured.get().splitlines() if line.startswith("│")]
    assert rows == [["0", "COMPLETE", "0.1", "0.5"], ["1", "FAILED", "0.2", "-"]], rows


def test_a_sweeps_links_are_printed_as_plain_text_on_a_color_terminal(monkeypatch) -> None:
    """The links that end a sweep show as they are, copyable, with no color codes inside.
    (issue 53 fresh fcli: cli.render.summary 21, Rich's highlighting on for the link lines)"""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from msexp.cli import render

    screen = Console(file=io.StringIO(), width=200, force_terminal=True,
                     color_system="truecolor")
    monkeypatch.setattr(render, "console", screen)
    monkeypatch.setattr(render, "trials_table", lambda study: None)
    study = optuna.create_study(study_name="t", directions=["maximize"])

    class Recorder:
        def ready(self) -> bool:
            return True

        def failure(self) -> None:
            return None

        def ui_links(self) -> tuple[str, str, str]:
            return ("http://127.0.0.1:5001/#/experiments/1/runs",
                    "http://127.0.0.1:5001/#/experiments/1/runs/p", "msexp ui --port 5001")

    render.summary(SimpleNamespace(study=study, recorder=Recorder()))
    assert screen.file.getvalue().splitlines() == [
        "serve the store:  msexp ui --port 5001",
        "compare trials:   http://127.0.0.1:5001/#/experiments/1/runs",
        "sweep run:        http://127.0.0.1:5001/#/experiments/1/runs/p"]
