"""Clear causes: a value no trial can run with is refused by `validate` in the one-line
format, before anything runs; a full disk is named as such, with where."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import child_runs, msexp_cmd, write
from tests.fault.conftest import (
    DEADLINE_S,
    assert_invariants,
    assert_no_process_left,
    assert_nothing_running,
    load_study,
)


@pytest.mark.parametrize(("section", "line"), [
    ("fixed: {seed: 100000000000000000000}",
     "fixed.seed: must be <= 4294967295, got 100000000000000000000"),
    ("params: {seed: {low: 0, high: 4294967296}}",
     "params.seed.high: must be <= 4294967295, got 4294967296"),
    ("fixed: {seed: 4294967295}\nbudget: {repeats: 2}",
     "params.seed.1: must be <= 4294967295, got 4294967296"),
])
@pytest.mark.parametrize("command", ["validate", "sweep"])
def test_a_seed_out_of_range_is_one_line_before_anything_runs(workdir: Path, section: str,
                                                              line: str, command: str) -> None:
    sweep = write(workdir / "seed.yaml", "name: seed\nexperiment: mlp_digits\n"
                  f"{section}\n")
    done = subprocess.run(msexp_cmd(command, str(sweep)), capture_output=True, text=True,
                          timeout=DEADLINE_S)
    assert (done.returncode, done.stderr) == (2, f"{sweep}: {line}\n"), done.stdout
    assert not Path("mlruns").exists()


def test_the_largest_seed_runs(workdir: Path) -> None:
    """The bound is the libraries' own: their largest seed is a valid one."""
    from msexp.execution.host import running
    from msexp.execution.protocol import TrialRequest
    from msexp.spec.load import trial_params

    params = trial_params("mlp_digits", {"epochs": 1, "hidden": 8, "seed": 2**32 - 1})
    assert "eval_accuracy" in running.run(TrialRequest("mlp_digits", params),
                                                lambda event: None)


def can_mount_tmpfs() -> bool:
    return subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=4k tmpfs /mnt"],
                          capture_output=True).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not can_mount_tmpfs(), reason="needs a mount namespace (unshare -m) and "
                    "tmpfs mounts (root)")
@pytest.mark.parametrize("fill", ["full before the trial", "full while it saves"])
def test_a_full_disk_says_no_space_left_and_where(mark: str, fill: str) -> None:
    """mlruns/trials on a tmpfs of its own, seen only by this sweep (a private mount)."""
    name = "full-" + fill.split()[-1]
    sweep = write(Path(f"{name}.yaml"), f"""
        name: {name}
        experiment: mlp_digits
        fixed: {{epochs: 2, hidden: 16}}
        budget: {{retries: 0}}
        params: {{lr: [0.1]}}
    """)
    Path("mlruns/trials").mkdir(parents=True, exist_ok=True)
    size, filled = ("64k", "dd if=/dev/zero of=mlruns/trials/fill bs=1k 2>/dev/null;"
                    ) if fill.endswith("trial") else ("8k", "")
    script = (f"mount -t tmpfs -o size={size} tmpfs mlruns/trials && {filled} "
              f"exec {shlex.join(msexp_cmd('sweep', str(sweep)))}")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                          text=True, timeout=DEADLINE_S)
    assert done.returncode == 1 and "every trial failed" in done.stderr, done.stdout
    (trial,) = load_study(name).trials
    assert trial.state.name == "FAIL"
    error = trial.user_attrs["error"]
    assert "no space left" in error.lower() and str(Path("mlruns/trials").resolve()) in error
    (run,) = child_runs(name)
    assert run.info.status == "FAILED" and run.data.tags["status"] == "FAILED"
    assert_nothing_running(name)
    assert_no_process_left(mark)


@pytest.mark.skipif(not can_mount_tmpfs(), reason="needs a mount namespace (unshare -m) and "
                    "tmpfs mounts (root)")
def test_a_file_written_whole_on_a_full_disk_names_itself(tmp_path: Path) -> None:
    """What `write_atomic` writes (a spooled result, a checkpoint's state.json) on a full
    disk fails naming the file, and leaves no partial file behind."""
    (tmp_path / "full").mkdir()
    code = ("from pathlib import Path; from msexp.paths import write_atomic\n"
            "try:\n    write_atomic(Path('full/result.json'), 'x' * 100000)\n"
            "except OSError as exc:\n    print(exc)")
    done = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=8k tmpfs full "
                           f"&& {shlex.join([sys.executable, '-c', code])} && ls -A full"],
                          cwd=tmp_path,
                          capture_output=True, text=True, timeout=DEADLINE_S)
    assert done.stdout.splitlines() == [
        "[Errno 28] No space left on device: 'full/result.json'"], done.stderr


@pytest.mark.slow
@pytest.mark.skipif(not can_mount_tmpfs(), reason="needs a mount namespace (unshare -m) and "
                    "tmpfs mounts (root)")
@pytest.mark.parametrize("retries", [2, 0])
def test_a_full_mlruns_shows_only_msexps_line_and_the_next_run_finishes(
        mark: str, monkeypatch: pytest.MonkeyPatch, retries: int) -> None:
    """All of mlruns/ (stores, journal, spool, trials) on a private tmpfs that fills up
    while the second trial runs: the console shows msexp's one line, none of MLflow's or
    SQLAlchemy's (nor logging's report of a log file it cannot write); once space is freed,
    the same command finishes the study: with retries, every trial COMPLETE; without, the
    trial the full disk stopped may fail, and then has its one MLflow run, FAILED."""
    name = f"filling{retries}"
    sweep = write(Path(f"{name}.yaml"), f"""
        name: {name}
        experiment: broken:build
        fixed: {{epochs: 3, hidden: 16, pause_s: 0.3}}
        budget: {{retries: {retries}}}
        params: {{lr: [0.1, 0.2]}}
    """)
    run = shlex.join(msexp_cmd("sweep", str(sweep)))
    events = f"mlruns/trials/{name}/trial-0001/events.jsonl"  # trial 0 recorded: the store is open
    copy = f"copy-{name}"  # MLflow caches a store by its path: one per case
    script = (f"mkdir -p mlruns {copy} && mount -t tmpfs -o size=16m tmpfs mlruns && "
              f"{{ {run} >first.out 2>first.err & pid=$!; "
              f"until grep -qs epoch {events} || ! kill -0 $pid; do sleep 0.05; done; "
              "dd if=/dev/zero of=mlruns/fill bs=4k 2>/dev/null; wait $pid; echo $? >first.rc; "
              f"rm mlruns/fill; {run} >second.out 2>&1; echo $? >second.rc; "
              f"cp -a mlruns {copy}/; }}")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                          text=True, timeout=3 * DEADLINE_S)
    assert done.returncode == 0, done.stderr
    out, err = Path("first.out").read_text(), Path("first.err").read_text()
    assert Path("first.rc").read_text().strip() == "1", out + err
    (line,) = err.splitlines()
    assert "no space left" in line.lower() and "mlruns" in line, err
    for noise in ("Traceback", "Logging error", "sqlite3", "sqlalchemy", "mlflow."):
        assert noise not in out, out  # the libraries' own lines
    assert Path("second.rc").read_text().strip() == "0", Path("second.out").read_text()
    monkeypatch.chdir(copy)
    assert_invariants(name, name, mark, [{"lr": 0.1}, {"lr": 0.2}], may_fail=not retries)


@pytest.mark.slow
@pytest.mark.skipif(not can_mount_tmpfs(), reason="needs a mount namespace (unshare -m) and "
                    "tmpfs mounts (root)")
def test_a_full_spool_says_no_space_left_and_where_and_the_next_run_finishes(
        mark: str) -> None:
    """mlruns/spool on a full tmpfs of its own: the trial's record cannot be kept before
    Optuna is told, so the sweep stops with the one line other full disks get (not an
    OSError with its traceback's hint) and puts the trial back; with space again (the
    private mount gone), the same command finishes the study.
    # mutation: `Spool._full_disk` passing the OSError on: "OSError: [Errno 28] ..." """
    sweep = write(Path("spooled.yaml"), """
        name: spooled
        experiment: broken:build
        fixed: {epochs: 1, hidden: 16}
        params: {lr: [0.1, 0.2]}
    """)
    spool = Path("mlruns/spool")
    spool.mkdir(parents=True, exist_ok=True)
    run = shlex.join(msexp_cmd("sweep", str(sweep)))
    script = (f"mount -t tmpfs -o size=4k tmpfs {spool} && "
              f"dd if=/dev/zero of={spool}/fill bs=1k 2>/dev/null; exec {run}")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                          text=True, timeout=DEADLINE_S)
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert f"cannot keep trial 0's result in the spool; no space left on the device of " \
           f"{spool.resolve()} (" in line, line
    assert "OSError" not in line and "traceback" not in line, line
    trials = load_study("spooled").trials
    assert {t.state.name for t in trials} == {"WAITING"}, "trial 0 put back, 1 never run"
    again = subprocess.run(msexp_cmd("sweep", str(sweep)), capture_output=True, text=True,
                           timeout=DEADLINE_S)
    assert again.returncode == 0, again.stdout + again.stderr
    assert_invariants("spooled", "spooled", mark, [{"lr": 0.1}, {"lr": 0.2}])
