"""What every command shares: the consoles, the --debug switch and the common options."""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console, ConsoleDimensions

from msexp.errors import MsexpError, SpecError
from msexp.paths import DEFAULT_TRACKING_URI, JOURNAL, NAME_PATTERN, NAME_RULE
from msexp.secrets.redaction import redact

UNBOUNDED_WIDTH = 1 << 16  # columns of a pipe or file: nothing wraps, no cell is cut


class RedactingConsole(Console):
    """A console that never shows a password (every text it prints is redacted) and,
    writing to a pipe or a file, never wraps a line or cuts a table cell."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        super().print(*(redact(o) if isinstance(o, str) else o for o in objects), **kwargs)

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        return size if self.is_terminal else ConsoleDimensions(UNBOUNDED_WIDTH, size.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self.width, self.height = new_size


console = RedactingConsole()
err_console = RedactingConsole(stderr=True)
state: dict[str, Any] = {"debug": False, "argv": []}  # argv: the command line's arguments


def debug_command() -> str:
    """The command that failed, again with --debug (which shows the traceback)."""
    argv = [a for a in state["argv"] if a != "--debug"]
    return shlex.join(["msexp", "--debug", *argv])

SweepFileArg = Annotated[Path, typer.Argument(
    help="The sweep YAML file.", show_default=False, metavar="FILE")]
OptionalSweepFileArg = Annotated[Optional[Path], typer.Argument(
    help="The sweep file (or give --study and --storage).", show_default=False,
    metavar="FILE")]
TrackingOpt = Annotated[Optional[str], typer.Option(
    "--tracking-uri", envvar="MLFLOW_TRACKING_URI", metavar="URI",
    help="MLflow tracking URI.", show_default=DEFAULT_TRACKING_URI)]
StorageOpt = Annotated[Optional[str], typer.Option(
    "--storage", envvar="MSEXP_STORAGE", metavar="URL",
    help="Optuna storage: an RDB URL (postgresql://...) or a .journal file.",
    show_default=str(JOURNAL))]


def study_name(ctx: typer.Context, value: str | None) -> str | None:
    """`--study`'s value if it is a name (it names folders under mlruns/), else a SpecError."""
    if value is not None and not re.fullmatch(NAME_PATTERN, value):
        raise SpecError(ctx.command_path, "--study", NAME_RULE, ascii(value)[1:-1])
    return value


StudyOpt = Annotated[Optional[str], typer.Option(
    "--study", help="Study name; a new name starts afresh.", show_default="the sweep's name",
    callback=study_name, metavar="NAME")]
ReadStudyOpt = Annotated[Optional[str], typer.Option(
    "--study", help="The study to read.", callback=study_name, metavar="NAME",
    show_default="the newest version of the sweep's")]
ColdOpt = Annotated[bool, typer.Option(
    "--cold", help="Compile every trial afresh: no reuse of an earlier trial's graphs.",
    show_default="budget.cold")]


def cold_spec(spec: Any, cold: bool) -> Any:
    """`spec` with `budget.cold` set where `--cold` was given."""
    if not cold:
        return spec
    return dataclasses.replace(spec, budget=spec.budget.model_copy(update={"cold": True}))


def parse_baselines(options: list[str]) -> dict[str, str]:
    """`["micro_size=1"]` -> `{"micro_size": "1"}`."""
    found = {}
    for option in options:
        name, sep, value = option.partition("=")
        if not sep or not name.strip():
            raise MsexpError(f"--baseline {option}: expected KNOB=VALUE, e.g. micro_size=1")
        found[name.strip()] = value.strip()
    return found
