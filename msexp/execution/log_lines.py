"""What one line of a training log says: its numbers, each under a name and with the kind
of line it came from (`log_metrics.MetricReader` reads a whole log with these).

Every function here is linear in the line's length by construction: a value is matched
only after a `:` or `=` (possessive quantifiers: no backtracking into a number), and its
name read from a bounded window before it. A line is read up to `LINE_CHARS`.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any, NamedTuple

LINE_CHARS = 1 << 16  # a longer line is read for metrics up to here (its log keeps it whole)
PIECE_CHARS = 1 << 20  # output is read in pieces of at most this many characters

_NUMBER = r"[-+]?+(?:\d++(?:\.\d*+)?+|\.\d++)(?:[eE][-+]?+\d++)?+|[-+]?+(?:nan|inf)"
_LOSS_MONITOR = re.compile(rf"epoch:\s*+\d++\s++step:\s*+\d++,?+\s*+loss is\s*+\[?+({_NUMBER})",
                           re.I)
_TIME_MONITOR = re.compile(  # from its literal start: a fast search
    rf"epoch time:\s*+({_NUMBER})\s*+ms,\s*+per step time:\s*+({_NUMBER})")
_PROGRESS = re.compile(r"\[\s*+\d++\s*+/\s*+\d++\s*+\]")
_TRAINING = re.compile(r"\b(?:epoch|step|iter|iteration|batch)\b\s*+(?:[:=#\[(]\s*+)?+\d"
                       r"|\bepoch time\s*+:")  # searched in the line in lower case
# a dict's or JSON's `{` (a quoted key or the line's end after it) begins a configuration
# echo; MindFormers' step block `{ Epoch:[ 1/ 2], ..., loss: 8.867, ...` does not
ECHO_START = re.compile(r"\bNamespace\(|\{(?=\s*+(?:['\"]|$))")
_DICT = re.compile(r"\{[^{}]*+\}")
# `: ` or `=`; `:` right before a number (`loss:2.67`, never `10:30`: see `_tight`)
_SEPARATOR = re.compile(r":(?=[\s\[])|=|(?<=[A-Za-z_]):(?=[-+]?+\.?+\d)")
_PLAIN_NAME = re.compile(r"[A-Za-z_]\w*+")
_VALUE = re.compile(
    rf"\s*+(\[\s*+(?:{_NUMBER})\s*+(?:/\s*+(?:{_NUMBER})\s*+)?+\]|(?:{_NUMBER}))"
    r"(%|[A-Za-z]{1,3}+(?![\w(]))?+"  # a percent sign or a unit (ms, s)
    r"(?=$|[\s,;|)\]}])")
_NAME_CHARS = 120  # how far back from its value a name may begin
_PHRASE_WORDS = 4
_TOKEN_CHAR = re.compile(r"[\w.\-/]")
_TOKEN = re.compile(r"[A-Za-z_][\w.\-/]*")
_BEFORE_NAME = re.compile(r"[\w.\-/'\"]")  # a character a name cannot follow
_WORD = re.compile(r"[A-Za-z]+")
_EVALUATION = {"val", "valid", "validation", "validate", "eval", "evaluate", "evaluation",
               "test", "testing"}
_EVALUATION_WORD = re.compile(rf"\b(?:{'|'.join(sorted(_EVALUATION))})\b", re.I)
_VERBS = {"is", "are", "was", "were"}  # "The best validation Top_1_Accuracy is: 10%"
# status messages, not measurements: a best so far announced (`update best result: 0.125`,
# `New best val acc: 10%`), or an event (`saving ...`, `loaded ...`)
_STATUS = {"best", "new", "update", "updated", "updating", "saving", "saved", "loaded",
           "loading", "found", "reached", "restored", "resumed", "resuming", "finished"}


class Value(NamedTuple):
    """A number a line shows under a name, and the kind of line it came from (`shape`): a
    training or an evaluation line, a monitor's, a JSON record, a printed dict."""

    name: str
    number: float
    shape: str
    status: bool = False  # a status message's number (`update best result: 0.125`)


def is_training(text: str) -> bool:
    """Whether a line is a training line: an epoch, step or progress line."""
    return bool(_PROGRESS.search(text) or _TRAINING.search(text.lower()))


def balance(text: str) -> int:
    """Brackets opened and not closed on a line."""
    return sum(text.count(c) for c in "{([") - sum(text.count(c) for c in "})]")


def monitor(text: str) -> list[Value] | None:
    """A LossMonitor or TimeMonitor line's metrics (none for evaluation's timing)."""
    loss = _LOSS_MONITOR.search(text)
    if loss:
        return [Value("train_loss", float(loss.group(1)), "a LossMonitor line")]
    timing = _TIME_MONITOR.search(text)
    if timing:
        evaluation = text.endswith("Eval ", 0, timing.start())
        return [] if evaluation else [Value("step_ms", float(timing.group(2)),
                                            "a TimeMonitor line")]
    return None


def json_record(text: str) -> list[Value] | None:
    """The numbers of a line that is one JSON object (a JSON-lines logger's record)."""
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    return [Value(str(k), float(v), "a JSON record") for k, v in data.items() if _is_value(v)]


def dict_values(text: str) -> tuple[list[Value], str] | None:
    """The numbers of the Python dicts printed on a line (`print(model.eval(...))`) and
    the line without them; None when one holds anything else: a configuration."""
    found: list[Value] = []
    rest, done = [], 0
    for literal in _DICT.finditer(text):
        numbers = _numeric_dict(literal.group())
        if numbers is None:
            return None
        found += [Value(name, number, "a printed dict") for name, number in numbers.items()]
        rest += [text[done:literal.start()], " "]
        done = literal.end()
    rest.append(text[done:])
    return found, "".join(rest)


def pairs(text: str) -> list[Value]:
    """The `name: value` and `name=value` pairs of a line, left to right."""
    found: list[Value] = []
    done = 0  # where the last value read ends
    for separator in _SEPARATOR.finditer(text):
        value = _VALUE.match(text, separator.end())
        if value is None or _is_bar(text, value):
            continue
        end = separator.start()
        while end > 0 and text[end - 1].isspace() and separator.group() == "=":
            end -= 1  # `lr = 0.1`
        named = _name_before(text, end)
        number = _number(value.group(1))
        if named is None or number is None:
            continue
        name, _, status = named
        if _tight(text, separator) and not (_PLAIN_NAME.fullmatch(name) and _measuring(text)):
            continue
        shape = _later_kind(text, done, end, found[-1].shape) if found \
            else _line_kind(text, end)
        found.append(Value(name, number / 100 if value.group(2) == "%" else number,
                           shape, status))
        done = value.end()
    return found


def _tight(text: str, separator: re.Match[str]) -> bool:
    """Whether a separator is a `:` with a number right after it (`loss:2.67`): a pair only
    under a plain name on a training or evaluation line, not `file.py:75` or `host:5000`."""
    return separator.group() == ":" and not text[separator.end()].isspace() and \
        text[separator.end()] != "["


def _measuring(text: str) -> bool:
    return is_training(text) or bool(_EVALUATION_WORD.search(text))


def _is_bar(text: str, value: re.Match[str]) -> bool:
    """Whether a value is a progress bar's percent (tqdm's `Epoch 1:  50%|█████     |`)."""
    return value.group(2) == "%" and text.startswith("|", value.end())


def _line_kind(text: str, end: int) -> str:
    """Whether the words up to a line's first name say it is an evaluation's line
    (`Validation Top_1_Accuracy: ...`, `val loss: ...`) or not."""
    words = {word.lower() for word in _WORD.findall(text, 0, end)}
    return "an evaluation line" if words & _EVALUATION else "a training line"


def _later_kind(text: str, done: int, end: int, kind: str) -> str:
    """The kind of a later pair: an evaluation's from an evaluation word on its own since
    the last value (`train loss=0.53 acc=0.87 | val loss=0.61 acc=0.84`), else the kind
    of the pair before it; `val_acc`'s `val` is part of a name and switches nothing."""
    return "an evaluation line" if _EVALUATION_WORD.search(text, done, end) else kind


def _name_before(text: str, end: int) -> tuple[str, int, bool] | None:
    """The name written right before a value's separator at `end`, where it begins, and
    whether it is a status message's: the last word if it is not a plain word
    (`Validation Top_1_Accuracy` -> `Top_1_Accuracy`), else up to four plain words joined
    (`avg loss` -> `avg_loss`). Searched in a short window: linear in the line."""
    begin = max(0, end - _NAME_CHARS)
    words = text[begin:end].rsplit(" ", _PHRASE_WORDS + 1)
    phrase: list[str] = []
    for word in reversed(words):
        token = _tail_token(word)
        if not token or (phrase and not _WORD.fullmatch(token)):
            break
        phrase.insert(0, token)
        if token != word or not _WORD.fullmatch(token):
            break
    start = end - len(" ".join(phrase))
    if not phrase or (start > 0 and _BEFORE_NAME.match(text, start - 1)):
        return None
    if not _WORD.fullmatch(phrase[-1]):
        return phrase[-1], end - len(phrase[-1]), False
    if len(phrase) > _PHRASE_WORDS or phrase[-1] in _VERBS:
        return None  # prose, not a name
    return "_".join(phrase), start, any(w.lower() in _STATUS for w in phrase)


def _tail_token(word: str) -> str:
    """The name-like end of a word: from the first letter or "_" of its last run of name
    characters (`(train` -> `train`, `12abc` -> `abc`)."""
    run = len(word)
    while run > 0 and _TOKEN_CHAR.match(word, run - 1):
        run -= 1
    token = _TOKEN.search(word, run)
    return token.group() if token and token.end() == len(word) else ""


def _number(written: str) -> float | None:
    if not written.startswith("["):
        return float(written)
    numbers = [n.strip() for n in written.strip("[]").split("/")]
    if len(numbers) == 2 and all(n.isdigit() for n in numbers):
        return None  # [i/n]: progress
    return float(numbers[0])


def _numeric_dict(literal: str) -> dict[str, float] | None:
    """The numbers of a printed Python dict; None when it holds anything else."""
    try:
        data = ast.literal_eval(literal)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(data, dict) or not data or not all(_is_value(v) for v in data.values()):
        return None
    return {str(k): float(v) for k, v in data.items()}


def _is_value(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
