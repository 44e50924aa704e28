"""What the Python API keeps out of a notebook's cells: library log lines (MLflow, alembic,
Optuna) and Python warnings go to mlruns/msexp.log, as the CLI's do; so does what native
code (MindSpore's C++ logs) writes on this process's stderr while an experiment is built
here. msexp's own warnings still show, one line each, on stderr."""

from __future__ import annotations

import io
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from msexp.console.library_warnings import warnings_to_log
from msexp.paths import LOG_FILE

STDERR = 2  # the descriptor native code writes its logs on
LIBRARIES = ("mlflow", "alembic", "optuna", "py.warnings", "urllib3", "git")


class LibraryLog(logging.FileHandler):
    """mlruns/msexp.log of the working directory, made with its folder at the first
    record."""

    def __init__(self) -> None:
        super().__init__(LOG_FILE, encoding="utf-8", delay=True)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        """Write `record` under the working directory as it is now (a notebook may change
        it); a record that cannot be written is dropped, as the CLI's log drops it."""
        where = os.path.abspath(LOG_FILE)
        if where != self.baseFilename:
            self.close()
            self.baseFilename = where
        try:
            super().emit(record)
        except OSError:
            self.handleError(record)

    def _open(self) -> io.TextIOWrapper:
        LOG_FILE.parent.mkdir(parents=True, exist_ok=True)
        return super()._open()

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        """Dropped: logging's own report would print a traceback in the cell."""


class OwnLines(logging.Handler):
    """msexp's own warnings, one line each, on whatever sys.stderr is when they happen (a
    notebook's cell). One such handler at a time: the CLI's own (`cli/app.Stderr`, marked
    `msexp_stderr` as this is) replaces it, and it the CLI's."""

    msexp_stderr = True

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        print(record.getMessage(), file=sys.stderr)


def route_library_logs() -> None:
    """Library loggers write to mlruns/msexp.log only (MLflow's own stderr handler is
    dropped; MLflow configures none when imported after this); msexp's warnings to stderr."""
    os.environ["MLFLOW_CONFIGURE_LOGGING"] = "false"  # read by MLflow's import
    for name in LIBRARIES:
        logger = logging.getLogger(name)
        if not any(isinstance(h, LibraryLog) for h in logger.handlers):
            logger.handlers = [LibraryLog()]
        logger.propagate = False
    logging.getLogger("mlflow").setLevel(logging.INFO)
    own = logging.getLogger("msexp")
    own.setLevel(logging.INFO)
    if not any(isinstance(h, OwnLines) for h in own.handlers):
        own.handlers = [h for h in own.handlers if not getattr(h, "msexp_stderr", False)]
        own.addHandler(OwnLines())


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
