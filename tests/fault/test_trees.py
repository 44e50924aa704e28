"""A trial's whole process tree goes with it: helpers in sessions of their own and
double-forked daemons die at the trial's end, on a timeout, a prune, SIGTERM, SIGINT, and,
after kill -9 of the orchestrator, before the next run reruns the trial."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from tests.conftest import msexp_cmd, write
from tests.fault.conftest import (
    DEADLINE_S,
    assert_no_process_left,
    carrying,
    load_study,
    wait_for,
)

pytestmark = pytest.mark.slow  # trials in worker processes (tests/README.md: tiers)

SCRIPT = Path(__file__).with_name("helpers.py")


def sweep_file(folder: Path, name: str, params: str, budget: str = "retries: 3",
               extra: str = "") -> Path:
    return write(folder / f"{name}.yaml", f"""
        name: {name}
        experiment:
          command: python {SCRIPT}
        budget: {{{budget}}}
        params: {params}
        {extra}
    """)


def helpers_of(name: str, trial: int = 0) -> Path:
    return Path(f"mlruns/trials/{name}/trial-{trial:04d}/outputs/helpers")


def sweep(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(msexp_cmd("sweep", str(path)), capture_output=True, text=True,
                          timeout=DEADLINE_S)


def test_helpers_die_when_the_trial_finishes(mark: str) -> None:
    done = sweep(sweep_file(Path.cwd(), "tree-finish", "{mode: [finish]}"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert helpers_of("tree-finish").exists()
    assert_no_process_left(mark)


def test_helpers_die_with_a_timed_out_trial(mark: str) -> None:
    # the trial ends only by its timeout, which must outlast the script's start and its
    # helpers' on a loaded machine (it counts from the worker's import being done)
    done = sweep(sweep_file(Path.cwd(), "tree-timeout", "{mode: [hang]}",
                            "trial_timeout: 12, retries: 0"))
    assert load_study("tree-timeout").trials[0].user_attrs["status"] == "TIMEOUT", done.stdout
    assert helpers_of("tree-timeout").exists()
    assert_no_process_left(mark)


def test_helpers_die_with_a_pruned_trial(mark: str) -> None:
    done = sweep(sweep_file(Path.cwd(), "tree-prune", "{quality: [0.9, 0.1]}",
                            extra="pruner: {type: median, warmup_epochs: 0, startup_trials: 1}"))
    states = [t.state.name for t in load_study("tree-prune").trials]
    assert states == ["COMPLETE", "PRUNED"], done.stdout + done.stderr
    assert_no_process_left(mark)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_helpers_die_when_the_orchestrator_is_stopped(mark: str, signum: int) -> None:
    name = f"tree-{signal.Signals(signum).name.lower()}"
    path = sweep_file(Path.cwd(), name, "{mode: [hang]}")
    proc = subprocess.Popen(msexp_cmd("sweep", str(path)), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert wait_for("the trial's helpers start", helpers_of(name).exists, proc)
    proc.send_signal(signum)
    output, _ = proc.communicate(timeout=DEADLINE_S)
    if signum != signal.SIGKILL:
        assert proc.returncode == 128 + signum, output
        assert_no_process_left(mark)
        return
    left = carrying(mark)
    assert left, "kill -9 runs no code of ours: the helpers outlive it until the next run"
    again = sweep(path)
    assert again.returncode == 0, again.stdout + again.stderr
    log = Path(f"mlruns/trials/{name}/trial-0000/trial.log").read_text()
    assert "earlier helpers alive: 0" in log, "leftovers are killed before the rerun"
    assert_no_process_left(mark)
