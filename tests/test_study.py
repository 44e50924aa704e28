"""Optuna at full strength: methods, pruning, parallel workers, resume, reports."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import optuna
import psutil
import pytest
from typer.testing import CliRunner

from msexp.cli import app
from msexp.execution.host import HostPool
from msexp.execution.process_tree import kill_marked
from msexp.execution.protocol import Start, read_events
from msexp.execution.subscribers import Subscriber
from msexp.search.claims import requeue_stale_trials
from msexp.search.optuna_private import pop_waiting
from msexp.search.storage import open_storage
from msexp.search.study import make_sampler, open_study
from msexp.search.sweep import run_sweep
from msexp.spec import load_spec
from tests.conftest import child_runs, mlflow_client, msexp_cmd, write
from tests.fault.conftest import DEADLINE_S, wait_for

pytestmark = pytest.mark.slow  # trials in worker processes (tests/README.md: tiers)

URI = "sqlite:///mlruns/mlflow.db"
JOURNAL = "mlruns/optuna.journal"


class Quiet(Subscriber):
    """A progress display that shows nothing."""


def load(name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=open_storage(None))




@pytest.mark.parametrize("method", ["random", "tpe", "cmaes", "nsga2"])
def test_each_sampler_runs_its_budget(method: str, workdir: Path) -> None:
    spec = load_spec(write(workdir / "s.yaml", f"""
        name: s-{method}
        experiment: broken:build
        method: {method}
        budget: {{trials: 3}}
        fixed: {{hidden: 16}}
        params:
          lr: {{low: 0.001, high: 0.2, log: true}}
          momentum: {{low: 0.5, high: 0.95}}
          batch_size: {{low: 32, high: 96, step: 32}}
    """))
    outcome = run_sweep(spec, [Quiet()])
    study = outcome.study
    # mutation (issue 18): make_sampler always returns RandomSampler
    expected = {"random": "RandomSampler", "tpe": "TPESampler", "cmaes": "CmaEsSampler",
                "nsga2": "NSGAIISampler"}[method]
    assert type(study.sampler).__name__ == expected
    assert type(make_sampler(spec, "other-host:1")).__name__ == expected, "joining workers too"
    assert len(study.trials) == 3
    assert all(t.state.name == "COMPLETE" for t in study.trials)
    for t in study.trials:
        assert 0.001 <= t.params["lr"] <= 0.2 and t.params["batch_size"] in (32, 64, 96)
    runs = child_runs(f"s-{method}")
    assert sorted(float(r.data.params["lr"]) for r in runs) == \
        sorted(t.params["lr"] for t in study.trials)


def test_a_pruned_trial_stops_itself_early(workdir: Path) -> None:
    spec = load_spec(write(workdir / "p.yaml", """
        name: prune
        experiment: broken:build
        method: grid
        fixed: {epochs: 40, hidden: 16, optimizer: sgd}
        params:
          lr: [0.1, 0.00001]
        pruner: {type: median, warmup_epochs: 0, startup_trials: 1}
    """))
    outcome = run_sweep(spec, [Quiet()])
    good, bad = outcome.results[0], outcome.results[1]
    assert good.status.value == "COMPLETE" and len(good.epochs) == 40
    assert bad.status.value == "PRUNED"
    assert len(bad.epochs) < len(good.epochs), "the pruned trial must stop early"
    assert bad.stop_s is not None
    events = read_events(bad.events_path)
    # mutation (issue 18): SIGUSR1 ignored, so only the force-kill ends the trial; a trial
    # that heard the stop ends itself with a "stopped" error and an end event
    assert [(type(e).__name__, getattr(e, "kind", "")) for e in events[-2:]] == \
        [("Error", "stopped"), ("End", "")]
    pid = next(e for e in events if isinstance(e, Start)).pid
    assert not psutil.pid_exists(pid)
    assert outcome.study.trials[1].state.name == "PRUNED"
    run = next(r for r in child_runs("prune") if r.data.params["lr"] == "1e-05")
    assert run.data.tags["status"] == "PRUNED" and run.info.status == "KILLED"
    assert "eval_accuracy" in run.data.metrics, "metrics so far are kept"


def test_two_workers_share_a_grid_without_duplicates(workdir: Path) -> None:
    sweep = write(workdir / "w.yaml", """
        name: shared
        experiment: broken:build
        fixed: {hidden: 16}
        params:
          lr: [0.01, 0.02, 0.03]
          micro_size: [1, 2]
    """)
    workers = [subprocess.Popen(msexp_cmd("worker", str(sweep)), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outputs = [w.communicate(timeout=300)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs
    # mutation (issue 18): the joining worker takes no trial; its start line
    # "shared: 0/6 trials done" no longer passes for a trial line
    ran = [len(re.findall(r"^trial \d+: COMPLETE", out, re.M)) for out in outputs]
    assert sum(ran) == 6 and min(ran) >= 1, f"both workers must run trials: {ran}"
    study = load("shared")
    owners = {int(t.user_attrs["owner"].rpartition(":")[2]) for t in study.trials}
    assert owners == {w.pid for w in workers}
    points = [(t.params["lr"], t.params["micro_size"]) for t in study.trials]
    assert len(points) == 6 and len(set(points)) == 6
    runs = child_runs("shared")
    assert sorted(r.data.tags["msexp.trial"] for r in runs) == [str(i) for i in range(6)]
    parent = study.user_attrs["mlflow_parent_run_id"]
    assert {r.data.tags["mlflow.parentRunId"] for r in runs} == {parent}


def test_two_workers_on_a_seeded_random_study_sample_distinct_points(workdir: Path) -> None:
    sweep = write(workdir / "r.yaml", """
        name: seeded
        experiment: mlp_digits
        method: random
        budget: {trials: 4}
        fixed: {epochs: 1, hidden: 8, seed: 3}
        params:
          lr: {low: 0.001, high: 0.1, log: true}
    """)
    workers = [subprocess.Popen(msexp_cmd("worker", str(sweep)), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outputs = [w.communicate(timeout=300)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs
    lrs = [t.params["lr"] for t in load("seeded").trials]
    assert len(lrs) == 4 and len(set(lrs)) == 4, lrs


def test_kill_9_then_resume_reruns_only_the_interrupted_trial(workdir: Path) -> None:
    gates = workdir / "gates"
    gates.mkdir()
    sweep = write(workdir / "k.yaml", f"""
        name: killed
        experiment: tests.fault.gated:build
        budget: {{retries: 1}}
        fixed: {{gate_dir: {gates}}}
        params:
          point: [0, 1, 2, 3]
    """)
    for point in (0, 1):
        (gates / f"go-{point}").touch()
    proc = subprocess.Popen(msexp_cmd("sweep", str(sweep)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)

    def trials() -> list:
        try:
            return load("killed").trials
        except (KeyError, OSError, ValueError):  # no journal or no study yet
            return []

    def third_running() -> bool:
        """Trial 2 is RUNNING and has its params (a claimed trial is RUNNING before its
        params are set); it waits for its gate for as long as the test needs."""
        now = trials()
        return ([t.state.name for t in now[:3]] == ["COMPLETE", "COMPLETE", "RUNNING"]
                and "point" in now[2].params)

    assert wait_for("the third trial starts", third_running, proc)
    running = load("killed").trials[2]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    for point in (2, 3):
        (gates / f"go-{point}").touch()
    completed_before = {t.number for t in load("killed").trials if t.state.name == "COMPLETE"}

    result = CliRunner().invoke(app, ["sweep", str(sweep)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    study = load("killed")
    again = study.trials[running.number]
    assert again.state.name == "COMPLETE", "the killed trial runs again under its own number"
    assert again.params == running.params and again.user_attrs["attempt"] == 1
    ran_again = [t for t in study.trials if t.number > running.number and
                 t.params in [study.trials[n].params for n in completed_before]]
    assert ran_again == [], "finished trials must not run again"
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 4
    assert len({json.dumps(t.params, sort_keys=True) for t in study.trials}) == 4
    assert len(child_runs("killed")) == 4


def test_multi_objective_report_shows_the_pareto_set(workdir: Path) -> None:
    sweep = write(workdir / "m.yaml", """
        name: multi
        experiment: broken:build
        method: nsga2
        objective:
          - {metric: eval_accuracy, direction: maximize}
          - {metric: wall_s, direction: minimize}
        budget: {trials: 3}
        fixed: {hidden: 16}
        params:
          hidden: [8, 64]
          lr: {low: 0.001, high: 0.1, log: true}
    """.replace("        fixed: {hidden: 16}\n", ""))
    assert CliRunner().invoke(app, ["sweep", str(sweep)]).exit_code == 0
    result = CliRunner().invoke(app, ["report", str(sweep)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Pareto set" in result.output
    assert Path("mlruns/reports/multi/pareto_front.png").exists()
    study = load("multi")
    client = mlflow_client()
    artifacts = {a.path for a in client.list_artifacts(study.user_attrs["mlflow_parent_run_id"],
                                                       "report")}
    assert "report/pareto_front.png" in artifacts


def test_report_logs_plots_and_best_metrics_and_optuna_tools_read_the_study(
        workdir: Path) -> None:
    sweep = write(workdir / "r.yaml", """
        name: rep
        experiment: broken:build
        fixed: {hidden: 16}
        params:
          lr: [0.005, 0.05]
    """)
    assert CliRunner().invoke(app, ["sweep", str(sweep)]).exit_code == 0
    result = CliRunner().invoke(app, ["report", "--study", "rep"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "best trial" in result.output and "importance: lr=1.00" in result.output
    study = load("rep")
    run = mlflow_client().get_run(study.user_attrs["mlflow_parent_run_id"])
    assert run.data.metrics["best_eval_accuracy"] == study.best_value
    assert run.data.tags["msexp.study"] == "rep"
    assert run.data.tags["msexp.storage"] == "mlruns/optuna.journal"
    out = subprocess.run([str(Path(sys.executable).parent / "optuna"), "trials", "--study-name",
                          "rep", "--storage", JOURNAL, "--storage-class", "JournalFileBackend",
                          "-f", "json"], capture_output=True, text=True, check=True).stdout
    trials = json.loads(out)
    assert sorted(t["params_lr"] if "params_lr" in t else t["params"]["lr"] for t in trials) \
        == [0.005, 0.05]
    status = CliRunner().invoke(app, ["status", str(sweep)])
    assert "rep: 2 finished of 2; COMPLETE 2" in status.output
    assert dashboard_trials(JOURNAL, "rep") == [(0, "Complete"), (1, "Complete")]


def dashboard_trials(storage: str, study: str) -> list[tuple[int, str]]:
    """(number, state) of a study's trials as optuna-dashboard serves them."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([str(Path(sys.executable).parent / "optuna-dashboard"), storage,
                               "--port", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + DEADLINE_S  # for a hang only
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies") as r:
                    summaries = json.load(r)["study_summaries"]
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None
                time.sleep(0.5)
        study_id = next(s["study_id"] for s in summaries if s["study_name"] == study)
        url = f"http://127.0.0.1:{port}/api/studies/{study_id}?after=0"
        with urllib.request.urlopen(url) as r:
            return [(t["number"], t["state"]) for t in json.load(r)["trials"]]
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def test_workers_split_the_cores_and_get_a_device_slot_each(workdir: Path) -> None:
    workers = HostPool(2).hosts
    try:
        assert [w.threads for w in workers] == [max(1, (os.cpu_count() or 1) // 2)] * 2
        environs = [psutil.Process(w._proc.pid).environ() for w in workers]
        assert [e["MSEXP_SLOT"] for e in environs] == ["0", "1"]
        assert {e["MSEXP_THREADS"] for e in environs} == {str(workers[0].threads)}
    finally:
        for w in workers:
            w.kill()


def test_a_worker_on_a_device_takes_the_device_of_its_slot(monkeypatch) -> None:
    """No GPU or Ascend here: MindSpore's device calls are recorded, not run.
    Mutation (issue 18): the `ms.set_device` line removed."""
    import mindspore as ms

    from msexp.execution.host import server

    chosen: list[tuple[str, int]] = []
    context = ms.get_context
    monkeypatch.setattr(ms, "get_context", lambda key: "GPU" if key == "device_target"
                        else context(key))
    monkeypatch.setattr(ms.device_context.gpu, "device_count", lambda: 2)
    monkeypatch.setattr(ms, "set_device", lambda target, index: chosen.append((target, index)))
    monkeypatch.setenv("MSEXP_SLOT", "3")
    monkeypatch.delenv("MSEXP_THREADS", raising=False)
    assert server._preload() is False, "device runtimes do not survive a fork"
    assert chosen == [("GPU", 1)]


@pytest.mark.parametrize("setting", [None, "false"])
def test_mlflow_telemetry_is_off_unless_asked_for(setting: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_DISABLE_TELEMETRY"}
    if setting:
        env["MLFLOW_DISABLE_TELEMETRY"] = setting
    shown = subprocess.run([sys.executable, "-c", "import os, msexp; "
                            "print(os.environ['MLFLOW_DISABLE_TELEMETRY'])"],
                           env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert shown == (setting or "true")


def test_a_trial_that_raises_fails_and_the_sweep_goes_on(workdir: Path) -> None:
    spec = load_spec(write(workdir / "inf.yaml", """
        name: raises
        experiment: mlp_digits
        method: random
        budget: {trials: 2}
        params:
          lr: {low: 0.001, high: 0.1}
    """))
    spec.space.params[0] = dataclasses.replace(spec.space.params[0], high=math.inf)
    outcome = run_sweep(spec, [Quiet()])
    trials = outcome.study.trials
    assert [t.state.name for t in trials] == ["FAIL", "FAIL"]
    assert all(t.user_attrs["error"].startswith("OverflowError") for t in trials)
    runs = child_runs("raises")
    assert sorted(r.data.tags["msexp.trial"] for r in runs) == ["0", "1"]
    assert {r.info.status for r in runs} == {"FAILED"}


def test_a_trial_folder_that_cannot_be_made_fails_each_trial(workdir: Path) -> None:
    sweep = write(workdir / "folder.yaml", """
        name: nofolder
        experiment: mlp_digits
        params: {micro_size: [1, 2]}
    """)
    write(workdir / "mlruns/trials/nofolder", "a file where the trial folders go\n")
    result = CliRunner().invoke(app, ["sweep", str(sweep)], env={"COLUMNS": "200"})
    assert result.exit_code == 1, "every trial failed"
    assert "every trial failed" in result.output
    assert "Traceback" not in result.output
    trials = load("nofolder").trials
    assert [t.state.name for t in trials] == ["FAIL", "FAIL"]
    assert all("Error" in t.user_attrs["error"] for t in trials)


def test_an_error_outside_any_trial_stops_the_sweep_and_leaves_nothing_running(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sweep = write(workdir / "outside.yaml", """
        name: outside
        experiment: mlp_digits
        method: random
        budget: {trials: 2}
        params:
          lr: {low: 0.001, high: 0.1}
    """)

    def broken_owner() -> str:
        raise OSError("the host name is gone")

    monkeypatch.setattr("msexp.search.source.owner", broken_owner)
    result = CliRunner().invoke(app, ["sweep", str(sweep)], env={"COLUMNS": "300"})
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if "stopped" in line]
    assert lines == ["sweep outside stopped: OSError: the host name is gone (finished trials "
                     "are kept; run the same command to resume)"], result.output
    study = load("outside")
    assert "RUNNING" not in [t.state.name for t in study.trials]
    parent = mlflow_client().get_run(study.user_attrs["mlflow_parent_run_id"])
    assert parent.info.status == "FAILED"


def test_a_sweep_whose_trials_miss_the_objective_says_so_at_the_end(workdir: Path) -> None:
    sweep = write(workdir / "missing.yaml", """
        name: missing
        experiment: mlp_digits
        method: random
        objective:
          - {metric: eval_accuracy, target: 0.9999}
          - {metric: epochs_to_target, direction: minimize}
        budget: {trials: 1}
        fixed: {epochs: 1, hidden: 8}
        params:
          lr: {low: 0.001, high: 0.01}
    """)
    result = CliRunner().invoke(app, ["sweep", str(sweep)], env={"COLUMNS": "300"})
    assert result.exit_code == 3, result.output  # fail fast: a trial without its objective
    (trial,) = load("missing").trials
    assert trial.user_attrs["missing_objectives"] == ["epochs_to_target"]
    # FAILED everywhere it shows: Optuna, its status, the trial line, MLflow, the parent
    assert trial.state.name == "FAIL" and trial.user_attrs["status"] == "FAILED"
    error = trial.user_attrs["error"]  # and what the trial reported instead
    assert error.startswith("objective not available: epochs_to_target (it reported ")
    assert "eval_accuracy" in error and "wall_s" not in error
    assert f"trial 0: FAILED {error}" in result.output, result.output
    (run,) = child_runs("missing")
    assert run.info.status == "FAILED" and run.data.tags["status"] == "FAILED"
    parent = mlflow_client().get_run(run.data.tags["mlflow.parentRunId"])
    assert parent.info.status == "FAILED", "every trial failed: no green check"
    line = ("objective not reported by trials that ran to the end: epochs_to_target (missing "
            "in 1 trial); Optuna failed those trials, so none of them can be best")
    assert line in result.output.splitlines(), result.output
    status = CliRunner().invoke(app, ["status", str(sweep)], env={"COLUMNS": "300"})
    assert line in status.output.splitlines(), status.output


def test_more_workers_than_trials_start_only_as_many_as_trials(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sweep = write(workdir / "few.yaml", """
        name: few
        experiment: mlp_digits
        fixed: {epochs: 1, hidden: 8}
        params: {micro_size: [1, 2]}
    """)
    started: list[int] = []

    class Counted(HostPool):
        def __init__(self, count: int, *args, **kwargs):
            started.append(count)
            super().__init__(count, *args, **kwargs)

    monkeypatch.setattr("msexp.search.slots.HostPool", Counted)
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    result = CliRunner().invoke(app, ["sweep", str(sweep), "--workers", "8"],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert started == [2]
    assert ("warning: 2 workers on 1 CPU cores: trials compete for the cores and each gets "
            "one thread") in result.output.splitlines()
    assert [t.state.name for t in load("few").trials] == ["COMPLETE", "COMPLETE"]


def test_a_resumed_sweep_stops_the_workers_it_has_no_trials_for(workdir: Path) -> None:
    spec = load_spec(write(workdir / "rest.yaml", """
        name: rest
        experiment: mlp_digits
        fixed: {epochs: 1, hidden: 8}
        params: {micro_size: [1, 2]}
    """))
    study, _ = open_study(spec, None)
    study.tell(pop_waiting(study), [0.5])
    pool = HostPool(2)
    processes = pool.hosts
    events: list[str] = []

    def spy(process: Any, name: str, label: str) -> None:
        method = getattr(process, name)

        def recorded(*args: Any) -> Any:
            events.append(label)
            return method(*args)

        setattr(process, name, recorded)

    for i, process in enumerate(processes):
        spy(process, "run", f"run {i}")
        spy(process, "kill", f"kill {i}")
    run_sweep(spec, [Quiet()], pool)
    assert events.index("kill 1") < events.index("run 0"), events
    assert "run 1" not in events


def test_a_target_records_epochs_and_time_to_reach_it(workdir: Path) -> None:
    spec = load_spec(write(workdir / "t.yaml", """
        name: target
        experiment: broken:build
        objective: {metric: eval_accuracy, target: 0.3}
        fixed: {epochs: 3, hidden: 32, lr: 0.05}
        params: {seed: [0]}
    """))
    result = run_sweep(spec, [Quiet()]).results[0]
    reached = next(e for e in result.epochs if e.metrics["eval_accuracy"] >= 0.3)
    assert result.metrics["epochs_to_target"] == reached.epoch
    assert result.metrics["time_to_target_s"] == pytest.approx(reached.elapsed_s)


@pytest.mark.parametrize(("kind", "name"), [("percentile", "PercentilePruner"),
                                            ("hyperband", "HyperbandPruner"),
                                            ("median", "MedianPruner")])
def test_each_pruner_is_the_one_asked_for(workdir: Path, kind: str, name: str) -> None:
    spec = load_spec(write(workdir / "p.yaml", f"""
        name: pruner-{kind}
        experiment: mlp_digits
        fixed: {{epochs: 9}}
        params: {{lr: [0.1, 0.01]}}
        pruner: {{type: {kind}, warmup_epochs: 2, percentile: 40, reduction_factor: 3}}
    """))
    study, _ = open_study(spec, None)
    pruner = study.pruner
    assert type(pruner).__name__ == name
    if kind == "percentile":
        assert pruner._percentile == 40 and pruner._n_warmup_steps == 2
    if kind == "hyperband":
        assert pruner._min_resource == 2 and pruner._max_resource == 9
        assert pruner._reduction_factor == 3


def test_a_changed_sweep_file_does_not_resume_the_old_study(workdir: Path) -> None:
    sweep = write(workdir / "c.yaml", "name: changed\nexperiment: mlp_digits\n"
                                      "params: {lr: [0.1, 0.2]}\n")
    open_study(load_spec(sweep), None)
    sweep.write_text("name: changed\nexperiment: mlp_digits\nparams: {lr: [0.3]}\n")
    result = CliRunner().invoke(app, ["sweep", str(sweep)], env={"COLUMNS": "300"})
    assert result.exit_code == 2  # refused before any trial
    assert result.output.strip().splitlines() == [
        f"{sweep}: study 'changed' in mlruns/optuna.journal was created from a different "
        f"sweep file; to start its next version: msexp sweep {sweep} --restart (or pass "
        "--study NEW_NAME)"]


def stale_trial(workdir: Path, name: str, owner: str, heartbeat: float,
                retries: int = 1) -> optuna.Study:
    spec = load_spec(write(workdir / f"{name}.yaml", f"""
        name: {name}
        experiment: mlp_digits
        budget: {{retries: {retries}}}
        params: {{lr: [0.1]}}
    """))
    study, _ = open_study(spec, None)
    trial = pop_waiting(study)
    trial.set_user_attr("owner", owner)
    trial.set_user_attr("heartbeat", heartbeat)
    return study


def test_a_stale_trial_of_another_host_is_queued_again_only_when_silent(
        workdir: Path) -> None:
    alive = stale_trial(workdir, "fresh", "other-host:1", time.time())
    assert requeue_stale_trials(alive, kill_marked) == []
    assert alive.trials[0].state.name == "RUNNING"
    silent = stale_trial(workdir, "silent", "other-host:1", time.time() - 3600)
    assert requeue_stale_trials(silent, kill_marked) == [0]
    (trial,) = silent.trials
    assert trial.state.name == "WAITING" and trial.user_attrs["attempt"] == 1


def test_a_trial_out_of_retries_fails(workdir: Path) -> None:
    study = stale_trial(workdir, "spent", "other-host:1", time.time() - 3600, retries=0)
    assert requeue_stale_trials(study, kill_marked) == [0]
    (trial,) = study.trials
    assert trial.state.name == "FAIL"
    assert trial.user_attrs["error"] == (
        "orchestrator other-host:1 went silent (no heartbeat for 60 s) with only this trial "
        "running, 1 time in a row: it may take its orchestrator down; out of retries "
        "(budget.retries 0)")


def test_one_sweep_with_two_workers_runs_every_point_once(workdir: Path) -> None:
    sweep = write(workdir / "two.yaml", """
        name: two
        experiment: broken:build
        fixed: {hidden: 16}
        params: {lr: [0.01, 0.02, 0.03, 0.04]}
    """)
    result = CliRunner().invoke(app, ["sweep", str(sweep), "--workers", "2"],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    study = load("two")
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 4
    assert sorted(t.params["lr"] for t in study.trials) == [0.01, 0.02, 0.03, 0.04]
    starts = [next(e for e in read_events(Path(
        f"mlruns/trials/two/trial-{t.number:04d}/events.jsonl")) if isinstance(e, Start))
        for t in study.trials]
    pids, warm = {s.pid for s in starts}, sum(s.warm for s in starts)
    # one forked trial process per worker, kept warm: its later trials reuse its graphs
    assert len(pids) <= 2 and warm == 4 - len(pids), (pids, warm)
    spans = sorted((t.datetime_start, t.datetime_complete) for t in study.trials)
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:])), \
        "two trials ran at once"
    assert len(child_runs("two")) == 4


def test_msexp_run_trains_one_trial_in_the_foreground(workdir: Path) -> None:
    result = CliRunner().invoke(app, ["run", "mlp_digits", "--set", "epochs=2",
                                      "--set", "hidden=8"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "epoch 1: " in result.output and "epoch 2: " in result.output
    assert "eval_accuracy=" in result.output.split("epoch 2: ")[1]
    assert not Path("mlruns").exists(), "nothing is recorded"


def test_trials_run_in_the_worker_itself_without_fork(workdir: Path, monkeypatch) -> None:
    """The GPU and Ascend path: no fork, each trial in the worker process."""
    from msexp.execution.host import Host
    from msexp.execution.protocol import TrialRequest
    from msexp.spec import trial_params
    from tests.conftest import ROOT

    monkeypatch.setenv("MSEXP_FORK", "0")
    runner = Host(cwd=ROOT)
    try:
        params = trial_params("mlp_digits", {"epochs": 1, "hidden": 8})
        results = [runner.run(TrialRequest("mlp_digits", params, workdir / f"t{i}"), 300)
                   for i in range(2)]
        worker = runner._proc.pid
    finally:
        runner.kill()
    assert [r.status.value for r in results] == ["COMPLETE", "COMPLETE"]
    pids = [next(e for e in read_events(r.events_path) if isinstance(e, Start)).pid
            for r in results]
    assert pids == [worker, worker]
