"""Where log records go, for the CLI and the Python API alike: mlruns/msexp.log (`LogFile`),
and msexp's own warnings one line each on stderr (`OwnLines`), with the commands they
suggest written out (`hints.WrittenOut`)."""

from __future__ import annotations

import io
import logging
import os
import sys

from msexp.console.hints import WrittenOut
from msexp.paths import LOG_FILE

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class LogFile(logging.FileHandler):
    """mlruns/msexp.log under the working directory as it is at each record (a notebook may
    change it), created with its folder at the first record."""

    def __init__(self) -> None:
        super().__init__(LOG_FILE, encoding="utf-8", delay=True)
        self.setFormatter(WrittenOut(FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
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
        """A record that cannot be written (mlruns/ is full) is dropped: logging's own
        report would print the record and a traceback on the console or in the cell, which
        show only msexp's lines (the error that stops the command says what is full)."""


class OwnLines(logging.Handler):
    """msexp's own warnings, one line each, on whatever sys.stderr is when they happen (a
    terminal, or a notebook's cell)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.setFormatter(WrittenOut())

    def emit(self, record: logging.LogRecord) -> None:
        print(self.format(record), file=sys.stderr)


def show_own_lines() -> None:
    """msexp's logger at INFO, with one `OwnLines` on stderr however often the CLI and the
    Python API set it up in one process."""
    own = logging.getLogger("msexp")
    own.setLevel(logging.INFO)
    if not any(isinstance(h, OwnLines) for h in own.handlers):
        own.addHandler(OwnLines())
