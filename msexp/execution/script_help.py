"""What a script's argparse-style `--help` says about its flags.

`--name METAVAR`, `--name {a,b}` and `--name=VALUE` take a value; a flag never shown with
one (`[--amp]`, `--amp    use AMP`) is a switch: present for true, absent for false. A
one-letter name is a short option (`-c CONFIG`); its long form is on its help line
(`-c CONFIG, --config CONFIG`).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

_VALUE = r"(=| (?=[\w{<\[]))?"
_FLAG = re.compile(r"(?<![\w-])--([A-Za-z0-9][\w.\-]*)" + _VALUE)
_SHORT = re.compile(r"(?<![\w-])-([A-Za-z])(?![\w-])" + _VALUE)
_USAGE = re.compile(r"^\W*usage:", re.I | re.M)
_ALIAS = re.compile(r"^[ \t]*-([A-Za-z])(?![\w-])[^,\n]*, --([A-Za-z0-9][\w.\-]*)", re.M)


def flags(help_text: str) -> dict[str, bool]:
    """Each flag the help text lists (without dashes; a short option by its letter), and
    whether it takes a value."""
    found: dict[str, bool] = {}
    for pattern in (_FLAG, _SHORT):
        for name, value in pattern.findall(help_text):
            if pattern is _SHORT or len(name) > 1:  # one letter: a short option's
                found[name] = found.get(name, False) or bool(value)
    found.pop("help", None)
    found.pop("h", None)
    return found


def switches(help_text: str) -> list[str]:
    """The flags the help text shows without a value."""
    return sorted(name for name, takes_value in flags(help_text).items() if not takes_value)


def option(name: str) -> str:
    """`name` as a command line writes it: `-c` for one letter, else `--name`."""
    return f"-{name}" if len(name) == 1 else f"--{name}"


@dataclass(frozen=True)
class Listed:
    """What a `--help` lists: each flag (name -> whether it takes a value) and each short
    option's long form (`c` -> `config`)."""

    flags: dict[str, bool] = field(default_factory=dict)
    long: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, help_text: str) -> Listed:
        """What `help_text` lists; nothing where it is no help page (no `usage:` line, as
        argparse, click and Typer print): a script that echoes its arguments lists none."""
        if not _USAGE.search(help_text):
            return cls()
        return cls(flags(help_text), {short: long for short, long in _ALIAS.findall(help_text)
                                      if long != "help"})

    def refusal(self, name: str) -> str | None:
        """Why `name` cannot be passed as a flag, naming the nearest listed one (a short
        option by its long form); None if it can."""
        if name in self.flags:
            return None
        bare = name.lstrip("-")
        if bare != name and bare in self.flags:
            return ("is written with dashes: a key is the flag's name without them (did you "
                    f"mean {self.long.get(bare, bare)}?)")
        near = difflib.get_close_matches(bare, [n for n in self.flags if len(n) > 1], n=1)
        hint = f" (did you mean {option(near[0])}?)" if near else ""
        return f"is not a flag of the script: its --help lists no {option(bare)}{hint}"
