"""What a study found, in-process: the best trial or Pareto set, state counts, and what
lands on the MLflow parent run (best metrics, best params, the best checkpoint)."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from msexp.errors import MsexpError
from msexp.execution.result import Status, TrialResult
from msexp.keys import StudyKey, TrialKey
from msexp.tracking.delivery import record_trial
from msexp.tracking.report import (
    best_trials,
    build_report,
    log_best,
    log_best_checkpoint,
    log_report,
    state_counts,
)
from msexp.tracking.runs import Tracker
from tests.test_replicates import study_of as repeated_study

LR = {"lr": FloatDistribution(0.001, 1.0)}


def trial(value, lr: float, state=TrialState.COMPLETE, violation: float | None = None,
          **attrs) -> optuna.trial.FrozenTrial:
    values = value if isinstance(value, list) or value is None else [value]
    return create_trial(state=state, values=values, params={"lr": lr}, distributions=LR,
                        user_attrs=attrs, constraints=None if violation is None else {
                            "0:mem": violation})


def study_of(*trials, directions=("maximize",)) -> optuna.Study:
    study = optuna.create_study(directions=list(directions))
    for t in trials:
        study.add_trial(t)
    return study


@pytest.mark.parametrize(("direction", "best"), [("maximize", 0.9), ("minimize", 0.1)])
def test_the_best_trial_follows_the_direction_among_feasible_complete_trials(
        direction: str, best: float) -> None:
    study = study_of(trial(0.5, 0.1), trial(0.9, 0.2), trial(0.1, 0.3), trial(best, 0.6),
                     trial(0.95 if direction == "maximize" else 0.05, 0.4, violation=0.1),
                     trial(None, 0.5, TrialState.FAIL), directions=(direction,))
    (chosen,) = best_trials(study)  # one, even when two tie
    assert chosen.value == best
    assert best_trials(study_of(trial(None, 0.5, TrialState.FAIL))) == []


def test_the_pareto_set_is_that_of_the_feasible_trials() -> None:
    study = study_of(trial([0.9, 5.0], 0.1), trial([0.8, 1.0], 0.2), trial([0.7, 6.0], 0.3),
                     trial([0.95, 0.5], 0.4, violation=0.1),  # dominates all
                     trial([0.8, 1.0], 0.5), trial([0.7, 1.0], 0.6),  # a tie, but worse
                     directions=("maximize", "minimize"))
    assert sorted(t.number for t in best_trials(study)) == [0, 1, 4]


@pytest.mark.parametrize("directions", [("maximize", "minimize"),
                                        ("minimize", "minimize", "maximize")])
def test_the_pareto_set_is_every_trial_no_other_dominates(directions) -> None:
    import random

    from msexp.tracking.report import _pareto_front

    signs = [1 if d == "maximize" else -1 for d in directions]
    generator = random.Random(7)
    for size in (1, 2, 5, 40, 200):  # small integer values: many ties and equal points
        trials = [trial([float(generator.randint(0, 6)) for _ in directions], 0.1)
                  for _ in range(size)]
        scored = [[s * v for s, v in zip(signs, t.values)] for t in trials]
        expected = [t for t, mine in zip(trials, scored)
                    if not any(other != mine and all(o >= v for o, v in zip(other, mine))
                               for other in scored)]
        found = _pareto_front(trials, study_of(directions=directions).directions)
        assert [id(t) for t in found] == [id(t) for t in expected], size


def test_state_counts_use_msexps_status_for_finished_trials() -> None:
    study = study_of(trial(0.5, 0.1), trial(0.6, 0.1), trial(None, 0.2, TrialState.FAIL),
                     trial(None, 0.3, TrialState.FAIL, **{TrialKey.STATUS: "TIMEOUT"}),
                     trial(None, 0.4, TrialState.PRUNED, **{TrialKey.STATUS: "PRUNED"}))
    study.enqueue_trial({"lr": 0.5}, user_attrs={TrialKey.STATUS: "TIMEOUT"})  # not finished
    assert state_counts(study) == {"COMPLETE": 2, "FAIL": 1, "TIMEOUT": 1, "PRUNED": 1,
                                   "WAITING": 1}


def with_parent(study: optuna.Study, tracker: Tracker, name: str) -> str:
    experiment = tracker.experiment_id(name)
    parent = tracker.parent_run(experiment, name, {}, Path("none.yaml"))
    study.set_user_attr(StudyKey.PARENT_RUN, parent)
    return parent


def test_the_parent_run_gets_the_best_trials_metrics_and_params(tracker: Tracker) -> None:
    study = study_of(
        trial(0.5, 0.1, **{TrialKey.METRICS: {"eval_accuracy": 0.5}}),
        trial(0.9, 0.2, **{TrialKey.METRICS: {"eval_accuracy": 0.9, "wall_s": 2.0,
                                              "note": "x", "bad": float("nan")},
                           TrialKey.PARAMS: {"lr": 0.2, "storage": "postgresql://u:pw@h/d"}}))
    assert log_best(study, tracker) is None, "no parent run yet"
    parent = with_parent(study, tracker, "best")
    assert log_best(study, tracker) == parent
    run = tracker.client.get_run(parent)
    assert run.data.metrics == {"best_eval_accuracy": 0.9, "best_wall_s": 2.0}
    assert [m.step for m in tracker.client.get_metric_history(parent, "best_wall_s")] == [0]
    assert run.data.tags["best_trial"] == "1" and run.data.tags["best.lr"] == "0.2"
    assert run.data.tags["best.storage"] == "postgresql://u:***@h/d"


def test_a_multi_objective_study_logs_no_single_best(tracker: Tracker) -> None:
    study = study_of(trial([0.9, 5.0], 0.1, **{TrialKey.METRICS: {"a": 1.0}}),
                     directions=("maximize", "minimize"))
    parent = with_parent(study, tracker, "pareto")
    assert log_best(study, tracker) == parent
    assert log_best_checkpoint(study, tracker) is None
    assert tracker.client.get_run(parent).data.metrics == {}


def test_the_best_checkpoint_is_attached_once_and_linked_from_the_parent(
        tracker: Tracker, tmp_path: Path) -> None:
    checkpoint = tmp_path / "best.ckpt"
    checkpoint.write_bytes(b"weights")
    study = study_of(trial(0.5, 0.1), trial(0.9, 0.2))
    parent = with_parent(study, tracker, "ckpt")
    experiment = tracker.client.get_run(parent).info.experiment_id
    child = record_trial(tracker, experiment, parent, 1, {}, TrialResult(Status.COMPLETE),
                         time.time())
    assert log_best_checkpoint(study, tracker) is None, "the best trial kept no model"
    study = study_of(trial(0.5, 0.1, **{TrialKey.CHECKPOINT: str(checkpoint),
                                        TrialKey.RUN_ID: "x"}),
                     trial(0.9, 0.2, **{TrialKey.CHECKPOINT: str(checkpoint),
                                        TrialKey.RUN_ID: child}))
    study.set_user_attr(StudyKey.PARENT_RUN, parent)
    uri = log_best_checkpoint(study, tracker)
    assert uri == f"runs:/{child}/checkpoint/best.ckpt"
    assert log_best_checkpoint(study, tracker) == uri
    assert [a.path for a in tracker.client.list_artifacts(child, "checkpoint")] == [
        "checkpoint/best.ckpt"], "attached once"
    assert tracker.client.get_run(parent).data.tags["best_checkpoint"] == uri
    spooled = study_of(trial(0.9, 0.2, **{TrialKey.CHECKPOINT: str(checkpoint),
                                          TrialKey.RUN_ID: "spooled"}))
    spooled.set_user_attr(StudyKey.PARENT_RUN, parent)
    assert log_best_checkpoint(spooled, tracker) is None
    gone = study_of(trial(0.9, 0.2, **{TrialKey.CHECKPOINT: str(tmp_path / "gone.ckpt"),
                                       TrialKey.RUN_ID: child}))
    gone.set_user_attr(StudyKey.PARENT_RUN, parent)
    assert log_best_checkpoint(gone, tracker) is None


def test_a_report_logs_its_files_under_report_on_the_parent_run(
        tracker: Tracker, tmp_path: Path) -> None:
    study = study_of(*(trial(v, lr) for v, lr in ((0.5, 0.1), (0.7, 0.4), (0.9, 0.8))))
    study.set_user_attr(StudyKey.OBJECTIVES, ["eval_accuracy"])
    report = build_report(study, tmp_path / "plots")
    assert [t.number for t in report.best] == [2]
    assert report.objective_names() == ["eval_accuracy"]
    assert set(report.importances) == {"lr"}
    names = [p.name for p in report.plots]
    assert names[0] == "report.html" and "history.png" in names
    assert_offline(report.plots)
    parent = with_parent(study, tracker, "report")
    assert log_report(report, tracker=tracker) == parent
    logged = {a.path for a in tracker.client.list_artifacts(parent, "report")}
    assert logged == {f"report/{p.name}" for p in report.plots}
    # its manifest says where it went (mutation, issue 53: the run's id left out of it)
    from msexp.tracking import report_files
    assert report_files.logged_where(report.folder, report.fingerprint)["run"] == parent


def assert_offline(paths: list[Path]) -> None:
    """Files a person opens offline at a sensible size: PNGs, Markdown, and one page that
    inlines the PNGs and loads nothing (Optuna's plotly pages weighed 4.8 MB each)."""
    for path in paths:
        assert path.suffix in (".png", ".md", ".html"), path
        assert path.stat().st_size < 400_000, (path, path.stat().st_size)
    (page,) = [p for p in paths if p.suffix == ".html"]
    text = page.read_text(encoding="utf-8")
    assert "<script" not in text and "http" not in text  # mutation: plotly's pages
    assert text.count("data:image/png;base64,") == sum(p.suffix == ".png" for p in paths)


def test_a_study_of_one_point_has_no_importances_and_unnamed_objectives_get_names(
        tmp_path: Path) -> None:
    study = study_of(trial(0.5, 0.1), trial(0.6, 0.1))
    report = build_report(study)
    assert report.importances == {} and report.plots == []
    plotted = {p.name for p in build_report(study, tmp_path / "two").plots}
    assert {"report.html", "history.png"} <= plotted
    assert "importances.png" not in plotted and "parallel_coordinates.png" not in plotted
    assert report.objective_names() == ["value0"] and not report.multi_objective


def test_two_varied_knobs_get_parallel_coordinates_and_importances(tmp_path: Path) -> None:
    dists = {"lr": FloatDistribution(0.001, 1.0), "wd": FloatDistribution(0.0, 1.0)}
    study = study_of(*(create_trial(values=[lr + wd / 10], params={"lr": lr, "wd": wd},
                                    distributions=dists)
                       for lr, wd in ((0.1, 0.5), (0.4, 0.1), (0.8, 0.9), (0.2, 0.3))))
    report = build_report(study, tmp_path)
    assert set(report.importances) == {"lr", "wd"}
    shown = {p.name: p for p in report.plots}
    assert {"importances.png", "parallel_coordinates.png"} <= set(shown)
    assert_offline(report.plots)


def test_a_multi_objective_report_plots_the_front_and_each_objectives_history(
        tmp_path: Path) -> None:
    study = study_of(trial([0.9137, 123.57], 0.1), trial([0.8219, 456.53], 0.2),
                     trial([0.7351, 789.51], 0.3), directions=("maximize", "minimize"))
    study.set_user_attr(StudyKey.OBJECTIVES, ["acc", "mem"])
    report = build_report(study, tmp_path / "deep" / "plots")  # folders are made
    assert report.multi_objective and report.objective_names() == ["acc", "mem"]
    files = {p.name: p for p in report.plots}
    assert {"report.html", "history.png", "pareto_front.png"} <= set(files)
    assert_offline(report.plots)
    page = files["report.html"].read_text(encoding="utf-8")
    assert "Pareto set: #0 acc=0.914, mem=124" in page


def test_the_report_is_drawn_and_logged_once_per_state_of_the_study(
        tracker: Tracker, tmp_path: Path) -> None:
    study = study_of(*(trial(v, lr, **{TrialKey.METRICS: {"eval_accuracy": v}})
                       for v, lr in ((0.5, 0.1), (0.7, 0.4))))
    study.set_user_attr(StudyKey.OBJECTIVES, ["eval_accuracy"])
    parent = with_parent(study, tracker, "once")
    stale = tmp_path / "optimization_history.html"  # an earlier msexp's 4.8 MB page
    stale.write_text("<html>plotly</html>")
    tracker.client.log_artifact(parent, str(stale), "report")
    folder = tmp_path / "reports"
    first = build_report(study, folder)
    assert log_report(first, tracker=tracker) == parent
    logged = {a.path for a in tracker.client.list_artifacts(parent, "report")}
    # replaced, not accumulated (mutation: no delete of the run's report/ folder)
    assert logged == {f"report/{p.name}" for p in first.plots}
    drawn = {p.name: p.stat().st_mtime_ns for p in first.plots}
    again = build_report(study, folder)
    assert {p.name: p.stat().st_mtime_ns for p in again.plots} == drawn, "not drawn again"
    assert log_report(again, tracker=tracker) == parent
    elsewhere = build_report(study, tmp_path / "elsewhere")  # no manifest says it is logged
    assert elsewhere.fingerprint == first.fingerprint
    assert log_report(elsewhere, tracker=tracker) == parent  # the run's tag says it is
    history = tracker.client.get_metric_history(parent, "best_eval_accuracy")
    assert len(history) == 1, "logged once (mutation: log_best on every report)"
    study.add_trial(trial(0.9, 0.8, **{TrialKey.METRICS: {"eval_accuracy": 0.9}}))
    third = build_report(study, folder)
    assert third.fingerprint != first.fingerprint
    assert log_report(third, tracker=tracker) == parent
    assert tracker.client.get_run(parent).data.metrics["best_eval_accuracy"] == 0.9
    assert tracker.client.get_run(parent).data.tags["msexp.report"] == third.fingerprint
    assert {a.path for a in tracker.client.list_artifacts(parent, "report")} == {
        f"report/{p.name}" for p in third.plots}


def test_a_new_report_replaces_the_files_of_the_earlier_one(tmp_path: Path) -> None:
    dists = {"lr": FloatDistribution(0.001, 1.0), "wd": FloatDistribution(0.0, 1.0)}
    two = study_of(*(create_trial(values=[lr + wd], params={"lr": lr, "wd": wd},
                                  distributions=dists)
                     for lr, wd in ((0.1, 0.5), (0.4, 0.1), (0.8, 0.9))))
    (tmp_path / "param_importances.html").write_text("plotly")  # before manifests
    assert "parallel_coordinates.png" in {p.name for p in build_report(two, tmp_path).plots}
    one = study_of(trial(0.5, 0.1), trial(0.7, 0.4))
    written = {p.name for p in build_report(one, tmp_path).plots}  # the folder, anew
    assert {p.name for p in tmp_path.iterdir()} == written | {"manifest.json"}, \
        "no file of the earlier report is left (mutation: files only added)"


def test_a_repeated_study_reports_replicates_and_effects(tmp_path: Path) -> None:
    study = repeated_study({(1, 0): 0.90, (1, 1): 0.92, (8, 0): 0.70, (8, 1): 0.74})
    study.set_user_attr(StudyKey.OBJECTIVES, ["eval_accuracy"])
    report = build_report(study, tmp_path, baselines={"micro_size": "8"})
    (knob,) = [k for k in report.knob_effects.knobs if k.name == "micro_size"]
    assert knob.baseline == 1, "the baseline asked for: the second level"
    assert [c.params for c in report.configurations] == [{"micro_size": 1}, {"micro_size": 8}]
    assert [(e.knob, e.metric, e.real) for e in report.effects] == [
        ("micro_size", "eval_accuracy", True)]
    table = tmp_path / "replicates.md"
    assert table in report.plots
    assert "| 1 | 0.91 ± 0.014 | 2 |" in table.read_text(encoding="utf-8")
    assert "micro_size: eval_accuracy moves by 0.19" in table.read_text(encoding="utf-8")
    single = study_of(trial(0.5, 0.1, **{TrialKey.METRICS: {"value0": 0.5}}),
                      trial(0.6, 0.2, **{TrialKey.METRICS: {"value0": 0.6}}))
    assert build_report(single).configurations == [], "one seed each: no replicates"
    assert set(build_report(single).importances) == {"lr"}, "two varied trials suffice"
    with pytest.raises(MsexpError) as caught:
        build_report(single, color_by="seed")
    assert str(caught.value) == (f"--color-by seed: not a swept knob of {single.study_name}; "
                                 "swept: lr")


def test_no_importance_ranks_a_knob_whose_effect_is_within_the_seed_spread() -> None:
    noise = repeated_study({(1, 0): 0.90, (1, 1): 0.96, (8, 0): 0.92, (8, 1): 0.95})
    noise.set_user_attr(StudyKey.OBJECTIVES, ["eval_accuracy"])
    report = build_report(noise)
    # mutation: the replicates' effects not passed to importances -> micro_size=1.00
    assert report.importances == {}
    assert report.importance_note == (
        "importance: none, micro_size moves eval_accuracy by 0.005, within the "
        "seed-to-seed spread (0.03354): noise, not a rank")
    assert report.findings()[0].startswith("micro_size: eval_accuracy moves by 0.005")
    real = repeated_study({(1, 0): 0.90, (1, 1): 0.92, (8, 0): 0.70, (8, 1): 0.74})
    real.set_user_attr(StudyKey.OBJECTIVES, ["eval_accuracy"])
    ranked = build_report(real)
    assert ranked.importances == {"micro_size": 1.0} and ranked.importance_note is None


def test_only_the_knobs_beyond_the_seed_spread_are_ranked() -> None:
    study = optuna.create_study(direction="maximize")
    study.set_user_attr(StudyKey.OBJECTIVES, ["eval_accuracy"])
    dists = {"micro_size": CategoricalDistribution([1, 8]),
             "amp_level": CategoricalDistribution(["O0", "O2"]),
             "seed": CategoricalDistribution([0, 1])}
    for micro, amp, seed in itertools.product((1, 8), ("O0", "O2"), (0, 1)):
        value = (0.9 if micro == 1 else 0.7) + (0.001 if amp == "O2" else 0) + seed / 50
        study.add_trial(create_trial(
            params={"micro_size": micro, "amp_level": amp, "seed": seed}, distributions=dists,
            value=value, user_attrs={TrialKey.METRICS: {"eval_accuracy": value}}))
    report = build_report(study)
    assert list(report.importances) == ["micro_size"]  # mutation: amp_level ranked too
    assert report.importance_note.startswith(
        "importance: not ranked: amp_level moves eval_accuracy by 0.001, within the "
        "seed-to-seed spread (0.01414)")
    share = report.importances["micro_size"]
    assert report.findings()[-2:] == [f"importance: micro_size={share:.2f}",
                                      report.importance_note]


def test_the_page_lists_the_best_trial_and_color_by_names_what_is_swept(
        tmp_path: Path) -> None:
    """Mutations (issue 53): the page's title line `BEST TRIAL`, its list items joined
    with text between them, `swept: NONE`."""
    import re

    from msexp.tracking import report_files

    study = study_of(trial(0.5, 0.1), trial(0.6, 0.1))
    page = (build_report(study, tmp_path).folder / "report.html").read_text()
    assert re.findall(r"<ul>.*?</ul>", page, re.S) == [
        "<ul><li>best trial: #1 value0=0.6 (lr=0.1)</li></ul>"]
    assert "<ul><li>a</li><li>b &amp; c</li></ul>" in report_files.page("t", ["a", "b & c"], [])
    with pytest.raises(MsexpError) as refused:
        build_report(study, color_by="lr")
    assert str(refused.value).endswith("; swept: none")


def test_clearing_a_report_removes_no_file_outside_its_folder(tmp_path: Path) -> None:
    """A manifest naming a path (edited, or another tool's) removes nothing but the
    report's own files. (issue 53 fresh: report_files.clear 9)"""
    import json

    from msexp.tracking import report_files

    folder = tmp_path / "report"
    folder.mkdir()
    (tmp_path / "keep.txt").write_text("a user's file")
    (folder / "old.png").write_text("png")
    (folder / report_files.MANIFEST).write_text(json.dumps(
        {"fingerprint": "x", "files": ["old.png", "../keep.txt"]}))
    report_files.clear(folder)
    assert (tmp_path / "keep.txt").is_file()
    assert not (folder / "old.png").exists() and list(folder.iterdir()) == []
