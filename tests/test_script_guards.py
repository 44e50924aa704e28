"""The check `msexp sweep` runs before the first trial (and `plan --check`) accepts what a
trial accepts: it runs the command as a trial does (the fixed arguments, a trial's own
folder), on the real model-zoo and mindcv code in tests/assets (issue 49, item 5)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from msexp.cli.scripts import check_flags, preflight, quick_check
from msexp.errors import SpecError
from msexp.execution.arguments import arguments, command_argv
from msexp.execution.script_help import Listed
from msexp.spec import load_spec
from tests.conftest import ASSETS, msexp_cmd, write
from tests.test_real_scripts import FIXED, invoke, write_mnist

MINDCV_CONFIG = "configs/mobilenetv3/mobilenet_v3_small_ascend.yaml"


@pytest.fixture
def lenet_cpu(workdir: Path) -> Path:
    """The model zoo's LeNet with a config of a user's own beside its default one, as
    docs/your-code.md has a model-zoo user write it: micro_size and amp_level added."""
    folder = workdir / "lenet"
    shutil.copytree(ASSETS / "modelzoo" / "lenet", folder)
    config = (folder / "default_config.yaml").read_text(encoding="utf-8")
    values, helper = config.split("\n---\n", 1)  # the config, then its help texts
    (folder / "cpu_config.yaml").write_text(
        f'{values}\nmicro_size: 1\namp_level: "O0"\n---\n{helper}', encoding="utf-8")
    return folder


def test_the_check_passes_the_fixed_config_path_so_the_configured_flags_are_listed(
        lenet_cpu: Path) -> None:
    """The model zoo's config system lists the flags of the config --config_path names: the
    check gives the fixed section's config_path, as every trial gets it."""
    sweep = write(lenet_cpu / "sweep.yaml", f"""
        name: lenet-config
        experiment: {{command: python train.py}}
        objective: {{metric: train_loss, direction: minimize}}
        fixed: {{{FIXED}, config_path: cpu_config.yaml, amp_level: O0}}
        params: {{micro_size: [1]}}
    """)
    spec = load_spec(sweep)
    # mutation: the check runs `python train.py --help` without the fixed arguments: its
    # default config has no micro_size ("lists no --micro_size (did you mean --epoch_size?)")
    assert preflight(spec) is spec
    checked = invoke("plan", str(sweep), "--check")
    assert checked.exit_code == 0, checked.output
    assert "every name is a flag of the script" in checked.output
    typo = write(lenet_cpu / "typo.yaml", sweep.read_text().replace("micro_size: [1]",
                                                                    "micro_sise: [1]"))
    with pytest.raises(SpecError) as refused:
        preflight(load_spec(typo))
    assert str(refused.value) == (f"{typo}: params.micro_sise: is not a flag of the script: "
                                  "its --help lists no --micro_sise (did you mean "
                                  "--micro_size?), got micro_sise")


def test_a_relative_path_in_flag_equals_value_form_is_made_absolute(lenet_cpu: Path) -> None:
    """`--config_path=FILE`, the form of the model zoo's CPU launch scripts, is resolved
    as `--config_path FILE` is: the trial runs in its own folder, so does the check."""
    folder = lenet_cpu
    assert command_argv(["python", "train.py", "--config_path=cpu_config.yaml",
                         "--config_path", "cpu_config.yaml", "--tag=not_a_file", "-x=1"],
                        folder) == [
        "python", str(folder / "train.py"), f"--config_path={folder / 'cpu_config.yaml'}",
        "--config_path", str(folder / "cpu_config.yaml"), "--tag=not_a_file", "-x=1"]
    sweep = write(folder / "sweep.yaml", f"""
        name: lenet-equals
        experiment: {{command: python train.py --config_path=cpu_config.yaml}}
        objective: {{metric: train_loss, direction: minimize}}
        fixed: {{{FIXED}}}
        params: {{micro_size: [1]}}
    """)
    # mutation: `--flag=PATH` left relative: the check, run in a trial's own folder, fails
    # as every trial did (FileNotFoundError: 'cpu_config.yaml')
    checked = invoke("plan", str(sweep), "--check")
    assert checked.exit_code == 0, checked.output
    assert "every name is a flag of the script" in checked.output


def test_the_check_runs_in_a_trials_own_folder_and_environment(workdir: Path) -> None:
    """What a trial's command finds where it starts, the check's finds too: an empty
    folder of its own (its MSEXP_OUTPUT_DIR), not the sweep file's."""
    write(workdir / "train.py", """
        import argparse, os
        assert os.getcwd() == os.environ["MSEXP_OUTPUT_DIR"], "in the trial's outputs"
        assert not os.listdir("."), "an empty folder"
        parser = argparse.ArgumentParser()
        parser.add_argument("--lr")
        parser.parse_args()
    """)
    sweep = write(workdir / "sweep.yaml", """
        name: own-folder
        experiment: {command: python train.py}
        params: {lr: [0.01]}
    """)
    spec = load_spec(sweep)
    assert preflight(spec) is spec  # mutation: the check runs in the sweep file's folder


def test_a_one_letter_name_is_passed_as_its_short_option() -> None:
    assert arguments({"c": "a.yaml", "v": True, "lr": 0.1}, "flags", switches=["v"]) == [
        "-c", "a.yaml", "-v", "--lr=0.1"]  # mutation: `--c=a.yaml`, which mindcv refuses


@pytest.mark.slow  # mindcv's --help imports mindcv: 5 s
def test_a_one_letter_key_is_the_short_option_and_did_you_mean_names_the_long_one(
        workdir: Path) -> None:
    """mindcv's `-c/--config`: a key `c` is its short option; a key written with its
    dashes is refused naming the long form."""
    folder = workdir / "mindcv"
    shutil.copytree(ASSETS / "mindcv", folder)
    sweep = write(folder / "sweep.yaml", f"""
        name: mindcv-c
        experiment: {{command: python train_with_func.py}}
        objective: {{metric: Top_1_Accuracy, direction: maximize}}
        fixed: {{c: {MINDCV_CONFIG}, data_dir: data, distribute: false}}
        params: {{lr: [0.01]}}
    """)
    spec = load_spec(sweep)
    listed = quick_check(spec)
    check_flags(spec, listed)  # mutation: short options not read from --help
    for key in ("-c", "--config"):
        dashed = write(folder / "dashed.yaml", sweep.read_text().replace(
            "{c: ", f"{{'{key}': "))
        with pytest.raises(SpecError) as refused:
            check_flags(load_spec(dashed), listed)
        assert str(refused.value) == (  # mutation: "its --help lists no ---c"
            f"{dashed}: fixed.{key}: is written with dashes: a key is the flag's name "
            f"without them (did you mean config?), got {key}")


def test_short_options_and_their_long_forms_are_read_from_argparse_help() -> None:
    text = """usage: train.py [-h] [-c CONFIG] [-v] [--mode MODE] [-1]

options:
  -h, --help            show this help message and exit
  -c CONFIG, --config CONFIG
                        YAML config file (default: -1, a non-x value)
  -v, --verbose         say more
  --mode MODE           graph or pynative
"""
    listed = Listed.of(text)
    assert listed.flags == {"config": True, "verbose": False, "mode": True, "c": True,
                            "v": False}
    assert listed.long == {"c": "config", "v": "verbose"}
    assert listed.refusal("c") is None and listed.refusal("verbose") is None
    assert listed.refusal("x") == "is not a flag of the script: its --help lists no -x"
    assert listed.refusal("mdoe") == ("is not a flag of the script: its --help lists no "
                                      "--mdoe (did you mean --mode?)")


def test_a_sweep_read_from_a_pipe_takes_relative_paths_from_the_working_directory(
        lenet_cpu: Path) -> None:
    """`msexp plan <(cat sweep.yaml)`: the file is /dev/fd/N, whose folder is no user's."""
    write(lenet_cpu / "sweep.yaml", f"""
        name: lenet-pipe
        experiment: {{command: python train.py}}
        objective: {{metric: train_loss, direction: minimize}}
        fixed: {{{FIXED}, config_path: cpu_config.yaml}}
        params: {{micro_size: [1]}}
    """)
    line = " ".join([*msexp_cmd("plan"), "<(cat sweep.yaml)", "--check"])
    done = subprocess.run(["bash", "-c", line], cwd=lenet_cpu, capture_output=True, text=True,
                          timeout=120)
    # mutation: the folder of /dev/fd/63 ("python train.py: train.py not found in /proc/...")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every name is a flag of the script" in done.stdout


@pytest.mark.slow  # a real run of LeNet: 6 s
def test_a_trial_of_flag_equals_path_finds_its_config_from_its_own_folder(
        lenet_cpu: Path) -> None:
    """The check run of `plan --check` runs the first trial for real, as a sweep does: in
    its own folder, its `--config_path=cpu_config.yaml` found (every trial failed with
    FileNotFoundError: 'mr_config_cpu.yaml' in the issue)."""
    write_mnist(lenet_cpu / "data" / "train", 64)
    sweep = write(lenet_cpu / "sweep.yaml", f"""
        name: lenet-equals-run
        experiment:
          command: python train.py --config_path=cpu_config.yaml
          check: {{epoch_size: 1}}
        objective: {{metric: train_loss, direction: minimize}}
        fixed: {{{FIXED}, ckpt_path: "${{output_dir}}"}}
        params: {{lr: [0.01]}}
    """)
    result = invoke("plan", str(sweep), "--check")
    # mutation: `--flag=PATH` left relative
    assert result.exit_code == 0, result.output
    assert "objective train_loss found: " in result.output
    log = re.search(r"\(log: (\S+trial\.log)\)", result.output)
    assert log is not None, result.output
    assert "'micro_size': 1" in Path(log.group(1)).read_text(), "its config was read"


def test_a_script_that_echoes_its_arguments_lists_no_flags() -> None:
    """The flag check passes the fixed arguments with --help: a script with no help page
    prints them back, which lists no flag (the check then refuses none)."""
    # mutation: Listed.of without its usage-line check (--lr refused beside an echoed token)
    assert Listed.of("got --api_token=*** --help\nworld: 2\n") == Listed()
    page = Listed.of("usage: train.py [-h] [--lr LR] [--amp]\n\noptions:\n  --lr LR\n")
    assert page.flags == {"lr": True, "amp": False}


def test_devices_passes_as_msruns_and_experiment_check_is_named_in_a_refusal(
        workdir: Path) -> None:
    """`devices` is msrun's, never a flag the script must list; a name in experiment.check
    that the script does not list is refused under that name. Mutations (issue 53): the
    devices exception dropped, the section's name changed."""
    write(workdir / "train.py", "print('x')\n")
    sweep = write(workdir / "sweep.yaml", """
        name: flagged
        experiment:
          command: python train.py
          check: {epochs: 1}
        objective: {metric: acc, direction: maximize}
        fixed: {devices: 1, lr: 0.1}
        params: {hidden: [8]}
    """)
    listed = Listed.of("usage: train.py [-h] [--lr LR] [--hidden HIDDEN]\n\n"
                       "options:\n  --lr LR\n  --hidden HIDDEN\n")
    with pytest.raises(SpecError) as refused:
        check_flags(load_spec(sweep), listed)
    assert str(refused.value) == (f"{sweep}: experiment.check.epochs: is not a flag of the "
                                  "script: its --help lists no --epochs, got epochs")


def test_a_program_by_relative_path_runs_from_the_sweeps_folder_and_a_dashed_long_key_is_named(
        tmp_path: Path) -> None:
    """A command's program given by a relative path is made absolute from the sweep
    file's folder; a key written with its dashes is refused naming itself when it has no
    short form. Mutations (issue 53): the program's folder not passed, `long.get(bare)`
    without its default (`did you mean None?`)."""
    write(tmp_path / "scripts" / "run.sh", "#!/bin/sh\n")
    assert command_argv(["scripts/run.sh", "--lr=0.1"], tmp_path)[0] == \
        str(tmp_path / "scripts" / "run.sh")
    listed = Listed.of("usage: train.py [-h] [--mode MODE]\n\noptions:\n  --mode MODE\n")
    assert listed.refusal("--mode") == ("is written with dashes: a key is the flag's name "
                                        "without them (did you mean mode?)")


def test_a_check_run_says_what_it_runs_and_a_missing_objective_names_it(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """`experiment.check` runs the first trial with its overrides; a run that did not
    report the objective is refused naming it. Mutations (issue 53): `scripts._check_run`
    32 (the run without its params), 41 (its first line `None`), 116 (the refusal without
    the objective's name)."""
    from types import SimpleNamespace

    from msexp.cli import scripts

    write(workdir / "train.py", "print('loss: 0.5')\n")
    sweep = write(workdir / "sweep.yaml", """
        name: checked
        experiment: {command: python train.py}
        objective: {metric: acc, direction: maximize}
        params: {lr: [0.01, 0.1]}
    """)
    spec = load_spec(sweep)
    ran = []

    def check_run(request, timeout):
        ran.append(request.params)
        return SimpleNamespace(metrics={"loss": 0.5}, echoed=[], batch_statistics=None,
                               checkpoint=None, log=workdir / "check.log")

    monkeypatch.setattr(scripts, "check_run", check_run)
    monkeypatch.setattr(scripts.tempfile, "mkdtemp", lambda prefix: str(workdir / "c"))
    with pytest.raises(SpecError) as refused:
        scripts._check_run(spec, {"epochs": 1}, [])
    assert ran == [{"lr": 0.01, "epochs": 1}]
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (f"{sweep}: a check run with epochs=1 (log: "
                     f"{workdir / 'c' / 'trial-0000' / 'trial.log'})"), first
    assert str(refused.value) == (
        f"{sweep}: objective.0.metric: the check run did not report it (it reported loss; "
        f"`msexp metrics {workdir / 'check.log'}` shows why), got acc")


@pytest.mark.parametrize("check", [True, False], ids=["check-run", "no-check"])
def test_plan_check_of_a_command_says_the_objective_it_found_or_how_to_get_a_check_run(
        workdir: Path, check: bool) -> None:
    """`plan --check` of a command: with experiment.check, one real run of the first trial
    and the objective's value it recorded; without, a line saying how to have that run.
    (issue 53 fresh fcli: cli.scripts._check_run 121 (the found line printed as `None`),
    check_command_experiment 44 (the hint printed as an empty line))"""
    write(workdir / "train.py", "print('epoch: 1 step: 1, loss is 0.5')\n")
    sweep = write(workdir / "sweep.yaml", f"""
        name: checked
        experiment: {{command: python train.py{", check: {epochs: 1}" if check else ""}}}
        objective: {{metric: train_loss, direction: minimize}}
        params: {{lr: [0.01, 0.1]}}
    """)
    result = invoke("plan", str(sweep), "--check")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"{sweep}: `python train.py --help` ok", lines
    if check:
        assert f"{sweep}: objective train_loss found: 0.5" in lines, lines
    else:
        assert lines[1] == (f"{sweep}: to see what a trial records, name a tiny budget in "
                            "experiment.check (e.g. {epoch_size: 1}): --check then runs it "
                            "for real"), lines


def test_a_dashed_key_of_a_capital_short_option_is_named_as_written_with_dashes() -> None:
    """`-X` (a script's XLA flags, say) written as the key `-X`: the refusal says to drop
    the dash. (issue 53 fresh: script_help.Listed.refusal 5)"""
    listed = Listed.of("usage: train.py [-h] [-X XLA]\n\noptions:\n  -h, --help  show this "
                       "help message and exit\n  -X XLA      XLA flags\n")
    assert listed.refusal("X") is None
    assert listed.refusal("-X") == ("is written with dashes: a key is the flag's name "
                                    "without them (did you mean X?)")
