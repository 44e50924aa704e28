"""msexp from Python: run a sweep from a file or a dict, read back what it found, tune it,
and load its best trained model, on the engine the CLI runs (docs/python.md).

    import msexp
    results = msexp.sweep("sweeps/accum.yaml")
    results.trials_dataframe()
"""

from __future__ import annotations

from msexp.api.quiet import quiet

with quiet():  # what the libraries say as they import (tqdm's warning in a notebook)
    from msexp.api.results import SweepResults, load_sweep
    from msexp.api.running import sweep
    from msexp.api.sources import DICT_SOURCE, Source
    from msexp.api.trials import Trial
    from msexp.api.tuning import TuneResult, tune_sweep
    from msexp.errors import MsexpError, SpecError

__all__ = ["DICT_SOURCE", "MsexpError", "Source", "SpecError", "SweepResults", "Trial",
           "TuneResult", "load_sweep", "sweep", "tune_sweep"]
