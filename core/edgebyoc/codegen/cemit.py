"""The C project's files, written once from the step graph (``codegen.cgraph``) and the
memory stage's plan of it: the arena's offsets and the chains streamed depth-first.

Every text comes from a Mako template under ``templates/cproject/``: each host kernel's body
(``codegen.ckernels.render_kernel``), ``network.c`` (the kernels as functions, the steps in
program order, a chain as one loop over a table of (step, first row, end row) events),
``network.h``, ``weights.h`` / ``weights.c`` (every constant once, as a const array in the
layout its consumer needs). The core's harness, Makefile and MATCH header, the regions'
files and the TVM wrapper the artifact links complete the project (``cproject.CProject``).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..memory.arena import ArenaPlan
from ..memory.streaming import RESIDENT_ALIGN
from .cgraph import CTensor, Step, StepGraph
from .ckernels import literal, render_kernel
from .layer import core_file
from .render import render_core_template

ENTRY = "edgebyoc_network_run"
#: the TVM wrapper of ``edgebyoc_network_run``: in the artifact, not in the written project
WRAPPER = "tvm_wrapper.c"


class _Pointers:
    """C pointer expressions of the graph's tensors once the arena is placed."""

    def __init__(self, offsets: Mapping[str, int]):
        self.offsets = offsets

    def __call__(self, tensor: CTensor, const: bool) -> str:
        base = tensor.base()
        cast = f"({'const ' if const else ''}{tensor.ctype}*)"
        if base.kind == "const":
            return f"{cast}{base.name}" if base.dtype != tensor.dtype else base.name
        if base.kind == "input":
            return f"{cast}inputs[{base.index}]"
        if base.kind == "output":
            return f"{cast}(outputs[{base.index}])"
        return f"{cast}(edgebyoc_arena + {self.offsets[base.name]})"


def _signature(step: Step, rows: bool) -> str:
    text = ", ".join(f"{'const ' if not w else ''}{t.ctype}* {p}" for p, t, w in step.params)
    return text + (", int y0, int y1" if rows else "")


def _function(step: Step, rows: Mapping[str, int] | None) -> dict:
    """A host step's kernel as a function of network.c: whole, or a band through buffers of
    ``rows[tensor name]`` rows."""
    local = None if rows is None else {p: rows.get(t.base().name, 0) for p, t, _ in step.params}
    return {"number": step.number, "title": step.title, "name": step.name,
            "out": f"{step.output.dtype}{list(step.output.shape)}",
            "signature": _signature(step, rows is not None),
            "body": render_kernel(step.kernel, local)}


def _call(step: Step, pointer: _Pointers) -> dict:
    """The statement of a step run whole."""
    data = [pointer(t, not w) for _, t, w in step.params]
    if step.kernel is not None:
        return {"kind": "host", "name": step.name, "pointers": ", ".join(data),
                "number": step.number}
    return {"kind": "region", "entry": step.region.entry, "number": step.number,
            "data": ", ".join(f"(void*){pointer(t, False)}" for _, t, _ in step.params),
            "count": len(step.params)}


def _chain(graph: StepGraph, chain, label: str, pointer: _Pointers) -> tuple[dict, list[dict]]:
    """(the statement of a chain: its event table and the row form of each step, the row
    forms of its host kernels as functions)."""
    functions, cases = [], []
    for index in range(chain.first, chain.last + 1):
        step = graph.steps[index]
        if step.kernel is not None:
            functions.append(_function(step, chain.rings))
            data = ", ".join(pointer(t, not w) for _, t, w in step.params)
            cases.append({"kind": "host", "name": step.name, "pointers": data})
        else:
            cases.append({"kind": "region", "entry": step.region.entry_rows,
                          "number": step.number, "count": len(step.params),
                          "data": ", ".join(f"(void*){pointer(t, False)}"
                                            for _, t, _ in step.params),
                          "rings": ", ".join(str(chain.rings.get(t.base().name, 0))
                                             for _, t, _ in step.params)})
    resident = [(r.variable, weight_memory_name(r.module), r.offset) for r in chain.resident]
    return {"kind": "chain", "label": label, "events": chain.events, "first": chain.first,
            "resident": resident,
            "numbers": (graph.steps[chain.first].number, graph.steps[chain.last].number),
            "rings": ", ".join(f"{name} {rows} rows" for name, rows in
                               sorted(chain.rings.items())),
            "cases": cases}, functions


def weight_memory_name(module: str) -> str:
    """The C array of ``module``'s weight memory in network.c (``ExecModule.weight_memory``)."""
    return "edgebyoc_weight_memory_" + "".join(c if c.isalnum() else "_" for c in module)


def weight_memories(chains: Sequence) -> list[tuple[str, int]]:
    """(C name, bytes) of each weight memory the chains keep weights in: the most any chain
    places there, rounded up to ``RESIDENT_ALIGN`` bytes."""
    sizes: dict[str, int] = {}
    for chain in chains:
        for r in chain.resident:
            name = weight_memory_name(r.module)
            end = -(-(r.offset + r.nbytes) // RESIDENT_ALIGN) * RESIDENT_ALIGN
            sizes[name] = max(sizes.get(name, 0), end)
    return sorted(sizes.items())


def _copies(graph: StepGraph, pointer: _Pointers) -> list[dict]:
    return [{"kind": "copy", "source": pointer(source, True), "bytes": source.nbytes,
             "destination": pointer(copy, False) if copy is not None else
             f"outputs[{index}]"} for index, source, copy in graph.output_copies]


def _io(graph: StepGraph, plan: ArenaPlan) -> dict | None:
    """The places of the inputs and outputs in the arena (``io_in_arena``)."""
    if not graph.io_in_arena:
        return None
    return {kind: [(plan.offsets[t.name], t.nbytes) for t in tensors]
            for kind, tensors in graph.io_tensors.items()}


def network_files(graph: StepGraph, plan: ArenaPlan, chains: Sequence = ()) -> dict[str, str]:
    """network.c, network.h, weights.h and weights.c of ``graph`` with its arena placed by
    ``plan`` and ``chains`` (``memory.streaming.Chain``) streamed depth-first."""
    pointer = _Pointers(plan.offsets)
    chained = {i: chain for chain in chains for i in range(chain.first, chain.last + 1)}
    functions, statements, row_entries = [], [], []
    for index, step in enumerate(graph.steps):
        chain = chained.get(index)
        if chain is None:
            if step.kernel is not None:
                functions.append(_function(step, None))
            statements.append(_call(step, pointer))
        elif index == chain.first:
            statement, row_functions = _chain(graph, chain, f"depth-first chain "
                                              f"{list(chains).index(chain)}", pointer)
            functions += row_functions
            statements.append(statement)
            row_entries += [c["entry"] for c in statement["cases"] if c["kind"] == "region"]
    statements += _copies(graph, pointer)
    entries = [s.region.entry for s in graph.steps if s.region is not None]
    context = {"name": graph.name, "description": graph.description, "entry": ENTRY,
               "arena_bytes": plan.size_bytes, "io": _io(graph, plan),
               "steps": max((s.number for s in graph.steps), default=0)}
    return {
        "network.c": render_core_template(
            "cproject/network.c.mako", **context, functions=functions, statements=statements,
            entries=list(dict.fromkeys(entries)), row_entries=list(dict.fromkeys(row_entries)),
            weight_memories=weight_memories(chains), weight_memory_align=RESIDENT_ALIGN,
            resident_variables=sorted({r.variable for c in chains for r in c.resident})),
        "network.h": render_core_template(
            "cproject/network.h.mako", **context,
            inputs=[(n, t) for n, t in zip(graph.input_names, graph.inputs)],
            outputs=[(n, t) for n, t in zip(graph.output_names, graph.results)]),
        "weights.h": render_core_template("cproject/weights.h.mako",
                                          constants=[t for t, _ in graph.constants]),
        "weights.c": render_core_template(
            "cproject/weights.c.mako",
            constants=[(t, _c_items(t, v)) for t, v in graph.constants]),
    }


def _c_items(tensor: CTensor, value: np.ndarray) -> list[str]:
    """A constant's values as C literals, 16 a line."""
    flat = value.reshape(-1)
    if tensor.dtype == "float32":
        items = [literal(v, "float32") for v in flat.tolist()]
    else:
        items = [literal(v, tensor.dtype) for v in flat.astype(np.int64).tolist()]
    return [", ".join(items[i:i + 16]) for i in range(0, len(items), 16)] or ["0"]


def tvm_wrapper(num_inputs: int, num_outputs: int) -> str:
    """The TVM FFI function calling ``edgebyoc_network_run`` (the artifact links it)."""
    from .external import packed_wrapper

    kernel = render_core_template("cproject/tvm_kernel.c.mako", entry=ENTRY,
                                  inputs=num_inputs, outputs=num_outputs)
    return "\n" + packed_wrapper(ENTRY, "edgebyoc_network_kernel",
                                 num_inputs + num_outputs) + kernel


#: The bare-metal build's files (``templates/mcu/``, written under ``mcu/``): semihosting
#: harness, instruction counter and per-step profile, start-up, the linker scripts of the QEMU
#: boards, the Makefile's cross targets.
MCU_FILES = ("edgebyoc_semihost.h", "edgebyoc_counter.h", "edgebyoc_profile.h",
             "edgebyoc_mcu_main.c", "edgebyoc_startup.c",
             "edgebyoc_sections.ld", "mps2-an386.ld", "mps3-an547.ld", "riscv-virt.ld",
             "edgebyoc_mcu.mk")


#: The one definition of the host emulation's L1 a C project's layers share.
HOST_L1_FILE = "bindings/host/edgebyoc_host_l1.c"


def host_l1_source(size: int) -> str:
    """``HOST_L1_FILE``: the L1 every layer of the project's host flavour shares (compiled with
    ``EDGEBYOC_HOST_L1_SHARED``, see ``edgebyoc_match_host.h``)."""
    return ("/* the host emulation's L1, shared by every layer (the target's largest module L1) */\n"
            "#include <stddef.h>\n\n"
            "/* its own section: a bare-metal build (mcu/) links it into the board's L1 memory */\n"
            f"unsigned char edgebyoc_host_l1[{size}]\n"
            "    __attribute__((aligned(8), section(\".bss.edgebyoc_l1\")));\n"
            "size_t edgebyoc_host_l1_top = 0;\n"
            f"const size_t edgebyoc_host_l1_capacity = {size};\n")


def project_files(graph: StepGraph, plan: ArenaPlan, chains: Sequence = (),
                  host_l1_bytes: int = 0) -> dict[str, str]:
    """Every file of the project (the regions', the network's, the core's harness and
    Makefile, the artifact's TVM wrapper); with layers on the core's host emulation, the one
    L1 of ``host_l1_bytes`` they share (``HOST_L1_FILE``)."""
    files = dict(graph.region_files)
    if any(p.startswith("bindings/host/") for p in files):
        if host_l1_bytes <= 0:
            raise ValueError("the project's layers use the host emulation: give host_l1_bytes")
        files[HOST_L1_FILE] = host_l1_source(host_l1_bytes)
    files["include/edgebyoc_match.h"] = core_file("edgebyoc_match.h")
    files.update(network_files(graph, plan, chains))
    files["main.c"] = core_file("edgebyoc_main.c")
    files["Makefile"] = core_file("edgebyoc_project.mk").replace("@NAME@", graph.name)
    files.update({f"mcu/{name}": core_file(f"mcu/{name}") for name in MCU_FILES})
    files[WRAPPER] = tvm_wrapper(len(graph.inputs), len(graph.results))
    return files
