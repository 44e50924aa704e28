"""How a trial's params become a user's command line: flags or hydra overrides, booleans
as the script's parser expects, `${output_dir}`-style placeholders, and relative paths of
the sweep file's folder made absolute (the command runs in the trial's own folder)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from msexp.execution.script_help import option


def arguments(params: dict[str, Any], style: str, switches: Iterable[str] = ()) -> list[str]:
    """The command-line arguments that pass `params` to a script, in `style`.

    As flags, a boolean of a switch is the flag alone (true) or nothing (false); other
    booleans are `True`/`False`, which `ast.literal_eval` and string-to-bool parsers take.
    A one-letter name is a short option: `-c VALUE`.
    """
    if style == "none":
        return []
    if style == "hydra":
        return [f"{name}={_text(value, 'true', 'false')}" for name, value in params.items()]
    on = set(switches)
    return [word for name, value in params.items() if not (name in on and value is False)
            for word in _flag(name, value, name in on)]


def _flag(name: str, value: Any, switch: bool) -> list[str]:
    text = _text(value, "True", "False")
    if switch:
        return [option(name)]
    return [option(name), text] if len(name) == 1 else [f"--{name}={text}"]


def _text(value: Any, true: str, false: str) -> str:
    if isinstance(value, bool):
        return true if value else false
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def placeholders(folder: Path) -> dict[str, str]:
    """What `${name}` in a param's value stands for in the trial with this folder."""
    number = folder.name.rpartition("-")[2]
    return {"output_dir": str(folder / "outputs"), "trial_dir": str(folder),
            "trial": str(int(number)) if number.isdigit() else folder.name}


def trial_params(params: dict[str, Any], folder: Path, sweep_folder: Path) -> dict[str, Any]:
    """The params as the command gets them: `${output_dir}`, `${trial_dir}` and `${trial}`
    filled in, and a relative path that exists in the sweep file's folder made absolute
    (the command runs in the trial's own folder)."""
    values = placeholders(folder)
    return {name: _absolute(_fill(value, values), sweep_folder)
            for name, value in params.items()}


def _fill(value: Any, values: dict[str, str]) -> Any:
    if not isinstance(value, str) or "${" not in value:
        return value
    return re.sub(r"\$\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), value)


def _absolute(value: Any, folder: Path) -> Any:
    if not isinstance(value, str) or not value or "\n" in value or Path(value).is_absolute():
        return value
    try:
        return str(folder / value) if (folder / value).exists() else value
    except OSError:  # not a path (too long a name)
        return value


def command_argv(argv: list[str], sweep_folder: Path) -> list[str]:
    """The command, its relative paths that exist in the sweep file's folder made absolute,
    a path given as `--flag=PATH` too."""
    program = argv[0] if "/" not in argv[0] else _absolute(argv[0], sweep_folder)
    return [program, *(_absolute_word(a, sweep_folder) for a in argv[1:])]


def _absolute_word(word: str, folder: Path) -> str:
    flag, equals, value = word.partition("=")
    if equals and flag.startswith("-") and value:
        return f"{flag}={_absolute(value, folder)}"
    return _absolute(word, folder)
