"""Metrics read from what a training script prints, built from real model-zoo and mindcv logs.

What is read (tests/assets/logs/ holds the real lines and what each yields; `log_lines`
reads one line):

- `name: value` pairs, several on a line (`epoch time: 14664.571, avg loss: 4.327,
  eval_acc: 0.104167`), and `name=value` pairs. A name is one identifier (`eval_acc`,
  `Top_1_Accuracy`) or up to four plain words joined by `_` (`avg loss` -> `avg_loss`).
- a value printed with `%` is a fraction under the printed name (`10.0000%` -> 0.1); a unit
  after a value is dropped (`time: 3.2s`); a bracketed value is read (`lr:[0.100]`);
- a JSON object on a line (its numbers), and Python dicts of numbers, alone or inside a
  line (`print(model.eval(...))`, `metrics: {...}`);
- MindSpore's `LossMonitor` (as `train_loss`) and `TimeMonitor` (as `step_ms`) lines;
- the sweep's own regexes (run by RE2), whose named groups are metrics, on every line.

What is not, since it is no measurement: `[i/n]` progress forms and a progress bar's
percent (tqdm's `Epoch 1:  50%|█████     |`); configuration echoes (a dict or
`Namespace(...)` holding anything but numbers, also when printed over several lines: a
`{` before a quoted key or at a line's end; MindFormers' `{ Epoch:[ 1/ 2], ..., loss: 8.867`
is read; and every value printed before the first training line once one comes); status
messages (`update best result: 0.125`, `=> New best val acc: 10%`, `saving ...`); progress
counters (`epoch: 1, acc: 0.25`'s epoch); a value under the name of one of the trial's
params (the `lr` a script prints back); and a name
printed on lines of two kinds (mindcv's `time` after a step's `lr` and after validation's
`Top_5_Accuracy`): which one it means is ambiguous, so it is left out and `msexp metrics`
says so. A line is read up to its first `LINE_CHARS` characters; every step is linear in
the line's length.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from msexp.execution.log_lines import (
    ECHO_START,
    LINE_CHARS,
    PIECE_CHARS,
    Value,
    balance,
    dict_values,
    is_training,
    json_record,
    monitor,
    pairs,
)
from msexp.patterns import user_pattern

# colour codes, and the hyperlinks rich writes round a path (`\x1b]8;id=1;file://...\x1b\\`)
_ANSI = re.compile(r"\x1b\[[0-9;]*+[A-Za-z]|\x1b\][^\x07\x1b]*+(?:\x07|\x1b\\)?+")
STATUS = "a status message, not a measurement"
PARAM = "a param of the trial, printed back"
COUNTER = "a progress counter, not a measurement"
_COUNTERS = {"epoch", "epochs", "step", "steps", "iter", "iters", "iteration", "iterations",
             "batch", "batches", "global_step", "cur_step", "cur_epoch", "current_epoch",
             "current_step", "opt_global_step"}


class MetricReader:
    """Reads metrics from output lines; keeps the last value of each.

    `last` holds what is recorded: the values printed from the first training line on, or,
    from a script that prints no such line, every value it printed; never a name printed
    on lines of two kinds (`ambiguous`), a status message or a param (`left_out`).
    """

    def __init__(self, patterns: Iterable[str] = (), params: Iterable[str] = ()):
        self.patterns = [user_pattern("experiment.metrics", str(i), p)
                         for i, p in enumerate(patterns)]
        self.params = {form for name in params for form in _param_names(name)}
        self.last_line = ""
        self.started = False
        self.lines = 0
        self.cut: tuple[int, int] | None = None  # the first line read only in part: number, length
        self.left_out: dict[str, str] = {}  # name: why it is not a metric
        self._before: dict[str, float] = {}
        self._after: dict[str, float] = {}
        self._chosen: dict[str, float] = {}  # the sweep's regexes: recorded wherever seen
        self._shapes: dict[str, set[str]] = {}  # name: the kinds of line it came from
        self._open_echo = 0  # unclosed brackets of a configuration dump

    @property
    def last(self) -> dict[str, float]:
        read = self._after if self.started else self._before
        ambiguous = self.ambiguous
        return {**{k: v for k, v in read.items() if k not in ambiguous}, **self._chosen}

    @property
    def echoed(self) -> dict[str, float]:
        """Values printed before the first training line, not recorded once it came."""
        return dict(self._before) if self.started else {}

    @property
    def ambiguous(self) -> dict[str, list[str]]:
        """Names printed on lines of two or more kinds: each with those kinds (what was
        printed before it there)."""
        return {name: sorted(shapes) for name, shapes in self._shapes.items()
                if len(shapes) > 1 and name not in self._chosen}

    def feed(self, line: str, length: int | None = None) -> dict[str, float]:
        """The metrics in one line (also kept as the latest values). A line longer than
        `LINE_CHARS` (or whose `length` says so, when only its start is given) is read up
        to there."""
        self.lines += 1
        length = len(line) if length is None else length
        if length > LINE_CHARS:
            line = line[:LINE_CHARS]
            self.cut = self.cut or (self.lines, length)
        text = _ANSI.sub("", line).strip()
        self.last_line = text or self.last_line
        chosen = self._patterns(text)
        self._chosen.update(chosen)
        in_echo = self._open_echo > 0
        found = self._kept(self._read(text, cut=length > LINE_CHARS))
        if not self.started and not in_echo and is_training(text):
            self.started = True
            self._shapes = {}
        for value in found:
            self._shapes.setdefault(value.name, set()).add(value.shape)
        read = {value.name: value.number for value in found}
        (self._after if self.started else self._before).update(read)
        return {**read, **chosen}

    def _kept(self, values: list[Value]) -> list[Value]:
        """The values that are measurements; the others noted in `left_out`."""
        kept = []
        for value in values:
            name = value.name.lower()
            why = STATUS if value.status else PARAM if name in self.params \
                else COUNTER if name in _COUNTERS else ""
            if why:
                self.left_out[value.name] = why
            else:
                kept.append(value)
        return kept

    def _patterns(self, text: str) -> dict[str, float]:
        found = {}
        for pattern in self.patterns:
            match = pattern.search(text)
            if match:
                found.update({k: float(v) for k, v in match.groupdict().items()
                              if v is not None and _is_number(v)})
        return found

    def _read(self, text: str, cut: bool) -> list[Value]:
        if self._open_echo:
            self._open_echo = max(0, self._open_echo + balance(text))
            return []
        for whole in (monitor, json_record):
            values = whole(text)
            if values is not None:
                return values
        dicts = dict_values(text)
        if dicts is None:
            return []  # a configuration dict
        found, rest = dicts
        if ECHO_START.search(rest):
            if not cut:  # a cut line's brackets may close in the part not read
                self._open_echo = max(0, balance(rest))
            return []
        return [*pairs(rest), *found]


def read_log(path: Path, patterns: Iterable[str] = (), params: Iterable[str] = ()
             ) -> MetricReader:
    """A log file read as a trial's output is (in bounded pieces, however long a line)."""
    reader = MetricReader(patterns, params)
    with path.open(encoding="utf-8", errors="replace") as log:
        for line, length in bounded_lines(log):
            reader.feed(line, length)
    return reader


def bounded_lines(stream: IO[str]) -> Iterator[tuple[str, int]]:
    """Each line of a stream, up to its first `LINE_CHARS` characters, and its length;
    read in pieces of at most `PIECE_CHARS`, so a line of any length takes bounded memory."""
    head = LineHead()
    for piece in iter(lambda: stream.readline(PIECE_CHARS), ""):
        line = head.add(piece)
        if line is not None:
            yield line
    if head.length:
        yield head.end()


class LineHead:
    """The start of a line that comes in pieces (up to `LINE_CHARS`) and its length."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.length = 0
        self.lines = 0  # lines ended so far

    def add(self, piece: str) -> tuple[str, int] | None:
        """Take a piece; at the line's end (a newline), the line's start and its length,
        and begin the next line."""
        if self.length < LINE_CHARS:
            self.parts.append(piece[:LINE_CHARS - self.length])
        self.length += len(piece)
        if not piece.endswith("\n"):
            return None
        self.length -= 1  # the newline is no character of the line
        return self.end()

    def end(self) -> tuple[str, int]:
        """The line so far (its start and its length), and begin the next line."""
        line = "".join(self.parts), self.length
        self.parts, self.length = [], 0
        self.lines += 1
        return line


def cut_note(number: int, length: int) -> str:
    """What a trial's log and `msexp metrics` say of a line longer than `LINE_CHARS`."""
    return (f"line {number} is {length} characters long: metrics are read from its "
            f"first {LINE_CHARS} (the log keeps it whole; a longer line is not noted again)")


def _param_names(name: str) -> set[str]:
    """The names a param may be printed under: `optim.lr` as `optim.lr` or `lr`."""
    name = name.lower().lstrip("+-")
    return {name, name.rsplit(".", 1)[-1]}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
