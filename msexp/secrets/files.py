"""Files that hold secrets (a command's params in clear, a data-parallel trial's request):
outside mlruns/, mode 600, in a per-user folder of mode 700. Each is named by the process
that owns it (pid and start time): its owner removes it, and, should the owner be killed,
the next msexp start does (`remove_orphans`)."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import uuid
from pathlib import Path

import psutil

from msexp.errors import MsexpError


def folder() -> Path:
    """This user's private folder, made with mode 700 if missing; refused if it is not a
    plain folder of this user's, or if its mode lets anyone else in (group or others,
    read, write or enter): the message names the chmod that fixes it."""
    path = Path(tempfile.gettempdir()) / f"msexp-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    found = path.lstat()
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
        raise MsexpError(f"{path}: must be a folder of this user's with mode 700, "
                         f"got mode {stat.filemode(found.st_mode)} of uid {found.st_uid}")
    if found.st_mode & 0o077:  # someone opened it up: say so rather than close it unseen
        raise MsexpError(f"{path}: must have mode 700, as msexp keeps secrets there, got "
                         f"mode {stat.filemode(found.st_mode)}: check who changed it, then "
                         f"chmod 700 {path}")
    return path


def _stamp(pid: int) -> str:
    """A process as a file name names it: pid and start time (a reused pid differs)."""
    return f"{pid}-{psutil.Process(pid).create_time():.2f}"


def write(text: str, suffix: str = ".json") -> Path:
    """A new file of this process's holding `text`, mode 600."""
    path = folder() / f"{_stamp(os.getpid())}-{uuid.uuid4().hex[:8]}{suffix}"
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(text)
    return path


def owner_alive(path: Path) -> bool:
    """Whether the process that wrote `path` still runs (a zombie does not)."""
    pid = path.name.partition("-")[0]
    try:
        return pid.isdigit() and path.name.startswith(_stamp(int(pid)) + "-") and \
            psutil.Process(int(pid)).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def remove_orphans() -> None:
    """Remove the private files whose owner is gone (killed before it could)."""
    path = Path(tempfile.gettempdir()) / f"msexp-{os.getuid()}"
    if not path.is_dir() or path.is_symlink():
        return
    for entry in path.iterdir():
        if not owner_alive(entry):
            entry.unlink(missing_ok=True)
