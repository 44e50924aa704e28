"""The sweep file: every class of bad input gets one line, exit code 2, and nothing runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from msexp.cli import app
from msexp.errors import SpecError
from msexp.spec import Method, parse_spec
from tests.conftest import ASSETS

pytestmark = pytest.mark.usefixtures("models_built_by_each_test")

BAD = sorted((ASSETS / "bad").glob("*.yaml"))


def expected_message(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), path
    return first[len("# expect: "):]


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_file_is_one_line_with_exit_code_2(path: Path, monkeypatch) -> None:
    monkeypatch.chdir(path.parent)
    result = CliRunner().invoke(app, ["validate", path.name])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    expected = expected_message(path)  # exact, unless it ends with " ..." (a growing list)
    if expected.endswith(" ..."):
        assert lines[0].startswith(expected[:-len(" ...")]), lines[0]
    else:  # mutation: a missing key's line ends ", got None"
        assert lines[0] == expected
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("text", "line"), [
    ("experiment: 5", "experiment: must be an experiment name (built-in, package.module:build "
                      "or file.py) or a mapping with a command, got 5"),
    ('experiment: ""', "experiment: must have at least 1 character, got "),
    ('experiment: {command: ""}', "experiment.command: must have at least 1 character, got "),
    ("experiment: {command: x, bogus: 1}",
     "experiment.bogus: unknown key (allowed: command, args, metrics, check, switches, "
     "hooks, own, pass_env), got 1"),
    ("experiment: mlp_digits\nconstraints: [{metric: eval_loss}]",
     'constraints.0: needs max or min, got {"metric": "eval_loss"}'),
    ("experiment: mlp_digits\npruner: {type: median, percentile: 100}",
     "pruner.percentile: must be less than 100, got 100"),
    ("experiment: mlp_digits\nbudget: 5", "budget: must be a mapping, got 5"),
    ("experiment: mlp_digits\nobjective: []", "objective: must be a non-empty list, got []"),
    ("experiment: mlp_digits\nparams: {lr: 0.1}",
     "params.lr: must be a list of values or a mapping with values or low/high, got 0.1"),
    ("experiment: mlp_digits\nparams: {lr: []}", "params.lr: must be a non-empty list, got []"),
    ("experiment: mlp_digits\nparams: {lr: {values: [0.1], when: optimizer}}",
     "params.lr.when: must map knob names to a value or a list of values, got optimizer"),
    ("experiment: mlp_digits\nfixed: {lr: null}", "fixed.lr: must be a number, got null"),
])
def test_each_kind_of_schema_error_is_one_exact_line(text: str, line: str) -> None:
    """Each branch of the pydantic-error rewording (mutations: the "Value error, " or
    "String should " prefix left in, the experiment's form or its key path lost)."""
    with pytest.raises(SpecError) as caught:
        parse_spec(f"name: t\n{text}\n", "s.yaml")
    assert str(caught.value) == f"s.yaml: {line}"


def test_a_metric_pattern_without_a_named_group_is_refused_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`acc=([0-9.]+)` matches the log's lines but names no metric: accepted, it would
    read nothing, and the sweep's objective would never be reported."""
    # mutation: user_pattern without its `groupindex` check (validate accepts the file:
    # "s.yaml: ... 1 trials")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('acc=0.5')\n", encoding="utf-8")
    (tmp_path / "train.log").write_text("acc=0.5\n", encoding="utf-8")
    (tmp_path / "s.yaml").write_text(
        "name: t\nexperiment: {command: python train.py, metrics: ['acc=([0-9.]+)']}\n"
        "objective: {metric: acc, direction: maximize}\nparams: {lr: [0.1]}\n",
        encoding="utf-8")
    rule = "needs a named group per metric, e.g. (?P<eval_accuracy>[0-9.]+), got acc=([0-9.]+)"
    validated = CliRunner().invoke(app, ["validate", "s.yaml"])
    assert (validated.exit_code, validated.output.strip()) == (
        2, f"s.yaml: experiment.metrics.0: {rule}")
    read = CliRunner().invoke(app, ["metrics", "train.log", "--pattern", "acc=([0-9.]+)"])
    assert (read.exit_code, read.output.strip()) == (2, f"--pattern: 0: {rule}")


@pytest.mark.parametrize("command", ["plan", "sweep"])
def test_commands_that_would_run_refuse_bad_files_first(command: str, workdir: Path) -> None:
    bad = ASSETS / "bad" / "indivisible.yaml"
    result = CliRunner().invoke(app, [command, str(bad)])
    assert result.exit_code == 2
    assert "micro_size must divide batch_size" in result.output
    assert not (workdir / "mlruns").exists(), "nothing may run or be recorded"


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert result.output.strip() == f"{tmp_path / 'nope.yaml'}: cannot read the file " \
                                    "(No such file or directory)"


def test_defaults_come_from_the_experiment_then_fixed() -> None:
    spec = parse_spec("name: t\nexperiment: mlp_digits\nfixed: {epochs: 2}\n", "t.yaml")
    values = spec.space.resolve({})
    assert spec.method is Method.grid
    assert values["epochs"] == 2  # fixed wins
    assert values["lr"] == 0.02  # mlp_digits DEFAULTS
    assert values["micro_size"] == 1  # msexp default
    assert values["hidden"] == 512  # the experiment's own knob


def test_inapplicable_knobs_are_left_out() -> None:
    spec = parse_spec("name: t\nexperiment: mlp_digits\nfixed: {optimizer: sgd}\n", "t.yaml")
    values = spec.space.resolve({})
    assert "momentum" not in values  # momentum applies to optimizer momentum only
    assert "loss_scale_window" not in values and "amp_dtype" not in values


def test_error_carries_its_parts() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec("name: t\nexperiment: mlp_digits\nbudget: {workers: 0}\n", "f.yaml")
    assert caught.value.key == "budget.workers"
    assert caught.value.value == 0
    assert str(caught.value) == "f.yaml: budget.workers: must be greater than or equal to 1, got 0"


@pytest.mark.parametrize(("params", "line"), [
    ("{amp_level: {low: 1, high: 2}}", 'params.amp_level: a range needs a numeric knob; '
     'amp_level takes a list of values, got {"low": 1, "high": 2}'),
    ("{lr: {high: 0.1}}", "params.lr.low: required key is missing"),
    ("{lr: {low: 0.1}}", "params.lr.high: required key is missing"),
    ("{lr: {low: -1, high: 0.1}}", "params.lr.low: must be > 0, got -1"),
    ("{lr: {low: 0.001, high: .inf}}", "params.lr.high: must be a finite number, got inf"),
    ("{lr: {low: 0.1, high: 0.01}}", "params.lr: low <= high must hold, got low=0.1 high=0.01"),
    ("{lr: {low: 0.01, high: 0.1, log: yes please}}",
     "params.lr.log: must be a boolean, got yes please"),
    ("{weight_decay: {low: 0.0, high: 0.1, log: true}}",
     "params.weight_decay.low: a log range needs low > 0, got 0.0"),
    ("{lr: {low: 0.01, high: 0.1, log: true, step: 0.01}}",
     "params.lr.step: a log range takes no step, got 0.01"),
    ("{lr: {low: 0.01, high: 0.1, step: 0}}", "params.lr.step: must be a number > 0, got 0"),
    ("{lr: {low: 0.01, high: 0.1, step: true}}",
     "params.lr.step: must be a number > 0, got true"),
    ('{lr: {low: 0.01, high: 0.1, step: "x"}}', "params.lr.step: must be a number > 0, got x"),
    ("{batch_size: {low: 16, high: 64, step: 0.5}}", "params.batch_size.step: batch_size is "
     "an integer knob, so step must be an integer, got 0.5"),
])
def test_each_range_rule_is_one_exact_line(params: str, line: str) -> None:
    """Every rule of a `{low, high, log, step}` range, with the key path it names."""
    with pytest.raises(SpecError) as caught:
        parse_spec(f"name: t\nexperiment: mlp_digits\nmethod: random\nparams: {params}\n",
                   "s.yaml")
    assert str(caught.value) == f"s.yaml: {line}"


def test_a_range_becomes_a_param_as_written() -> None:
    spec = parse_spec("name: t\nexperiment: mlp_digits\nmethod: random\nparams:\n"
                      "  lr: {low: 0.001, high: 0.1, log: true}\n"
                      "  batch_size: {low: 16, high: 64, step: 16}\n"
                      "  momentum: {low: 0.5, high: 0.5}\n", "s.yaml")
    got = {p.name: (p.low, p.high, p.log, p.step, p.is_int, p.values)
           for p in spec.space.params}
    assert got == {"lr": (0.001, 0.1, True, None, False, None),
                   "batch_size": (16, 64, False, 16, True, None),
                   "momentum": (0.5, 0.5, False, None, False, None)}


RANGE_RULE = "params.batch_size: every batch_size of the range must be a multiple of micro_size " \
             "* devices = "


@pytest.mark.parametrize(("lines", "line"), [
    ("params: {batch_size: {low: 16, high: 64, step: 16}, micro_size: [1, 2], devices: [1, 3]}",
     RANGE_RULE + '3 (micro_size=1, devices=3); make low and step multiples of 6, '
                  'got {"low": 16, "high": 64, "step": 16}'),
    ("fixed: {micro_size: 2}\nparams: {batch_size: {low: 16, high: 64, log: true}}",
     RANGE_RULE + '2 (micro_size=2, devices=1); use a step that is a multiple of 2 instead '
                  'of log, got {"low": 16, "high": 64, "log": true}'),
    # high == low + step: the second value 20 is not a multiple of 8
    ("fixed: {micro_size: 8}\nparams: {batch_size: {low: 16, high: 20, step: 4}}",
     RANGE_RULE + '8 (micro_size=8, devices=1); make low and step multiples of 8, '
                  'got {"low": 16, "high": 20, "step": 4}'),
    # no step is a step of 1
    ("fixed: {micro_size: 2}\nparams: {batch_size: {low: 16, high: 17}}",
     RANGE_RULE + '2 (micro_size=2, devices=1); make low and step multiples of 2, '
                  'got {"low": 16, "high": 17}'),
    # a range of one value needs no step that micro_size divides
    ("fixed: {micro_size: 8}\nparams: {batch_size: {low: 16, high: 16, step: 4}}", None),
    ("fixed: {micro_size: 2}\nparams: {batch_size: {low: 16, high: 16}}", None),
])
def test_every_batch_size_of_a_range_must_split_into_micro_batches(lines: str,
                                                                   line: str | None) -> None:
    text = f"name: t\nexperiment: mlp_digits\nmethod: random\n{lines}\n"
    if line is None:
        parse_spec(text, "s.yaml")
        return
    with pytest.raises(SpecError) as caught:
        parse_spec(text, "s.yaml")
    assert str(caught.value) == f"s.yaml: {line}"


LOSS_SCALE_ONLY = "objective.0.metric: is reported only with loss_scale fixed or dynamic, " \
                  "and no trial of this sweep has that, got loss_scale"


@pytest.mark.parametrize(("lines", "line"), [
    ("params: {loss_scale: [none]}", LOSS_SCALE_ONLY),
    ("", LOSS_SCALE_ONLY),  # the default is none
    ("params: {loss_scale: [none, fixed]}", None),
    ("fixed: {loss_scale: dynamic}", None),
])
def test_an_objective_on_loss_scale_needs_a_trial_that_scales(lines: str,
                                                              line: str | None) -> None:
    text = ("name: t\nexperiment: mlp_digits\nobjective: {metric: loss_scale, direction: "
            f"minimize}}\n{lines}\n")
    if line is None:
        parse_spec(text, "s.yaml")
        return
    with pytest.raises(SpecError) as caught:
        parse_spec(text, "s.yaml")
    assert str(caught.value) == f"s.yaml: {line}"


def test_a_control_character_is_invalid_yaml_in_one_line(tmp_path: Path) -> None:
    """It used to escape as a ReaderError traceback (exit 1): the loader's constructor
    checks the characters, outside the YAML error handling."""
    path = tmp_path / "bell.yaml"
    path.write_text("name: t\x07\nexperiment: mlp_digits\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (f"{path}: invalid YAML (unacceptable character #x0007: "
                                     "special characters are not allowed)")


def test_read_name_reads_only_the_name_and_says_what_is_wrong_otherwise(tmp_path: Path) -> None:
    from msexp.spec.load import read_name

    good = tmp_path / "good.yaml"
    good.write_text("name: only-this\nexperiment: nothing-valid\nbudget: {trials: -1}\n")
    assert read_name(good) == read_name(str(good)) == "only-this"
    for text, line in [("experiment: mlp_digits\n", "name: required key is missing"),
                       ("name: 5\nexperiment: mlp_digits\n",
                        "name: must be a valid string, got 5"),
                       ("- a\n", 'the file must be a mapping of sections, got ["a"]'),
                       ("name: [\n", "line 2, column 1: invalid YAML (expected the node "
                                     "content, but found '<stream end>')")]:
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        with pytest.raises(SpecError) as caught:
            read_name(bad)
        assert str(caught.value) == f"{bad}: {line}"


SPACE = """
name: t
experiment: mlp_digits
method: random
objective: {metric: eval_accuracy, direction: maximize, target: 0.9}
params:
  lr: {low: 0.01, high: 0.1, log: true}
  batch_size: {low: 16, high: 64, step: 16}
  optimizer: [sgd, momentum]
  momentum: {values: [0.5, 0.9], when: {optimizer: momentum}}
"""


def test_params_describe_themselves_and_suggest_only_where_they_apply() -> None:
    import optuna

    from msexp.spec.space import derived

    spec = parse_spec(SPACE, "t.yaml")
    assert [p.describe() for p in spec.space.params] == [
        "0.01 .. 0.1 log", "16 .. 64 step 16", "sgd, momentum", "0.5, 0.9"]
    assert derived({"batch_size": 64}) == {"micro_batch": 64, "effective_batch": 64}
    assert derived({"batch_size": 64, "micro_size": 2, "devices": 2}) == {
        "micro_batch": 16, "effective_batch": 64}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    suggested = [spec.space.suggest(study.ask()) for _ in range(8)]
    for values in suggested:
        assert ("momentum" in values) == (values["optimizer"] == "momentum"), values
        assert values["batch_size"] in (16, 32, 48, 64) and 0.01 <= values["lr"] <= 0.1
    assert {v["optimizer"] for v in suggested} == {"sgd", "momentum"}


@pytest.mark.parametrize(("direction", "maximize"), [("maximize", True), ("minimize", False)])
def test_an_objective_with_a_target_is_the_sweeps_target(direction: str, maximize: bool) -> None:
    spec = parse_spec(SPACE.replace("direction: maximize", f"direction: {direction}"), "t.yaml")
    target = spec.target()
    assert (target.metric, target.value, target.maximize) == ("eval_accuracy", 0.9, maximize)
    assert parse_spec(SPACE.replace(", target: 0.9", ""), "t.yaml").target() is None


@pytest.mark.parametrize(("range_", "count"), [
    ("lr: {low: 0.1, high: 0.2}", 0),  # a float range has no finite list of values
    ("hidden: {low: 1, high: 10000}", 10_000),
    ("hidden: {low: 1, high: 10001}", 0),  # 10 000 steps are too many to list
    ("hidden: {low: 1, high: 15001}", 0),
    ("hidden: {low: 1, high: 20001, step: 4}", 5_001),
    ("hidden: {low: 5000, high: 9999}", 5_000),
])
def test_an_int_range_lists_its_values_only_when_short(range_: str, count: int) -> None:
    (param,) = parse_spec(f"name: t\nexperiment: mlp_digits\nmethod: random\nparams: "
                          f"{{{range_}}}\n", "t.yaml").space.params
    candidates = param.candidates()
    assert len(candidates) == count
    if count:
        assert candidates[0] == param.low and candidates[-1] == param.high


def test_list_values_reach_optuna_as_json_and_show_as_written() -> None:
    spec = parse_spec("name: t\nexperiment: mlp_digits\nfixed: {optimizer: thor}\n"
                      "params: {thor.split_indices: [[0, 1], [2]]}\n", "t.yaml")
    (param,) = spec.space.params
    assert [param.optuna_value(v) for v in param.values] == ["[0, 1]", "[2]"]
    assert param.describe() == "[0, 1], [2]"


def test_a_build_that_raises_at_validate_is_one_line(workdir: Path) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec("name: b\nexperiment: broken:build\nfixed: {mode: raises}\n", "b.yaml")
    assert str(caught.value) == (
        'b.yaml: experiment: build() raised RuntimeError: the experiment is broken on purpose '
        'at broken.py:21 `raise RuntimeError("the experiment is broken on purpose")`, '
        'got broken:build')


def test_the_params_of_one_trial_are_complete_and_checked() -> None:
    """`msexp run --set`: the experiment's defaults, the values set, each knob's rule."""
    from msexp.spec.load import trial_params

    params = trial_params("mlp_digits", {"lr": 0.5, "micro_size": 2})
    assert params["lr"] == 0.5 and params["micro_size"] == 2
    assert params["optimizer"] == "momentum" and params["amp_level"] == "O0"
    with pytest.raises(SpecError) as caught:
        trial_params("mlp_digits", {"micro_size": 0})
    assert str(caught.value) == "--set: fixed.micro_size: must be >= 1, got 0"
    with pytest.raises(SpecError) as caught:
        trial_params("mlp_digits", {"no_such_knob": 1}, "cli")
    assert str(caught.value).startswith("cli: ")


@pytest.mark.parametrize(("extra", "line"), [
    ("data: {format: mnist, path: d}\n",
     "c.yaml: data: a command reads its own data; pass its folder as an argument in fixed, "
     'got {"format": "mnist", "path": "d"}'),
    ("pruner: {type: hyperband}\n",
     "c.yaml: pruner.type: hyperband with a command needs fixed.epochs, got hyperband"),
])
def test_what_a_command_sweep_cannot_use(tmp_path: Path, extra: str, line: str) -> None:
    (tmp_path / "t.py").write_text("print('x: 1')\n")
    head = "name: c\nexperiment: {command: python t.py}\nparams: {lr: [0.1]}\n"
    with pytest.raises(SpecError) as caught:
        parse_spec(head + extra, "c.yaml", tmp_path / "c.yaml")
    assert str(caught.value) == line
    parse_spec(head + "fixed: {epochs: 3}\npruner: {type: hyperband}\n", "c.yaml",
               tmp_path / "c.yaml")


def test_a_command_experiments_params_are_the_scripts_own(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("print('x: 1')\n")
    own = ("name: c\nexperiment: {command: python t.py}\n"
           "fixed: {loss_scale: 1024.0, optimizer: lamb, momentum: 1.5, seed: -1}\n"
           "params: {batch_size: [8, 12], weight_decay: ['1e-4', '0']}\n")
    spec = parse_spec(own, "c.yaml", tmp_path / "c.yaml")
    assert spec.space.resolve({})["loss_scale"] == 1024.0, "the script's own value, as it is"
    (tmp_path / "h.py").write_text("from msexp.hooks import MsexpCallback\nprint('x: 1')\n")
    hooks = own.replace("python t.py", "python h.py")
    with pytest.raises(SpecError) as caught:
        parse_spec(hooks, "c.yaml", tmp_path / "c.yaml")
    assert str(caught.value) == (
        "c.yaml: fixed.loss_scale: clashes with msexp's knob loss_scale, which msexp.hooks "
        "applies in this script (must be one of none, fixed, dynamic); to pass the script's "
        "own --loss_scale, list it in experiment.own, got 1024.0")
    way_out = hooks.replace("{command: python h.py}",
                            "{command: python h.py, own: [loss_scale, optimizer, momentum, "
                            "seed, weight_decay]}")
    assert parse_spec(way_out, "c.yaml", tmp_path / "c.yaml").space.resolve({})["optimizer"] \
        == "lamb"
    told = own.replace("{command: python t.py}", "{command: python t.py, hooks: true}")
    with pytest.raises(SpecError, match="clashes with msexp's knob loss_scale"):
        parse_spec(told, "c.yaml", tmp_path / "c.yaml")


@pytest.mark.parametrize(("text", "line"), [
    ("params: {lr: {values: []}}\n", "params.lr.values: must be a non-empty list, got []"),
    ("params: {lr: {values: [0.1], low: 0.01}}\n",
     "params.lr.low: use either values or low/high, got 0.01"),
    ("params: {lr: {values: [0.1], bogus: 1}}\n",
     "params.lr.bogus: unknown key (allowed: values, when, low, high, log, step), got 1"),
    ("params: {lr: {values: [0.1], when: {lr: [0.1]}}}\n",
     "params.lr.when.lr: a param cannot depend on itself, got [0.1]"),
    ("params: {lr: {values: [0.1], when: {optimizer: [nope]}}}\n",
     "params.lr.when.optimizer.0: must be one of sgd, momentum, adam, adamw, thor, got nope"),
    ("params: {lr: {values: [0.1], when: {weight_decay: [0.1]}}, "
     "weight_decay: {values: [0.1], when: {lr: [0.1]}}}\n",
     'params.lr.when: conditions must not form a cycle, got {"weight_decay": [0.1]}'),
    ("budget: {repeats: 2}\nparams: {seed: [1, 2], lr: [0.1]}\n",
     "params.seed: budget.repeats sweeps the seed itself; drop seed from params, got [1, 2]"),
    ("method: tpe\nbudget: {repeats: 2}\nparams: {lr: {low: 0.01, high: 0.1}}\n",
     "budget.repeats: repeats need method grid (a sampler would sample the seed); sweep seed "
     "as a param instead, got 2"),
    ("constraints: [{metric: nope, max: 1}]\nparams: {lr: [0.1]}\n",
     "constraints.0.metric: must be one of train_loss, train_loss_epoch, eval_loss, "
     "eval_accuracy, "
     "samples_per_s, step_ms, compile_s, peak_mem_mb, train_mem_mb, wall_s, overflow_steps, "
     "skipped_updates, loss_scale, epochs_to_target, time_to_target_s, thor_inverse_s, "
     "got nope"),
    ("objective: [{metric: eval_loss, direction: minimize}, {metric: eval_loss, "
     "direction: minimize}]\nparams: {lr: [0.1]}\n",
     "objective.1.metric: is listed twice, got eval_loss"),
    ("objective: [{metric: eval_loss, direction: minimize}, {metric: wall_s, "
     "direction: minimize}]\npruner: {type: median}\nparams: {lr: [0.1]}\n",
     "pruner.type: pruning needs a single objective, got median"),
    ("objective: {metric: samples_per_s}\npruner: {type: median}\nparams: {lr: [0.1]}\n",
     "pruner.type: pruning needs a per-epoch objective (eval_loss, eval_accuracy, "
     "train_loss, train_loss_epoch), got samples_per_s"),
], ids=["empty values", "values and low", "unknown param key", "self condition",
        "condition value", "condition cycle", "repeats and seed", "repeats need grid",
        "constraint metric", "objective twice", "pruned pareto", "pruned final metric"])
def test_each_rule_of_params_and_objectives_is_one_exact_line(text: str, line: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec("name: s\nexperiment: mlp_digits\n" + text, "s.yaml")
    assert str(caught.value) == f"s.yaml: {line}"


def test_the_micro_batch_warning_says_what_a_dropout_layer_does_to_the_update() -> None:
    """Mutation `checks.batch_statistics_warning` 78: the dropout sentence's words changed."""
    from msexp.spec.checks import batch_statistics_warning

    spec = parse_spec("name: k\nexperiment: lenet_digits\nparams:\n  micro_size: [1, 2]\n",
                      "k.yaml")
    assert batch_statistics_warning("net.py", 0, spec.space, dropout=2) == (
        "net.py: dropout: the network has 2 Dropout layer(s), which draw a mask per "
        "micro-batch, so the update equals the full-batch one only in distribution "
        "(micro-batches: 16 of 32): where the batch is split, the update is not the "
        "full-batch one, and loss and accuracy move with micro_size "
        "(docs/how-a-trial-runs.md#dropout)")


def test_the_micro_batch_warning_counts_devices_and_a_commands_unknown_batch(
        tmp_path: Path) -> None:
    """Devices split the batch as micro-batches do; a command's batch msexp does not know
    is shown as the part of it each micro-batch gets.
    (issue 53 fresh: checks.batch_statistics_warning 22, 47)"""
    from msexp.spec import load_spec
    from msexp.spec.checks import batch_statistics_warning
    from tests.conftest import write

    ranks = parse_spec("name: k\nexperiment: lenet_digits\nparams:\n  devices: [1, 2]\n",
                       "k.yaml")
    warned = batch_statistics_warning("k.yaml", 3, ranks.space)
    assert warned is not None and "(micro-batches: 16 of 32)" in warned
    (tmp_path / "train.py").write_text("print('loss: 0.5')\n")
    command = load_spec(write(tmp_path / "c.yaml", """
        name: c
        experiment: {command: python train.py}
        objective: {metric: loss, direction: minimize}
        params: {micro_size: [1, 2]}
    """))
    warned = batch_statistics_warning("c.yaml", 3, command.space)
    assert warned is not None and "(micro-batches: 1/2 of the batch)" in warned


def test_an_unknown_built_in_experiment_is_refused_ending_with_the_name_given() -> None:
    """The one line of a misspelt built-in ends `got NAME`, the name as written, after
    the built-ins to pick from (issue 53 fresh late: experiment_source.builtin_file 11)."""
    from msexp.experiment_source import builtin_names

    with pytest.raises(SpecError) as refused:
        parse_spec("name: k\nexperiment: mlp_digit\nparams: {lr: [0.1]}\n", "k.yaml")
    assert str(refused.value) == (
        "k.yaml: experiment: no built-in experiment named mlp_digit (built-ins: "
        f"{', '.join(builtin_names())}), got mlp_digit")
