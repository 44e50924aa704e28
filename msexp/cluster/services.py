"""`msexp services up|down`: a local PostgreSQL and MLflow server for a team trying msexp.

The password is generated once and kept in a libpq password file (mode 600), so no
URL, MLflow param, tag or log ever contains it: libpq reads it through PGPASSFILE.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from msexp.cluster.pid_files import record_process, recorded_process, stop_group
from msexp.errors import MsexpError
from msexp.execution.ports import free_port
from msexp.os_tools.waiting import wait_until
from msexp.paths import SERVICES_DIR

USER = "msexp"
# every worker holds a few connections of its own (Optuna pool, heartbeat), the MLflow server
# more: PostgreSQL's default of 100 can run out at a few dozen workers
MAX_CONNECTIONS = 400


@dataclass(frozen=True)
class Services:
    """Where the services run and how clients reach them."""

    root: Path
    pg_port: int
    mlflow_port: int

    @property
    def pg_data(self) -> Path:
        """The database folder; as root, one the unprivileged 'postgres' user can reach."""
        if os.geteuid() != 0:
            return self.root / "pg"
        digest = hashlib.sha256(str(self.root).encode()).hexdigest()[:10]
        return Path("/var/tmp") / f"msexp-pg-{digest}"

    @property
    def pgpass(self) -> Path:
        return self.root / "pgpass"

    @property
    def storage_url(self) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.pg_port}/optuna"

    @property
    def backend_url(self) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.pg_port}/mlflow"

    @property
    def tracking_uri(self) -> str:
        return f"http://127.0.0.1:{self.mlflow_port}"

    @property
    def proxy_url(self) -> str:  # msexp's gRPC proxy, once `up(proxy=True)` started it
        port = (self.root / "proxy.port").read_text().strip()
        return f"grpc://127.0.0.1:{port}"

    def env(self) -> dict[str, str]:
        """Environment for clients: PGPASSFILE points libpq at the password file."""
        return {**os.environ, "PGPASSFILE": str(self.pgpass.resolve())}


def pg_bin(name: str) -> str:
    """Path of a PostgreSQL server program (PATH, then Debian's /usr/lib/postgresql)."""
    found = shutil.which(name) or next(iter(sorted(glob.glob(
        f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if not found:
        raise MsexpError(f"PostgreSQL's {name} is not installed; install it "
                         "(Debian: apt-get install postgresql)")
    return found


def _as_db_owner(args: list[str], data_dir: Path) -> list[str]:
    """PostgreSQL refuses to run as root: run its programs as the data folder's owner."""
    if os.geteuid() != 0:
        return args
    owner = pwd.getpwuid(data_dir.stat().st_uid).pw_name
    return ["runuser", "-u", owner, "--", *args]


def _db_user_for_root() -> str:
    try:
        return pwd.getpwnam("postgres").pw_name
    except KeyError:
        raise MsexpError("running as root needs a 'postgres' system user to own the "
                         "database (Debian's postgresql package creates it)") from None


def up(root: Path = SERVICES_DIR, pg_port: int | None = None,
       mlflow_port: int | None = None, mlflow: bool = True, proxy: bool = False,
       proxy_port: int | None = None, max_connections: int = MAX_CONNECTIONS) -> Services:
    """Start PostgreSQL (Optuna + MLflow databases), an MLflow server and, with `proxy`,
    msexp's gRPC proxy of the Optuna database; idempotent."""
    root.mkdir(parents=True, exist_ok=True)
    ports = root / "ports"
    if ports.exists():
        pg_port, mlflow_port = (int(p) for p in ports.read_text().split())
    services = Services(root.resolve(), pg_port or free_port(), mlflow_port or free_port())
    ports.write_text(f"{services.pg_port} {services.mlflow_port}\n")
    _start_postgres(services, max_connections)
    if mlflow:
        _start_mlflow(services)
    if proxy:
        _start_proxy(services, proxy_port)
    return services


def _start_postgres(s: Services, max_connections: int = MAX_CONNECTIONS) -> None:
    data = s.pg_data
    if not (data / "PG_VERSION").exists():
        data.mkdir(parents=True, exist_ok=True)
        data.chmod(0o700)
        if os.geteuid() == 0:
            owner = pwd.getpwnam(_db_user_for_root())
            os.chown(data, owner.pw_uid, owner.pw_gid)
        password = secrets.token_urlsafe(24)
        pwfile = data.parent / f".{data.name}.pw"
        pwfile.write_text(password + "\n")
        pwfile.chmod(0o644)
        try:
            _run(_as_db_owner([pg_bin("initdb"), "-D", str(data), "-U", USER, "--auth=md5",
                               f"--pwfile={pwfile}", "-E", "UTF8"], data), "initdb")
        finally:
            pwfile.unlink()
        s.pgpass.write_text(f"127.0.0.1:{s.pg_port}:*:{USER}:{password}\n")
        s.pgpass.chmod(0o600)
    if not s.pgpass.exists():
        raise MsexpError(f"the database in {data} has no password file at {s.pgpass}: "
                         f"restore it, or remove {data} to start afresh")
    if _run_quiet(_as_db_owner([pg_bin("pg_ctl"), "-D", str(data), "status"], data)):
        return
    _run(_as_db_owner([pg_bin("pg_ctl"), "-D", str(data), "-l", str(data / "postgres.log"),
                       "-w", "-o", f"-p {s.pg_port} -k {data} -c listen_addresses=127.0.0.1 "
                       f"-c max_connections={max_connections}",
                       "start"], data), "pg_ctl start")
    for db in ("optuna", "mlflow"):
        _run_quiet([pg_bin("createdb"), "-w", "-h", "127.0.0.1", "-p", str(s.pg_port), "-U",
                    USER, db], env=s.env())


def _start_mlflow(s: Services) -> None:
    if _healthy(s.tracking_uri):
        return
    log = (s.root / "mlflow.log").open("a")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", s.backend_url,
         "--artifacts-destination", str(s.root / "artifacts"), "--host", "127.0.0.1",
         "--port", str(s.mlflow_port), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, env=s.env(), start_new_session=True)
    record_process(s.root / "mlflow.pid", proc.pid)
    _wait_started(proc, lambda: _healthy(s.tracking_uri), 120, 0.5,
                  f"the MLflow server did not start; see {s.root / 'mlflow.log'}")


def _start_proxy(s: Services, port: int | None) -> None:
    """msexp's gRPC proxy of the Optuna database (`msexp.search.grpc_proxy`), in the background."""
    port_file, pid_file = s.root / "proxy.port", s.root / "proxy.pid"
    if recorded_process(pid_file) is not None:
        return
    port = port or (int(port_file.read_text()) if port_file.exists() else free_port())
    port_file.write_text(f"{port}\n")
    log = (s.root / "proxy.log").open("a")
    proc = subprocess.Popen(
        [sys.executable, "-m", "msexp.search.grpc_proxy", s.storage_url, "127.0.0.1", str(port)],
        stdout=log, stderr=subprocess.STDOUT, env=s.env(), start_new_session=True)
    record_process(pid_file, proc.pid)
    _wait_started(proc, lambda: _listening(port), 60, 0.2,
                  f"the gRPC proxy did not start; see {s.root / 'proxy.log'}")


def _wait_started(proc: subprocess.Popen, up: Callable[[], bool], timeout: float,
                  poll: float, failure: str) -> None:
    """Until the server `proc` started is `up`.

    Raises:
        MsexpError: `failure`, once it exits first or is not up within `timeout`.
    """
    def started() -> bool:
        if up():
            return True
        if proc.poll() is not None:
            raise MsexpError(failure)
        return False

    if not wait_until(started, timeout, poll):
        raise MsexpError(failure)


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
        return True
    return False


def down(root: Path = SERVICES_DIR) -> list[str]:
    """Stop the gRPC proxy, the MLflow server and PostgreSQL started by `up`; returns what
    was stopped."""
    root = root.resolve()
    stopped = []
    proxy = root / "proxy.pid"
    if proxy.exists():
        if (server := recorded_process(proxy)) is not None and stop_group(server):
            stopped.append("grpc proxy")
        proxy.unlink()
    pid_file = root / "mlflow.pid"
    if pid_file.exists():
        server = recorded_process(pid_file) or _old_record(pid_file, root)
        if server is not None and stop_group(server):
            stopped.append("mlflow server")
        pid_file.unlink()
    data = Services(root, 0, 0).pg_data
    if (data / "PG_VERSION").exists() and _run_quiet(
            _as_db_owner([pg_bin("pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], data)):
        stopped.append("postgresql")
    return stopped


def _old_record(pid_file: Path, root: Path) -> psutil.Process | None:
    """The process an old pid file (a bare pid, before start times were recorded) names,
    if it is this folder's MLflow server (as `_start_mlflow` starts it); None if that pid
    is gone. Any other process is refused, unsignalled."""
    try:
        pid = int(pid_file.read_text().strip())
        proc = psutil.Process(pid)
        argv = proc.cmdline()
    except (OSError, ValueError, psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.Error:
        argv = []
    if _is_our_server(argv, root):
        return proc
    raise MsexpError(f"{pid_file} (an old pid file) names pid {pid}, which is not the MLflow "
                     f"server of {root}; nothing was stopped: stop that server yourself and "
                     "remove the file")


def _is_our_server(argv: list[str], root: Path) -> bool:
    """Whether `argv` is `python -m mlflow server` with this folder's artifacts."""
    flag = "--artifacts-destination"
    return (argv[1:4] == ["-m", "mlflow", "server"] and flag in argv[:-1]
            and argv[argv.index(flag) + 1] == str(root / "artifacts"))


def _healthy(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _run(args: list[str], what: str) -> None:
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        raise MsexpError(f"{what} failed: {tail[0]}")


def _run_quiet(args: list[str], env: dict[str, str] | None = None) -> bool:
    return subprocess.run(args, capture_output=True, env=env).returncode == 0
