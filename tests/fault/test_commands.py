"""A user's command as a trial: a helper that leaves the session with a cleared environment
dies with the trial, and no secret of msexp's environment reaches the command or any file
under mlruns/."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import uuid
from pathlib import Path

import psutil
import pytest

from msexp.execution.host import Host
from msexp.execution.process_tree import kill_processes
from msexp.execution.result import Status
from msexp.search.requests import trial_request
from msexp.spec.load import load_spec
from tests.conftest import child_runs, msexp_cmd, write
from tests.fault.conftest import (
    DEADLINE_S,
    assert_invariants,
    assert_no_process_left,
    assert_no_secret_under_mlruns,
    assert_nothing_running,
    load_study,
    wait_for,
)

pytestmark = pytest.mark.slow  # trials in worker processes (tests/README.md: tiers)

SECRETS = {"PGPASSWORD": "S3CRET-pg", "MLFLOW_TRACKING_PASSWORD": "S3CRET-mlflow",
           "HF_TOKEN": "S3CRET-hf", "AWS_SECRET_ACCESS_KEY": "S3CRET-aws",
           "OPENAI_API_KEY": "S3CRET-key", "DATA_URL": "https://u:S3CRET-url@data.example/x"}


def command_sweep(name: str, script: str, budget: str = "retries: 0") -> Path:
    path = write(Path(f"{name}.sh"), f"""
        case "$*" in *--help*) exit 0;; esac
        {script}
        echo "eval_accuracy: 0.9"
    """)
    return write(Path(f"{name}.yaml"), f"""
        name: {name}
        experiment: {{command: sh {path.name}, args: none}}
        budget: {{{budget}}}
        params: {{point: [0, 1]}}
    """)


def sweep(path: Path, env: dict[str, str] | None = None) -> str:
    """Run the sweep to its end; what it printed."""
    done = subprocess.run(msexp_cmd("sweep", str(path)), capture_output=True, text=True,
                          timeout=DEADLINE_S, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


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
    # mutation: values only after `password=` hidden (issue 53: `token=` stayed in the log
    # and the MLflow artifact)
    sweep(command_sweep("withheld", 'env; echo "connecting to $DATA_URL"\n'
                                    "echo postgresql://me:S3CRET-printed@db/x\n"
                                    "echo token=S3CRET-tok api_key: S3CRET-apikey\n"
                                    """echo '{"client_secret": "S3CRET-json", "n": 1}'"""),
          SECRETS)
    log = Path("mlruns/trials/withheld/trial-0000/trial.log").read_text()
    assert "connecting to" in log and "postgresql://me:***@db/x" in log
    assert "token=*** api_key: ***\n" in log and '{"client_secret": "***", "n": 1}' in log
    assert "PATH=" in log, "the command got the rest of the environment"
    for name in SECRETS:
        assert f"{name}=" not in log
    assert_no_secret_under_mlruns(["S3CRET"])
    assert_invariants("withheld", "withheld", mark, [{"point": 0}, {"point": 1}])


def test_the_sweep_file_passes_a_secret_on_purpose(mark: str, tmp_path: Path,
                                                   monkeypatch) -> None:
    """`experiment.pass_env` names the secrets the command gets; the others stay withheld.
    What it prints of the one it gets is still redacted in its log. A real host runs the
    request the sweep builds from the sweep file."""
    script = write(tmp_path / "show.sh", "env\n[ \"$HF_TOKEN\" = S3CRET-hf ] && "
                   "echo 'HF_TOKEN received'\necho 'eval_accuracy: 1'\n")
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
    assert "HF_TOKEN received" in shown and "HF_TOKEN=***" in shown
    assert not [line for line in shown if "S3CRET" in line]
    assert not [line for line in shown if line.startswith(("NOT_SET=", "PGPASSWORD="))]
    assert_no_process_left(mark)


SECRET_PARAMS = ("fixed: {api_token: S3CRET-token}\n"
                 'params: {data_url: ["postgresql://u:S3CRET-a@h/db", '
                 '"postgresql://u:S3CRET-b@h/db"]}\n')
# what Optuna keeps of the two values: alike once redacted, so numbered
STAND_INS = [{"data_url": "postgresql://u:***@h/db #0"},
             {"data_url": "postgresql://u:***@h/db #1"}]


def assert_params_shown_redacted(name: str) -> None:
    shown = sorted(r.data.params["data_url"] for r in child_runs(name))
    assert shown == ["postgresql://u:***@h/db"] * 2
    assert {r.data.params["api_token"] for r in child_runs(name)} == {"***"}


def test_secrets_in_params_and_what_a_workload_prints_reach_no_file(mark: str) -> None:
    """A built-in workload gets its secret params in clear, and prints them and the
    environment's MLflow password into its log, which msexp writes and logs to MLflow."""
    path = write(Path("tells.yaml"), "name: tells\nexperiment: tells:build\n"
                 "budget: {retries: 0}\n" + SECRET_PARAMS)
    shown = sweep(path, {"MLFLOW_TRACKING_PASSWORD": "S3CRET-mlflow"}).splitlines()
    # the sweep builds the workload once to check it, where its own prints reach the console
    assert not [line for line in shown if "S3CRET" in line and not line.startswith(
        ("token ", "tracking password "))]
    log = Path("mlruns/trials/tells/trial-0000/trial.log").read_text()
    assert "token *** from postgresql://u:***@h/db" in log, log
    assert "tracking password ***" in log, log
    assert_params_shown_redacted("tells")
    assert_no_secret_under_mlruns(["S3CRET"])
    assert_invariants("tells", "tells", mark, STAND_INS)


def test_a_command_gets_its_secret_params_in_clear_and_no_file_keeps_them(mark: str) -> None:
    """The script checks its flags and `msexp.hooks`' params file hold the real values;
    it prints them and a secret the sweep file passes it on purpose."""
    script = write(Path("needs.sh"), """
        case "$*" in *--help*) exit 0;; esac
        case "$*" in *--api_token=S3CRET-token*) ;; *) echo "token missing"; exit 1;; esac
        case "$*" in *--data_url=postgresql://u:S3CRET-[ab]@h/db*) ;; *) exit 1;; esac
        grep -q S3CRET-token "$MSEXP_TRIAL" || { echo "params file redacted"; exit 1; }
        case "$MSEXP_TRIAL" in */mlruns/*) echo "params file under mlruns"; exit 1;; esac
        echo "got $* and $MLFLOW_TRACKING_PASSWORD"
        echo "eval_accuracy: 0.9"
    """)
    path = write(Path("needs.yaml"), f"name: needs\nexperiment: {{command: sh {script.name}, "
                 "pass_env: [MLFLOW_TRACKING_PASSWORD]}\nbudget: {retries: 0}\n"
                 + SECRET_PARAMS)
    assert "S3CRET" not in sweep(path, {"MLFLOW_TRACKING_PASSWORD": "S3CRET-mlflow"})
    log = Path("mlruns/trials/needs/trial-0000/trial.log").read_text()
    assert "got --api_token=*** --data_url=postgresql://u:***@h/db and ***" in log, log
    assert json.loads(Path("mlruns/trials/needs/trial-0000/params.json").read_text()) == {
        "api_token": "***", "data_url": "postgresql://u:***@h/db"}
    assert_params_shown_redacted("needs")
    assert_no_secret_under_mlruns(["S3CRET"])
    assert_invariants("needs", "needs", mark, STAND_INS)


def test_a_sweep_killed_mid_trial_leaves_no_secret_under_mlruns(mark: str) -> None:
    """kill -9 of the sweep while a built-in trial with secret params trains: what it
    printed (in its log) and its events were redacted as written, not after its end; the
    next sweep finishes the study."""
    path = write(Path("killed.yaml"), """
        name: killed
        experiment: tells:build
        fixed: {api_token: S3CRET-token, epochs: 3, pause_s: 0.4}
        budget: {retries: 1}
        params: {data_url: ["postgresql://u:S3CRET-a@h/db", "postgresql://u:S3CRET-b@h/db"]}
    """)
    events = Path("mlruns/trials/killed/trial-0000/events.jsonl")
    first = subprocess.Popen(msexp_cmd("sweep", str(path)), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL,
                             env={**os.environ, "MLFLOW_TRACKING_PASSWORD": "S3CRET-mlflow"})
    try:
        assert wait_for("the trial trains", lambda: events.is_file() and
                        '"epoch"' in events.read_text(), first)
        first.kill()
        first.wait()
        assert_no_process_left(mark)
    finally:
        first.kill()
    log = Path("mlruns/trials/killed/trial-0000/trial.log").read_text()
    assert "token *** from postgresql://u:***@h/db" in log, log
    assert "tracking password ***" in log, log
    assert_no_secret_under_mlruns(["S3CRET"])
    sweep(path, {"MLFLOW_TRACKING_PASSWORD": "S3CRET-mlflow"})
    assert_no_secret_under_mlruns(["S3CRET"])
    assert_invariants("killed", "killed", mark, STAND_INS)


def test_a_commands_private_params_file_does_not_outlive_its_trial(mark: str,
                                                                   tmp_path: Path) -> None:
    """The file holding a command's secret params in clear (outside mlruns/, mode 600, in
    a folder of mode 700) stays while its trial runs, is left by a kill -9 of the sweep,
    and is removed by the next msexp start, which finishes the study without one left."""
    noted = tmp_path / "params-path"
    script = write(Path("holds.sh"), """
        case "$*" in *--help*) exit 0;; esac
        if [ ! -e "$NOTE_AT" ]; then echo "$MSEXP_TRIAL" > "$NOTE_AT"; exec sleep 1000; fi
        echo "eval_accuracy: 0.9"
    """)
    path = write(Path("holds.yaml"), f"name: holds\nexperiment: {{command: sh {script.name}}}\n"
                 "budget: {retries: 1}\nparams: {api_token: [S3CRET-token]}\n")
    first = subprocess.Popen(msexp_cmd("sweep", str(path)), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env={**os.environ, "NOTE_AT": str(noted)})
    try:
        assert wait_for("the command runs", lambda: noted.is_file() and
                        noted.read_text().endswith("\n"), first)
        private = Path(noted.read_text().strip())
        assert "mlruns" not in private.parts and "S3CRET-token" in private.read_text()
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
        assert stat.S_IMODE(private.parent.stat().st_mode) == 0o700
        status = subprocess.run(msexp_cmd("status", str(path)), capture_output=True,
                                timeout=DEADLINE_S)
        assert status.returncode == 0 and private.is_file(), "its owner runs: it stays"
        first.kill()
        first.wait()
        assert_no_process_left(mark)
    finally:
        first.kill()
    assert private.is_file(), "killed with kill -9, its owner could not remove it"
    sweep(path, {"NOTE_AT": str(noted)})
    assert not private.exists()
    left = [p for p in private.parent.iterdir() if "S3CRET" in p.read_text(errors="replace")]
    assert not left
    assert_no_secret_under_mlruns(["S3CRET"])
    assert_invariants("holds", "holds", mark, [{"api_token": "***"}])
