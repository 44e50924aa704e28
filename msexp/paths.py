"""Where msexp keeps its files: the embedded stores and trial folders under `mlruns/`; the
names that name folders there (never a path); writing a file whole, and reading a file or
a FIFO within a size bound and a wait."""

from __future__ import annotations

import os
import select
import stat
import sys
import time
from pathlib import Path

STORE_DIR = Path("mlruns")
JOURNAL = STORE_DIR / "optuna.journal"
TRIALS_DIR = STORE_DIR / "trials"
SPOOL_DIR = STORE_DIR / "spool"
REPORTS_DIR = STORE_DIR / "reports"
SERVICES_DIR = STORE_DIR / "services"
SLURM_DIR = STORE_DIR / "slurm"
CRON_LOG = STORE_DIR / "cron.log"
LOG_FILE = STORE_DIR / "msexp.log"
MLFLOW_DB = STORE_DIR / "mlflow.db"
DEFAULT_TRACKING_URI = f"sqlite:///{MLFLOW_DB.as_posix()}"
# a sweep's or study's name: it names folders under mlruns/, so it is never a path
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
NAME_RULE = "a name of letters, digits and _.- starting with a letter or digit, not a path"
FIFO_WAIT_S = 30.0  # how long a FIFO given as a file may take to be written and closed


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` so readers see the old content or the new, never a part."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        partial.write_text(text, encoding="utf-8")
    except OSError as exc:  # a failed write or close names no file: say where (a full disk)
        partial.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    os.replace(partial, path)


def search_path() -> str:
    """PATH with this interpreter's folder first: `python` and `msrun` in a command mean
    the environment msexp runs in."""
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def newest_checkpoint(folder: Path) -> Path | None:
    """The most recently written `*.ckpt` under `folder` (a script's ModelCheckpoint
    output), or None."""
    found = sorted(folder.rglob("*.ckpt"), key=lambda path: path.stat().st_mtime)
    return found[-1] if found else None


_KINDS = {stat.S_IFIFO: "FIFO", stat.S_IFCHR: "character device", stat.S_IFBLK: "block device",
          stat.S_IFSOCK: "socket", stat.S_IFDIR: "folder"}


def not_regular(mode: int) -> str | None:
    """What a file of `st_mode` is, if it is not a regular file (a FIFO, a device...)."""
    return None if stat.S_ISREG(mode) else _KINDS.get(stat.S_IFMT(mode), "special file")


def file_folder(path: Path) -> Path:
    """The folder a file's relative paths start from: its own; for a pipe or a FIFO
    (`msexp sweep <(cat f.yaml)`), which is no file of a folder of the user's, the working
    directory."""
    try:
        special = not_regular(path.stat().st_mode)
    except OSError:  # not there: a text given with a name
        special = None
    return Path.cwd() if special else path.parent.resolve()


def read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of `path`: a regular file, or a FIFO or pipe (`msexp sweep <(cat f.yaml)`)
    read until its writer closes it, for at most FIFO_WAIT_S seconds.

    Raises:
        OSError: it cannot be opened, is a device or a folder, is larger than `limit`, or
            its writer did not close it within FIFO_WAIT_S seconds.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens without a writer
    with os.fdopen(fd, "rb") as file:
        kind = not_regular(os.fstat(fd).st_mode)
        if kind == "FIFO":
            data = _read_pipe(fd, limit)
        elif kind:
            raise OSError(0, f"it is a {kind}, not a regular file")
        else:
            data = file.read(limit + 1)
    if len(data) > limit:
        raise OSError(0, f"it is larger than {limit // 1024} KiB")
    return data


def _read_pipe(fd: int, limit: int) -> bytes:
    """Up to `limit + 1` bytes of a pipe, until its end, within FIFO_WAIT_S seconds."""
    deadline = time.monotonic() + FIFO_WAIT_S
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    chunks, size = [], 0
    while size <= limit:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            raise OSError(0, f"it is a FIFO not written and closed within {FIFO_WAIT_S:g} s")
        try:
            chunk = os.read(fd, min(1 << 16, limit + 1 - size))
        except BlockingIOError:  # woken, but another reader took the bytes
            continue
        if not chunk:  # the writer closed it
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
