"""How a process ended: its exit reason (a full disk named), the tail of its log, and the
wait for its exit."""

from __future__ import annotations

import os
import select
import shutil
import signal
import time
from pathlib import Path

from msexp.paths import TRIALS_DIR

LOW_SPACE_BYTES = 1 << 20  # a process that failed with less free space likely ran out of it


def exit_reason(code: int, who: str = "trial process", folder: Path | None = TRIALS_DIR
                ) -> str:
    """How a process ended, from its return code (negative: the signal), and whether the
    disk of `folder` (where trials write) is full."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"{who} was killed by {name}" + space_note(folder)
    return f"{who} exited with code {code}" + (space_note(folder) if code else "")


def space_note(folder: Path | None) -> str:
    """"; no space left on the device of FOLDER ..." if that disk is (nearly) full, else ""."""
    if folder is None:
        return ""
    where = folder.resolve()
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return ""
    if free >= LOW_SPACE_BYTES:
        return ""
    return f"; no space left on the device of {folder.resolve()} ({free} bytes free)"


def tail(path: Path, lines: int) -> str:
    """The last `lines` lines of a log file, or "(no log)"."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def wait_exit(pid: int, timeout: float) -> None:
    """Wait up to `timeout`, returning the moment the child `pid` exits (Linux's pidfd): a
    plain sleep costs every trial half a poll on average after its command ends."""
    try:
        handle = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd here, or the child is reaped already
        time.sleep(timeout)
        return
    try:
        select.select([handle], [], [], timeout)
    finally:
        os.close(handle)
