"""`msexp schedule`: Slurm job arrays, crontab entries and Kubernetes CronJobs and Jobs.

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
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from msexp.errors import MsexpError, SpecError
from msexp.paths import CRON_LOG, SLURM_DIR, STORE_DIR
from msexp.urls import redact

WHERE = "msexp schedule"
STOP_NOTICE_S = 60  # SIGTERM this long before Slurm's time limit; the pod's grace period
SKIPPED = 75  # flock's exit code when an earlier scheduled run still holds the lock
PASSED_ENV = ("PGPASSFILE",)  # paths, not secrets: cron starts jobs with an empty environment
K8S_MOUNT = "/work"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # a newline ends a crontab or #SBATCH line
# sbatch splits #SBATCH lines on blanks and reads quotes; Slurm's own syntax (a
# --constraint's & | [ ] *, a %x in a path) is no shell's business there
_SBATCH_VALUE = re.compile(r"[^\s'\"\\\x00-\x1f\x7f]+")
_CRON_FIELD = re.compile(r"[A-Za-z0-9*,/-]+")


def one_line(option: str, value: str) -> str:
    """`value`, if it holds no newline or other control character, which would start a
    line of its own in a crontab or a batch script; else a SpecError."""
    if _CONTROL.search(value):
        raise SpecError(WHERE, option, "must not hold a newline or other control character",
                        ascii(value))
    return value


def _sbatch_value(option: str, value: str) -> str:
    if not _SBATCH_VALUE.fullmatch(one_line(option, value)):
        raise SpecError(WHERE, option, "one #SBATCH value: no blank, quote, backslash "
                        "or control character", value)
    return value


def cron_schedule(schedule: str) -> str:
    """`schedule` if it is five crontab fields, else a SpecError."""
    fields = one_line("--schedule", schedule).split()
    if len(fields) != 5 or not all(_CRON_FIELD.fullmatch(f) for f in fields):
        raise SpecError(WHERE, "--schedule", "a schedule has 5 fields "
                        "(minute hour day month weekday)", schedule)
    return schedule


def _workdir() -> str:
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


def _python_folder() -> str:
    return one_line("the Python", str(Path(sys.executable).parent))


def _local_program() -> str:
    return str(Path(_python_folder()) / "msexp")


def _study_argument(study: str, dated: bool) -> str:
    """`--study`'s value in a shell command: quoted, with a date suffix expanded by the shell
    when each scheduled run starts a fresh study."""
    return shlex.quote(study) + ("-$(date +%Y%m%d)" if dated else "")


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
    worker = target.command("worker", _local_program(), str(target.sweep_file.resolve()))
    if target.study:
        worker += ["--study", target.study]
    lines = ["#!/bin/bash", *(f"#SBATCH {option}" for option in
                              _sbatch_options(job, resources, name)),
             "# Credentials come from the submitting environment (sbatch exports it):",
             "# PGPASSWORD or PGPASSFILE for PostgreSQL, MLFLOW_TRACKING_* for the MLflow server.",
             "set -eo pipefail",
             f"cd {shlex.quote(_workdir())}",
             f'export PATH={shlex.quote(_python_folder())}:"$PATH"',
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
            *target.command("sweep", _local_program(), str(target.sweep_file.resolve()))]
    sweep = f"{shlex.join(argv)} --study {_study_argument(study, fresh_study)}"
    skipped = shlex.quote(f"{study}: skipped, an earlier run still holds {lock}")
    log = shlex.quote(str(CRON_LOG.resolve()))
    command = (f"cd {shlex.quote(_workdir())} && {{ {sweep}; test $? -ne {SKIPPED} || "
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


@dataclass(frozen=True)
class Pods:
    """How Kubernetes runs the workers: image, count, retries, the Secret, resources."""

    image: str = "msexp:latest"
    parallelism: int = 4
    backoff_limit: int = 2
    secret: str = "msexp-db"
    gpu_resource: str = "nvidia.com/gpu"  # or huawei.com/Ascend910


def _k8s_memory(mem: str) -> str:
    """Slurm's --mem (MB, or binary K/M/G/T) as a Kubernetes quantity."""
    return f"{mem}Mi" if mem[-1].isdigit() else f"{mem}i"


def _k8s_resources(resources: Resources, gpu_resource: str) -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": str(resources.cpus)}
    limits: dict[str, Any] = {}
    if resources.mem:
        requests["memory"] = limits["memory"] = _k8s_memory(resources.mem)
    if resources.gpus:  # extended resources are asked for in limits
        limits[gpu_resource] = str(resources.gpus)
    return {"requests": requests, **({"limits": limits} if limits else {})}


def _secret_env(name: str, secret: str, key: str, optional: bool) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": secret, "key": key}
    if optional:
        ref["optional"] = True
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def _job_spec(command: list[str], pods: Pods, resources: Resources, name: str
              ) -> dict[str, Any]:
    """A Job's spec: `pods.parallelism` worker pods, each run to completion."""
    env = [_secret_env("PGPASSWORD", pods.secret, "pgpassword", False),
           _secret_env("MLFLOW_TRACKING_USERNAME", pods.secret, "mlflow-username", True),
           _secret_env("MLFLOW_TRACKING_PASSWORD", pods.secret, "mlflow-password", True),
           {"name": "OMP_NUM_THREADS", "value": str(resources.cpus)}]
    container = {"name": "worker", "image": pods.image, "command": command, "env": env,
                 "resources": _k8s_resources(resources, pods.gpu_resource),
                 "volumeMounts": [{"name": "sweep", "mountPath": K8S_MOUNT,
                                   "readOnly": True}]}
    return {"parallelism": pods.parallelism, "completions": pods.parallelism,
            "backoffLimit": pods.backoff_limit,
            "template": {"spec": {
                "restartPolicy": "Never", "terminationGracePeriodSeconds": STOP_NOTICE_S,
                "containers": [container],
                "volumes": [{"name": "sweep", "configMap": {"name": k8s_name(name)}}]}}}


def k8s_name(name: str) -> str:
    """`msexp-NAME` as a Kubernetes object name (lower case, `-`, at most 52 characters for
    a CronJob's Jobs to be named after it)."""
    return re.sub(r"[^a-z0-9-]+", "-", f"msexp-{name}".lower())[:52].rstrip("-")


def _config_map(target: Target, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": k8s_name(name)},
            "data": {target.sweep_file.name: target.sweep_file.read_text()}}


def _pod_worker(target: Target) -> list[str]:
    return target.command("worker", "msexp", f"{K8S_MOUNT}/{target.sweep_file.name}")


def k8s_cronjob(target: Target, schedule: str, pods: Pods, resources: Resources,
                fresh_study: bool, name: str) -> str:
    """A ConfigMap with the sweep file and a CronJob running `pods.parallelism` worker pods
    per scheduled run; a run never starts while the previous one runs (Forbid)."""
    study = _study_argument(target.study or name, fresh_study)
    cron_schedule(schedule)
    command = ["/bin/sh", "-c", f"exec {shlex.join(_pod_worker(target))} --study {study}"]
    manifest = {
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": k8s_name(name)},
        "spec": {"schedule": schedule, "concurrencyPolicy": "Forbid",
                 "jobTemplate": {"spec": _job_spec(command, pods, resources, name)}},
    }
    return yaml.safe_dump_all([_config_map(target, name), manifest], sort_keys=False)


def k8s_job(target: Target, pods: Pods, resources: Resources, name: str) -> str:
    """A ConfigMap with the sweep file and a one-off Job of `pods.parallelism` worker pods
    sharing the study (the sweep's name, or --study), like a Slurm array."""
    command = _pod_worker(target) + (["--study", target.study] if target.study else [])
    manifest = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": k8s_name(name)},
                "spec": _job_spec(command, pods, resources, name)}
    return yaml.safe_dump_all([_config_map(target, name), manifest], sort_keys=False)
