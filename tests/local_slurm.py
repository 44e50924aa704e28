"""A private single-node Slurm (munged, slurmctld, slurmd) in a temp folder, for tests.

Everything lives in the folder: the key, sockets, state, spool, pids and logs; the ports
are free ones. Clients find it through `SLURM_CONF` (see `Slurm.env`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from msexp.execution.ports import free_port

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "squeue",
            "scancel")
START_S = 60
KILL_WAIT_S = 30  # from SIGTERM to SIGKILL when a job is cancelled or requeued


def missing_programs() -> list[str]:
    """The Slurm and munge programs that are not installed."""
    return [p for p in PROGRAMS if not _which(p)]


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def node_line() -> str:
    """This host as a NodeName line: its CPUs, cores and memory as slurmd sees them."""
    done = subprocess.run([_which("slurmd"), "-C"], capture_output=True, text=True, check=True)
    line = next(x for x in done.stdout.splitlines() if x.startswith("NodeName="))
    return f"{line} NodeAddr=127.0.0.1 State=UNKNOWN"


def _node_name(line: str) -> str:
    return line.split()[0].removeprefix("NodeName=")


@dataclass
class Slurm:
    """A running private Slurm; `stop` cancels its jobs and ends every daemon it started."""

    root: Path
    node: str
    munged: int = 0  # munged forks into the background: its pid, from its pid file
    daemons: list[subprocess.Popen] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """`base` (default: this environment) with the Slurm clients pointed here."""
        return {**(os.environ if base is None else base), "SLURM_CONF": str(self.conf)}

    def run(self, *args: str) -> str:
        """Run a Slurm client (`scontrol`, `squeue`, ...) and return its output."""
        done = subprocess.run([_which(args[0]), *args[1:]], capture_output=True, text=True,
                              env=self.env(), timeout=60)
        if done.returncode:
            raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def stop(self) -> None:
        """Cancel what still runs (its processes get SIGTERM, then SIGKILL after KillWait),
        then stop slurmd, slurmctld and munged."""
        if self.daemons:
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self.run("scancel", "--full", "--user", "root")
                deadline = time.monotonic() + KILL_WAIT_S + 15
                while self.run("squeue", "-h") and time.monotonic() < deadline:
                    time.sleep(0.5)
        for daemon in reversed(self.daemons):
            daemon.terminate()
            try:
                daemon.wait(timeout=15)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        self.daemons.clear()
        if self.munged:
            _stop_pid(self.munged)
            self.munged = 0


def start(root: Path) -> Slurm:
    """Write a slurm.conf for this host under `root` and start munged, slurmctld, slurmd;
    return once `sinfo` shows the node idle."""
    for folder in ("state", "spool", "log", "munge"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    node = node_line()
    slurm = Slurm(root, _node_name(node))
    try:
        slurm.munged = _start_munge(root / "munge")
        slurm.conf.write_text(_conf(root, node, root / "munge" / "socket"))
        (root / "plugstack.conf").touch()
        for daemon in ("slurmctld", "slurmd"):
            log = (root / "log" / f"{daemon}.out").open("ab")
            slurm.daemons.append(subprocess.Popen(
                [_which(daemon), "-D", *(["-c"] if daemon == "slurmctld" else []),
                 "-f", str(slurm.conf)], stdout=log, stderr=subprocess.STDOUT,
                env=slurm.env(), start_new_session=True))
            log.close()
        _wait_idle(slurm)
    except BaseException:
        slurm.stop()
        raise
    return slurm


def _start_munge(folder: Path) -> int:
    key = folder / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)
    pid_file = folder / "munged.pid"
    subprocess.run([_which("munged"), "--force", f"--key-file={key}",
                    f"--socket={folder / 'socket'}", f"--pid-file={pid_file}",
                    f"--log-file={folder / 'munged.log'}", f"--seed-file={folder / 'seed'}"],
                   check=True, capture_output=True, timeout=30)
    return int(pid_file.read_text())


def _conf(root: Path, node: str, munge_socket: Path) -> str:
    name = _node_name(node)
    return "\n".join([
        "ClusterName=msexptest",
        f"SlurmctldHost={name}(127.0.0.1)",
        "SlurmUser=root", "SlurmdUser=root",
        f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={munge_socket}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none", "JobCompType=jobcomp/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        "ReturnToService=2", "MpiDefault=none", "SwitchType=switch/none",
        "SchedulerType=sched/backfill", "SchedulerParameters=sched_interval=1",
        f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
        f"PlugStackConfig={root / 'plugstack.conf'}",
        f"KillWait={KILL_WAIT_S}", "MinJobAge=600",
        node,
        f"PartitionName=test Nodes={name} Default=YES MaxTime=INFINITE State=UP",
    ]) + "\n"


def _wait_idle(slurm: Slurm) -> None:
    deadline = time.monotonic() + START_S
    state = ""
    while time.monotonic() < deadline:
        try:
            state = slurm.run("sinfo", "-h", "-N", "-o", "%T").strip()
        except (RuntimeError, subprocess.TimeoutExpired):
            state = "no answer"
        if state == "idle":
            return
        time.sleep(0.5)
    logs = "\n".join(p.read_text(errors="replace")[-2000:]
                     for p in sorted((slurm.root / "log").glob("*.log")))
    raise RuntimeError(f"the Slurm node is not idle after {START_S} s ({state}):\n{logs}")


def _stop_pid(pid: int) -> None:
    """SIGTERM a process that is not our child and wait until it is gone or a zombie
    (SIGKILL after 15 s)."""
    try:
        proc = psutil.Process(pid)
        proc.terminate()
        deadline = time.monotonic() + 15
        while proc.status() != psutil.STATUS_ZOMBIE:
            if time.monotonic() > deadline:
                proc.kill()
                return
            time.sleep(0.1)
    except psutil.NoSuchProcess:
        return
