"""Scheduled cluster runs: the generated scripts are valid and carry no secret."""

from __future__ import annotations

import fcntl
import re
import shlex
import signal
import subprocess
import sys
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
    result = run("schedule", "slurm", str(sweep), "--array", "6", "--partition", "cpu",
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


def test_slurm_script_takes_memory_account_qos_extra_options_and_setup(sweep: Path) -> None:
    result = run("schedule", "slurm", str(sweep), "--mem", "16G", "--account", "ml-team",
                 "--qos", "high", "--sbatch", "--constraint=v100", "--sbatch", "--exclusive",
                 "--setup", "module load cuda/12.1", "--setup", "source ~/venvs/ms/bin/activate",
                 *SHARED)
    assert result.exit_code == 0, result.output
    lines = Path("mlruns/slurm/nightly.sbatch").read_text().splitlines()
    sbatch = [x for x in lines if x.startswith("#SBATCH ")]
    for option in ("--mem=16G", "--account=ml-team", "--qos=high", "--constraint=v100",
                   "--exclusive", "--requeue", "--signal=B:TERM@60", "--open-mode=append"):
        assert f"#SBATCH {option}" in sbatch
    assert lines.index(sbatch[-1]) < lines.index("set -eo pipefail"), "#SBATCH lines first"
    setup = [lines.index("module load cuda/12.1"), lines.index("source ~/venvs/ms/bin/activate")]
    assert setup == sorted(setup) and setup[-1] < len(lines) - 1
    assert lines[-1].startswith("exec "), "the worker replaces the shell: SIGTERM reaches it"
    assert subprocess.run(["bash", "-n", "mlruns/slurm/nightly.sbatch"]).returncode == 0


@pytest.mark.parametrize(("option", "value", "rule"), [
    ("--sbatch", "constraint=v100", "one sbatch option"),
    ("--mem", "16GB", "a size such as 8G"),
])
def test_slurm_options_are_checked(sweep: Path, option: str, value: str, rule: str) -> None:
    result = run("schedule", "slurm", str(sweep), option, value, *SHARED)
    assert result.exit_code == 2 and rule in result.output, result.output


def test_the_batch_script_hands_sigterm_to_the_worker(sweep: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Slurm signals the batch shell (`--signal=B:TERM`, requeue, preemption): with `exec`
    that shell is the worker. A stand-in msexp reports the signal it got."""
    stand_in = write(tmp_path / "env" / "bin" / "msexp", """
        #!/usr/bin/env python3
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *_: (print("worker got SIGTERM", flush=True),
                                                  sys.exit(143)))
        print("worker ready", flush=True)
        time.sleep(60)
    """)
    stand_in.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(stand_in.parent / "python"))
    result = run("schedule", "slurm", str(sweep), *SHARED)
    assert result.exit_code == 0, result.output
    shell = subprocess.Popen(["bash", "mlruns/slurm/nightly.sbatch"], stdout=subprocess.PIPE,
                             text=True)
    assert "array task" in shell.stdout.readline()
    assert shell.stdout.readline().strip() == "worker ready"
    shell.send_signal(signal.SIGTERM)  # what `--signal=B:TERM` does: the batch shell only
    assert shell.stdout.readline().strip() == "worker got SIGTERM"
    assert shell.wait(timeout=10) == 143


def test_cron_line_starts_a_dated_study_or_continues_one(sweep: Path) -> None:
    fresh = run("schedule", "cron", str(sweep), "--schedule", "0 2 * * *", *SHARED)
    assert fresh.exit_code == 0, fresh.output
    line = fresh.output.strip()
    assert line.startswith("0 2 * * * cd ")
    assert " sweep " in line and "--study nightly-$(date +\\%Y\\%m\\%d);" in line
    assert line.endswith(f"# msexp schedule: study nightly, {sweep.resolve()}")
    assert subprocess.run(["bash", "-n", "-c", line.split(" ", 5)[5]]).returncode == 0
    same = run("schedule", "cron", str(sweep), "--schedule", "0 2 * * *", "--continue-study",
               "--study", "nightly-main", *SHARED)
    assert "--study nightly-main;" in same.output


def as_cron_runs_it(line: str) -> str:
    """The shell command cron runs for a crontab line: past the five fields, `\\%` read as %."""
    return line.split(" ", 5)[5].replace("\\%", "%")


def test_cron_run_is_skipped_while_the_previous_run_holds_the_lock(sweep: Path) -> None:
    result = run("schedule", "cron", str(sweep), "--schedule", "* * * * *", *SHARED)
    assert result.exit_code == 0, result.output
    command = as_cron_runs_it(result.output.strip())
    lock = Path("mlruns/cron-nightly.lock")
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a sweep of this schedule is running
        subprocess.run(["/bin/sh", "-c", command], check=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home())})
    (logged,) = Path("mlruns/cron.log").read_text().splitlines()  # msexp said nothing
    assert logged.endswith(f"nightly: skipped, an earlier run still holds {lock.resolve()}")


def crontab() -> list[str]:
    listed = subprocess.run(["crontab", "-l"], capture_output=True, text=True)
    return listed.stdout.splitlines() if listed.returncode == 0 else []


def test_cron_install_keeps_one_entry_and_uninstall_removes_only_it(
        sweep: Path, saved_crontab: None) -> None:
    mine = "0 5 * * * /bin/true # not msexp's"
    subprocess.run(["crontab", "-"], input=mine + "\n", text=True, check=True)
    for schedule in ("0 2 * * *", "0 2 * * *", "30 3 * * *"):
        assert run("schedule", "cron", str(sweep), "--schedule", schedule, "--install", *SHARED
                   ).exit_code == 0
    other = run("schedule", "cron", str(sweep), "--schedule", "0 4 * * *", "--study", "other",
                "--install", *SHARED)
    assert other.exit_code == 0, other.output
    entries = crontab()
    assert len(entries) == 3 and entries[0] == mine
    assert entries[1].startswith("30 3 * * * ") and "study nightly," in entries[1]
    assert entries[2].startswith("0 4 * * * ") and "study other," in entries[2]

    removed = run("schedule", "cron", str(sweep), "--uninstall")
    assert removed.exit_code == 0 and "removed:" in removed.output, removed.output
    assert crontab() == [mine, entries[2]]
    again = run("schedule", "cron", str(sweep), "--uninstall")
    assert "no crontab entry has" in again.output and crontab() == [mine, entries[2]]


def k8s_objects(*args: str) -> list[dict]:
    result = run("schedule", *args)
    assert result.exit_code == 0, result.output
    return list(yaml.safe_load_all(result.output))


def assert_valid_kubernetes(objects: list[dict]) -> None:
    """Each object against the Kubernetes OpenAPI schema (strict: no unknown field), as of
    the oldest and the newest Kubernetes release kubernetes-validate knows."""
    validator = pytest.importorskip("kubernetes_validate")
    versions = validator.utils.all_versions()
    for obj in objects:
        for version in (versions[0], versions[-1]):
            validator.validate(obj, version, strict=True)
        for name, value in _quantities(obj):
            assert QUANTITY.fullmatch(value), f"{name}: {value} is not a quantity"


QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?([KMGTPE]i|[mkMGTPE])?")


def _quantities(obj: dict):
    for container in _pod(obj).get("containers", []):
        for kind, amounts in container.get("resources", {}).items():
            for name, value in amounts.items():
                yield f"{kind}.{name}", value


def _pod(obj: dict) -> dict:
    job = obj["spec"]["jobTemplate"]["spec"] if obj["kind"] == "CronJob" else obj.get("spec", {})
    return job.get("template", {}).get("spec", {})


def test_k8s_cronjob_is_a_valid_cronjob_set_from_options(sweep: Path) -> None:
    config, cronjob = k8s_objects(
        "k8s-cronjob", str(sweep), "--schedule", "30 1 * * *", "--pods", "3", "--image",
        "registry/msexp:1", "--cpus-per-task", "4", "--mem", "16G", "--gpus-per-task", "1",
        "--backoff-limit", "5", "--secret", "team-db", *SHARED)
    assert_valid_kubernetes([config, cronjob])
    assert config["kind"] == "ConfigMap" and "nightly.yaml" in config["data"]
    spec = cronjob["spec"]
    assert spec["schedule"] == "30 1 * * *" and spec["concurrencyPolicy"] == "Forbid"
    job = spec["jobTemplate"]["spec"]
    assert (job["parallelism"], job["completions"], job["backoffLimit"]) == (3, 3, 5)
    container = job["template"]["spec"]["containers"][0]
    assert container["image"] == "registry/msexp:1"
    assert container["resources"] == {"requests": {"cpu": "4", "memory": "16Gi"},
                                      "limits": {"memory": "16Gi", "nvidia.com/gpu": "1"}}
    shell, flag, script = container["command"]
    assert (shell, flag) == ("/bin/sh", "-c") and script.startswith("exec msexp worker ")
    secret = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]
              if "valueFrom" in e}
    assert secret["PGPASSWORD"] == {"name": "team-db", "key": "pgpassword"}
    assert not any("password" in str(e.get("value", "")).lower() for e in container["env"])


def test_k8s_job_runs_parallel_workers_on_ascend(sweep: Path) -> None:
    config, job = k8s_objects(
        "k8s-job", str(sweep), "--pods", "8", "--gpus-per-task", "8", "--gpu-resource",
        "huawei.com/Ascend910", "--mem", "64000", "--study", "nightly-main", *SHARED)
    assert_valid_kubernetes([config, job])
    assert job["kind"] == "Job" and job["apiVersion"] == "batch/v1"
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (8, 8)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"memory": "64000Mi", "huawei.com/Ascend910": "8"}
    assert container["command"] == ["msexp", "worker", "/work/nightly.yaml", *SHARED,
                                    "--study", "nightly-main"]


def test_the_schema_check_is_real(sweep: Path) -> None:
    """A manifest Kubernetes would refuse fails the same check."""
    validator = pytest.importorskip("kubernetes_validate")
    _, job = k8s_objects("k8s-job", str(sweep), *SHARED)
    job["spec"]["parallelism"] = "eight"
    with pytest.raises(validator.ValidationError):
        assert_valid_kubernetes([job])
    _, job = k8s_objects("k8s-job", str(sweep), *SHARED)
    job["spec"]["template"]["spec"]["containers"][0]["cpu"] = "2"  # not a container field
    with pytest.raises(validator.ValidationError):
        assert_valid_kubernetes([job])


def test_k8s_names_follow_kubernetes_rules(workdir: Path) -> None:
    sweep = write(workdir / "Big_Sweep.yaml", """
        name: Big_Sweep.v2
        experiment: mlp_digits
        params: {micro_size: [1, 2]}
    """)
    objects = k8s_objects("k8s-cronjob", str(sweep), *SHARED)
    assert_valid_kubernetes(objects)
    assert {o["metadata"]["name"] for o in objects} == {"msexp-big-sweep-v2"}


def test_password_in_url_is_refused(sweep: Path) -> None:
    result = run("schedule", "slurm", str(sweep), "--storage",
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
    cron = run("schedule", "cron", str(sweep), "--schedule", "0 2 * * *", *SHARED)
    assert cron.exit_code == 0, cron.output
    line = cron.output.strip().splitlines()[-1]
    command = shlex.split(as_cron_runs_it(line).split(" && ", 1)[1], comments=True)
    assert command[command.index("sweep") + 1] == str(sweep.resolve())
    assert command[command.index("--study") + 1] == "nightly-$(date"
    k8s = run("schedule", "k8s-cronjob", str(sweep), *SHARED)
    assert k8s.exit_code == 0, k8s.output
    config, job = yaml.safe_load_all(k8s.output)
    script = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    argv = shlex.split(script)
    assert argv[:4] == ["exec", "msexp", "worker", "/work/nightly.yaml"]
    assert argv[argv.index("--study") + 1].startswith("nightly-$(date")
    assert list(config["data"]) == ["nightly.yaml"]


@pytest.mark.parametrize(("scheduler", "foreign"), [
    ("slurm", "--schedule"), ("slurm", "--image"), ("cron", "--partition"),
    ("cron", "--pods"), ("k8s-cronjob", "--sbatch"), ("k8s-job", "--schedule"),
    ("k8s-job", "--install"),
])
def test_each_scheduler_takes_only_its_own_options(sweep: Path, scheduler: str,
                                                   foreign: str) -> None:
    result = run("schedule", scheduler, str(sweep), foreign, "x", *SHARED)
    assert result.exit_code != 0 and f"No such option: {foreign}" in result.output, \
        result.output
    assert not (sweep.parent / "mlruns" / "slurm").exists(), "nothing was written"


def test_k8s_job_defaults_to_the_msexp_image_and_the_msexp_db_secret(sweep: Path) -> None:
    """Mutations (issue 53): `k8s-job`'s default image, its --secret not passed on."""
    _, job = k8s_objects("k8s-job", str(sweep), *SHARED)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "msexp:latest"
    secret = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]
              if "valueFrom" in e}
    assert secret["PGPASSWORD"] == {"name": "msexp-db", "key": "pgpassword"}
    _, job = k8s_objects("k8s-job", str(sweep), "--secret", "team-db", *SHARED)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "team-db", "key": "pgpassword"} in [
        e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e]


def test_cron_uninstall_names_its_entry_as_plain_text_on_a_color_terminal(
        sweep: Path, saved_crontab: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `--uninstall` says names the entry's marker as it is in the crontab (a path, a
    study), copyable, with no color codes inside, whether it removed one or found none.
    (issue 53 fresh fcli: cli.cluster.cron 19, Rich's highlighting on)"""
    import io

    from rich.console import Console

    from msexp.cli import cluster

    marker = f"# msexp schedule: study nightly, {sweep.resolve()}"
    assert run("schedule", "cron", str(sweep), "--install", *SHARED).exit_code == 0
    for said in (f"removed: {marker}", f"no crontab entry has: {marker}"):
        screen = Console(file=io.StringIO(), width=300, force_terminal=True,
                         color_system="truecolor")
        monkeypatch.setattr(cluster, "console", screen)
        result = run("schedule", "cron", str(sweep), "--uninstall")
        assert result.exit_code == 0, result.output
        assert screen.file.getvalue() == said + "\n"


def test_a_k8s_cronjob_ends_with_one_newline_as_kubectl_and_a_file_take_it(sweep: Path) -> None:
    """The manifest printed is the YAML documents as they are: no blank line added at its
    end (`msexp schedule k8s-cronjob ... > cronjob.yaml`). (issue 53 fresh fcli:
    cli.cluster.k8s_cronjob 18, typer.echo's newline added)"""
    for scheduler in ("k8s-cronjob", "k8s-job"):
        result = run("schedule", scheduler, str(sweep), *SHARED)
        assert result.exit_code == 0, result.output
        assert result.output.endswith("\n") and not result.output.endswith("\n\n"), \
            result.output[-80:]
        assert len(list(yaml.safe_load_all(result.output))) == 2
