"""Scheduled cluster runs: the generated scripts are valid and carry no secret."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from msexp.cli import app
from tests.conftest import write

SHARED = ["--storage", "postgresql://msexp@db.internal/optuna",
          "--tracking-uri", "http://mlflow.internal:5000"]


@pytest.fixture
def sweep(workdir: Path) -> Path:
    return write(workdir / "nightly.yaml", """
        name: nightly
        experiment: mlp_digits
        params: {micro_size: [1, 2, 4]}
    """)


def run(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


def test_slurm_array_script_is_valid_bash_running_workers(sweep: Path) -> None:
    result = run("schedule", str(sweep), "--slurm", "--array", "6", "--partition", "cpu",
                 "--time", "01:30:00", "--cpus-per-task", "4", "--gpus-per-task", "1", *SHARED)
    assert result.exit_code == 0, result.output
    script = Path("mlruns/slurm/nightly.sbatch")
    text = script.read_text()
    for line in ("#SBATCH --array=0-5", "#SBATCH --partition=cpu", "#SBATCH --time=01:30:00",
                 "#SBATCH --cpus-per-task=4", "#SBATCH --gpus-per-task=1"):
        assert line in text.splitlines()
    exec_line = text.strip().splitlines()[-1]
    assert exec_line.startswith("exec ") and " worker " in exec_line
    assert "--storage postgresql://msexp@db.internal/optuna" in exec_line
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


def test_cron_line_starts_a_dated_study_or_continues_one(sweep: Path) -> None:
    fresh = run("schedule", str(sweep), "--cron", "0 2 * * *", *SHARED)
    assert fresh.exit_code == 0, fresh.output
    line = fresh.output.strip()
    assert line.startswith("0 2 * * * cd ")
    assert " sweep " in line and "--study nightly-$(date +\\%Y\\%m\\%d)" in line
    assert subprocess.run(["bash", "-n", "-c", line.split(" ", 5)[5]]).returncode == 0
    same = run("schedule", str(sweep), "--cron", "0 2 * * *", "--continue-study",
               "--study", "nightly-main", *SHARED)
    assert "--study nightly-main >>" in same.output


def test_k8s_cronjob_takes_the_password_from_a_secret(sweep: Path) -> None:
    result = run("schedule", str(sweep), "--k8s", "--cron", "30 1 * * *", "--array", "3",
                 "--image", "registry/msexp:1", *SHARED)
    assert result.exit_code == 0, result.output
    config, job = yaml.safe_load_all(result.output)
    assert config["kind"] == "ConfigMap" and "nightly.yaml" in config["data"]
    assert job["kind"] == "CronJob" and job["spec"]["schedule"] == "30 1 * * *"
    pod = job["spec"]["jobTemplate"]["spec"]
    assert pod["parallelism"] == 3
    container = pod["template"]["spec"]["containers"][0]
    assert container["image"] == "registry/msexp:1"
    assert "msexp worker /work/nightly.yaml" in container["command"][2]
    assert container["env"][0]["valueFrom"]["secretKeyRef"]["key"] == "pgpassword"


def test_password_in_url_is_refused(sweep: Path) -> None:
    result = run("schedule", str(sweep), "--slurm", "--storage",
                 "postgresql://msexp:hunter2@db/optuna", "--tracking-uri", "http://m:5000")
    assert result.exit_code == 2
    assert "hunter2" not in result.output
    assert "put the password in PGPASSWORD/PGPASSFILE" in result.output


@pytest.mark.parametrize("folder", ["my nightly runs", "nightly"])
def test_commands_name_the_sweep_file_in_any_folder(workdir: Path, folder: str) -> None:
    """A folder named like the study, or with a space, keeps its path in every schedule."""
    sweep = write(workdir / folder / "nightly.yaml", """
        name: nightly
        experiment: mlp_digits
        params: {micro_size: [1, 2]}
    """)
    cron = run("schedule", str(sweep), "--cron", "0 2 * * *", *SHARED)
    assert cron.exit_code == 0, cron.output
    line = cron.output.strip().splitlines()[-1]
    command = shlex.split(line.split(" && ", 1)[1].replace("\\%", "%"))
    assert command[1:3] == ["sweep", str(sweep.resolve())]
    assert command[command.index("--study") + 1] == "nightly-$(date"
    k8s = run("schedule", str(sweep), "--k8s", "--cron", "0 2 * * *", *SHARED)
    assert k8s.exit_code == 0, k8s.output
    config, job = yaml.safe_load_all(k8s.output)
    script = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    argv = shlex.split(script)
    assert argv[:3] == ["msexp", "worker", "/work/nightly.yaml"]
    assert argv[argv.index("--study") + 1].startswith("nightly-$(date")
    assert list(config["data"]) == ["nightly.yaml"]
