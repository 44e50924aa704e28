"""What the Python API takes as a sweep: a sweep file's path, or a dict of its sections,
validated as the CLI validates a file."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Union

from msexp.api.quiet import native_output_to_log
from msexp.spec import SweepSpec, load_spec, read_name
from msexp.spec.load import spec_of_data

DICT_SOURCE = "<dict>"  # what a dict's errors name in place of a file
Source = Union[str, "os.PathLike[str]", Mapping[str, object]]


def load(source: Source, local: bool = True) -> SweepSpec:
    """The validated sweep of `source`: a file's path, or a dict of the file's sections.

    Raises:
        SpecError: one line, `FILE: key.path: rule, got VALUE` (FILE `<dict>` for a dict),
            exactly as `msexp validate` says it.
    """
    with native_output_to_log():  # a user's experiment may import MindSpore here
        if isinstance(source, Mapping):
            return spec_of_data(dict(source), DICT_SOURCE, Path(DICT_SOURCE), local)
        return load_spec(Path(source), local)


def sweep_file(source: Source | None) -> Path | None:
    """The path of a sweep file `source`; None for a dict (or none)."""
    if source is None or isinstance(source, Mapping):
        return None
    return Path(source)


def sweep_name(source: Source) -> str:
    """The sweep's `name`, read without validating the rest where `source` is a file."""
    if isinstance(source, Mapping):
        name = source.get("name")
        return name if isinstance(name, str) else load(source, local=False).name
    return read_name(Path(source))
