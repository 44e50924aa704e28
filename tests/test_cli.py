"""The CLI's one error boundary, and commands that read a study: status, report, sync."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import optuna
import pytest
import typer
from optuna.trial import TrialState
from typer.testing import CliRunner

from msexp.cli import app
from msexp.keys import StudyKey
from msexp.search.claims import rerun_failed
from msexp.search.optuna_private import pop_waiting
from msexp.search.study import open_study
from msexp.spec import load_spec
from tests.conftest import msexp_cmd, write

UNREACHABLE = "http://user:s3cret@127.0.0.1:9"


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


@pytest.fixture
def sweep(workdir: Path) -> Path:
    return write(workdir / "s.yaml", """
        name: cli
        experiment: mlp_digits
        params: {micro_size: [1, 2]}
    """)


def one_line(result) -> str:
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


def test_sync_to_an_unreachable_store_is_one_line_without_the_password(workdir: Path) -> None:
    done = subprocess.run(msexp_cmd("sync", "--tracking-uri", UNREACHABLE),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "cannot reach the MLflow tracking store http://user:***@127.0.0.1:9" in done.stderr
    assert "s3cret" not in done.stderr + done.stdout


def test_optunas_warnings_go_to_the_log_not_the_console(workdir: Path) -> None:
    """Optuna warns that the RDB storage's heartbeat is experimental, every time msexp
    opens one; a user sees msexp's output only."""
    url = f"sqlite:///{workdir / 'o.db'}"
    optuna.create_study(study_name="quiet", storage=url)
    done = subprocess.run(msexp_cmd("status", "--study", "quiet", "--storage", url),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("quiet: 0 finished of ?") and done.stderr == ""
    log = (workdir / "mlruns" / "msexp.log").read_text(encoding="utf-8")
    assert "ExperimentalWarning: Argument ``heartbeat_interval`` is an experimental" in log


def test_mlflows_lines_go_to_the_log_even_where_mlflow_was_imported_first(
        workdir: Path, capfd) -> None:
    """MLflow's import adds a stderr handler (a user's experiment may import it before
    msexp routes the logs); its INFO lines reach the log only."""
    import logging

    import mlflow  # noqa: F401

    library = logging.getLogger("mlflow")
    library.addHandler(logging.StreamHandler())  # as MLflow's own logging set-up does
    invoke("status", "--study", "none", "--storage", f"sqlite:///{workdir / 'o.db'}")
    capfd.readouterr()
    logging.getLogger("mlflow.store.db.utils").info("Creating initial MLflow database tables")
    assert capfd.readouterr() == ("", "")
    for handler in logging.getLogger().handlers:
        handler.flush()
    log = (workdir / "mlruns" / "msexp.log").read_text(encoding="utf-8")
    assert "INFO mlflow.store.db.utils: Creating initial MLflow database tables" in log


def test_report_to_an_unreachable_store_is_one_line(sweep: Path) -> None:
    study, _ = open_study(load_spec(sweep), None)
    trial = study.ask()  # a finished trial: a report has something to log
    trial.set_user_attr("metrics", {"eval_accuracy": 0.5})
    study.tell(trial, 0.5)
    study.set_user_attr(StudyKey.PARENT_RUN, "0" * 32)  # a run the report logs on
    result = invoke("report", str(sweep), "--tracking-uri", UNREACHABLE)
    assert result.exit_code == 1
    assert "cannot reach the MLflow tracking store" in result.output
    assert "Traceback" not in result.output and "s3cret" not in result.output


def test_an_unforeseen_error_is_one_line_and_debug_shows_the_traceback(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def unforeseen(path: Path) -> str:
        raise RuntimeError("nobody saw this coming")

    monkeypatch.setattr("msexp.cli.studies.read_name", unforeseen)
    sweep = write(workdir / "s.yaml", "name: s\n")
    result = invoke("status", str(sweep))
    assert result.exit_code == 1
    assert one_line(result).startswith("msexp: RuntimeError: nobody saw this coming")
    printed = re.fullmatch(r".*\(the traceback: (msexp --debug .*)\)", one_line(result))
    assert printed, result.output
    assert shlex.split(printed[1]) == ["msexp", "--debug", "status", str(sweep)]
    debug = invoke(*shlex.split(printed[1])[1:])  # the printed command, as copied
    assert debug.exit_code == 1, debug.output
    assert "Traceback (most recent call last)" in debug.output
    assert debug.output.rstrip().endswith("RuntimeError: nobody saw this coming")


def test_status_counts_a_rerun_trial_once(sweep: Path) -> None:
    """A failed trial's rerun is not a finished trial of its own."""
    study, _ = open_study(load_spec(sweep), None)
    first = pop_waiting(study)
    study.tell(first, state=TrialState.FAIL)
    assert rerun_failed(study) == 1
    for _ in range(2):
        trial = pop_waiting(study)
        study.tell(trial, [0.5])
    result = invoke("status", str(sweep))
    assert result.exit_code == 0, result.output
    assert result.output.startswith("cli: 2 finished of 2;"), result.output


def test_validate_refuses_a_file_that_is_not_utf8(workdir: Path) -> None:
    path = workdir / "latin1.yaml"
    path.write_bytes("name: caf\xe9\nexperiment: mlp_digits\n".encode("latin-1"))
    result = invoke("validate", str(path))
    assert result.exit_code == 2
    assert one_line(result) == f"{path}: must be UTF-8 text (byte 9 is not)"


def test_an_unforeseen_error_is_printed_verbatim_and_cut_at_300_characters(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutations: rich markup on (the brackets vanish), the cut moved."""
    def unforeseen(path: Path) -> str:
        raise RuntimeError("[bold]x[/bold] " + "y" * 400)

    monkeypatch.setattr("msexp.cli.studies.read_name", unforeseen)
    result = invoke("status", str(write(workdir / "s.yaml", "name: s\n")))
    text = "[bold]x[/bold] " + "y" * (300 - len("[bold]x[/bold] "))
    assert one_line(result) == (f"msexp: RuntimeError: {text} (the traceback: msexp --debug "
                                f"status {workdir / 's.yaml'})")


def test_each_command_group_has_the_boundary_and_help_without_arguments() -> None:
    """Mutations of `_typer` (it runs at import, so its groups are rebuilt here)."""
    from msexp.cli.app import _typer

    group = _typer("Tools for a test.\n\nExample: msexp tools boom")

    @group.command()
    def boom() -> None:
        """Fail with a two-line error."""
        raise RuntimeError("first\nsecond")

    @group.command()
    def fine() -> None:
        """Do nothing."""

    failed = CliRunner().invoke(group, ["boom"])
    assert failed.exit_code == 1 and failed.exception.__class__ is SystemExit
    assert one_line(failed) == ("msexp: RuntimeError: first second "
                                "(the traceback: msexp --debug boom)")
    bare = CliRunner().invoke(group, [], env={"COLUMNS": "200"})
    assert "Tools for a test." in bare.output and "boom" in bare.output, bare.output
    assert "Usage:" in bare.output and "--install-completion" not in bare.output, "root only"
    assert not group.pretty_exceptions_enable, "a traceback only with --debug, and plain"
    services = invoke("services")
    assert "up" in services.output and "down" in services.output, services.output


def commands(group, path: tuple[str, ...] = ()):
    """Every command of `group` and its subgroups, with the words that invoke it."""
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


def shown_default(option) -> str | None:
    if isinstance(option.show_default, str):
        return f"({option.show_default})"
    if option.show_default is False or option.is_flag or option.name == "help":
        return None
    default = option.default
    return None if default is None else str(getattr(default, "value", default))


def test_help_shows_every_default() -> None:
    """Mutation: a default written into the help text, where Rich takes it for markup."""
    checked = 0
    for path, command in commands(typer.main.get_command(app)):
        shown = " ".join(invoke(*path, "--help").output.split())
        for option in (p for p in command.params if p.param_type_name == "option"):
            assert "[default" not in (option.help or ""), (path, option.name)
            default = shown_default(option)
            if default is not None:
                assert f"[default: {default}]" in shown, (path, option.name, shown)
                checked += 1
    assert checked > 20
    tracking = " ".join(invoke("sweep", "--help").output.split())
    assert "MLflow tracking URI. [env var: MLFLOW_TRACKING_URI] [default: " \
           "(sqlite:///mlruns/mlflow.db)]" in tracking


def test_the_scaffolded_files_are_where_they_say_and_name_each_other(workdir: Path) -> None:
    """`msexp new experiment` (plain and --script) and `msexp new sweep` of a file: each file
    at its path, naming the others. Mutations (issue 53): the name, the text, the sweep or
    --force not passed on; a `.py` target's stem taken after its last dot (sweeps/py.yaml)."""
    assert invoke("new", "experiment", "plain").exit_code == 0
    plain = (workdir / "experiments" / "plain.py").read_text()
    assert "msexp new sweep --experiment experiments/plain.py" in plain
    made = invoke("new", "experiment", "scripted", "--script")
    assert made.exit_code == 0, made.output
    script = (workdir / "experiments" / "scripted.py").read_text()
    assert "msexp sweep sweeps/scripted.yaml" in script
    sweep = (workdir / "sweeps" / "scripted.yaml").read_text()
    assert "experiment: {command: python ../experiments/scripted.py}" in sweep
    assert invoke("new", "experiment", "scripted", "--script").exit_code == 1
    assert invoke("new", "experiment", "scripted", "--script", "--force").exit_code == 0
    # the first `new sweep` in a process imports MindSpore to check it (about 2 s)
    of_file = invoke("new", "sweep", "--experiment", "experiments/plain.py")
    assert of_file.exit_code == 0, of_file.output
    assert "experiment: experiments/plain.py:build" in \
        (workdir / "sweeps" / "plain.yaml").read_text()
    assert not (workdir / "sweeps" / "py.yaml").exists()


def test_status_names_each_running_trial(sweep: Path) -> None:
    """Mutation (issue 53): the running trial's number read under another key."""
    study, _ = open_study(load_spec(sweep), None)
    pop_waiting(study)  # running, no claim mark on it: its owner is not known
    result = invoke("status", str(sweep))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["cli: 0 finished of 2; RUNNING 1, WAITING 1",
                                          "  running #0 on ?: "], result.output


def test_a_study_missing_from_a_given_store_is_refused_naming_that_store(
        workdir: Path) -> None:
    """Mutation (issue 53): the default journal named instead of the `--storage` given."""
    url = f"sqlite:///{workdir / 'o.db'}"
    optuna.create_study(study_name="other", storage=url)
    result = invoke("status", "--study", "none", "--storage", url)
    assert result.exit_code == 1
    assert one_line(result) == f"no study named 'none' in {url}"


@pytest.mark.parametrize("proxy", [False, True])
def test_services_up_prints_the_storage_workers_give_unwrapped_and_the_proxy_only_if_started(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, proxy: bool) -> None:
    """The services themselves start in the slow test_cluster; here, what `services up`
    prints of them at a terminal narrower than its lines: each line whole, to copy.
    (issue 53 survivors: cli.cluster.services_up 6, 11, 19, 23)"""
    from msexp.cli import options
    from msexp.cluster import services

    monkeypatch.setattr(options.console, "_force_terminal", True)
    monkeypatch.setattr(options.console, "_width", 40)

    asked: dict[str, object] = {}

    def up(**ports: object) -> services.Services:
        asked.update(ports)
        started = services.Services(workdir / "services", 15432, 15000)
        started.root.mkdir()
        (started.root / "proxy.port").write_text("13007\n")
        return started

    monkeypatch.setattr(services, "up", up)
    args = ["services", "up", "--pg-port", "15432", "--mlflow-port", "15000",
            "--proxy-port", "13007", *(["--proxy"] if proxy else [])]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert asked == {"pg_port": 15432, "mlflow_port": 15000, "proxy": proxy,
                     "proxy_port": 13007}
    storage = "grpc://127.0.0.1:13007" if proxy else "postgresql://msexp@127.0.0.1:15432/optuna"
    lines = result.output.splitlines()
    assert (f"msexp sweep FILE --storage {storage} --tracking-uri http://127.0.0.1:15000"
            in lines), result.output
    assert ("gRPC proxy:    grpc://127.0.0.1:13007 (of database optuna)" in lines) is proxy
