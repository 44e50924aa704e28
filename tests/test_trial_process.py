"""The trial process's own code, run in this process: the zygote and its forked trial
children (`zygote.Zygote`, `serve`, `_child_main`), a trial's events and log
(`_run_logged`), and training in this process with warm graphs and checkpoints
(`local.train_request`).

A host runs this code in a subprocess, where mutmut sees no test; here it runs in the
test's own process (real MindSpore, real forks), for the mutation profile "hosts".
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import signal
import sys
import threading
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest

from msexp.execution.command import CommandFailed
from msexp.execution.host import running as trial_running
from msexp.execution.host import server
from msexp.execution.host import zygote as forking
from msexp.execution.host.link import RUN, socket_pair
from msexp.execution.local import WarmGraphs, train_request
from msexp.execution.protocol import (
    Checkpointing,
    Command,
    End,
    Epoch,
    Error,
    Result,
    Start,
    TrialRequest,
    decode,
    read_events,
)
from msexp.spec import trial_params
from msexp.training.records import Diverged, Stopped
from tests.conftest import ASSETS
from tests.fault.conftest import wait_for
from tests.test_host import gone

TIMEOUT_S = 600.0
# trials in host processes or forked children, seconds each: the slow tier (tests/README.md)
SLOW = pytest.mark.slow
BROKEN = str(ASSETS / "broken.py")  # an experiment that misbehaves as its `mode` says


def request(folder: Path, name: str, experiment: str = "mlp_digits", **params) -> TrialRequest:
    given = trial_params(experiment, {"epochs": 1, **params})
    made = TrialRequest(experiment, given, folder / name)
    made.events_path.parent.mkdir(parents=True, exist_ok=True)
    made.events_path.write_text("")
    made.log_path.write_text("")
    return made


def command(folder: Path, name: str, source: str) -> TrialRequest:
    path = folder / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    made = TrialRequest(name, {"seed": 0}, folder / name,
                        command=Command([sys.executable, str(path)], str(folder), ["score"]))
    made.events_path.parent.mkdir(parents=True, exist_ok=True)
    made.events_path.write_text("")
    return made


def events_of(made: TrialRequest, kind: type) -> list:
    return [e for e in read_events(made.events_path) if isinstance(e, kind)]


@pytest.fixture
def zygote():
    sweep, theirs = socket_pair()
    made = forking.Zygote(theirs.fileno())
    yield made
    made.close()
    sweep.close()
    theirs.close()


@contextlib.contextmanager
def real_output():
    """Print to file descriptors 1 and 2, as a host does (not to pytest's capture), and
    give them back after code that redirects them to a trial's log."""
    kept = os.dup(1), os.dup(2)
    streams = sys.stdout, sys.stderr
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = streams
        for fd, copy in zip((1, 2), kept):
            os.dup2(copy, fd)
            os.close(copy)


# -- Zygote: a forked child per trial ---------------------------------------------------
# Children forked here run no MindSpore graph: a child forked from a process that has
# run one (as this test process may have) hangs in MindSpore's runtime. The host never
# runs a graph itself, so its children are safe; the warm child that a host keeps for a
# trial of the same signature is test_host's.

def run_in(zygote: forking.Zygote, made: TrialRequest) -> None:
    """One trial in a child forked with this process's own stdout and stderr objects
    (pytest's, or a runner's that another thread may hold at the fork, would hang it)."""
    with real_output():
        zygote.run(made, made.to_json())


SAYS_ITS_PARENT = 'import os\nprint("score:", os.getppid())\n'  # the trial child's pid


def child_pid(made: TrialRequest) -> int:
    return int(events_of(made, Result)[0].metrics["score"])


def test_a_zygote_forks_a_child_per_trial_that_keeps_no_graphs(zygote, tmp_path):
    a, b = command(tmp_path, "a", SAYS_ITS_PARENT), command(tmp_path, "b", SAYS_ITS_PARENT)
    for made in (a, b):
        run_in(zygote, made)
        assert [type(e) for e in read_events(made.events_path)] == [Start, Result, End]
        assert not zygote.idle and zygote.running is None
    assert os.getpid() != child_pid(a) != child_pid(b)
    assert gone(child_pid(a)) and gone(child_pid(b)), "each child exited and was reaped"


def test_a_trial_that_exits_is_ended_by_the_zygote_with_its_exit_code(zygote, tmp_path):
    made = request(tmp_path, "exits", BROKEN, mode="exits")
    run_in(zygote, made)
    assert not zygote.idle
    errors = events_of(made, Error)
    assert [(e.kind, e.message) for e in errors] == [("exit", "trial process exited with code 3")]
    assert isinstance(read_events(made.events_path)[-1], End)


def test_a_trial_that_raises_ends_once_with_its_exception(zygote, tmp_path):
    made = request(tmp_path, "raises", BROKEN, mode="raises")
    run_in(zygote, made)
    assert [(e.kind, e.message) for e in events_of(made, Error)] == [
        ("exception", "RuntimeError: the experiment is broken on purpose")]
    assert len(events_of(made, End)) == 1 and not zygote.idle
    assert "the experiment is broken on purpose" in made.log_path.read_text()


WAITS_FOR_THE_STOP = """
import time
from msexp import hooks
hooks.report(1, eval_accuracy=0.5)
while not hooks.should_stop():
    time.sleep(0.02)
"""


@SLOW
def test_a_stop_reaches_the_trial_in_its_child(zygote, tmp_path):
    made = command(tmp_path, "stops", WAITS_FOR_THE_STOP)
    zygote.signal(signal.SIGUSR1)  # nothing runs: nothing happens
    running = threading.Thread(target=run_in, args=(zygote, made))
    running.start()
    wait_for("the first epoch", lambda: events_of(made, Epoch), deadline_s=TIMEOUT_S)
    zygote.signal(signal.SIGUSR1)
    running.join(TIMEOUT_S)
    assert [(e.kind, e.message) for e in events_of(made, Error)] == [
        ("stopped", "Stopped: stopped after epoch 1")]
    assert len(events_of(made, End)) == 1


class _Reusable:
    reusable = True


def test_a_child_that_says_idle_runs_the_next_trial_of_its_signature(zygote, tmp_path,
                                                                    monkeypatch):
    # Real fork, pipes, zygote and child loop; the trial itself only keeps graphs: a
    # child forked here must run no MindSpore graph (above; test_host trains warm).
    def keep_graphs(made, stop, warm) -> None:
        made.log_path.write_text(str(os.getpid()))
        warm.keep(made.graph_signature, _Reusable())

    monkeypatch.setattr(forking, "run_logged", keep_graphs)
    first, second = request(tmp_path, "a", lr=0.05), request(tmp_path, "b", lr=0.02)
    run_in(zygote, first)
    [child] = zygote.idle
    assert child.alive(), "idle and kept"
    run_in(zygote, second)
    assert zygote.idle == [child] and child.alive()
    assert first.log_path.read_text() == second.log_path.read_text() == str(child.pid)
    assert read_events(first.events_path) == [], "a warm child's trial is not ended here"
    other = request(tmp_path, "c", batch_size=32)  # another graph signature
    run_in(zygote, other)
    assert other.log_path.read_text() != str(child.pid) and not child.alive()
    [newer] = zygote.idle  # a sweep's zygote keeps one
    assert newer is not child


def test_a_child_gone_before_its_request_is_reported_by_its_wait_status(tmp_path,
                                                                      monkeypatch):
    monkeypatch.setattr(forking, "run_logged", lambda made, stop, warm: None)
    sweep, theirs = socket_pair()
    try:
        with real_output():
            child = forking._Child("sig", theirs.fileno())
        os.kill(child.pid, signal.SIGKILL)
        wait_for("the child's death", lambda: gone(child.pid), deadline_s=TIMEOUT_S)
        assert child.run(request(tmp_path, "a").to_json()) == signal.SIGKILL, \
            "a broken pipe: its wait status"
        assert child.status == signal.SIGKILL
    finally:
        sweep.close()
        theirs.close()


SLEEPS = """
import os, time
open("started", "w").close()
time.sleep(600)
"""


def test_a_killed_trial_child_is_reported_and_the_next_trial_gets_a_new_one(zygote, tmp_path):
    made = command(tmp_path, "sleeps", SLEEPS)
    running = threading.Thread(target=run_in, args=(zygote, made))
    running.start()
    wait_for("the command", (made.folder / "outputs" / "started").exists, deadline_s=TIMEOUT_S)
    child = zygote.running.pid
    zygote.signal(signal.SIGKILL)
    running.join(TIMEOUT_S)
    assert [(e.kind, e.message) for e in events_of(made, Error)] == [
        ("exit", "trial process was killed by SIGKILL")]
    assert not zygote.idle and zygote.running is None and gone(child)
    after = command(tmp_path, "after", SAYS_ITS_PARENT)
    run_in(zygote, after)
    assert child_pid(after) != child


# -- serve: the host's loop, on its end of the socket pair -----------------------------

def test_serve_runs_what_the_sweep_sends_until_it_finishes(tmp_path):
    sweep, theirs = socket_pair()

    def serve() -> None:
        with real_output():  # see run_in
            server.serve(theirs.detach())

    served = threading.Thread(target=serve)
    served.start()
    sweep.wait_ready(served.is_alive, TIMEOUT_S)
    first, second = command(tmp_path, "a", SAYS_ITS_PARENT), command(tmp_path, "b",
                                                                    SAYS_ITS_PARENT)
    for made in (first, second):
        sweep.send(RUN, made.to_json())
        wait_for("the trial's end", lambda m=made: events_of(m, End) or not served.is_alive(),
                 deadline_s=TIMEOUT_S)
        assert served.is_alive(), "serve ended before the sweep finished"
    assert os.getpid() != child_pid(first) != child_pid(second)
    sweep.finish()
    served.join(TIMEOUT_S)
    assert not served.is_alive()
    sweep.close()


# -- a trial child's loop and one trial's events and log, in this process ---------------

@SLOW
def test_a_trial_child_says_idle_after_each_trial_that_leaves_graphs(tmp_path):
    lines = io.StringIO(request(tmp_path, "a").to_json() + "\n" +
                        request(tmp_path, "b", lr=0.02).to_json() + "\n")
    replies = io.StringIO()
    with real_output():
        assert forking._child_main(lines, replies) == 0
    assert replies.getvalue() == "idle\nidle\n"
    assert events_of(request_path(tmp_path, "b"), Start)[0].warm


def request_path(folder: Path, name: str) -> TrialRequest:
    return TrialRequest("mlp_digits", {}, folder / name)


def test_a_trial_child_exits_after_a_trial_without_graphs(tmp_path):
    made = command(tmp_path, "c", 'print("score: 0.25")\n')
    replies = io.StringIO()
    then = request(tmp_path, "never")
    with real_output():
        assert forking._child_main(io.StringIO(made.to_json() + "\n" + then.to_json() + "\n"),
                                 replies) == 0
    assert replies.getvalue() == ""
    assert events_of(made, Result)[0].metrics == {"score": 0.25}
    assert read_events(then.events_path) == [], "the child exited before it"


def test_a_trial_child_exits_with_the_trials_exit_code(tmp_path):
    made = request(tmp_path, "exits", BROKEN, mode="exits")
    with real_output():
        assert forking._child_main(io.StringIO(made.to_json() + "\n"), io.StringIO()) == 3
    assert "mode exits" in made.log_path.read_text()


def test_a_trial_logged_in_this_process_ends_its_events(tmp_path):
    made = request(tmp_path, "raises", BROKEN, mode="raises")
    stop = trial_running.StopFlag()
    stop.set = True  # a stop meant for the trial before
    with real_output():
        trial_running.run_logged(made, stop, WarmGraphs())
    assert not stop.set
    kinds = [type(e).__name__ for e in read_events(made.events_path)]
    assert kinds == ["Error", "End"]
    log = made.log_path.read_text()
    assert "mode raises in pid" in log and "Traceback" in log


def test_failures_become_error_events_of_their_kind():
    assert trial_running.failure(CommandFailed("exited 3")) == Error("exit", "exited 3")
    assert trial_running.failure(Diverged("nan")) == Error("diverged", "Diverged: nan")
    assert trial_running.failure(Stopped("pruned")) == Error("stopped", "Stopped: pruned")
    assert trial_running.failure(KeyError("x")) == Error("exception", "KeyError: 'x'")


def test_a_stop_flag_is_set_by_sigusr1():
    flag = trial_running.StopFlag().listen()
    try:
        assert flag() is False
        os.kill(os.getpid(), signal.SIGUSR1)
        wait_for("the signal", flag)
        assert flag() is True
    finally:
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)


def test_trials_fork_on_cpu_unless_told_not_to(monkeypatch):
    assert server._preload() is True
    threads = ms.get_context("runtime_num_threads")
    monkeypatch.setenv("MSEXP_THREADS", str(threads + 1))
    try:
        assert server._preload() is True
        assert ms.get_context("runtime_num_threads") == threads + 1, "the host's share"
    finally:
        ms.set_context(runtime_num_threads=threads)
    monkeypatch.setenv("MSEXP_FORK", "0")
    assert server._preload() is False


def report_exit(made: TrialRequest, status: int) -> None:
    with made.events_path.open("a+", encoding="utf-8") as events:
        trial_running.report_exit(events, made, status)


def test_the_zygote_ends_a_trial_only_when_its_child_did_not(tmp_path):
    made = request(tmp_path, "a")
    report_exit(made, 9)  # killed by SIGKILL (a wait status)
    assert [type(e) for e in read_events(made.events_path)] == [Error, End]
    assert read_events(made.events_path)[0].message == "trial process was killed by SIGKILL"
    report_exit(made, 3 << 8)
    assert len(read_events(made.events_path)) == 2, "ended already: nothing added"
    other = request(tmp_path, "b")
    report_exit(other, 3 << 8)
    assert read_events(other.events_path)[0].message == "trial process exited with code 3"


def test_a_zygote_ends_its_attempt_in_its_own_events_file_not_a_later_attempts(zygote,
                                                                               tmp_path):
    """While its child runs, the trial's events file is made anew for another attempt (of
    a sweep that took the trial over): the child killed, the zygote's end goes to its own
    attempt's file, not into the new one."""
    made = command(tmp_path, "sleeps", SLEEPS)
    ours = made.events_path.open("r", encoding="utf-8")
    running = threading.Thread(target=run_in, args=(zygote, made))
    running.start()
    wait_for("the command", (made.folder / "outputs" / "started").exists, deadline_s=TIMEOUT_S)
    made.events_path.unlink()
    made.events_path.write_text("")  # the later attempt's, as its host makes it
    zygote.signal(signal.SIGKILL)
    running.join(TIMEOUT_S)
    assert made.events_path.read_text() == "", "nothing of this attempt in the later one's"
    ended = [decode(line) for line in ours.read().splitlines()]
    ours.close()
    assert [(e.kind, e.message) for e in ended if isinstance(e, Error)] == [
        ("exit", "trial process was killed by SIGKILL")]


def test_a_command_trial_returns_its_metrics(tmp_path):
    made = command(tmp_path, "c", 'print("score: 0.75")\n')
    emitted = []
    assert trial_running.run(made, emitted.append) == {"score": 0.75}
    assert emitted[-1] == Result({"score": 0.75}, None)


# -- local: training in this process, warm graphs and checkpoints ---------------------

def test_warm_graphs_are_taken_once_and_only_by_their_signature():
    class Graphs:
        reusable = True

    warm, graphs = WarmGraphs(), Graphs()
    warm.keep("sig", graphs)
    assert warm.held and warm.take("other") is None and not warm.held
    warm.keep("sig", graphs)
    assert warm.take("sig") is graphs and warm.take("sig") is None
    warm.keep(None, graphs)
    assert not warm.held, "a trial without a signature leaves nothing"
    Graphs.reusable = False
    warm.keep("sig", graphs)
    assert not warm.held
    Graphs.reusable = True
    warm.keep("sig", graphs)
    warm.drop()
    assert not warm.held and warm.signature is None


def train(made: TrialRequest, warm: WarmGraphs, stop=lambda: False) -> list:
    emitted: list = []
    train_request(made, emitted.append, stop, warm=warm)
    return emitted


@SLOW
def test_a_warm_trial_in_this_process_equals_it_cold(tmp_path):
    warm = WarmGraphs()
    train(request(tmp_path, "a", epochs=2), warm)
    assert warm.held
    warmed = train(request(tmp_path, "b", epochs=2, lr=0.02), warm)
    cold = train(request(tmp_path, "c", epochs=2, lr=0.02), WarmGraphs())
    assert warmed[0].warm and not cold[0].warm
    assert warmed[0].pid == os.getpid() and warmed[0].impl == {} and warmed[0].resumed_from == 0
    assert [e.metrics for e in warmed[1:-1]] == [e.metrics for e in cold[1:-1]]
    assert {k: warmed[-1].metrics[k] for k in ("eval_loss", "train_loss")} == \
           {k: cold[-1].metrics[k] for k in ("eval_loss", "train_loss")}


def test_a_trial_that_fails_while_training_leaves_no_graphs(tmp_path):
    warm = WarmGraphs()

    def broken_stop() -> bool:
        raise OSError("the disk is gone")

    with pytest.raises(OSError):
        train(request(tmp_path, "a"), warm, broken_stop)
    assert not warm.held
    with pytest.raises(Stopped):
        train(request(tmp_path, "b"), warm, lambda: True)
    assert warm.held, "a stopped trial's graphs stay reusable"


@SLOW
def test_a_trial_with_checkpoints_resumes_from_its_last_epoch(tmp_path):
    made = dataclasses.replace(request(tmp_path, "a", epochs=2), trial="study/0",
                               checkpoint=Checkpointing(every=1, keep="all"))
    first = train(made, WarmGraphs())
    assert first[0].resumed_from == 0 and first[-1].checkpoint.endswith("epoch-0002.ckpt")
    kept = sorted(p.name for p in made.checkpoint_dir.glob("*.ckpt"))
    assert kept == ["epoch-0001.ckpt", "epoch-0002.ckpt"], "keep: all, as the request says"
    log = tmp_path / "again.log"
    again: list = []
    logged_before_result: list[str] = []

    def emit(event) -> None:
        if isinstance(event, Result):  # the log file on disk, not the stream's buffer
            logged_before_result.append(log.read_text())
        again.append(event)

    with log.open("w") as out, contextlib.redirect_stdout(out):
        train_request(made, emit, lambda: False, warm=WarmGraphs())
    assert again[0].resumed_from == 2
    assert "msexp: resuming from epoch 2" in logged_before_result[0], "flushed at once"


def test_thor_resolves_its_implementation_for_the_device():
    from msexp.execution.local import _implementations

    assert _implementations({"optimizer": "adam"}) == {}
    assert _implementations({"optimizer": "thor", "thor_impl": "auto"}) == {"thor_impl": "msexp"}


# -- msrun: the trial process's watch over a data-parallel trial's cluster -------------

def test_the_ranks_log_next_to_the_trials_log():
    from msexp.execution.msrun import rank_log_dir

    assert rank_log_dir(Path("t/3/trial.log")) == Path("t/3/trial.ranks")


def test_each_rank_gets_its_share_of_the_threads(monkeypatch):
    from msexp.execution import msrun
    from msexp.paths import search_path

    monkeypatch.setenv("MSEXP_THREADS", "5")
    env = msrun._env(2)
    assert env["MSEXP_THREADS"] == env["OMP_NUM_THREADS"] == "2"
    assert env[msrun.LAUNCHER_ENV] == str(os.getpid()) and env["PATH"] == search_path()
    assert msrun._env(8)["MSEXP_THREADS"] == "1"
    monkeypatch.delenv("MSEXP_THREADS")
    assert msrun._env(1)["MSEXP_THREADS"] == str(os.cpu_count())


def test_thor_does_not_run_data_parallel(tmp_path):
    made = request(tmp_path, "t", optimizer="thor", devices=2)
    with pytest.raises(ValueError, match="optimizer thor does not run data parallel yet.*"
                                         "use devices 1, got 2"):
        trial_running.run(made, lambda event: None)  # devices 2: msrun's launch, which refuses


def cluster(tmp_path: Path, source: str, devices: int = 1):
    """A `_Cluster` watching a stand-in for msrun: a real process running `source`."""
    import subprocess

    from msexp.execution.msrun import _Cluster

    rank = tmp_path / "rank.py"
    rank.write_text("import os, sys, time\nend = time.monotonic() + 600\n"
                    "while not os.path.exists(sys.argv[1]) and time.monotonic() < end:\n"
                    "    time.sleep(0.05)\nsys.exit(1)\n")  # a rank that dies when told
    launcher = tmp_path / "msrun.py"
    launcher.write_text(source)
    proc = subprocess.Popen([sys.executable, str(launcher), str(rank)], cwd=tmp_path)
    return _Cluster(proc, tmp_path, devices, str(rank))


def test_a_cluster_whose_msrun_ends_well_or_whose_ranks_are_done_is_finished(tmp_path):
    done = cluster(tmp_path, "pass\n")
    done.wait(lambda: False)
    done.kill()
    marked = cluster(tmp_path, "import time\ntime.sleep(600)\n", devices=2)
    for rank in (0, 1):
        (tmp_path / f"rank-{rank}.json").write_text('{"done": true}')
    marked.wait(lambda: False)
    marked.kill()
    assert marked.proc.returncode is not None


def test_a_stopped_cluster_raises_stopped(tmp_path):
    running = cluster(tmp_path, "import time\ntime.sleep(600)\n", devices=3)
    with pytest.raises(Stopped, match="^stopped; killed the 3 ranks$"):
        running.wait(lambda: True)
    running.kill()


def test_a_failed_msrun_says_how_with_its_log(tmp_path):
    failed = cluster(tmp_path, "open('msrun.log', 'wb').write(b'one\\xff\\ntwo\\n')\nraise "
                               "SystemExit(3)\n")  # a byte that is not UTF-8: read anyway
    with pytest.raises(RuntimeError) as raised:
        failed.wait(lambda: False)
    failed.kill()
    assert str(raised.value) == \
        "msrun exited with code 3; last lines of msrun.log:\none\ufffd\ntwo"


TWO_RANKS_IN_TURN = """
import os, subprocess, sys, time
for rank in ("0", "1"):
    env = dict(os.environ, MS_ROLE="MS_WORKER", RANK_ID=rank)
    subprocess.Popen([sys.executable, sys.argv[1], "die"], env=env)
    while not os.path.exists("next"):
        time.sleep(0.05)
time.sleep(600)
"""


def test_ranks_started_later_are_found_too(tmp_path):
    ranks = cluster(tmp_path, TWO_RANKS_IN_TURN, devices=2)

    def found(rank: int) -> bool:
        ranks._discover()
        return rank in ranks.ranks

    try:
        wait_for("rank 0", lambda: found(0), deadline_s=TIMEOUT_S)
        (tmp_path / "next").touch()
        wait_for("rank 1, after rank 0 was seen", lambda: found(1), deadline_s=120)
    finally:
        (tmp_path / "die").touch()
        ranks.kill()


RANK_LAUNCHER = """
import os, subprocess, sys, time
env = dict(os.environ, MS_ROLE="MS_WORKER", RANK_ID="0")
subprocess.Popen([sys.executable, sys.argv[1], "die"], env=env).wait()
time.sleep(600)
"""


def rank_death(tmp_path: Path, launcher: str):
    """A cluster whose one rank dies once seen: the cluster, and the error its wait raised."""
    dying = cluster(tmp_path, launcher)

    def kill_the_rank_once_seen() -> None:
        wait_for("the rank", lambda: dying.ranks, deadline_s=TIMEOUT_S)
        (tmp_path / "die").touch()

    threading.Thread(target=kill_the_rank_once_seen, daemon=True).start()
    with pytest.raises(RuntimeError) as raised:
        dying.wait(lambda: False)
    dying.kill()
    return dying, raised.value


def test_a_rank_that_dies_fails_the_trial_with_its_log(tmp_path):
    (tmp_path / "worker_0.log").write_text("step 1\nTraceback: boom\n")
    dying, error = rank_death(tmp_path, RANK_LAUNCHER)
    (rank,) = dying.ranks.values()
    assert dying.dead == [0]
    assert str(error) == (f"rank 0 of 1 (pid {rank.pid}) died; last lines of "
                          "worker_0.log:\nstep 1\nTraceback: boom")
    assert gone(rank.pid) and gone(dying.proc.pid)


def test_an_exit_msrun_reports_names_the_rank_and_its_error(tmp_path):
    reports = "print('Worker process 4242 exit with exception. Error code: -9', " \
              "file=open('msrun.log', 'w'))\nimport time\ntime.sleep(600)\n"
    (tmp_path / "rank-0.json").write_text(
        '{"pid": 4242, "error": {"type": "OSError", "message": "disk full"}}')
    killed = cluster(tmp_path, reports)
    with pytest.raises(RuntimeError) as raised:
        killed.wait(lambda: False)
    killed.kill()
    assert str(raised.value).startswith(
        "rank 0 of 1 (pid 4242) was killed by SIGKILL after OSError: disk full; "
        "last lines of worker_0.log:\n")
    (tmp_path / "rank-0.json").write_text(
        '{"pid": 4242, "error": {"type": "Diverged", "message": "loss is nan"}}')
    diverged = cluster(tmp_path, reports)
    with pytest.raises(Diverged, match="^rank 0: loss is nan$"):
        diverged.wait(lambda: False)
    diverged.kill()


def test_the_weights_checksum_follows_the_weights():
    from mindspore import Tensor, nn

    from msexp.execution.msrun import weights_checksum

    network = nn.Dense(3, 2)
    network.weight.set_data(Tensor(np.zeros((2, 3), np.float32)))
    network.bias.set_data(Tensor(np.zeros(2, np.float32)))
    zeros = weights_checksum(network)
    assert zeros == hashlib.sha256(bytes(4 * 8)).hexdigest()
    network.bias.set_data(Tensor(np.ones(2, np.float32)))
    assert weights_checksum(network) != zeros


def test_a_rank_records_its_state_whole(tmp_path):
    from msexp.execution.msrun import _write_marker

    _write_marker(tmp_path / "rank-0.json", {"rank": 0, "done": True})
    assert json.loads((tmp_path / "rank-0.json").read_text()) == {"rank": 0, "done": True}


def test_a_rank_whose_msrun_is_gone_exits_at_once(monkeypatch):
    """msrun's rank (this process) checks that its grandparent is the trial process."""
    import psutil

    from msexp.execution import msrun

    monkeypatch.setenv(msrun.LAUNCHER_ENV, str(psutil.Process(os.getppid()).ppid()))
    msrun._die_with_msrun()  # the launcher is there: nothing happens
    monkeypatch.setenv(msrun.LAUNCHER_ENV, str(os.getpid()))  # not this one's grandparent
    child = os.fork()
    if child == 0:
        msrun._die_with_msrun()
        os._exit(7)
    assert os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 1


def assert_request_kept_private(folder) -> None:
    """The ranks read the request (its params in clear) from a private file of this
    process's (`msexp.secrets.files`), removed once msrun is done, never from the rank logs."""
    from msexp.secrets import files as private

    assert not (folder / "request.json").exists()
    assert not [p for p in private.folder().iterdir() if p.name.startswith(f"{os.getpid()}-")]


@SLOW
def test_a_data_parallel_trial_runs_as_msrun_ranks_from_this_process(tmp_path):
    from msexp.execution.msrun import launch, rank_log_dir
    from msexp.execution.protocol import EventWriter, Launch

    made = request(tmp_path, "dp", devices=2, hidden=16)
    folder = rank_log_dir(made.log_path)
    folder.mkdir(parents=True)
    (folder / "stale.txt").write_text("from an earlier attempt")
    emitted: list = []
    with EventWriter.open(made.events_path) as emit:
        def both(event) -> None:
            emitted.append(event)
            emit(event)

        metrics = launch(made, both, lambda: False)
    assert emitted == [Launch(2, str(folder), os.getpid())]
    (result,) = events_of(made, Result)
    assert metrics == result.metrics and "eval_loss" in metrics
    assert not (folder / "stale.txt").exists(), "each attempt's rank logs afresh"
    assert_request_kept_private(folder)
    markers = [json.loads((folder / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [(m["rank"], m["done"], m["size"]) for m in markers] == [(0, True, 2), (1, True, 2)]
    assert markers[0]["checksum"] == markers[1]["checksum"], "the ranks' weights agree"
    assert (folder / "msrun.log").exists() and (folder / "worker_1.log").exists()


def test_a_data_parallel_trial_stopped_at_once_starts_its_rank_logs_afresh(tmp_path):
    from msexp.execution.msrun import launch, rank_log_dir
    from msexp.execution.protocol import Launch

    made = request(tmp_path, "dp", devices=2)
    folder = rank_log_dir(made.log_path)
    emitted: list = []
    with pytest.raises(Stopped, match="^stopped; killed the 2 ranks$"):
        launch(made, emitted.append, lambda: True)  # no rank log folder yet
    assert emitted == [Launch(2, str(folder), os.getpid())]
    assert_request_kept_private(folder)
    assert (folder / "rank.py").read_text().endswith("main(Path(sys.argv[1]))\n")
    with pytest.raises(Stopped):
        launch(made, emitted.append, lambda: True)  # the folder of the last attempt


def test_a_cluster_that_fails_before_its_ranks_are_known_says_msrun_runs(tmp_path):
    reports = "print('Worker process 4242 exit with exception. Error code: 1', " \
              "file=open('msrun.log', 'w'))\nimport time\ntime.sleep(600)\n"
    unknown = cluster(tmp_path, reports, devices=2)
    with pytest.raises(RuntimeError) as raised:
        unknown.wait(lambda: False)
    unknown.kill()
    assert str(raised.value) == ("msrun is still running; last lines of msrun.log:\n"
                                 "Worker process 4242 exit with exception. Error code: 1")


def test_a_trial_without_devices_runs_in_this_process(tmp_path):
    made = request(tmp_path, "raises", BROKEN, mode="raises")
    alone = dataclasses.replace(made, params={k: v for k, v in made.params.items()
                                              if k != "devices"})
    with pytest.raises(RuntimeError, match="the experiment is broken on purpose"):
        trial_running.run(alone, lambda event: None)


def test_a_trials_log_is_created_readable_by_all(tmp_path):
    made = request(tmp_path, "raises", BROKEN, mode="raises")
    made.log_path.unlink()
    umask = os.umask(0)
    os.umask(umask)
    with real_output():
        trial_running.run_logged(made, trial_running.StopFlag(), WarmGraphs())
    assert made.log_path.stat().st_mode & 0o777 == 0o644 & ~umask


@SLOW
def test_without_fork_serve_runs_trials_itself_and_keeps_their_graphs(tmp_path, monkeypatch):
    monkeypatch.setenv("MSEXP_FORK", "0")  # the GPU and Ascend path: no trial child
    sweep, theirs = socket_pair()

    def serve() -> None:
        with real_output():  # the trials redirect this process's output to their logs
            server.serve(theirs.detach())

    served = threading.Thread(target=serve)
    served.start()
    sweep.wait_ready(served.is_alive, TIMEOUT_S)
    first, second = request(tmp_path, "a"), request(tmp_path, "b", lr=0.02)
    for made in (first, second):
        sweep.send(RUN, made.to_json())
        wait_for("the trial's end", lambda m=made: events_of(m, End) or not served.is_alive(),
                 deadline_s=TIMEOUT_S)
        assert served.is_alive(), "serve ended before the sweep finished"
    sweep.finish()
    served.join(TIMEOUT_S)
    sweep.close()
    (start_a,), (start_b,) = events_of(first, Start), events_of(second, Start)
    assert start_a.pid == start_b.pid == os.getpid()
    assert not start_a.warm and start_b.warm


# mutations: the plan without the request's fence, or its owner without the trial
def test_a_requests_attempt_and_trial_reach_its_checkpoint_plan(tmp_path):
    from msexp.execution.local import _plan
    from msexp.training.checkpoint import owner
    from msexp.trial_folder import Fence

    made = dataclasses.replace(request(tmp_path, "a"), trial="s/3", attempt="tok",
                               checkpoint=Checkpointing(2, "best", "eval_loss", False))
    plan = _plan(made)
    assert (plan.folder, plan.every, plan.keep, plan.metric, plan.maximize) == \
        (made.checkpoint_dir, 2, "best", "eval_loss", False)
    assert plan.fence == Fence(made.folder, "tok") and plan.params == made.params
    assert plan.owner == owner("s/3", made.params)
    assert _plan(dataclasses.replace(made, attempt=None)).fence is None
    assert _plan(dataclasses.replace(made, checkpoint=None)) is None


# mutation: SystemExit let through (a module that parses its argv at import ends the host)
def test_an_experiment_that_exits_at_import_does_not_end_the_host(tmp_path):
    module = tmp_path / "exits.py"
    module.write_text("import argparse\nargparse.ArgumentParser().parse_args(['--bad'])\n")
    with contextlib.redirect_stderr(io.StringIO()):
        trial_running.import_once(f"{module}:build")  # argparse's sys.exit(2), kept in the zygote


# mutations: the device index by the wrong rule; a host without a slot given a device
@pytest.mark.parametrize(("slot", "count", "device"),
                         [("5", 4, 1), ("2", 4, 2), ("3", 1, 0), (None, 4, None)])
def test_a_gpu_host_takes_its_slots_device_round_robin(monkeypatch, slot, count, device):
    """No GPU here: MindSpore's device calls are stood in for, to check the rule alone."""
    import mindspore as ms

    chosen: list = []
    monkeypatch.setattr(ms, "get_context", lambda key: "GPU")
    monkeypatch.setattr(ms, "set_device", lambda *args: chosen.append(args))
    monkeypatch.setattr(ms.device_context, "gpu",
                        type("Gpu", (), {"device_count": staticmethod(lambda: count)}),
                        raising=False)
    monkeypatch.delenv("MSEXP_THREADS", raising=False)
    if slot is None:
        monkeypatch.delenv("MSEXP_SLOT", raising=False)
    else:
        monkeypatch.setenv("MSEXP_SLOT", slot)
    assert server._preload() is False, "device runtimes do not survive a fork"
    assert chosen == ([] if device is None else [("GPU", device)])


REPORTING_LAUNCHER = """
import os, subprocess, sys, time
env = dict(os.environ, MS_ROLE="MS_WORKER", RANK_ID="0")
rank = subprocess.Popen([sys.executable, sys.argv[1], "die"], env=env)
rank.wait()
time.sleep(1)  # msrun logs a worker's exit a while after it
print(f"Worker process {rank.pid} exit with exception. Error code: -9", file=open("msrun.log", "w"))
time.sleep(600)
"""


# mutation: a dead rank fails the trial at once, before msrun logs why it died
def test_a_dead_rank_waits_for_msruns_reason(tmp_path, monkeypatch):
    from msexp.execution import msrun

    monkeypatch.setattr(msrun, "EXIT_GRACE_S", 60.0)  # the report comes 1 s after
    dying, error = rank_death(tmp_path, REPORTING_LAUNCHER)
    (rank,) = dying.ranks.values()
    assert str(error).startswith(f"rank 0 of 1 (pid {rank.pid}) was killed by SIGKILL")


# mutation: a rank msrun names but the sweep never saw taken for a known one (a KeyError)
def test_an_exit_of_a_rank_never_seen_names_it_without_its_pid(tmp_path):
    reports = "print('Worker process 4242 exit with exception. Error code: 1', " \
              "file=open('msrun.log', 'w'))\nimport time\ntime.sleep(600)\n"
    unseen = cluster(tmp_path, reports)
    with pytest.raises(RuntimeError) as raised:
        unseen.wait(lambda: False)
    unseen.kill()
    assert str(raised.value).startswith("rank 0 of 1 (pid ?) died; last lines of worker_0.log")


# mutations of msrun.main, which runs in msrun's rank processes (no test reaches it
# in-process): the rank's marker, done or failed with its error redacted, and its exit code
def test_a_rank_marks_itself_done_or_failed_with_its_error_redacted(tmp_path, monkeypatch):
    from msexp.execution import msrun

    made = request(tmp_path, "dp", devices=2)
    made = dataclasses.replace(made, params={**made.params,
                                             "data_url": "postgresql://u:S3CRET@h/db"})
    path = tmp_path / "request.json"
    path.write_text(made.to_json())
    folder = msrun.rank_log_dir(made.log_path)
    folder.mkdir(parents=True)
    monkeypatch.setenv("RANK_ID", "0")
    for name in ("MS_ROLE", msrun.LAUNCHER_ENV):
        monkeypatch.delenv(name, raising=False)
    # The rank's training (a MindSpore cluster) is test_distributed's: here, its outcome.
    monkeypatch.setattr(msrun, "_train", lambda request, secrets: {"size": 2, "checksum": "c"})
    with real_output():
        msrun.main(path)
    marker = json.loads((folder / "rank-0.json").read_text())
    assert marker == {"rank": 0, "pid": os.getpid(), "size": 2, "checksum": "c", "done": True}

    def fails(request, secrets):
        raise ValueError(f"cannot read {request.params['data_url']}")

    def exits(code):
        raise SystemExit(code)

    monkeypatch.setattr(msrun, "_train", fails)
    monkeypatch.setattr(os, "_exit", exits)
    with real_output(), pytest.raises(SystemExit) as ended:
        msrun.main(path)
    assert ended.value.code == 1
    marker = json.loads((folder / "rank-0.json").read_text())
    assert set(marker) == {"rank", "pid", "error"} and marker["rank"] == 0
    assert marker["error"]["type"] == "ValueError" and "S3CRET" not in json.dumps(marker)
    assert marker["error"]["message"].startswith("cannot read postgresql://u:")


def test_a_trials_log_hides_the_passwords_in_its_params(tmp_path):
    made = request(tmp_path, "secret", BROKEN, mode="postgresql://u:S3CRET@h/db",
                   hidden=-1)  # printed, then the network cannot be built: a quick failure
    with real_output():
        trial_running.run_logged(made, trial_running.StopFlag(), WarmGraphs())
    log = made.log_path.read_text()
    assert "mode postgresql://u:" in log and "S3CRET" not in log


# mutation: process_tree.kill_descendants scans every process even where this one adopts its
# orphans (a look at the machine's whole process table after every trial)
def test_a_subreapers_leftovers_are_found_in_its_tree_without_a_scan(monkeypatch):
    import subprocess

    import psutil

    from msexp.execution import process_tree
    from msexp.keys import TrialEnv

    def scan(*args, **kwargs):
        raise AssertionError("looked at every process")

    kept = process_tree.descendants(os.getpid())  # what this test process ran before
    left = subprocess.Popen(["sleep", "600"])
    monkeypatch.setenv(TrialEnv.MARKER, f"test/{os.getpid()}")
    monkeypatch.setattr(psutil, "process_iter", scan)
    with pytest.raises(AssertionError, match="every process"):  # the fallback scans
        process_tree.kill_descendants(kept, adopts=False)
    try:
        process_tree.kill_descendants(kept, adopts=True)  # kills it and reaps it (its pid's exit
        wait_for("the leftover to be killed", lambda: gone(left.pid))  # status is not ours)
    finally:
        left.kill()
        left.wait()
