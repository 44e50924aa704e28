"""File locks (flock): the kernel releases one when its file closes or its holder dies,
even by kill -9, so no lock outlives its process."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def lock_file(handle: IO[Any], *, shared: bool = False, blocking: bool = True) -> bool:
    """Lock the open file `handle`, exclusive unless `shared`, until it is unlocked or
    closed (the lock belongs to the open file: a renamed file keeps it). `blocking`: wait
    for the holder; otherwise return at once. Returns whether this process holds it."""
    mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB)
    try:
        fcntl.flock(handle, mode)
    except BlockingIOError:
        return False
    return True


@contextlib.contextmanager
def flock(path: Path | str, *, shared: bool = False, blocking: bool = True
          ) -> Iterator[bool]:
    """Hold the lock of the file `path` (made if missing, never truncated) while in the
    block, as `lock_file` takes it; yields whether it is held. Released at the block's
    end, also for a forked child that still has the file open."""
    with open(path, "a") as handle:
        held = lock_file(handle, shared=shared, blocking=blocking)
        try:
            yield held
        finally:
            if held:
                fcntl.flock(handle, fcntl.LOCK_UN)
