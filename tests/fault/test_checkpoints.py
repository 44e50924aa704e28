"""A trial folder belongs to one trial of one study: a trial resumes only from a checkpoint
its own attempt saved (same trial, same params); anything else (another trial's or
study's checkpoint, other params, an empty or a vanished file) starts afresh, says so in
one line, and is never tagged as resumed."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from msexp.execution.host import running
from msexp.execution.protocol import Checkpointing, Start, TrialRequest
from msexp.keys import RunTag
from msexp.search.storage import open_storage
from msexp.search.versions import study_attrs
from msexp.spec.load import trial_params
from msexp.training.checkpoint import STATE, latest
from msexp.training.records import Epoch, Stopped
from tests.conftest import child_runs, msexp_cmd, write
from tests.fault.conftest import (
    DEADLINE_S,
    assert_no_process_left,
    assert_nothing_running,
    load_study,
)


def params(**overrides: Any) -> dict[str, Any]:
    return trial_params("mlp_digits", {"epochs": 3, "hidden": 16, "lr": 0.1, **overrides})


class Attempt:
    """One attempt of a trial in this process, stopped after `stop_after` epochs if given."""

    def __init__(self, folder: Path, values: dict[str, Any], trial: str | None = "s@1/0",
                 stop_after: int | None = None):
        self.events: list[Any] = []
        request = TrialRequest("mlp_digits", values, folder, checkpoint=Checkpointing(),
                               trial=trial)
        stop = (lambda: False) if stop_after is None else (
            lambda: len(self.epochs) >= stop_after)
        try:
            running.run(request, self.events.append, stop)
        except Stopped:
            assert stop_after is not None

    @property
    def epochs(self) -> list[int]:
        return [e.epoch for e in self.events if isinstance(e, Epoch)]

    @property
    def resumed_from(self) -> int:
        (start,) = [e for e in self.events if isinstance(e, Start)]
        return start.resumed_from


@pytest.fixture
def interrupted(tmp_path: Path) -> Path:
    """A trial folder whose trial s@1/0 (lr 0.1) stopped after epoch 1 of 3."""
    Attempt(tmp_path, params(), stop_after=1)
    assert latest(tmp_path / "checkpoints").epoch == 1
    return tmp_path


def test_the_same_trial_resumes_its_own_checkpoint(interrupted: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    again = Attempt(interrupted, params())
    assert again.resumed_from == 1 and again.epochs == [1, 2, 3]
    assert "starting afresh" not in capsys.readouterr().out


@pytest.mark.parametrize(("change", "why"), [
    ({"values": params(lr=0.5)}, "was trained with other params (lr)"),
    ({"trial": "s@1/1"}, "was saved by s@1/0, not by s@1/1"),
    ({"trial": "s@2/0"}, "was saved by s@1/0, not by s@2/0"),
])
def test_another_trials_checkpoint_is_never_resumed(interrupted: Path, change: dict,
                                                    why: str,
                                                    capsys: pytest.CaptureFixture) -> None:
    capsys.readouterr()
    again = Attempt(interrupted, change.get("values", params()), change.get("trial", "s@1/0"))
    assert again.resumed_from == 0, "trains from its first epoch"
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "starting afresh" in x]
    assert why in line and "checkpoints.replaced-1" in line
    assert (interrupted / "checkpoints.replaced-1" / STATE).is_file(), "kept, aside"
    assert latest(interrupted / "checkpoints").epoch == 3


@pytest.mark.parametrize(("damage", "why"), [
    (lambda f: f.write_bytes(b""), "is empty (0 bytes)"),
    (lambda f: f.unlink(), "which state.json names, is gone")])
def test_a_damaged_checkpoint_starts_afresh_and_says_why(interrupted: Path, damage: Any,
                                                         why: str,
                                                         capsys: pytest.CaptureFixture) -> None:
    damage(interrupted / "checkpoints" / latest(interrupted / "checkpoints").file)
    capsys.readouterr()
    again = Attempt(interrupted, params())
    assert again.resumed_from == 0 and again.epochs == [1, 2, 3]
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "starting afresh" in x]
    assert why in line


@pytest.mark.slow  # over 5 s: the fast tier stays quick
def test_a_study_whose_journal_was_deleted_is_refused_then_restarted_beside_its_trials(
        mark: str) -> None:
    """Issue 25, broken 2 and the emptied journal: run a sweep, delete the journal, change
    lr, run it again. The old trials are neither re-run nor resumed into the new study."""
    sweep = write(Path("reuse.yaml"), """
        name: reuse
        experiment: mlp_digits
        fixed: {epochs: 2, hidden: 16}
        params: {lr: [0.1]}
    """)

    def run(*options: str) -> subprocess.CompletedProcess:
        return subprocess.run(msexp_cmd("sweep", str(sweep), *options), capture_output=True,
                              text=True, timeout=DEADLINE_S)

    assert run().returncode == 0
    old = Path("mlruns/trials/reuse/trial-0000")
    kept = sorted(p.name for p in (old / "checkpoints").iterdir())
    Path("mlruns/optuna.journal").unlink()
    sweep.write_text(sweep.read_text().replace("[0.1]", "[0.5]"))
    refused = run()
    assert refused.returncode == 2 and not refused.stdout.strip(), refused.stdout
    assert refused.stderr.endswith(f"to start anew beside them: msexp sweep {sweep} "
                                   f"--restart\n") and refused.stderr.count("\n") == 1
    assert study_attrs(open_storage(None)) == {}, "refused before anything is written"
    restarted = run("--restart")
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    (trial,) = load_study("reuse-v2").trials
    assert trial.params == {"lr": 0.5} and trial.state.name == "COMPLETE"
    runs = [r for r in child_runs("reuse") if r.data.params.get("lr") == "0.5"]
    assert len(runs) == 1 and RunTag.RESUMED_FROM not in runs[0].data.tags
    assert "resuming from" not in Path("mlruns/trials/reuse-v2/trial-0000/trial.log").read_text()
    assert sorted(p.name for p in (old / "checkpoints").iterdir()) == kept, "left as they were"
    assert_nothing_running("reuse-v2")
    assert_no_process_left(mark)
