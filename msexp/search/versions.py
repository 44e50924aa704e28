"""Versions of a study: `msexp sweep FILE --restart` after a changed sweep file starts
NAME-v2 (then NAME-v3, ...), marks the version it replaces superseded, and every command
given no `--study` finds the newest version by following those marks from NAME."""

from __future__ import annotations

from typing import Any

import optuna

from msexp.keys import StudyKey


def study_attrs(storage: optuna.storages.BaseStorage) -> dict[str, dict[str, Any]]:
    """Every study of the storage: name -> its user attributes."""
    return {s.study_name: s.user_attrs for s in storage.get_all_studies()}


def newest(attrs: dict[str, dict[str, Any]], name: str) -> str:
    """The newest version of study `name` (itself when nothing superseded it)."""
    for _ in range(len(attrs)):  # a chain is never longer; this bounds a hand-made loop
        after = attrs.get(name, {}).get(StudyKey.SUPERSEDED_BY)
        if after not in attrs:
            break
        name = after
    return name


def newest_name(storage: optuna.storages.BaseStorage, name: str) -> str:
    """The newest version of study `name` in `storage`."""
    return newest(study_attrs(storage), name)


def next_version(attrs: dict[str, dict[str, Any]], base: str, current: str
                 ) -> tuple[str, int]:
    """The name and number of the version after `current`: BASE-vN, a name not taken."""
    number = int(attrs.get(current, {}).get(StudyKey.VERSION, 1)) + 1
    while f"{base}-v{number}" in attrs:
        number += 1
    return f"{base}-v{number}", number
