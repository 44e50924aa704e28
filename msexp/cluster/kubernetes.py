"""Kubernetes: a CronJob or Job of worker pods, credentials from a Secret; see
`cluster/schedule.py`."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

import yaml

from msexp.cluster.schedule import (
    K8S_MOUNT,
    STOP_NOTICE_S,
    Resources,
    Target,
    cron_schedule,
    study_argument,
)


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
    study = study_argument(target.study or name, fresh_study)
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
