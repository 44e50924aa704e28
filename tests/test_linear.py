"""Linear time on every byte a trial or a user gives msexp (issue 41): a long output line,
a value of thousands of digits, a catastrophic regex in the sweep file. Each is measured
at two sizes in one run and the times compared as a ratio: doubling the size of a linear
job doubles its time, of a quadratic one quadruples it."""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from msexp.errors import SpecError
from msexp.execution.log_lines import LINE_CHARS, PIECE_CHARS
from msexp.execution.log_metrics import MetricReader, cut_note
from msexp.execution.output import copy_redacted
from msexp.execution.protocol import Command, TrialRequest
from msexp.secrets.redaction import redact
from msexp.spec.load import load_spec
from tests.conftest import write

DOUBLED = 3.0  # a linear job's time at twice the size: about 2; a quadratic one's: 4
CATASTROPHIC = r"(?P<eval_accuracy>(\d+)+)x"


def growth(job: Callable[[int], object], size: int, repeats: int = 5) -> float:
    """How much longer `job` takes at twice `size`: the fastest of `repeats` runs at each
    size, taken in turns, in this process's CPU time (what other load on the machine
    disturbs least)."""
    best = {size: float("inf"), 2 * size: float("inf")}
    for _ in range(repeats):
        for n in best:
            start = time.process_time()
            job(n)
            best[n] = min(best[n], time.process_time() - start)
    return best[2 * size] / best[size]


@pytest.mark.parametrize(("text", "size"), [
    (lambda n: "a" * n, 1_000_000),  # a long hex digest, base64 blob or id
    (lambda n: "http://" + "f" * n, 1_000_000),
    (lambda n: "x://u:" * (n // 6), 200_000),  # URLs that never reach their "@"
    (lambda n: "password='" * (n // 10), 200_000),  # values never closed
    (lambda n: "db=postgresql://u:p@h/x " * (n // 24), 200_000),
    (lambda n: "password='s\\\n" * (n // 13), 200_000),  # each line continued
    (lambda n: "password='" + "s\\'" * (n // 3), 200_000),  # its quotes all escaped
], ids=["letters", "url", "open-urls", "open-values", "many-urls", "continued-values",
        "unclosed-value"])
def test_redaction_is_linear_in_the_text(text: Callable[[int], str], size: int) -> None:
    small, large = text(size), text(2 * size)
    assert growth(lambda n: redact(small if n == size else large), size) < DOUBLED


def test_a_value_of_thousands_of_digits_is_read_in_linear_time() -> None:
    """`acc=` and 4,000 digits (then 8,000) that end in no metric: 4.5 s each before."""
    def lines(digits: int) -> str:
        return ("acc=" + "1" * digits + "x! ") * 7  # under LINE_CHARS: all of it is read

    made = {4000: lines(4000), 8000: lines(8000)}
    assert len(made[8000]) < LINE_CHARS
    assert MetricReader().feed(made[4000]) == {}
    assert growth(lambda n: [MetricReader().feed(made[n]) for _ in range(20)], 4000) < DOUBLED
    assert MetricReader().feed("acc= 0." + "1" * 4000) == {"acc": float("0." + "1" * 4000)}


@pytest.mark.parametrize("unit", ["{ " + " " * 30, "Epoch 1:  50%|", "x: 5%|"],
                         ids=["open-braces", "bars", "bar-values"])
def test_braces_and_progress_bars_are_read_in_linear_time(unit: str) -> None:
    """Many `{` not followed by a key (MindFormers' step block) or many tqdm bars on a line:
    whether each begins a configuration echo or is a bar's percent is decided in linear
    time."""
    made = {n: unit * (n // len(unit)) for n in (15_000, 30_000)}
    assert len(made[30_000]) < LINE_CHARS
    assert MetricReader().feed(made[15_000]) == {}  # mutation: no `_is_bar`: x is 0.05
    assert growth(lambda n: [MetricReader().feed(made[n]) for _ in range(5)], 15_000) < DOUBLED


def test_the_catastrophic_pattern_is_accepted_and_linear(tmp_path: Path) -> None:
    write(tmp_path / "train.sh", "echo 'eval_accuracy: 1'\n")
    spec = load_spec(write(tmp_path / "s.yaml", f"""
        name: catastrophic
        experiment: {{command: sh train.sh, args: none, metrics: ['{CATASTROPHIC}']}}
    """))
    assert spec.command is not None and spec.command.metrics == [CATASTROPHIC]
    reader = MetricReader([CATASTROPHIC])
    digits = {n: "1" * n for n in (30_000, 60_000)}  # no "x": Python's re never ends here
    assert growth(lambda n: [reader.feed(digits[n]) for _ in range(10)], 30_000) < DOUBLED
    assert reader.feed("12x") == {"eval_accuracy": 12.0} and reader.last["eval_accuracy"] == 12


def test_a_pattern_the_linear_engine_cannot_run_is_refused() -> None:
    reader_error = pytest.raises(SpecError, MetricReader, [r"acc=(?P<a>\d)\1"])
    assert "not a regular expression that runs in linear time" in str(reader_error.value)


def long_output(line_chars: int, secret: str) -> str:
    """A line of `line_chars` hex characters with `secret` across the boundary of two
    pieces, a second long line, then a metric."""
    body = "0123456789abcdef" * (line_chars // 16)
    at = PIECE_CHARS - len(secret) // 2
    return (body[:at] + secret + body[at:] + "\n" + "f" * (2 * LINE_CHARS) + "\n"
            + "eval_accuracy: 0.77\n")


def test_a_50_mb_line_is_copied_whole_redacted_and_read_in_linear_time(tmp_path: Path) -> None:
    secret = "S3CRET-token-0123456789"
    outputs = {n: long_output(n, secret) for n in (25_000_000, 50_000_000)}
    readers = {}

    def copy(size: int) -> None:
        readers[size] = MetricReader()
        with (tmp_path / f"trial-{size}.log").open("w", encoding="utf-8") as log:
            copy_redacted(io.StringIO(outputs[size]), log, [secret], readers[size].feed)

    assert growth(copy, 25_000_000, repeats=2) < DOUBLED
    reader = readers[50_000_000]
    assert reader.last == {"eval_accuracy": 0.77}
    assert reader.cut == (1, len(outputs[50_000_000].split("\n")[0]))
    logged = (tmp_path / "trial-50000000.log").read_text(encoding="utf-8")
    note = f"msexp: {cut_note(*reader.cut)}\n"
    assert secret not in logged and logged.count(note) == 1, "said once, for the first"
    assert logged == outputs[50_000_000].replace(secret, "***").replace("\n", "\n" + note, 1)


@pytest.mark.slow  # a trial's command in a subprocess (a few seconds)
def test_a_command_printing_a_50_mb_line_keeps_its_trial(tmp_path: Path) -> None:
    """Issue 41: one 50 MB line then `eval_accuracy: 0.77` ended TIMEOUT with an empty log."""
    from msexp.execution.command import run_command  # the trial side, as the host runs it

    script = ("import sys; sys.stdout.write('ab' * 25_000_000 + '\\n'); "
              "print('eval_accuracy: 0.77')")
    request = TrialRequest("script", {"lr": 0.1}, tmp_path / "t",
                           command=Command([sys.executable, "-c", script], str(tmp_path)))
    request.folder.mkdir(parents=True)
    with request.log_path.open("w", encoding="utf-8") as log:
        metrics, _ = run_command(request, lambda event: None, lambda: False, log)
    assert metrics == {"eval_accuracy": 0.77}
    with request.log_path.open(encoding="utf-8") as log:
        assert log.readline() == "ab" * 25_000_000 + "\n"
        assert log.readline().startswith("msexp: line 1 is 50000000 characters long")
        assert log.readline() == "eval_accuracy: 0.77\n"
