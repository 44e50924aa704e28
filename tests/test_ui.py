"""`msexp ui`: a real MLflow server on a real sweep's store, its links, and no process left
after Ctrl-C, SIGTERM or a killed msexp; the sweep's links as it starts."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from msexp.cli import app
from tests.conftest import ASSETS, ROOT, msexp_cmd, write

START_S = 300  # the server's first answer on a loaded 2-core machine
LINK = re.compile(r"^compare trials: +(http://127\.0\.0\.1:(\d+)/#/experiments/(\d+)/runs"
                  r"\?workflowType=machine_learning)$", re.M)
PARENT = re.compile(r"^sweep run: +http://127\.0\.0\.1:\d+/#/experiments/\d+/runs/(\w+)"
                    r"\?workflowType=machine_learning$", re.M)


@dataclass(frozen=True)
class Swept:
    folder: Path
    output: str


def env() -> dict[str, str]:
    found = {k: v for k, v in os.environ.items()
             if k not in ("MLFLOW_TRACKING_URI", "MSEXP_STORAGE", "COLUMNS")}
    found["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ASSETS)])
    return found


def free_port() -> int:
    """A free port from 5070 up (Chromium and some clients refuse others, 5061 among them)."""
    for port in range(5070, 5170):
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) != 0:
                return port
    raise AssertionError("no free port in 5070..5169")


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Swept:
    """A finished two-trial sweep of mlp_digits, its output piped."""
    folder = tmp_path_factory.mktemp("ui")
    write(folder / "tiny.yaml", """
        name: tiny
        experiment: mlp_digits
        fixed: {epochs: 1, hidden: 16}
        params: {micro_size: [1, 2]}
    """)
    done = subprocess.run(msexp_cmd("sweep", "tiny.yaml"), cwd=folder, env=env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return Swept(folder, done.stdout)


class Ui:
    """`msexp ui` running in the foreground, its output read line by line."""

    def __init__(self, folder: Path, *args: str):
        self.process = subprocess.Popen(msexp_cmd("ui", *args), cwd=folder, env=env(),
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)
        self.output = ""

    def read_until(self, pattern: re.Pattern[str]) -> re.Match[str]:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            found = pattern.search(self.output)
            if found:
                return found
            line = self.process.stdout.readline()  # type: ignore[union-attr]
            if not line and self.process.poll() is not None:
                break
            self.output += line
        raise AssertionError(f"no {pattern.pattern} in: {self.output}"
                             f"{self.process.stderr.read()}")  # type: ignore[union-attr]

    def server_pids(self, port: int) -> list[int]:
        """The processes of the server on `port` (MLflow's CLI and its uvicorn), not zombies."""
        found = []
        for entry in Path("/proc").iterdir():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if b"--port" in argv and str(port).encode() in argv and state != "Z" and any(
                    b"mlflow" in a or b"uvicorn" in a for a in argv):
                found.append(int(entry.name))
        return found


def get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=60) as answer:
        return int(answer.status)


def gone(ui: Ui, port: int, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while ui.server_pids(port) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not ui.server_pids(port)


@pytest.mark.slow  # a sweep of two trials
def test_a_sweep_prints_its_links_as_it_starts_and_as_it_ends(swept: Swept) -> None:
    # mutation: run_sweep gives the recorder no watchers -> the links only at the end
    links = LINK.findall(swept.output)
    assert len(links) == 2 and links[0] == links[1], swept.output
    starting = swept.output.index("compare trials:")
    assert starting < swept.output.index("tiny: trials"), "the start's links come first"
    assert swept.output[:starting].endswith("serve the store:  msexp ui tiny.yaml\n"), (
        swept.output)


@pytest.mark.slow  # a real MLflow server
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_msexp_ui_serves_the_sweeps_store_until_stopped(swept: Swept, stop: int) -> None:
    port = free_port()
    ui = Ui(swept.folder, "tiny.yaml", "--port", str(port))
    try:
        runs = ui.read_until(LINK)
        parent = ui.read_until(PARENT)[1]
        assert "ready in" in ui.output and int(runs[2]) == port, ui.output
        assert get(runs[1]) == 200
        # the store it serves is the sweep's: its parent run, by the printed id
        api = f"http://127.0.0.1:{port}/ajax-api/2.0/mlflow/runs/get?run_id={parent}"
        assert get(api) == 200
        assert len(ui.server_pids(port)) >= 2, "MLflow's CLI and its uvicorn"
        ui.process.send_signal(stop)
        # mutation: serve installs no handlers -> Ctrl-C exits 130, SIGTERM 143
        assert ui.process.wait(timeout=60) == 0
        assert gone(ui, port), f"left running: {ui.server_pids(port)}"
        assert "MLflow UI stopped" in ui.process.stderr.read()  # type: ignore[union-attr]
    finally:
        ui.process.kill()


@pytest.mark.slow  # a real MLflow server
def test_a_killed_msexp_ui_takes_its_server_with_it(swept: Swept) -> None:
    """SIGKILL leaves no handler to run: the server learns it from the kernel."""
    port = free_port()
    ui = Ui(swept.folder, "tiny.yaml", "--port", str(port))
    try:
        ui.read_until(LINK)
        ui.process.kill()
        ui.process.wait(timeout=30)
        # mutation: no PR_SET_PDEATHSIG in the server -> it outlives msexp
        assert gone(ui, port), f"left running: {ui.server_pids(port)}"
    finally:
        for pid in ui.server_pids(port):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow  # a real MLflow server
def test_msexp_ui_of_a_tracking_server_prints_its_links_and_starts_nothing(
        swept: Swept) -> None:
    port = free_port()
    ui = Ui(swept.folder, "tiny.yaml", "--port", str(port))
    try:
        served = ui.read_until(LINK)
        parent = ui.read_until(PARENT)[1]
        other = free_port()
        done = subprocess.run(msexp_cmd("ui", "tiny.yaml", "--tracking-uri",
                                        f"http://127.0.0.1:{port}", "--port", str(other)),
                              cwd=swept.folder, env=env(), capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert LINK.search(done.stdout)[1] == served[1], done.stdout  # type: ignore[index]
        assert PARENT.search(done.stdout)[1] == parent, done.stdout  # type: ignore[index]
        assert "ready in" not in done.stdout and not ui.server_pids(other)
    finally:
        ui.process.send_signal(signal.SIGINT)
        ui.process.wait(timeout=60)


@pytest.mark.slow  # MLflow opens the store
def test_msexp_ui_refuses_a_taken_port(swept: Swept) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(msexp_cmd("ui", "tiny.yaml", "--port", str(port)),
                              cwd=swept.folder, env=env(), capture_output=True, text=True,
                              timeout=120)
    assert done.returncode == 1
    assert f"port {port} already answers" in done.stderr and f"--port {port + 1}" in done.stderr


def test_msexp_ui_before_any_sweep_says_to_sweep_and_makes_no_store(workdir: Path) -> None:
    write(workdir / "tiny.yaml", "name: tiny\nexperiment: mlp_digits\n")
    result = CliRunner().invoke(app, ["ui", "tiny.yaml"])
    assert result.exit_code == 1, result.output
    assert ("no MLflow store at mlruns/mlflow.db: run `msexp sweep tiny.yaml` first"
            in result.output), result.output
    assert not (workdir / "mlruns" / "mlflow.db").exists()


def test_msexp_ui_help_has_a_summary_and_an_example_that_runs() -> None:
    result = CliRunner().invoke(app, ["ui", "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0
    assert "Serve the sweep's MLflow store and print the links of its runs." in result.output
    assert "Example: msexp ui sweeps/accum.yaml" in result.output
    assert (ROOT / "sweeps/accum.yaml").is_file()


def test_the_parent_run_shows_the_objective_against_training_memory(tracker) -> None:
    import optuna

    from msexp.keys import StudyKey, TrialKey
    from msexp.tracking.trade_off import KEY, log_trade_off, trade_off_figure

    experiment = tracker.experiment_id("trade")
    parent = tracker.parent_run(experiment, "trade", {}, Path("none.yaml"))
    study = optuna.create_study(direction="maximize")
    study.set_user_attr(StudyKey.PARENT_RUN, parent)
    for micro_size, memory, accuracy in ((1, 4.6, 0.9), (2, 2.9, 0.9), (4, 2.0, 0.8)):
        study.enqueue_trial({"micro_size": micro_size})
        trial = study.ask({"micro_size": optuna.distributions.CategoricalDistribution(
            [1, 2, 4])})
        trial.set_user_attr(TrialKey.METRICS, {"eval_accuracy": accuracy,
                                               "train_mem_mb": memory, "wall_s": 3.0})
        study.tell(trial, accuracy)
    study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)  # not drawn

    # mutation: log_trade_off logs no image -> none on the run
    assert log_trade_off(study, tracker, "eval_accuracy")
    images = [a.path for a in tracker.client.list_artifacts(parent, "images")]
    assert any(p.startswith(f"images/{KEY}+step+3+") and p.endswith(".png") for p in images)
    trials = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    figure = trade_off_figure(trials, "eval_accuracy", "train_mem_mb")
    axes = figure.axes[0]
    assert (axes.get_xlabel(), axes.get_ylabel()) == ("train_mem_mb", "eval_accuracy")
    drawn = sorted(tuple(p) for c in axes.collections for p in c.get_offsets())
    assert drawn == [(2.0, 0.8), (2.9, 0.9), (4.6, 0.9)]
    assert [t.get_text() for t in axes.get_legend().get_texts()] == [
        "micro_size=1", "micro_size=2", "micro_size=4"]


def test_serve_says_once_its_server_answers_how_long_it_took_and_stops_it_on_a_signal(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`serve` around a stand-in server (Python's http.server answering /health; MLflow's
    own is the slow tests'): its ready line, whole on a narrow terminal, with the seconds it
    waited; then the links; a stop signal ends it and its server. (issue 53 survivors:
    cli.ui.serve 60, 63, 68)"""
    from msexp.cli import options, ui

    (workdir / "health").write_text("OK")
    port = free_port()
    monkeypatch.setattr(ui, "server_argv", lambda uri, port: [
        sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
        "--directory", str(workdir)])
    servers: list[int] = []
    shown = ui.show_links

    def show_then_stop(*args: str | None) -> None:
        shown(*args)
        servers.extend(int(p) for p in subprocess.run(
            ["pgrep", "-f", f"http.server {port}"], capture_output=True, text=True).stdout.split())
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C once the links are out

    monkeypatch.setattr(ui, "show_links", show_then_stop)
    monkeypatch.setattr(options.console, "_force_terminal", True)
    monkeypatch.setattr(options.console, "_width", 40)
    started = time.monotonic()
    ui.serve("sqlite:///mlruns/mlflow.db", port, workdir / "mlruns" / "mlflow.db", ("3", "abc"))
    took = time.monotonic() - started
    out = capsys.readouterr()
    ready = re.search(r"^MLflow UI of sqlite:///mlruns/mlflow\.db ready in (\d+\.\d) s "
                      r"\(Ctrl-C stops it\)$", out.out, re.M)
    assert ready and 0 <= float(ready[1]) <= took, out.out
    assert re.search(rf"^compare trials: +http://127\.0\.0\.1:{port}/#/experiments/3/runs", out.out,
                     re.M), out.out
    assert "MLflow UI stopped" in out.err and len(servers) == 1
    with pytest.raises(ProcessLookupError):
        os.kill(servers[0], 0)


def test_a_port_that_takes_the_call_but_never_answers_is_not_ready(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that accepts and hangs is polled again, not waited on forever (ANSWER_S
    each). (issue 53 survivor: cli.ui._answers 7)"""
    from msexp.cli import ui

    monkeypatch.setattr(ui, "ANSWER_S", 0.3)

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        assert ui._answers(silent.getsockname()[1], "/health") is False


@dataclass(frozen=True)
class Store:
    """A real MLflow store of sweeps' parent runs (MLflow's client, no trials run)."""

    uri: str
    folder: Path
    ids: dict[str, str]  # what -> experiment or run id


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """tiny: its sweep run `current`, a newer one `replaced` (superseded by another
    version) and a newer trial run; all-replaced: two superseded sweep runs, `older` and
    `newer`; empty: no run; later: the newest sweep run of the store."""
    from mlflow import MlflowClient

    from msexp.keys import RunTag

    folder = tmp_path_factory.mktemp("ui-store")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    client = MlflowClient(uri)
    ids: dict[str, str] = {}

    def run(experiment: str, what: str, start: int, **tags: str) -> None:
        ids[what] = client.create_run(ids[experiment], start_time=start,
                                      tags={RunTag.ROLE: "sweep", **tags}).info.run_id

    for name in ("tiny", "all-replaced", "empty", "later"):
        ids[name] = client.create_experiment(name)
    run("tiny", "current", 1000)
    run("tiny", "replaced", 2000, **{RunTag.SUPERSEDED_BY: "tiny-v3"})
    run("tiny", "trial", 3000, **{RunTag.ROLE: "trial"})
    run("all-replaced", "older", 1000, **{RunTag.SUPERSEDED_BY: "v2"})
    run("all-replaced", "newer", 2000, **{RunTag.SUPERSEDED_BY: "v3"})
    run("later", "newest", 5000)
    return Store(uri, folder, ids)


def _ui_links(workdir: Path, monkeypatch: pytest.MonkeyPatch, store: Store, *args: str
              ) -> tuple[int, str, list[Path | None]]:
    """`msexp ui ARGS --tracking-uri STORE` with its server's run left out (`serve` is the
    test above's): its exit code, output (the links `serve` prints once the UI answers)
    and the store it would serve."""
    from msexp.cli import ui

    served: list[Path | None] = []

    def links_only(uri: str, port: int, folder: Path | None,
                   found: tuple[str | None, str | None]) -> None:
        served.append(folder)
        ui.show_links(*found, ui.ui_base(uri, port))

    monkeypatch.setattr(ui, "serve", links_only)
    for name in ("tiny", "all-replaced", "empty", "nope"):
        write(workdir / f"{name}.yaml", f"name: {name}\nexperiment: mlp_digits\n")
    port = free_port()
    result = CliRunner().invoke(app, ["ui", *args, "--tracking-uri", store.uri,
                                      "--port", str(port)], env={"COLUMNS": "200"})
    return result.exit_code, result.output, served


@pytest.mark.parametrize(("args", "experiment", "parent"), [
    (["tiny.yaml"], "tiny", "current"),
    (["all-replaced.yaml"], "all-replaced", "newer"),
    ([], "later", "newest"),
    (["empty.yaml"], "empty", None),
], ids=["replaced-not-linked", "all-replaced-the-newest", "no-file-the-newest-sweep",
        "no-sweep-run"])
def test_msexp_ui_links_the_sweeps_current_parent_run(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, store: Store, args: list[str],
        experiment: str, parent: str | None) -> None:
    """The sweep's runs table and its newest parent run that no newer version replaced
    (`msexp sweep --restart` tags the one it replaces), not a trial's; the newest of the
    replaced where all were; without FILE the store's newest sweep; no parent line where
    the sweep has no parent run. (survivors: cli.ui.ui, sweep_runs, _newest_sweep)"""
    code, output, served = _ui_links(workdir, monkeypatch, store, *args)
    assert code == 0, output
    assert served == [store.folder / "mlflow.db"]
    runs = LINK.findall(output)
    assert [(r[2]) for r in runs] == [store.ids[experiment]], output
    assert PARENT.findall(output) == ([store.ids[parent]] if parent else []), output


def test_msexp_ui_of_a_sweep_not_in_the_store_says_to_sweep_it(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, store: Store) -> None:
    """(survivors: cli.ui.sweep_runs' refusal)"""
    code, output, served = _ui_links(workdir, monkeypatch, store, "nope.yaml")
    assert code == 1 and served == []
    assert " ".join(output.split()) == (
        f"no MLflow experiment named 'nope' in {store.uri}: run `msexp sweep nope.yaml "
        f"--tracking-uri {store.uri}` first"), output


def test_msexp_ui_refuses_a_port_that_answers_and_names_the_next(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, store: Store) -> None:
    """(survivors: cli.ui.ui's port check)"""
    from msexp.cli import ui

    monkeypatch.setattr(ui, "serve", lambda *args: pytest.fail("served a taken port"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["ui", "--tracking-uri", store.uri, "--port",
                                          str(port)], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert " ".join(result.output.split()) == (
        f"port {port} already answers (another MLflow UI?): stop it, or give --port "
        f"{port + 1}"), result.output


def test_the_ui_server_reads_artifacts_under_mlruns_for_the_default_store_only(
        workdir: Path) -> None:
    """MLflow's UI of the embedded store finds the runs' artifacts in mlruns/artifacts;
    another store keeps its own artifact locations. (survivors: cli.ui.server_argv)"""
    from msexp.cli import ui
    from msexp.tracking.runs import tracking_uri

    common = ["--host", "127.0.0.1", "--port", "5071", "--workers", "1",
              "--no-serve-artifacts"]
    default = tracking_uri()
    assert ui.server_argv(default, 5071) == [
        sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", default, *common,
        "--default-artifact-root", (workdir / "mlruns" / "artifacts").resolve().as_uri()]
    other = f"sqlite:///{workdir / 'other.db'}"
    assert ui.server_argv(other, 5071) == [
        sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", other, *common]


def test_a_ui_server_that_exits_at_once_is_reported_with_its_logs_last_line(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The exit code and the last line its log says something on (cut at 300 characters),
    and where the log is. (survivors: cli.ui._wait_until_ready, _last_line)"""
    from msexp.cli import ui

    last = "OSError: [Errno 98] Address already in use " + "x" * 400
    monkeypatch.setattr(ui, "server_argv", lambda uri, port: [
        sys.executable, "-c", f"print('starting'); print({last!r}); print('   '); print(); "
        "raise SystemExit(3)"])
    store = workdir / "mlruns" / "mlflow.db"
    with pytest.raises(Exception) as failed:
        ui.serve("sqlite:///mlruns/mlflow.db", free_port(), store, ("3", "abc"))
    log = workdir / "mlruns" / "mlflow-ui.log"
    assert str(failed.value) == (f"the MLflow UI did not start (exit code 3): {last[:300]} "
                                 f"(its log: {log})")
    assert ui._last_line(workdir / "no-such.log") == ""


def test_a_ui_server_that_never_answers_is_given_up_after_its_start_time(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(survivors: cli.ui._wait_until_ready's timeout)"""
    from msexp.cli import ui

    monkeypatch.setattr(ui, "START_S", 1.0)
    monkeypatch.setattr(ui, "server_argv", lambda uri, port: [
        sys.executable, "-c", "import time; time.sleep(10)"])
    port = free_port()
    started = time.monotonic()
    with pytest.raises(Exception) as failed:
        ui.serve("sqlite:///mlruns/mlflow.db", port, None, ("3", "abc"))
    assert time.monotonic() - started < 5
    assert str(failed.value) == (f"the MLflow UI did not answer on port {port} within 1 s "
                                 f"(its log: mlruns/mlflow-ui.log)")


def test_msexp_ui_of_a_tracking_server_links_the_files_sweep_and_starts_no_server(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, store: Store) -> None:
    """A tracking server serves itself: the links of FILE's sweep, found on it (here the
    module's store answers for it), and no UI started. (issue 53 fresh: cli.ui.ui 20)"""
    from msexp.cli import ui

    asked: list[tuple[str, str | None]] = []
    found = ui.sweep_runs

    def on_the_store(uri: str, name: str | None, file: Path | None
                     ) -> tuple[str | None, str | None]:
        asked.append((uri, name))
        return found(store.uri, name, file)

    monkeypatch.setattr(ui, "sweep_runs", on_the_store)
    monkeypatch.setattr(ui, "serve", lambda *args: pytest.fail("a server was started"))
    write(workdir / "tiny.yaml", "name: tiny\nexperiment: mlp_digits\n")
    result = CliRunner().invoke(app, ["ui", "tiny.yaml", "--tracking-uri",
                                      "http://127.0.0.1:1"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert asked == [("http://127.0.0.1:1", "tiny")]
    assert (f"sweep run:        http://127.0.0.1:1/#/experiments/{store.ids['tiny']}/runs/"
            f"{store.ids['current']}?workflowType=machine_learning") in result.output.splitlines()


def test_the_ui_of_a_store_without_sweeps_is_one_unwrapped_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """(issue 53 fresh: cli.ui.show_links 4)"""
    from msexp.cli import options, ui

    monkeypatch.setattr(options.console, "_force_terminal", True)
    monkeypatch.setattr(options.console, "_width", 20)
    ui.show_links(None, None, "http://127.0.0.1:5070")
    assert capsys.readouterr().out == "MLflow UI:        http://127.0.0.1:5070/\n"
