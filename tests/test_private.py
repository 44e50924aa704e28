"""msexp.secrets.files: the folder that holds secrets is this user's alone, and each file in it."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

import pytest

from msexp.errors import MsexpError
from msexp.secrets import files as private


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temp folder msexp.secrets.files uses, under umask 0: only msexp's own modes count."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    old = os.umask(0)
    yield tmp_path
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_the_folder_and_each_file_are_made_for_this_user_only(tmp: Path) -> None:
    folder = tmp / f"msexp-{os.getuid()}"
    with contextlib.suppress(MsexpError):  # made with another mode, it would be refused
        private.folder()
    assert mode(folder) == 0o700
    path = private.write('{"api_token": "S3CRET"}')
    assert path.parent == folder and mode(path) == 0o600
    assert path.read_text(encoding="utf-8") == '{"api_token": "S3CRET"}'
    assert path.name.startswith(f"{os.getpid()}-") and private.owner_alive(path)


# one bit each: read, write or enter, for the group or for others
@pytest.mark.parametrize("loose", [0o740, 0o720, 0o710, 0o704, 0o702, 0o701])
def test_a_folder_anyone_else_may_enter_is_refused_and_gets_no_secret(tmp: Path,
                                                                      loose: int) -> None:
    folder = tmp / f"msexp-{os.getuid()}"
    folder.mkdir(mode=loose)
    with pytest.raises(MsexpError) as refused:
        private.write('{"api_token": "S3CRET"}')
    assert str(refused.value) == (
        f"{folder}: must have mode 700, as msexp keeps secrets there, got mode "
        f"{stat.filemode(stat.S_IFDIR | loose)}: check who changed it, then chmod 700 {folder}")
    assert list(folder.iterdir()) == [] and mode(folder) == loose, "left as found"
    folder.chmod(0o700)  # what the message says to do
    assert private.write("{}").parent == folder


def test_what_is_not_a_folder_of_this_users_is_refused(tmp: Path) -> None:
    path = tmp / f"msexp-{os.getuid()}"
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    path.symlink_to(elsewhere)
    with pytest.raises(MsexpError, match=r": must be a folder of this user's with mode 700, "
                                         r"got mode l"):
        private.folder()
    path.unlink()
    path.write_text("")
    with pytest.raises(MsexpError, match=r"got mode -"):
        private.folder()


@pytest.mark.skipif(os.getuid() != 0, reason="a folder of another user's needs root to make")
def test_a_folder_of_another_users_is_refused(tmp: Path) -> None:
    path = tmp / f"msexp-{os.getuid()}"
    path.mkdir(mode=0o700)
    os.chown(path, 4321, -1)
    with pytest.raises(MsexpError, match=r"got mode drwx------ of uid 4321$"):
        private.folder()
