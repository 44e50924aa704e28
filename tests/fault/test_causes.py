"""Clear causes: a value no trial can run with is refused by `validate` in the one-line
format, before anything runs; a full disk is named as such, with where."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import msexp_cmd, write
from tests.fault.conftest import DEADLINE_S


@pytest.mark.parametrize(("section", "line"), [
    ("fixed: {seed: 100000000000000000000}",
     "fixed.seed: must be <= 4294967295, got 100000000000000000000"),
    ("params: {seed: {low: 0, high: 4294967296}}",
     "params.seed.high: must be <= 4294967295, got 4294967296"),
    ("fixed: {seed: 4294967295}\nbudget: {repeats: 2}",
     "params.seed.1: must be <= 4294967295, got 4294967296"),
])
@pytest.mark.parametrize("command", ["validate", "sweep"])
def test_a_seed_out_of_range_is_one_line_before_anything_runs(workdir: Path, section: str,
                                                              line: str, command: str) -> None:
    sweep = write(workdir / "seed.yaml", "name: seed\nexperiment: mlp_digits\n"
                  f"{section}\n")
    done = subprocess.run(msexp_cmd(command, str(sweep)), capture_output=True, text=True,
                          timeout=DEADLINE_S)
    assert (done.returncode, done.stderr) == (2, f"{sweep}: {line}\n"), done.stdout
    assert not Path("mlruns").exists()


def test_the_largest_seed_runs(workdir: Path) -> None:
    """The bound is the libraries' own: their largest seed is a valid one."""
    from msexp.execution import trial as trial_process
    from msexp.execution.protocol import TrialRequest
    from msexp.spec.load import trial_params

    params = trial_params("mlp_digits", {"epochs": 1, "hidden": 8, "seed": 2**32 - 1})
    assert "eval_accuracy" in trial_process.run(TrialRequest("mlp_digits", params),
                                                lambda event: None)
