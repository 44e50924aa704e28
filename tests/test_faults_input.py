"""Bad input and faults: one line, the right exit code, before anything runs (issue 15)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from msexp.cli import app
from tests.conftest import write


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


def one_line(result) -> str:
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


def test_a_range_with_an_infinite_bound_is_refused(workdir: Path) -> None:
    sweep = write(workdir / "inf.yaml", """
        name: inf
        experiment: mlp_digits
        method: random
        params:
          lr: {low: 0.001, high: .inf}
    """)
    result = invoke("validate", str(sweep))
    assert result.exit_code == 2
    assert one_line(result) == f"{sweep}: params.lr.high: must be a finite number, got inf"
