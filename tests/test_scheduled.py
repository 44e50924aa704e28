"""Scheduled runs for real: a Slurm job array, a requeue in mid-trial, and a cron entry firing,
each against a real PostgreSQL and MLflow server."""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import time
from pathlib import Path

import optuna
import psutil
import pytest
from mlflow import MlflowClient

from msexp.cluster.services import Services
from tests.conftest import msexp_cmd, rdb_storage, write
from tests.local_slurm import Slurm

pytestmark = pytest.mark.slow  # Slurm and cron daemons (tests/README.md: tiers)

DEADLINE_S = 300  # for a hang, on a loaded 2-core machine
CRON_FIRES_S = 75


def shared(services: Services) -> list[str]:
    return ["--storage", services.storage_url, "--tracking-uri", services.tracking_uri]


def study_trials(services: Services, name: str) -> list:
    os.environ["PGPASSFILE"] = str(services.pgpass)
    try:
        return optuna.load_study(study_name=name, storage=rdb_storage(services.storage_url)).trials
    except KeyError:
        return []


def runs_by_role(services: Services, experiment: str) -> dict[str, list]:
    client = MlflowClient(services.tracking_uri)
    found = client.get_experiment_by_name(experiment)
    runs: dict[str, list] = {"sweep": [], "trial": []}
    for run in client.search_runs([found.experiment_id]):
        runs[run.data.tags["msexp.role"]].append(run)
    return runs


def submit(slurm: Slurm, services: Services, sweep: Path, *options: str) -> str:
    """`msexp schedule slurm --submit`; returns the array's job id."""
    done = subprocess.run(
        msexp_cmd("schedule", "slurm", str(sweep), "--submit", "--cpus-per-task", "1",
                  "--time", "00:15:00", *options, *shared(services)),
        capture_output=True, text=True, env=slurm.env(services.env()), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return re.search(r"Submitted batch job (\d+)", done.stdout).group(1)


def wait_until_gone(slurm: Slurm, job: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while slurm.run("squeue", "-h", "-j", job).strip():
        assert time.monotonic() < deadline, slurm.run("squeue", "-j", job)
        time.sleep(0.5)


def array_tasks(slurm: Slurm, job: str) -> dict[int, dict[str, str]]:
    """`scontrol show job` of each array task, as {task: {field: value}}."""
    tasks = {}
    for line in slurm.run("scontrol", "show", "job", "-o", job).splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        tasks[int(fields["ArrayTaskId"])] = fields
    return tasks


def describe(tasks: dict[int, dict[str, str]]) -> str:
    return "; ".join(f"task {i}: JobState={t['JobState']} ExitCode={t['ExitCode']} "
                     f"Restarts={t['Restarts']}" for i, t in sorted(tasks.items()))


def leftovers(folder: Path) -> list[psutil.Process]:
    """msexp processes (workers, trial processes) still running in `folder`."""
    found = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        cmdline, cwd = " ".join(proc.info["cmdline"] or []), proc.info["cwd"] or ""
        if "msexp" in cmdline and cwd.startswith(str(folder)) and proc.pid != os.getpid():
            found.append(proc)
    return found


def test_slurm_array_of_two_workers_finishes_a_grid(slurm, shared_services, workdir) -> None:
    sweep = write(workdir / "array.yaml", """
        name: slurm-array
        experiment: mlp_digits
        fixed: {hidden: 16, epochs: 1}
        params:
          lr: [0.01, 0.02]
          micro_size: [1, 2]
    """)
    job = submit(slurm, shared_services, sweep, "--array", "2")
    submitted = time.monotonic()
    while sum(t.state.name == "COMPLETE" for t in study_trials(shared_services, "slurm-array")
              ) < 4:
        assert time.monotonic() - submitted < DEADLINE_S, "the study did not finish"
        time.sleep(0.25)
    finished_s = time.monotonic() - submitted
    wait_until_gone(slurm, job)
    print(f"\nslurm array of 2: submit to study finished {finished_s:.1f} s, to both tasks "
          f"gone {time.monotonic() - submitted:.1f} s")

    tasks = array_tasks(slurm, job)
    print(describe(tasks))
    assert {i: (t["JobState"], t["ExitCode"]) for i, t in tasks.items()} == \
        {0: ("COMPLETED", "0:0"), 1: ("COMPLETED", "0:0")}
    for i in (0, 1):
        output = (workdir / f"mlruns/slurm/msexp-slurm-array-{job}_{i}.out").read_text()
        assert f"array task {i} on " in output and "slurm-array: " in output, output
    trials = study_trials(shared_services, "slurm-array")
    points = {(t.params["lr"], t.params["micro_size"]) for t in trials}
    assert len(trials) == 4 and len(points) == 4, "every grid point exactly once"
    runs = runs_by_role(shared_services, "slurm-array")
    assert len(runs["sweep"]) == 1
    assert sorted(int(r.data.tags["msexp.trial"]) for r in runs["trial"]) == [0, 1, 2, 3]
    assert {r.data.tags["mlflow.parentRunId"] for r in runs["trial"]} == \
        {runs["sweep"][0].info.run_id}
    assert leftovers(workdir) == []


def checkpoint_epoch(folder: Path) -> int:
    try:
        return json.loads((folder / "checkpoints/state.json").read_text())["epoch"]
    except (OSError, ValueError, KeyError):
        return 0


def test_scontrol_requeue_in_mid_trial_resumes_from_the_checkpoint(
        slurm, shared_services, workdir) -> None:
    sweep = write(workdir / "requeue.yaml", """
        name: slurm-requeue
        experiment: broken:build
        fixed: {epochs: 4, pause_s: 1.0, hidden: 16}
        params:
          lr: [0.01, 0.02]
    """)
    job = submit(slurm, shared_services, sweep, "--array", "2")
    trials_dir = workdir / "mlruns/trials/slurm-requeue"
    deadline = time.monotonic() + DEADLINE_S
    while not any(1 <= checkpoint_epoch(t) < 4 for t in trials_dir.glob("trial-*")):
        assert time.monotonic() < deadline, "no trial reached its first checkpoint"
        time.sleep(0.1)
    slurm.run("scontrol", "requeue", job)  # SIGTERM to the job, then PENDING for ~120 s
    while {array_tasks(slurm, job)[i]["JobState"] for i in (0, 1)} != {"PENDING"}:
        assert time.monotonic() < deadline, slurm.run("squeue", "-j", job)
        time.sleep(0.2)
    stopped = {t.name: checkpoint_epoch(t) for t in trials_dir.glob("trial-*")}
    queued = study_trials(shared_services, "slurm-requeue")
    assert {t.state.name for t in queued} <= {"WAITING", "COMPLETE"}
    assert any(t.state.name == "WAITING" for t in queued), "the stopped trial is queued"
    assert all(t.user_attrs.get("attempt", 0) == 0 for t in queued), "a stop costs no retry"
    slurm.run("scontrol", "update", f"JobId={job}", "StartTime=now")
    wait_until_gone(slurm, job)

    tasks = array_tasks(slurm, job)
    print(describe(tasks))
    assert {i: (t["JobState"], t["ExitCode"], t["Restarts"]) for i, t in tasks.items()} == \
        {0: ("COMPLETED", "0:0", "1"), 1: ("COMPLETED", "0:0", "1")}
    outputs = [(workdir / f"mlruns/slurm/msexp-slurm-requeue-{job}_{i}.out").read_text()
               for i in (0, 1)]
    assert all("run 0" in o and "run 1" in o for o in outputs), outputs
    assert any("interrupted: run the same command again" in o for o in outputs), \
        "SIGTERM reached a worker"
    trials = study_trials(shared_services, "slurm-requeue")
    assert sorted(t.number for t in trials) == [0, 1], "same trial numbers, none added"
    assert all(t.state.name == "COMPLETE" for t in trials)
    runs = runs_by_role(shared_services, "slurm-requeue")["trial"]
    assert sorted(int(r.data.tags["msexp.trial"]) for r in runs) == [0, 1], "one child each"
    resumed = {f"trial-{int(r.data.tags['msexp.trial']):04d}": r.data.tags.get(
        "resumed_from_epoch") for r in runs}
    interrupted = [name for name, epoch in stopped.items() if 1 <= epoch < 4]
    assert interrupted and all(resumed[name] for name in interrupted), (stopped, resumed)
    assert leftovers(workdir) == []


def test_cron_entry_fires_and_runs_the_dated_study(cron_daemon, shared_services,
                                                     workdir) -> None:
    sweep = write(workdir / "cron.yaml", """
        name: cronned
        experiment: mlp_digits
        fixed: {hidden: 16, epochs: 1}
        params: {lr: [0.01, 0.02]}
    """)
    schedule = ["schedule", "cron", str(sweep), "--schedule", "* * * * *", *shared(shared_services)]
    env = shared_services.env()
    installed = subprocess.run(msexp_cmd(*schedule, "--install"), capture_output=True,
                               text=True, env=env)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    days = {datetime.date.today()}
    log = workdir / "mlruns/cron.log"
    deadline = time.monotonic() + CRON_FIRES_S
    while not log.exists():
        assert time.monotonic() < deadline, f"cron did not run the entry in {CRON_FIRES_S} s"
        time.sleep(0.5)
    days.add(datetime.date.today())
    removed = subprocess.run(msexp_cmd(*schedule, "--uninstall"), capture_output=True,
                             text=True, env=env)
    assert "removed:" in removed.stdout, removed.stdout + removed.stderr
    names = [f"cronned-{day:%Y%m%d}" for day in sorted(days)]
    deadline = time.monotonic() + DEADLINE_S
    while not any(sum(t.state.name == "COMPLETE" for t in study_trials(shared_services, name))
                  == 2 for name in names):
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.5)
    while leftovers(workdir):  # the sweep exits after its last trial
        assert time.monotonic() < deadline, leftovers(workdir)
        time.sleep(0.2)
