"""Slurm: a job array of workers, each `exec`ing `msexp worker` so that SIGTERM (preemption,
`scontrol requeue`) reaches it; see `cluster/schedule.py`."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from msexp.cluster.schedule import (
    STOP_NOTICE_S,
    WHERE,
    Resources,
    Target,
    local_program,
    one_line,
    python_folder,
    workdir,
)
from msexp.errors import MsexpError, SpecError
from msexp.paths import SLURM_DIR

# sbatch splits #SBATCH lines on blanks and reads quotes; Slurm's own syntax (a
# --constraint's & | [ ] *, a %x in a path) is no shell's business there
_SBATCH_VALUE = re.compile(r"[^\s'\"\\\x00-\x1f\x7f]+")


def _sbatch_value(option: str, value: str) -> str:
    if not _SBATCH_VALUE.fullmatch(one_line(option, value)):
        raise SpecError(WHERE, option, "one #SBATCH value: no blank, quote, backslash "
                        "or control character", value)
    return value


@dataclass(frozen=True)
class SlurmJob:
    """The #SBATCH options and setup lines of a job array of workers."""

    array: int = 4
    time: str = "04:00:00"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    extra: tuple[str, ...] = ()  # more #SBATCH options, e.g. "--constraint=v100"
    setup: tuple[str, ...] = ()  # shell lines before the worker: module loads, activations

    def __post_init__(self) -> None:
        for option in self.extra:
            if not option.startswith("-") or not _SBATCH_VALUE.fullmatch(option):
                raise SpecError(WHERE, "--sbatch", "one sbatch option, such as "
                                "--constraint=v100", ascii(option))
        for name in ("time", "partition", "account", "qos"):
            if getattr(self, name) is not None:
                _sbatch_value(f"--{name}", getattr(self, name))
        for line in self.setup:
            one_line("--setup", line)


def _sbatch_options(job: SlurmJob, resources: Resources, name: str) -> list[str]:
    output = _sbatch_value("the current folder", f"{SLURM_DIR.resolve()}/%x-%A_%a.out")
    options = [f"--job-name=msexp-{name}", f"--array=0-{job.array - 1}", f"--time={job.time}",
               "--ntasks=1", f"--cpus-per-task={resources.cpus}",
               f"--output={output}", "--open-mode=append",
               "--requeue", f"--signal=B:TERM@{STOP_NOTICE_S}"]
    named = {"partition": job.partition, "account": job.account, "qos": job.qos,
             "mem": resources.mem, "gpus-per-task": resources.gpus or None}
    options += [f"--{key}={value}" for key, value in named.items() if value]
    return options + list(job.extra)


def slurm_script(target: Target, job: SlurmJob, resources: Resources, name: str) -> str:
    """An sbatch script whose `job.array` tasks each run one `msexp worker`.

    The worker replaces the batch shell (`exec`), so the SIGTERM of a preemption, of
    `scontrol requeue` or of `--signal=B:TERM` before the time limit reaches it; it
    queues its trial again, and `--requeue` restarts the task, which continues the trial
    from its checkpoint. Output of every run of a task goes to one file (append).
    """
    worker = target.command("worker", local_program(), str(target.sweep_file.resolve()))
    if target.study:
        worker += ["--study", target.study]
    lines = ["#!/bin/bash", *(f"#SBATCH {option}" for option in
                              _sbatch_options(job, resources, name)),
             "# Credentials come from the submitting environment (sbatch exports it):",
             "# PGPASSWORD or PGPASSFILE for PostgreSQL, MLFLOW_TRACKING_* for the MLflow server.",
             "set -eo pipefail",
             f"cd {shlex.quote(workdir())}",
             f'export PATH={shlex.quote(python_folder())}:"$PATH"',
             f"export OMP_NUM_THREADS={resources.cpus}",
             *job.setup,
             'echo "array task ${SLURM_ARRAY_TASK_ID:-0} on $(hostname),'
             ' run ${SLURM_RESTART_COUNT:-0}"',
             "exec " + shlex.join(worker)]
    return "\n".join(lines) + "\n"


def write_slurm(script: str, path: Path, submit: bool) -> str | None:
    """Write the script; with `submit`, sbatch it and return sbatch's answer."""
    path.parent.mkdir(parents=True, exist_ok=True)
    SLURM_DIR.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    path.chmod(0o755)
    if not submit:
        return None
    if not shutil.which("sbatch"):
        raise MsexpError("sbatch is not on PATH: run this on a Slurm login node")
    done = subprocess.run(["sbatch", str(path)], capture_output=True, text=True)
    if done.returncode:
        raise MsexpError(f"sbatch failed: {done.stderr.strip()}")
    return done.stdout.strip()
