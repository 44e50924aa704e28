"""A failed trial's one line carries the exception's own line, never what its message goes
on with (MindSpore's `(See file '.../analyze_fail.ir' ...)` trailer); and an objective
absent from a trial that ran to its end stops the sweep after that first trial."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from msexp.execution import Epoch, Status, TrialInfo, TrialResult
from msexp.execution.command import CommandFailed, run_command
from msexp.execution.output import error_line
from msexp.execution.protocol import Command, TrialRequest
from msexp.search.failfast import FailFast, failure_cause
from msexp.search.tell import judge
from msexp.spec import parse_spec

CAST = 'TypeError: Failed calling Cast with "input=Tuple[Tensor[Float32]*2]".'
TRAILER = ("(See file '/w/rank_0/om/analyze_fail.ir' for more details. Get instructions "
           "about `analyze_fail.ir` at https://www.mindspore.cn/search?inputValue="
           "analyze_fail.ir)")
# what Python prints for MindSpore's compile error, as trial.log held it (shortened)
MINDSPORE_FAILURE = f"""epoch: 1 step: 1, loss is 2.30
Traceback (most recent call last):
  File "train.py", line 40, in <module>
    model.train(1, dataset)
  File "/ms/train/model.py", line 1102, in train
    self._train(epoch,
    ^^^^^^^^^^^^^^^^^^
{CAST}
The valid calling should be:
    mindspore.ops.cast(input, dtype)
----------------------------------------------------
- C++ Call Stack: (For framework developers)
----------------------------------------------------
mindspore/ccsrc/pipeline/jit/ps/static_analysis/prim.cc:1275 CheckArgsSizeAndType

----------------------------------------------------
- The Traceback of Net Construct Code:
----------------------------------------------------
# 0 In file /w/msexp/training/step.py:183
        loss = loss_fn(ops.cast(call(network, x), ms.float32), y)
                       ^~~~~~~
{TRAILER}
"""


@pytest.mark.parametrize(("text", "line"), [
    (MINDSPORE_FAILURE, CAST),
    # a chained exception: the last traceback's
    ("Traceback (most recent call last):\n  File 'a'\nKeyError: 'x'\n\nDuring handling of "
     "the above exception, another exception occurred:\n\nTraceback (most recent call "
     "last):\n  File 'b'\n    raise ValueError('y')\nValueError: y\nmore of its message\n",
     "ValueError: y"),
    # an error message with no traceback (a trial in msexp's own process)
    (CAST + "\nThe valid calling should be:\n" + TRAILER, CAST),
    # no exception at all: the last line that is not blank
    ("epoch 1\nKilled\n\n", "Killed"),
    ("", ""),
])
def test_the_error_line_is_the_exceptions_own(text: str, line: str) -> None:
    # mutation: the last nonblank line (what command.py and failfast took)
    assert error_line(text) == line


def test_a_failed_commands_line_is_its_exceptions_own_line(tmp_path: Path) -> None:
    """A real script that prints MindSpore's failure and exits 1."""
    script = tmp_path / "train.py"
    script.write_text(f"import sys\nprint({MINDSPORE_FAILURE!r}, end='')\nsys.exit(1)\n",
                      encoding="utf-8")
    folder = tmp_path / "trial-0000"
    folder.mkdir()
    request = TrialRequest("train.py", {}, folder, command=Command(
        [sys.executable, str(script)], str(tmp_path), "none"))
    with pytest.raises(CommandFailed) as failed:
        run_command(request, lambda event: None, lambda: False, log=open(  # noqa: SIM115
            tmp_path / "trial.log", "w", encoding="utf-8"))
    assert str(failed.value) == f"the command exited with code 1: {CAST}"
    assert "analyze_fail" not in str(failed.value)


def spec(budget: str = "{}"):
    return parse_spec("name: f\nexperiment: mlp_digits\nobjective: {metric: eval_accuracy}\n"
                      f"budget: {budget}\nparams: {{lr: [0.1, 0.2, 0.3]}}\n", "f.yaml")


def trial(number: int) -> TrialInfo:
    return TrialInfo(number, f"#{number}", {}, {}, 0.0)


def test_an_objective_absent_from_a_completed_trial_stops_the_sweep_after_it() -> None:
    """The script ran to its end and printed `acc`, not `eval_accuracy`: the next trials
    run the same code, so the sweep stops after the first, not the third."""
    # mutation: FailFast.on_trial_end ignoring `absent` (stops after budget.fail_fast: 3)
    sweep = spec()
    watch = FailFast(sweep)
    raw = TrialResult(Status.COMPLETE, metrics={"acc": 0.5, "wall_s": 3.0})
    result = judge(sweep, trial(0), raw).result
    assert result.status is Status.FAILED and raw.status is Status.COMPLETE
    decision = watch.on_trial_end(trial(0), result)
    assert watch.stopped is not None and watch.stopped.count == 1
    assert decision is not None and decision.line(2) == (
        "fail fast: a trial ran without reporting its objective, which the other trials run "
        "the same code to miss, and none completed (objective not available: eval_accuracy (it "
        "reported acc; did you mean acc?)); 2 trials not started (budget.fail_fast: 3)")


def test_a_trial_stopped_at_an_epoch_for_its_objective_stops_the_sweep_after_it() -> None:
    sweep = spec()
    watch = FailFast(sweep)
    decision = watch.on_trial_epoch(trial(0), Epoch(1, 1, 0.0, {"val_acc": 0.5}))
    raw = TrialResult(Status.FAILED, error="Stopped: stopped after epoch 1")
    assert watch.on_trial_end(trial(0), judge(sweep, trial(0), raw, decision.reason).result)
    assert watch.stopped is not None and watch.stopped.absent


@pytest.mark.parametrize("budget", ["{}", "{fail_fast: 0}"])
def test_a_crash_still_needs_budget_fail_fast_alike_and_off_is_off(budget: str) -> None:
    watch = FailFast(spec(budget))
    for number in range(2):
        watch.on_trial_end(trial(number), TrialResult(Status.FAILED,
                                                      error=MINDSPORE_FAILURE))
    assert watch.stopped is None, "a crash is not an absent objective"
    watch.on_trial_end(trial(2), TrialResult(Status.FAILED, error=MINDSPORE_FAILURE))
    if budget == "{}":
        assert watch.stopped is not None and watch.stopped.example == CAST
        assert watch.stopped.cause == failure_cause(CAST)
    else:
        assert watch.stopped is None
    off = FailFast(spec("{fail_fast: 0}"))
    absent = judge(spec(), trial(0), TrialResult(Status.COMPLETE, metrics={"acc": 0.5}))
    assert off.on_trial_end(trial(0), absent.result) is None
    assert off.stopped is None


def test_a_tracebacks_own_line_is_the_error_whatever_its_exceptions_name() -> None:
    """An exception whose name ends in no Error, Exception, Exit or Interrupt is still the
    line a traceback ends with. Mutation (issue 53): the traceback not followed."""
    text = ("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
            "    raise Oops(\"bad shape\")\nmymodel.Oops: bad shape\nsaving the log\n")
    assert error_line(text) == "mymodel.Oops: bad shape"


def test_a_command_echoing_a_config_longer_than_a_line_is_read_still_reports_its_loss(
        tmp_path: Path) -> None:
    """A configuration echo (`Namespace(`) cut at the line length read for metrics: its
    brackets may close in the part not read, so the lines after it are still read.
    (issue 53 fresh: output.ErrorLine.feed 22)"""
    from msexp.execution.log_lines import LINE_CHARS

    script = tmp_path / "train.py"
    script.write_text(f"print('Namespace(' + 'x' * {LINE_CHARS + 10} + ')')\n"
                      "print('loss: 0.25')\n", encoding="utf-8")
    folder = tmp_path / "trial-0000"
    folder.mkdir()
    request = TrialRequest("train.py", {}, folder, command=Command(
        [sys.executable, str(script)], str(tmp_path), "none"))
    with open(tmp_path / "trial.log", "w", encoding="utf-8") as log:
        metrics, _ = run_command(request, lambda event: None, lambda: False, log=log)
    assert metrics.get("loss") == 0.25, metrics
