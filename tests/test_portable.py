"""Portable checks: schedule, best, status, report and plan (without --check) run on any
machine; they neither import a user's experiment nor probe this machine's device."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from msexp.cli import app
from msexp.spec.precision import supports
from tests.conftest import write

SHARED = ["--storage", "postgresql://msexp@db.internal/optuna",
          "--tracking-uri", "http://mlflow.internal:5000"]


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def bf16_sweep(workdir: Path) -> Path:
    return write(workdir / "gpu.yaml", """
        name: gpu-bf16
        experiment: mlp_digits
        fixed: {amp_level: O2, amp_dtype: bfloat16}
        params: {micro_size: [1, 2]}
    """)


def test_a_bfloat16_gpu_sweep_is_scheduled_and_planned_on_a_host_without_bfloat16(
        bf16_sweep: Path) -> None:
    answer = supports("bfloat16")
    if answer is None or answer.ok:
        pytest.skip("this host runs bfloat16 AMP (or cannot tell), so it cannot show the "
                    "difference")
    refused = invoke("validate", str(bf16_sweep))
    assert refused.exit_code == 2 and "cannot run amp_dtype bfloat16" in refused.output
    scheduled = invoke("schedule", "slurm", str(bf16_sweep), "--gpus-per-task", "1", *SHARED)
    assert scheduled.exit_code == 0, scheduled.output
    script = (bf16_sweep.parent / "mlruns/slurm/gpu-bf16.sbatch").read_text()
    assert "#SBATCH --gpus-per-task=1" in script
    planned = invoke("plan", str(bf16_sweep))
    assert planned.exit_code == 0 and "grid of 2 trials" in planned.output, planned.output


@pytest.fixture
def tripwire(workdir: Path) -> Path:
    """A user's experiment that leaves a file behind when it is imported."""
    write(workdir / "tripwire.py", """
        from pathlib import Path

        Path("imported").touch()
        PARAMS = {"width": 8}
        METRICS = ("my_score",)


        def build(params):
            raise RuntimeError("not for this test")
    """)
    return write(workdir / "user.yaml", """
        name: user-experiment
        experiment: tripwire.py
        objective: {metric: my_score, direction: maximize}
        params: {width: [8, 16], micro_size: [1, 2]}
    """)


def test_portable_commands_never_import_the_users_experiment(tripwire: Path) -> None:
    marker = tripwire.parent / "imported"
    planned = invoke("plan", str(tripwire), "--json")
    assert planned.exit_code == 0, planned.output
    assert '"width": 16' in planned.output
    assert invoke("schedule", "k8s-job", str(tripwire), *SHARED).exit_code == 0
    for command in ("best", "status", "report"):
        result = invoke(command, str(tripwire))
        assert "no study named 'user-experiment'" in result.output, (command, result.output)
    assert not marker.exists(), "a portable command imported the experiment"
    invoke("validate", str(tripwire))
    assert marker.exists(), "validate is a local check: it imports the experiment"


def test_a_portable_check_still_applies_msexps_knob_rules(tripwire: Path) -> None:
    write(tripwire, """
        name: user-experiment
        experiment: tripwire.py
        objective: {metric: my_score, direction: maximize}
        params: {width: [8, 16], micro_size: [0, 2]}
    """)
    result = invoke("plan", str(tripwire))
    assert result.exit_code == 2
    assert result.output == f"{tripwire}: params.micro_size.0: must be >= 1, got 0\n"
    assert not (tripwire.parent / "imported").exists()
