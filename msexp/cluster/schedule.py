"""`msexp schedule`: Slurm job arrays, crontab entries and Kubernetes CronJobs of workers.

Every scheduled process is an `msexp worker` (or a sweep) against shared storage, so
any number of them share one study. Credentials are never written into what this
module produces: they come from the environment (PGPASSWORD, PGPASSFILE,
MLFLOW_TRACKING_USERNAME/PASSWORD) or, on Kubernetes, from a Secret.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from msexp.errors import MsexpError, SpecError
from msexp.paths import CRON_LOG, SLURM_DIR
from msexp.urls import redact


@dataclass(frozen=True)
class Target:
    """What each scheduled process runs."""

    sweep_file: Path
    storage: str
    tracking_uri: str
    study: str | None = None

    def __post_init__(self) -> None:
        for name in ("storage", "tracking_uri"):
            value = getattr(self, name)
            if redact(value) != value:
                raise SpecError("msexp schedule", f"--{name.replace('_', '-')}",
                                "put the password in PGPASSWORD/PGPASSFILE (or a Secret), "
                                "not in the URL", redact(value))

    def command(self, verb: str, program: str, sweep_file: str) -> list[str]:
        """The argv of one scheduled process, without its `--study`."""
        return [program, verb, sweep_file, "--storage", self.storage,
                "--tracking-uri", self.tracking_uri]


def _local_program() -> str:
    return str(Path(sys.executable).parent / "msexp")


def _study_argument(study: str, dated: bool) -> str:
    """`--study`'s value in a shell command: quoted, with a date suffix expanded by the shell
    when each scheduled run starts a fresh study (`%` escaped for crontab when asked)."""
    return shlex.quote(study) + ("-$(date +%Y%m%d)" if dated else "")


def slurm_script(target: Target, array: int, partition: str | None, time: str,
                 cpus_per_task: int, gpus_per_task: int, name: str) -> str:
    """An sbatch script whose `array` tasks each run one `msexp worker`."""
    lines = ["#!/bin/bash", f"#SBATCH --job-name=msexp-{name}",
             f"#SBATCH --array=0-{array - 1}",
             f"#SBATCH --time={time}", f"#SBATCH --cpus-per-task={cpus_per_task}",
             "#SBATCH --ntasks=1",
             f"#SBATCH --output={SLURM_DIR.resolve()}/%x-%A_%a.out"]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if gpus_per_task:
        lines.append(f"#SBATCH --gpus-per-task={gpus_per_task}")
    lines += [
        "# Credentials come from the submitting environment (sbatch exports it):",
        "# PGPASSWORD or PGPASSFILE for PostgreSQL, MLFLOW_TRACKING_* for the MLflow server.",
        "set -euo pipefail",
        f"cd {shlex.quote(str(Path.cwd()))}",
        f'export PATH={shlex.quote(str(Path(sys.executable).parent))}:"$PATH"',
        f"export OMP_NUM_THREADS={cpus_per_task}",
        'echo "array task ${SLURM_ARRAY_TASK_ID:-0} on $(hostname)"',
        "exec " + shlex.join(target.command("worker", _local_program(),
                                            str(target.sweep_file.resolve()))
                             + (["--study", target.study] if target.study else [])),
    ]
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


def cron_line(target: Target, schedule: str, fresh_study: bool, name: str) -> str:
    """A crontab entry: a nightly sweep, in a fresh dated study or continuing one."""
    if len(schedule.split()) != 5:
        raise SpecError("msexp schedule", "--cron", "a schedule has 5 fields "
                        "(minute hour day month weekday)", schedule)
    argv = target.command("sweep", _local_program(), str(target.sweep_file.resolve()))
    study = _study_argument(target.study or name, fresh_study).replace("%", "\\%")
    log = shlex.quote(str(CRON_LOG.resolve()))
    return (f"{schedule} cd {shlex.quote(str(Path.cwd()))} && {shlex.join(argv)} "
            f"--study {study} >> {log} 2>&1")


def install_cron(line: str) -> None:
    """Append `line` to the user's crontab (once)."""
    if not shutil.which("crontab"):
        raise MsexpError("crontab is not installed (Debian: apt-get install cron)")
    current = subprocess.run(["crontab", "-l"], capture_output=True, text=True)
    lines = current.stdout.splitlines() if current.returncode == 0 else []
    if line in lines:
        return
    done = subprocess.run(["crontab", "-"], input="\n".join([*lines, line]) + "\n", text=True,
                          capture_output=True)
    if done.returncode:
        raise MsexpError(f"crontab failed: {done.stderr.strip()}")


def k8s_cronjob(target: Target, schedule: str, image: str, parallelism: int, secret: str,
                fresh_study: bool, name: str) -> str:
    """A Kubernetes CronJob running `parallelism` worker pods per scheduled run."""
    argv = target.command("worker", "msexp", f"/work/{target.sweep_file.name}")
    script = f"{shlex.join(argv)} --study {_study_argument(target.study or name, fresh_study)}"
    manifest = {
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": f"msexp-{name}"},
        "spec": {
            "schedule": schedule, "concurrencyPolicy": "Forbid",
            "jobTemplate": {"spec": {
                "parallelism": parallelism, "completions": parallelism, "backoffLimit": 2,
                "template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": "worker", "image": image,
                        "command": ["/bin/sh", "-c", script],
                        "env": [{"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": {
                            "name": secret, "key": "pgpassword"}}}],
                        "volumeMounts": [{"name": "sweep", "mountPath": "/work"}],
                    }],
                    "volumes": [{"name": "sweep", "configMap": {"name": f"msexp-{name}"}}],
                }},
            }},
        },
    }
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"msexp-{name}"},
              "data": {target.sweep_file.name: target.sweep_file.read_text()}}
    return yaml.safe_dump_all([config, manifest], sort_keys=False)
