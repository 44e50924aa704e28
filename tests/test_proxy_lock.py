"""The study lock msexp's gRPC proxy serves (`search.grpc_proxy._LockService`) and its
client (`search.lock._proxy_lock`), in-process on a journal storage: one holder at a time,
in the order asked, a cancelled call lets the next in, callers past the proxy's lock
threads come back later, and a server that is not msexp's proxy (or none at all) is
refused in one line. PostgreSQL's advisory lock, which the proxy also takes, is the slow
tests' (tests/test_grpc_proxy.py); here a lock of this process stands in for it."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

grpc = pytest.importorskip("grpc")

from msexp.errors import MsexpError  # noqa: E402
from msexp.execution.ports import free_port  # noqa: E402
from msexp.search import grpc_proxy  # noqa: E402
from msexp.search.lock import HOLD_METHOD, study_lock  # noqa: E402
from msexp.search.storage import _open_proxy, open_storage  # noqa: E402


class _AdvisoryLock:
    """Stands in for PostgreSQL's advisory lock only (no PostgreSQL here): exclusive, as
    the database's lock is between the proxy's sessions."""

    def __init__(self) -> None:
        self.held = threading.Lock()

    @contextlib.contextmanager
    def __call__(self, url: str, **options: Any) -> Iterator[None]:
        with self.held:
            yield


@contextlib.contextmanager
def proxy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: int = 256
          ) -> Iterator[str]:
    """msexp's proxy of a journal storage, started in this process: its grpc:// URL."""
    monkeypatch.setattr(grpc_proxy, "advisory_lock", _AdvisoryLock())
    port = free_port()
    server = grpc_proxy.make_proxy_server(str(tmp_path / "optuna.journal"), "127.0.0.1",
                                          port, threads)
    server.start()
    try:
        yield f"grpc://127.0.0.1:{port}"
    finally:
        server.stop(0)


def _holder(url: str, order: list[int], inside: list[int], index: int, hold_s: float
            ) -> threading.Thread:
    """A thread that takes the study lock, notes its turn and how many held it with it."""
    def run() -> None:
        with study_lock(url):
            inside.append(index)
            order.append(len(inside))  # holders inside now: 1 where it is alone
            time.sleep(hold_s)
            inside.remove(index)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_the_proxys_lock_has_one_holder_at_a_time_granted_in_the_order_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four waiters ask one after another while the lock is held: none gets in meanwhile;
    once it is let go each gets it alone, in the order it asked (FIFO).
    (survivors: grpc_proxy._LockService.hold, _first: the queue's order, the holder's
    release; lock._proxy_lock, _granted)"""
    with proxy(tmp_path, monkeypatch) as url:
        turns: list[int] = []
        inside: list[int] = []
        alone: list[int] = []
        threads = []

        def waiter(index: int) -> None:
            with study_lock(url):
                inside.append(index)
                turns.append(index)
                alone.append(len(inside))
                time.sleep(0.05)
                inside.remove(index)

        with study_lock(url):
            for index in range(4):
                threads.append(threading.Thread(target=waiter, args=(index,), daemon=True))
                threads[-1].start()
                time.sleep(0.3)  # its call reached the proxy meanwhile
            assert turns == [], "no waiter got in while the lock was held"
        for thread in threads:
            thread.join(5)
        assert turns == [0, 1, 2, 3]
        assert alone == [1, 1, 1, 1], "one holder at a time"


def test_a_waiter_gets_the_lock_as_soon_as_its_holder_lets_it_go(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Five hand-overs take milliseconds each, not a waiter's poll (0.5 s): a claim of a
    worker waits for the one before it only. (survivors: grpc_proxy._LockService.hold:
    the waiters woken as the holder leaves)"""
    with proxy(tmp_path, monkeypatch) as url:
        waited = 0.0
        for _ in range(5):
            got: list[float] = []

            def waiter() -> None:
                with study_lock(url):
                    got.append(time.monotonic())  # noqa: B023 (joined before the next)

            with study_lock(url):
                thread = threading.Thread(target=waiter, daemon=True)
                thread.start()
                time.sleep(0.15)  # its call reached the proxy meanwhile
                released = time.monotonic()
            thread.join(5)
            waited += got[0] - released
        assert waited < 0.5, f"five hand-overs took {waited:.2f} s"


def test_a_cancelled_call_lets_the_next_caller_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A holder whose call ends (cancelled: its process died, say) and a waiter that gives
    up before its turn both leave the queue: the caller after them gets the lock.
    (survivors: grpc_proxy._LockService.hold: the call's end callback, the queue's
    removal; _first: a waiter whose call ended)"""
    with proxy(tmp_path, monkeypatch) as url:
        channel = grpc.insecure_channel(url[len("grpc://"):])
        try:
            hold = channel.unary_stream(HOLD_METHOD)
            holder = hold(b"")
            assert next(holder) == b"held"
            gave_up = hold(b"")  # waits behind the holder
            time.sleep(0.3)
            gave_up.cancel()
            order: list[int] = []
            waiter = _holder(url, order, [], 0, 0.0)
            time.sleep(0.3)
            assert order == [], "the holder still holds it"
            began = time.monotonic()
            holder.cancel()
            waiter.join(5)
            assert order == [1], "the next caller got the lock once the holder's call ended"
            assert time.monotonic() - began < 2
        finally:
            channel.close()


def test_callers_past_the_proxys_lock_threads_come_back_later_and_get_the_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy of 33 threads keeps 32 for storage calls and 1 for the lock: a second
    caller is told RESOURCE_EXHAUSTED, which msexp's client retries until the lock is
    free. (survivors: grpc_proxy._LockService.__init__'s limit, hold's refusal;
    lock._granted: RESOURCE_EXHAUSTED retried)"""
    with proxy(tmp_path, monkeypatch, threads=33) as url:
        channel = grpc.insecure_channel(url[len("grpc://"):])
        try:
            order: list[int] = []
            hold = channel.unary_stream(HOLD_METHOD)
            holder = hold(b"", timeout=10)
            assert next(holder) == b"held"
            refused = hold(b"", timeout=5)
            with pytest.raises(grpc.RpcError):
                next(refused)
            assert refused.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert refused.details() == "all lock threads busy"
            waiter = _holder(url, order, [], 0, 0.0)
            time.sleep(0.8)  # it was refused and tried again meanwhile
            assert order == [] and waiter.is_alive()
            holder.cancel()
            waiter.join(5)
            assert order == [1], "the caller that was told to come back got the lock"
        finally:
            channel.close()


def test_a_proxy_of_34_threads_queues_one_waiter_and_refuses_the_next(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """threads - 32 calls for the lock at once: the holder and one waiter; a third is
    refused at once; a waiter that gives up leaves its place to the next caller.
    (survivors: grpc_proxy._LockService.__init__'s limit; _first: a call that ended)"""
    with proxy(tmp_path, monkeypatch, threads=34) as url:
        channel = grpc.insecure_channel(url[len("grpc://"):])
        calls: list[Any] = []
        try:
            hold = channel.unary_stream(HOLD_METHOD)
            calls.append(hold(b""))
            assert next(calls[0]) == b"held"
            calls.append(hold(b"", timeout=10))  # waits
            time.sleep(0.3)
            calls.append(hold(b"", timeout=5))
            with pytest.raises(grpc.RpcError):
                next(calls[2])
            assert calls[2].code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert not calls[1].done(), "the one waiter the lock's threads leave room for"
            calls[1].cancel()  # it gives up: its thread is free within the proxy's poll
            time.sleep(0.8)
            calls.append(hold(b"", timeout=10))
            time.sleep(0.3)
            assert not calls[3].done(), "a waiter in the place of the one that gave up"
            calls[0].cancel()
            assert next(calls[3]) == b"held"
        finally:
            for call in calls:
                call.cancel()
            channel.close()


def test_a_grpc_server_that_is_not_msexps_proxy_is_refused_in_one_line() -> None:
    """A gRPC server without msexp's lock service answers UNIMPLEMENTED: the study lock
    says what it reached and what it needs. (survivors: lock._granted's refusal)"""
    port = free_port()
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    assert_refused_as_not_msexps_proxy(server, f"grpc://127.0.0.1:{port}")


def assert_refused_as_not_msexps_proxy(server: Any, url: str) -> None:
    """The study lock through `server` (a started gRPC server at `url`, stopped here)
    refused in one line: it serves no lock."""
    try:
        with pytest.raises(MsexpError) as refused, study_lock(url):
            pass
    finally:
        server.stop(0)
    assert str(refused.value) == (
        f"cannot take the study lock through {url} (UNIMPLEMENTED: Method not found!); "
        "is it msexp's proxy (msexp services proxy)?")


def test_a_study_lock_with_no_proxy_listening_waits_then_says_the_storage_is_down(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """UNAVAILABLE is a proxy down (a restart waited out, `search.patience`), not a
    server that is not msexp's. (survivors: lock._granted: UNAVAILABLE re-raised)"""
    monkeypatch.setenv("MSEXP_STORAGE_PATIENCE_S", "0.3")
    url = f"grpc://127.0.0.1:{free_port()}"
    with pytest.raises(MsexpError) as refused, study_lock(url):
        pass
    assert str(refused.value).startswith(f"the study storage {url} did not answer for 0 s (")


def test_a_grpc_storage_that_no_proxy_answers_is_refused_in_one_line() -> None:
    """(survivors: storage._open_proxy's refusal and its timeout)"""
    url = f"grpc://127.0.0.1:{free_port()}"
    refused: list[BaseException] = []

    def opening() -> None:
        try:
            _open_proxy(url, timeout_s=1.0)
        except MsexpError as exc:
            refused.append(exc)

    thread = threading.Thread(target=opening, daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), "it gave up after its timeout"
    assert [str(e) for e in refused] == [f"cannot open the Optuna storage {url} (no gRPC "
                                          "proxy answered within 1 s)"]


def test_a_grpc_storage_waits_for_a_proxy_that_is_starting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy that answers half a second later is waited for (a worker started with its
    proxy). (survivors: storage.open_storage's wait for the proxy)"""
    monkeypatch.setattr(grpc_proxy, "advisory_lock", _AdvisoryLock())
    port = free_port()
    server = grpc_proxy.make_proxy_server(str(tmp_path / "optuna.journal"), "127.0.0.1",
                                          port)
    starting = threading.Timer(0.5, server.start)
    starting.start()
    try:
        storage = open_storage(f"grpc://127.0.0.1:{port}")
        assert storage.get_all_studies() == []
    finally:
        starting.join()
        server.stop(0)


def test_a_grpc_storage_opens_through_a_proxy_that_answers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """open_storage of the proxy's URL is Optuna's client of it: a study made through it
    is in the journal behind the proxy. (survivors: storage._open_proxy)"""
    import optuna

    with proxy(tmp_path, monkeypatch) as url:
        storage = open_storage(url)
        optuna.create_study(study_name="through", storage=storage)
        assert [s.study_name for s in storage.get_all_studies()] == ["through"]
        behind = open_storage(str(tmp_path / "optuna.journal"))
        assert [s.study_name for s in behind.get_all_studies()] == ["through"]


def test_a_grpc_storage_without_grpcio_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """(issue 53 fresh: storage._open_proxy 4)"""
    import sys

    monkeypatch.setitem(sys.modules, "grpc", None)  # `import grpc` raises ImportError
    with pytest.raises(MsexpError) as refused:
        _open_proxy("grpc://127.0.0.1:1")
    assert str(refused.value) == "a grpc:// storage needs grpcio: pip install grpcio"
