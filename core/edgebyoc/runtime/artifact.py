"""The artifact: a directory holding everything needed to run a compiled model, and its loader.

Layout::

    <dir>/manifest.json   format version, model signature, target and options, tool and plugin
                          versions, SHA-256 of every other file
    <dir>/host.so         the host library: Relax VM bytecode, host kernels, linked C regions
    <dir>/constants.bin   every model constant once (table in the manifest, see constants.py)
    <dir>/regions/        JSON-graph and blob payloads of regions run by plugin loaders
    <dir>/report.json     the compile report (also rendered as report.md)
    <dir>/report.md

An artifact is written into a work folder beside it and renamed into place at the end, so a
failed or interrupted compile never leaves a half-written artifact behind, and nothing of the
user's beside it is touched (``safe_output``: reserved names, markers, one lock per output).

Loading treats the directory as untrusted input before anything is executed: the manifest's
schema, a digest over its whole content (``digest``: SHA-256 of the manifest without it, which
holds every file's hash, so neither a deleted key nor a shifted constant offset goes unnoticed),
every file confined to the directory (relative paths, no ``..``, regular files, no symlinks),
no unlisted file (but the build products of ``make`` in ``c_project/``, which edgebyoc never
reads), and the constant table within ``constants.bin``. These checks catch
corruption and tampering with the files; they do not make a foreign artifact safe: loading
runs its native code (``host.so``), as loading any shared library or pickle does, so load
only artifacts you trust (compare the manifest's digest with the one you expect, see
``artifact_digest``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from ..errors import ArtifactError, first_line
from .host_runner import HostRunner  # noqa: F401 - re-exported: the loader's runner
from .safe_output import check_output_directory, recover_unlocked, replace_directory

FORMAT_VERSION = 2
MANIFEST = "manifest.json"
HOST_LIBRARY = "host.so"
#: the deployable C project's folder: users build in it (make), so files it does not list are
#: build products, never read by edgebyoc; its listed files are checked like any other
BUILD_TREE = "c_project/"

#: the manifest's required keys and their types (``read_manifest`` checks them)
MANIFEST_SCHEMA = {"format_version": int, "digest": str, "files": dict, "constants": list,
                   "inputs": list, "outputs": list, "target": dict, "host": dict,
                   "external": list}
_CONSTANT_ROW = {"name": str, "dtype": str, "shape": list, "offset": int, "nbytes": int}


def artifact_digest(manifest: Mapping[str, Any]) -> str:
    """SHA-256 of a manifest's content without its ``digest`` key (canonical JSON): one hash
    covering the manifest and, through its ``files`` hashes, every file of the artifact."""
    content = {k: v for k, v in manifest.items() if k != "digest"}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def _quiet_native_stderr() -> Iterator[None]:
    """Silence TVM's C++ log lines (one warning per constant on export) on file descriptor 2."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def write_artifact(directory: str | os.PathLike, executable: Any, manifest: dict[str, Any],
                   files: Mapping[str, bytes | str],
                   write_constants: Callable[[Path], list] | None = None,
                   export_options: list[str] | None = None) -> Path:
    """Write ``executable`` (a TVM Executable), ``files`` and the manifest atomically.

    ``write_constants(dir)`` writes the constants file and returns its table (stored in the
    manifest as ``constants``); ``export_options`` go to the compiler linking generated C.
    ``manifest`` gets ``format_version`` and ``files`` (name -> SHA-256) added. An existing
    artifact at ``directory`` is replaced only once the new one is complete, and nothing but
    an artifact is ever replaced (``safe_output.replace_directory``).
    """
    def fill(staging: Path) -> None:
        with _quiet_native_stderr():
            executable.export_library(str(staging / HOST_LIBRARY), options=export_options or [])
        for name, content in files.items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            mode = "wb" if isinstance(content, bytes) else "w"
            with open(staging / name, mode) as handle:
                handle.write(content)
        table = write_constants(staging) if write_constants is not None else []
        hashes = {p.relative_to(staging).as_posix(): sha256_of(p)
                  for p in sorted(staging.rglob("*")) if p.is_file()}
        full = dict(manifest, format_version=FORMAT_VERSION, constants=table, files=hashes)
        full["digest"] = artifact_digest(full)
        (staging / MANIFEST).write_text(json.dumps(full, indent=2) + "\n")

    return replace_directory(directory, fill, _is_artifact, "artifact", ArtifactError)


def check_artifact_directory(directory: str | os.PathLike) -> Path:
    """Check before compiling that an artifact can be written at ``directory`` (see
    ``safe_output.check_output_directory``)."""
    return check_output_directory(directory, _is_artifact, "artifact", ArtifactError)


def copy_artifact(source: Path, directory: str | os.PathLike) -> Path:
    """Copy the checked artifact ``source`` to ``directory``, as atomically as a write."""
    def fill(staging: Path) -> None:
        shutil.copytree(source, staging, dirs_exist_ok=True, symlinks=True)

    return replace_directory(directory, fill, _is_artifact, "artifact", ArtifactError)


def _is_artifact(directory: Path) -> bool:
    """Whether ``directory`` holds an edgebyoc artifact and nothing else (or nothing)."""
    if not any(directory.iterdir()):
        return True
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        listed = set(manifest["files"]) | {MANIFEST}
        int(manifest["format_version"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return False
    present = {p.relative_to(directory).as_posix() for p in directory.rglob("*")
               if not p.is_dir()}
    return all(name in listed or name.startswith(BUILD_TREE) for name in present)


def read_manifest(directory: str | os.PathLike) -> dict[str, Any]:
    """Read and check an artifact's manifest and files (see the module docstring); one-line
    ``ArtifactError`` on any problem."""
    root = Path(directory)
    path = root / MANIFEST
    recover_unlocked(Path(os.path.abspath(root)))  # a replacement killed between its renames
    if root.exists() and not root.is_dir():
        raise ArtifactError(f"{root}: is a file, not an artifact directory")
    if not root.is_dir():
        raise ArtifactError(f"{root}: no such artifact directory")
    if not path.is_file() or path.is_symlink():
        raise ArtifactError(f"{root}: not an edgebyoc artifact (no regular {MANIFEST})")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise ArtifactError(f"{path}: corrupted manifest ({first_line(err)})") from err
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{path}: corrupted manifest (not a JSON object)")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ArtifactError(f"{root}: artifact format {manifest.get('format_version')!r}, this "
                            f"edgebyoc reads format {FORMAT_VERSION}; recompile the model")
    for key, kind in MANIFEST_SCHEMA.items():
        if not isinstance(manifest.get(key), kind):
            raise ArtifactError(f"{path}: malformed manifest: {key!r} is missing or not a "
                                f"{kind.__name__}")
    if manifest["digest"] != artifact_digest(manifest):
        raise ArtifactError(f"{path}: the manifest does not match its digest (modified or "
                            f"corrupted)")
    listed = _check_files(root, manifest["files"])
    present = {p.relative_to(root).as_posix() for p in root.rglob("*")
               if (p.is_file() or p.is_symlink()) and p.name != MANIFEST}
    unlisted = sorted(name for name in present - listed if not name.startswith(BUILD_TREE))
    if unlisted:
        raise ArtifactError(f"{root}: {unlisted[0]} is not part of the artifact (not in "
                            f"{MANIFEST})")
    for name in [HOST_LIBRARY] + [r.get("file") for r in manifest["external"]
                                  if isinstance(r, dict)]:
        if name not in listed:
            raise ArtifactError(f"{path}: malformed manifest: {name!r} is not among its files")
    _check_constant_table(root, manifest["constants"], listed)
    _check_signature(path, manifest)
    _check_sections(path, manifest)
    return manifest


#: the element types a model input or output may have
TENSOR_DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                           "uint32", "uint64", "float16", "float32", "float64"})
#: the most elements an input or output of an artifact may have (``frontend`` compiles no
#: larger input: an int32 index space)
MAX_TENSOR_ELEMENTS = 2**31 - 1


def _check_signature(path: Path, manifest: Mapping[str, Any]) -> None:
    """Inputs and outputs as a compile writes them: named once each, a known element type,
    whole dimensions (outputs may have data-dependent ones, -1), a size the runtime can hold;
    at least one output."""
    for role in ("inputs", "outputs"):
        rows = manifest[role]
        if role == "outputs" and not rows:
            raise ArtifactError(f"{path}: malformed manifest: the model has no outputs")
        names = set()
        for row in rows:
            if not isinstance(row, dict) or not isinstance(row.get("name"), str) \
                    or not row["name"] or row["name"] in names:
                raise ArtifactError(f"{path}: malformed manifest: {role} entry "
                                    f"{str(row)[:60]} (a unique name is needed)")
            names.add(row["name"])
            dtype, shape = row.get("dtype"), row.get("shape")
            if dtype not in TENSOR_DTYPES:
                raise ArtifactError(f"{path}: malformed manifest: {role[:-1]} {row['name']!r} "
                                    f"has element type {str(dtype)[:30]!r} (allowed: "
                                    f"{', '.join(sorted(TENSOR_DTYPES))})")
            low = -1 if role == "outputs" else 0
            if not isinstance(shape, list) or len(shape) > 32 or not all(
                    isinstance(d, int) and not isinstance(d, bool) and d >= low
                    for d in shape) or np.prod([max(d, 1) for d in shape], dtype=object) \
                    > MAX_TENSOR_ELEMENTS:
                raise ArtifactError(f"{path}: malformed manifest: {role[:-1]} {row['name']!r} "
                                    f"has shape {str(shape)[:60]} (at most 32 dimensions of "
                                    f"at least {low}, at most {MAX_TENSOR_ELEMENTS} elements)")
            bound, extents = row.get("index_bound", 0), row.get("index_extents", [])
            if not isinstance(bound, int) or isinstance(bound, bool) or \
                    not 0 <= bound <= MAX_TENSOR_ELEMENTS or \
                    not isinstance(extents, list) or not all(
                        isinstance(e, int) and not isinstance(e, bool)
                        and 0 < e <= MAX_TENSOR_ELEMENTS for e in extents) or \
                    (extents and (not shape or shape[-1] != len(extents))) or \
                    ((bound or extents) and not dtype.startswith(("int", "uint"))):
                raise ArtifactError(f"{path}: malformed manifest: input {row['name']!r} has "
                                    f"index bounds {str(bound)[:30]} / {str(extents)[:30]}")


def _check_sections(path: Path, manifest: Mapping[str, Any]) -> None:
    """The sections the loader reads have the fields and types a compile writes."""
    target, host = manifest["target"], manifest["host"]
    if not isinstance(target.get("name"), str) or not isinstance(target.get("options"), dict):
        raise ArtifactError(f"{path}: malformed manifest: 'target' needs a name and options")
    if not isinstance(host.get("cpu"), str):
        raise ArtifactError(f"{path}: malformed manifest: 'host' needs the cpu it was built for")
    fields = {"symbol": str, "module": str, "kind": str, "loader_kind": str, "file": str,
              "constants": list, "num_outputs": int}
    for row in manifest["external"]:
        if not isinstance(row, dict) or any(not isinstance(row.get(k), t)
                                            for k, t in fields.items()):
            raise ArtifactError(f"{path}: malformed manifest: region entry {str(row)[:60]}")
    for key in ("c_source_regions",):
        if not isinstance(manifest.get(key, []), list):
            raise ArtifactError(f"{path}: malformed manifest: {key!r} is not a list")
    if not isinstance(manifest.get("c_project") or {}, dict):
        raise ArtifactError(f"{path}: malformed manifest: 'c_project' is not an object")


def read_report(root: Path) -> dict[str, Any]:
    """The artifact's ``report.json`` (listed and hashed, so checked by ``read_manifest``)
    parsed: an object with its model and target, or ``ArtifactError`` (a nesting too deep for
    the parser included)."""
    path = root / "report.json"
    try:
        report = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ArtifactError(f"{path}: unreadable report ({first_line(err)})") from err
    if not isinstance(report, dict) or not isinstance(report.get("model"), dict) \
            or not isinstance(report.get("target"), dict):
        raise ArtifactError(f"{path}: malformed report (no model or target section)")
    return report


def _check_files(root: Path, files: Mapping[str, Any]) -> set[str]:
    """Each listed file inside ``root``, regular, not a symlink, matching its hash."""
    base = root.resolve()
    for name, expected in files.items():
        parts = Path(name).parts
        if not isinstance(name, str) or not name or Path(name).is_absolute() or ".." in parts \
                or not isinstance(expected, str) or len(expected) != 64:
            raise ArtifactError(f"{root}: malformed manifest: file entry {name!r} is not a "
                                f"path inside the artifact with its SHA-256")
        file = root / name
        if file.is_symlink() or (file.exists() and not file.resolve().is_relative_to(base)):
            raise ArtifactError(f"{root}: {name} is a link; artifacts hold regular files only")
        if not file.exists():
            raise ArtifactError(f"{root}: incomplete artifact, {name} is missing")
        if not file.is_file():
            raise ArtifactError(f"{root}: {name} is not a regular file")
        if sha256_of(file) != expected:
            raise ArtifactError(f"{root}: {name} does not match its hash in {MANIFEST} "
                                f"(modified or corrupted)")
    return set(files)


def _check_constant_table(root: Path, table: list, listed: set[str]) -> None:
    """Every row well formed, aligned, not overlapping another and within ``constants.bin``."""
    from .constants import ALIGNMENT, CONSTANTS_FILE

    if not table:
        return
    if CONSTANTS_FILE not in listed:
        raise ArtifactError(f"{root}: malformed manifest: constants without {CONSTANTS_FILE}")
    itemsize = {}
    for index, row in enumerate(table):
        if not isinstance(row, dict) or any(not isinstance(row.get(k), t)
                                            for k, t in _CONSTANT_ROW.items()):
            raise ArtifactError(f"{root}: malformed manifest: constant entry {str(row)[:60]}")
        try:
            itemsize[index] = np.dtype(row["dtype"]).itemsize
        except TypeError as err:
            raise ArtifactError(f"{root}: constant {row['name']!r}: unknown dtype "
                                f"{row['dtype']!r}") from err
    size, end = (root / CONSTANTS_FILE).stat().st_size, 0
    for index in sorted(range(len(table)), key=lambda i: table[i]["offset"]):
        row = table[index]
        count = int(np.prod(row["shape"])) if row["shape"] else 1
        if row["offset"] < end or row["offset"] % ALIGNMENT \
                or count * itemsize[index] != row["nbytes"] \
                or row["offset"] + row["nbytes"] > size:
            raise ArtifactError(f"{root}: constant {row['name']!r} lies outside "
                                f"{CONSTANTS_FILE}, overlaps another, is not {ALIGNMENT}-byte "
                                f"aligned or does not match its shape")
        end = row["offset"] + row["nbytes"]

