"""Stop signals in the CLI's process (msexp/console/interrupts.py), in-process: the line a
sweep says at once, a stop held through MindSpore's import, a first stop held and a second
acted on, and an error a library made of a stop ending as the stop (issue 53: branches the
fault suite reaches only in msexp subprocesses, tests/fault/test_stop_moments.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from msexp.cli import app
from msexp.console import interrupts
from tests.conftest import write

pytestmark = pytest.mark.usefixtures("stop_handlers_restored")


@pytest.mark.parametrize(("trials", "line"), [
    ([], "stopping: no trial running"),
    ([4], "stopping: trial 4 will resume from its last checkpoint"),
    ([0, 2, 5], "stopping: trials 0, 2 and 5 will resume from their last checkpoints"),
])
def test_the_stopping_line_names_the_trials_that_resume(trials: list[int], line: str) -> None:
    assert interrupts.stopping_line(trials) == line


def test_a_sigterm_during_mindspores_import_waits_for_its_end_then_exits_143() -> None:
    interrupts.install(held=False)  # a command that acts on stops at once (plan, run)
    done = []
    with pytest.raises(SystemExit) as stopped, interrupts.deferred():
        signal.raise_signal(signal.SIGTERM)
        done.append("the import went on")  # MindSpore's runtime would abort mid-way
    assert done == ["the import went on"]
    assert stopped.value.code == 128 + signal.SIGTERM
    assert interrupts.received == [signal.SIGTERM]


def test_a_sweeps_first_ctrl_c_is_acknowledged_and_held_until_it_can_be_reported(
        capfd: pytest.CaptureFixture[str]) -> None:
    interrupts.install(held=True)  # msexp sweep, msexp worker
    with interrupts.deferred():  # the hosts import MindSpore
        signal.raise_signal(signal.SIGINT)
    # still held: the sweep acts on it where it can report its trials and the resume line
    assert capfd.readouterr().out == "stopping: no trial running\n"
    assert interrupts.received == [signal.SIGINT]
    with pytest.raises(KeyboardInterrupt), interrupts.acting():
        pytest.fail("the held stop acts as the block starts")
    assert capfd.readouterr().out == "", "acknowledged once"


def test_a_second_stop_while_the_first_is_held_acts_at_once(
        capfd: pytest.CaptureFixture[str]) -> None:
    interrupts.install(held=True)
    signal.raise_signal(signal.SIGTERM)
    assert capfd.readouterr().out == "stopping: no trial running\n"
    with pytest.raises(SystemExit) as stopped:
        signal.raise_signal(signal.SIGTERM)
    assert stopped.value.code == 128 + signal.SIGTERM
    assert interrupts.received == [signal.SIGTERM, signal.SIGTERM]


def test_an_error_a_library_made_of_a_stop_ends_as_the_stop_not_as_an_error(
        workdir: Path) -> None:
    """MindSpore turns a Ctrl-C during its import into an ImportError: the command ends with
    the stop's exit code (130), no error line, no traceback."""
    write(workdir / "w.py", """
        import signal
        from msexp.console import interrupts

        interrupts.note(signal.SIGINT)  # the handler ran; the library swallowed the signal
        raise ImportError("cannot import name '_c_expression' (interrupted)")
    """)
    sweep = write(workdir / "s.yaml", "name: w\nexperiment: w.py\n")
    result = CliRunner().invoke(app, ["plan", str(sweep), "--check"])
    assert result.exit_code == 128 + signal.SIGINT, result.output
    assert result.output == ""


def test_a_command_that_does_not_hold_stops_acts_on_the_first_at_once_saying_nothing(
        capfd: pytest.CaptureFixture[str]) -> None:
    """`install()` as plan, run and the read commands call it. Mutation (issue 53):
    `interrupts.install` 1 (held by default: the first Ctrl-C or SIGTERM did nothing)."""
    interrupts.install()
    with pytest.raises(SystemExit) as stopped:
        signal.raise_signal(signal.SIGTERM)
    assert stopped.value.code == 128 + signal.SIGTERM
    assert capfd.readouterr().out == ""


@pytest.mark.parametrize(("stops", "code"), [([signal.SIGTERM, signal.SIGINT], 143),
                                             ([signal.SIGINT], 130)])
def test_a_stopped_sweeps_end_names_its_failed_trials_rerun_and_exits_by_the_first_stop(
        capsys: pytest.CaptureFixture[str], stops: list[int], code: int) -> None:
    """`msexp sweep`'s end after a SIGTERM and then a Ctrl-C while its table printed: exit
    143, the first's. Mutations (issue 53): `sweeps._finish` 22 (the rerun command's word),
    34 (exit 0), 37 (the second stop's code)."""
    from types import SimpleNamespace

    import optuna
    import typer

    from msexp.cli.sweeps import _finish

    study = optuna.create_study(study_name="s")
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL))
    study.add_trial(optuna.trial.create_trial(value=0.5))
    interrupts.received[:] = stops
    with pytest.raises(typer.Exit) as ended:
        _finish(SimpleNamespace(study=study, fail_fast=None), Path("s.yaml"),
                {"study": None, "storage": None})
    assert ended.value.exit_code == code
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == ("1 trial(s) failed or timed out; after fixing the experiment: "
                        "msexp sweep s.yaml --retry-failed")
    assert lines[1].startswith("interrupted: ")


def test_a_sweeps_first_stop_is_held_for_its_report_not_acted_on(
        capfd: pytest.CaptureFixture[str]) -> None:
    """`install(held=True)` (msexp sweep, msexp worker): the first Ctrl-C is acknowledged
    and held, so the sweep goes on to report its trials and the resume line.
    (issue 53 fresh: interrupts.install 7)"""
    interrupts.install(held=True)
    try:
        signal.raise_signal(signal.SIGINT)
    except KeyboardInterrupt:
        pytest.fail("the first Ctrl-C acted at once: the sweep could not report its trials")
    assert capfd.readouterr().out == "stopping: no trial running\n"
    assert interrupts.received == [signal.SIGINT]
