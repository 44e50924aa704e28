"""Every command msexp prints as a hint works when copied as printed: a sweep whose trials
all fail, fixed and retried; a changed sweep file, restarted as the study's next version;
the same with --study and --storage. Real command trials (a tiny script), so slow. Fast:
the core's log warnings carry their command as data, and the CLI's handlers write it out."""

from __future__ import annotations

import logging
import re
import shlex
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from msexp.cli import app
from msexp.cli.app import route_logs
from msexp.errors import Suggestion
from msexp.keys import RunTag, StudyKey
from msexp.paths import LOG_FILE
from msexp.search.storage import open_storage
from msexp.secrets.redaction import redact_logs
from tests.conftest import mlflow_client, write

HINT = re.compile(r"msexp (?:sweep|worker|report|best|status|sync|plan)\b[^;()\n]*")
SCRIPT = """
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    if Path(__file__).with_name("broken").exists():
        raise SystemExit("broken on purpose")
    print("epoch: 1 step: 2, loss is 0.5")
    print(f"eval_acc: {0.5 + args.lr:.3f}")
"""


def sweep_text(lrs: list[float]) -> str:
    return f"""
        name: hints
        experiment: {{command: python train.py}}
        objective: {{metric: eval_acc, direction: maximize}}
        params: {{lr: {lrs}}}
    """


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


def hints(output: str) -> list[str]:
    return [h.strip() for h in HINT.findall(output)]


def run_hint(hint: str):
    """The hint as copied into a shell: split as the shell would, `msexp` dropped."""
    argv = shlex.split(hint)
    assert argv[0] == "msexp", hint
    return invoke(*argv[1:])


@pytest.mark.slow
def test_the_hints_of_a_failed_and_a_changed_sweep_work_as_printed(workdir: Path) -> None:
    write(workdir / "train.py", SCRIPT)
    broken = workdir / "broken"
    broken.touch()
    sweep = write(workdir / "h.yaml", sweep_text([0.1, 0.2]))
    failed = invoke("sweep", str(sweep))
    assert failed.exit_code == 1, failed.output
    assert hints(failed.output) == [f"msexp report {sweep}", f"msexp best {sweep}",
                                    f"msexp sweep {sweep} --retry-failed"]
    broken.unlink()
    retried = run_hint(hints(failed.output)[2])
    assert retried.exit_code == 0, retried.output
    report = run_hint(hints(failed.output)[0])
    assert report.exit_code == 0 and "hints: trials" in report.output, report.output
    best = run_hint(hints(failed.output)[1])
    assert best.exit_code == 0 and best.output.startswith("trial 3: eval_acc=0.7"), best.output

    write(workdir / "h.yaml", sweep_text([0.3]))
    refused = invoke("sweep", str(sweep))
    assert refused.exit_code == 2 and hints(refused.output) == [
        f"msexp sweep {sweep} --restart"], refused.output
    restarted = run_hint(hints(refused.output)[0])
    assert restarted.exit_code == 0, restarted.output
    assert "'hints-v2' ('hints' is marked superseded)" in restarted.output
    assert hints(restarted.output) == [f"msexp report {sweep}", f"msexp best {sweep}"]
    report = run_hint(hints(restarted.output)[0])
    assert report.exit_code == 0 and "hints-v2: trials" in report.output, report.output
    best = run_hint(hints(restarted.output)[1])
    assert best.output.startswith("trial 0: eval_acc=0.8"), best.output
    for command in ("sweep", "worker"):  # the newest version (the old one would refuse)
        again = invoke(command, str(sweep))
        assert again.exit_code == 0 and "1 of 1 trials already finished" in again.output, \
            again.output
    storage = open_storage(None)
    old = optuna.load_study(study_name="hints", storage=storage)
    new = optuna.load_study(study_name="hints-v2", storage=storage)
    assert old.user_attrs[StudyKey.SUPERSEDED_BY] == "hints-v2"
    client = mlflow_client()
    old_run = client.get_run(old.user_attrs[StudyKey.PARENT_RUN])
    new_run = client.get_run(new.user_attrs[StudyKey.PARENT_RUN])
    assert old_run.info.status == "KILLED", "no green check on a superseded sweep"
    assert old_run.data.tags[RunTag.SUPERSEDED_BY] == "hints-v2"
    assert new_run.info.status == "FINISHED"
    assert new_run.data.tags[RunTag.SUPERSEDES] == "hints"


@pytest.mark.slow
def test_hints_carry_the_study_and_storage_that_were_given(workdir: Path) -> None:
    write(workdir / "train.py", SCRIPT)
    (workdir / "broken").touch()
    sweep = write(workdir / "h.yaml", sweep_text([0.1]))
    failed = invoke("sweep", str(sweep), "--study", "mine", "--storage", "other.journal")
    assert failed.exit_code == 1, failed.output
    where = "--study mine --storage other.journal"
    assert hints(failed.output) == [f"msexp report {sweep} {where}",
                                    f"msexp best {sweep} {where}",
                                    f"msexp sweep {sweep} --retry-failed {where}"]
    (workdir / "broken").unlink()
    assert run_hint(hints(failed.output)[2]).exit_code == 0
    report = run_hint(hints(failed.output)[0])
    assert report.exit_code == 0 and "mine: trials" in report.output, report.output
    assert "COMPLETE" in report.output


def test_a_log_warning_shows_the_command_it_suggests_written_out_and_redacted(
        workdir: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The core logs a `Suggestion` (as `tracking.delivery.warn_kept` does, see
    test_tracking); the CLI's handlers, stderr and mlruns/msexp.log, write it out with the
    options a copy needs, redacted (mutation: `OwnLines` without its `WrittenOut` formatter
    leaves a bare `msexp sync` on stderr)."""
    redact_logs()
    route_logs()
    log = logging.getLogger("msexp")
    elsewhere, secret = "sqlite:///elsewhere.db", "http://user:hunter2@mlflow:5000"
    log.warning("kept; by: %s", Suggestion(("sync",), tracking_uri=elsewhere))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", elsewhere)  # a copy reaches it anyway
    log.warning("kept; by: %s", Suggestion(("sync",), tracking_uri=elsewhere))
    log.warning("run: %s", Suggestion(("report", "a b.yaml"), study="s", tracking_uri=secret))
    shown = ["kept; by: msexp sync --tracking-uri sqlite:///elsewhere.db", "kept; by: msexp sync",
             "run: msexp report 'a b.yaml' --study s --tracking-uri "
             "http://user:***@mlflow:5000"]
    assert capsys.readouterr().err.splitlines() == shown
    logged = LOG_FILE.read_text().splitlines()
    assert [line.split(" msexp: ", 1)[1] for line in logged] == shown


@pytest.mark.parametrize("first", ["api", "cli"])
def test_after_the_python_api_and_the_cli_routed_the_logs_a_warning_is_written_out_once(
        workdir: Path, capsys: pytest.CaptureFixture, first: str) -> None:
    """A process that used the Python API and the CLI (a notebook, a test worker), in
    either order: one handler writes msexp's lines on stderr, with a suggestion written
    out (mutation: show_own_lines adding a handler whatever is there: the line twice)."""
    from msexp.api.quiet import route_library_logs

    for route in (route_library_logs, route_logs) if first == "api" else (
            route_logs, route_library_logs, route_logs):
        route()
    logging.getLogger("msexp").warning(
        "kept; by: %s", Suggestion(("sync",), tracking_uri="sqlite:///elsewhere.db"))
    assert capsys.readouterr().err.splitlines() == [
        "kept; by: msexp sync --tracking-uri sqlite:///elsewhere.db"]


def test_the_python_apis_routing_alone_shows_msexp_warnings_and_logs_a_librarys_in_utf8(
        workdir: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """A notebook that never ran the CLI: msexp's warning on stderr, a library's in
    mlruns/msexp.log, non-ASCII text in both. Mutations (issue 53, made where the code is
    now, `console/own_log.py`): `quiet.route_library_logs` 19 (msexp's handler set up on
    another logger: the warning shows nowhere) and `quiet.LibraryLog.__init__` 7 (the log's
    encoding misspelt: the library's call raises)."""
    from msexp.api.quiet import route_library_logs

    own, library = logging.getLogger("msexp"), logging.getLogger("optuna")
    level = own.level
    monkeypatch.setattr(own, "handlers", [])
    monkeypatch.setattr(library, "handlers", [])
    monkeypatch.setattr(library, "propagate", library.propagate)
    monkeypatch.setenv("MLFLOW_CONFIGURE_LOGGING", "false")  # routing sets it
    try:
        route_library_logs()
        own.getChild("api").warning("über die Grenze")
        library.warning("Trial 0 finished: naïve")
    finally:
        for handler in library.handlers:
            handler.close()
        own.setLevel(level)
    assert capsys.readouterr().err.splitlines() == ["über die Grenze"]
    last = LOG_FILE.read_text(encoding="utf-8").splitlines()[-1]
    assert last.endswith(" WARNING optuna: Trial 0 finished: naïve"), last
