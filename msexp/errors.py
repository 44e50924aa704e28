"""The one exception root of msexp and the errors users see as one line."""

from __future__ import annotations

import json
from typing import Any


class MsexpError(Exception):
    """Root of every error msexp reports to a user; the CLI prints it as one line."""

    exit_code = 1


class SpecError(MsexpError):
    """A sweep file (or a --set option) breaks a rule; reported before anything runs."""

    exit_code = 2

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
    return text if len(text) <= 80 else text[:77] + "..."


def _compact(value: Any) -> str:
    return json.dumps(value, default=str)
