"""The one exception root of msexp and the errors users see as one line; a command that a
message suggests, as data (`Suggestion`), which `console/hints.py` writes out."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from msexp.secrets.redaction import redact

_SHOWN = 80


@dataclass(frozen=True)
class Suggestion:
    """An msexp command that a message suggests, as data: its words after `msexp`, and the
    study and stores a copy of it must reach. The CLI writes it out with the options a copy
    needs (`console/hints.py`); `str()` gives only its words."""

    words: tuple[str, ...]
    study: str | None = None
    storage: str | None = None
    tracking_uri: str | None = None

    def __str__(self) -> str:
        return " ".join(["msexp", *self.words])


class MsexpError(Exception):
    """Root of every error msexp reports to a user; the CLI prints it as one line."""

    exit_code = 1

    def __init__(self, *parts: str | Suggestion) -> None:
        """`parts`: the message's text and the commands it suggests, in order."""
        self.parts = parts
        super().__init__("".join(map(str, parts)))


class Refused(MsexpError):
    """Input msexp refuses before anything runs (exit code 2): a sweep file, an option, a
    study that another sweep file made."""

    exit_code = 2


class SpecError(Refused):
    """A sweep file (or a --set option) breaks a rule; reported before anything runs."""

    def __init__(self, source: str, key: str, rule: str, value: Any = None, *, show_value=True):
        self.source, self.key, self.rule, self.value = source, key, rule, value
        got = f", got {format_value(value)}" if show_value else ""
        where = f"{key}: " if key else ""
        super().__init__(f"{source}: {where}{rule}{got}")


class ExperimentError(SpecError):
    """An experiment cannot be imported, has no `build`, or builds the wrong things."""


def format_value(value: Any) -> str:
    """Render a value the way the user wrote it in YAML, shortened to one line."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, bool):
        text = str(value).lower()
    elif value is None:
        text = "null"
    else:
        text = repr(value) if not isinstance(value, (dict, list)) else _compact(value)
    text = " ".join(text.split())
    if len(text) <= _SHOWN:
        return text
    if isinstance(value, str):  # a path's end names what is missing: its start and its end
        return text[:_SHOWN // 2 - 2] + "..." + text[-(_SHOWN - _SHOWN // 2 - 1):]
    return text[:_SHOWN - 3] + "..."


def _compact(value: Any) -> str:
    """JSON text of `value`, rendered only as far as it is shown: a value from a YAML
    alias bomb is huge when written out."""
    text, size = [], 0
    for piece in _json_pieces(value, depth=0):
        text.append(piece)
        size += len(piece)
        if size > 2 * _SHOWN:
            break
    return "".join(text)


def _json_pieces(value: Any, depth: int) -> Iterator[str]:
    """`json.dumps(value, default=str)`, piece by piece."""
    if depth > _SHOWN:
        yield "..."
    elif isinstance(value, dict):
        yield "{"
        for i, (key, item) in enumerate(value.items()):
            name = key if isinstance(key, str) else json.dumps(key, default=str)
            yield (", " if i else "") + json.dumps(name[:2 * _SHOWN]) + ": "
            yield from _json_pieces(item, depth + 1)
        yield "}"
    elif isinstance(value, (list, tuple)):
        yield "["
        for i, item in enumerate(value):
            yield ", " if i else ""
            yield from _json_pieces(item, depth + 1)
        yield "]"
    else:
        yield json.dumps(value[:2 * _SHOWN] if isinstance(value, str) else value, default=str)


def describe(exc: BaseException) -> str:
    """An error as one line, redacted: an MsexpError's own text, else its type and text."""
    text = redact(" ".join(str(exc).split()))[:300]
    return text if isinstance(exc, MsexpError) else f"{type(exc).__name__}: {text}"
