"""The study a read command (or the Python API's `load_sweep`) finds: by `--study`, else
the newest version of the sweep's; a read makes no store."""

from __future__ import annotations

from pathlib import Path

import optuna

from msexp.console.library_warnings import optuna_to_log
from msexp.errors import MsexpError, SpecError, Suggestion
from msexp.paths import JOURNAL
from msexp.search.storage import open_storage, storage_errors, storage_label
from msexp.search.versions import newest_name
from msexp.secrets.redaction import redact
from msexp.spec import read_name


def existing_study(file: Path | None, study: str | None, storage: str | None,
                   sweep: str | None = None) -> optuna.Study:
    """The study `--study` names, else the newest version of the sweep's (named `sweep`,
    else read from `file`). A read command makes no store: where the storage is a file
    that does not exist, or holds no such study, it says to sweep first.

    Raises:
        MsexpError: no such study (one line: run `msexp sweep FILE` first).
        SpecError: neither a file, a study nor a sweep's name.
    """
    optuna_to_log()
    if file is None and study is None and sweep is None:
        raise SpecError("msexp", "", "give a sweep file or --study NAME", show_value=False)
    name = study or sweep or read_name(file)  # type: ignore[arg-type]  # file is not None
    if not _store_file_exists(storage):
        raise _never_swept(name, study, storage, file)
    try:
        with storage_errors(storage):
            opened = open_storage(storage)
            if study is None:  # the sweep's newest version (see `msexp sweep --restart`)
                name = newest_name(opened, name)
            return optuna.load_study(study_name=name, storage=opened)
    except KeyError:
        raise _never_swept(name, study, storage, file, storage_label(storage)) from None


def _never_swept(name: str, study: str | None, storage: str | None, file: Path | None,
                 label: str | None = None) -> MsexpError:
    """`no study named 'x' in STORE: run `msexp sweep FILE` first` (with --study and
    --storage where a copy needs them)."""
    where = label or (storage or str(JOURNAL))
    if file is None:
        return MsexpError(f"no study named {name!r} in {redact(where)}")
    return MsexpError(f"no study named {name!r} in {redact(where)}: run `",
                      Suggestion(("sweep", str(file)), study, storage), "` first")


def _store_file_exists(storage: str | None) -> bool:
    """Whether to open the Optuna storage: not where it is a file (the journal, SQLite) that
    does not exist, which opening would make; yet where its folder is a file, opening says
    why it cannot be, and makes nothing. Other storages are taken to exist."""
    prefix = "sqlite:///"
    if storage is None or storage.endswith(".journal"):
        path = Path(storage or JOURNAL)
    elif storage.startswith(prefix) and storage[len(prefix):] not in ("", ":memory:"):
        path = Path(storage[len(prefix):])
    else:
        return True
    return path.exists() or (path.parent.exists() and not path.parent.is_dir())
