"""The commands that messages suggest (`errors.Suggestion`), written out so that they work
when copied: in an error's one line and in msexp's log warnings."""

from __future__ import annotations

import logging
import os
import shlex
from pathlib import Path

from msexp.errors import MsexpError, Suggestion
from msexp.paths import DEFAULT_TRACKING_URI, JOURNAL
from msexp.secrets.redaction import redact

STORAGE_ENV = "MSEXP_STORAGE"
TRACKING_ENV = "MLFLOW_TRACKING_URI"


def command_line(suggestion: Suggestion) -> str:
    """`msexp WORDS...` with the options a copy needs to reach the same study and stores:
    `--study` when given, and a store only where neither the default nor the environment
    (`MSEXP_STORAGE`, `MLFLOW_TRACKING_URI`) already names it. Quoted for a shell."""
    argv = ["msexp", *suggestion.words]
    if suggestion.study:
        argv += ["--study", suggestion.study]
    storage, tracking_uri = suggestion.storage, suggestion.tracking_uri
    if storage and storage not in (str(JOURNAL), os.environ.get(STORAGE_ENV)):
        argv += ["--storage", storage]
    if tracking_uri and tracking_uri not in (DEFAULT_TRACKING_URI,
                                             os.environ.get(TRACKING_ENV)):
        argv += ["--tracking-uri", tracking_uri]
    return shlex.join(argv)


def command(*words: str | Path, study: str | None = None, storage: str | None = None,
            tracking_uri: str | None = None) -> str:
    """The command line of `msexp WORDS...` on that study and those stores."""
    return command_line(Suggestion(tuple(map(str, words)), study, storage, tracking_uri))


def message(error: MsexpError) -> str:
    """An error's text with the commands it suggests written out."""
    return "".join(command_line(part) if isinstance(part, Suggestion) else part
                   for part in error.parts)


class WrittenOut(logging.Formatter):
    """Formats a log record with the commands it suggests (its `Suggestion` arguments)
    written out and redacted; on a copy, so other handlers see the record as logged."""

    def format(self, record: logging.LogRecord) -> str:
        if isinstance(record.args, tuple) and any(isinstance(a, Suggestion)
                                                  for a in record.args):
            args = tuple(redact(command_line(a)) if isinstance(a, Suggestion) else a
                         for a in record.args)
            record = logging.makeLogRecord({**record.__dict__, "args": args})
        return super().format(record)
