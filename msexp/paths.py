"""Where msexp keeps its files: the embedded stores and trial folders under `mlruns/`."""

from __future__ import annotations

import os
import sys
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


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` so readers see the old content or the new, never a part."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(text, encoding="utf-8")
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
