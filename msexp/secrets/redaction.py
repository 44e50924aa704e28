"""Secrets: passwords in URLs and values under names that say they hold one. One
redaction for every text and value that leaves msexp, linear in the text's length
(`spans`): `redact` for any text, `redact_value` for a param's value, `known_secrets` and
`redact_known` for the secrets a trial was given, `LineRedactor` for a long line in pieces."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from msexp.secrets.spans import find, hide, quoted_rest, url_passwords

HOLD_CHARS = 1 << 16  # a piece of a long line holds back this much for the next piece
_BARE_VALUE = re.compile(r"[^\s&'\"]+")


def redact(text: str) -> str:
    """Replace the password of every URL in `text`, and every value under a secret's name
    (`password=...`, `api_key: ...`, `"token": "..."`: `keywords`), with ***. Text without
    a secret is returned unchanged."""
    return hide(text, find(text, []).joined())


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
    found |= {text[start:end] for _, value in named for text in _strings(value)
              for start, end in url_passwords(text)}
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
    """`redact`, and every one of `secrets` (as is and as JSON escapes it) hidden."""
    return hide(text, find(text, _forms(secrets)).joined())


def _forms(secrets: Iterable[str]) -> list[str]:
    """Each secret as printed and as JSON escapes it, longest first."""
    found = {form for secret in secrets if secret for form in (secret, json.dumps(secret)[1:-1])}
    return sorted(found, key=len, reverse=True)


class LineRedactor:
    """Redacts a line that comes in pieces (a long line read in bounded chunks): each piece
    gives back what is final, and holds back the end where a secret may continue into the
    next piece. A line's last piece (ending in a newline) or `flush` gives back the rest."""

    def __init__(self, secrets: Iterable[str]):
        self.forms = _forms(secrets)
        self.hold = max(HOLD_CHARS, 2 * max(map(len, self.forms), default=0))
        self.held = ""
        self.in_value = False  # a `password=` value went on past the last piece
        self.in_quoted = ""  # the quote of one that went on past a backslash-newline

    def feed(self, piece: str) -> str:
        """The redacted text that is final once `piece` has come."""
        text, self.held = self.held + piece, ""
        if self.in_value:  # the rest of that value: hidden by the *** already written
            value = _BARE_VALUE.match(text)
            text = text[value.end():] if value else text
            self.in_value = not text
        if self.in_quoted:  # the rest of that value, up to its quote or its line's end
            end, continued = quoted_rest(text, self.in_quoted)
            text = text[end:]
            self.in_quoted = self.in_quoted if continued or not text else ""
        found = find(text, self.forms)
        if text.endswith("\n") or not text:
            self.in_quoted = self.in_quoted or found.continued
            return hide(text, found.joined())
        cut = found.cut(self.hold)
        # only a bare `password=` value longer than the hold runs on to the end
        self.in_value = cut == len(text) and bool(_BARE_VALUE.match(text, cut - 1))
        self.held = text[cut:]
        return hide(text[:cut], [s for s in found.joined() if s[1] <= cut])

    def flush(self) -> str:
        """The redacted rest of a line that ended without a newline."""
        text, self.held, self.in_value, self.in_quoted = self.held, "", False, ""
        return hide(text, find(text, self.forms).joined())


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
