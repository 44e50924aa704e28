"""Shared by the benchmarks: run one msexp trial in a fresh process, as a sweep would."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from msexp.execution.host import Host  # noqa: E402
from msexp.execution.protocol import TrialRequest  # noqa: E402
from msexp.execution.result import Status, TrialResult  # noqa: E402
from msexp.spec import trial_params  # noqa: E402
from msexp.training.records import Target  # noqa: E402


def run_trial(experiment: str, fixed: dict[str, Any], folder: Path, name: str,
              target: Target | None = None, runner: Host | None = None,
              ) -> TrialResult:
    """One trial through msexp's runner; raises SystemExit unless it completes."""
    own = runner is None
    runner = runner or Host(cwd=ROOT)
    request = TrialRequest(experiment, trial_params(experiment, fixed, "benchmark"),
                           folder / name, target)
    try:
        result = runner.run(request, timeout=3600)
    finally:
        if own:
            runner.kill()
    if result.status is not Status.COMPLETE:
        raise SystemExit(f"{name}: {result.status.value} {result.error}\n{result.log_tail()}")
    return result
