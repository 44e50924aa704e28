"""The host, its channel and its slots, driven in this process: the sweep's side of a
real host process (`Host`), the socket pair (`link`) and the pool of hosts (`HostPool`).

These are what a trial's results pass through; the mutation profile "hosts"
(tests/README.md) judges them with this file, so each test is quick and asserts what a
sweep would see.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

from msexp.execution.host import Host, HostPool, client
from msexp.execution.host.link import KILL, RUN, STOP, HostEnd, socket_pair
from msexp.execution.protocol import (
    Checkpointing,
    Command,
    End,
    Error,
    EventWriter,
    Start,
    TrialRequest,
    read_events,
)
from msexp.execution.result import Status
from msexp.keys import TrialEnv
from msexp.spec import trial_params
from msexp.trial_folder import TOKEN_FILE, Fence
from tests.conftest import ROOT
from tests.fault.conftest import wait_for

TIMEOUT_S = 600.0  # a deadline for a hang, on a loaded 2-core machine
# trials in host processes or forked children, seconds each: the slow tier (tests/README.md)
SLOW = pytest.mark.slow


def mlp(folder: Path, name: str, **params) -> TrialRequest:
    return TrialRequest("mlp_digits", trial_params("mlp_digits", {"epochs": 1, **params}),
                        folder / name)


def script(folder: Path, name: str, source: str, metrics=()) -> TrialRequest:
    path = folder / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    command = Command([sys.executable, str(path)], str(folder), metrics=list(metrics))
    return TrialRequest(name, {"seed": 0}, folder / name, command=command)


def gone(pid: int | None) -> bool:
    """The process is gone, or a zombie waiting for its reaper."""
    try:
        return pid is None or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def host():
    started = Host(cwd=ROOT)
    yield started
    started.kill()


# -- link: the socket pair between a sweep and its host --------------------------------

def test_the_host_end_queues_runs_in_order_and_acts_on_stops_and_kills_at_once():
    sweep, theirs = socket_pair()
    told: queue.Queue[str] = queue.Queue()
    host = HostEnd(theirs.detach(), lambda: told.put(STOP), lambda: told.put(KILL))
    sweep.send(RUN, '{"a": 1}')
    sweep.send(STOP)
    sweep.send(KILL)
    sweep.send(RUN, "second line")
    assert told.get(timeout=TIMEOUT_S) == STOP
    assert told.get(timeout=TIMEOUT_S) == KILL
    sweep.finish()  # no more requests: the host's loop ends
    assert list(host) == ['{"a": 1}', "second line"]
    host.say_ready()
    assert sweep.sock.recv(64) == b"ready\n"
    sweep.close()
    sweep.send(RUN, "after close")  # a host that is gone is found by its exit, not here
    host.say_ready()  # nor a sweep that is gone


def test_wait_ready_returns_on_ready_or_when_the_host_dies():
    sweep, theirs = socket_pair()
    host = HostEnd(theirs.detach(), lambda: None, lambda: None)
    waited = threading.Thread(target=sweep.wait_ready, args=(lambda: True, TIMEOUT_S))
    waited.start()
    waited.join(0.2)
    assert waited.is_alive(), "it waits for the host's ready"
    host.say_ready()
    waited.join(TIMEOUT_S)
    assert not waited.is_alive()
    silent, _kept = socket_pair()  # never says ready, and is dead
    silent.wait_ready(lambda: False, TIMEOUT_S)  # returns at once, not after TIMEOUT_S


# mutation: link.SweepEnd.wait_ready polls without a timeout
def test_wait_ready_gives_up_on_a_host_that_never_says_ready():
    hung, _kept = socket_pair()  # alive, silent: a host stuck in its import
    waited = threading.Thread(target=hung.wait_ready, args=(lambda: True, 0.3), daemon=True)
    waited.start()
    waited.join(TIMEOUT_S)
    assert not waited.is_alive(), "waited past its timeout"


# mutations: the reader lets the socket's error escape (its queue never ends); the reader
# thread is not a daemon (a host whose loop raised would wait on it for ever)
def test_a_host_end_whose_sweep_went_away_mid_line_ends_its_requests():

    sweep, theirs = socket_pair()
    before = set(threading.enumerate())
    host = HostEnd(theirs.detach(), lambda: None, lambda: None)
    readers = set(threading.enumerate()) - before
    host.say_ready()  # unread by the sweep: its close resets the host's socket
    failures: list = []
    hook, threading.excepthook = threading.excepthook, failures.append
    try:
        sweep.sock.sendall(b"run half a li")
        sweep.sock.close()
        assert host.requests.get(timeout=60) is None, "the requests end at once"
    finally:
        threading.excepthook = hook
    assert failures == []
    assert readers and all(thread.daemon for thread in readers)


def test_a_socket_pair_gives_the_host_an_inheritable_socket():
    sweep, theirs = socket_pair()
    assert theirs.get_inheritable() and not sweep.sock.get_inheritable()
    sweep.send(RUN, "x ")
    assert theirs.recv(64) == b"run x\n", "one line, trailing space dropped"


# -- Host: a real host process, driven from here ---------------------------------------

# mutations: host.Host._spawn leaves the host's stdout on the sweep's terminal, or the host
# in the sweep's session (a Ctrl-C at the terminal would reach it); a host keeps two warm
# children by default
def test_a_host_writes_nothing_to_the_sweeps_terminal(host):
    host.prewarm()  # its trials' output goes to their logs; its own, nowhere
    assert [os.readlink(f"/proc/{host.pid}/fd/{fd}") for fd in (0, 1, 2)] == ["/dev/null"] * 3
    assert os.getsid(host.pid) == host.pid != os.getsid(0), "a session of its own"
    assert psutil.Process(host.pid).environ()["MSEXP_WARM"] == "1"


# mutations: link.SweepEnd.wait ignores what the host says (waits its timeout); a closed
# end makes it raise or return at once (a follow loop that spins)
def test_wait_wakes_on_the_hosts_word_and_waits_its_timeout_on_a_closed_end():
    sweep, theirs = socket_pair()
    host = HostEnd(theirs.detach(), lambda: None, lambda: None)
    host.say_ended()
    waited = threading.Thread(target=sweep.wait, args=(TIMEOUT_S,), daemon=True)
    waited.start()
    waited.join(60)
    assert not waited.is_alive(), "woken by `ended`, not by its timeout"
    host.sock.close()  # the host's end goes: always readable from now on
    for _ in range(2):
        began = time.monotonic()
        sweep.wait(0.3)
        assert time.monotonic() - began >= 0.25, "no spin on a closed end"
    sweep.close()  # ours closed (a kill while a trial is followed): no error either
    began = time.monotonic()
    sweep.wait(0.3)
    assert time.monotonic() - began >= 0.25


# mutation: the ready line garbles "adopts"
def test_wait_ready_says_whether_the_host_adopts_its_trials_orphans():
    for adopts in (True, False):
        sweep, theirs = socket_pair()
        HostEnd(theirs.detach(), lambda: None, lambda: None).say_ready(adopts)
        assert sweep.wait_ready(lambda: True, TIMEOUT_S) is adopts
        sweep.close()


@SLOW
def test_a_host_told_to_keep_two_warm_children_keeps_the_last_two_signatures(tmp_path):
    host = Host(cwd=ROOT, warm=2)  # as msexp tune's hosts (one per candidate, up to 32)
    try:
        a = host.run(mlp(tmp_path, "a"), TIMEOUT_S)
        b = host.run(mlp(tmp_path, "b", batch_size=32), TIMEOUT_S)
        assert not gone(a.pid) and not gone(b.pid), "both stay idle, neither a leftover"
        a2 = host.run(mlp(tmp_path, "a2", lr=0.02), TIMEOUT_S)
        c = host.run(mlp(tmp_path, "c", batch_size=16), TIMEOUT_S)  # b is the oldest now
        b2 = host.run(mlp(tmp_path, "b2", batch_size=32), TIMEOUT_S)
        for result in (a, b, a2, c, b2):
            assert result.status is Status.COMPLETE, result.error
        assert (a.warm, b.warm, a2.warm, c.warm, b2.warm) == (False, False, True, False, False)
        assert a2.pid == a.pid and gone(b.pid) and b2.pid not in (a.pid, b.pid, c.pid)
        host_pid = host.pid
        host.close()
        assert gone(host_pid) and all(gone(r.pid) for r in (a, c, b2))
    finally:
        host.kill()


@SLOW
def test_a_host_keeps_a_warm_child_for_the_same_signature_only(host, tmp_path):
    first = host.run(mlp(tmp_path, "a", lr=0.05), TIMEOUT_S)
    warm = host.run(mlp(tmp_path, "b", lr=0.02), TIMEOUT_S)
    other = host.run(mlp(tmp_path, "c", batch_size=32), TIMEOUT_S)
    for result in (first, warm, other):
        assert result.status is Status.COMPLETE, result.error
        assert set(result.metrics) >= {"eval_loss", "train_loss"}
        assert [e.epoch for e in result.epochs] == [1]
        assert result.wall_s > 0 and result.stop_s is None and result.error == ""
        assert isinstance(read_events(result.events_path)[-1], End)
        assert result.log_path == result.events_path.with_name("trial.log")
        assert result.log_path.is_file()
    assert not first.warm and warm.warm and not other.warm
    assert warm.pid == first.pid != other.pid
    again = host.run(mlp(tmp_path, "a", lr=0.05), TIMEOUT_S)  # a retry, in the same folder
    assert [e.epoch for e in again.epochs] == [1], "the last attempt's events are gone"
    assert again.metrics["eval_loss"] == first.metrics["eval_loss"]
    assert first.metrics != warm.metrics, "the warm trial ran its own lr"
    host_pid = host.pid
    assert psutil.Process(host_pid).environ()[TrialEnv.MARKER] == host.marker
    host.close()
    assert host.pid is None and gone(host_pid) and gone(other.pid)


@SLOW
def test_what_an_earlier_attempt_still_writes_is_not_the_new_attempts(host, tmp_path):
    """A process of an earlier attempt of the trial (of a sweep frozen past its claim)
    holds the folder's events file and log open, and writes an end there once the new
    attempt has started: the new attempt's files are new, so it ends on its own events.
    And the new attempt takes the folder from the old one, so its checkpoints, not the old
    attempt's, are published there."""
    request = dataclasses.replace(mlp(tmp_path, "again", epochs=3), attempt="new",
                                  checkpoint=Checkpointing())
    Fence(request.folder, "old").take()
    old_events, old_log = request.events_path.open("a"), request.log_path.open("a")

    def write_as_the_earlier_attempt() -> None:
        wait_for("the new attempt starts", lambda: any(
            isinstance(e, Start) for e in read_events(request.events_path)))
        earlier = EventWriter(old_events)
        earlier(Error("exit", "trial process was killed by SIGKILL"))
        earlier(End())
        old_log.write("the earlier attempt's line\n")
        old_log.flush()

    writer = threading.Thread(target=write_as_the_earlier_attempt)
    writer.start()
    result = host.run(request, TIMEOUT_S)
    writer.join()
    old_events.close()
    old_log.close()
    assert result.status is Status.COMPLETE, result.error
    assert [e.epoch for e in result.epochs] == [1, 2, 3]
    assert "the earlier attempt's line" not in request.log_path.read_text()
    assert (request.folder / TOKEN_FILE).read_text() == "new"
    assert json.loads((request.checkpoint_dir / "state.json").read_text())["epoch"] == 3


@SLOW
def test_a_pruned_trial_stops_and_its_host_runs_the_next(host, tmp_path):
    seen = []

    def prune(epoch) -> bool:
        seen.append(epoch.epoch)
        return True

    pruned = host.run(mlp(tmp_path, "a", epochs=20), TIMEOUT_S, prune)
    assert pruned.status is Status.PRUNED, pruned.error
    assert seen == [1], "asked once, at the first epoch"
    assert 1 <= len(pruned.epochs) < 20
    assert pruned.stop_s is not None and 0 <= pruned.stop_s <= pruned.wall_s
    host_pid = host.pid
    after = host.run(mlp(tmp_path, "b"), TIMEOUT_S, lambda epoch: False)
    assert after.status is Status.COMPLETE and after.stop_s is None
    assert host.pid == host_pid


IGNORES_STOP = """
import time
from msexp.hooks import channel
channel.report(1, eval_accuracy=0.5)
time.sleep(600)  # never looks at should_stop()
"""


@SLOW
def test_a_trial_that_ignores_its_stop_loses_its_child_and_the_host_stays(host, tmp_path):
    pruned = host.run(script(tmp_path, "ignores", IGNORES_STOP), TIMEOUT_S, lambda e: True)
    assert pruned.status is Status.PRUNED
    assert [e.epoch for e in pruned.epochs] == [1]
    assert 1.5 <= pruned.stop_s <= pruned.wall_s, "killed after the stop's grace"
    host_pid = host.pid
    wait_for("the trial child to be killed", lambda: gone(pruned.pid))
    after = host.run(mlp(tmp_path, "b"), TIMEOUT_S)
    assert after.status is Status.COMPLETE and host.pid == host_pid is not None


SLEEPS = "import time\ntime.sleep(600)\n"


@SLOW
def test_a_trial_past_its_timeout_is_killed_with_its_host(host, tmp_path):
    result = host.run(script(tmp_path, "sleeps", SLEEPS), 2.0)
    assert result.status is Status.TIMEOUT
    assert result.error == "exceeded trial_timeout of 2 s"
    assert result.wall_s >= 2.0 and host.pid is None
    assert gone(result.pid), "the command went with its host"
    again = host.run(mlp(tmp_path, "b"), TIMEOUT_S)
    assert again.status is Status.COMPLETE and host.pid is not None, "a new host"


KILLS_HOST = """
import os, psutil, time
os.kill(psutil.Process(os.getppid()).ppid(), 9)  # the host, above the trial child
time.sleep(600)  # a trial that goes on: an end of its own would race the host's death
"""


@SLOW
def test_a_host_that_dies_fails_its_trial_with_the_reason(host, tmp_path):
    result = host.run(script(tmp_path, "kills", KILLS_HOST), TIMEOUT_S)
    assert result.status is Status.FAILED
    assert result.error == "trial process was killed by SIGKILL"
    assert host.pid is None


KILLS_CHILD = """
import os
os.kill(os.getppid(), 9)  # the trial child that runs this command
"""


@SLOW
def test_a_trial_child_that_dies_ends_its_trial_and_the_host_stays(host, tmp_path):
    result = host.run(script(tmp_path, "dies", KILLS_CHILD), TIMEOUT_S)
    assert result.status is Status.FAILED
    assert result.error == "trial process was killed by SIGKILL"
    assert host.pid is not None and gone(result.pid)


SLEEPS = """
import time
open("started", "w").close()
time.sleep(600)
"""

A_SWEEP = """
import sys
from msexp.execution.host import Host
from msexp.execution.protocol import TrialRequest
host = Host(cwd=sys.argv[1])
host.prewarm()
print(host.pid, flush=True)
host.run(TrialRequest.from_json(sys.argv[2]), 600)
"""


@SLOW
def test_a_host_busy_with_a_trial_dies_with_its_sweep_killed_by_sigkill(tmp_path):
    # busy, the host reads no channel: only the kernel's parent-death signal ends it
    made = script(tmp_path, "sleeps", SLEEPS)
    sweep = subprocess.Popen([sys.executable, "-c", A_SWEEP, str(ROOT), made.to_json()],
                             cwd=ROOT, stdout=subprocess.PIPE, text=True)
    host_pid = None
    try:
        host_pid = int(sweep.stdout.readline())
        assert wait_for("the trial", (made.folder / "outputs" / "started").exists, sweep,
                        TIMEOUT_S), "the sweep ended before its trial started"
        sweep.kill()
        sweep.wait()
        wait_for("the host to die with its sweep", lambda: gone(host_pid), deadline_s=60)
    finally:
        sweep.kill()
        sweep.wait()
        sweep.stdout.close()
        if host_pid is not None:  # Process(None) is this process
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(host_pid).kill()


@SLOW
def test_a_host_that_does_not_end_when_closed_is_killed_after_its_grace(host, tmp_path):
    # busy with a trial, the host does not end with its channel: close waits CLOSE_S
    made = script(tmp_path, "sleeps", SLEEPS)
    results: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: results.put(host.run(made, TIMEOUT_S)), daemon=True).start()
    wait_for("the trial", (made.folder / "outputs" / "started").exists, deadline_s=TIMEOUT_S)
    host_pid = host.pid
    closing = threading.Thread(target=host.close, daemon=True)
    closing.start()
    closing.join(120)  # CLOSE_S (10 s) on a loaded machine
    assert not closing.is_alive(), "close waits CLOSE_S, not for ever"
    assert gone(host_pid) and results.get(timeout=TIMEOUT_S).status is Status.FAILED


LEAVES_A_DAEMON = """
import subprocess, sys
daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                          start_new_session=True)
print(daemon.pid, file=open("daemon.pid", "w"))
print("score: 0.5")
"""


@SLOW
def test_what_a_finished_trial_leaves_running_is_killed(host, tmp_path):
    result = host.run(script(tmp_path, "leaves", LEAVES_A_DAEMON), TIMEOUT_S)
    assert result.status is Status.COMPLETE, result.error
    assert result.metrics == {"score": 0.5}
    daemon = int((tmp_path / "leaves" / "outputs" / "daemon.pid").read_text())
    wait_for("the daemon to be killed", lambda: gone(daemon))
    assert host.pid is not None, "the host stays"


# mutation: the host does not say `ended` after a trial (server.serve): the sweep sees the
# end only at its next read of the events
@SLOW
def test_a_trials_end_wakes_the_sweep_at_once(host, tmp_path, monkeypatch):
    monkeypatch.setattr(client, "EPOCHS_S", 120.0)  # the events are read only when woken
    host.prewarm()
    result = host.run(script(tmp_path, "quick", 'print("score: 1")'), TIMEOUT_S)
    assert result.status is Status.COMPLETE, result.error
    assert result.wall_s < 60, "woken by the host, not by the read interval"


def sleeping(seconds: str) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", seconds]]


@SLOW
def test_what_a_workload_trial_orphans_without_its_marker_is_killed_at_its_end(host, tmp_path):
    """The helper leaves the trial's tree at once (a double fork) and clears its environment:
    neither a note of the tree while the trial runs nor the marker finds it; the host adopts
    it (a subreaper), so the trial's end finds it in the host's tree."""
    seconds = f"{1_000_000 + uuid.uuid4().int % 10**6}.5"  # a command line no one else has
    experiment = "tests.fault.orphaning:build"
    request = TrialRequest(experiment, trial_params(experiment, {"sleep_s": float(seconds)}),
                           tmp_path / "orphaning")
    try:
        result = host.run(request, TIMEOUT_S)
        assert result.status is Status.COMPLETE, result.error
        wait_for("the orphan to be killed", lambda: not [p for p in sleeping(seconds)
                                                         if not gone(p.pid)])
        assert host.pid is not None, "the host stays"
    finally:
        for proc in sleeping(seconds):
            proc.kill()


# mutations: the hosts keep two warm children by default; a host reads the sweep's stdin
def test_a_pools_hosts_share_the_cores_and_number_the_slots(tmp_path):
    kept, (terminal, _writer) = os.dup(0), os.pipe()  # a stdin that is not /dev/null
    os.dup2(terminal, 0)
    try:
        hosts = HostPool(2, tmp_path).hosts
    finally:
        os.dup2(kept, 0)
        for fd in (kept, terminal, _writer):
            os.close(fd)
    try:
        assert os.readlink(f"/proc/{hosts[0].pid}/fd/0") == "/dev/null"
        assert [h.slot for h in hosts] == [0, 1]
        assert all(h.cwd == tmp_path and h.pid is not None for h in hosts)
        threads = max(1, (psutil.cpu_count() or 1) // 2)
        env = psutil.Process(hosts[1].pid).environ()
        assert env["MSEXP_THREADS"] == env["OMP_NUM_THREADS"] == str(threads)
        assert env["MSEXP_SLOT"] == "1" and env[TrialEnv.MARKER] == hosts[1].marker
        assert env["MSEXP_WARM"] == "1", "a sweep's host keeps one warm trial child"
        assert env["GLOG_v"] == os.environ.get("GLOG_v", "2"), "C++ log: warnings"  # noqa: SIM112
        assert hosts[0].marker != hosts[1].marker
    finally:
        for h in hosts:
            h.kill()
    assert all(h.pid is None for h in hosts)


def mindspore_mapped(pid: int) -> bool:
    return "mindspore" in Path(f"/proc/{pid}/maps").read_text()


# mutation: MSEXP_PRELOAD ignored (every host imports MindSpore: seconds per host, and a
# fork of a 400 MB process per command trial)
def test_a_command_sweeps_hosts_import_no_mindspore_and_run_its_trials(tmp_path):
    with HostPool(1, tmp_path, preload=False) as pool:
        (host,) = pool.hosts
        result = host.run(script(tmp_path, "t", "print('score: 0.5')"), TIMEOUT_S)
        assert (result.status, result.metrics) == (Status.COMPLETE, {"score": 0.5})
        assert not mindspore_mapped(host.pid)
    with HostPool(1, tmp_path) as pool:
        assert wait_for("MindSpore in the host", lambda: mindspore_mapped(pool.hosts[0].pid)), \
            "a workload's host imports MindSpore before its first trial"


# -- HostPool: one host and one thread per concurrent trial ----------------------------

@SLOW
def test_a_pool_keeps_only_the_hosts_it_needs_and_closes_them_after_the_work():
    pool = HostPool(3, ROOT)
    hosts = list(pool.hosts)
    pids = [h.pid for h in hosts]
    pool.keep(2)
    assert pool.hosts == hosts[:2] and hosts[2].pid is None and gone(pids[2])
    worked: queue.Queue[Host] = queue.Queue()
    waited = threading.Event()
    pool.each(worked.put, waited.set)
    assert waited.is_set() and {worked.get_nowait(), worked.get_nowait()} == set(hosts[:2])
    pool.close()
    assert all(h.pid is None for h in hosts[:2]) and all(gone(p) for p in pids)


def test_a_pool_runs_work_on_its_first_slots_only_when_asked():
    with HostPool(2, ROOT) as pool:
        worked: queue.Queue[Host] = queue.Queue()
        pool.each(worked.put, slots=1)
        assert [worked.get_nowait()] == pool.hosts[:1] and worked.empty()
    assert all(h.pid is None for h in pool.hosts)


@SLOW
def test_killing_a_host_leaves_the_sweeps_other_hosts(tmp_path):
    hosts = [Host(cwd=ROOT), Host(cwd=ROOT)]
    try:
        for h in hosts:
            h.prewarm()
        other = hosts[1].pid
        hosts[0].kill()
        assert hosts[0].pid is None and hosts[1].pid == other and not gone(other)
    finally:
        for h in hosts:
            h.kill()


def test_stopping_a_pool_kills_every_host():
    pool = HostPool(2, ROOT)
    pids = [h.pid for h in pool.hosts]
    pool.stop()
    assert all(h.pid is None for h in pool.hosts) and all(gone(p) for p in pids)
