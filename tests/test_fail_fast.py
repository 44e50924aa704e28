"""Sweeps that fail fast: a command's flags checked before the first trial, an objective
the trials will not report found at their first epoch, and no more trials started after
the first ones fail alike (`budget.fail_fast`)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from msexp.cli import app
from msexp.cli.scripts import preflight
from msexp.errors import SpecError
from msexp.execution import CONTINUE, Epoch, Status, TrialInfo, TrialResult
from msexp.execution.protocol import read_events
from msexp.search.failfast import FailFast, failure_cause
from msexp.search.storage import open_storage
from msexp.search.unreported import nearest, unreported_at
from msexp.spec import parse_spec
from tests.conftest import child_runs, write

OWN_LOOP = """
import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--epoch_size", type=int, default=1)
args = parser.parse_args()
print(f"eval_accuracy: {1 - args.lr}")
"""

# Reports each epoch through msexp's event writer (what msexp.hooks.report writes), without
# importing MindSpore; epoch 1 comes at once, each later one only after a long "training"
# that a stop (SIGUSR1, as msexp.hooks handles it) ends.
EPOCHS = """
import argparse, os, signal, sys, time
from pathlib import Path
from msexp.execution.protocol import Epoch, EventWriter
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)
args = parser.parse_args()
stop = []
signal.signal(signal.SIGUSR1, lambda *_: stop.append(True))
with EventWriter.open(Path(os.environ["MSEXP_EVENTS"])) as report:
    for epoch in (1, 2, 3):
        until = time.monotonic() + (0 if epoch == 1 else 120)
        while not stop and time.monotonic() < until:
            time.sleep(0.02)
        if stop:
            sys.exit(0)
        report(Epoch(epoch, epoch, 0.0, {"eval_accuracy": 1 - args.lr, "eval_loss": args.lr}))
print(f"eval_accuracy: {1 - args.lr}")
"""

# Fails the same way at every grid point until its data file exists.
NEEDS_DATA = """
import argparse, pathlib
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--data", default="data.txt")
args = parser.parse_args()
path = pathlib.Path(args.data)
if not path.is_file():
    raise ValueError(f"data path {path.resolve()} does not exist")
print(f"eval_accuracy: {1 - args.lr}")
"""


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


def epoch(**metrics: float) -> Epoch:
    return Epoch(1, 1, 0.0, metrics)


def failed(error: str, status: Status = Status.FAILED) -> TrialResult:
    return TrialResult(status, error=error)


def trial(number: int) -> TrialInfo:
    return TrialInfo(number, f"#{number}", {}, {}, 0.0)


def spec_with(budget: str = "{}", objective: str = "eval_accuracy"):
    return parse_spec(f"name: f\nexperiment: mlp_digits\nobjective: {{metric: {objective}}}\n"
                      f"budget: {budget}\nparams: {{lr: [0.1, 0.2, 0.3]}}\n", "f.yaml")


def test_identical_failures_of_different_trials_have_one_cause() -> None:
    one = ("the command exited with code 1: ValueError: data path "
           "/w/mlruns/trials/s/trial-0000/outputs/data.txt does not exist (epoch 3)")
    other = one.replace("trial-0000", "trial-0007").replace("epoch 3", "epoch 12")
    assert failure_cause(one) == failure_cause(other) == (
        "the command exited with code N: ValueError: data path <path> does not exist "
        "(epoch N)")
    quoted = "Traceback (most recent call last):\n  File 'x'\nKeyError: 'lr_0.1'"
    assert failure_cause(quoted) == "KeyError: '…'", "the last line, its quoted name out"
    assert failure_cause(one) != failure_cause(one.replace("ValueError", "OSError"))
    assert failure_cause("") == "(no error message)"


@pytest.mark.parametrize(("objective", "reported", "said"), [
    # the script: it printed `acc` per epoch, the file asked for eval_accuracy
    ("eval_accuracy", {"acc": 0.1, "train_loss": 2.0}, "it reported acc, train_loss; "
                                                       "did you mean acc?"),
    ("eval_acuracy", {"eval_accuracy": 0.9, "eval_loss": 0.3},
     "it reported eval_accuracy, eval_loss; did you mean eval_accuracy?"),
    ("train_los", {"train_loss": 0.3, "step_ms": 4.0}, "did you mean train_loss?"),
    ("Accuracy", {"Top_1_Accuracy": 0.1}, "did you mean Top_1_Accuracy?"),
    # epochs that do not settle it: the objective may come at the end
    ("eval_accuracy", {"train_loss": 2.0, "step_ms": 3.0}, None),  # training figures only
    ("test_accuracy", {"eval_accuracy": 0.5}, None),  # a test set evaluated at the end
    ("Accuracy", {"eval_accuracy": 0.5}, None),  # the callback's, then the script's print
    ("train_mem_mb", {"train_loss": 0.3}, None),  # msexp's final-only metric
    ("loss", {"eval_loss": 0.3}, None),  # a name of no kind
    ("eval_accuracy", {"eval_accuracy": 0.5}, None),  # there
])
def test_an_epoch_settles_an_objective_of_its_kind(objective: str, reported: dict,
                                                  said: str | None) -> None:
    problem = unreported_at([objective], epoch(**reported))
    if said is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith(
            f"objective {objective} not in epoch 1's report (") and said in problem


def test_the_nearest_name_is_left_out_when_none_is_near() -> None:
    assert nearest("eval_accuracy", ["train_loss", "step_ms"]) is None
    assert nearest("eval_accuracy", ["val_acc", "val_loss"]) == "val_acc"


def test_the_sweep_stops_after_its_first_identical_failures() -> None:
    watch = FailFast(spec_with("{fail_fast: 2}"))
    missing = "the command exited with code 1: FileNotFoundError: /data/trial-{}/x.csv"
    assert watch.on_trial_end(trial(0), failed(missing.format(0))) is None
    assert watch.on_trial_end(trial(1), failed("exceeded trial_timeout of 60 s",
                                               Status.TIMEOUT)) is None
    assert watch.stopped is None, "two causes, one failure each"
    decision = watch.on_trial_end(trial(2), failed(missing.format(2)))
    assert watch.stopped is not None and watch.stopped.count == 2
    assert watch.stopped.example == missing.format(0)
    assert decision is not None and decision.stop
    assert decision.line(5) == (
        f"fail fast: 2 trials failed with the same error and none completed "
        f"({missing.format(0)}); 5 trials not started (budget.fail_fast: 2)")
    assert decision.line(1).endswith("; 1 trial not started (budget.fail_fast: 2)")
    assert watch.on_trial_end(trial(3), failed(missing.format(3))) is None, "decided once"
    first = FailFast(spec_with("{fail_fast: 1}")).on_trial_end(trial(0), failed("boom"))
    assert first is not None and first.line(2) == (
        "fail fast: a trial failed and none completed (boom); 2 trials not started "
        "(budget.fail_fast: 1)")


@pytest.mark.parametrize("budget", ["{fail_fast: 0}", "{fail_fast: false}"])
def test_fail_fast_off_never_stops(budget: str) -> None:
    watch = FailFast(spec_with(budget))
    for number in range(10):
        assert watch.on_trial_epoch(trial(number), epoch(acc=0.1)) == CONTINUE
        assert watch.on_trial_end(trial(number), failed("ValueError: no data")) is None
    assert watch.stopped is None


@pytest.mark.parametrize("ran", [Status.COMPLETE, Status.PRUNED])
def test_a_completed_or_pruned_trial_turns_the_stop_off(ran: Status) -> None:
    """A pruned trial ran (the pruner stopped it on its reported objective): the failures
    around it are not the sweep's own, so they stop nothing."""
    # mutation: only COMPLETE turns the stop off (`(Status.COMPLETE,)`): after a pruned
    # trial, the third failure stops the sweep ("fail fast: 3 trials failed ...")
    watch = FailFast(spec_with())
    watch.on_trial_end(trial(0), failed("ValueError: no data"))
    watch.on_trial_end(trial(1), TrialResult(ran))
    decisions = [watch.on_trial_end(trial(number), failed("ValueError: no data"))
                 for number in range(2, 8)]
    assert decisions == [None] * 6, "the sweep starts its next trials"
    assert watch.stopped is None, "the failures are not the sweep's own: one ran"


def test_a_trial_is_stopped_at_its_epoch_with_why_until_it_ends() -> None:
    watch = FailFast(spec_with())
    decision = watch.on_trial_epoch(trial(4), epoch(acc=0.2))
    assert decision.stop and "did you mean acc?" in (decision.reason or "")
    assert watch.on_trial_epoch(trial(5), epoch(eval_accuracy=0.2)) == CONTINUE
    assert watch.on_trial_epoch(trial(4), epoch(eval_accuracy=0.3)) == decision, "still"
    watch.on_trial_end(trial(4), failed(decision.reason or ""))
    assert watch.on_trial_epoch(trial(4), epoch(eval_accuracy=0.3)) == CONTINUE, \
        "its next attempt starts afresh"


@pytest.mark.parametrize(("written", "value"), [("true", 3), ("false", 0), ("0", 0),
                                                ("5", 5)])
def test_fail_fast_is_a_count_or_a_switch(written: str, value: int) -> None:
    assert spec_with(f"{{fail_fast: {written}}}").budget.fail_fast == value


def test_a_negative_fail_fast_is_refused_in_one_line(workdir: Path) -> None:
    path = write(workdir / "neg.yaml", "name: n\nexperiment: mlp_digits\n"
                                       "budget: {fail_fast: -1}\n")
    result = invoke("validate", path.name)
    assert result.exit_code == 2
    assert result.output.strip() == ("neg.yaml: budget.fail_fast: must be greater than or "
                                     "equal to 0, got -1")


@pytest.mark.parametrize("command", ["sweep", "worker"])
def test_a_flag_typo_is_refused_before_any_store_or_trial(workdir: Path, command: str) -> None:
    write(workdir / "train.py", OWN_LOOP)
    path = write(workdir / "typo.yaml", """
        name: typo
        experiment: {command: python train.py}
        params: {lr: [0.1, 0.2], epochs_size: [1]}
    """)
    result = invoke(command, path.name)
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        "typo.yaml: params.epochs_size: is not a flag of the script: its --help lists no "
        "--epochs_size (did you mean --epoch_size?), got epochs_size")
    assert not (workdir / "mlruns").exists(), "no store made, no trial run"


def test_a_technique_for_a_loop_of_its_own_names_msexp_hooks(workdir: Path) -> None:
    write(workdir / "train.py", OWN_LOOP)
    path = write(workdir / "accum.yaml", """
        name: accum
        experiment: {command: python train.py}
        params: {micro_size: [1, 4]}
    """)
    result = invoke("sweep", path.name)
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        "accum.yaml: params.micro_size: is msexp's technique, applied only through "
        "msexp.hooks (hooks.model, see docs/your-code.md): this script does not use "
        "msexp.hooks, and its --help lists no --micro_size, got micro_size")
    assert "did you mean" not in invoke("plan", str(path), "--check").output
    said_hooks = write(workdir / "hooked.yaml", """
        name: hooked
        experiment: {command: python train.py, hooks: true}
        params: {amp_level: [O0, O2]}
    """)
    result = invoke("sweep", str(said_hooks))
    assert result.exit_code == 2, result.output
    assert "its --help lists no --amp_level" in result.output
    assert "msexp.hooks" not in result.output, "a hooked script lacks the flag itself"


def test_fail_fast_off_skips_the_check_before_the_sweep(workdir: Path) -> None:
    write(workdir / "broken.py", "import no_such_module_xyz\n")
    text = "name: b\nexperiment: {command: python broken.py}\nparams: {lr: [0.1]}\n"
    with pytest.raises(SpecError, match="No module named 'no_such_module_xyz' .*budget.fail_"
                                        "fast: false skips the check"):
        preflight(parse_spec(text, "b.yaml", workdir / "b.yaml"))
    off = parse_spec(text + "budget: {fail_fast: false}\n", "b.yaml", workdir / "b.yaml")
    assert preflight(off) is off


def test_a_command_that_takes_no_flags_is_not_run_before_the_sweep(workdir: Path) -> None:
    ran = workdir / "ran"  # the check runs in a trial's own folder: a path of its own
    write(workdir / "train.py", f"open({str(ran)!r}, 'w').close()\nprint('eval_accuracy: 1')\n")
    for args in ("none", "flags"):
        spec = parse_spec(f"name: n\nexperiment: {{command: python train.py, args: {args}}}\n"
                          "params: {lr: [0.1]}\n", "n.yaml", workdir / "n.yaml")
        preflight(spec)
        assert ran.exists() == (args == "flags")


@pytest.mark.slow
def test_a_misspelt_objective_fails_at_the_first_epoch(workdir: Path) -> None:
    write(workdir / "train.py", EPOCHS)
    path = write(workdir / "typo.yaml", """
        name: objective-typo
        experiment: {command: python train.py}
        objective: {metric: eval_acuracy}
        budget: {fail_fast: 2}
        params: {lr: [0.1, 0.2, 0.3]}
    """)
    result = invoke("sweep", str(path))
    assert result.exit_code == 3, result.output
    study = optuna.load_study(study_name="objective-typo", storage=open_storage(None))
    ran = [t for t in study.trials if t.state.name != "WAITING"]
    assert [t.state.name for t in ran] == ["FAIL"], "the next trials run the same code"
    for t in ran:
        events = read_events(Path(f"mlruns/trials/objective-typo/trial-{t.number:04d}/"
                                  "events.jsonl"))
        assert [e.epoch for e in events if isinstance(e, Epoch)] == [1], "stopped at once"
        assert t.user_attrs["error"] == (
            "objective eval_acuracy not in epoch 1's report (it reported eval_accuracy, "
            "eval_loss; did you mean eval_accuracy?); the trial was stopped there")
    assert {r.data.tags["status"] for r in child_runs("objective-typo")} == {"FAILED"}
    line = ("fail fast: a trial ran without reporting its objective, which the other trials "
            "run the same code to miss, and none completed (objective eval_acuracy not in epoch "
            "1's report (it reported eval_accuracy, eval_loss; did you mean eval_accuracy?); "
            "the trial was stopped there); 2 trials not started (budget.fail_fast: 2)")
    assert line in result.output.splitlines(), result.output


@pytest.mark.slow
def test_a_grid_with_a_wrong_data_path_stops_and_a_fixed_rerun_completes_it(
        workdir: Path) -> None:
    write(workdir / "train.py", NEEDS_DATA)
    path = write(workdir / "grid.yaml", """
        name: no-data
        experiment: {command: python train.py}
        budget: {fail_fast: 2}
        fixed: {data: data.txt}
        params: {lr: [0.1, 0.2, 0.3, 0.4, 0.5]}
    """)
    result = invoke("sweep", str(path))
    assert result.exit_code == 3, result.output
    study = optuna.load_study(study_name="no-data", storage=open_storage(None))
    assert [t.state.name for t in study.trials] == ["FAIL", "FAIL", "WAITING", "WAITING",
                                                    "WAITING"]
    first = study.trials[0].user_attrs["error"]
    assert first.endswith("trial-0000/outputs/data.txt does not exist")
    line = (f"fail fast: 2 trials failed with the same error and none completed ({first}); "
            "3 trials not started (budget.fail_fast: 2)")
    assert line in result.output.splitlines(), result.output
    assert "--help" in invoke("sweep", "--help").output and \
        "3 stopped by budget.fail_fast" in invoke("sweep", "--help").output

    (workdir / "data.txt").write_text("the data\n")  # the fix
    rerun = invoke("sweep", str(path), "--retry-failed")
    assert rerun.exit_code == 0, rerun.output
    study = optuna.load_study(study_name="no-data", storage=open_storage(None))
    done = {t.params["lr"]: t.value for t in study.trials if t.state.name == "COMPLETE"}
    assert done == pytest.approx({0.1: 0.9, 0.2: 0.8, 0.3: 0.7, 0.4: 0.6, 0.5: 0.5})
    assert len(study.trials) == 7, "the 3 queued points ran, and the 2 failed ones again"
