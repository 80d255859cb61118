"""The artifact: a directory holding everything needed to run a compiled model, and its loader.

Layout::

    <dir>/manifest.json   format version, model signature, target and options, tool and plugin
                          versions, SHA-256 of every other file
    <dir>/host.so         the host library: Relax VM bytecode, host kernels, linked C regions
    <dir>/constants.bin   every model constant once (table in the manifest, see constants.py)
    <dir>/regions/        JSON-graph and blob payloads of regions run by plugin loaders
    <dir>/report.json     the compile report (also rendered as report.md)
    <dir>/report.md

An artifact is written into a temporary sibling directory and renamed into place at the end, so a
failed or interrupted compile never leaves a half-written artifact behind. Loading checks the
format version and every hash before anything is executed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from ..errors import ArtifactError, EdgebyocError, InputError, first_line
from ..frontend import TensorSpec

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
HOST_LIBRARY = "host.so"


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
    artifact at ``directory`` is replaced only once the new one is complete.
    """
    target = Path(directory).resolve()
    if target.exists() and not (target / MANIFEST).exists() and any(target.iterdir()):
        raise ArtifactError(f"{target}: exists and is not an edgebyoc artifact; refusing to "
                            f"overwrite it")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
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
        (staging / MANIFEST).write_text(json.dumps(full, indent=2) + "\n")
        if target.exists():
            backup = target.with_name(f".{target.name}.old")
            shutil.rmtree(backup, ignore_errors=True)
            target.rename(backup)
            staging.rename(target)
            shutil.rmtree(backup, ignore_errors=True)
        else:
            staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def read_manifest(directory: str | os.PathLike) -> dict[str, Any]:
    """Read and check an artifact's manifest and file hashes; ``ArtifactError`` on any problem."""
    root = Path(directory)
    path = root / MANIFEST
    if not root.is_dir():
        raise ArtifactError(f"{root}: no such artifact directory")
    if not path.exists():
        raise ArtifactError(f"{root}: not an edgebyoc artifact (no {MANIFEST})")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ArtifactError(f"{path}: corrupted manifest ({err})") from err
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ArtifactError(f"{root}: artifact format {manifest.get('format_version')!r}, this "
                            f"edgebyoc reads format {FORMAT_VERSION}; recompile the model")
    for name, expected in manifest.get("files", {}).items():
        file = root / name
        if not file.exists():
            raise ArtifactError(f"{root}: incomplete artifact, {name} is missing")
        if sha256_of(file) != expected:
            raise ArtifactError(f"{root}: {name} does not match its hash in {MANIFEST} "
                                f"(modified or corrupted)")
    return manifest


def _to_numpy(value: Any) -> np.ndarray:
    """A VM result as numpy: tensors as they are, shape values as int64 vectors."""
    if hasattr(value, "numpy"):
        return value.numpy()
    return np.asarray(list(value), dtype=np.int64)


class HostRunner:
    """Runs a host executable on the Relax VM with checked inputs; returns numpy outputs."""

    def __init__(self, module: Any, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec],
                 constants: Sequence[np.ndarray] = ()):
        import tvm
        from tvm import relax

        self.inputs, self.outputs = list(inputs), list(outputs)
        self._tvm = tvm
        self._vm = relax.VirtualMachine(module, tvm.cpu())
        # the metadata module's data entries: allocated once, passed to every run
        self._constants = [tvm.runtime.tensor(np.ascontiguousarray(c)) for c in constants]

    def check_inputs(self, given: Any) -> list[np.ndarray]:
        """Normalise ``given`` (dict by name, list in order, or one array) to ordered arrays."""
        if isinstance(given, np.ndarray):
            given = [given]
        if isinstance(given, Mapping):
            missing = [s.name for s in self.inputs if s.name not in given]
            extra = [k for k in given if k not in {s.name for s in self.inputs}]
            if missing or extra:
                raise InputError(f"inputs do not match the model: missing {missing or 'none'}, "
                                 f"unknown {extra or 'none'} (model inputs: "
                                 f"{[s.name for s in self.inputs]})")
            arrays = [given[s.name] for s in self.inputs]
        else:
            arrays = list(given)
            if len(arrays) != len(self.inputs):
                raise InputError(f"the model takes {len(self.inputs)} input(s) "
                                 f"({[s.name for s in self.inputs]}), got {len(arrays)}")
        checked = []
        for spec, array in zip(self.inputs, arrays):
            array = np.asarray(array)
            if tuple(array.shape) != spec.shape:
                raise InputError(f"input {spec.name!r}: shape {list(array.shape)}, the model "
                                 f"expects {list(spec.shape)}")
            if array.dtype != np.dtype(spec.dtype):
                if np.can_cast(array.dtype, spec.dtype, casting="same_kind"):
                    array = array.astype(spec.dtype)
                else:
                    raise InputError(f"input {spec.name!r}: dtype {array.dtype}, the model "
                                     f"expects {spec.dtype}")
            # not np.ascontiguousarray: it turns 0-d arrays into 1-d ones
            checked.append(array if array.flags.c_contiguous else array.copy(order="C"))
        return checked

    def run(self, given: Any) -> dict[str, np.ndarray]:
        arrays = self.check_inputs(given)
        try:
            result = self._vm["main"](*[self._tvm.runtime.tensor(a) for a in arrays],
                                      *self._constants)
        except Exception as err:  # noqa: BLE001 - a kernel or VM check failed at run time
            raise EdgebyocError(f"running the model failed: {type(err).__name__}: "
                                f"{first_line(err)}") from err
        values = [result] if len(self.outputs) == 1 else list(result)
        return {spec.name: _to_numpy(value) for spec, value in zip(self.outputs, values)}

    def time(self, given: Any, repeat: int = 10, number: int = 1) -> list[float]:
        """Per-run wall times in seconds (``repeat`` samples of ``number`` runs each)."""
        arrays = [self._tvm.runtime.tensor(a) for a in self.check_inputs(given)]
        evaluator = self._vm.time_evaluator("main", self._tvm.cpu(), number=number,
                                            repeat=repeat)
        return list(evaluator(*arrays, *self._constants).results)
