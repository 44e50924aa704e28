"""msrun's command line: a script started as local ranks (data-parallel trials, and a
command experiment's ranks)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from msexp.execution.ports import free_port


def msrun_argv(devices: int, log_dir: Path, task: list[str], path: str,
               tail_rank: int | None = None) -> list[str]:
    """msrun starting `task` (a script and its arguments) as `devices` local ranks, logging
    into `log_dir`; with `tail_rank`, that rank's output also goes to msrun's stdout."""
    found = shutil.which("msrun", path=path)
    launcher = [found] if found else [sys.executable, "-m", "mindspore.parallel.cluster.run"]
    tail = devices if tail_rank is None else tail_rank  # a rank that does not exist: none
    return [*launcher, f"--worker_num={devices}", f"--local_worker_num={devices}",
            "--master_addr=127.0.0.1", f"--master_port={free_port()}", f"--log_dir={log_dir}",
            "--join=True", f"--tail_worker_log={tail}", *task]
