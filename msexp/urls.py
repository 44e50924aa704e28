"""Secrets: passwords in URLs and values under names that say they hold one. One
redaction for every text and value that leaves msexp."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

# scheme://[user]:password@host. The password may hold "/", ":" and even a raw "@": it
# runs to the "@" after which the authority (up to "/", "?", "#" or a space) holds no
# other "@". Text such as host:port/path@x is redacted too, since it cannot be told from
# a password holding "/": a secret is never shown.
_CREDENTIALS = re.compile(
    r"([A-Za-z][A-Za-z0-9+.-]*://)([^:@/\s\[\]]*):(\S+?)@(?=[^\s@/?#]*(?:[\s/?#]|$))")
# a libpq connection string's password=... (also in a URL's query)
_KEYWORD = re.compile(r"(?<![\w-])(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'\"]+)", re.I)


def redact(text: str) -> str:
    """Replace the password of every URL in `text`, and every `password=...`, with ***.
    Text without a password is returned unchanged."""
    return _KEYWORD.sub(r"\1***", _CREDENTIALS.sub(r"\1\2:***@", text))


def secret_name(name: str) -> bool:
    """Whether a name (an environment variable's, a param's) says it holds a secret."""
    return any(word in name.upper() for word in ("PASSWORD", "TOKEN", "SECRET", "KEY"))


def redact_value(name: str, value: Any) -> Any:
    """`value` as msexp writes it under `name`: *** if the name says it holds a secret,
    else with the password of every URL redacted, in lists and mappings too."""
    if value is None:
        return None
    if secret_name(name):
        return "***"
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, (list, tuple)):
        return [redact_value(name, v) for v in value]
    if isinstance(value, Mapping):
        return {k: redact_value(str(k), v) for k, v in value.items()}
    return value


def redact_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's params as msexp writes them (journal, files, MLflow): `redact_value`."""
    return {name: redact_value(name, value) for name, value in params.items()}


MIN_SECRET = 4  # shorter values are not searched for in texts: they would hide common words


def known_secrets(params: Mapping[str, Any] | None = None) -> list[str]:
    """The values to hide in any text (`redact_known`): this process's environment
    variables whose names say they hold a secret, the params under such names, and the
    passwords of URLs in either."""
    named = [*os.environ.items(), *(params or {}).items()]
    found = {text for name, value in named if secret_name(name) for text in _strings(value)}
    found |= {m.group(3) for _, value in named for text in _strings(value)
              for m in _CREDENTIALS.finditer(text)}
    return sorted((s for s in found if len(s) >= MIN_SECRET), key=len, reverse=True)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    return [str(value)] if isinstance(value, (int, float)) else []


def redact_known(text: str, secrets: Iterable[str]) -> str:
    """`redact`, then every one of `secrets` (as is and as JSON escapes it) hidden."""
    text = redact(text)
    for secret in secrets:
        for form in {secret, json.dumps(secret)[1:-1]}:
            text = text.replace(form, "***")
    return text


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
