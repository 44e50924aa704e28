"""The read commands (`report`, `status`, `best`) where there is nothing to read: a sweep
file never swept, a study none of whose trials has finished. One line each, exit 1, and no
store made."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from msexp.cli import app
from msexp.search.storage import open_storage
from tests.conftest import write

SWEEP = """
    name: never
    experiment: mlp_digits
    fixed: {epochs: 1}
    params:
      micro_size: [1, 2]
"""


def cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


@pytest.mark.parametrize("command", ["report", "status", "best"])
def test_a_read_command_on_a_never_swept_file_says_to_sweep_it_and_makes_no_store(
        workdir: Path, command: str) -> None:
    sweep = write(workdir / "never.yaml", SWEEP)
    result = cli(command, str(sweep))
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"no study named 'never' in mlruns/optuna.journal: run `msexp sweep {sweep}` "
        "first")
    assert not (workdir / "mlruns").exists()  # mutation: the journal opened to look
    elsewhere = workdir / "db" / "optuna.db"
    result = cli(command, str(sweep), "--storage", f"sqlite:///{elsewhere}")
    assert f"run `msexp sweep {sweep} --storage sqlite:///{elsewhere}` first" in result.output
    assert not elsewhere.exists() and not (workdir / "mlruns").exists()


def test_a_study_swept_elsewhere_in_the_same_store_is_still_not_this_one(
        workdir: Path) -> None:
    optuna.create_study(study_name="other", storage=open_storage(None))
    sweep = write(workdir / "never.yaml", SWEEP)
    result = cli("report", str(sweep))
    assert result.exit_code == 1
    assert f"no study named 'never' in mlruns/optuna.journal: run `msexp sweep {sweep}` " \
        "first" in result.output
    assert "no study named 'zz' in mlruns/optuna.journal\n" in cli(
        "report", "--study", "zz").output, "no file: nothing to suggest"


def test_report_on_a_study_with_no_finished_trial_says_so_in_one_line(workdir: Path) -> None:
    sweep = write(workdir / "never.yaml", SWEEP)
    study = optuna.create_study(study_name="never", storage=open_storage(None))
    study.enqueue_trial({"micro_size": 1})
    study.enqueue_trial({"micro_size": 2})
    result = cli("report", str(sweep))
    assert result.exit_code == 1, result.output  # mutation: an empty table and exit 0
    assert result.output == ("nothing to report: no trial of study 'never' has "
                             "finished yet (2 waiting)\n")
    assert not (workdir / "mlruns" / "reports").exists()
