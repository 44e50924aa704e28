"""Values under names that say they hold a secret: `password=...`, `api_key: ...`,
`"token": "..."`, `HF_TOKEN=...`. A name says so when it ends in one of the words
`redaction.secret_name` looks for (password, token, secret, key); a name at most
`MAX_NAME` characters long, then `=` or `:`.

Linear in the text: each "=" or ":" looks back at most a bounded stretch for its name,
and each value is scanned once (the next name is looked for past it)."""

from __future__ import annotations

import bisect
import re
from typing import Callable

Span = tuple[int, int]
SECRET_ENDS = ("password", "token", "secret", "key")
MAX_NAME = 100  # a longer run of name characters is a digest or a blob, not a name
_GAP = 16  # spaces between a name and its "=" or ":"
_NAME_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"
_SEPARATOR = re.compile("[=:]")
_SPACES = re.compile(r"\s*")
_LINE_SPACES = re.compile(r"[ \t]*")  # `key:` at a line's end names a section, not a value
_RUNS = {"'": re.compile(r"[^'\\]*"), '"': re.compile(r'[^"\\]*')}
_LINE_RUN = re.compile(r"[^\\\n]*")
_BARE_RUN = re.compile(r"[^\s&'\"]*")
_ESCAPED_RUN = re.compile(r'[^\s"\\]*')  # a value in \"...\": a JSON string inside JSON


class Skip:
    """URL passwords, sorted: a scan over a value passes them as ***."""

    def __init__(self, spans: list[Span]):
        self.starts = [start for start, _ in spans]
        self.ends = [end for _, end in spans]

    def inside(self, at: int) -> bool:
        index = bisect.bisect_right(self.ends, at)
        return index < len(self.starts) and self.starts[index] <= at

    def run(self, pattern: re.Pattern[str], text: str, at: int) -> int:
        """Where `pattern`'s run from `at` ends, URL passwords counted as its characters."""
        while True:
            index = bisect.bisect_right(self.ends, at)
            limit = self.starts[index] if index < len(self.starts) else len(text)
            at = pattern.match(text, at, max(at, limit)).end()
            if at != limit or limit == len(text):
                return at
            at = self.ends[index]


# add(begin, start, end): a form from `begin`, its secret from `start` to `end`;
# undecided(begin): a form from `begin` that the text's end leaves open
Add = Callable[[int, int, int], None]
Undecided = Callable[[int], None]


def keyword_values(text: str, urls: list[Span], add: Add, undecided: Undecided) -> str:
    """Every value under a secret's name that is not inside a URL's password, read as if
    those passwords were already *** (as a value runs over them). Returns the quote of a
    quoted value that goes on past the text's last newline (a backslash before it), or ""."""
    done, continued, skip = 0, "", Skip(urls)
    for separator in _SEPARATOR.finditer(text):
        at = separator.start()
        named = _secret_name_before(text, at) if at >= done and not skip.inside(at) else None
        if named is None:
            continue
        begin, quote = named
        end, continued_here = _value(text, at, begin, quote, skip, add, undecided)
        continued = continued_here or continued
        done = max(done, end)
    _trailing_name(text, undecided)
    return continued


def _secret_name_before(text: str, at: int) -> tuple[int, str] | None:
    """(where it begins, its quote) of the secret's name just before `at`, if one is."""
    low = max(0, at - MAX_NAME - _GAP - 3)
    window = text[low:at]
    kept = window.rstrip(" \t")
    if len(window) - len(kept) > _GAP:
        return None
    quote = kept[-1] if kept.endswith(("'", '"')) else ""
    kept = kept[:-1].removesuffix("\\") if quote else kept
    name = kept[len(kept.rstrip(_NAME_CHARS)):]
    begin = low + len(kept) - len(name)
    if not name or len(name) > MAX_NAME or (begin == low and low and text[low - 1] in _NAME_CHARS):
        return None
    if not name.lower().endswith(SECRET_ENDS):
        return None
    return (begin - 1 if quote and begin and text[begin - 1] == quote else begin), quote


def _value(text: str, at: int, begin: int, quote: str, skip: Skip, add: Add,
           undecided: Undecided) -> tuple[int, str]:
    """The value after the separator at `at`, added: (where it ends, the quote it goes on
    in past the text's last newline, or "")."""
    value = (_SPACES if text[at] == "=" else _LINE_SPACES).match(text, at + 1).end()
    if value >= len(text):
        undecided(begin)  # its value may follow
        return value, ""
    start, end, hidden_end, continued = value, value, value, ""
    if text[value] in _RUNS:
        end, goes_on = quoted_end(text, value + 1, skip, text[value])
        continued = text[value] if goes_on else ""
        if text[value] == '"':  # JSON stays JSON: the quotes stay
            start, hidden_end = value + 1, end - (end > value + 1 and text[end - 1] == '"')
        else:
            hidden_end = end
    elif text.startswith('\\"', value):
        start = value + 2
        end = hidden_end = skip.run(_ESCAPED_RUN, text, start)
    elif quote != '"':  # after a JSON name, a number, true, false or null is no secret
        end = hidden_end = skip.run(_BARE_RUN, text, value)
    if end == len(text):
        undecided(begin)
    if hidden_end > start:
        add(begin, start, hidden_end)
    return end, continued


def _trailing_name(text: str, undecided: Undecided) -> None:
    """A name at the text's end whose separator may come next (or that may go on into a
    secret's name) leaves the text open from its start."""
    low = max(0, len(text) - MAX_NAME - _GAP - 3)
    window = text[low:]
    kept = window.rstrip(" \t")
    if len(window) - len(kept) > _GAP:
        return
    quoted = kept.endswith(("'", '"'))
    kept = kept[:-1].removesuffix("\\") if quoted else kept
    name = kept[len(kept.rstrip(_NAME_CHARS)):]
    begin = low + len(kept) - len(name)
    if not name or (begin == low and low and text[low - 1] in _NAME_CHARS):
        return
    if (len(kept) == len(window) or name.lower().endswith(SECRET_ENDS)):
        undecided(max(0, begin - 2))  # with its quote, escaped or not


def quoted_end(text: str, at: int, skip: Skip, quote: str = "'") -> tuple[int, bool]:
    """Just past the closing quote of a value whose quote is before `at` (a backslash
    escapes any character, a newline too); without one, the end of the value's line
    (`line_end`). With whether the value goes on past the text's last newline."""
    start = at
    while True:
        at = skip.run(_RUNS[quote], text, at)
        if at < len(text) and text[at] == quote:
            return at + 1, False
        if at + 1 >= len(text):  # no closing quote
            return line_end(text, start)
        at += 2


def line_end(text: str, at: int) -> tuple[int, bool]:
    """Where the line from `at` ends (a backslash-newline goes on to the next line), and
    whether it goes on past the text's last newline (kept out of the line)."""
    while True:
        at = _LINE_RUN.match(text, at).end()
        if at >= len(text) or text[at] == "\n":
            return at, False
        if at + 2 >= len(text):
            continued = at + 2 == len(text) and text.endswith("\n")
            return len(text) - continued, continued
        at += 2
