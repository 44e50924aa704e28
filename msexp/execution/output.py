"""A process's output copied into its log as it comes, redacted as written, in bounded
pieces (a line of any length costs bounded memory and time linear in its length)."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import IO, Callable

from msexp.execution.log_metrics import LINE_CHARS, PIECE_CHARS, LineHead, cut_note
from msexp.urls import LineRedactor

DRAIN_S = 5.0  # for a process's last output lines to reach its log


def copy_redacted(output: IO[str], log: IO[str], secrets: list[str],
                  on_line: Callable[[str, int], object] | None = None) -> None:
    """Copy a process's output into a log as it comes, redacted (`urls.LineRedactor`), in
    pieces of at most `PIECE_CHARS`: bounded memory, time linear in a line's length.
    `on_line` gets each line's first `LINE_CHARS` characters and its length; the first
    longer line is noted once in the log. What the log cannot take (a full disk) is
    dropped: the process never blocks on it."""
    redactor, head, noted = LineRedactor(secrets), LineHead(), False
    for piece in iter(lambda: output.readline(PIECE_CHARS), ""):
        _write(log, redactor.feed(piece))
        line = head.add(piece) if on_line else None
        if line and on_line:
            on_line(*line)
            if line[1] > LINE_CHARS and not noted:
                noted = _write(log, f"msexp: {cut_note(head.lines, line[1])}\n")
    _write(log, redactor.flush())
    if on_line and head.length:
        on_line(*head.end())


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
    output = _UntilMark(os.fdopen(read_end, encoding="utf-8", errors="replace"), mark,
                        drained)
    threading.Thread(target=copy_redacted, args=(output, log, secrets), daemon=True).start()
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


class _UntilMark:
    """A pipe's text without `mark`, by `readline(limit)`; `seen` is set when the mark
    comes or the pipe closes. A piece's end that may begin the mark waits for the next."""

    def __init__(self, stream: IO[str], mark: str, seen: threading.Event):
        self.stream, self.mark, self.seen = stream, mark, seen
        self.held, self.ended = "", False

    def readline(self, limit: int) -> str:
        while not self.ended:
            read = self.stream.readline(limit)
            piece, self.held = self.held + read, ""
            if self.mark in piece:
                piece = piece.replace(self.mark, "")
                self.seen.set()
            elif read and not piece.endswith("\n"):
                cut = max(0, len(piece) + 1 - len(self.mark))
                piece, self.held = piece[:cut], piece[cut:]
            if not read:  # the pipe closed
                self.ended = True
                self.seen.set()
                self.stream.close()
            if piece:
                return piece
        return ""
