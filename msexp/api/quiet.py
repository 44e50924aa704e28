"""What the Python API keeps out of a notebook's cells: library log lines (MLflow, alembic,
Optuna) and Python warnings go to mlruns/msexp.log, as the CLI's do; so does what native
code (MindSpore's C++ logs) writes on this process's stderr while an experiment is built
here. msexp's own warnings still show, one line each, on stderr."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from msexp.console.library_warnings import warnings_to_log
from msexp.console.own_log import LogFile, show_own_lines
from msexp.paths import LOG_FILE

STDERR = 2  # the descriptor native code writes its logs on
LIBRARIES = ("mlflow", "alembic", "optuna", "py.warnings", "urllib3", "git")


def route_library_logs() -> None:
    """Library loggers write to mlruns/msexp.log only (MLflow's own stderr handler is
    dropped; MLflow configures none when imported after this); msexp's warnings to stderr."""
    os.environ["MLFLOW_CONFIGURE_LOGGING"] = "false"  # read by MLflow's import
    for name in LIBRARIES:
        logger = logging.getLogger(name)
        if not any(isinstance(h, LogFile) for h in logger.handlers):
            logger.handlers = [LogFile()]
        logger.propagate = False
    logging.getLogger("mlflow").setLevel(logging.INFO)
    show_own_lines()


@contextmanager
def quiet() -> Iterator[None]:
    """Library logs and the warnings raised inside go to mlruns/msexp.log."""
    route_library_logs()
    with warnings_to_log():
        yield


@contextmanager
def native_output_to_log() -> Iterator[None]:
    """What native code writes on file descriptor 2 while the block runs (a Jupyter kernel
    shows that descriptor in the cell) goes to mlruns/msexp.log, made only if there is
    any."""
    try:
        saved = os.dup(STDERR)
    except OSError:  # no descriptor to redirect (an embedded interpreter)
        yield
        return
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), STDERR)
        try:
            yield
        finally:
            os.dup2(saved, STDERR)
            os.close(saved)
            caught.seek(0)
            _append_to_log(caught.read())


def _append_to_log(written: bytes) -> None:
    if written:
        LOG_FILE.parent.mkdir(parents=True, exist_ok=True)
        with LOG_FILE.open("ab") as log:
            log.write(written)
