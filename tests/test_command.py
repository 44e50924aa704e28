"""Sweep the script you have: command experiments, run unchanged, read from their output."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from msexp.cli import app
from msexp.execution.arguments import arguments
from msexp.execution.command import CommandFailed, MetricReader
from msexp.execution.host import Host
from msexp.execution.protocol import Command, Start, TrialRequest
from msexp.execution.result import Status
from msexp.search.storage import open_storage
from msexp.training.records import Stopped
from tests.conftest import ASSETS, ROOT, child_runs, mlflow_client, with_callback, write

SCRIPTS = ASSETS / "scripts"


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


@pytest.fixture
def scripts(workdir: Path) -> Path:
    folder = workdir / "project"
    shutil.copytree(SCRIPTS, folder)
    return folder




def test_metrics_are_read_from_every_common_form_of_output() -> None:
    reader = MetricReader([r"'Accuracy': (?P<eval_accuracy>[0-9.]+)"])
    assert reader.feed("epoch: 1 step: 20, loss is 0.6931") == {"train_loss": 0.6931}
    assert reader.feed("Train epoch time: 812.250 ms, per step time: 18.460 ms") == {
        "step_ms": 18.46}
    assert reader.feed("{'Accuracy': 0.9375}") == {"Accuracy": 0.9375, "eval_accuracy": 0.9375}
    assert reader.feed('{"eval_loss": 0.25, "note": "x"}') == {"eval_loss": 0.25}
    assert reader.feed("val_acc: 0.5") == {"val_acc": 0.5}
    assert reader.feed("step=10 loss=2.5e-1, acc=.75") == {"loss": 0.25, "acc": 0.75}
    assert reader.feed("epoch: 2 step: 5 loss is  0.5") == {"train_loss": 0.5}  # seed 001
    assert reader.feed("version 2.10.0 at 10:30") == {}
    assert reader.last["train_loss"] == 0.5 and reader.last["eval_accuracy"] == 0.9375


def test_params_become_flags_or_hydra_overrides() -> None:
    params = {"lr": 0.1, "thor.frequency": 10, "amp": True, "split": [0, 2]}
    # `True`: what the model zoo's `type=ast.literal_eval` flags take (issue 24, item 3)
    assert arguments(params, "flags") == ["--lr=0.1", "--thor.frequency=10", "--amp=True",
                                          "--split=[0, 2]"]
    assert arguments(params, "hydra") == ["lr=0.1", "thor.frequency=10", "amp=true",
                                          "split=[0, 2]"]
    assert arguments(params, "none") == []


def test_a_boolean_switch_is_the_flag_alone_or_nothing() -> None:
    params = {"amp": True, "eval": False, "run_eval": False}
    assert arguments(params, "flags", switches=["amp", "eval"]) == ["--amp",
                                                                     "--run_eval=False"]


@pytest.mark.slow
def test_an_unchanged_model_train_script_sweeps_into_mlflow(scripts: Path) -> None:
    sweep = write(scripts / "lr.yaml", """
        name: script-lr
        experiment:
          command: python train_digits.py
          metrics: "'Accuracy': (?P<eval_accuracy>[0-9.]+)"
        fixed: {epochs: 1}
        params:
          lr: [0.05, 0.0001]
    """)
    result = invoke("sweep", str(sweep))
    assert result.exit_code == 0, result.output
    runs = sorted(child_runs("script-lr"), key=lambda r: float(r.data.params["lr"]))
    assert [r.data.tags["status"] for r in runs] == ["COMPLETE", "COMPLETE"]
    assert [r.data.params["lr"] for r in runs] == ["0.0001", "0.05"]
    assert all(r.data.params["epochs"] == "1" for r in runs)
    assert "batch_size" not in runs[0].data.params, "the script keeps its own defaults"
    good, poor = runs[1].data.metrics, runs[0].data.metrics
    assert good["eval_accuracy"] > 0.5 and good["eval_accuracy"] > poor["eval_accuracy"]
    log = Path(mlflow_client().download_artifacts(runs[1].info.run_id, "trial.log")).read_text()
    losses = re.findall(r"loss is ([0-9.]+)", log)  # LossMonitor
    steps = re.findall(r"per step time: ([0-9.]+) ms", log)  # TimeMonitor
    assert losses and steps, log[-2000:]
    assert good["train_loss"] == float(losses[-1]) and good["step_ms"] == float(steps[-1])


@pytest.mark.slow
def test_a_pruned_script_with_the_callback_stops(scripts: Path) -> None:
    with_callback(scripts / "train_digits.py", scripts / "train_cb.py",
                  "LossMonitor(20), TimeMonitor(), MsexpCallback(model, eval_ds)")
    sweep = write(scripts / "prune.yaml", """
        name: script-prune
        experiment: {command: python train_cb.py}
        objective: {metric: eval_accuracy, direction: maximize}
        fixed: {epochs: 10}
        params:
          lr: [0.05, 0.00001]
        pruner: {type: median, warmup_epochs: 0, startup_trials: 1}
    """)
    result = invoke("sweep", str(sweep))
    assert result.exit_code == 0, result.output
    study = __import__("optuna").load_study(study_name="script-prune",
                                            storage=open_storage(None))
    states = [t.state.name for t in study.trials]
    assert states == ["COMPLETE", "PRUNED"]
    pruned = study.trials[1]
    assert max(pruned.intermediate_values) < 4, "the pruned trial stopped early"
    runs = {r.data.params["lr"]: r for r in child_runs("script-prune")}
    assert runs["1e-05"].data.tags["status"] == "PRUNED"
    assert runs["0.05"].data.metrics["eval_accuracy"] > 0.8
    history = mlflow_client().get_metric_history(runs["0.05"].info.run_id, "eval_accuracy")
    assert len(history) == 10, "every epoch is logged"


@pytest.mark.slow
def test_a_hydra_style_script_gets_overrides(scripts: Path) -> None:
    sweep = write(scripts / "hydra.yaml", """
        name: hydra
        experiment: {command: python train_hydra.py, args: hydra}
        objective: {metric: score}
        fixed: {epochs: 1}
        params:
          lr: [0.1, 0.3]
          optim.momentum: [0.5, 0.9]
    """)
    result = invoke("sweep", str(sweep))
    assert result.exit_code == 0, result.output
    runs = child_runs("hydra")
    scores = {(r.data.params["lr"], r.data.params["optim.momentum"]): r.data.metrics["score"]
              for r in runs}
    assert scores == {("0.1", "0.5"): pytest.approx(0.4), ("0.1", "0.9"): pytest.approx(0.8),
                      ("0.3", "0.5"): pytest.approx(0.6), ("0.3", "0.9"): pytest.approx(1.0)}
    # what Optuna keeps of each trial: the resume, the report and `msexp best` read it
    run_ids = {r.data.tags["msexp.trial"]: r.info.run_id for r in runs}
    study = __import__("optuna").load_study(study_name="hydra", storage=open_storage(None))
    client = mlflow_client()
    parent = client.get_run(runs[0].data.tags["mlflow.parentRunId"])
    assert study.user_attrs["mlflow_parent_run_id"] == parent.info.run_id
    assert parent.info.status == "FINISHED" and parent.data.tags["msexp.role"] == "sweep"
    assert {k: parent.data.tags[k] for k in ("msexp.sweep", "msexp.method", "msexp.experiment",
                                             "msexp.storage")} == {
        "msexp.sweep": "hydra", "msexp.method": "grid",
        "msexp.experiment": "python train_hydra.py", "msexp.storage": "mlruns/optuna.journal"}
    assert parent.data.params == {"epochs": "1", "lr": "0.1, 0.3", "optim.momentum": "0.5, 0.9"}
    assert parent.data.tags["best_trial"] == "3" and parent.data.metrics["best_score"] == 1.0
    for trial in study.trials:
        attrs = trial.user_attrs
        assert trial.state.name == "COMPLETE" and attrs["status"] == "COMPLETE"
        assert trial.value == pytest.approx(1.0 - abs(trial.params["lr"] - 0.3)
                                            - abs(trial.params["optim.momentum"] - 0.9))
        assert attrs["metrics"]["score"] == trial.value and attrs["metrics"]["wall_s"] > 0
        assert attrs["mlflow_run_id"] == run_ids[str(trial.number)]
        assert attrs["params"] == {"lr": trial.params["lr"], "epochs": 1,
                                   "optim.momentum": trial.params["optim.momentum"]}
        assert "error" not in attrs and attrs["epoch_metrics"] == {"epoch": []}, "no hooks"


@pytest.mark.slow
def test_failing_commands_are_recorded_and_the_sweep_goes_on(scripts: Path) -> None:
    sweep = write(scripts / "bad.yaml", """
        name: bad-flag
        experiment: {command: python train_digits.py}
        objective: {metric: Accuracy}
        fixed: {epochs: 1}
        params:
          lr: [fast]
    """)
    result = invoke("sweep", str(sweep))
    assert result.exit_code == 1, result.output  # its only trial failed
    (run,) = child_runs("bad-flag")
    assert run.data.tags["status"] == "FAILED"
    assert run.data.tags["error"].startswith("the command exited with code 2: ")
    assert run.data.tags["error"].endswith("argument --lr: invalid float value: 'fast'")
    log = Path(mlflow_client().download_artifacts(run.info.run_id, "trial.log")).read_text()
    assert "argument --lr: invalid float value: 'fast'" in log
    (trial,) = __import__("optuna").load_study(study_name="bad-flag",
                                               storage=open_storage(None)).trials
    assert trial.state.name == "FAIL" and trial.user_attrs["status"] == "FAILED"
    assert trial.user_attrs["error"] == run.data.tags["error"]

    quiet = write(scripts / "quiet.yaml", """
        name: quiet
        experiment: {command: python quiet.py, args: none}
        params: {lr: [0.1]}
    """)
    assert invoke("sweep", str(quiet)).exit_code == 1
    (run,) = child_runs("quiet")
    assert run.data.tags["status"] == "FAILED"
    assert run.data.tags["error"].startswith("RuntimeError: the command reported no metric")


def test_a_command_that_cannot_start_fails_its_trial(tmp_path: Path) -> None:
    runner = Host(cwd=ROOT)
    command = Command(["no-such-program-xyz"], str(tmp_path))
    try:
        result = runner.run(TrialRequest("no-such-program-xyz", {"lr": 0.1}, tmp_path / "t",
                                         command=command), timeout=60)
    finally:
        runner.kill()
    assert result.status is Status.FAILED
    assert "FileNotFoundError" in result.error and "no-such-program-xyz" in result.error


@pytest.mark.parametrize(("command", "rule"), [
    ("no-such-program-xyz train.py", "no-such-program-xyz is not on PATH"),
    ("python missing.py", "missing.py not found in"),
    ("python 'unclosed", "cannot be split (No closing quotation)"),
])
def test_validate_refuses_a_command_that_cannot_run(scripts: Path, command: str,
                                                    rule: str) -> None:
    sweep = write(scripts / "v.yaml", f"name: v\nexperiment: {{command: \"{command}\"}}\n")
    result = invoke("validate", str(sweep))
    assert result.exit_code == 2, result.output
    assert f"v.yaml: experiment.command: {rule}" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_plan_check_runs_the_command_once(scripts: Path) -> None:
    good = write(scripts / "good.yaml", """
        name: good
        experiment: {command: python train_digits.py}
        params: {lr: [0.1, 0.01]}
    """)
    result = invoke("plan", str(good), "--check")
    assert result.exit_code == 0, result.output
    assert "--help" in result.output and "ok" in result.output
    (scripts / "broken.py").write_text("import no_such_module_xyz\n")
    broken = write(scripts / "broken.yaml", """
        name: broken
        experiment: {command: python broken.py}
        params: {lr: [0.1]}
    """)
    refused = invoke("validate", str(broken), "--check")
    assert refused.exit_code == 2
    assert "broken.yaml: experiment.command: it exited with code 1 with --help: " \
           "ModuleNotFoundError: No module named 'no_such_module_xyz'" in refused.output


@pytest.mark.slow
def test_devices_run_the_script_as_msrun_ranks(scripts: Path) -> None:
    sweep = write(scripts / "dp.yaml", """
        name: dp-script
        experiment: {command: python ranks.py}
        objective: {metric: world}
        fixed: {devices: 2}
        params: {lr: [0.1]}
    """)
    result = invoke("sweep", str(sweep))
    assert result.exit_code == 0, result.output
    (run,) = child_runs("dp-script")
    assert run.data.tags["status"] == "COMPLETE", run.data.tags.get("error")
    assert run.data.metrics["world"] == 2 and run.data.metrics["rank"] == 0
    assert run.data.metrics["args"] == 1, "devices is msexp's, only lr reaches the script"
    leaks = write(scripts / "dpleak.yaml", """
        name: dp-leak
        experiment: {command: python leaks.py}
        objective: {metric: world}
        fixed: {devices: 2, api_token: S3CRET-token}
        params: {lr: [0.1]}
    """)
    write(scripts / "leaks.py", 'import sys\nprint("got", *sys.argv[1:])\nprint("world: 2")\n')
    assert invoke("sweep", str(leaks)).exit_code == 0
    (run,) = child_runs("dp-leak")
    assert run.data.tags["status"] == "COMPLETE", run.data.tags.get("error")
    folder = Path("mlruns/trials/dp-leak/trial-0000")
    rank = (folder / "ranks" / "worker_1.log").read_text()
    assert "--api_token=***" in rank and "--lr=0.1" in rank, rank
    assert not [p for p in Path("mlruns").rglob("*") if p.is_file() and
                b"S3CRET" in p.read_bytes()], "no file under mlruns/ holds the secret"
    bad = write(scripts / "dpbad.yaml", """
        name: dp-bad
        experiment: {command: ./run.sh}
        fixed: {devices: 2}
    """)
    (scripts / "run.sh").write_text("#!/bin/sh\n")
    refused = invoke("validate", str(bad))
    assert refused.exit_code == 2
    assert "devices > 1 runs the command as msrun ranks" in refused.output


@pytest.mark.slow
def test_the_scaffolded_script_sweeps_as_written(workdir: Path) -> None:
    """`msexp new experiment --script`: prints metrics, reports epochs, uses the techniques."""
    wrote = invoke("new", "experiment", "lenet", "--script")
    assert wrote.exit_code == 0, wrote.output
    assert (workdir / "experiments" / "lenet.py").is_file()
    checked = invoke("plan", "sweeps/lenet.yaml", "--check")
    assert checked.exit_code == 0, checked.output
    result = invoke("sweep", "sweeps/lenet.yaml")
    assert result.exit_code == 0, result.output
    runs = child_runs("lenet")
    assert len(runs) == 4
    statuses = sorted(r.data.tags["status"] for r in runs)
    assert statuses.count("COMPLETE") >= 3 and set(statuses) <= {"COMPLETE", "PRUNED"}, statuses
    best = max(r.data.metrics.get("eval_accuracy", 0) for r in runs)
    assert best > 0.8
    accumulated = [r for r in runs if r.data.params["micro_size"] == "4"
                   and r.data.tags["status"] == "COMPLETE"]
    assert accumulated and accumulated[0].data.metrics["eval_accuracy"] > 0.5
    updates = 1400 // 32  # per epoch, whatever micro_size is
    for run in runs:  # each epoch MsexpCallback reported is logged at its update count
        epochs = sorted(m.step for m in mlflow_client().get_metric_history(run.info.run_id,
                                                                            "step_ms"))
        ends = [updates, 2 * updates, 3 * updates]
        if run.data.tags["status"] == "COMPLETE":
            assert epochs == ends
        else:  # a pruned trial reports the epoch its stop cut short, at its last update
            assert epochs[:-1] == ends[:len(epochs) - 1] and epochs[-1] <= ends[len(epochs) - 1]
        losses = mlflow_client().get_metric_history(run.info.run_id, "train_loss")
        assert {m.step for m in losses} == set(range(1, epochs[-1] + 1)), "one per update"


def test_the_last_output_line_and_only_numeric_groups_are_kept() -> None:
    reader = MetricReader([r"mode=(?P<mode>\w+)"])
    assert reader.last_line == ""
    assert reader.feed("mode=fast x") == {} and reader.last_line == "mode=fast x"
    assert reader.feed("   \n") == {} and reader.last_line == "mode=fast x"
    assert reader.feed("mode=3") == {"mode": 3.0}


# What a script waiting for msexp's stop runs: the stop is sent as soon as the epoch that
# makes it due reaches msexp (run_script writes STOP_DUE then), so a stop that has not
# arrived 10 s later is lost; the script ends its wait and the test fails in seconds, not
# at a deadline sized for a loaded machine (which stays, for an epoch that never arrives).
STOP_DUE = "stop-due"
AWAIT_STOP = """
def await_stop(due_file, grace_s=10, deadline_s=240):
    import time
    from msexp.hooks import should_stop
    give_up = time.monotonic() + deadline_s
    while not should_stop():
        if due_file.exists() and give_up > time.monotonic() + grace_s:
            give_up = time.monotonic() + grace_s
        if time.monotonic() > give_up:
            return False
        time.sleep(0.01)
    return True
"""

# run_command in-process: a trial of a script, as the trial process runs it
SCRIPT = AWAIT_STOP + r"""
import json, os, sys, time
from pathlib import Path
params = json.loads(Path(os.environ["MSEXP_TRIAL"]).read_text())
out = Path(os.environ["MSEXP_OUTPUT_DIR"])
seen = {"args": sys.argv[1:], "resume": os.environ.get("MSEXP_RESUME")}
(out.parent / "seen.json").write_text(json.dumps(seen))
mode = params.get("mode")
if mode == "fail":
    print("something broke")
    sys.exit(3)
if mode == "quiet":
    sys.exit(0)
from msexp.hooks import report, should_stop
for epoch in (1, 2):
    report(epoch, eval_accuracy=0.25 * (epoch + 1))
    checkpoint = out / f"e{epoch}.ckpt"
    checkpoint.write_text(str(epoch))
    os.utime(checkpoint, (1e9 + epoch, 1e9 + epoch))  # written in this order
if mode == "wait":
    (out.parent / "told.json").write_text(json.dumps(await_stop(out.parent / "stop-due")))
print("score: 0.9")
"""


def run_script(folder: Path, stop_after: int | None = None,
               command: Command | None = None, **params):
    """(metrics or the exception, checkpoint, events) of `command` (SCRIPT by default); with
    `stop_after`, msexp asks the script to stop once it has reported that many epochs
    (STOP_DUE is written as that epoch reaches msexp)."""
    from msexp.execution.command import run_command

    command = command or Command([sys.executable, "-c", SCRIPT], str(folder))
    request = TrialRequest("script", params, folder, command=command)
    events: list = []

    def emit(event) -> None:
        events.append(event)
        if stop_after is not None and len(events) == stop_after + 1:  # the start, the epochs
            (folder / STOP_DUE).touch()

    def stop() -> bool:
        return stop_after is not None and len(events) > stop_after

    try:
        metrics, checkpoint = run_command(request, emit, stop)
    except Exception as exc:
        return exc, None, events
    return metrics, checkpoint, events


def seen(folder: Path) -> dict:
    return json.loads((folder / "seen.json").read_text())


@pytest.mark.slow  # over 3 s: the fast tier stays under 5 min
def test_a_command_trial_reads_metrics_and_epochs_and_keeps_the_newest_checkpoint(
        workdir: Path) -> None:
    metrics, checkpoint, events = run_script(workdir / "t", lr=0.1, devices=1)
    assert metrics == {"score": 0.9, "eval_accuracy": 0.75}
    assert checkpoint == workdir / "t" / "outputs" / "e2.ckpt"
    start, *epochs = events
    assert isinstance(start, Start) and start.data_source == f"{sys.executable} -c {SCRIPT}"
    assert [(e.epoch, e.metrics) for e in epochs] == [(1, {"eval_accuracy": 0.5}),
                                                      (2, {"eval_accuracy": 0.75})]
    assert seen(workdir / "t") == {"args": ["--lr=0.1"], "resume": None}, "devices: msexp's"
    assert json.loads((workdir / "t" / "params.json").read_text()) == {"lr": 0.1, "devices": 1}
    again, _, _ = run_script(workdir / "t", lr=0.1)
    assert again == metrics
    assert seen(workdir / "t")["resume"] == str(workdir / "t" / "outputs")


def test_a_command_that_fails_or_reports_nothing_fails_its_trial(workdir: Path) -> None:
    failed, _, _ = run_script(workdir / "f", mode="fail")
    assert isinstance(failed, CommandFailed)
    assert str(failed) == "the command exited with code 3: something broke"
    quiet, _, _ = run_script(workdir / "q", mode="quiet")
    assert isinstance(quiet, RuntimeError) and not isinstance(quiet, CommandFailed)
    assert str(quiet).startswith("the command reported no metric")


def test_a_command_that_fails_saying_nothing_is_refused_by_its_exit_alone(
        workdir: Path) -> None:
    """Mutation `command.run_command` 72: filler after the exit where no error line was seen."""
    folder = workdir / "silent"
    folder.mkdir()
    silent = Command([sys.executable, "-c", "raise SystemExit(4)"], str(folder))
    failed, _, _ = run_script(folder, command=silent)
    assert isinstance(failed, CommandFailed)
    assert str(failed) == "the command exited with code 4"


# mutation: process_tree.subreaper leaves the flag set. CI saw it: a test process that had run
# a command trial adopted the PostgreSQL it started after, and the next trial's
# kill_descendants killed the database's workers (crash recovery, "in recovery mode").
def test_a_command_trial_leaves_its_process_adopting_nothing_after(workdir: Path) -> None:
    quiet, _, _ = run_script(workdir / "q", mode="quiet")
    assert str(quiet).startswith("the command reported no metric")
    detached = subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"],
                              capture_output=True, text=True, check=True)
    daemon = psutil.Process(int(detached.stdout))
    try:
        assert daemon.ppid() != os.getpid(), "a daemon started after the trial was adopted"
    finally:
        daemon.kill()


def test_a_stop_request_stops_the_command_after_its_epochs(workdir: Path) -> None:
    # mutation: msexp.hooks ignores the stop signal, or run_command does not send it: the
    # script stops waiting 10 s after the stop was due (AWAIT_STOP)
    stopped, _, events = run_script(workdir / "s", stop_after=2, mode="wait")
    assert isinstance(stopped, Stopped) and str(stopped) == "stopped after epoch 2"
    assert [e.epoch for e in events[1:]] == [1, 2]
    assert json.loads((workdir / "s" / "told.json").read_text()) is True, "should_stop()"


# After each epoch the script waits until msexp's stop reaches it; a lost one ends it.
WAIT_FOR_THE_STOP = AWAIT_STOP + """

import os, sys
from pathlib import Path
from mindspore.train import Callback
from msexp.hooks import MsexpCallback


class WaitForTheStop(Callback):
    def on_train_epoch_end(self, run_context):
        if not await_stop(Path(os.environ["MSEXP_OUTPUT_DIR"]).parent / "stop-due"):
            sys.exit("the stop did not arrive within 10 s of being due")
"""


@pytest.mark.slow  # over 4 s: the fast tier stays quick
def test_a_pruned_model_train_script_ends_its_training_itself(scripts: Path) -> None:
    # mutation: msexp.hooks (channel or MsexpCallback) ignores the stop signal: the script
    # exits 10 s after the stop was due (it is not killed here, as a trial process would be)
    source = (scripts / "train_digits.py").read_text()
    changed = source.replace("from sklearn.datasets import load_digits\n",
                             "from sklearn.datasets import load_digits\n" + WAIT_FOR_THE_STOP)
    changed = changed.replace("callbacks=[LossMonitor(20), TimeMonitor()]",
                              "callbacks=[MsexpCallback(model, eval_ds), WaitForTheStop()]")
    (scripts / "train_wait.py").write_text(changed + 'print("trained and evaluated")\n')
    command = Command([sys.executable, "train_wait.py"], str(scripts))
    stopped, _, events = run_script(scripts / "trial", stop_after=1, command=command, epochs=10)
    assert isinstance(stopped, Stopped), stopped
    # told after epoch 1, training ends after the first step of epoch 2, which it reports
    assert str(stopped) == "stopped after epoch 2"
    assert [e.epoch for e in events[1:]] == [1, 2]


def test_the_plan_check_says_how_a_command_fails(tmp_path: Path) -> None:
    from msexp.execution.command import check_command

    python = [sys.executable, "-c"]
    assert check_command([*python, "import sys"], tmp_path, ["--help"]) is None
    (tmp_path / "t.py").write_text("import sys; sys.stdin.read()\n")  # stdin: nothing to read
    assert check_command(["python", "t.py"], tmp_path, ["--help"]) is None, "in its folder"
    assert check_command([*python, "import sys; sys.exit('no such flag')"], tmp_path,
                         ["--help"]) == "it exited with code 1 with --help: no such flag"
    assert check_command([*python, "import time; time.sleep(30)"], tmp_path, ["--help"],
                         timeout=0.5) == "`--help` did not finish within 0.5 s"
    assert check_command(["no-such-program-xyz"], tmp_path, ["--help"]) == (
        "cannot start it (No such file or directory)")


ARGPARSE_SCRIPT = r"""
import argparse, ast, json, os
parser = argparse.ArgumentParser()
parser.add_argument("--amp", action="store_true")
parser.add_argument("--run_eval", type=ast.literal_eval, default=True)
parser.add_argument("--ckpt_path", default=".")
parser.add_argument("--data", default="")
args = parser.parse_args()
open(os.path.join(args.ckpt_path, "net.ckpt"), "w").write("x")
print(json.dumps({"amp_seen": float(args.amp), "run_eval_seen": float(args.run_eval),
                  "data_is_absolute": float(os.path.isabs(args.data)),
                  "cwd_is_outputs": float(os.getcwd() == os.environ["MSEXP_OUTPUT_DIR"])}))
"""


def test_a_trial_runs_in_its_own_folder_with_booleans_as_its_parser_takes_them(
        workdir: Path) -> None:
    from msexp.execution.command import run_command

    sweep_folder = workdir / "project"
    sweep_folder.mkdir()
    (sweep_folder / "train.py").write_text(ARGPARSE_SCRIPT)
    (sweep_folder / "data").mkdir()
    folder = workdir / "trials" / "trial-0003"
    params = {"amp": True, "run_eval": False, "data": "data",
              "ckpt_path": "${output_dir}/ckpt-${trial}"}
    (folder / "outputs" / "ckpt-3").mkdir(parents=True)
    command = Command([sys.executable, "train.py"], str(sweep_folder))
    metrics, checkpoint = run_command(TrialRequest("train.py", params, folder, command=command),
                                      lambda event: None, lambda: False)
    assert metrics == {"amp_seen": 1.0, "run_eval_seen": 0.0, "data_is_absolute": 1.0,
                       "cwd_is_outputs": 1.0}
    assert checkpoint == folder / "outputs" / "ckpt-3" / "net.ckpt"
    assert [p.name for p in (workdir / "trials").glob("help-*.txt")], "--help read once"
    off, _ = run_command(TrialRequest("train.py", {**params, "amp": False}, folder,
                                      command=command), lambda event: None, lambda: False)
    assert off["amp_seen"] == 0.0, "a switch that is false is left out"
    forced = Command([sys.executable, "train.py"], str(sweep_folder), switches=[])
    failed = None
    try:
        run_command(TrialRequest("train.py", params, folder, command=forced),
                    lambda event: None, lambda: False)
    except CommandFailed as exc:
        failed = str(exc)
    assert failed is not None and "argument --amp: ignored explicit argument 'True'" in failed


def test_a_data_parallel_command_runs_as_msrun_ranks_logging_into_the_trials_ranks_folder(
        workdir: Path) -> None:
    """`devices: 2` runs the script as two msrun ranks whose logs land in the trial's
    `ranks/` folder (logged to MLflow as `ranks/`, docs/your-code.md). (issue 53 survivor:
    command._launch_plan 90)"""
    from msexp.execution.command import _launch_plan

    folder = workdir / "trials" / "trial-0000"
    command = Command([sys.executable, "train.py"], str(workdir))
    argv, _, outputs = _launch_plan(TrialRequest("train.py", {"devices": 2, "lr": 0.1}, folder,
                                                 command=command))
    assert outputs == folder / "outputs"
    assert "msrun" in " ".join(argv[:3]) and "--worker_num=2" in argv, argv
    assert f"--log_dir={folder / 'ranks'}" in argv, argv
    wrapper = folder / "ranks" / "redacted.py"
    assert wrapper.is_file() and argv[argv.index(str(wrapper)) + 1:] == ["train.py", "--lr=0.1"]


def test_a_data_parallel_command_run_again_reuses_its_ranks_folder_and_finds_msrun_anyway(
        workdir: Path) -> None:
    """A trial run again (a retry, a resumed sweep) finds its `ranks/` folder as the last
    attempt left it; without `msrun` on PATH, MindSpore's module runs the ranks.
    (issue 53 fresh: command._launch_plan 94; msrun_command.msrun_argv 12)"""
    from msexp.execution.command import _launch_plan
    from msexp.execution.msrun_command import msrun_argv

    folder = workdir / "trials" / "trial-0000"
    command = Command([sys.executable, "train.py"], str(workdir))
    request = TrialRequest("train.py", {"devices": 2, "lr": 0.1}, folder, command=command)
    _launch_plan(request)
    argv, _, _ = _launch_plan(request)  # the second attempt
    assert f"--log_dir={folder / 'ranks'}" in argv, argv
    launcher = msrun_argv(2, folder / "ranks", ["train.py"], str(workdir))  # no msrun there
    assert launcher[:3] == [sys.executable, "-m", "mindspore.parallel.cluster.run"]
    assert subprocess.run([*launcher[:2], "json.tool", "--help"], capture_output=True,
                          timeout=60).returncode == 0, "python takes the launcher's -m"
