"""The engine's seams are typed and checked: `mypy` over execution, search, tracking, tune,
cli and the Python API ([tool.mypy] in pyproject.toml), so a type error fails CI."""

from __future__ import annotations

import subprocess
import sys

import pytest
import tomllib

from tests.conftest import ROOT

CHECKED = ["msexp/execution", "msexp/search", "msexp/tracking", "msexp/tune", "msexp/cli",
           "msexp/api"]


@pytest.mark.slow  # a cold mypy: 14 s; CI's slow tier runs it
def test_mypy_checks_the_seams_and_they_pass() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert sorted(config["files"]) == sorted(CHECKED)
    checked = {module for override in config["overrides"] if override.get("ignore_errors") is False
               for module in override["module"]}
    assert {f"{folder.replace('/', '.')}.*" for folder in CHECKED} <= checked, \
        "no checked package is left to ignore_errors"
    done = subprocess.run([sys.executable, "-m", "mypy"], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout
