"""The regexes a user writes for metrics (`experiment.metrics`, `msexp metrics --pattern`),
run by RE2: in time linear in the text, whatever the pattern. A pattern RE2 cannot run
that way (a backreference, a lookaround) is refused."""

from __future__ import annotations

from typing import Any

import re2

from msexp.errors import SpecError

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # the refusal is our one line, not RE2's log on stderr


def user_pattern(source: str, key: str, pattern: str) -> Any:
    """`pattern` compiled by RE2; its named groups are metrics.

    Raises:
        SpecError: RE2 cannot run it, or it names no group.
    """
    try:
        compiled = re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(
            exc.args[0], bytes) else str(exc)
        raise SpecError(source, key, f"not a regular expression that runs in linear time "
                        f"({reason}; RE2 syntax: no backreferences or lookarounds)",
                        pattern) from None
    if not compiled.groupindex:
        raise SpecError(source, key, "needs a named group per metric, "
                        "e.g. (?P<eval_accuracy>[0-9.]+)", pattern)
    return compiled
