"""msexp: sweep MindSpore training techniques and compare the trials in MLflow.

From Python (docs/python.md): `msexp.sweep`, `msexp.load_sweep`, `msexp.tune_sweep`;
their errors are `msexp.MsexpError` (`msexp.SpecError` for a sweep that breaks a rule).
"""

from __future__ import annotations

import os as _os
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# MLflow's usage telemetry calls out to the internet from every process and holds exit
# for up to a second; trials and clusters here are often offline. Opt back in by
# setting MLFLOW_DISABLE_TELEMETRY=false.
_os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

if TYPE_CHECKING:  # the names `__getattr__` gives, for type checkers
    from msexp.api import (
        MsexpError,
        SpecError,
        SweepResults,
        Trial,
        TuneResult,
        load_sweep,
        sweep,
        tune_sweep,
    )

__all__ = ["MsexpError", "SpecError", "SweepResults", "Trial", "TuneResult",
           "load_sweep", "sweep", "tune_sweep"]


def __getattr__(name: str) -> object:
    """The Python API's names, imported at their first use: every trial process imports
    this package, and needs none of them."""
    if name in __all__:
        from msexp import api  # lazy: Optuna and the stores' code, seconds

        return getattr(api, name)
    raise AttributeError(f"module 'msexp' has no attribute {name!r}")
