"""A process's output copied into its log as it comes, redacted as written, in bounded
pieces (a line of any length costs bounded memory and time linear in its length); the
line of it that says what went wrong (`ErrorLine`)."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterator
from typing import IO, Callable

from msexp.execution.log_metrics import LINE_CHARS, PIECE_CHARS, LineHead, cut_note
from msexp.secrets.redaction import LineRedactor

DRAIN_S = 5.0  # for a process's last output lines to reach its log
_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt): ")


def copy_redacted(output: IO[str], log: IO[str], secrets: list[str],
                  on_line: Callable[[str, int], object] | None = None) -> None:
    """Copy a process's output into a log as it comes, redacted (`urls.LineRedactor`), in
    pieces of at most `PIECE_CHARS`: bounded memory, time linear in a line's length.
    `on_line` gets each line's first `LINE_CHARS` characters and its length; the first
    longer line is noted once in the log. What the log cannot take (a full disk) is
    dropped: the process never blocks on it."""
    copy = _Copy(log, secrets, on_line)
    for piece in iter(lambda: output.readline(PIECE_CHARS), ""):
        copy.add(piece)
    copy.end()


class _Copy:
    """One output's copy into a log, piece by piece."""

    def __init__(self, log: IO[str], secrets: list[str],
                 on_line: Callable[[str, int], object] | None):
        self.log, self.on_line = log, on_line
        self.redactor, self.head, self.noted = LineRedactor(secrets), LineHead(), False

    def add(self, piece: str) -> None:
        _write(self.log, self.redactor.feed(piece))
        line = self.head.add(piece) if self.on_line else None
        if line and self.on_line:
            self.on_line(*line)
            if line[1] > LINE_CHARS and not self.noted:
                self.noted = _write(self.log, f"msexp: {cut_note(self.head.lines, line[1])}\n")

    def end(self) -> None:
        """Write what the redactor holds of a line that has no newline (yet)."""
        _write(self.log, self.redactor.flush())
        if self.on_line and self.head.length:
            self.on_line(*self.head.end())


def _write(log: IO[str], text: str) -> bool:
    with contextlib.suppress(OSError, ValueError):  # ValueError: the log was closed
        log.write(text)
        log.flush()
    return True


@contextlib.contextmanager
def redacted_output(log: IO[str], secrets: list[str]) -> Iterator[None]:
    """This process's stdout and stderr, at the file descriptor level (MindSpore's C++
    logs too, and what it starts), into a pipe whose lines a thread copies into `log`,
    redacted as written (`copy_redacted`). On leaving, both point at /dev/null once a
    last mark has come through the pipe: all written before is in `log` (what a process
    left holding the pipe writes later is copied on, not waited for)."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    os.close(write_end)
    mark, drained = f"msexp-drained-{os.urandom(8).hex()}\n", threading.Event()
    output = os.fdopen(read_end, encoding="utf-8", errors="replace")
    threading.Thread(target=_copy_until_mark, args=(output, log, secrets, mark, drained),
                     daemon=True).start()
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.write(1, mark.encode())
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
        drained.wait(DRAIN_S)


def _copy_until_mark(output: IO[str], log: IO[str], secrets: list[str], mark: str,
                     drained: threading.Event) -> None:
    """`copy_redacted` of a pipe, without `mark`: `drained` is set once all written before
    the mark is in the log (or the pipe closed); what comes after is copied on. A piece's
    end that may begin the mark waits for the next piece."""
    copy, held = _Copy(log, secrets, None), ""
    with output:
        for read in iter(lambda: output.readline(PIECE_CHARS), ""):
            piece, held = held + read, ""
            if mark in piece:
                before, _, after = piece.partition(mark)
                copy.add(before)
                copy.end()
                drained.set()
                piece = after
            elif not piece.endswith("\n"):
                cut = max(0, len(piece) + 1 - len(mark))
                piece, held = piece[:cut], piece[cut:]
            copy.add(piece)
    copy.add(held)
    copy.end()
    drained.set()


class ErrorLine:
    """The line of a process's output (or an error's text) that says what went wrong, fed
    line by line: the exception's own line of the last Python traceback (`TypeError: ...`),
    not what its message goes on with (MindSpore's `(See file '.../analyze_fail.ir' ...)`,
    30 lines below it); without one, the last line that starts with an exception's name;
    else the last line that is not blank. `then` gets every line fed, as `feed` got it."""

    def __init__(self, then: Callable[[str, int], object] | None = None) -> None:
        self.last = self.exception = ""
        self._in_traceback = False
        self._then = then

    def feed(self, line: str, length: int = 0) -> None:
        text = line.strip()
        if text == _TRACEBACK:
            self._in_traceback = True
        elif self._in_traceback and text and not line[0].isspace():  # frames are indented
            self.exception, self._in_traceback = text, False
        elif not self._in_traceback and _EXCEPTION.match(text):
            self.exception = text
        self.last = text or self.last
        if self._then is not None:
            self._then(line, length)

    @property
    def line(self) -> str:
        return self.exception or self.last


def error_line(text: str) -> str:
    """`ErrorLine`'s line of a whole text."""
    found = ErrorLine()
    for line in text.splitlines():
        found.feed(line)
    return found.line
