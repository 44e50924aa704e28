"""The sweep file: every class of bad input gets one line, exit code 2, and nothing runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from msexp.cli import app
from msexp.errors import SpecError
from msexp.spec import Method, parse_spec
from tests.conftest import ASSETS

BAD = sorted((ASSETS / "bad").glob("*.yaml"))


def expected_message(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), path
    return first[len("# expect: "):]


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_file_is_one_line_with_exit_code_2(path: Path, monkeypatch) -> None:
    monkeypatch.chdir(path.parent)
    result = CliRunner().invoke(app, ["validate", path.name])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(expected_message(path)), lines[0]
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", ["plan", "sweep"])
def test_commands_that_would_run_refuse_bad_files_first(command: str, workdir: Path) -> None:
    bad = ASSETS / "bad" / "indivisible.yaml"
    result = CliRunner().invoke(app, [command, str(bad)])
    assert result.exit_code == 2
    assert "micro_size must divide batch_size" in result.output
    assert not (workdir / "mlruns").exists(), "nothing may run or be recorded"


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert result.output.strip() == f"{tmp_path / 'nope.yaml'}: cannot read the file " \
                                    "(No such file or directory)"


def test_defaults_come_from_the_experiment_then_fixed() -> None:
    spec = parse_spec("name: t\nexperiment: mlp_digits\nfixed: {epochs: 2}\n", "t.yaml")
    values = spec.space.resolve({})
    assert spec.method is Method.grid
    assert values["epochs"] == 2  # fixed wins
    assert values["lr"] == 0.02  # mlp_digits DEFAULTS
    assert values["micro_size"] == 1  # msexp default
    assert values["hidden"] == 512  # the experiment's own knob


def test_inapplicable_knobs_are_left_out() -> None:
    spec = parse_spec("name: t\nexperiment: mlp_digits\nfixed: {optimizer: sgd}\n", "t.yaml")
    values = spec.space.resolve({})
    assert "momentum" not in values  # momentum applies to optimizer momentum only
    assert "loss_scale_window" not in values and "amp_dtype" not in values


def test_error_carries_its_parts() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec("name: t\nexperiment: mlp_digits\nbudget: {workers: 0}\n", "f.yaml")
    assert caught.value.key == "budget.workers"
    assert caught.value.value == 0
    assert str(caught.value) == "f.yaml: budget.workers: must be greater than or equal to 1, got 0"
