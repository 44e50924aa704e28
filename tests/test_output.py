"""Output for pipes and scripts: nothing wrapped or cut, one JSON document with --json, and
no library's log lines or warnings among msexp's own output."""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow import MlflowClient

from msexp.tracking.effects import short
from tests.conftest import ASSETS, ROOT, msexp_cmd, write

DEADLINE_S = 240


@dataclass
class Swept:
    folder: Path
    sweep: Path
    output: str  # stdout and stderr of the sweep, written to pipes


def msexp_piped(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """msexp with stdout and stderr on pipes, as in `msexp ... | cat` (no terminal)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_TRACKING_URI", "MSEXP_STORAGE", "COLUMNS")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ASSETS)])
    return subprocess.run(msexp_cmd(*args), cwd=folder, env=env, capture_output=True,
                          text=True, timeout=DEADLINE_S)


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Swept:
    """A finished two-trial sweep in a folder whose paths are longer than 80 columns."""
    folder = tmp_path_factory.mktemp("output") / ("a-folder-whose-name-alone-is-longer-than-"
                                                  "forty-columns")
    sweep = write(folder / "piped.yaml", """
        name: piped
        experiment: mlp_digits
        fixed: {epochs: 1, hidden: 16}
        params: {micro_size: [1, 2]}
    """)
    done = msexp_piped(folder, "sweep", str(sweep))
    assert done.returncode == 0, done.stdout + done.stderr
    return Swept(folder, sweep, done.stdout + done.stderr)


def test_a_piped_sweep_shows_whole_cells_and_links_and_no_library_lines(swept: Swept) -> None:
    lines = swept.output.splitlines()
    assert "…" not in swept.output, swept.output
    header = next(line for line in lines if "micro_size" in line)
    assert "eval_accuracy" in header and "samples_per_s" in header, header
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == 2 and all("│ COMPLETE │" in row for row in rows), swept.output
    runs = next(line for line in lines if line.startswith("compare trials:"))
    assert re.fullmatch(r"compare trials: +http://127\.0\.0\.1:\d+/#/experiments/\d+/runs"
                        r"\?workflowType=machine_learning", runs), runs
    assert not [line for line in lines if re.search(r"\bINFO\b|alembic|mlflow\.store|"
                                                    r"Warning", line)], swept.output
    assert "Creating initial MLflow database tables" in (
        swept.folder / "mlruns" / "msexp.log").read_text(), "MLflow's lines go to the log"


def test_best_piped_prints_the_checkpoint_path_on_one_line(swept: Swept) -> None:
    done = msexp_piped(swept.folder, "best", str(swept.sweep))
    assert done.returncode == 0, done.stderr
    checkpoint = next(line for line in done.stdout.splitlines()
                      if line.startswith("  checkpoint: "))
    path = Path(checkpoint.removeprefix("  checkpoint: "))
    assert len(str(path)) > 80 and path.is_file(), done.stdout


def test_best_json_is_one_document_naming_the_trial_run_and_checkpoint(swept: Swept) -> None:
    done = msexp_piped(swept.folder, "best", str(swept.sweep), "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["study"] == "piped"
    (found,) = document["best"]
    assert set(found["values"]) == {"eval_accuracy"} and 0 <= found["values"][
        "eval_accuracy"] <= 1
    assert found["params"]["micro_size"] in (1, 2) and found["params"]["hidden"] == 16
    assert Path(found["checkpoint"]).is_file()
    assert found["run_url"].endswith(f"/runs/{found['run_id']}?workflowType=machine_learning")


def test_status_json_counts_the_finished_trials(swept: Swept) -> None:
    done = msexp_piped(swept.folder, "status", str(swept.sweep), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"study": "piped", "finished": 2, "total": 2,
                                       "states": {"COMPLETE": 2}, "running": [],
                                       "missing_objectives": None, "mlflow_running": []}


def test_report_json_lists_trials_best_and_plots_and_routes_warnings_to_the_log(
        swept: Swept) -> None:
    done = msexp_piped(swept.folder, "report", str(swept.sweep), "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert [t["params"] for t in document["trials"]] == [{"micro_size": 1},
                                                         {"micro_size": 2}]
    assert {t["status"] for t in document["trials"]} == {"COMPLETE"}
    assert len(document["best"]) == 1 and document["multi_objective"] is False
    assert all((swept.folder / path).is_file() for path in document["plots"])
    assert document["run_id"], "the report is logged on the sweep's parent run"
    assert "Warning" not in done.stderr, done.stderr
    values = {t["metrics"]["eval_accuracy"] for t in document["trials"]}
    if len(values) == 1:  # micro_size 1 and 2 give the same update: nothing to rank
        assert document["importances"] == {}
        assert document["importance_note"] == (
            f"importance: none, every complete trial has eval_accuracy = {short(values.pop())}")
    else:
        assert set(document["importances"]) == {"micro_size"}


def test_each_trial_run_of_the_sweep_names_its_dataset(swept: Swept) -> None:
    client = MlflowClient(f"sqlite:///{swept.folder / 'mlruns' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("piped").experiment_id
    trials = [r for r in client.search_runs([experiment])
              if r.data.tags.get("msexp.role") == "trial"]
    assert len(trials) == 2
    assert all([d.dataset.name for d in run.inputs.dataset_inputs] == ["sklearn digits"]
               for run in trials), [run.inputs for run in trials]


def test_msexps_own_warnings_reach_stderr_and_the_log(swept: Swept) -> None:
    journal = swept.folder / "mlruns" / "optuna.journal"
    whole = journal.read_bytes()
    journal.write_bytes(whole + b'{"op_code": 5, "trunc')  # a writer killed mid-record
    done = msexp_piped(swept.folder, "status", str(swept.sweep))
    assert done.returncode == 0, done.stderr
    assert "cut a partial last record" in done.stderr
    assert "cut a partial last record" in (swept.folder / "mlruns" / "msexp.log").read_text()
    assert journal.read_bytes() == whole
