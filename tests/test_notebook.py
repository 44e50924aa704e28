"""The example notebook (examples/accum.ipynb) run in a real Jupyter kernel: the sweep,
its DataFrame, the memory/accuracy figure inline and the best network's accuracy, with
nothing from MLflow or MindSpore in its cells."""

from __future__ import annotations

import re

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import ROOT

pytestmark = pytest.mark.slow  # trials in worker processes (tests/README.md: tiers)

NOTEBOOK = ROOT / "examples" / "accum.ipynb"
NOISE = re.compile(r"mlflow|alembic|optuna|\[WARNING\]|\[ERROR\]|Warning:|ME\(", re.I)


def outputs(cell: nbformat.NotebookNode, kind: str) -> list[nbformat.NotebookNode]:
    return [o for o in cell.get("outputs", []) if o["output_type"] == kind]


def text_of(cell: nbformat.NotebookNode, name: str = "stdout") -> str:
    return "".join(o["text"] for o in outputs(cell, "stream") if o["name"] == name)


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> list[nbformat.NotebookNode]:
    """The notebook's code cells after a run in a fresh folder (its ./mlruns there)."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    folder = tmp_path_factory.mktemp("notebook")
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute()
    assert (folder / "mlruns" / "optuna.journal").is_file()  # it ran where it was started
    return [c for c in notebook.cells if c.cell_type == "code"]


def test_the_sweep_shows_a_line_per_trial_and_no_librarys_lines(
        ran: list[nbformat.NotebookNode]) -> None:
    shown = text_of(ran[0])
    assert re.search(r"^trial 0: COMPLETE eval_accuracy=0\.\d+ \(", shown, re.M), shown
    assert re.search(r"^trial 1: COMPLETE eval_accuracy=0\.\d+ \(", shown, re.M), shown
    for cell in ran:
        assert outputs(cell, "error") == []
        assert not NOISE.search(text_of(cell, "stderr")), text_of(cell, "stderr")
        assert not NOISE.search(text_of(cell).replace("compare trials: http", "")), \
            text_of(cell)


def test_the_dataframe_has_a_row_per_trial(ran: list[nbformat.NotebookNode]) -> None:
    [result] = outputs(ran[1], "execute_result")
    html = result["data"]["text/html"]
    assert html.count("<tr") == 3  # the header and two trials
    assert html.count("COMPLETE") == 2 and "train_mem_mb" in html


def test_the_memory_and_accuracy_picture_shows_inline(
        ran: list[nbformat.NotebookNode]) -> None:
    assert re.search(r"^micro_size 1 -> 8: eval_accuracy [+-]0\.0 pp, .*train_mem_mb x0\.\d+",
                     text_of(ran[2]), re.M), text_of(ran[2])
    [figure] = outputs(ran[2], "execute_result")
    assert "image/png" in figure["data"]


def test_the_best_network_scores_what_its_trial_recorded(
        ran: list[nbformat.NotebookNode]) -> None:
    line = text_of(ran[3])
    found = re.search(r"validation accuracy (0\.\d{4}), recorded (0\.\d{4})", line)
    assert found, line
    assert found[1] == found[2] and float(found[1]) > 0.5
