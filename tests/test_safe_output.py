"""Outputs touch only what edgebyoc created: look-alike user files and folders around every
output path survive compile, a kill in the middle of a write, recovery and run, byte for byte
(issue #26, class 1)."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import edgebyoc
from edgebyoc.errors import ArtifactError, EdgebyocError
from edgebyoc.runtime.safe_output import (MARKER, RESERVED_PREFIX, lock_path, output_lock,
                                          replace_directory, write_file_atomically)

#: names a user may have beside an output NAME (the old scheme's staging, backup and lock
#: names among them), and reserved-looking names without edgebyoc's marker
LOOKALIKES = [".{n}.cache/f", ".{n}.d/x", ".{n}.old/file", ".{n}.lock", ".{n}.x1y2/y",
              ".{n}.tmp", "{n}.v2.txt", ".{n}/z", ".edgebyoc-new-{n}/w", ".edgebyoc-old-{n}/v"]


def _plant(folder: Path, names) -> dict[Path, bytes]:
    planted = {}
    for name in names:
        for pattern in LOOKALIKES:
            path = folder / pattern.format(n=name)
            path.parent.mkdir(parents=True, exist_ok=True)
            content = f"user data {path.name} {hashlib.sha256(str(path).encode()).hexdigest()}"
            path.write_bytes(content.encode())
            planted[path] = content.encode()
    # a work folder with a marker for *another* output: not ours to touch
    other = folder / ".edgebyoc-old-someoneelse"
    other.mkdir()
    (other / MARKER).write_text('{"edgebyoc": "old", "of": "not-an-output-here"}')
    (other / "payload").mkdir()
    (other / "payload" / "keep").write_bytes(b"keep")
    planted[other / MARKER] = (other / MARKER).read_bytes()
    planted[other / "payload" / "keep"] = b"keep"
    return planted


def _unchanged(planted: dict[Path, bytes]) -> None:
    for path, content in planted.items():
        assert path.is_file(), f"{path} was removed"
        assert path.read_bytes() == content, f"{path} was changed"


def _no_work_folders(folder: Path) -> None:
    leftovers = [p.name for p in folder.iterdir() if p.name.startswith(RESERVED_PREFIX)
                 and (p / MARKER).is_file() and "someoneelse" not in p.name]
    assert not leftovers, leftovers


def test_lookalikes_survive_compile_recovery_and_run(small_compiled, tmp_path):
    names = ["build", "*", "[ab]", "out", "out.v2"]
    planted = _plant(tmp_path, names)
    for name in names:
        small_compiled.save(tmp_path / name)
        small_compiled.save(tmp_path / name)  # replacing an artifact
    _unchanged(planted)
    _no_work_folders(tmp_path)
    x = np.zeros((1, 3, 16, 16), np.float32)
    for name in names:
        assert edgebyoc.load(tmp_path / name).run(x)
    # run on an output that does not exist: the user's .missing.old is never taken for a backup
    (tmp_path / ".missing.old").mkdir()
    (tmp_path / ".missing.old" / "mine").write_bytes(b"mine")
    with pytest.raises(ArtifactError, match="no such artifact directory"):
        edgebyoc.load(tmp_path / "missing")
    assert (tmp_path / ".missing.old" / "mine").read_bytes() == b"mine"
    assert not (tmp_path / "missing").exists()
    _unchanged(planted)


def test_a_users_file_with_the_lock_name_is_refused_not_overwritten(small_compiled, tmp_path):
    lock = lock_path(tmp_path / "a")
    lock.write_bytes(b"my notes")
    with pytest.raises(EdgebyocError, match="is not edgebyoc's lock file"):
        small_compiled.save(tmp_path / "a")
    assert lock.read_bytes() == b"my notes"
    assert not (tmp_path / "a").exists()


def test_two_writers_of_one_output_and_siblings_at_once(small_compiled, tmp_path):
    with output_lock(tmp_path / "a"):
        with pytest.raises(ArtifactError, match="another edgebyoc process is writing"):
            small_compiled.save(tmp_path / "a")
    # sibling outputs written at once, by separate processes, never touch each other's work
    # folders
    source = small_compiled.save(tmp_path / "source")
    script = ("import sys, edgebyoc\n"
              "for _ in range(3): edgebyoc.load(sys.argv[1]).save(sys.argv[2])\n")
    names = ("out", "out.v2", ".out")
    runs = [subprocess.Popen([sys.executable, "-c", script, str(source), str(tmp_path / name)],
                             stderr=subprocess.PIPE, text=True) for name in names]
    for run in runs:
        assert run.wait(timeout=300) == 0, run.stderr.read()[-2000:]
    for name in names:
        assert edgebyoc.load(tmp_path / name).manifest["digest"]
    _no_work_folders(tmp_path)


_KILLER = """
import os, signal, sys
import edgebyoc
calls = [0]
real = os.rename
def rename(a, b):  # pathlib's Path.rename calls os.rename too
    real(a, b)
    calls[0] += 1
    if calls[0] == {kill_at}:
        os.kill(os.getpid(), signal.SIGKILL)
os.rename = rename
edgebyoc.load(sys.argv[1]).save(sys.argv[2])
"""


@pytest.mark.parametrize("kill_at", [1, 2])
def test_a_write_killed_between_its_renames_is_recovered(small_compiled, tmp_path, kill_at):
    source = small_compiled.save(tmp_path / "source")
    planted = _plant(tmp_path, ["build"])
    old = small_compiled.save(tmp_path / "build")
    digest = edgebyoc.load(old).manifest["digest"]
    (tmp_path / "build" / "c_project").mkdir()  # make's products: part of a replaced artifact
    run = subprocess.run([sys.executable, "-c", _KILLER.format(kill_at=kill_at), str(source),
                          str(tmp_path / "build")], capture_output=True, text=True)
    assert run.returncode == -9, run.stderr[-2000:]
    if kill_at == 1:  # killed after moving the old artifact aside: it is gone from its place
        assert not (tmp_path / "build").exists()
    # the next load puts the old artifact back (or finds the new one in place)
    assert edgebyoc.load(tmp_path / "build").manifest["digest"] == digest
    small_compiled.save(tmp_path / "build")  # and the next write cleans up
    _unchanged(planted)
    _no_work_folders(tmp_path)


def test_replace_directory_refuses_foreign_folders_and_links(tmp_path):
    mine = tmp_path / "photos"
    mine.mkdir()
    (mine / "cat.jpg").write_bytes(b"\xff")
    with pytest.raises(EdgebyocError, match="exists and is not an edgebyoc output"):
        replace_directory(mine, lambda p: None, lambda p: False)
    assert (mine / "cat.jpg").read_bytes() == b"\xff"
    (tmp_path / "link").symlink_to(mine)
    with pytest.raises(EdgebyocError, match="symbolic link"):
        replace_directory(tmp_path / "link", lambda p: None, lambda p: True)
    # a failing fill leaves neither the output nor a work folder
    def fail(folder):
        (folder / "half").write_text("x")
        raise OSError(28, "No space left on device")
    with pytest.raises(EdgebyocError, match="No space left on device"):
        replace_directory(tmp_path / "new", fail, lambda p: True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "photos"]


def test_atomic_file_writes_leave_no_partial_file(tmp_path):
    target = tmp_path / "y.npy"
    target.write_bytes(b"previous")

    def full_disk(path):
        path.write_bytes(b"partial")
        raise OSError(28, "No space left on device")

    with pytest.raises(EdgebyocError, match="the disk is full"):
        write_file_atomically(target, full_disk, "outputs")
    assert target.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["y.npy"]
    write_file_atomically(target, lambda p: p.write_bytes(b"new"), "outputs")
    assert target.read_bytes() == b"new"
    assert oct(target.stat().st_mode & 0o777) != oct(0o600)  # the umask's mode, not mkstemp's
    assert os.access(target, os.R_OK)
