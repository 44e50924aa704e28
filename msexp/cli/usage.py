"""What every help page and usage line looks like: Typer's rich pages with click's
conventions. Paragraphs rewrap to the terminal, a switch shows no value, a value shows
click's metavar (`INTEGER RANGE`, `FILE`) and an argument reads `FILE` in the usage line.

Typer's rich mode keeps a docstring's line breaks inside a paragraph (its markdown mode
joins them, but reads `*` and `_` as emphasis), so a sentence broken at 88 columns in the
source broke mid-line at 80 and 120 on the page. Help texts are rewrapped here, once,
when a command is built.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperGroup

HELP_OPTIONS = ["-h", "--help"]
CONTEXT = {"help_option_names": HELP_OPTIONS}
KEEP_LINES = "\b"  # click's mark: a paragraph that starts with it keeps its line breaks
TYPE_NAMES = {int: "INTEGER", float: "FLOAT", str: "TEXT", bool: "BOOLEAN", Path: "PATH"}


def rewrapped(text: str | None) -> str | None:
    """`text` with each paragraph on one line, for the page to wrap at its width; a
    paragraph that starts with `\\b` keeps its lines (the mark is removed)."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p.removeprefix(KEEP_LINES).strip("\n") if p.startswith(KEEP_LINES)
                       else " ".join(p.split()) for p in paragraphs)


def metavar(param: Any) -> str | None:
    """Click's metavar of a Typer parameter's type: `INTEGER`, `FLOAT RANGE`, `PATH`,
    `[a|b]`; None where Typer's parameter has no type descriptor (a click-based Typer,
    which writes click's own)."""
    kind = getattr(param, "type_descriptor", None)
    if kind is None:
        return None
    if kind.is_choice:
        return "[" + "|".join(str(getattr(c, "value", c)) for c in kind.choices) + "]"
    annotation = kind.annotation
    if kind.is_list:
        annotation = getattr(annotation, "__args__", (str,))[0]
    name = "PATH" if kind.is_path else TYPE_NAMES.get(annotation, "TEXT")
    return f"{name} RANGE" if kind.is_ranged else name


class Argument(TyperArgument):
    """A positional argument as click shows it: `FILE` (required), `[FILE]`, `FILE...`."""

    def get_usage_pieces(self, ctx: Any) -> list[str]:
        name = self.display_name_raw
        name = name if self.required else f"[{name}]"
        return [name + ("..." if self.nargs != 1 else "")]

    def display_type_rich(self, ctx: Any) -> str | None:
        return None  # the name column says it (FILE); click shows no type either


def rewrap_help(command: Any) -> None:
    """Rewrap a command's help texts (`rewrapped`), once, as it is built."""
    command.help = rewrapped(command.help)
    command.short_help = rewrapped(command.short_help)
    command.epilog = rewrapped(command.epilog)


def click_style(params: list[Any]) -> list[Any]:
    """`params` with rewrapped help and click's metavars: a switch none, an argument its
    name in capitals (`FILE`). Idempotent: Typer adds some options after it builds a
    command (`--install-completion`), so this runs where the parameters are read."""
    for param in params:
        param.help = rewrapped(getattr(param, "help", None))
        if isinstance(param, TyperArgument):
            param.__class__ = Argument  # only methods differ: the usage piece, no type shown
            param.metavar = param.metavar or (param.name or "").upper()
        elif getattr(param, "is_flag", False):
            param.metavar = ""  # a switch takes no value: `--check`, not `--check <bool>`
        elif param.metavar is None:
            param.metavar = metavar(param)
    return params


class ClickStyle:
    """Click's conventions on a command's or a group's page (`rewrap_help`,
    `click_style`), mixed into both."""

    params: list[Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        rewrap_help(self)
        click_style(self.params)

    def get_params(self, ctx: Any) -> list[Any]:
        return click_style(super().get_params(ctx))  # type: ignore[misc]


class Command(ClickStyle, TyperCommand):
    """A command with click's conventions on its page."""


class Group(ClickStyle, TyperGroup):
    """A command group with click's conventions on its page."""
