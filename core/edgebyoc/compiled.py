"""A compiled model: run it, read its report, save it as an artifact directory; and ``load``,
which reads a saved artifact back after checking it (``runtime.artifact``)."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .codegen.external import compile_options
from .errors import ArtifactError, EdgebyocError, first_line
from .frontend import ImportedModel, TensorSpec, random_inputs
from .plugins import PluginRegistry, default_registry
from .report import render_markdown
from .resources import check_memory, configure_thread_pool, format_bytes
from .runtime.artifact import (HOST_LIBRARY, HostRunner, copy_artifact, read_manifest,
                               read_report, write_artifact)
from .runtime.constants import ConstantTable, load_constants
from .runtime.external import ExternalRegion, bind_regions, loaders_for
from .session import TVM_LOCK


def check_run_memory(report: Mapping[str, Any], inputs: Sequence[TensorSpec],
                     outputs: Sequence[TensorSpec], what: str) -> None:
    """``resources.ResourceError`` when running the model would need more memory than the
    machine has: its planned activation peak, its constants, its inputs and outputs."""
    summary = report.get("summary") or {}
    peak = summary.get("peak_activation_bytes") or 0
    constants = summary.get("constant_bytes") or 0
    io = sum(max(1, math.prod(max(d, 1) for d in s.shape)) * np.dtype(s.dtype).itemsize
             for s in [*inputs, *outputs])
    if not all(isinstance(v, (int, float)) for v in (peak, constants)):
        return
    check_memory(f"{what}: running the model (activation peak {format_bytes(peak)}, "
                 f"constants {format_bytes(constants)}, inputs and outputs "
                 f"{format_bytes(io)})", int(peak + constants + io))



class CompiledModel:
    """A compiled model: run it, read its report, save it as an artifact directory.

    Returned by ``edgebyoc.compile`` (in memory) and by ``edgebyoc.load`` (from a directory).
    """

    def __init__(self, executable: Any, inputs: list[TensorSpec], outputs: list[TensorSpec],
                 report: dict[str, Any], manifest: dict[str, Any],
                 constants: Mapping[str, Any] | None = None,
                 constant_table: ConstantTable | None = None,
                 external: list[ExternalRegion] | None = None,
                 payloads: Mapping[str, Any] | None = None,
                 imported: ImportedModel | None = None, directory: Path | None = None,
                 registry: PluginRegistry | None = None, project=None,
                 regions: Mapping[str, Any] | None = None,
                 pricing: list | None = None):
        self.executable = executable
        self.inputs, self.outputs = inputs, outputs
        self.report, self.manifest = report, manifest
        self.constants = dict(constants or {})
        self._constant_table = constant_table
        self.external = list(external or [])
        self.payloads = dict(payloads or {})
        self.imported = imported
        self.directory = directory
        self._registry = registry
        self.project = project  # the deployable C project (``codegen.cproject``), if any
        self._runner: HostRunner | None = None
        self._scratch: tempfile.TemporaryDirectory | None = None
        self.engines: dict[str, Any] = {}  # JSON / blob regions' engines, once bound
        #: symbol -> the ``Region`` handed to codegen (compiled in this process only)
        self.regions = dict(regions or {})
        #: the priced parts, ``(module or None, workload, schedule)`` (this process only; the
        #: calibration fit re-prices them)
        self.pricing = list(pricing or [])

    @property
    def runner(self) -> HostRunner:
        if self._runner is None:
            module = self.executable
            if self.directory is None and (self.manifest.get("c_source_regions")
                                           or self.manifest.get("c_project")):
                # generated C must be compiled and linked before the VM can call it
                self._scratch = tempfile.TemporaryDirectory(prefix="edgebyoc-")
                path = os.path.join(self._scratch.name, HOST_LIBRARY)
                with TVM_LOCK:
                    self.executable.export_library(
                        path, options=compile_options(self.manifest["host"]["cpu"]))
                import tvm
                module = tvm.runtime.load_module(path)
            if self.external:
                registry = self._registry or default_registry()
                loaders = loaders_for(registry, self.manifest["target"]["name"])
                self.engines = bind_regions(self.external, self.payloads, self.constants, loaders)
            check_run_memory(self.report, self.inputs, self.outputs,
                             str(self.directory or self.report["model"].get("name", "model")))
            names = [row["name"] for row in self.manifest.get("constants", [])] or \
                list(self.constants)
            self._runner = HostRunner(module, self.inputs, self.outputs,
                                      [self.constants[n] for n in names])
        return self._runner

    def run(self, inputs: Any) -> dict[str, Any]:
        """Run on ``inputs`` (dict by name, list in order, or one array); outputs by name."""
        return self.runner.run(inputs)

    def save(self, directory: str | os.PathLike) -> Path:
        """Write the artifact directory (atomically); returns its path."""
        if self.directory is not None:  # loaded by ``load``: copy the checked files
            target = Path(directory).resolve()
            if target != self.directory.resolve():
                read_manifest(self.directory)  # still the artifact that was loaded
                copy_artifact(self.directory, target)
            return target
        table = self._constant_table or ConstantTable()
        files: dict[str, Any] = {"report.json": json.dumps(self.report, indent=2) + "\n",
                                 "report.md": render_markdown(self.report)}
        for region in self.external:
            files[region.file] = self.payloads[region.symbol]
        if self.project is not None:
            files.update({f"c_project/{k}": v for k, v in self.project.project_files().items()})
        with TVM_LOCK:
            return write_artifact(directory, self.executable, self.manifest, files,
                                  write_constants=table.write,
                                  export_options=compile_options(self.manifest["host"]["cpu"]))

    export = save

    def project_files(self) -> dict[str, str]:
        """The deployable C project's files (relative path -> text): the compile's, or the
        artifact's ``c_project/`` after ``load``. ``EdgebyocError`` if there is none."""
        if self.project is not None:
            return self.project.project_files()
        folder = self.directory / "c_project" if self.directory is not None else None
        if folder is None or not folder.is_dir():
            target = self.report.get("target", {}).get("name", "?")
            raise EdgebyocError(f"target {target!r} deploys no C project (only targets with a "
                                f"C project, such as gap9 and diana, build for an MCU)")
        return {p.relative_to(folder).as_posix(): p.read_text()
                for p in sorted(folder.rglob("*")) if p.is_file()}

    def check_on_qemu(self, mcu: str, inputs: Any = None, seed: int = 0,
                      record: bool = True):
        """Build the C project for ``mcu`` (``cortex-m4``, ``cortex-m55``, ``rv32imc``), run it
        under QEMU on ``inputs`` (seeded random inputs if None) and compare its outputs with
        this model's ``run``: integer outputs bit-exactly, float ones within 1e-5 of the
        largest reference value (the cross compiler's libm may round differently). Returns
        ``(codegen.mcu.QemuRun, comparison)``, the comparison a list of
        (name, exact, max abs error) per output; with ``record`` the run's flash, RAM and
        stack go into ``report["mcu_builds"]`` (and so into a saved report). Raises
        ``VerificationError`` when an output differs."""
        from .codegen.mcu import run_on_qemu
        from .errors import VerificationError

        given = random_inputs(self.inputs, seed=seed) if inputs is None else inputs
        arrays = self.runner.check_inputs(given)
        expected = self.run(arrays)
        run = run_on_qemu(self.project_files(), mcu, arrays,
                          [(s.dtype, s.shape) for s in self.outputs])
        comparison = []
        for (name, want), got in zip(expected.items(), run.outputs):
            want = np.asarray(want)
            error = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)),
                                 initial=0.0))
            exact = np.array_equal(got, want)
            if np.issubdtype(want.dtype, np.floating):
                scale = float(np.max(np.abs(want), initial=0.0)) or 1.0
                good = exact or error <= 1e-5 * scale
            else:
                good = exact
            comparison.append((name, exact, error, good))
        if record:
            builds = [b for b in self.report.get("mcu_builds", []) if b["target"] != run.target]
            self.report["mcu_builds"] = builds + [
                {**run.to_dict(), "outputs_match": all(c[3] for c in comparison),
                 "bit_exact": all(c[1] for c in comparison)}]
        bad = [c for c in comparison if not c[3]]
        if bad:
            raise VerificationError(
                f"the C project on {mcu} (QEMU {run.board}) differs from the artifact: output "
                f"{bad[0][0]!r} max abs error {bad[0][2]:.3g}")
        return run, [(name, exact, error) for name, exact, error, _ in comparison]

    def __repr__(self) -> str:
        return (f"CompiledModel({self.report['model']['name']!r}, "
                f"target={self.report['target']['name']!r})")


def load(directory: str | os.PathLike, registry: PluginRegistry | None = None) -> CompiledModel:
    """Load an artifact written by ``CompiledModel.save`` after checking its integrity.

    The checks (``runtime.artifact.read_manifest``) catch corrupted and tampered files, but
    loading runs the artifact's native code: load only artifacts you trust.
    """
    import tvm

    configure_thread_pool()
    root = Path(directory)
    manifest = read_manifest(root)
    try:
        report = read_report(root)
        external = [ExternalRegion.from_dict(d) for d in manifest["external"]]
        inputs = [TensorSpec.from_dict(d) for d in manifest["inputs"]]
        outputs = [TensorSpec.from_dict(d) for d in manifest["outputs"]]
        constants = load_constants(root, manifest["constants"])
        payloads = {}
        for region in external:
            data = (root / region.file).read_bytes()
            payloads[region.symbol] = data.decode() if region.kind == "json_graph" else data
    except (KeyError, TypeError, ValueError, AttributeError, OSError) as err:
        raise ArtifactError(f"{root}: malformed artifact: {type(err).__name__}: "
                            f"{first_line(err)}") from err
    try:
        module = tvm.runtime.load_module(str(root / HOST_LIBRARY))
    except Exception as err:  # noqa: BLE001
        raise EdgebyocError(f"{root}: cannot load {HOST_LIBRARY}: {first_line(err)}") from err
    return CompiledModel(module, inputs, outputs, report, manifest, constants=constants,
                         external=external, payloads=payloads, directory=root,
                         registry=registry)
