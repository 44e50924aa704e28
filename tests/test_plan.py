"""`msexp plan` lists the trials of a grid with micro-batch and effective batch."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from msexp.cli import app
from msexp.keys import TrialKey
from msexp.search.study import open_study
from msexp.spec import load_spec, parse_spec
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


def test_plan_numbers_grid_rows_as_the_study_numbers_its_trials(workdir) -> None:
    """Points sharing compiled graphs are queued together: lr does not change the graphs,
    micro_size does, so the lr x micro_size grid runs micro_size 1 first."""
    path = write(workdir / "lr.yaml", """
        name: lr-by-micro
        experiment: mlp_digits
        params:
          lr: [0.01, 0.1]
          micro_size: [1, 2]
    """)
    result = CliRunner().invoke(app, ["plan", str(path), "--json"])
    assert result.exit_code == 0, result.output
    grid = json.loads(result.output)["grid"]
    planned = [(row["number"], row["params"]["lr"], row["params"]["micro_size"]) for row in grid]
    assert planned == [(0, 0.01, 1), (1, 0.1, 1), (2, 0.01, 2), (3, 0.1, 2)]
    assert [row["grid_index"] for row in grid] == [0, 2, 1, 3]
    study, _ = open_study(load_spec(path), None)
    queued = [(t.number, t.user_attrs[TrialKey.GRID_POINT]) for t in study.trials]
    assert queued == [(row["number"], row["grid_index"]) for row in grid]
