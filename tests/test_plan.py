"""`msexp plan` lists the trials of a grid with micro-batch and effective batch."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from msexp.cli import app
from msexp.keys import TrialKey
from msexp.search.study import open_study
from msexp.spec import load_spec, parse_spec
from tests.conftest import write


def test_plan_lists_every_grid_point(tmp_path) -> None:
    path = write(tmp_path / "g.yaml", """
        name: g
        experiment: mlp_digits
        fixed: {batch_size: 64}
        params:
          micro_size: [1, 4]
          lr: [0.01, 0.1]
    """)
    result = CliRunner().invoke(app, ["plan", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("│")]
    cells = [[c.strip() for c in row.strip("│").split("│")] for row in rows]
    assert cells == [
        ["0", "1", "0.01", "64", "64"],
        ["1", "1", "0.1", "64", "64"],
        ["2", "4", "0.01", "16", "64"],
        ["3", "4", "0.1", "16", "64"],
    ]
    assert "grid of 4 trials on mlp_digits" in result.output


def test_budget_caps_the_grid() -> None:
    spec = parse_spec("name: g\nexperiment: mlp_digits\nbudget: {trials: 2}\n"
                      "params: {micro_size: [1, 2, 4]}\n", "g.yaml")
    assert spec.n_trials() == 2


def test_plan_of_a_sampler_shows_distributions(tmp_path) -> None:
    path = write(tmp_path / "t.yaml", """
        name: t
        experiment: mlp_digits
        method: tpe
        budget: {trials: 7}
        params:
          lr: {low: 0.001, high: 0.1, log: true}
          micro_size: [1, 2]
    """)
    result = CliRunner().invoke(app, ["plan", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "tpe, 7 trials" in result.output
    assert "0.001 .. 0.1 log" in result.output


def test_plan_numbers_grid_rows_as_the_study_numbers_its_trials(workdir) -> None:
    """Points sharing compiled graphs are queued together: lr does not change the graphs,
    micro_size does, so the lr x micro_size grid runs micro_size 1 first."""
    path = write(workdir / "lr.yaml", """
        name: lr-by-micro
        experiment: mlp_digits
        params:
          lr: [0.01, 0.1]
          micro_size: [1, 2]
    """)
    result = CliRunner().invoke(app, ["plan", str(path), "--json"])
    assert result.exit_code == 0, result.output
    grid = json.loads(result.output)["grid"]
    planned = [(row["number"], row["params"]["lr"], row["params"]["micro_size"]) for row in grid]
    assert planned == [(0, 0.01, 1), (1, 0.1, 1), (2, 0.01, 2), (3, 0.1, 2)]
    assert [row["grid_index"] for row in grid] == [0, 2, 1, 3]
    study, _ = open_study(load_spec(path), None)
    queued = [(t.number, t.user_attrs[TrialKey.GRID_POINT]) for t in study.trials]
    assert queued == [(row["number"], row["grid_index"]) for row in grid]


EXPERIMENT = '''
from pathlib import Path

from msexp.experiment import load_experiment

Path("imported").touch()  # plan reads the source; it never runs it
DEFAULTS = {"lr": 0.05, "epochs": 2, "batch_size": 32}
PARAMS = {"hidden": 64, "dropout": 0.1}


def build(params):
    return load_experiment("mlp_digits").build(params)
'''


def test_plan_prints_what_each_trial_gets_the_experiments_defaults_and_knobs_included(
        workdir) -> None:
    """A user experiment's DEFAULTS (lr 0.05, not msexp's 0.01) and its own knobs, and the
    knobs a swept value brings in (loss_scale_window under dynamic): fixed + a row's params
    are the trial's params, as the sweep resolves them with the experiment imported."""
    write(workdir / "mine.py", EXPERIMENT)
    path = write(workdir / "mine.yaml", """
        name: mine
        experiment: mine.py
        fixed: {hidden: 16}
        params: {micro_size: [1, 2], loss_scale: [none, dynamic]}
    """)
    result = CliRunner().invoke(app, ["plan", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert not (workdir / "imported").exists(), "plan runs anywhere: it imports nothing"
    planned = json.loads(result.output)
    fixed = planned["fixed"]
    # mutation: plan takes msexp's defaults (lr=0.01, epochs=5) and leaves out dropout
    assert (fixed["lr"], fixed["epochs"], fixed["hidden"], fixed["dropout"]) == (
        0.05, 2, 16, 0.1)
    spec = load_spec(path)  # what a sweep runs: the experiment imported
    assert (workdir / "imported").exists()
    trials = [spec.space.resolve(point) for _, point in spec.space.queue_order(4)]
    # mutation: a row holds only the swept values (no loss_scale_window under dynamic)
    assert [{**fixed, **row["params"]} for row in planned["grid"]] == trials
    assert [row["micro_batch"] for row in planned["grid"]] == [
        32 // t["micro_size"] for t in trials], "the experiment's batch_size"
    table = CliRunner().invoke(app, ["plan", str(path)], env={"COLUMNS": "300"})
    assert "lr=0.05" in table.output and "dropout=0.1" in table.output
    assert "loss_scale_window" in table.output


def test_plan_shows_only_what_it_knows_of_an_experiment_whose_defaults_are_computed(
        workdir) -> None:
    write(workdir / "computed.py", EXPERIMENT.replace(
        '"batch_size": 32}', '"batch_size": 32}\nDEFAULTS["lr"] = 0.2'))
    path = write(workdir / "computed.yaml", """
        name: computed
        experiment: computed.py
        fixed: {epochs: 3}
        params: {micro_size: [1, 2]}
    """)
    result = CliRunner().invoke(app, ["plan", str(path), "--json"])
    assert result.exit_code == 0, result.output
    planned = json.loads(result.output)
    # mutation: msexp's lr=0.01 shown for a trial that gets 0.2
    assert planned["fixed"] == {"epochs": 3}
    assert [row["micro_batch"] for row in planned["grid"]] == [None, None]
    assert planned["note"] == ("computed.py does not write its DEFAULTS and PARAMS as "
                               "literals, so only the values the sweep file sets are "
                               "shown; `msexp plan --check` imports it")
    assert not (workdir / "imported").exists()


@pytest.mark.parametrize("change", [
    ("from pathlib import Path\n", "from pathlib import Path\nfrom os.path import *\n"),
    ('DEFAULTS = {"lr": 0.05, "epochs": 2, "batch_size": 32}',
     'DEFAULTS = dict(lr=0.05, epochs=2, batch_size=32)'),
    ('PARAMS = {"hidden": 64, "dropout": 0.1}', 'PARAMS = [("hidden", 64), ("dropout", 0.1)]'),
], ids=["star-import", "defaults-called", "params-not-a-dict"])
def test_plan_shows_only_the_sweeps_values_where_the_source_could_mean_otherwise(
        workdir, change: tuple[str, str]) -> None:
    """issue 53 (branches): a star import may bring a DEFAULTS in; a DEFAULTS or PARAMS
    that is no dict literal is not read as one. The table says so as the JSON does."""
    write(workdir / "other.py", EXPERIMENT.replace(*change))
    path = write(workdir / "other.yaml", """
        name: other
        experiment: other.py
        fixed: {epochs: 3}
        params: {micro_size: [1, 2]}
    """)
    result = CliRunner().invoke(app, ["plan", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["fixed"] == {"epochs": 3}, "no lr 0.05 or hidden 64"
    table = CliRunner().invoke(app, ["plan", str(path)], env={"COLUMNS": "300"})
    assert table.exit_code == 0, table.output
    assert table.output.splitlines()[-2:] == [
        "fixed: epochs=3", "note: other.py does not write its DEFAULTS and PARAMS as literals, "
        "so only the values the sweep file sets are shown; `msexp plan --check` imports it"]
    assert not (workdir / "imported").exists()


def _cells(output: str) -> list[list[str]]:
    rows = [line for line in output.splitlines() if line.startswith(("│", "┃"))]
    return [[c.strip() for c in row.strip("│┃").split("│" if "│" in row else "┃")]
            for row in rows]


def test_plan_shows_a_conditional_param_as_a_dash_where_it_does_not_apply_and_its_when(
        tmp_path) -> None:
    """A grid's cell of a param a trial does not get is `-`; a sampler's table names each
    param's condition under `when`. Mutations (issue 53): the dash (`None`, no default), the
    column's name, the param's name or its condition left out of the row."""
    grid = write(tmp_path / "g.yaml", """
        name: g
        experiment: mlp_digits
        params:
          loss_scale: [none, dynamic]
          loss_scale_window: {values: [2], when: {loss_scale: dynamic}}
    """)
    shown = CliRunner().invoke(app, ["plan", str(grid)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert _cells(shown.output)[:3] == [
        ["#", "loss_scale", "loss_scale_window", "loss_scale_value", "loss_scale_factor",
         "micro_batch", "effective_batch"],
        ["0", "none", "-", "-", "-", "64", "64"],
        ["1", "dynamic", "2", "6.554e+04", "2", "64", "64"]]
    sampled = write(tmp_path / "t.yaml", """
        name: t
        experiment: mlp_digits
        method: tpe
        budget: {trials: 7}
        params:
          loss_scale: [none, dynamic]
          loss_scale_window: {values: [2, 20], when: {loss_scale: dynamic}}
    """)
    shown = CliRunner().invoke(app, ["plan", str(sampled)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert _cells(shown.output) == [
        ["param", "distribution", "when"],
        ["loss_scale", "none, dynamic", ""],
        ["loss_scale_window", "2, 20", "loss_scale in ['dynamic']"]]


def test_a_check_runs_the_first_grid_point_or_each_params_first_value_or_low_end() -> None:
    """The params `plan --check` and `validate --check` try. Mutations (issue 53):
    `scripts.first_trial` 3 (no grid iterated), 9 (values and ranges swapped)."""
    from msexp.cli.scripts import first_trial

    searched = parse_spec("name: k\nexperiment: lenet_digits\nmethod: random\nparams:\n"
                          "  micro_size: [2, 4]\n  lr: {low: 0.001, high: 0.1, log: true}\n"
                          "  epochs: {low: 3, high: 9}\n", "k.yaml")
    first = first_trial(searched)
    assert (first["micro_size"], first["lr"], first["epochs"]) == (2, 0.001, 3)
    assert isinstance(first["epochs"], int)
    grid = parse_spec("name: k\nexperiment: lenet_digits\nparams:\n  micro_size: [2, 4]\n"
                      "  batch_size: [64, 16]\n", "k.yaml")
    first = first_trial(grid)
    assert (first["micro_size"], first["batch_size"]) == (2, 64)


def test_plan_check_builds_the_first_grid_points_workload_and_warns_of_its_split_batch(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """`plan --check` on a built-in experiment builds the first trial's workload (here a
    fake: no MindSpore) and says what its BatchNorm layers do to a split batch. Mutations
    (issue 53): `sweeps._check_workload` 4 (no grid iterated), 12 (the workload built
    without the trial's params)."""
    import sys
    from types import ModuleType, SimpleNamespace

    from msexp.cli.sweeps import _check_workload

    built = []

    def fake(name: str, **functions) -> None:
        module = ModuleType(name)
        module.__dict__.update(functions)
        monkeypatch.setitem(sys.modules, name, module)

    fake("msexp.execution.local", build_workload=lambda request: (
        built.append(request.params) or SimpleNamespace(network="net")))
    fake("msexp.training.check", first_step_problem=lambda workload, micro_batch: None)
    fake("msexp.training.batch_stats", batch_statistic_layers=lambda network: ["bn"],
         random_mask_layers=lambda network: [], seeded_dropout_layers=lambda network: [])
    spec = parse_spec("name: k\nexperiment: lenet_digits\nparams:\n  micro_size: [2, 1]\n"
                      "  batch_size: [64, 16]\n", "k.yaml")
    _check_workload(spec)
    assert [(p["micro_size"], p["batch_size"]) for p in built] == [(2, 64)]
    assert capsys.readouterr().out.startswith("k.yaml: batch statistics: the network has 1 ")


def test_plan_reads_a_modules_defaults_and_types_each_knob_the_sweep_sets(
        workdir, monkeypatch: pytest.MonkeyPatch) -> None:
    """`experiment: lib.mine` (a module on the path): its DEFAULTS are read from its source;
    each name the sweep sets that is no knob becomes one, after a knob of msexp's too.
    (issue 53 fresh: experiment_source._source 24; load.unimported_experiment 23)"""
    monkeypatch.syspath_prepend(str(workdir))
    write(workdir / "lib" / "mine.py", EXPERIMENT)
    path = write(workdir / "mod.yaml", """
        name: mod
        experiment: lib.mine
        fixed: {epochs: 3, layers: 4}
        params: {micro_size: [1, 2]}
    """)
    result = CliRunner().invoke(app, ["plan", str(path), "--json"])
    assert result.exit_code == 0, result.output
    fixed = json.loads(result.output)["fixed"]
    assert (fixed["lr"], fixed["epochs"], fixed["layers"]) == (0.05, 3, 4)
    assert not (workdir / "imported").exists()


@pytest.mark.parametrize("experiment", ["lib.package", "sub/mine"])
def test_plan_shows_only_the_sweeps_values_for_a_package_or_a_path_without_py(
        workdir, monkeypatch: pytest.MonkeyPatch, experiment: str) -> None:
    """A package's source (its __init__.py) is not read; `sub/mine` is a file path, not
    the module sub/mine.py on the path: plan shows what the sweep file sets, and says why.
    (issue 53 fresh: experiment_source.written_declarations 9, _source 5)"""
    monkeypatch.syspath_prepend(str(workdir))
    write(workdir / "lib" / "package" / "__init__.py", EXPERIMENT)
    write(workdir / "sub" / "mine.py", EXPERIMENT)
    path = write(workdir / "p.yaml", f"""
        name: p
        experiment: {experiment}
        fixed: {{epochs: 3}}
        params: {{micro_size: [1, 2]}}
    """)
    result = CliRunner().invoke(app, ["plan", str(path), "--json"])
    assert result.exit_code == 0, result.output
    planned = json.loads(result.output)
    assert planned["fixed"] == {"epochs": 3}, "not the DEFAULTS of another file"
    assert planned["note"].startswith(f"{experiment} does not write its DEFAULTS")


def _fake_workload_modules(monkeypatch: pytest.MonkeyPatch, problem: str | None) -> None:
    """MindSpore's side of `plan --check` faked: a built workload whose first step has
    `problem` (None: it trains), with one BatchNorm layer."""
    import sys
    from types import ModuleType, SimpleNamespace

    def fake(name: str, **functions) -> None:
        module = ModuleType(name)
        module.__dict__.update(functions)
        monkeypatch.setitem(sys.modules, name, module)

    fake("msexp.execution.local", build_workload=lambda request: SimpleNamespace(network="net"))
    fake("msexp.training.check", first_step_problem=lambda workload, micro_batch: problem)
    fake("msexp.training.batch_stats", batch_statistic_layers=lambda network: ["bn"],
         random_mask_layers=lambda network: [], seeded_dropout_layers=lambda network: [])


def test_plan_check_refuses_a_first_step_that_fails_naming_the_experiment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A first micro-batch that does not train refuses the sweep in one line, under the
    experiment's key. (issue 53 fresh fcli: cli.sweeps._check_workload 17 (the problem
    ignored), 38 (the key renamed))"""
    from msexp.cli.sweeps import _check_workload
    from msexp.errors import SpecError

    _fake_workload_modules(monkeypatch, "the loss is nan after the first step")
    spec = parse_spec("name: k\nexperiment: lenet_digits\nparams:\n  micro_size: [2, 1]\n",
                      "k.yaml")
    with pytest.raises(SpecError) as refused:
        _check_workload(spec)
    assert str(refused.value) == ("k.yaml: experiment: the loss is nan after the first step, "
                                  "got lenet_digits")


def test_plan_checks_batch_statistics_warning_is_plain_text_on_a_color_terminal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The warning of a split batch's BatchNorm shows as it is (numbers, a path), with no
    color codes inside. (issue 53 fresh fcli: cli.sweeps._check_workload 59, Rich's
    highlighting on)"""
    import io

    from rich.console import Console

    from msexp.cli import sweeps

    _fake_workload_modules(monkeypatch, None)
    screen = Console(file=io.StringIO(), width=200, force_terminal=True,
                     color_system="truecolor")
    monkeypatch.setattr(sweeps, "console", screen)
    spec = parse_spec("name: k\nexperiment: lenet_digits\nparams:\n  micro_size: [2, 1]\n",
                      "k.yaml")
    sweeps._check_workload(spec)
    shown = screen.file.getvalue()
    assert shown.startswith("k.yaml: batch statistics: the network has 1 BatchNorm"), shown
    assert "\x1b" not in shown, shown
