"""Versions of a study: `msexp sweep FILE --restart` after a changed sweep file starts
NAME-v2 (then NAME-v3, ...), marks the version it replaces superseded, and every command
given no `--study` finds the newest version by following those marks from NAME. A NAME
missing from the storage (a lost journal, restarted beside the old trial folders) starts
from its highest version there."""

from __future__ import annotations

import re
from typing import Any

import optuna

from msexp.keys import StudyKey
from msexp.trial_folder import has_trials


def study_attrs(storage: optuna.storages.BaseStorage) -> dict[str, dict[str, Any]]:
    """Every study of the storage: name -> its user attributes."""
    return {s.study_name: s.user_attrs for s in storage.get_all_studies()}


def newest(attrs: dict[str, dict[str, Any]], name: str) -> str:
    """The newest version of study `name` (itself when nothing superseded it)."""
    if name not in attrs:
        versions = {_version(other, name): other for other in attrs} | {0: name}
        name = versions[max(versions)]
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
    """The name and number of the version after `current`: BASE-vN, a name no study of the
    storage and no trial folder takes."""
    number = int(attrs.get(current, {}).get(StudyKey.VERSION, 1)) + 1
    while f"{base}-v{number}" in attrs or ran_before(f"{base}-v{number}"):
        number += 1
    return f"{base}-v{number}", number


def ran_before(name: str) -> bool:
    """Whether trial folders of a study `name` exist under `mlruns/trials/`."""
    return has_trials(name)


def _version(name: str, base: str) -> int:
    """N for BASE-vN, else 0."""
    found = re.fullmatch(rf"{re.escape(base)}-v(\d+)", name)
    return int(found.group(1)) if found else 0
