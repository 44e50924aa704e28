"""`msexp schedule`: what Slurm job arrays (`slurm`), crontab entries (`cron`) and
Kubernetes CronJobs and Jobs (`kubernetes`) share: the target each runs and its resources.

Every scheduled process is an `msexp worker` (or a sweep) against shared storage, so
any number of them share one study. Credentials are never written into what this
module produces: they come from the environment (PGPASSWORD, PGPASSFILE,
MLFLOW_TRACKING_USERNAME/PASSWORD) or, on Kubernetes, from a Secret.

A worker stopped by SIGTERM (Slurm preemption or `scontrol requeue`, a pod's deletion)
puts its trial back in the queue and exits 143; the next worker continues the trial from
its checkpoint. So every scheduler here delivers SIGTERM to the worker itself: the Slurm
script and the pod command `exec` it.
"""
from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from msexp.errors import SpecError
from msexp.secrets.redaction import redact

WHERE = "msexp schedule"


STOP_NOTICE_S = 60  # SIGTERM this long before Slurm's time limit; the pod's grace period


SKIPPED = 75  # flock's exit code when an earlier scheduled run still holds the lock


PASSED_ENV = ("PGPASSFILE",)  # paths, not secrets: cron starts jobs with an empty environment


K8S_MOUNT = "/work"


_CRON_FIELD = re.compile(r"[A-Za-z0-9*,/-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # a newline ends a crontab or #SBATCH line


def one_line(option: str, value: str) -> str:
    """`value`, if it holds no newline or other control character, which would start a
    line of its own in a crontab or a batch script; else a SpecError."""
    if _CONTROL.search(value):
        raise SpecError(WHERE, option, "must not hold a newline or other control character",
                        ascii(value))
    return value


def workdir() -> str:
    return one_line("the current folder", str(Path.cwd()))


@dataclass(frozen=True)
class Target:
    """What each scheduled process runs."""

    sweep_file: Path
    storage: str
    tracking_uri: str
    study: str | None = None

    def __post_init__(self) -> None:
        one_line("FILE", str(self.sweep_file.resolve()))
        if self.study is not None:
            one_line("--study", self.study)
        for name in ("storage", "tracking_uri"):
            value = one_line(f"--{name.replace('_', '-')}", getattr(self, name))
            if redact(value) != value:
                raise SpecError(WHERE, f"--{name.replace('_', '-')}",
                                "put the password in PGPASSWORD/PGPASSFILE (or a Secret), "
                                "not in the URL", redact(value))

    def command(self, verb: str, program: str, sweep_file: str) -> list[str]:
        """The argv of one scheduled process, without its `--study`."""
        return [program, verb, sweep_file, "--storage", self.storage,
                "--tracking-uri", self.tracking_uri]


@dataclass(frozen=True)
class Resources:
    """What one worker asks for: a Slurm array task, or a Kubernetes pod."""

    cpus: int = 2
    gpus: int = 0
    mem: str | None = None  # Slurm's syntax: a number of MB, or with a K, M, G or T suffix

    def __post_init__(self) -> None:
        if self.mem is not None and not re.fullmatch(r"[1-9][0-9]*[KMGT]?", self.mem):
            raise SpecError(WHERE, "--mem", "a size such as 8G, 512M or 4000 (MB)", self.mem)


def python_folder() -> str:
    return one_line("the Python", str(Path(sys.executable).parent))


def local_program() -> str:
    return str(Path(python_folder()) / "msexp")


def study_argument(study: str, dated: bool) -> str:
    """`--study`'s value in a shell command: quoted, with a date suffix expanded by the shell
    when each scheduled run starts a fresh study."""
    return shlex.quote(study) + ("-$(date +%Y%m%d)" if dated else "")


def cron_schedule(schedule: str) -> str:
    """`schedule` if it is five crontab fields, else a SpecError."""
    fields = one_line("--schedule", schedule).split()
    if len(fields) != 5 or not all(_CRON_FIELD.fullmatch(f) for f in fields):
        raise SpecError(WHERE, "--schedule", "a schedule has 5 fields "
                        "(minute hour day month weekday)", schedule)
    return schedule
