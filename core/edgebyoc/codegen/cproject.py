"""The deployable C project of a network (MATCH's output): plain C, no TVM runtime.

For targets with ``Target.c_project``, the pipeline lowers the compiled ``main`` (offloaded
regions as ``call_dps_packed`` calls, the rest host operators) once into a step graph
(``codegen.cgraph``), the memory stage plans its arena and depth-first streaming
(``memory.stage``), and ``emit_project`` writes the project once from both::

    network.h          edgebyoc_network_run(inputs, outputs), input / output sizes, arena size
    network.c          the steps in program order: region entries and host-fallback kernels
    weights.h/.c       every constant once, as a const array in the layout its consumer needs
    main.c             a harness: reads the inputs from files, runs, writes the outputs
    Makefile           host-emulation build with gcc (``FLAVOUR=host``)
    include/, layers/, bindings/<flavour>/
                       the plugins' layer code and API bindings (``CodegenOutput.project_files``)
    + the plugin's build files for its vendor SDK (hook ``edgebyoc_project_files``)

Activations live in one static arena planned by tensor lifetimes (``memory.arena``); inputs and
outputs are the caller's buffers, or with ``io_in_arena`` arena tensors too (an input's bytes
are reused once its last reader has run, as TensorFlow Lite Micro does; the caller writes
inputs at ``edgebyoc_network_input(i)`` and reads outputs at ``edgebyoc_network_output(i)``);
reshapes are views. Host-fallback operators become the core's reference kernels
(``codegen.ckernels``, templates under ``templates/cproject/``).

``runtime_source`` gives the project's translation units as one, includes expanded (host
binding); the pipeline links it into the artifact and replaces ``main`` by one call of
``edgebyoc_network_run``, so ``edgebyoc run`` / ``verify`` execute exactly this C.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..memory.arena import ArenaPlan, ArenaTensor, arena_timeline, check_arena
from ..memory.timeline import MemoryTimeline
from .cemit import ENTRY, HOST_L1_FILE, WRAPPER, project_files, weight_memories
from .cgraph import ProjectUnsupported, StepGraph
from .layer import DEFAULT_HOST_L1_BYTES, expand_includes

__all__ = ["CProject", "ENTRY", "ProjectUnsupported", "build_project", "emit_project"]


@dataclass
class CProject:
    """A generated C project: its files (relative path -> text) and what it measured."""

    name: str
    files: dict[str, str] = field(default_factory=dict)
    arena: ArenaPlan = field(default_factory=ArenaPlan)
    weights_bytes: int = 0
    steps: int = 0
    host_steps: int = 0
    region_steps: int = 0
    translation_units: list[str] = field(default_factory=list)
    #: the arena's activation memory timeline (``memory.arena.arena_timeline``)
    timeline: MemoryTimeline | None = None
    #: (name, dtype, shape) of each input and output, in order
    inputs: list[tuple[str, str, tuple[int, ...]]] = field(default_factory=list)
    outputs: list[tuple[str, str, tuple[int, ...]]] = field(default_factory=list)
    #: the inputs and outputs live in the arena (the caller holds no buffer of its own)
    io_in_arena: bool = False
    #: bytes of the one L1 the layers on the core's host emulation share (0: no such layer)
    host_l1_bytes: int = 0
    #: bytes of the modules' weight memories where streamed chains keep their layers' weights
    #: (``ExecModule.weight_memory``), emulated in network.c beside that L1, in its section
    weight_memory_bytes: int = 0

    @property
    def io_bytes(self) -> int:
        """Bytes of the input and output buffers the caller holds while the network runs
        (0 when they are in the arena)."""
        if self.io_in_arena:
            return 0
        return sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(
            dtype if dtype != "bool" else "uint8").itemsize
            for _, dtype, shape in self.inputs + self.outputs)

    @property
    def total_activation_bytes(self) -> int:
        """All activation RAM of a run: the arena plus the caller's input / output buffers."""
        return self.arena.size_bytes + self.io_bytes

    def to_dict(self) -> dict[str, Any]:
        return {"generated": True, "entry": ENTRY, **self.arena.to_dict(),
                "io_in_arena": self.io_in_arena, "io_bytes": self.io_bytes,
                "total_activation_bytes": self.total_activation_bytes,
                "weights_bytes": self.weights_bytes, "steps": self.steps,
                "host_steps": self.host_steps, "region_steps": self.region_steps,
                "host_l1_bytes": self.host_l1_bytes,
                "weight_memory_bytes": self.weight_memory_bytes, "files": sorted(self.files)}

    def project_files(self) -> dict[str, str]:
        """The files of the written project (the artifact's TVM wrapper left out)."""
        return {k: v for k, v in self.files.items() if k != WRAPPER}

    def write(self, directory: str | Path) -> Path:
        root = Path(directory)
        for name, text in self.project_files().items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        return root

    def make(self, directory: str | Path, cflags: str = "-O2", ldflags: str = "",
             jobs: int = 2) -> Path:
        """Write the project into ``directory`` and build it with its Makefile (gcc, host
        binding); returns the harness binary. ``RuntimeError`` with the compiler's messages
        if the build fails."""
        import subprocess

        root = self.write(directory)
        done = subprocess.run(["make", "-s", f"-j{jobs}", f"CFLAGS={cflags}",
                               f"LDFLAGS={ldflags}"], cwd=root, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"make failed in {root}:\n{done.stderr[-4000:]}")
        return root / "network"

    def run_binary(self, binary: str | Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Run the harness built by ``make`` on ``inputs`` (in order); outputs in order."""
        import subprocess
        import tempfile

        with tempfile.TemporaryDirectory(prefix="edgebyoc-run-") as scratch:
            ins = []
            for i, ((name, dtype, shape), value) in enumerate(zip(self.inputs, inputs)):
                path = Path(scratch, f"in{i}.bin")
                np.ascontiguousarray(value, dtype=dtype).reshape(shape).tofile(path)
                ins.append(str(path))
            outs = [str(Path(scratch, f"out{i}.bin")) for i in range(len(self.outputs))]
            done = subprocess.run([str(binary), *ins, *outs], capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"{binary} failed ({done.returncode}):\n{done.stderr[-4000:]}")
            return [np.fromfile(p, dtype=dtype).reshape(shape)
                    for p, (_, dtype, shape) in zip(outs, self.outputs)]

    def runtime_source(self, flavour: str = "host") -> str:
        """The whole project as one translation unit (every header inlined once, the
        ``flavour`` binding), with the TVM FFI wrapper of ``edgebyoc_network_run``: what the
        artifact compiles and links (``CSourceModuleCreate``)."""
        dirs, seen = ["", "include/", f"bindings/{flavour}/"], set()
        binding_units = sorted(p for p in self.files
                               if p.startswith(f"bindings/{flavour}/") and p.endswith(".c"))
        units = [f"/* ---- {unit} ---- */\n" + expand_includes(self.files[unit], self.files,
                                                              dirs, seen)
                 for unit in self.translation_units + binding_units]
        return "#define EDGEBYOC_HOST_L1_SHARED 1\n" + "\n".join(units) + self.files[WRAPPER]


def emit_project(graph: StepGraph, arena: ArenaPlan, items: Sequence[ArenaTensor],
                 chains: Sequence = (), extra_files: dict[str, str] | None = None,
                 host_l1_bytes: int = DEFAULT_HOST_L1_BYTES) -> CProject:
    """The project of ``graph`` with the arena the memory stage planned (``arena`` over
    ``items``) and ``chains`` (``memory.streaming.Chain``) streamed depth-first; written once.
    ``extra_files``: the plugin's build files for its SDK (hook ``edgebyoc_project_files``);
    ``host_l1_bytes``: the L1 the layers on the core's host emulation share (the target's
    largest module L1, ``layer.host_l1_bytes``)."""
    check_arena(list(items), arena)
    files = project_files(graph, arena, chains, host_l1_bytes)
    clash = sorted(set(extra_files or {}) & set(files))
    if clash:
        raise ProjectUnsupported(f"the plugin's project files would replace {clash[0]}")
    files.update(extra_files or {})
    return CProject(
        name=graph.name, files=files, arena=arena, weights_bytes=graph.weights_bytes,
        steps=len(graph.steps), host_steps=graph.host_steps, region_steps=graph.region_steps,
        translation_units=translation_units(files),
        timeline=arena_timeline(list(items), graph.step_names),
        inputs=[(n, t.dtype, t.shape) for n, t in zip(graph.input_names, graph.inputs)],
        outputs=[(n, t.dtype, t.shape) for n, t in zip(graph.output_names, graph.results)],
        io_in_arena=graph.io_in_arena,
        host_l1_bytes=host_l1_bytes if HOST_L1_FILE in files else 0,
        weight_memory_bytes=sum(size for _, size in weight_memories(chains)))


def translation_units(files) -> list[str]:
    """The project's C files compiled on their own: network.c, weights.c, the layers'."""
    return ["network.c", "weights.c"] + sorted(
        p for p in files if p.startswith("layers/") and p.endswith(".c"))


def build_project(mod, outputs, name: str, input_names: list[str], output_names: list[str],
                  description: str = "", io_in_arena: bool = False) -> CProject:
    """The untiled C project of ``mod["main"]`` outside a compile (tests, scripts): lowered
    (``cgraph.lower_project``), its arena planned by tensor lifetimes, emitted;
    ``ProjectUnsupported`` if it cannot be expressed. A compile plans the arena and the
    depth-first streaming in its memory stage (``edgebyoc.memory_stage``)."""
    from ..memory.arena import plan_arena
    from ..memory.streaming import arena_items
    from .cgraph import lower_project

    graph = lower_project(mod, outputs, name, input_names, output_names, description,
                          io_in_arena)
    items = arena_items(graph.arena, graph.steps, [])
    return emit_project(graph, plan_arena(items), items)
