"""A user's command as a trial: a helper that leaves the session with a cleared environment
dies with the trial, and no secret of msexp's environment reaches the command or any file
under mlruns/."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import psutil

from msexp.execution.host import Host
from msexp.execution.process import kill_processes
from msexp.execution.protocol import Status
from msexp.search.requests import trial_request
from msexp.spec.load import load_spec
from tests.conftest import msexp_cmd, write
from tests.fault.conftest import (
    DEADLINE_S,
    assert_invariants,
    assert_no_process_left,
    assert_no_secret_under_mlruns,
    assert_nothing_running,
    load_study,
)

SECRETS = {"PGPASSWORD": "S3CRET-pg", "MLFLOW_TRACKING_PASSWORD": "S3CRET-mlflow",
           "HF_TOKEN": "S3CRET-hf", "AWS_SECRET_ACCESS_KEY": "S3CRET-aws",
           "OPENAI_API_KEY": "S3CRET-key", "DATA_URL": "https://u:S3CRET-url@data.example/x"}


def command_sweep(name: str, script: str, budget: str = "retries: 0") -> Path:
    path = write(Path(f"{name}.sh"), f"""
        [ "$1" = --help ] && exit 0
        {script}
        echo "eval_accuracy: 0.9"
    """)
    return write(Path(f"{name}.yaml"), f"""
        name: {name}
        experiment: {{command: sh {path.name}, args: none}}
        budget: {{{budget}}}
        params: {{point: [0, 1]}}
    """)


def sweep(path: Path, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(msexp_cmd("sweep", str(path)), capture_output=True, text=True,
                          timeout=DEADLINE_S, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stdout + done.stderr


def sleeping(token: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if proc.info["cmdline"] == ["sleep", token]:
            found.append(proc)
    return found


def test_a_setsid_helper_with_a_cleared_environment_dies_with_the_trial(mark: str) -> None:
    token = f"1{uuid.uuid4().int % 10**6}.5"  # seconds: a command line no one else has
    try:
        sweep(command_sweep("detached", f"env -i setsid sleep {token} >/dev/null 2>&1 &\n"
                                        "sleep 0.2"))
        assert not sleeping(token), "the helper outlived its trial"
        assert_invariants("detached", "detached", mark, [{"point": 0}, {"point": 1}])
    finally:
        kill_processes(sleeping(token))


def test_an_orphaned_helper_with_a_cleared_environment_dies_with_a_timed_out_trial(
        mark: str) -> None:
    """The helper's parent exits at once (a double fork): it is orphaned while the trial
    still runs, until the trial's timeout."""
    token = f"1{uuid.uuid4().int % 10**6}.5"
    try:
        # the timeout must outlast the command's start on a loaded machine
        path = command_sweep("orphaned", f"(env -i setsid sleep {token} >/dev/null 2>&1 &)\n"
                                         "sleep 1000", "trial_timeout: 12, retries: 0")
        done = subprocess.run(msexp_cmd("sweep", str(path)), capture_output=True, text=True,
                              timeout=DEADLINE_S)
        assert done.returncode == 1, done.stdout + done.stderr
        trials = load_study("orphaned").trials
        assert {t.user_attrs["status"] for t in trials} == {"TIMEOUT"}
        assert not sleeping(token), "the helper outlived its trial"
        assert_nothing_running("orphaned")
        assert_no_process_left(mark)
    finally:
        kill_processes(sleeping(token))


def test_no_secret_reaches_the_command_or_a_file_under_mlruns(mark: str) -> None:
    sweep(command_sweep("withheld", 'env; echo "connecting to $DATA_URL"\n'
                                    "echo postgresql://me:S3CRET-printed@db/x"), SECRETS)
    log = Path("mlruns/trials/withheld/trial-0000/trial.log").read_text()
    assert "connecting to" in log and "postgresql://me:***@db/x" in log
    assert "PATH=" in log, "the command got the rest of the environment"
    for name in SECRETS:
        assert f"{name}=" not in log
    assert_no_secret_under_mlruns(["S3CRET"])
    assert_invariants("withheld", "withheld", mark, [{"point": 0}, {"point": 1}])


def test_the_sweep_file_passes_a_secret_on_purpose(mark: str, tmp_path: Path,
                                                   monkeypatch) -> None:
    """`experiment.pass_env` names the secrets the command gets; the others stay withheld.
    A real host runs the request the sweep builds from the sweep file."""
    script = write(tmp_path / "show.sh", "env\necho 'eval_accuracy: 1'\n")
    spec = load_spec(write(tmp_path / "passes.yaml", f"""
        name: passes
        experiment: {{command: sh {script.name}, args: none, pass_env: [HF_TOKEN, NOT_SET]}}
        params: {{point: [0]}}
    """))
    assert spec.command is not None and spec.command.pass_env == ["HF_TOKEN", "NOT_SET"]
    request = trial_request(spec, {"point": 0}, tmp_path / "trial")
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    host = Host(cwd=tmp_path)
    try:
        result = host.run(request, DEADLINE_S)
    finally:
        host.kill()
    assert result.status is Status.COMPLETE, result.error
    shown = request.log_path.read_text().splitlines()
    assert "HF_TOKEN=S3CRET-hf" in shown
    assert not [line for line in shown if "S3CRET" in line and "HF_TOKEN" not in line]
    assert not [line for line in shown if line.startswith("NOT_SET=")]
    assert_no_process_left(mark)
