"""`msexp plan` lists the trials of a grid with micro-batch and effective batch."""

from __future__ import annotations

from typer.testing import CliRunner

from msexp.cli import app
from msexp.spec import parse_spec
from tests.conftest import write


def test_plan_lists_every_grid_point(tmp_path) -> None:
    path = write(tmp_path / "g.yaml", """
        name: g
        experiment: mlp_digits
        fixed: {batch_size: 64}
        params:
          micro_size: [1, 4]
          lr: [0.01, 0.1]
    """)
    result = CliRunner().invoke(app, ["plan", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("│")]
    cells = [[c.strip() for c in row.strip("│").split("│")] for row in rows]
    assert cells == [
        ["0", "1", "0.01", "64", "64"],
        ["1", "1", "0.1", "64", "64"],
        ["2", "4", "0.01", "16", "64"],
        ["3", "4", "0.1", "16", "64"],
    ]
    assert "grid of 4 trials on mlp_digits" in result.output


def test_budget_caps_the_grid() -> None:
    spec = parse_spec("name: g\nexperiment: mlp_digits\nbudget: {trials: 2}\n"
                      "params: {micro_size: [1, 2, 4]}\n", "g.yaml")
    assert spec.n_trials() == 2


def test_plan_of_a_sampler_shows_distributions(tmp_path) -> None:
    path = write(tmp_path / "t.yaml", """
        name: t
        experiment: mlp_digits
        method: tpe
        budget: {trials: 7}
        params:
          lr: {low: 0.001, high: 0.1, log: true}
          micro_size: [1, 2]
    """)
    result = CliRunner().invoke(app, ["plan", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "tpe, 7 trials" in result.output
    assert "0.001 .. 0.1 log" in result.output
