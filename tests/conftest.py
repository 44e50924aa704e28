"""Shared fixtures: every test that records runs works in its own temporary folder."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ASSETS = Path(__file__).parent / "assets"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh current directory, so mlruns/ (MLflow + Optuna stores) lands in tmp_path."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MSEXP_STORAGE", raising=False)
    # trial processes import the test assets as experiments
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(ASSETS)]))
    monkeypatch.syspath_prepend(str(ASSETS))
    return tmp_path


def write(path: Path, text: str) -> Path:
    """Write dedented text to `path` and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


def msexp_cmd(*args: str) -> list[str]:
    """The command line that runs the msexp CLI with this interpreter."""
    return [sys.executable, "-m", "msexp", *args]


def mlflow_client():
    """A client of the embedded store in the current directory.

    The URI is absolute: MLflow caches stores by URI, so a relative one would reach
    the store of an earlier test's directory.
    """
    from mlflow import MlflowClient

    return MlflowClient(f"sqlite:///{Path('mlruns/mlflow.db').resolve()}")
