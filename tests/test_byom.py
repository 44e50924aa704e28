"""Bring your own model: any experiment file sweeps like a built-in one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from msexp.cli import app
from tests.conftest import mlflow_client, write

MODEL = """
    import numpy as np
    from msexp.experiment import Workload

    DEFAULTS = {"epochs": 1, "batch_size": 32, "lr": 0.05}
    PARAMS = {"width": 16}
    METRICS = ("eval_margin",)


    def margin(logits, labels):
        return float(np.mean(logits.max(axis=1) - logits.mean(axis=1)))


    def build(params):
        from mindspore import nn

        rng = np.random.default_rng(0)
        x = rng.normal(size=(256, 8)).astype(np.float32)
        y = (x[:, 0] > 0).astype(np.int32)
        net = nn.SequentialCell(nn.Dense(8, params["width"]), nn.ReLU(),
                                nn.Dense(params["width"], 2))
        return Workload(net, nn.CrossEntropyLoss(), (x[:192], y[:192]), (x[192:], y[192:]),
                        data_source="synthetic sign task", metrics={"eval_margin": margin})
"""


def run(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


@pytest.mark.slow
def test_own_file_experiment_sweeps_into_mlflow(workdir: Path, tmp_path_factory) -> None:
    outside = tmp_path_factory.mktemp("elsewhere")
    model = write(outside / "my_net.py", MODEL)
    sweep = write(workdir / "own.yaml", f"""
        name: own
        experiment: {model}:build
        objective: {{metric: eval_margin, direction: maximize}}
        params:
          micro_size: [1, 2]
          width: [8, 32]
    """)
    result = run("sweep", str(sweep))
    assert result.exit_code == 0, result.output
    client = mlflow_client()
    exp = client.get_experiment_by_name("own")
    runs = [r for r in client.search_runs([exp.experiment_id])
            if r.data.tags.get("msexp.role") == "trial"]
    assert sorted((r.data.params["micro_size"], r.data.params["width"]) for r in runs) == \
        [("1", "32"), ("1", "8"), ("2", "32"), ("2", "8")]
    for r in runs:
        assert r.data.tags["status"] == "COMPLETE"
        assert "eval_margin" in r.data.metrics and "eval_accuracy" in r.data.metrics
        assert r.data.params["data_source"] == "synthetic sign task"


@pytest.mark.parametrize("case, source, expected", [
    ("syntax", "def build(params:\n", "does not import: SyntaxError"),
    ("raises", "import numpy\nraise ImportError('needs torch')\ndef build(p): pass\n",
     "does not import: ImportError: needs torch at bad.py:2 `raise ImportError('needs torch')`"),
    ("no_build", "X = 1\n", "has no function `build(params) -> Workload`"),
    ("wrong_return", "def build(params):\n    return 1, 2\n",
     "build() must return msexp.experiment.Workload, got tuple"),
    ("build_raises", "def build(params):\n    return params['missing']\n",
     "build() raised KeyError: 'missing' at bad.py:2 `return params['missing']`"),
    ("bad_data", MODEL.replace("(x[:192], y[:192])", "x[:192]"),
     "Workload.train must be (inputs, labels) arrays or a mindspore.dataset dataset"),
])
def test_experiment_errors_are_one_line_at_validate_time(case: str, source: str,
                                                         expected: str, workdir: Path) -> None:
    """validate imports and builds the experiment (a local check; plan alone does not)."""
    import textwrap

    write(workdir / "bad.py", textwrap.dedent(source))
    sweep = write(workdir / "s.yaml", "name: s\nexperiment: bad.py:build\n")
    result = run("validate", str(sweep))
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{sweep}: experiment: "), result.output
    assert expected in lines[0], lines[0]
    assert not (workdir / "mlruns").exists()


def test_param_nobody_declares_is_rejected(workdir: Path) -> None:
    write(workdir / "net.py", MODEL)
    sweep = write(workdir / "s.yaml", "name: s\nexperiment: net.py:build\n"
                                      "params: {depth: [1, 2]}\n")
    result = run("validate", str(sweep))
    assert result.exit_code == 2
    assert result.output.strip() == (f"{sweep}: params.depth: is not a knob of msexp or of the "
                                     "experiment (see `msexp knobs`), got [1, 2]")


def test_module_reference_works(workdir: Path) -> None:
    """`broken:build` is the module on the path: its own knob `mode` is a knob of the sweep."""
    sweep = write(workdir / "s.yaml", "name: s\nexperiment: broken:build\n"
                                      "params: {mode: [works, nan]}\n")
    result = run("validate", str(sweep))
    built, checked = result.output.strip().splitlines()  # validate builds it once
    assert result.exit_code == 0 and built.startswith("mode works in pid ")
    assert checked == f"{sweep}: ok (grid, 2 trials)"
    write(sweep, "name: s\nexperiment: broken:build\nparams: {depth: [1, 2]}\n")
    refused = run("validate", str(sweep))
    assert refused.exit_code == 2 and "params.depth: is not a knob" in refused.output


@pytest.mark.slow
def test_scaffolded_experiment_and_sweep_run_end_to_end(workdir: Path) -> None:
    assert run("new", "experiment", "my_model").exit_code == 0
    assert (workdir / "experiments" / "my_model.py").is_file()
    result = run("new", "sweep", "--experiment", "experiments/my_model.py", "--method", "tpe")
    assert result.exit_code == 0, result.output
    sweep = workdir / "sweeps" / "my_model.yaml"
    spec = yaml.safe_load(sweep.read_text())
    assert spec["experiment"] == "experiments/my_model.py:build" and spec["method"] == "tpe"
    spec["budget"]["trials"] = 2
    spec["fixed"]["epochs"] = 1
    sweep.write_text(yaml.safe_dump(spec))
    result = run("sweep", str(sweep))
    assert result.exit_code == 0, result.output
    assert "2/2" in result.output
    # mutation (issue 18): the template's loss made NaN fails both trials with exit 0
    runs = [r for r in mlflow_client().search_runs(
        [mlflow_client().get_experiment_by_name("my_model").experiment_id])
        if r.data.tags.get("msexp.role") == "trial"]
    assert [r.data.tags["status"] for r in runs] == ["COMPLETE", "COMPLETE"]
    assert max(r.data.metrics["eval_accuracy"] for r in runs) > 0.3  # chance is 0.1
    assert run("new", "experiment", "my_model").exit_code == 1, "never overwrite silently"


def test_new_refuses_a_name_that_is_no_module_and_overwrites_only_with_force(
        workdir: Path) -> None:
    """issue 53 (branches): `msexp new` refusals, one line each, nothing written."""
    refused = run("new", "experiment", "3d-net")
    assert refused.exit_code == 2, refused.output  # input refused, nothing run
    assert refused.output == ("msexp new experiment: NAME: must be a Python identifier, "
                              "got 3d-net\n")
    assert not (workdir / "experiments").exists()
    assert run("new", "experiment", "mine").exit_code == 0
    assert run("new", "sweep", "--experiment", "experiments/mine.py").exit_code == 0
    sweep = workdir / "sweeps" / "mine.yaml"
    assert yaml.safe_load(sweep.read_text())["experiment"] == "experiments/mine.py:build"
    sweep.write_text("name: edited\n")
    again = run("new", "sweep", "--experiment", "experiments/mine.py")
    assert again.exit_code == 1
    assert again.output == "sweeps/mine.yaml: exists already; pass --force to overwrite\n"
    assert sweep.read_text() == "name: edited\n", "never overwritten silently"
    assert run("new", "sweep", "--experiment", "experiments/mine.py", "--force").exit_code == 0
    assert yaml.safe_load(sweep.read_text())["name"] == "mine"


def test_a_knob_of_a_type_msexp_cannot_sweep_is_refused_in_one_line(workdir: Path) -> None:
    """issue 53 (branches): a PARAMS default, or a value a sweep file sets for an
    experiment plan cannot read, of a type a knob cannot have: the key and the value once
    (was: the name twice and `got` twice, Python's repr then the YAML's)."""
    write(workdir / "mine.py", "PARAMS = {'layers': {'a': 1}}\n\n\ndef build(params):\n"
                               "    raise AssertionError('never built')\n")
    write(workdir / "mine.yaml", "name: mine\nexperiment: mine.py\n")
    declared = run("validate", "mine.yaml")
    assert declared.exit_code == 2, declared.output
    assert declared.output == ("mine.yaml: experiment PARAMS.layers: must be bool, int, float, "
                               'str or list, got {"a": 1}\n')
    write(workdir / "computed.py", "DEFAULTS = dict(lr=0.1)\n")  # plan cannot read it
    write(workdir / "set.yaml", "name: set\nexperiment: computed.py\nfixed: {layers: {a: 1}}\n")
    planned = run("plan", "set.yaml")
    assert planned.exit_code == 2, planned.output
    assert planned.output == ("set.yaml: fixed.layers: must be bool, int, float, str or list, "
                              'got {"a": 1}\n')


def test_knobs_lists_types_defaults_and_conditions() -> None:
    result = run("knobs", "--experiment", "mlp_digits")
    assert result.exit_code == 0
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in result.output.splitlines() if line.startswith("│")}
    assert rows["micro_size"][:3] == ["int", ">= 1", "1"]
    assert rows["lr"][2] == "0.02"  # mlp_digits' default
    assert rows["loss_scale_window"][3] == "loss_scale in ['dynamic']"
    assert rows["hidden"][:3] == ["int", "", "512"]


def test_validation_builds_an_own_experiment_once_even_for_thor_splits(workdir: Path) -> None:
    counting = MODEL.replace('    def build(params):\n', '''    def build(params):
        with open("builds.txt", "a") as f:
            f.write("build\\n")
''')
    write(workdir / "counted.py", counting)
    sweep = write(workdir / "s.yaml", """
        name: counted
        experiment: counted.py
        fixed: {optimizer: thor}
        params:
          thor.split_indices: [[], [0]]
    """)
    result = CliRunner().invoke(app, ["validate", str(sweep)])
    assert result.exit_code == 0, result.output
    assert (workdir / "builds.txt").read_text().splitlines() == ["build"]
    bad = write(workdir / "bad.yaml", """
        name: counted
        experiment: counted.py
        fixed: {optimizer: thor}
        params:
          thor.split_indices: [[0, 5]]
    """)
    refused = CliRunner().invoke(app, ["validate", str(bad)])
    assert refused.exit_code == 2
    assert "counted.py has 2 THOR layers" in refused.output
    assert (workdir / "builds.txt").read_text().splitlines() == ["build", "build"]


def test_status_and_report_look_up_the_study_without_building(workdir: Path) -> None:
    raising = MODEL.replace("    def build(params):\n",
                            "    def build(params):\n        raise RuntimeError('no build')\n")
    write(workdir / "counted.py", raising)
    sweep = write(workdir / "s.yaml", "name: counted\nexperiment: counted.py\n")
    for command in ("status", "report"):
        result = CliRunner().invoke(app, [command, str(sweep)])
        assert result.exit_code == 1, result.output
        assert result.output.strip() == ("no study named 'counted' in mlruns/optuna.journal: "
                                         f"run `msexp sweep {sweep}` first")


def test_knobs_of_an_experiment_is_titled_with_its_name() -> None:
    """The table of `msexp knobs --experiment X` says whose defaults it shows. (issue 53
    fresh fcli: cli.scaffold.knobs 12, the title without the experiment)"""
    result = run("knobs", "--experiment", "mlp_digits")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].strip() == "knobs of mlp_digits", result.output[:300]


def test_writing_a_sweep_file_never_overwrites_one_unless_told(workdir: Path) -> None:
    """`templates.new_sweep` (what `msexp new sweep` writes with) leaves an existing file as
    it is unless forced. (issue 53 fresh fcli: cli.templates.new_sweep 3, force by default)"""
    from msexp.cli import templates
    from msexp.errors import MsexpError

    path = templates.new_sweep("mlp_digits")
    assert path == Path("sweeps/mlp_digits.yaml")
    path.write_text("name: edited\n")
    with pytest.raises(MsexpError, match="exists already; pass --force to overwrite"):
        templates.new_sweep("mlp_digits", "tpe")
    assert path.read_text() == "name: edited\n"
    templates.new_sweep("mlp_digits", "tpe", force=True)
    assert yaml.safe_load(path.read_text())["name"] == "mlp_digits"
