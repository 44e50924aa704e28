"""Secrets in URLs: one redaction for every text that leaves msexp."""

from __future__ import annotations

import logging
import re
from typing import Any

# scheme://[user]:password@host. The password may hold "/", ":" and even a raw "@": it
# runs to the "@" after which the authority (up to "/", "?", "#" or a space) holds no
# other "@". Text such as host:port/path@x is redacted too, since it cannot be told from
# a password holding "/": a secret is never shown.
_CREDENTIALS = re.compile(
    r"([A-Za-z][A-Za-z0-9+.-]*://)([^:@/\s\[\]]*):\S+?@(?=[^\s@/?#]*(?:[\s/?#]|$))")
# a libpq connection string's password=... (also in a URL's query)
_KEYWORD = re.compile(r"(?<![\w-])(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'\"]+)", re.I)


def redact(text: str) -> str:
    """Replace the password of every URL in `text`, and every `password=...`, with ***.
    Text without a password is returned unchanged."""
    return _KEYWORD.sub(r"\1***", _CREDENTIALS.sub(r"\1\2:***@", text))


def redact_logs() -> None:
    """From now on, redact every log record of this process, whatever logger or handler
    emits it (MLflow's and Optuna's included): message and traceback."""
    factory = logging.getLogRecordFactory()
    if getattr(factory, "redacts", False):
        return

    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        text = record.getMessage()
        if redact(text) != text:
            record.msg, record.args = redact(text), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return record

    make.redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(make)
