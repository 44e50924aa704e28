"""Metrics read from what a training script prints, built from real model-zoo and mindcv logs.

What is read (tests/assets/logs/ holds the real lines and what each yields):

- `name: value` pairs, several on a line (`epoch time: 14664.571, avg loss: 4.327,
  eval_acc: 0.104167`), and `name=value` pairs. A name is one identifier (`eval_acc`,
  `Top_1_Accuracy`) or up to four plain words joined by `_` (`avg loss` -> `avg_loss`).
- a value printed with `%` is a fraction under the printed name (`10.0000%` -> 0.1); a unit
  after a value is dropped (`time: 3.2s`); a bracketed value is read (`lr:[0.100]`);
- a JSON object on a line (its numbers), and Python dicts of numbers, alone or inside a
  line (`print(model.eval(...))`, `metrics: {...}`);
- MindSpore's `LossMonitor` (as `train_loss`) and `TimeMonitor` (as `step_ms`) lines;
- the sweep's own regexes, whose named groups are metrics, on every line.

What is not: `[i/n]` progress forms, and configuration echoes: a dict or `Namespace(...)`
holding anything but numbers (also when printed over several lines), and every value
printed before the first training line (an epoch, step or progress line) once one comes.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable
from typing import Any

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_LOSS_MONITOR = re.compile(rf"epoch:\s*\d+\s+step:\s*\d+,?\s*loss is\s*\[?({_NUMBER})", re.I)
_TIME_MONITOR = re.compile(
    rf"(Eval )?epoch time:\s*({_NUMBER})\s*ms,\s*per step time:\s*({_NUMBER})")
_PROGRESS = re.compile(r"\[\s*\d+\s*/\s*\d+\s*\]")
_TRAINING = re.compile(r"\b(?:epoch|step|iter|iteration|batch)\b\s*(?:[:=#\[(]\s*)?\d"
                       r"|\bepoch time\s*:", re.I)
_ECHO_START = re.compile(r"\bNamespace\(|\{")
_DICT = re.compile(r"\{[^{}]*\}")
_TOKEN = r"[A-Za-z_][\w.\-/]*"
_VALUE = re.compile(
    rf"(?::(?=[\s\[])\s*|\s*=\s*)"              # `: ` (never `10:30`) or `=`
    rf"(\[\s*(?:{_NUMBER})\s*(?:/\s*(?:{_NUMBER})\s*)?\]|(?:{_NUMBER}))"
    r"(%|[A-Za-z]{1,3}(?![\w(]))?"                 # a percent sign or a unit (ms, s)
    r"(?=$|[\s,;|)\]}])")
_NAME = re.compile(rf"((?:{_TOKEN} )*{_TOKEN})$")  # words separated by one space
_NAME_CHARS = 120  # how far back from its value a name may begin
_BEFORE_NAME = re.compile(r"[\w.\-/'\"]")  # a character a name cannot follow
_PHRASE_WORDS = 4
_PLAIN_WORD = re.compile(r"[A-Za-z]+")
_VERBS = {"is", "are", "was", "were"}  # "The best validation Top_1_Accuracy is: 10%"


class MetricReader:
    """Reads metrics from output lines; keeps the last value of each.

    `last` holds what is recorded: the values printed from the first training line on, or,
    from a script that prints no such line, every value it printed.
    """

    def __init__(self, patterns: Iterable[str] = ()):
        self.patterns = [re.compile(p) for p in patterns]
        self.last_line = ""
        self.started = False
        self._before: dict[str, float] = {}
        self._after: dict[str, float] = {}
        self._chosen: dict[str, float] = {}  # the sweep's regexes: recorded wherever seen
        self._open_echo = 0  # unclosed brackets of a configuration dump

    @property
    def last(self) -> dict[str, float]:
        read = self._after if self.started else self._before
        return {**read, **self._chosen}

    @property
    def echoed(self) -> dict[str, float]:
        """Values printed before the first training line, not recorded once it came."""
        return dict(self._before) if self.started else {}

    def feed(self, line: str) -> dict[str, float]:
        """The metrics in one line (also kept as the latest values)."""
        text = _ANSI.sub("", line).strip()
        self.last_line = text or self.last_line
        chosen = self._patterns(text)
        self._chosen.update(chosen)
        in_echo = self._open_echo > 0
        found = self._read(text)
        if not self.started and not in_echo and _is_training(text):
            self.started = True
        (self._after if self.started else self._before).update(found)
        return {**found, **chosen}

    def _patterns(self, text: str) -> dict[str, float]:
        found = {}
        for pattern in self.patterns:
            match = pattern.search(text)
            if match:
                found.update({k: float(v) for k, v in match.groupdict().items()
                              if v is not None and _is_number(v)})
        return found

    def _read(self, text: str) -> dict[str, float]:
        if self._open_echo:
            self._open_echo = max(0, self._open_echo + _balance(text))
            return {}
        monitor = _monitor(text)
        if monitor is not None:
            return monitor
        record = _json_record(text)
        if record is not None:
            return record
        found: dict[str, float] = {}
        for literal in _DICT.findall(text):
            numbers = _numeric_dict(literal)
            if numbers is None:
                return {}  # a configuration dict
            found.update(numbers)
            text = text.replace(literal, " ")
        if _ECHO_START.search(text):
            self._open_echo = max(0, _balance(text))
            return {}
        return {**_pairs(text), **found}


def _is_training(text: str) -> bool:
    return bool(_PROGRESS.search(text) or _TRAINING.search(text))


def _balance(text: str) -> int:
    return sum(text.count(c) for c in "{([") - sum(text.count(c) for c in "})]")


def _monitor(text: str) -> dict[str, float] | None:
    """A LossMonitor or TimeMonitor line's metrics (none for evaluation's timing)."""
    loss = _LOSS_MONITOR.search(text)
    if loss:
        return {"train_loss": float(loss.group(1))}
    timing = _TIME_MONITOR.search(text)
    if timing:
        return {} if timing.group(1) else {"step_ms": float(timing.group(3))}
    return None


def _json_record(text: str) -> dict[str, float] | None:
    """The numbers of a line that is one JSON object (a JSON-lines logger's record)."""
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    return {str(k): float(v) for k, v in data.items() if _is_value(v)}


def _numeric_dict(literal: str) -> dict[str, float] | None:
    """The numbers of a printed Python dict (`print(model.eval(...))`); None when it holds
    anything else: a configuration."""
    try:
        data = ast.literal_eval(literal)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(data, dict) or not data or not all(_is_value(v) for v in data.values()):
        return None
    return {str(k): float(v) for k, v in data.items()}


def _is_value(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _pairs(text: str) -> dict[str, float]:
    found = {}
    for match in _VALUE.finditer(text):
        words = _words_before(text, match.start())
        name = _name(words) if words else None
        value = _value(match.group(1))
        if name is None or value is None:
            continue
        found[name] = value / 100 if match.group(2) == "%" else value
    return found


def _words_before(text: str, end: int) -> str | None:
    """The name written right before a value's separator (searched in a short window, so
    a long line costs linear time)."""
    begin = max(0, end - _NAME_CHARS)
    match = _NAME.search(text, begin, end)
    if match is None:
        return None
    start = match.start(1)
    if start > 0 and _BEFORE_NAME.match(text[start - 1]):
        return None
    return match.group(1)


def _name(words: str) -> str | None:
    """`Validation Top_1_Accuracy` -> `Top_1_Accuracy`; `avg loss` -> `avg_loss`."""
    parts = words.split(" ")
    if not _PLAIN_WORD.fullmatch(parts[-1]):
        return parts[-1]
    phrase = []
    for part in reversed(parts):
        if not _PLAIN_WORD.fullmatch(part):
            break
        phrase.insert(0, part)
    if len(phrase) > _PHRASE_WORDS or phrase[-1] in _VERBS:
        return None  # prose, not a name
    return "_".join(phrase)


def _value(written: str) -> float | None:
    if not written.startswith("["):
        return float(written)
    numbers = [n.strip() for n in written.strip("[]").split("/")]
    if len(numbers) == 2 and all(n.isdigit() for n in numbers):
        return None  # [i/n]: progress
    return float(numbers[0])


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
