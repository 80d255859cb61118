"""The compile pipeline, one stage after another (DESIGN.md, "The compile pipeline").

    import     file / ModelProto / IRModule -> ImportedModel          (frontend.import_model)
    prepare    hardware-agnostic passes + the target's pre_partition transforms
    partition  every operator assigned to a module or to the host
    codegen    the host library (TVM LLVM backend with edgebyoc's CPU schedules)
    package    CompiledModel: runnable in memory, ``save(dir)`` writes the artifact

This version offloads nothing: it completes the host path. A target whose modules declare
patterns is refused in the partition stage with a clear error rather than silently run on the
host; targets whose modules declare no patterns compile entirely for the host.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

from . import __version__
from .codegen.host import build_host, host_cpu, host_target
from .errors import CompileError, EdgebyocError, TargetError, first_line
from .frontend import ImportedModel, InputShapes, TensorSpec, import_model
from .plugins import PluginRegistry, default_registry
from .report import build_report, operator_table, render_markdown
from .runtime.artifact import HOST_LIBRARY, HostRunner, read_manifest, write_artifact
from .target import Target


class StageClock:
    """Times the pipeline stages; prints each one to stderr when ``progress`` is on."""

    def __init__(self, progress: bool):
        self.progress = progress
        self.subject = ""  # the model, named in stage failures once known
        self.stages: list[dict[str, Any]] = []
        self._console = None
        if progress:
            from rich.console import Console
            self._console = Console(stderr=True)

    @contextmanager
    def __call__(self, name: str, detail: str = "") -> Iterator[None]:
        start = time.perf_counter()
        status = None
        if self._console is not None and self._console.is_terminal:
            status = self._console.status(f"{name} {detail}".strip())
            status.start()
        try:
            yield
        except EdgebyocError:
            raise
        except Exception as err:  # noqa: BLE001 - TVM raises many kinds; name the stage
            prefix = f"{self.subject}: " if self.subject else ""
            raise CompileError(f"{prefix}{name} stage failed: {type(err).__name__}: "
                               f"{first_line(err)}") from err
        finally:
            if status is not None:
                status.stop()
        seconds = time.perf_counter() - start
        self.stages.append({"name": name, "seconds": round(seconds, 3)})
        if self._console is not None:
            self._console.print(f"[green]✓[/green] {name:<10} {seconds:6.2f} s  {detail}",
                                highlight=False)


def prepare(mod, target: Target, registry: PluginRegistry):
    """Hardware-agnostic clean-up, then the target's ``pre_partition`` transforms."""
    from tvm import relax

    mod = relax.transform.FoldConstant()(mod)
    _reject_empty_constants(mod)
    for transform in _flatten(registry.call(target.name, "edgebyoc_transforms", target=target,
                                            stage="pre_partition")):
        try:
            mod = transform(mod)
        except Exception as err:  # noqa: BLE001
            raise CompileError(f"target {target.name!r}: pre_partition transform "
                               f"{getattr(transform, 'info', transform)} failed: "
                               f"{first_line(err)}") from err
    return mod


def _reject_empty_constants(mod) -> None:
    """TVM 0.27 writes zero-size constants into the executable but cannot read them back."""
    import tvm
    from tvm import relax

    empty = []

    def visit(expr):
        shape = getattr(getattr(expr, "ty", None), "shape", None)
        if isinstance(expr, tvm.ir.expr.Constant) and hasattr(shape, "values") \
                and any(getattr(d, "value", 1) == 0 for d in shape.values):
            empty.append([int(d) for d in shape.values])

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    if empty:
        raise CompileError(f"the model holds a zero-size constant (shape {empty[0]}), which "
                           f"TVM {tvm.__version__} cannot serialize; make that tensor an input")


def _flatten(results: Any) -> list:
    flat = []
    for item in results or []:
        flat.extend(item if isinstance(item, (list, tuple)) else [item])
    return flat


def partition(mod, target: Target, registry: PluginRegistry) -> list[dict[str, Any]]:
    """Assign every operator to a module or the host; returns the report's operator rows."""
    operators = operator_table(mod)
    patterned = []
    for module in target.modules:
        patterns = _flatten(registry.call(target.name, "edgebyoc_patterns", target=target,
                                          module=module))
        if patterns:
            patterned.append(module.name)
    if patterned:
        raise CompileError(
            f"target {target.name!r}: modules {', '.join(patterned)} declare patterns, but this "
            f"edgebyoc version has no offloading yet (the host path only); compile with "
            f"--target host")
    reason = ("host target" if not target.modules
              else f"no pattern of {', '.join(m.name for m in target.modules)}")
    for row in operators:
        row.update(module="host", reason=reason)
    return operators


def compile(model: Any, target: str = "host", options: Mapping[str, Any] | None = None,
            input_shapes: InputShapes | None = None,
            constant_inputs: Mapping[str, Any] | None = None,
            registry: PluginRegistry | None = None,
            progress: bool = False, schedules: bool = True,
            host_cpu_name: str | None = None) -> "CompiledModel":
    """Compile ``model`` for ``target``; see the module docstring for the stages.

    ``options`` are the target's options (strings are parsed); ``input_shapes`` fixes dynamic
    input dimensions; ``constant_inputs`` turns ONNX graph inputs into constants; ``schedules=False`` skips edgebyoc's CPU schedules (TVM's default loops);
    ``host_cpu_name`` overrides the LLVM CPU (``"generic"`` for a portable library).
    """
    registry = registry or default_registry()
    the_target = registry.target(target)
    try:
        resolved = the_target.resolve_options(options)
    except ValueError as err:
        raise TargetError(str(err)) from err
    clock = StageClock(progress)
    with clock("import", str(model) if isinstance(model, (str, os.PathLike)) else ""):
        imported = import_model(model, input_shapes, constant_inputs)
    clock.subject = imported.source
    with clock("prepare"):
        mod = prepare(imported.mod, the_target, registry)
    with clock("partition"):
        operators = partition(mod, the_target, registry)
    cpu = host_cpu_name or host_cpu()
    with clock("codegen", f"host library for {cpu}"):
        executable = build_host(mod, host_target(cpu), schedules=schedules)
    host = {"cpu": cpu, "schedules": schedules, "machine": platform.machine()}
    report = build_report(imported, the_target, resolved, operators, clock.stages, host)
    manifest = {
        "edgebyoc_version": __version__,
        "tvm_version": _tvm_version(),
        "model": report["model"],
        "target": {"name": the_target.name, "options": resolved,
                   "plugin": registry.owner(the_target.name) or None},
        "plugins": registry.versions(),
        "host": host,
        "inputs": [s.to_dict() for s in imported.inputs],
        "outputs": [s.to_dict() for s in imported.outputs],
    }
    return CompiledModel(executable, imported.inputs, imported.outputs, report, manifest,
                         imported=imported)


def _tvm_version() -> str:
    import tvm
    return tvm.__version__


class CompiledModel:
    """A compiled model: run it, read its report, save it as an artifact directory.

    Returned by ``edgebyoc.compile`` (in memory) and by ``edgebyoc.load`` (from a directory).
    """

    def __init__(self, executable: Any, inputs: list[TensorSpec], outputs: list[TensorSpec],
                 report: dict[str, Any], manifest: dict[str, Any],
                 imported: ImportedModel | None = None, directory: Path | None = None):
        self.executable = executable
        self.inputs, self.outputs = inputs, outputs
        self.report, self.manifest = report, manifest
        self.imported = imported
        self.directory = directory
        self._runner: HostRunner | None = None

    @property
    def runner(self) -> HostRunner:
        if self._runner is None:
            self._runner = HostRunner(self.executable, self.inputs, self.outputs)
        return self._runner

    def run(self, inputs: Any) -> dict[str, Any]:
        """Run on ``inputs`` (dict by name, list in order, or one array); outputs by name."""
        return self.runner.run(inputs)

    def save(self, directory: str | os.PathLike) -> Path:
        """Write the artifact directory (atomically); returns its path."""
        if self.directory is not None:  # loaded by ``load``: copy the checked files
            target = Path(directory).resolve()
            if target != self.directory.resolve():
                shutil.copytree(self.directory, target, dirs_exist_ok=False)
            return target
        files = {"report.json": json.dumps(self.report, indent=2) + "\n",
                 "report.md": render_markdown(self.report)}
        return write_artifact(directory, self.executable, self.manifest, files)

    export = save

    def __repr__(self) -> str:
        return (f"CompiledModel({self.report['model']['name']!r}, "
                f"target={self.report['target']['name']!r})")


def load(directory: str | os.PathLike) -> CompiledModel:
    """Load an artifact written by ``CompiledModel.save`` after checking its integrity."""
    import tvm

    root = Path(directory)
    manifest = read_manifest(root)
    try:
        module = tvm.runtime.load_module(str(root / HOST_LIBRARY))
    except Exception as err:  # noqa: BLE001
        raise EdgebyocError(f"{root}: cannot load {HOST_LIBRARY}: {first_line(err)}") from err
    report = json.loads((root / "report.json").read_text())
    return CompiledModel(module, [TensorSpec.from_dict(d) for d in manifest["inputs"]],
                         [TensorSpec.from_dict(d) for d in manifest["outputs"]], report,
                         manifest, directory=root)
