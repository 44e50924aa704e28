"""What a script's argparse-style `--help` says about its flags.

`--name METAVAR`, `--name {a,b}` and `--name=VALUE` take a value; a flag never shown with
one (`[--amp]`, `--amp    use AMP`) is a switch: present for true, absent for false.
"""

from __future__ import annotations

import difflib
import re

_FLAG = re.compile(r"(?<![\w-])--([A-Za-z0-9][\w.\-]*)(=| (?=[\w{<\[]))?")


def flags(help_text: str) -> dict[str, bool]:
    """Each flag the help text lists (without `--`), and whether it takes a value."""
    found: dict[str, bool] = {}
    for name, value in _FLAG.findall(help_text):
        found[name] = found.get(name, False) or bool(value)
    found.pop("help", None)
    return found


def switches(help_text: str) -> list[str]:
    """The flags the help text shows without a value."""
    return sorted(name for name, takes_value in flags(help_text).items() if not takes_value)


def unknown_flag(name: str, listed: dict[str, bool]) -> str:
    """Why `name` cannot be passed as a flag, with the nearest listed one."""
    near = difflib.get_close_matches(name, list(listed), n=1)
    hint = f" (did you mean --{near[0]}?)" if near else ""
    return f"is not a flag of the script: its --help lists no --{name}{hint}"
