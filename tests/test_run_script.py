"""`msexp run FILE.py`: a script gets its own argv (the --set values as flags), never
msexp's; an experiment file imported by msexp sees the argv `python FILE` would give it."""

from __future__ import annotations

import sys
from pathlib import Path

from typer.testing import CliRunner

from msexp.cli import app
from msexp.experiment import is_script, load_experiment
from tests.conftest import write


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


def test_run_passes_a_script_its_own_flags_not_msexps_argv(workdir: Path) -> None:
    script = write(workdir / "train.py", """
        import argparse, sys
        parser = argparse.ArgumentParser()
        parser.add_argument("--lr", type=float, default=0.1)
        args = parser.parse_args()
        print("argv:", " ".join(sys.argv[1:]))
        print(f"train_loss: {args.lr * 2}")
    """)
    result = invoke("run", str(script), "--set", "lr=0.5")
    assert result.exit_code == 0, result.output
    assert "argv: --lr=0.5\n" in result.output
    assert result.output.strip().splitlines()[-1] == "train_loss=1"
    failed = invoke("run", str(script), "--set", "lr=fast")
    assert failed.exit_code == 1
    assert "argument --lr: invalid float value: 'fast'" in failed.output


def test_a_file_with_build_is_an_experiment_and_imports_with_its_own_argv(
        workdir: Path) -> None:
    experiment = write(workdir / "exp.py", """
        import sys
        SEEN = list(sys.argv)

        def build(params):
            raise NotImplementedError
    """)
    assert not is_script(str(experiment)) and not is_script(f"{experiment}:build")
    assert is_script(str(write(workdir / "plain.py", "print('train_loss: 1')\n")))
    before = list(sys.argv)
    loaded = load_experiment(str(experiment))
    seen = sys.modules[loaded.build.__module__].SEEN
    assert seen == [str(experiment)]
    assert sys.argv == before


def test_a_set_without_a_value_is_refused_in_one_line_naming_it() -> None:
    """Mutations (issue 53): the knob's name left out of `--set`'s refusal, the option's
    name or the rule's words changed."""
    refused = invoke("run", "mlp_digits", "--set", "lr")
    assert refused.exit_code == 2
    line, = refused.output.splitlines()
    assert line.startswith("--set: lr: must be ") and line.endswith("=value, got lr"), line


def test_a_script_run_from_a_checkpoint_is_refused_in_one_line_naming_why(
        workdir: Path) -> None:
    """A script has no build() for msexp to load a checkpoint into: `--from-checkpoint` is
    refused before it runs. (issue 53 fresh fcli: cli.run._foreground_request 13, the
    rule's words changed)"""
    script = write(workdir / "train.py", "print('train_loss: 1')\n")
    (workdir / "model.ckpt").write_bytes(b"weights")
    refused = invoke("run", str(script), "--from-checkpoint", "model.ckpt")
    assert refused.exit_code == 2, refused.output
    assert refused.output.splitlines() == [
        f"--from-checkpoint: needs an experiment with build(); {script} is a script, got "
        "model.ckpt"], refused.output


def test_an_experiment_run_from_a_checkpoint_starts_from_that_file(
        workdir: Path, monkeypatch) -> None:
    """`msexp run mlp_digits --from-checkpoint model.ckpt` hands the trial the experiment and
    the checkpoint's absolute path to start from (the training itself, MindSpore's, is
    faked here). (issue 53 fresh fcli: cli.run._foreground_request 73 (no experiment),
    75 and 78 (no checkpoint: trained from scratch))"""
    from msexp.execution.host import running

    (workdir / "model.ckpt").write_bytes(b"weights")
    asked = []

    def run(request, emit):
        asked.append(request)
        return {"eval_accuracy": 0.5}

    monkeypatch.setattr(running, "run", run)
    ran = invoke("run", "mlp_digits", "--from-checkpoint", "model.ckpt", "--set", "epochs=0")
    assert ran.exit_code == 0, ran.output
    assert ran.output.splitlines()[-1] == "eval_accuracy=0.5"
    (request,) = asked
    assert (request.experiment, request.params["epochs"], request.init_from) == (
        "mlp_digits", 0, str((workdir / "model.ckpt").resolve()))
