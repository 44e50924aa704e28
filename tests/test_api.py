"""The Python API (msexp.api, docs/python.md): the CLI's engine and its one-line errors,
results read back in a new process as Optuna and MLflow hold them, a stop and a resume,
and a typed surface."""

from __future__ import annotations

import inspect
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import msexp
from msexp import api
from msexp.cli import app
from msexp.search.study import fingerprint
from tests.conftest import ROOT, mlflow_client, write

TINY = {"name": "tiny", "experiment": "mlp_digits",
        "fixed": {"epochs": 1, "batch_size": 64, "hidden": 8},
        "params": {"micro_size": [1, 2]}}


def cli_line(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})
    assert result.exit_code != 0, result.output
    return " ".join(result.output.split())


def test_a_dict_with_a_misspelt_key_raises_the_clis_line(workdir: Path) -> None:
    swept = {**TINY, "fixed": {"epochs": 1, "micro_sise": 2}}
    file = write(workdir / "bad.yaml", yaml.safe_dump(swept))
    line = cli_line("validate", str(file))
    assert line.startswith(f"{file}: fixed.micro_sise: ") and "did you mean micro_size" in line
    with pytest.raises(msexp.SpecError) as from_file:
        msexp.sweep(file)
    assert str(from_file.value) == line  # mutation: a file's errors named otherwise fails
    with pytest.raises(msexp.SpecError) as from_dict:
        msexp.sweep(swept)
    assert str(from_dict.value) == "<dict>" + line[len(str(file)):]
    assert type(from_dict.value) is type(from_file.value)
    assert not (workdir / "mlruns").exists()  # refused before anything ran or was made


def test_a_dict_is_the_sweep_its_file_would_be(workdir: Path) -> None:
    swept = {**TINY, "budget": {"repeats": 2}}
    spec = api.sources.load(swept)
    from_file = api.sources.load(write(workdir / "tiny.yaml", yaml.safe_dump(swept)))
    assert str(spec.path) == "<dict>" and spec.folder == workdir  # a command runs here
    assert (spec.name, spec.n_trials(), spec.fixed, spec.params) == (
        from_file.name, from_file.n_trials(), from_file.fixed, from_file.params)
    assert fingerprint(spec) == fingerprint(from_file)  # either resumes the other's study


def test_reading_a_sweep_that_never_ran_says_so_in_the_clis_line(workdir: Path) -> None:
    file = write(workdir / "tiny.yaml", yaml.safe_dump(TINY))
    line = cli_line("report", str(file))
    with pytest.raises(msexp.MsexpError) as raised:
        msexp.load_sweep(file)
    assert str(raised.value) == line
    with pytest.raises(msexp.MsexpError, match="no study named 'tiny'"):
        msexp.load_sweep(TINY)
    with pytest.raises(msexp.MsexpError, match="no study named 'other'"):
        msexp.load_sweep(study="other")
    with pytest.raises(TypeError, match=r"needs a sweep file \(its path or dict\) or study=NAME"):
        msexp.load_sweep()  # a Python caller's words, not the CLI's "--study NAME"
    assert not (workdir / "mlruns").exists()


def test_msexp_gives_the_api_at_first_use_only() -> None:
    code = ("import sys, msexp; before = 'msexp.api' in sys.modules or 'optuna' in sys.modules;"
            " from msexp import api; print(before, msexp.sweep is api.sweep,"
            " msexp.load_sweep is api.load_sweep, msexp.SpecError is api.SpecError)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.split()
    assert out == ["False", "True", "True", "True"]  # mutation: an eager import fails
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        msexp.nothing  # noqa: B018


def test_no_public_signature_of_the_api_takes_or_gives_any() -> None:
    found, checked = [], 0
    for name in api.__all__:
        thing = getattr(api, name)
        members = [m for _, m in inspect.getmembers(thing, inspect.isfunction)] + [
            m.fget for _, m in inspect.getmembers(thing, lambda m: isinstance(m, property))] \
            if inspect.isclass(thing) and thing.__module__.startswith("msexp.api") else [thing]
        for member in filter(inspect.isfunction, members):
            checked += 1  # annotations are text here (`from __future__ import annotations`)
            found += [f"{name}.{member.__name__}" for hint in member.__annotations__.values()
                      if re.search(r"\bAny\b", str(hint))]
    assert found == [] and checked > 20
    assert "Any" not in str(api.Source) and "Any" not in str(api.trials.Value)


@pytest.mark.slow  # a cold mypy: 15 s
def test_the_api_passes_mypy_in_strict_mode() -> None:
    """CI checks the typed surface: `mypy --strict msexp/api` (the modules it calls are
    read for their types only: `tests/test_types.py` checks them, not strict)."""
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                           "msexp/api"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout


READ_BACK = """
import json, sys
import msexp
results = msexp.load_sweep(json.loads(sys.argv[1]))
results.trials_dataframe().to_pickle(sys.argv[2])
"""


@pytest.mark.slow
def test_a_dict_sweep_read_back_in_a_new_process_is_what_optuna_and_mlflow_hold(
        workdir: Path) -> None:
    import mlflow
    import optuna
    import pandas

    ran = msexp.sweep(TINY)
    frame = ran.trials_dataframe()
    done = subprocess.run([sys.executable, "-c", READ_BACK, json.dumps(TINY), "frame.pkl"],
                          capture_output=True, text=True, check=True, cwd=workdir)
    assert done.stdout == done.stderr == ""  # no library's lines
    pandas.testing.assert_frame_equal(pandas.read_pickle(workdir / "frame.pkl"), frame)

    study = optuna.load_study(study_name="tiny", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend("mlruns/optuna.journal")))
    theirs = study.trials_dataframe()
    assert list(frame["number"]) == list(theirs["number"]) == [0, 1]
    assert list(frame["micro_size"]) == list(theirs["params_micro_size"]) == [1, 2]
    assert list(frame["value"]) == list(theirs["value"])
    assert list(frame["status"]) == list(theirs["state"]) == ["COMPLETE", "COMPLETE"]

    mlflow.set_tracking_uri("sqlite:///mlruns/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["tiny"],
                              filter_string="tags.`msexp.role` = 'trial'").set_index("run_id")
    assert set(runs.index) == set(frame["run_id"])
    for row in frame.to_dict("records"):
        run = runs.loc[row["run_id"]]
        assert run["params.micro_size"] == str(row["micro_size"])
        assert run["params.seed"] == str(row["seed"])
        for metric in ("eval_accuracy", "train_loss", "train_loss_epoch", "train_mem_mb"):
            assert math.isclose(run[f"metrics.{metric}"], row[metric], rel_tol=1e-9), metric
        assert Path(row["folder"]).name == f"trial-{row['number']:04d}"
        assert Path(row["checkpoint"]).is_file()
    assert mlflow_client().get_experiment_by_name("tiny") is not None


SCORE = """
import json, sys
import mindspore as ms
import numpy as np
import msexp
results = msexp.load_sweep(json.loads(sys.argv[1]))
best = results.best_trial
model = results.load_model()
inputs, labels = model.eval
logits = model.network(ms.Tensor(np.asarray(inputs, np.float32))).asnumpy()
print(json.dumps([best.number, float((logits.argmax(axis=1) == np.asarray(labels)).mean())]))
"""


@pytest.mark.slow
def test_a_users_experiment_swept_from_a_dict_gives_its_best_network_in_a_new_process(
        workdir: Path) -> None:
    from matplotlib.figure import Figure

    assert CliRunner().invoke(app, ["new", "experiment", "mine"]).exit_code == 0
    swept = {"name": "mine", "experiment": "experiments/mine.py", "fixed": {"epochs": 1},
             "params": {"micro_size": [1, 2]}}
    results = msexp.sweep(swept, progress=False)
    best = results.best_trial
    assert best.values[0] == best.metrics["eval_accuracy"]
    assert [t.number for t in results.best_trials()] == [best.number]
    assert results.knob_effects().lines()[0].startswith("micro_size 1 -> 2: eval_accuracy")
    figures = results.figures()
    assert {"history", "effects_micro_size", "learning_curves"} <= set(figures)
    assert all(isinstance(f, Figure) for f in figures.values())
    done = subprocess.run([sys.executable, "-c", SCORE, json.dumps(swept)],
                          capture_output=True, text=True, check=True, cwd=workdir)
    assert done.stderr == ""  # nothing from MindSpore's build and load
    number, accuracy = json.loads(done.stdout)
    assert number == best.number
    # mutation: a network not loaded from its checkpoint scores 0.09 here
    assert math.isclose(accuracy, best.metrics["eval_accuracy"], abs_tol=1e-6)


def stop_when_started(folder: Path) -> threading.Thread:
    """A Ctrl-C to this process once `folder` (a trial's) exists: its trial is running."""
    def watch() -> None:
        deadline = time.monotonic() + 240
        while not folder.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_a_stopped_sweep_raises_keyboard_interrupt_and_the_next_call_resumes_it(
        workdir: Path) -> None:
    swept = {**TINY, "fixed": {"epochs": 3, "hidden": 8},
             "params": {"micro_size": [1, 2, 4]}}
    stop_when_started(workdir / "mlruns" / "trials" / "tiny" / "trial-0001")
    with pytest.raises(KeyboardInterrupt, match="run the same call again to resume"):
        msexp.sweep(swept, progress=False)  # mutation: returning instead fails here
    stopped = msexp.load_sweep(swept).trials_dataframe()
    assert list(stopped["status"]) == ["COMPLETE", "WAITING", "WAITING"]
    resumed = msexp.sweep(swept, progress=False).trials_dataframe()
    assert list(resumed["number"]) == [0, 1, 2]  # the same trials, none run twice
    assert list(resumed["status"]) == ["COMPLETE"] * 3
    assert resumed["run_id"][0] == stopped["run_id"][0]


def test_a_tune_result_gives_the_pick_and_each_candidates_fate_as_the_cli_says(
        tmp_path: Path) -> None:
    from msexp.cli.tune import summary
    from msexp.tune.candidates import Candidate
    from msexp.tune.measure import Profile
    from msexp.tune.outcome import Outcome
    from msexp.tune.phases import Verdict

    def verdict(micro: int, ratio: float) -> Verdict:
        profile = Profile(Candidate({"micro_size": micro}, {"micro_size": micro}),
                          ratios=[ratio], spreads=[0.01], metrics={"train_mem_mb": 8.0 / micro})
        return Verdict(profile, [0.9, 0.91], 1000.0, 8.0 / micro, ratio=ratio,
                       ratio_spread=0.01)

    base, pick = verdict(1, 1.0), verdict(2, 1.5)
    base.fits = False  # over the memory budget: the pick need not beat it
    dropped = Profile(Candidate({"micro_size": 4}, {"micro_size": 4}), dropped="TIMEOUT")
    outcome = Outcome([base.profile, pick.profile, dropped], [pick.profile], 0.01, 1, base,
                      [pick], pick, tmp_path / "p.png", tmp_path / "tuned.yaml")
    found = api.tuning.result_of(outcome)
    assert found.pick == {"micro_size": 2} and found.sweep_file == tmp_path / "tuned.yaml"
    frame = found.candidates()
    assert list(frame["micro_size"]) == [1, 2, 4]
    assert list(frame["fate"]) == [c["verdict"] for c in summary(outcome)["candidates"]]
    assert list(frame["fate"])[1:] == ["the pick", "dropped: TIMEOUT"]
    assert list(frame["memory_mb"])[:2] == [8.0, 4.0]


def test_library_logs_go_to_the_mlruns_of_the_working_directory_of_the_moment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import logging
    import shutil

    from msexp.api.quiet import route_library_logs

    route_library_logs()
    first, then = tmp_path / "first", tmp_path / "then"
    for folder in (first, then):
        folder.mkdir()
    monkeypatch.chdir(first)
    logging.getLogger("mlflow").warning("one")
    shutil.rmtree(first)  # a notebook's folder gone, or changed with os.chdir
    monkeypatch.chdir(then)
    logging.getLogger("mlflow").warning("two")  # mutation: a path fixed at the first raises
    assert (then / "mlruns" / "msexp.log").read_text().endswith("WARNING mlflow: two\n")


def test_load_model_says_in_one_line_why_it_cannot_build_the_model(workdir: Path) -> None:
    """issue 53 (branches): a notebook's `load_model` refusals: nothing completed yet, no
    checkpoint kept, a checkpoint of another machine, a study opened by name only."""
    import optuna

    from msexp.errors import MsexpError
    from msexp.search.storage import open_storage

    study = optuna.create_study(study_name="tiny", storage=open_storage(None),
                                direction="maximize")
    results = msexp.load_sweep(TINY)
    assert repr(results) == "<SweepResults tiny: no trials>"
    with pytest.raises(MsexpError, match="^no trial of study 'tiny' completed within its "
                                         "constraints yet$"):
        results.load_model()

    def trial(value: float, **attrs: object) -> optuna.trial.FrozenTrial:
        return optuna.trial.create_trial(
            params={"micro_size": 1}, value=value, user_attrs={"params": {}, **attrs},
            distributions={"micro_size": optuna.distributions.CategoricalDistribution([1, 2])})

    study.add_trial(trial(0.5))
    with pytest.raises(MsexpError) as refused:
        results.load_model()
    assert str(refused.value) == "trial 0 kept no checkpoint (checkpoint.keep none?)"
    elsewhere = "/home/someone/mlruns/trials/tiny/1/net-1_1.ckpt"  # swept on another machine
    study.add_trial(trial(0.9, checkpoint=elsewhere))
    with pytest.raises(MsexpError) as refused:
        results.load_model()
    assert str(refused.value) == (f"trial 1's checkpoint {elsewhere} is not on this machine; "
                                  "`msexp best FILE --export DIR` fetches the copy logged on "
                                  "its MLflow run")
    by_name = msexp.load_sweep(study="tiny")
    with pytest.raises(MsexpError) as refused:
        by_name.load_model(by_name.best_trial)
    assert str(refused.value) == ("study 'tiny' was opened by name: give the sweep (its file "
                                  "or dict) to load_sweep to build its model")
    assert repr(by_name) == "<SweepResults tiny: 2 complete>"


def test_a_sweeps_dict_is_named_without_validating_the_rest() -> None:
    """`load_sweep(dict)` finds its study by the dict's name even where the rest no longer
    loads (an experiment since removed). Mutation (issue 53): `sources.sweep_name` 1 (the
    dict loaded whole: refused)."""
    from msexp.api.sources import sweep_name

    assert sweep_name({"name": "mine", "params": {"lr": [0.1]}}) == "mine"


def test_library_loggers_write_to_the_log_only_mlflows_info_lines_included(
        workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A library's own stderr handler (set up before msexp's) is dropped: its lines go to
    mlruns/msexp.log, not into the notebook's cell; MLflow's INFO lines are kept there.
    (issue 53 fresh: quiet.route_library_logs 7, 15)"""
    import logging

    from msexp.api.quiet import route_library_logs

    optuna_logger, mlflow_logger = logging.getLogger("optuna"), logging.getLogger("mlflow")
    saved = optuna_logger.handlers, optuna_logger.propagate
    optuna_logger.handlers = [logging.StreamHandler(sys.stderr)]  # as Optuna sets its own up
    mlflow_logger.setLevel(logging.NOTSET)
    try:
        route_library_logs()
        mlflow_logger.info("mlflow says one")
        optuna_logger.warning("optuna says two")
    finally:
        optuna_logger.handlers, optuna_logger.propagate = saved
    assert "says" not in capsys.readouterr().err
    log = (workdir / "mlruns" / "msexp.log").read_text()
    assert "INFO mlflow: mlflow says one" in log and "WARNING optuna: optuna says two" in log


def test_a_constrained_sweep_from_python_tags_each_run_and_warns_on_stderr(
        workdir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A notebook's stdout keeps the results: the warning of more workers than cores goes
    to stderr, as the CLI's. Each trial's MLflow run says whether it kept the constraints,
    and the parent run gets the objective-against-cost picture.
    (issue 53 fresh: running.sweep 34; recorder.MlflowRecorder.on_trial_ending 31,
    _log_trade_off 7)"""
    from msexp.tracking.trade_off import KEY

    monkeypatch.setattr("os.cpu_count", lambda: 1)
    swept = {**COMMAND_SWEEP, "constraints": [{"metric": "train_loss", "max": 0.15}]}
    found = msexp.sweep(swept, workers=2, progress=False)
    assert list(found.trials_dataframe()["status"]) == ["COMPLETE", "COMPLETE"]
    out, err = capsys.readouterr()
    warning = ("warning: 2 workers on 1 CPU cores: trials compete for the cores and each gets "
               "one thread")
    assert warning in err.splitlines() and "warning" not in out
    client = mlflow_client()
    runs = client.search_runs([client.get_experiment_by_name("tiny-command").experiment_id])
    trials = {r.data.params["lr"]: r.data.tags.get("feasible") for r in runs
              if r.data.tags.get("msexp.role") == "trial"}
    assert trials == {"1.0": "true", "2.0": "false"}
    (parent,) = [r.info.run_id for r in runs if r.data.tags.get("msexp.role") != "trial"]
    images = [a.path for a in client.list_artifacts(parent, "images")]
    assert any(p.startswith(f"images/{KEY}+step+2+") for p in images), images


COMMAND_SWEEP = {
    "name": "tiny-command",
    "experiment": {"command": "python -c \"import sys; print('epoch: 1 step: 1, loss is', "
                              "0.1 * float(sys.argv[1].split('=')[1]))\""},
    "objective": {"metric": "train_loss", "direction": "minimize"},
    "params": {"lr": [1.0, 2.0]}}


def test_a_tune_results_spread_is_its_latest_probes(tmp_path: Path) -> None:
    """`candidates()`'s spread column: the latest probe's spread, none for a candidate
    never probed. (issue 53 fresh: tuning.TuneResult._row 7, 9)"""
    from msexp.tune.candidates import Candidate
    from msexp.tune.measure import Profile
    from msexp.tune.outcome import Outcome

    probed = Profile(Candidate({"micro_size": 1}, {"micro_size": 1}), ratios=[1.0, 1.0],
                     spreads=[0.05, 0.02])
    dropped = Profile(Candidate({"micro_size": 2}, {"micro_size": 2}), dropped="TIMEOUT")
    outcome = Outcome([probed, dropped], [probed], 0.02, 1, None, [], None)
    frame = api.tuning.result_of(outcome).candidates()
    assert frame["spread"][0] == 0.02 and frame["spread"].isna()[1]
