"""The Optuna storage in-process: a journal's torn tail, its first bad line, RDB URLs that
fail fast, and errors as one line."""

from __future__ import annotations

import contextlib
import errno
import json
import socket
import threading
from pathlib import Path

import pytest

from msexp.errors import MsexpError
from msexp.search import lock, storage
from msexp.search.storage import open_storage, storage_label

RECORD = json.dumps({"op_code": 0, "worker_id": "w"})


@pytest.mark.parametrize(("content", "ends"), [(b"", True), (b"a\n", True), (b"a", False),
                                               (b"a\nb", False), (b"\n", True)])
def test_a_file_ends_a_line_only_after_a_newline(tmp_path: Path, content: bytes,
                                                  ends: bool) -> None:
    path = tmp_path / "j"
    path.write_bytes(content)
    assert storage._ends_a_line(path) is ends


@pytest.mark.parametrize(("content", "keep"), [
    (b"abc\ndef", 4), (b"abc", 0), (b"\nabc", 1), (b"a\nb\ncd", 4),
    (b"x\n" + b"y" * (3 * storage._TAIL_CHUNK), 2),  # the newline is chunks back
    (b"z" * (storage._TAIL_CHUNK + 5), 0),
    (b"\n" + b"w" * (2 * storage._TAIL_CHUNK), 1),  # the last chunk is the first byte
])
def test_the_torn_tail_starts_after_the_last_newline(tmp_path: Path, content: bytes,
                                                     keep: int) -> None:
    path = tmp_path / "j"
    path.write_bytes(content)
    with path.open("rb") as f:
        assert storage._after_last_newline(f, len(content)) == keep


def test_opening_a_journal_cuts_only_a_torn_last_record(tmp_path: Path) -> None:
    journal = tmp_path / "deep" / "s.journal"  # its folder is made
    open_storage(str(journal))
    whole = journal.read_bytes()
    journal.write_bytes(whole + b'{"op_code": 5, "trunc')
    open_storage(str(journal))
    assert journal.read_bytes() == whole
    open_storage(str(journal))
    assert journal.read_bytes() == whole


@pytest.mark.parametrize(("lines", "bad"), [([RECORD, "not json"], 2),
                                            (["[1, 2]", RECORD], 1),
                                            ([RECORD, '{"worker_id": 1}', RECORD], 2),
                                            ([RECORD, RECORD], 2), ([], 0)])
def test_the_first_bad_line_is_named_by_its_number(tmp_path: Path, lines: list[str],
                                                   bad: int) -> None:
    path = tmp_path / "j"
    path.write_text("".join(f"{line}\n" for line in lines))
    assert storage._first_bad_line(path) == bad


def test_a_journal_with_a_foreign_line_is_one_line_naming_it(tmp_path: Path) -> None:
    journal = tmp_path / "s.journal"
    journal.write_text(f"{RECORD}\n" + '{"not": "optuna"}\n')
    with pytest.raises(MsexpError) as error:
        open_storage(str(journal))
    assert str(error.value).startswith(f"{journal}: line 2 is not an Optuna journal record")


def test_a_journal_whose_last_line_is_garbage_is_refused_before_anything_is_appended(
        tmp_path: Path) -> None:
    """Optuna reads a bad last line as a write still under way and appends after it;
    then no later read gets past it."""
    journal = tmp_path / "s.journal"
    journal.write_text(f"{RECORD}\n" + "{garbage\n")
    before = journal.read_bytes()
    with pytest.raises(MsexpError) as error:
        open_storage(str(journal))
    assert str(error.value).startswith(f"{journal}: line 2 is not an Optuna journal record")
    assert journal.read_bytes() == before


@pytest.mark.parametrize(("url", "folder"), [
    ("sqlite:///a/b/c.db", Path("a/b")), ("sqlite:////abs/c.db", Path("/abs")),
    ("sqlite:///", None), ("sqlite:///:memory:", None), ("postgresql://h/db", None)])
def test_the_folder_of_a_sqlite_url(url: str, folder: Path | None) -> None:
    assert lock.sqlite_folder(url) == folder


def test_an_in_memory_sqlite_url_opens(tmp_path: Path) -> None:
    assert open_storage("sqlite:///:memory:") is not None


def test_a_sqlite_storage_in_a_missing_folder_is_refused_and_the_folder_not_made(
        tmp_path: Path) -> None:
    """issue 53 (branches): a mistyped --storage folder is said, not made (SQLite would
    fail with "unable to open database file")."""
    folder = tmp_path / "mlruns-typo"
    with pytest.raises(MsexpError) as error:
        open_storage(f"sqlite:///{folder / 'optuna.db'}")
    assert str(error.value) == (f"cannot open the Optuna storage sqlite:///{folder / 'optuna.db'}"
                                f" (folder {folder} does not exist)")
    assert not folder.exists()


def test_a_database_of_another_application_is_refused(tmp_path: Path) -> None:
    import sqlalchemy

    url = f"sqlite:///{tmp_path / 'other.db'}"
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as connection:
        connection.execute(sqlalchemy.text("create table alembic_version (v text)"))
    engine.dispose()
    with pytest.raises(MsexpError, match="is not an Optuna database"):
        open_storage(url)
    open_storage(f"sqlite:///{tmp_path / 'new.db'}")  # no tables yet: Optuna's to make


@pytest.mark.slow  # over 4 s: the fast tier stays quick
def test_a_postgresql_server_that_never_answers_fails_on_the_connect_timeout() -> None:
    """The probe has a connection timeout: a server that takes the connection and says
    nothing (hung, or behind a firewall that drops packets) fails it, instead of hanging."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel accepts; nobody answers
        port = silent.getsockname()[1]
        with pytest.raises(MsexpError) as failed:
            open_storage(f"postgresql://u:pw@127.0.0.1:{port}/x")
    assert str(failed.value) == (f"cannot open the Optuna storage postgresql://u:***@127.0.0.1:"
                                 f"{port}/x (ConnectionTimeout: connection timeout expired)")


def test_a_postgresql_server_that_fails_is_tried_once() -> None:
    """An unreachable server fails the probe at its first connection: no retries."""
    with socket.socket() as closing:
        closing.bind(("127.0.0.1", 0))
        closing.listen(8)
        port = closing.getsockname()[1]
        accepted: list[int] = []

        def close_each() -> None:
            with contextlib.suppress(OSError):  # the listening socket closed: the test ended
                while True:
                    connection, _ = closing.accept()
                    accepted.append(1)
                    connection.close()

        threading.Thread(target=close_each, daemon=True).start()
        with pytest.raises(MsexpError, match="server closed the connection unexpectedly"):
            open_storage(f"postgresql://u:pw@127.0.0.1:{port}/x")
    assert len(accepted) == 1


def test_an_error_reads_as_its_first_line_with_the_file_it_names() -> None:
    with_file = FileNotFoundError(errno.ENOENT, "No such file or directory", "/x/y")
    assert storage._reason(with_file) == "FileNotFoundError: No such file or directory: /x/y"
    without = PermissionError(errno.EACCES, "Permission denied")
    assert storage._reason(without) == "PermissionError: Permission denied"
    assert storage._reason(RuntimeError("")) == "RuntimeError: "
    assert storage._reason(RuntimeError("first\nsecond")) == "RuntimeError: first"
    assert storage._reason(RuntimeError("x" * 400)) == "RuntimeError: " + "x" * 286
    assert storage._reason(RuntimeError("postgresql://u:pw@h/db")) == (
        "RuntimeError: postgresql://u:***@h/db")


def test_the_storage_label_is_the_journal_or_the_redacted_url() -> None:
    assert storage_label(None) == "mlruns/optuna.journal"
    assert storage_label("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"


def test_a_cut_off_write_is_found_only_where_it_landed() -> None:
    """`patience._landed`, the look before a write is tried again: a queued trial equal to
    the template, its arguments passed by position or keyword; a tell landed only with the
    values and the state told. Mutations (issue 53): a keyword's name, the keywords not
    read, `values is not None`, the state not compared."""
    from datetime import datetime

    import optuna
    from optuna.distributions import FloatDistribution
    from optuna.trial import TrialState, create_trial

    from msexp.search.patience import _landed

    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage)
    since = datetime.now()
    template = create_trial(state=TrialState.WAITING, params={"x": 1.0},
                            distributions={"x": FloatDistribution(0, 2)},
                            user_attrs={"mark": "a"})
    made = storage.create_new_trial(study._study_id, template_trial=template)
    assert _landed(storage, "create_new_trial", (study._study_id,),
                   {"template_trial": template}, since) == made
    assert _landed(storage, "create_new_trial", (),
                   {"study_id": study._study_id, "template_trial": template}, since) == made
    other = create_trial(state=TrialState.WAITING, params={"x": 1.0},
                         distributions={"x": FloatDistribution(0, 2)}, user_attrs={"mark": "b"})
    assert _landed(storage, "create_new_trial", (study._study_id,),
                   {"template_trial": other}, since) is None
    told = study.ask()
    study.tell(told, 1.0)
    assert _landed(storage, "set_trial_state_values",
                   (told._trial_id, TrialState.COMPLETE, [1.0]), {}, since) is True
    assert _landed(storage, "set_trial_state_values",
                   (told._trial_id, TrialState.COMPLETE, [2.0]), {}, since) is None
    assert _landed(storage, "set_trial_state_values", (), {
        "trial_id": told._trial_id, "state": TrialState.COMPLETE, "values": [2.0]},
        since) is None
    assert _landed(storage, "set_trial_state_values",
                   (told._trial_id, TrialState.FAIL, None), {}, since) is None


def test_a_storage_that_fails_as_the_study_is_made_is_named_in_the_line(
        workdir: Path) -> None:
    """A journal that opens but cannot be written (its lock file cannot be made): the
    line names that journal, not msexp's default one (issue 53 fresh late:
    study.open_study 2)."""
    from msexp.search.study import open_study
    from msexp.spec import parse_spec

    spec = parse_spec("name: s\nexperiment: mlp_digits\nparams: {lr: [0.1]}\n", "s.yaml")
    (workdir / "stores" / "s.journal.flock").mkdir(parents=True)  # where its lock goes
    with pytest.raises(MsexpError) as refused:
        open_study(spec, "stores/s.journal")
    assert str(refused.value).startswith("cannot use the Optuna storage stores/s.journal "
                                         "(IsADirectoryError: "), str(refused.value)
