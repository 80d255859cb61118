"""Writing where the user said, touching nothing else of theirs.

Every folder and file edgebyoc writes on the user's behalf (an artifact, a new plugin, outputs
of ``run``, plots, a sweep's tables) goes through this module:

- **Reserved names.** Work folders live beside the output, named ``.edgebyoc-<role>-<random>``
  (``role``: ``new`` for a folder being written, ``old`` for the replaced one while it is being
  swapped out), and one lock file per output, ``.edgebyoc-lock-<digest of the output's
  name>``. A user's file or folder never has such a name by accident.
- **Markers.** A work folder is edgebyoc's only if it holds the marker file
  ``.edgebyoc-marker.json`` naming its role and the output it serves; only such folders are
  ever recovered or removed, and only those of the output being written (two compiles into
  ``out`` and ``out.v2`` in one folder never touch each other's). A lock file holds a fixed
  text; a file of that name with other content is the user's and is refused, never
  overwritten.
- **No globs.** The folder is listed and names are compared as strings: a name with glob
  characters (``-o 'D/*'``) is a name like any other.
- **Atomic replacement.** A folder is written completely into its ``new`` work folder and
  renamed into place; an existing one is first moved into an ``old`` work folder. A kill at
  any point leaves the old folder in place or recoverable: the next write or load of that
  output moves it back (``recover``) when the new one never arrived.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from ..errors import EdgebyocError

RESERVED_PREFIX = ".edgebyoc-"
MARKER = ".edgebyoc-marker.json"
#: the sub-folder of a work folder that holds the output itself
PAYLOAD = "payload"
_LOCK_TEXT = "edgebyoc output lock\n"


def _describe(err: OSError) -> str:
    return f"{err.strerror or type(err).__name__}" + (f" ({err.filename})" if err.filename
                                                      else "")


def lock_path(target: Path) -> Path:
    digest = hashlib.sha256(target.name.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return target.parent / f"{RESERVED_PREFIX}lock-{digest}"


@contextlib.contextmanager
def output_lock(target: Path, what: str = "output",
                error: type[EdgebyocError] = EdgebyocError) -> Iterator[None]:
    """Hold the one-writer lock of ``target`` (a sibling lock file with a reserved name);
    ``error`` if another writer holds it. The lock file is removed afterwards, and a
    file of that name with other content than edgebyoc's is refused, never overwritten."""
    import fcntl

    path = lock_path(target)
    for _ in range(16):  # another process may remove the file between our open and flock
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            os.write(fd, _LOCK_TEXT.encode())
        except FileExistsError:
            try:
                fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
            except FileNotFoundError:
                continue
            except OSError as err:
                raise EdgebyocError(f"{path}: exists and is not edgebyoc's lock file "
                                    f"({_describe(err)}); move it away") from err
            if os.read(fd, 64) != _LOCK_TEXT.encode():
                os.close(fd)
                raise EdgebyocError(f"{path}: a file of that name exists and is not "
                                    f"edgebyoc's lock file; edgebyoc reserves names starting "
                                    f"with {RESERVED_PREFIX} beside its outputs: move it away")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            os.close(fd)
            raise error(f"{target}: another edgebyoc process is writing this {what}; wait "
                        f"for it or choose another output") from err
        try:
            same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # removed by its previous holder after we opened it: take a new one
            os.close(fd)
            continue
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
            os.close(fd)  # closing releases the lock
        return
    raise error(f"{target}: could not take its lock {path} (contended)")


def _marker(folder: Path) -> dict | None:
    """A work folder's marker, or ``None`` when ``folder`` is not one of edgebyoc's."""
    try:
        if folder.is_symlink() or not folder.is_dir():
            return None
        marker = folder / MARKER
        if marker.is_symlink():
            return None
        data = json.loads(marker.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) and data.get("edgebyoc") in ("new", "old") \
        and isinstance(data.get("of"), str) else None


def work_folders(target: Path, role: str) -> list[Path]:
    """edgebyoc's work folders of ``role`` serving ``target``: reserved name and marker."""
    prefix = f"{RESERVED_PREFIX}{role}-"
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return []
    found = []
    for entry in entries:
        if entry.name.startswith(prefix):
            marker = _marker(Path(entry.path))
            if marker is not None and marker["edgebyoc"] == role and marker["of"] == target.name:
                found.append(Path(entry.path))
    return sorted(found)


def _new_work_folder(target: Path, role: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix=f"{RESERVED_PREFIX}{role}-", dir=target.parent))
    (folder / MARKER).write_text(json.dumps({"edgebyoc": role, "of": target.name,
                                             "pid": os.getpid()}) + "\n")
    return folder


def recover(target: Path) -> None:
    """Finish or undo an interrupted replacement of ``target`` (call with its lock held): put
    the old folder back when the new one never arrived; remove this output's stale work
    folders. Nothing without edgebyoc's marker is touched."""
    for backup in work_folders(target, "old"):
        payload = backup / PAYLOAD
        if not os.path.lexists(target) and payload.is_dir() and not payload.is_symlink():
            payload.rename(target)
        shutil.rmtree(backup, ignore_errors=True)
    for staging in work_folders(target, "new"):
        shutil.rmtree(staging, ignore_errors=True)


def recover_unlocked(target: Path) -> None:
    """``recover`` for a reader (``load``) that finds no ``target``: only when no writer holds
    its lock (a writer recovers by itself)."""
    if os.path.lexists(target) or not work_folders(target, "old"):
        return
    try:
        with output_lock(target):
            recover(target)
    except EdgebyocError:
        pass


def replace_directory(target: str | os.PathLike, fill: Callable[[Path], None],
                      may_replace: Callable[[Path], bool], what: str = "output",
                      error: type[EdgebyocError] = EdgebyocError) -> Path:
    """Write a folder at ``target`` atomically: ``fill(folder)`` writes its content into a
    fresh work folder, which is then renamed into place. An existing ``target`` is replaced
    only when ``may_replace(target)`` says it is edgebyoc's own (else ``EdgebyocError``,
    nothing touched; raised as ``error``). Returns the absolute target path."""
    target = Path(os.path.abspath(os.fspath(target)))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            raise error(f"{target}: is a symbolic link; write the {what} to a real folder")
        with output_lock(target, what, error):
            recover(target)
            if target.exists() and not (target.is_dir() and may_replace(target)):
                raise error(f"{target}: exists and is not an edgebyoc {what} (only "
                            f"edgebyoc's own files may be replaced); refusing to overwrite it")
            staging = _new_work_folder(target, "new")
            try:
                payload = staging / PAYLOAD
                payload.mkdir()
                fill(payload)
                if target.exists():
                    backup = _new_work_folder(target, "old")
                    target.rename(backup / PAYLOAD)  # a kill from here on: see ``recover``
                    payload.rename(target)
                    shutil.rmtree(backup, ignore_errors=True)
                else:
                    payload.rename(target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except OSError as err:
        raise error(f"{target}: cannot write the {what}: {_describe(err)}") from err
    return target


def check_output_directory(target: str | os.PathLike, may_replace: Callable[[Path], bool],
                           what: str = "output",
                           error: type[EdgebyocError] = EdgebyocError) -> Path:
    """Check before any work that ``replace_directory`` can write ``target``: not a link or a
    file, not a folder of the user's, its nearest existing ancestor a writable folder, no
    file of the user's in the way of its lock."""
    target = Path(os.path.abspath(os.fspath(target)))
    if target.is_symlink():
        raise error(f"{target}: is a symbolic link; write the {what} to a real folder")
    if target.exists() and not target.is_dir():
        raise error(f"{target}: is a file, not a folder for the {what}")
    if target.is_dir() and not may_replace(target):
        raise error(f"{target}: exists and is not an edgebyoc {what} (only edgebyoc's own "
                    f"files may be replaced); refusing to overwrite it")
    ancestor = target.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise error(f"{target}: cannot write the {what}: {ancestor} is not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise error(f"{target}: cannot write the {what}: {ancestor} is not writable")
    lock = lock_path(target)
    if os.path.lexists(lock):
        try:
            ours = not lock.is_symlink() and lock.read_bytes()[:64] == _LOCK_TEXT.encode()
        except OSError:
            ours = False
        if not ours:
            raise error(f"{lock}: a file of that name exists and is not edgebyoc's lock file; "
                        f"edgebyoc reserves names starting with {RESERVED_PREFIX} beside its "
                        f"outputs: move it away")
    return target


def check_writable_file(path: str | os.PathLike, what: str,
                        suffixes: tuple[str, ...] = ()) -> Path:
    """Check before any work that a file can be written at ``path``: its folder exists and is
    writable, it is not a folder, and (when given) its suffix is one of ``suffixes``."""
    file = Path(path)
    if suffixes and file.suffix.lower() not in suffixes:
        raise EdgebyocError(f"{what} {file}: give a file name ending in "
                            f"{' or '.join(suffixes)}")
    if file.is_dir():
        raise EdgebyocError(f"{what} {file}: is a folder, not a file")
    parent = file.parent if str(file.parent) else Path(".")
    if not parent.is_dir():
        raise EdgebyocError(f"{what} {file}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise EdgebyocError(f"{what} {file}: the folder {parent} is not writable")
    return file


def write_file_atomically(path: str | os.PathLike, write: Callable[[Path], None],
                          what: str = "file") -> Path:
    """Write ``path`` through ``write(temporary_path)`` and rename it into place: a failure
    (a full disk) leaves the previous file, or none, and no partial one."""
    file = Path(path)
    parent = file.parent if str(file.parent) else Path(".")
    handle, temporary = tempfile.mkstemp(prefix=f"{RESERVED_PREFIX}new-", dir=parent,
                                         suffix=file.suffix)
    os.close(handle)
    try:
        write(Path(temporary))
        os.chmod(temporary, 0o666 & ~_UMASK)
        os.replace(temporary, file)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        reason = "the disk is full" if err.errno == errno.ENOSPC else _describe(err)
        raise EdgebyocError(f"cannot write {what} {file}: {reason}") from err
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return file


def _read_umask() -> int:
    mask = os.umask(0o022)  # read once, at import, before any thread could race with it
    os.umask(mask)
    return mask


_UMASK = _read_umask()
