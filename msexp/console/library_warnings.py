"""Library warnings (Optuna's UserWarning and ExperimentalWarning) kept off the console:
logged to msexp's log instead, around the engine's calls into Optuna."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator

_log = logging.getLogger("py.warnings")  # the CLI sends it to mlruns/msexp.log only


@contextlib.contextmanager
def warnings_to_log() -> Iterator[list[warnings.WarningMessage]]:
    """Catch the warnings raised inside, log each one, and yield them to the caller."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught
    for w in caught:
        _log.warning(f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}")


def optuna_to_log() -> None:
    """Optuna's log lines go to msexp's log (the CLI's `app.route_logs`, the Python API's
    `api.quiet`), not to the console."""
    import optuna  # lazy: Optuna takes a second to import

    optuna.logging.disable_default_handler()
    optuna.logging.enable_propagation()
