"""Bad input and faults: one line, the right exit code, before anything runs (issue 15)."""

from __future__ import annotations

import json
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from msexp.cli import app
from msexp.search.storage import open_storage
from msexp.search.study import open_study
from msexp.spec import load_spec
from tests.conftest import write


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


def one_line(result) -> str:
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


def test_a_range_with_an_infinite_bound_is_refused(workdir: Path) -> None:
    sweep = write(workdir / "inf.yaml", """
        name: inf
        experiment: mlp_digits
        method: random
        params:
          lr: {low: 0.001, high: .inf}
    """)
    result = invoke("validate", str(sweep))
    assert result.exit_code == 2
    assert one_line(result) == f"{sweep}: params.lr.high: must be a finite number, got inf"


COMMAND = """experiment: {command: python train.py, metrics: "top1: (?P<top1>[0-9.]+)"}
objective: {metric: top1}"""


@pytest.mark.parametrize(("section", "line"), [
    # each was accepted while only a range's bounds had to be finite: an unbounded float,
    # or a bound that infinity meets (-inf broke weight_decay's ">= 0" with the wrong rule)
    ("experiment: mlp_digits\nfixed: {weight_decay: -.inf}",
     "fixed.weight_decay: must be a finite number, got -inf"),
    ("experiment: mlp_digits\nparams: {momentum: {values: [0.5, .nan]}}",
     "params.momentum.values.1: must be a finite number, got nan"),
    ("experiment: own.py:build\nfixed: {scale: .inf}", "fixed.scale: must be a finite "
     "number, got inf"),
    ("experiment: own.py:build\nparams: {scale: [0.5, -.inf]}", "params.scale.1: must be a "
     "finite number, got -inf"),
    (f"{COMMAND}\nparams: {{dropout: [0.1, .nan]}}",
     "params.dropout.1: must be a finite number, got nan"),
    (f"{COMMAND}\nfixed: {{dropout: .inf}}", "fixed.dropout: must be a finite number, got inf"),
], ids=["fixed -inf", "values nan", "own fixed inf", "own grid -inf", "command grid nan",
        "command fixed inf"])
def test_a_non_finite_knob_value_is_refused_before_anything_runs(
        workdir: Path, section: str, line: str) -> None:
    # mutation: Knob.check without its finite rule (all six pass validate, or name ">= 0")
    write(workdir / "own.py", """
        PARAMS = {"scale": 0.5}

        def build(params):
            raise NotImplementedError
    """)
    write(workdir / "train.py", "print('top1: 0.5')\n")
    sweep = workdir / "s.yaml"
    sweep.write_text(f"name: s\n{section}\n")
    for command in ("validate", "sweep"):
        result = invoke(command, str(sweep))
        assert (result.exit_code, one_line(result)) == (2, f"{sweep}: {line}"), command
    assert not (workdir / "mlruns").exists(), "nothing may run or be recorded"


def test_a_non_finite_value_set_for_one_trial_is_refused(workdir: Path) -> None:
    result = invoke("run", "mlp_digits", "--set", "lr=.inf")
    assert (result.exit_code, one_line(result)) == (
        2, "--set: fixed.lr: must be a finite number, got inf")


def test_a_storage_in_a_missing_folder_is_one_line_at_once(workdir: Path) -> None:
    result = invoke("status", "--study", "x", "--storage", "sqlite:////nonexistent/x.db")
    assert result.exit_code == 1
    assert one_line(result) == "no study named 'x' in sqlite:////nonexistent/x.db"
    assert not Path("/nonexistent").exists(), "a read makes no store"


def test_a_sqlite_file_that_is_not_a_database_is_one_line(workdir: Path) -> None:
    write(workdir / "notes.db", "these are notes, not a database\n")
    result = invoke("status", "--study", "x", "--storage", "sqlite:///notes.db")
    assert result.exit_code == 1
    assert one_line(result) == ("cannot open the Optuna storage sqlite:///notes.db "
                                "(DatabaseError: file is not a database)")


def test_a_database_of_another_application_is_refused_and_left_alone(workdir: Path) -> None:
    with sqlite3.connect(workdir / "app.db") as db:
        db.execute("create table alembic_version (version_num text)")
        db.execute("create table experiments (id integer)")
    result = invoke("status", "--study", "x", "--storage", "sqlite:///app.db")
    assert result.exit_code == 1
    assert one_line(result) == ("sqlite:///app.db is not an Optuna database (it holds another "
                                "application's tables); give Optuna a database of its own")
    with sqlite3.connect(workdir / "app.db") as db:
        tables = {r[0] for r in db.execute("select name from sqlite_master")}
    assert tables == {"alembic_version", "experiments"}


def test_an_unreachable_postgresql_is_one_line(workdir: Path) -> None:
    result = invoke("status", "--study", "x", "--storage", "postgresql://u:s3cret@127.0.0.1:9/x")
    assert result.exit_code == 1
    line = one_line(result)
    assert line.startswith("cannot open the Optuna storage postgresql://u:***@127.0.0.1:9/x (")
    assert "Connection refused" in line and "s3cret" not in line


@pytest.fixture
def journal(workdir: Path) -> Path:
    """A study in the default journal, as a sweep leaves it."""
    open_study(load_spec(write(workdir / "j.yaml", SWEEP)), None)
    return workdir / "mlruns/optuna.journal"


SWEEP = """
    name: j
    experiment: mlp_digits
    params: {micro_size: [1, 2]}
"""


def test_a_garbage_line_in_the_journal_is_refused_with_how_to_recover(journal: Path) -> None:
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join([*lines[:3], '{"op_code": 4, garbage\n', *lines[3:]]))
    result = invoke("status", "--study", "j")
    assert result.exit_code == 1
    assert one_line(result) == (f"{journal}: line 4 is not an Optuna journal record; keep a "
                                "copy, delete that line (or restore the file from a backup) "
                                "and run again")


def test_a_torn_last_journal_line_is_cut_before_the_next_append(journal: Path) -> None:
    whole = journal.read_bytes()
    journal.write_bytes(whole + b'{"op_code":5,"worker_id":"a')  # killed during a write
    study, created = open_study(load_spec(Path("j.yaml")), None)
    assert not created
    study.set_user_attr("after", 1)
    text = journal.read_bytes()
    assert text.startswith(whole) and text.endswith(b"\n")
    assert all(isinstance(json.loads(line), dict) for line in text.splitlines())
    assert optuna.load_study(study_name="j", storage=open_storage(None)).user_attrs["after"] == 1


def test_an_unwritable_mlruns_is_one_line(workdir: Path) -> None:
    write(workdir / "mlruns", "a file where the stores go\n")
    result = invoke("status", "--study", "x")
    assert result.exit_code == 1
    assert one_line(result).startswith("cannot use the Optuna storage mlruns/optuna.journal "
                                       "(FileExistsError: File exists: ")
    result = invoke("sync")
    assert result.exit_code == 1
    assert one_line(result).startswith("cannot reach the MLflow tracking store "
                                       "sqlite:///mlruns/mlflow.db (FileExistsError: ")


def test_a_key_given_twice_is_refused_at_any_depth(workdir: Path) -> None:
    sweep = write(workdir / "twice.yaml", """
        name: twice
        experiment: mlp_digits
        params:
          micro_size: [1, 2]
          micro_size: [4]
    """)
    result = invoke("validate", str(sweep))
    assert result.exit_code == 2
    assert one_line(result) == f"{sweep}: params.micro_size: is given twice, got micro_size"
    write(sweep, "name: a\nexperiment: mlp_digits\nname: b\n")
    result = invoke("validate", str(sweep))
    assert result.exit_code == 2
    assert one_line(result) == f"{sweep}: name: is given twice, got name"


def test_merge_keys_may_still_override_what_they_merge(workdir: Path) -> None:
    sweep = write(workdir / "merge.yaml", """
        name: merge
        experiment: mlp_digits
        fixed:
          <<: {epochs: 1, lr: 0.1}
          lr: 0.05
    """)
    result = invoke("validate", str(sweep))
    assert result.exit_code == 0, result.output
    spec = load_spec(sweep)
    (point,) = spec.space.grid()
    resolved = spec.space.resolve(point)
    assert (resolved["epochs"], resolved["lr"]) == (1, 0.05)


BOMB = "".join(f"  {b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n"
               for a, b in zip("abcdefgh", "bcdefghi"))


def limited(*code: str) -> subprocess.CompletedProcess:
    """Run Python in a process that may use at most 2 GiB of memory, for at most 240 s (a
    hang's deadline on a loaded machine)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    return subprocess.run([sys.executable, *code], capture_output=True, text=True, timeout=240,
                          preexec_fn=limit)


def test_a_yaml_alias_bomb_fails_fast_in_bounded_memory(workdir: Path) -> None:
    sweep = write(workdir / "bomb.yaml", "name: bomb\nexperiment: mlp_digits\nfixed:\n"
                  "  x:\n    a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
                  + BOMB.replace("  ", "    ") + "  epochs: *i\n")
    done = limited("-m", "msexp", "validate", str(sweep))
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip() == (f"{sweep}: fixed.x.f: aliases must expand to at most "
                                   "100000 values, got 926177123")


def test_an_error_shows_a_huge_value_without_writing_it_all_out() -> None:
    nest = "value = ['lol'] * 9\nfor _ in range(10):\n    value = [value] * {}\n"
    done = limited("-c", "from msexp.errors import format_value\n" + nest.format(9)
                   + "print(format_value(value))\n")
    assert done.returncode == 0, done.stderr[-2000:]
    small = {}
    exec(nest.format(2), small)  # the same first 80 characters
    assert done.stdout.strip() == json.dumps(small["value"])[:77] + "..."


def sampled_batch(workdir: Path, batch: str, micro: str = "[1, 2, 4]") -> Path:
    return write(workdir / "batch.yaml", f"""
        name: batch
        experiment: mlp_digits
        method: random
        params:
          micro_size: {micro}
          batch_size: {batch}
    """)


def test_a_batch_size_range_that_micro_size_does_not_divide_is_refused(workdir: Path) -> None:
    sweep = sampled_batch(workdir, "{low: 32, high: 96, step: 2}")
    result = invoke("validate", str(sweep))
    assert result.exit_code == 2
    assert one_line(result) == (
        f"{sweep}: params.batch_size: every batch_size of the range must be a multiple of "
        "micro_size * devices = 4 (micro_size=4, devices=1); make low and step multiples of "
        '4, got {"low": 32, "high": 96, "step": 2}')
    wide = sampled_batch(workdir, "{low: 8, high: 1000000}", micro="[3]")
    result = invoke("validate", str(wide))
    assert result.exit_code == 2
    assert "make low and step multiples of 3" in one_line(result)


def test_a_batch_size_range_of_multiples_is_accepted(workdir: Path) -> None:
    sweep = sampled_batch(workdir, "{low: 32, high: 1000000, step: 8}")
    result = invoke("validate", str(sweep))
    assert (result.exit_code, one_line(result)) == (0, f"{sweep}: ok (random, 20 trials)")
    space = load_spec(sweep).space
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    sampled = [space.suggest(study.ask()) for _ in range(50)]
    assert all(32 <= p["batch_size"] <= 1000000 and p["batch_size"] % p["micro_size"] == 0
               for p in sampled)
    assert {p["micro_size"] for p in sampled} == {1, 2, 4}


@pytest.mark.parametrize(("objective", "fixed", "condition"), [
    ("loss_scale", "{}", "with loss_scale fixed or dynamic"),
    ("thor_inverse_s", "{optimizer: adam}", "with optimizer thor"),
    ("epochs_to_target", "{}", "when an objective has a target"),
])
def test_an_objective_no_trial_can_report_is_refused(workdir: Path, objective: str, fixed: str,
                                                     condition: str) -> None:
    sweep = write(workdir / "objective.yaml", f"""
        name: objective
        experiment: mlp_digits
        method: random
        objective: {{metric: {objective}, direction: minimize}}
        fixed: {fixed}
        params:
          lr: {{low: 0.001, high: 0.1}}
    """)
    result = invoke("validate", str(sweep))
    assert result.exit_code == 2
    assert one_line(result) == (f"{sweep}: objective.0.metric: is reported only {condition}, "
                                f"and no trial of this sweep has that, got {objective}")


def test_a_capped_grid_of_ten_million_points_validates_and_plans_in_seconds(
        workdir: Path) -> None:
    values = "[" + ", ".join(str(i) for i in range(1, 11)) + "]"
    sweep = write(workdir / "huge.yaml", "name: huge\nexperiment: mlp_digits\n"
                  "budget: {trials: 3}\nparams:\n" + "".join(
                      f"  {knob}: {values}\n" for knob in
                      ("epochs", "seed", "warmup_epochs", "hidden", "lr", "weight_decay",
                       "batch_size")))
    done = limited("-m", "msexp", "validate", str(sweep))
    assert done.returncode == 0, done.stderr[-2000:]
    assert " ".join(done.stdout.split()) == f"{sweep}: ok (grid, 3 trials)"
    done = limited("-m", "msexp", "plan", str(sweep))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "grid of 3 trials" in done.stdout


def test_the_grid_size_is_counted_with_conditions() -> None:
    from msexp.experiment import load_experiment
    from msexp.spec.params import parse_params

    space = parse_params("s.yaml", load_experiment("mlp_digits", "s.yaml").knobs, {}, {
        "loss_scale": ["none", "fixed", "dynamic"],
        "loss_scale_window": [10, 100],      # only with dynamic
        "drop_overflow_update": [True, False],  # only with fixed
        "optimizer": ["sgd", "momentum"],
        "momentum": {"values": [0.8, 0.9], "when": {"optimizer": "momentum"}},
        "seed": [1, 2, 3],
    })
    assert space.grid_size() == len(space.grid()) == (1 + 2 + 2) * (1 + 2) * 3
