"""Where a text's secrets are: URL passwords, values under a secret's name (`keywords`)
and known secrets.

Linear in the text by construction: anchors (`://`, `=` and `:`, each known secret) are
found with `str.find` or a literal search, and each stretch after an anchor is scanned a
bounded number of times (`tests/test_linear.py` measures it)."""

from __future__ import annotations

import bisect
import itertools
import re
from dataclasses import dataclass, field

from msexp.secrets.keywords import Skip, keyword_values, quoted_end

Span = tuple[int, int]

# scheme://[user]:password@host. The password may hold "/", ":" and even a raw "@": it
# runs to the "@" after which the authority (up to "/", "?", "#" or a space) holds no
# other "@". Text such as host:port/path@x is redacted too, since it cannot be told from
# a password holding "/": a secret is never shown.
_SCHEME_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+.-"
_LETTER = re.compile(r"[A-Za-z]")
_USER = re.compile(r"[^:@/\s\[\]]*")
_AUTHORITY = re.compile(r"[^\s@/?#]*")
_SPACE = re.compile(r"\s")


@dataclass
class Secrets:
    """The secrets of one text. `constructs` are whole forms (a URL from its scheme to its
    password's end, `password=` to its value's end, a known secret), sorted; `open_from`
    is where the first form that the text's end leaves undecided begins (a URL without its
    "@" yet, a value that may go on), or the text's length; `continued`: the quote of a
    quoted value that goes on past the text's last newline (a backslash before it), or ""."""

    text: str
    spans: list[Span] = field(default_factory=list)
    constructs: list[Span] = field(default_factory=list)
    open_from: int = field(init=False)
    continued: str = ""

    def __post_init__(self) -> None:
        self.open_from = len(self.text)

    def add(self, begin: int, start: int, end: int) -> None:
        self.constructs.append((begin, end))
        self.spans.append((start, end))

    def undecided(self, begin: int) -> None:
        self.open_from = min(self.open_from, begin)

    def cut(self, hold: int) -> int:
        """Where to split the text when more of its line is still to come: what is before
        is final. About `hold` characters are held back; never inside a form, nor after
        the start of an undecided one, as far back as twice the hold allows (a form longer
        than that is passed whole)."""
        text, floor = self.text, max(0, len(self.text) - 2 * hold)
        cut = max(floor, min(len(text) - hold, self.open_from))
        forms = _Forms(self.constructs)
        back = forms.back(cut, floor)
        return forms.past(cut) if back is None else back

    def joined(self) -> list[Span]:
        """The spans sorted, overlapping ones joined into one."""
        joined: list[Span] = []
        for start, end in sorted(self.spans):
            if joined and start < joined[-1][1]:
                joined[-1] = (joined[-1][0], max(end, joined[-1][1]))
            else:
                joined.append((start, end))
        return joined


class _Forms:
    """Forms sorted by where they begin: which split a place, and where none does."""

    def __init__(self, forms: list[Span]):
        self.begins = [begin for begin, _ in forms]
        self.reach = list(itertools.accumulate((end for _, end in forms), max))

    def crossing(self, at: int) -> bool:
        index = bisect.bisect_left(self.begins, at)  # the forms that begin before `at`
        return index > 0 and self.reach[index - 1] > at

    def back(self, at: int, floor: int) -> int | None:
        """The last place at or before `at` and not before `floor` that splits no form."""
        while at >= floor:
            index = bisect.bisect_left(self.begins, at)
            if index == 0 or self.reach[index - 1] <= at:
                return at
            at = self.begins[index - 1]  # no place between splits no form
        return None

    def past(self, at: int) -> int:
        """The first place at or after `at` that splits no form."""
        while self.crossing(at):
            at = self.reach[bisect.bisect_left(self.begins, at) - 1]
        return at


def find(text: str, forms: list[str]) -> Secrets:
    """Every secret of `text`: URL passwords, values under a secret's name, each of
    `forms`."""
    found = Secrets(text)
    _UrlScan(found).run()
    found.continued = keyword_values(text, list(found.spans), found.add, found.undecided)
    for form in forms:
        at = text.find(form)
        while at != -1:
            found.add(at, at, at + len(form))
            at = text.find(form, at + len(form))
    found.constructs.sort()
    return found


def url_passwords(text: str) -> list[Span]:
    """Where the password of each URL in `text` is."""
    found = Secrets(text)
    _UrlScan(found).run()
    return found.spans


def hide(text: str, spans: list[Span]) -> str:
    """`text` with each span (sorted, not overlapping) replaced by ***."""
    if not spans:
        return text
    parts, done = [], 0
    for start, end in spans:
        parts += [text[done:start], "***"]
        done = end
    parts.append(text[done:])
    return "".join(parts)


class _UrlScan:
    """One pass over a text's URLs, each stretch scanned a bounded number of times."""

    def __init__(self, found: Secrets):
        self.found, self.text = found, found.text
        self.done = 0  # just past the last password's "@": no scheme begins before it
        self.no_password_until = -1  # a password starting before here ends at no "@"
        self.next_at, self.searched_from = -1, len(self.text) + 1  # the first "@" from there

    def run(self) -> None:
        at = self.text.find("://")
        while at != -1:
            self._url_at(at)
            at = self.text.find("://", max(at + 1, self.done))

    def _url_at(self, at: int) -> None:
        """The password of the URL whose "://" is at `at`, if it has one."""
        text = self.text
        letter = _LETTER.search(text, _run_start(text, at, self.done), at)
        if letter is None:
            return  # a scheme begins with a letter
        colon = _USER.match(text, at + 3).end()
        start = colon + 1
        if colon == len(text) or (text[colon] == ":" and start == len(text)):
            self.found.undecided(letter.start())  # its user or password may follow
            return
        if text[colon] != ":" or text[start].isspace() or start < self.no_password_until:
            return
        end = self._end(start, letter.start())
        if end is not None:
            self.found.add(letter.start(), start, end)
            self.done = end + 1

    def _end(self, start: int, begin: int) -> int | None:
        """The "@" ending a password that starts at `start`: the first after which the
        authority holds no other "@" (as the lazy `\\S+?@(?=...)` matches)."""
        text = self.text
        if not self.searched_from <= start + 1 <= self.next_at:
            self.next_at, self.searched_from = text.find("@", start + 1), start + 1
        at = self.next_at
        space = _SPACE.search(text, start, len(text) if at == -1 else at)
        if at == -1 or space is not None:
            self.no_password_until = len(text) if space is None else space.start()
            if space is None:
                self.found.undecided(begin)  # its "@" may come
            return None
        while True:
            after = _AUTHORITY.match(text, at + 1).end()
            if after == len(text):
                self.found.undecided(begin)  # a later "@" may move the password's end
            if after == len(text) or text[after] != "@":
                return at
            at = after


def _run_start(text: str, end: int, low: int) -> int:
    """Where the run of scheme characters that ends at `end` begins (not before `low`);
    windows that double keep it linear in the run."""
    width = 64
    while True:
        begin = max(low, end - width)
        kept = text[begin:end].rstrip(_SCHEME_CHARS)
        if kept or begin == low:
            return begin + len(kept)
        width *= 2


def quoted_rest(text: str, quote: str = "'") -> tuple[int, bool]:
    """Where a quoted value that `text` continues ends, as `keywords.quoted_end`."""
    return quoted_end(text, 0, Skip([]), quote)
