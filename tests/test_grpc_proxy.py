"""Optuna's gRPC storage proxy in front of PostgreSQL (`msexp services proxy`): workers
that reach the study only through it still take each trial exactly once, and the study
lock it serves excludes every other holder, is released when its holder dies, and is the
same lock a direct PostgreSQL client takes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy

from msexp.cluster import services
from msexp.errors import MsexpError
from msexp.search.lock import _ADVISORY_KEY, grpc_address, study_lock
from msexp.search.storage import open_storage
from tests.conftest import write
from tests.test_proxy_lock import assert_refused_as_not_msexps_proxy

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
# a worker's claim loop: msexp's own TrialSource over the given storage, each trial told
# at once; prints the numbers it took
_CLAIMS = """
import sys
from msexp.execution.process_tree import kill_marked
from msexp.search.source import TrialSource
from msexp.search.study import open_study
from msexp.spec import load_spec
spec, url = load_spec(sys.argv[1], local=False), sys.argv[2]
study, _ = open_study(spec, url)
source = TrialSource(study, url, spec.n_trials(), samples=spec.method != "grid",
                     kill_owned=kill_marked)
while (trial := source.claim()) is not None:
    print(trial.number, flush=True)
    study.tell(trial, float(trial.number))
    source.done(trial)
source.close()
"""
_HOLD = """
import sys, time
from msexp.search.lock import study_lock
with study_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


@pytest.fixture(scope="module")
def proxy(shared_services) -> str:
    pytest.importorskip("grpc")
    running = services.up(shared_services.root, proxy=True)
    os.environ["PGPASSFILE"] = str(running.pgpass)
    return running.proxy_url


def _pg_lock_free(services_url: str) -> bool:
    engine = sqlalchemy.create_engine(services_url, poolclass=sqlalchemy.pool.NullPool)
    with engine.connect() as connection:
        free = connection.execute(sqlalchemy.text("SELECT pg_try_advisory_lock(:k)"),
                                  {"k": _ADVISORY_KEY}).scalar()
        if free:
            connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"),
                               {"k": _ADVISORY_KEY})
    engine.dispose()
    return bool(free)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["grid", "random"])
def test_workers_through_the_proxy_take_every_trial_exactly_once(
        workdir: Path, proxy: str, method: str) -> None:
    """18 grid points, or a sampler's budget of 18 (checked and asked under the lock)."""
    sweep = write(workdir / "s.yaml", f"""
        name: proxy-{method}
        method: {method}
        experiment:
          command: python -c "print('score 1')"
        objective: {{metric: score, direction: maximize}}
        budget: {{trials: 18}}
        params: {{x: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]}}
    """)
    workers = [subprocess.Popen([sys.executable, "-c", _CLAIMS, str(sweep), proxy],
                                cwd=workdir, env=ENV, stdout=subprocess.PIPE, text=True)
               for _ in range(4)]
    taken = [[int(n) for n in w.communicate(timeout=240)[0].split()] for w in workers]
    assert all(w.returncode == 0 for w in workers)
    counts = Counter(n for numbers in taken for n in numbers)
    assert sorted(counts) == list(range(18)) and set(counts.values()) == {1}, counts
    study = __import__("optuna").load_study(study_name=f"proxy-{method}",
                                            storage=open_storage(proxy))
    assert sorted(t.value for t in study.trials) == [float(n) for n in range(18)]


@pytest.mark.slow
def test_the_proxys_lock_is_postgresqls_one_lock_and_dies_with_its_holder(
        workdir: Path, proxy: str, shared_services) -> None:
    """Held through the proxy, the advisory lock is taken in the database (a direct
    client cannot take it); a second holder through the proxy waits; a holder killed by
    SIGKILL releases it within seconds."""
    url = shared_services.storage_url
    first = subprocess.Popen([sys.executable, "-c", _HOLD, proxy, "60"], cwd=workdir,
                             env=ENV, stdout=subprocess.PIPE, text=True)
    assert first.stdout.readline().strip() == "held"
    assert not _pg_lock_free(url), "the proxy holds PostgreSQL's advisory lock"
    second = subprocess.Popen([sys.executable, "-c", _HOLD, proxy, "0"], cwd=workdir,
                              env=ENV, stdout=subprocess.PIPE, text=True)
    time.sleep(3)
    assert second.poll() is None, "the second holder waits for the first"
    first.send_signal(signal.SIGKILL)
    first.wait()
    began = time.monotonic()
    assert second.stdout.readline().strip() == "held"
    assert second.wait(timeout=30) == 0
    assert time.monotonic() - began < 10
    assert _pg_lock_free(url), "released when the holders ended"


@pytest.mark.slow
def test_a_direct_postgresql_holder_holds_the_proxys_clients(
        workdir: Path, proxy: str, shared_services) -> None:
    with study_lock(shared_services.storage_url):
        waiter = subprocess.Popen([sys.executable, "-c", _HOLD, proxy, "0"], cwd=workdir,
                                  env=ENV, stdout=subprocess.PIPE, text=True)
        time.sleep(3)
        assert waiter.poll() is None, "a proxy client waits for the direct holder"
    assert waiter.stdout.readline().strip() == "held"
    assert waiter.wait(timeout=30) == 0


@pytest.mark.parametrize("url", ["grpc://db.internal", "grpc://:13000", "grpc://db:port"])
def test_a_grpc_storage_without_host_or_port_is_refused_in_one_line(url: str) -> None:
    with pytest.raises(MsexpError) as refused:
        grpc_address(url)
    assert str(refused.value) == (f"cannot use the Optuna storage {url} (a gRPC proxy is "
                                  "given as grpc://HOST:PORT)")


def test_a_grpc_address_is_its_host_and_port() -> None:
    assert grpc_address("grpc://10.0.0.7:13000") == ("10.0.0.7", 13000)
    assert grpc_address("grpc://[::1]:50051/") == ("::1", 50051)


@pytest.mark.slow
def test_optunas_bare_proxy_is_refused_in_one_line(shared_services) -> None:
    """Optuna's own proxy serves no study lock: msexp cannot keep claims exactly once
    through it, so the lock (taken before a study is made or a trial claimed) refuses."""
    pytest.importorskip("grpc")
    import optuna
    from optuna.storages._grpc.server import make_server

    from msexp.execution.ports import free_port

    os.environ["PGPASSFILE"] = str(shared_services.pgpass)
    port = free_port()
    server = make_server(optuna.storages.get_storage(shared_services.storage_url),
                         "127.0.0.1", port)
    server.start()
    url = f"grpc://127.0.0.1:{port}"
    open_storage(url)  # the storage itself answers
    assert_refused_as_not_msexps_proxy(server, url)


@pytest.mark.slow
@pytest.mark.parametrize("through", ["proxy", "postgresql"])
def test_claims_take_the_study_lock_in_the_order_they_asked(
        proxy: str, shared_services, through: str) -> None:
    """Eight waiters ask for the lock one after another while it is held: each gets it in
    the order it asked (FIFO), through the proxy as directly in PostgreSQL.
    # mutation: the proxy's waiters polling a plain lock (as before: a waiter that asked
    last may go first; issue 53 measured a p99 claim of 181 s against a median of 2 s)"""
    import threading

    url = proxy if through == "proxy" else shared_services.storage_url
    order: list[int] = []
    asked = [threading.Event() for _ in range(8)]

    def waiter(index: int) -> None:
        asked[index].set()
        with study_lock(url):
            order.append(index)
            time.sleep(0.05)

    threads = []
    with study_lock(url):
        for index in range(8):
            threads.append(threading.Thread(target=waiter, args=(index,), daemon=True))
            threads[-1].start()
            asked[index].wait(30)
            time.sleep(1.0)  # its call reached the proxy (or PostgreSQL's queue) meanwhile
        assert order == [], "no waiter got in while the lock was held"
    for thread in threads:
        thread.join(60)
    assert order == list(range(8))


@pytest.mark.slow
def test_lock_waiters_leave_the_holders_storage_calls_their_threads(shared_services) -> None:
    """A proxy of 34 threads keeps 32 for storage calls: while the lock is held, 40 more
    workers ask for it; the one the 2 lock threads leave room for waits, the others are
    told to come back (RESOURCE_EXHAUSTED, which msexp's client retries), and the holder's
    own storage call (its claim) is served."""
    # mutation: `_LockService.limit = threads` (waiters take every thread: the holder's
    # claim waits behind them, so it never releases the lock they wait for: a deadlock)
    pytest.importorskip("grpc")
    import threading

    import grpc

    from msexp.execution.ports import free_port
    from msexp.search.grpc_proxy import make_proxy_server
    from msexp.search.lock import HOLD_METHOD

    os.environ["PGPASSFILE"] = str(shared_services.pgpass)
    port = free_port()
    server = make_proxy_server(shared_services.storage_url, "127.0.0.1", port, threads=34)
    server.start()
    url = f"grpc://127.0.0.1:{port}"
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    waiters: list = []
    try:
        storage = open_storage(url)
        with study_lock(url):
            waiters = [channel.unary_stream(HOLD_METHOD)(b"") for _ in range(40)]
            time.sleep(2)  # every call reached the proxy
            answered: list = []
            claim = threading.Thread(
                target=lambda: answered.append(storage.get_all_studies()), daemon=True)
            claim.start()
            claim.join(30)
            assert answered, "the holder's storage call waited behind the lock's waiters"
            refused = [call for call in waiters
                       if call.done() and call.code() is grpc.StatusCode.RESOURCE_EXHAUSTED]
            assert len(refused) == 39, "one waiter waits, the others come back later"
    finally:
        for call in waiters:
            call.cancel()
        channel.close()
        server.stop(0)


def test_the_proxy_process_judges_a_cut_off_claim_by_the_claims_heartbeat() -> None:
    """The proxy's patient storage takes a cut-off claim as landed only where no heartbeat
    came since: in its own process (`python -m msexp.search.grpc_proxy`, which imports no
    sweep) it must read heartbeats as the claims module does, not count none as none."""
    done = subprocess.run([sys.executable, "-c", (
        "import msexp.search.grpc_proxy\n"
        "from msexp.search import patience\n"
        "assert patience._last_beat[0].__qualname__ == 'last_heartbeat'")],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
