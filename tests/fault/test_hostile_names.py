"""Hostile names and special files: generated files carry no injected line, a study name
stays a name, a device is refused in one line without an endless read, and a FIFO is read
within a size bound and a wait."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from msexp.cli import app
from tests.conftest import msexp_cmd, write
from tests.fault.conftest import DEADLINE_S

SHARED = ["--storage", "postgresql://msexp@db.internal/optuna",
          "--tracking-uri", "http://mlflow.internal:5000"]
# what a shell or cron treats as structure, short of a line break
HOSTILE = "a b;'q'\"d\"$(touch PWNED1)`touch PWNED2`%m#c&|<>*"
INJECTED = "\n* * * * * touch PWNED3 #"


def sweep_in(folder: Path) -> Path:
    return write(folder / "nightly.yaml", """
        name: nightly
        experiment: mlp_digits
        params: {micro_size: [1, 2]}
    """)


def msexp(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(msexp_cmd(*args), capture_output=True, text=True,
                          timeout=DEADLINE_S, env={**os.environ, "COLUMNS": "300", **(env or {})},
                          stdin=subprocess.DEVNULL)


def assert_one_line_refusal(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert all(word in line for word in words), line
    assert "Traceback" not in done.stdout + done.stderr


def stand_in_python(folder: Path) -> Path:
    """An interpreter folder whose `msexp` writes the argv it got, as JSON, to argv.json."""
    program = write(folder / "bin" / "msexp", f"""
        #!{sys.executable}
        import json, sys
        open({str(folder / "argv.json")!r}, "w").write(json.dumps(sys.argv[1:]))
    """)
    program.chmod(0o755)
    return program.parent / "python"


@pytest.mark.parametrize("kind", ["cron", "slurm", "k8s", "k8s-job"])
def test_hostile_characters_in_a_folder_are_quoted_in_every_generated_file(
        workdir: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run what each generator wrote, with a stand-in msexp: it gets the exact path, and no
    command hidden in the name runs."""
    sweep = sweep_in(workdir / HOSTILE)
    python = stand_in_python(workdir / "env")
    monkeypatch.setattr(sys, "executable", str(python))  # msexp "installed" beside it
    command = {"cron": ["cron", str(sweep), "--schedule", "* * * * *", "--continue-study"],
               "slurm": ["slurm", str(sweep)],
               "k8s": ["k8s-cronjob", str(sweep), "--schedule", "0 2 * * *",
                       "--continue-study"],
               "k8s-job": ["k8s-job", str(sweep)]}[kind]
    done = CliRunner().invoke(app, ["schedule", *command, *SHARED, "--study", "nightly"])
    assert done.exit_code == 0, done.output
    if kind == "cron":
        (line,) = done.stdout.splitlines()
        shell = ["/bin/sh", "-c", line.split(" ", 5)[5].replace("\\%", "%")]
    elif kind == "slurm":
        shell = ["bash", "mlruns/slurm/nightly.sbatch"]
    else:
        manifest = list(yaml.safe_load_all(done.stdout))[1]
        pod = (manifest["spec"]["jobTemplate"]["spec"] if kind == "k8s" else manifest["spec"]
               )["template"]["spec"]
        shell = pod["containers"][0]["command"]
        if kind == "k8s-job":
            shell = ["/bin/sh", "-c", shlex.join(shell)]
    subprocess.run(shell, check=True, timeout=DEADLINE_S,
                   env={"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": str(Path.home())})
    argv = json.loads((workdir / "env" / "argv.json").read_text())
    path = f"/work/{sweep.name}" if kind.startswith("k8s") else str(sweep.resolve())
    assert argv[:2] == ["worker" if kind != "cron" else "sweep", path]
    assert argv[argv.index("--study") + 1] == "nightly"
    assert not list(workdir.rglob("PWNED*")), "a command in a name ran"


@pytest.fixture
def crontab(tmp_path: Path) -> dict[str, str]:
    """A stand-in `crontab` (-l, -, -r) on a file of its own; the environment that finds it."""
    table = tmp_path / "crontab.txt"
    table.write_text("0 5 * * * /bin/true # not msexp's\n")
    program = write(tmp_path / "cron-bin" / "crontab", f"""
        #!/bin/sh
        case "$1" in
          -l) exec cat {shlex.quote(str(table))} ;;
          -) exec cat > {shlex.quote(str(table))} ;;
          -r) exec rm {shlex.quote(str(table))} ;;
        esac
    """)
    program.chmod(0o755)
    return {"PATH": f"{program.parent}:{os.environ['PATH']}", "TABLE": str(table)}


@pytest.mark.parametrize(("where", "value"), [
    ("folder", f"runs{INJECTED}"), ("--study", f"x{INJECTED}"),
    ("--storage", f"postgresql://db/optuna{INJECTED}"),
    ("--tracking-uri", f"http://mlflow:5000{INJECTED}"), ("--schedule", "0\n2 * * *"),
    ("--schedule", "0 2 * * *;touch PWNED4"), ("PGPASSFILE", f"/p{INJECTED}")])
def test_a_line_break_or_structure_cannot_reach_the_crontab(
        workdir: Path, crontab: dict[str, str], where: str, value: str) -> None:
    before = Path(crontab["TABLE"]).read_text()
    sweep = sweep_in(workdir / value if where == "folder" else workdir)
    options = {"--storage": SHARED[1], "--tracking-uri": SHARED[3], "--schedule": "0 2 * * *"}
    if where in options:
        options[where] = value
    extra = ["--study", value] if where == "--study" else []
    done = msexp("schedule", "cron", str(sweep), "--install", *extra,
                 *(x for pair in options.items() for x in pair),
                 env={"PATH": crontab["PATH"],
                      **({"PGPASSFILE": value} if where == "PGPASSFILE" else {})})
    assert_one_line_refusal(done, where if where != "folder" else "FILE")
    assert Path(crontab["TABLE"]).read_text() == before


def test_the_stand_in_crontab_takes_an_entry(workdir: Path, crontab: dict[str, str]) -> None:
    """The test above can fail: the same command with a plain name installs its line."""
    done = msexp("schedule", "cron", str(sweep_in(workdir)), "--install", "--schedule",
                 "0 2 * * *",
                 *SHARED, env={"PATH": crontab["PATH"]})
    assert done.returncode == 0, done.stderr
    assert len(Path(crontab["TABLE"]).read_text().splitlines()) == 2


@pytest.mark.parametrize(("option", "value"), [
    ("--partition", "cpu\n#SBATCH --wrap=touch PWNED5"), ("--partition", "cpu --wrap=x"),
    ("--account", "a'b"), ("--qos", "q\r"), ("--time", "1:00 --wrap=x"),
    ("--setup", "module load x\ntouch PWNED6"), ("--sbatch", "--constraint=a --wrap=x"),
    ("--sbatch", "--constraint=v100\n#SBATCH --wrap=x")])
def test_batch_script_options_are_one_token_on_one_line(workdir: Path, option: str,
                                                        value: str) -> None:
    done = msexp("schedule", "slurm", str(sweep_in(workdir)), option, value, *SHARED)
    assert_one_line_refusal(done, option)
    assert not Path("mlruns/slurm/nightly.sbatch").exists()


def test_a_blank_in_the_folder_of_a_batch_script_is_refused(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`#SBATCH --output=PATH` is split on blanks by sbatch: such a path is refused."""
    sweep = sweep_in(workdir / "a b")
    monkeypatch.chdir(sweep.parent)
    done = msexp("schedule", "slurm", str(sweep), *SHARED)
    assert_one_line_refusal(done, "the current folder", "no blank")


@pytest.mark.parametrize("kind", [["k8s-cronjob", "--schedule", "0 2 * * *"], ["k8s-job"]])
def test_kubernetes_manifests_with_a_line_break_in_a_name_are_refused(
        workdir: Path, kind: list[str]) -> None:
    done = msexp("schedule", kind[0], str(sweep_in(workdir / f"x{INJECTED}")), *kind[1:],
                 *SHARED)
    assert_one_line_refusal(done, "FILE", "control character")


@pytest.mark.parametrize(("command", "study"), [
    ("sweep", "../../x"), ("worker", "../../x"), ("status", "../../x"), ("report", "../../x"),
    ("best", "../../x"), ("sweep", "a/b"), ("sweep", "/tmp/x"), ("status", ".hidden"),
    ("report", "x\ny")])
def test_a_study_is_a_name_not_a_path(workdir: Path, command: str, study: str) -> None:
    sweep = sweep_in(workdir)
    done = msexp(command, str(sweep), "--study", study)
    assert_one_line_refusal(done, f"msexp {command}: --study:", "not a path")
    assert not Path("mlruns").exists() and not (workdir.parent / "x").exists()


def substituted(command: str, writer: str) -> subprocess.CompletedProcess:
    """`msexp COMMAND <(WRITER)` in bash: the sweep file is a pipe."""
    return subprocess.run(["bash", "-c", f"{shlex.join(msexp_cmd(command))} <({writer})"],
                          capture_output=True, text=True, timeout=DEADLINE_S,
                          env={**os.environ, "COLUMNS": "300"}, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(("command", "code", "says"), [
    ("validate", 0, ": ok (grid, 2 trials)"), ("plan", 0, "nightly: grid of 2 trials"),
    ("status", 1, "no study named 'nightly'")])
def test_a_process_substitution_is_read_as_the_sweep_file(
        workdir: Path, command: str, code: int, says: str) -> None:
    sweep_in(workdir)
    done = substituted(command, "cat nightly.yaml")
    assert done.returncode == code and says in done.stdout + done.stderr, \
        done.stdout + done.stderr
    assert "FIFO" not in done.stdout + done.stderr


@pytest.mark.parametrize("command", ["validate", "plan", "sweep", "worker", "status"])
def test_a_fifo_nobody_writes_ends_in_one_line_after_the_wait(
        workdir: Path, command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from msexp import paths

    monkeypatch.setattr(paths, "FIFO_WAIT_S", 1.0)
    os.mkfifo("sweep.yaml")
    started = time.monotonic()
    done = CliRunner().invoke(app, [command, "sweep.yaml"], env={"COLUMNS": "300"})
    assert time.monotonic() - started >= 1.0, "it waited for a writer"
    assert done.exit_code == 2
    assert done.output.splitlines() == [
        "sweep.yaml: cannot read the file (it is a FIFO not written and closed within 1 s)"]
    assert not Path("mlruns").exists()


def test_a_fifo_past_the_bound_is_refused_in_one_line(workdir: Path) -> None:
    done = substituted("validate", "echo name: big; head -c 3000000 /dev/zero | tr '\\0' '#'")
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("/dev/fd/") and line.endswith(
        ": cannot read the file (it is larger than 1024 KiB)"), line


def test_a_device_as_the_sweep_file_is_one_line_without_reading_it(workdir: Path) -> None:
    for device in ("/dev/zero", "/dev/urandom"):
        assert_one_line_refusal(msexp("validate", device), device, "character device")


def test_a_huge_sweep_file_is_refused_after_a_bounded_read(workdir: Path) -> None:
    Path("big.yaml").write_text("name: big\n" + "#" * (2 << 20) + "\n")
    assert_one_line_refusal(msexp("validate", "big.yaml"), "big.yaml:", "larger than")


@pytest.mark.parametrize(("device", "how"), [("/dev/full", "env"), ("/dev/zero", "option")])
def test_a_journal_linked_to_a_device_is_one_line(workdir: Path, device: str, how: str) -> None:
    Path("store.journal").symlink_to(device)
    sweep = sweep_in(workdir)
    for command in ("status", "sweep"):
        done = msexp(command, str(sweep), *(["--storage", "store.journal"] if how == "option"
                                            else []),
                     env={"MSEXP_STORAGE": "store.journal"} if how == "env" else None)
        assert done.returncode == 1, done.stdout + done.stderr
        (line,) = done.stderr.splitlines()
        assert f"cannot use the Optuna storage {device}" in line and "character device" in line


def test_slurms_own_syntax_stays_allowed_in_batch_options(workdir: Path) -> None:
    """The refusals above are not a whitelist that breaks Slurm: a constraint's & | [ ]."""
    done = msexp("schedule", "slurm", str(sweep_in(workdir)), "--sbatch",
                 "--constraint=[rack1|rack2]&v100", "--partition", "cpu,gpu", *SHARED)
    assert done.returncode == 0, done.stderr
    lines = Path("mlruns/slurm/nightly.sbatch").read_text().splitlines()
    assert {"#SBATCH --constraint=[rack1|rack2]&v100", "#SBATCH --partition=cpu,gpu"} <= set(lines)
