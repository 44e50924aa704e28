"""cron: a crontab entry that starts a sweep or a worker on a schedule, under `flock -n` so
runs never overlap; see `cluster/schedule.py`."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from msexp.cluster.schedule import (
    PASSED_ENV,
    SKIPPED,
    Target,
    cron_schedule,
    local_program,
    one_line,
    study_argument,
    workdir,
)
from msexp.errors import MsexpError
from msexp.paths import CRON_LOG, STORE_DIR


def cron_marker(sweep_file: Path, study: str) -> str:
    """The comment that ends a sweep's crontab entry, so it can be found again."""
    return f"# msexp schedule: study {study}, {sweep_file.resolve()}"


def cron_lock(target: Target, name: str) -> Path:
    """The file a scheduled run holds while it runs; named after the (undated) study."""
    return (STORE_DIR / f"cron-{target.study or name}.lock").resolve()


def cron_line(target: Target, schedule: str, fresh_study: bool, name: str,
              environment: Mapping[str, str]) -> str:
    """A crontab entry: a sweep, in a fresh dated study or continuing one.

    The run holds a lock (`flock -n`): a firing while the previous run of the same
    schedule still runs is skipped, with a line in the log. PGPASSFILE (a path, not a
    secret) is passed on from `environment`, since cron starts jobs with an empty one.
    """
    cron_schedule(schedule)
    study = target.study or name
    lock = str(cron_lock(target, name))
    passed = [f"{key}={one_line(key, environment[key])}" for key in PASSED_ENV
              if environment.get(key)]
    argv = ["flock", "-n", "-E", str(SKIPPED), lock, *(["env", *passed] if passed else []),
            *target.command("sweep", local_program(), str(target.sweep_file.resolve()))]
    sweep = f"{shlex.join(argv)} --study {study_argument(study, fresh_study)}"
    skipped = shlex.quote(f"{study}: skipped, an earlier run still holds {lock}")
    log = shlex.quote(str(CRON_LOG.resolve()))
    command = (f"cd {shlex.quote(workdir())} && {{ {sweep}; test $? -ne {SKIPPED} || "
               f"echo \"$(date '+%F %T')\" {skipped}; }} >> {log} 2>&1 "
               + cron_marker(target.sweep_file, study))
    return f"{schedule} {_crontab_escape(command)}"


def _crontab_escape(command: str) -> str:
    """crontab turns an unescaped % of a command into a newline."""
    return command.replace("%", "\\%")


def _crontab() -> list[str]:
    if not shutil.which("crontab"):
        raise MsexpError("crontab is not installed (Debian: apt-get install cron)")
    current = subprocess.run(["crontab", "-l"], capture_output=True, text=True)
    return current.stdout.splitlines() if current.returncode == 0 else []


def _write_crontab(lines: list[str]) -> None:
    if lines:
        done = subprocess.run(["crontab", "-"], input="\n".join(lines) + "\n", text=True,
                              capture_output=True)
    else:
        done = subprocess.run(["crontab", "-r"], capture_output=True, text=True)
    if done.returncode:
        raise MsexpError(f"crontab failed: {done.stderr.strip()}")


def install_cron(line: str, marker: str) -> None:
    """Put `line` in the user's crontab, replacing the entry with the same marker."""
    kept = [x for x in _crontab() if not x.endswith(_crontab_escape(marker))]
    _write_crontab([*kept, line])


def uninstall_cron(marker: str) -> bool:
    """Remove the entry with `marker` from the user's crontab; False if there was none."""
    lines = _crontab()
    kept = [x for x in lines if not x.endswith(_crontab_escape(marker))]
    if len(kept) == len(lines):
        return False
    _write_crontab(kept)
    return True
