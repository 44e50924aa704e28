"""`msexp schema` and `msexp validate` agree, both from one model of the sweep file: every
example sweep file, every sweep file of the docs and every bad file of the corpus gets
the same verdict from both, except the rules JSON Schema cannot state (BEYOND_SCHEMA)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from msexp.cli import app
from msexp.knobs import KNOBS, Knob
from msexp.spec.model import knob_rows, values_model
from tests import conftest
from tests.conftest import ASSETS, ROOT, write
from tests.test_byom import MODEL
from tests.test_docs import SWEEPS, Snippet, sweep_in_a_folder

pytestmark = pytest.mark.usefixtures("models_built_by_each_test")

SCHEMA_REJECTS = {
    "unknown_top_key", "unknown_nested_key", "wrong_type", "out_of_range", "knob_out_of_range",
    "knob_wrong_type", "knob_bad_choice", "unknown_knob", "missing_name", "bad_method",
    "bad_objective", "bad_direction", "when_unknown_knob", "when_misspelt_knob",
    "not_mapping", "bad_pruner", "unknown_experiment",
}
# Rules JSON Schema cannot state: YAML syntax, and rules that compare values (divisibility,
# low <= high, grid-only lists under `method`, a knob both fixed and swept, a pattern RE2
# cannot run in linear time); a finite number (JSON has no .inf or .nan, so the schema takes
# YAML's as numbers). `msexp validate` checks those.
BEYOND_SCHEMA = {"malformed", "indivisible", "indivisible_fixed", "range_inverted",
                 "grid_with_range", "fixed_and_swept", "metrics_backreference",
                 "knob_infinite", "knob_nan_in_grid"}
EXAMPLES = sorted(p for folder in ("sweeps", "experiments", "benchmarks")
                  for p in (ROOT / folder).rglob("*.y*ml"))

# Sweep files validate accepts, one per feature of the format (with EXAMPLES).
ACCEPTED = {
    "constraints": """
        name: capped
        experiment: mlp_digits
        constraints: [{metric: peak_mem_mb, max: 2000}, {metric: eval_accuracy, min: 0.5}]
        params: {micro_size: [1, 2]}
    """,
    "two_objectives": """
        name: pareto
        experiment: mlp_digits
        method: nsga2
        budget: {trials: 4, trial_timeout: 60, workers: 1, retries: 0, cold: true}
        objective:
          - {metric: eval_accuracy, direction: maximize, target: 0.9, reduce: best}
          - {metric: samples_per_s, direction: maximize}
        params:
          lr: {low: 0.001, high: 0.1, log: true}
          micro_size: {values: [1, 2]}
          loss_scale: [none, dynamic]
          loss_scale_window: {values: [200, 2000], when: {loss_scale: [dynamic]}}
    """,
    "pruned_and_kept": """
        name: pruned
        experiment: lenet_digits
        pruner: {type: percentile, warmup_epochs: 0, startup_trials: 1, percentile: 50}
        checkpoint: {every: 2, keep: best, log: all}
        budget: {repeats: 2}
        fixed: {epochs: 2}
        params: {batch_size: [32, 64]}
    """,
    "own_experiment": """
        name: own
        experiment: own_net.py:build
        objective: {metric: eval_margin}
        fixed: {width: 8}
        params: {micro_size: [1, 2]}
    """,
    "command": """
        name: script
        experiment:
          command: python train.py
          metrics: 'top1: (?P<top1>[0-9.]+)'
        objective: {metric: top1}
        fixed: {data_dir: /data/x, epoch_size: 1}
        params: {lr: [0.01, 0.1], model: [small, large]}
    """,
}


@pytest.fixture
def validator() -> jsonschema.Draft202012Validator:
    """The schema `msexp schema` prints. Under tests/mutation.sh each test builds its own:
    mutmut maps a test only to the code that test ran (a module's shared schema left its
    title and open models unjudged); elsewhere it is built once."""
    return built_validator() if conftest.UNDER_MUTMUT else shared_validator()


def built_validator() -> jsonschema.Draft202012Validator:
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.output)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


shared_validator = functools.cache(built_validator)


def validate(path: Path):
    return CliRunner().invoke(app, ["validate", str(path)])


def accepted_files(folder: Path) -> list[Path]:
    write(folder / "own_net.py", MODEL)
    write(folder / "train.py", "print('top1: 0.5')\n")
    return [write(folder / f"{name}.yaml", text) for name, text in ACCEPTED.items()]


def verdicts(path: Path, validator: jsonschema.Draft202012Validator) -> tuple[bool, bool]:
    """(validate accepts, the schema accepts)."""
    return validate(path).exit_code == 0, validator.is_valid(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize("path", EXAMPLES, ids=[str(p.relative_to(ROOT)) for p in EXAMPLES])
def test_each_example_gets_the_same_verdict_from_validate_and_the_schema(
        path: Path, validator: jsonschema.Draft202012Validator) -> None:
    assert verdicts(path, validator) == (True, True)


@pytest.mark.parametrize("snippet", SWEEPS, ids=[s.name for s in SWEEPS])
def test_each_sweep_file_of_the_docs_gets_the_same_verdict_from_validate_and_the_schema(
        snippet: Snippet, workdir: Path, validator: jsonschema.Draft202012Validator) -> None:
    assert verdicts(sweep_in_a_folder(snippet, workdir), validator) == (True, True)


def test_the_schema_accepts_every_file_validate_accepts(
        workdir: Path, validator: jsonschema.Draft202012Validator) -> None:
    """Mutation: a section of the model (constraints) left out of the schema."""
    for path in accepted_files(workdir):
        result = validate(path)
        assert result.exit_code == 0, f"{path.name}: {result.output}"
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
        assert errors == [], f"{path.name}: {errors}"


def test_the_bad_corpus_is_refused_by_validate_and_where_one_key_breaks_by_the_schema(
        validator: jsonschema.Draft202012Validator) -> None:
    bad = {p.stem: p for p in (ASSETS / "bad").glob("*.yaml")}
    assert set(bad) == SCHEMA_REJECTS | BEYOND_SCHEMA, "classify every bad file"
    for stem, path in sorted(bad.items()):
        assert validate(path).exit_code == 2, stem
        if stem == "malformed":
            continue  # not YAML: nothing to give the schema
        refused = not validator.is_valid(yaml.safe_load(path.read_text()))
        assert refused == (stem in SCHEMA_REJECTS), stem


@pytest.mark.parametrize(("change", "key"), [
    ({"constraints": [{"metric": "peak_mem_mb"}]}, "constraints"),  # needs max or min
    ({"constraints": [{"metric": "nonsense", "max": 1}]}, "constraints"),
    ({"experiment": {"command": "python train.py", "shell": True}}, "experiment"),
    ({"fixed": {"widths": 8}}, "fixed"),  # no experiment has a knob widths
    ({"objective": []}, "objective"),
    ({"experiment": "own_net.py:build", "fixed": {"lr": -1}}, "fixed.lr"),  # msexp's rule
    ({"experiment": "own_net.py:build", "params": {"width": {"values": [8], "when": 1}}},
     "params.width.when"),
    ({"experiment": {"command": "python train.py"}, "objective": {"metric": "top1"},
      "params": {"lr": {"low": 0.1}}}, "params.lr.high"),
])
def test_the_schema_refuses_what_validate_refuses_in_one_key(
        workdir: Path, validator: jsonschema.Draft202012Validator, change: dict, key: str
) -> None:
    accepted_files(workdir)  # the experiment and the script they name
    data = {"name": "s", "experiment": "mlp_digits", **change}
    path = write(workdir / "s.yaml", yaml.safe_dump(data))
    result = validate(path)
    assert result.exit_code == 2 and f"s.yaml: {key}" in result.output, result.output
    assert not validator.is_valid(data)


def test_the_knob_table_of_the_docs_is_the_models() -> None:
    """docs/sweep-file.md holds `msexp knobs --markdown` as it prints now."""
    result = CliRunner().invoke(app, ["knobs", "--markdown"])
    assert result.exit_code == 0, result.output
    table = result.output.strip()
    assert table.startswith("| knob | type |") and "| `micro_size` | int | >= 1 | `1` |" in table
    assert table in (ROOT / "docs" / "sweep-file.md").read_text(encoding="utf-8"), \
        "paste `msexp knobs --markdown` into docs/sweep-file.md (### Every knob)"


def test_the_schema_says_its_draft_and_its_title(
        validator: jsonschema.Draft202012Validator) -> None:
    # mutation: the title editors show changed
    assert {k: v for k, v in validator.schema.items() if isinstance(v, str)} == {
        "$schema": "https://json-schema.org/draft/2020-12/schema", "title": "msexp sweep file"}


def test_an_experiments_knob_without_a_default_shows_an_empty_default() -> None:
    # mutation: None shown as "XXXX" (no built-in knob lacks a default)
    rows = knob_rows({"depth": Knob("depth", int, None, "layers (unset: the model's)", ge=1),
                      "flag": Knob("flag", bool, True, "a flag")})
    assert [(r["default"], r["allowed"]) for r in rows] == [("", ">= 1"), ("true", "")]


def probes(knob: Knob) -> list[Any]:
    """Values around each rule of `knob`: its default, choices, bounds and other types."""
    values: list[Any] = [knob.default, None, "text", True, 1, 1.5, -1, [1], {"a": 1}]
    values += list(knob.choices or ())
    for bound in (knob.ge, knob.gt, knob.le, knob.lt):
        if bound is not None:
            values += [bound, bound - 1, bound + 1, float(bound), bound - 0.5, bound + 0.5]
    return values


@pytest.mark.parametrize("name", list(KNOBS))
def test_the_model_and_its_schema_take_a_knobs_value_as_its_rule_does(name: str) -> None:
    """The fields of `fixed` and `params` are generated from KNOBS: the model, its JSON
    Schema and `Knob.check` agree on every value near a rule of the knob."""
    knob, model = KNOBS[name], values_model(KNOBS)
    schema = jsonschema.Draft202012Validator(model.model_json_schema())
    for value in probes(knob):
        allowed = knob.check(value) is None
        # JSON does not tell 2.0 from 2: an integer knob's schema takes 2.0 (YAML does tell)
        json_allowed = allowed or (knob.type is int and isinstance(value, float)
                                   and value.is_integer() and knob.check(int(value)) is None)
        for section, written in (("fixed", value), ("params", [value])):
            data = {section: {name: written}}
            try:
                model.model_validate(data)
                validated = True
            except ValidationError:
                validated = False
            assert (validated, schema.is_valid(data)) == (allowed, json_allowed), (section, value)


def test_the_schema_of_one_experiment_holds_its_files_to_its_knobs(workdir: Path) -> None:
    accepted_files(workdir)  # own_net.py, whose own knob is width
    result = CliRunner().invoke(app, ["schema", "--experiment", "own_net.py"])
    assert result.exit_code == 0, result.output
    schema = jsonschema.Draft202012Validator(json.loads(result.output))
    own = {"name": "s", "experiment": "own_net.py"}
    assert schema.is_valid({**own, "fixed": {"width": 8}, "params": {"lr": [0.1]}})
    assert not schema.is_valid({**own, "fixed": {"width": "wide"}})
    assert not schema.is_valid({**own, "fixed": {"depth": 3}}), "not a knob of own_net.py"
    assert not schema.is_valid({**own, "objective": {"metric": "top1"}})
    assert schema.is_valid({"name": "s", "experiment": "mlp_digits"}), "a built-in's file"
    assert not schema.is_valid({"name": "s", "experiment": "mlp_digit"})


@pytest.mark.parametrize(("range_", "verdict"), [
    ("{low: 0.01, high: 0.5, step: 0.01}", (True, True)),
    # mutations: a range's bound taken infinite (JSON has no infinity: the schema takes
    # YAML's .inf as a number); its step's "> 0" left out of the schema
    ("{low: 0.01, high: .inf}", (False, True)),
    ("{low: 0.01, high: 0.5, step: 0}", (False, False)),
])
def test_a_ranges_bounds_are_finite_and_its_step_positive_for_validate_and_the_schema(
        range_: str, verdict: tuple[bool, bool], workdir: Path,
        validator: jsonschema.Draft202012Validator) -> None:
    path = write(workdir / "r.yaml", f"""
        name: ranged
        experiment: mlp_digits
        method: random
        budget: {{trials: 2}}
        params: {{lr: {range_}}}
    """)
    assert verdicts(path, validator) == verdict
