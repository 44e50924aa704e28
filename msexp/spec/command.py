"""A command experiment: the user's own script, swept over the values its sweep file sets.

Every key in `fixed` and `params` is a knob. A name is the script's own argument, typed
by the values written for it, whatever msexp calls a knob of that name: a script that does
not use `msexp.hooks` gets its values as they are. msexp's rules (`loss_scale` is none,
fixed or dynamic, ...) apply only where msexp applies the knob: `devices` (msrun ranks),
and every knob of a script that uses `msexp.hooks`, unless `experiment.own` names it.
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from msexp.errors import SpecError
from msexp.experiment import Experiment
from msexp.knobs import KNOBS, Knob
from msexp.paths import search_path
from msexp.patterns import user_pattern
from msexp.spec.file import CommandSection

_TYPES = (bool, int, float, str, list)
_IMPORTS_MSEXP = re.compile(r"^\s*(?:from|import)\s+msexp\b", re.M)


def command_experiment(source: str, section: CommandSection, folder: Path,
                       fixed: Mapping[str, Any], params: Mapping[str, Any]) -> Experiment:
    """The experiment of a command section, with a knob for every key the file sets.

    Raises:
        SpecError: the command cannot be split or started, a metrics regex is invalid,
            or an own knob's values do not share one type.
    """
    argv = split_command(source, section.command)
    missing = _missing_program(argv, folder)
    if missing:
        raise SpecError(source, "experiment.command", missing, section.command)
    for i, pattern in enumerate(section.metrics):
        user_pattern(source, f"experiment.metrics.{i}", pattern)  # RE2: linear time
    devices = [fixed.get("devices", 1),
               *(_written_values(params["devices"]) if "devices" in params else [])]
    runs_python = (Path(argv[0]).name.startswith("python") and len(argv) > 1
                   and argv[1].endswith(".py"))
    if any(isinstance(d, (int, float)) and d > 1 for d in devices) and not runs_python:
        raise SpecError(source, "experiment.command", "devices > 1 runs the command as msrun "
                        "ranks, so it must be `python SCRIPT.py ...`", section.command)
    hooks = applies_hooks(section, argv, folder)
    msexps = {n for n in KNOBS if n not in section.own} if hooks else {"devices"}
    knobs = {}
    for where, section_values in (("fixed", fixed), ("params", params)):
        for name, written in section_values.items():
            key = f"{where}.{name}"
            values = _written_values(written) if where == "params" else [written]
            knobs[name] = (_msexp_knob(source, key, name, values) if name in msexps
                           else _own_knob(source, key, values, written))
    return Experiment(section.command, None, {}, knobs, ())


HOOKS_TECHNIQUES = ("micro_size", "amp_level", "amp_dtype", "keep_batchnorm_fp32",
                    "loss_scale", "loss_scale_value", "loss_scale_factor",
                    "loss_scale_window", "drop_overflow_update")
"""msexp's knobs that a script of its own gets only through `msexp.hooks` (`hooks.model`)."""


def needs_hooks(section: CommandSection, folder: Path, name: str) -> str | None:
    """Why a technique the script has no flag for needs `msexp.hooks`, where the script
    does not use it; None for any other name."""
    if name not in HOOKS_TECHNIQUES:
        return None
    if applies_hooks(section, split_command("", section.command), folder):
        return None
    return (f"is msexp's technique, applied only through msexp.hooks (hooks.model, see "
            f"docs/your-code.md): this script does not use msexp.hooks, and its --help lists "
            f"no --{name}")


def applies_hooks(section: CommandSection, argv: list[str], folder: Path) -> bool:
    """Whether msexp.hooks applies msexp's knobs in the command: `hooks` as the file says,
    else whether its script imports msexp."""
    return section.hooks if section.hooks is not None else uses_hooks(argv, folder)


def uses_hooks(argv: list[str], folder: Path) -> bool:
    """Whether the command's Python script imports msexp (its `msexp.hooks`)."""
    script = next((a for a in argv[1:] if a.endswith(".py")), None)
    path = folder / script if script else None
    if path is None or not path.is_file():
        return False
    return bool(_IMPORTS_MSEXP.search(path.read_text(encoding="utf-8", errors="replace")))


def split_command(source: str, command: str) -> list[str]:
    """The command's argv, split as a shell would."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise SpecError(source, "experiment.command", f"cannot be split ({exc})",
                        command) from None
    if not argv:
        raise SpecError(source, "experiment.command", "is empty", command)
    return argv


def _missing_program(argv: list[str], folder: Path) -> str | None:
    program = argv[0]
    if "/" in program:
        if not (folder / program).exists():
            return f"{program} not found in {folder}"
    elif shutil.which(program, path=search_path()) is None:
        return f"{program} is not on PATH"
    script = next((a for a in argv[1:] if a.endswith(".py")), None)
    if Path(program).name.startswith("python") and script and not (folder / script).is_file():
        return f"{script} not found in {folder}"
    return None


def _msexp_knob(source: str, key: str, name: str, values: list[Any]) -> Knob:
    """msexp's knob, with its rules but no default and no condition; a value that breaks
    its rule is a clash with the script's own argument of that name."""
    knob = replace(KNOBS[name], default=None, when={})
    for value in values:
        rule = knob.check(value)
        if rule and knob.choices is not None:
            rule = "must be one of " + ", ".join(str(c) for c in knob.choices)
        if rule and name != "devices":
            raise SpecError(source, key, f"clashes with msexp's knob {name}, which msexp.hooks "
                            f"applies in this script ({rule}); to pass the script's own "
                            f"--{name}, list it in experiment.own", value)
    return knob


def _own_knob(source: str, key: str, values: list[Any], written: Any) -> Knob:
    kinds = {type(v) for v in values}
    if kinds <= {int, float} and float in kinds:
        kinds = {float}
    if len(kinds) != 1 or next(iter(kinds)) not in _TYPES:
        raise SpecError(source, key, "values of the command's own argument must share one "
                        "type (bool, int, float, str or list)", written)
    return Knob(key.partition(".")[2], next(iter(kinds)), None, "an argument of the command")


def _written_values(written: Any) -> list[Any]:
    if isinstance(written, dict):
        if "values" in written:
            written = written["values"]
        else:
            return [written[b] for b in ("low", "high") if b in written] or [written]
    return list(written) if isinstance(written, list) and written else [written]
