"""The host build: a Relax module compiled for this machine's CPU through TVM's LLVM backend.

The pipeline is TVM's CPU pipeline (``relax.backend.cpu_generic``) with two additions when
``schedules`` is on: convolutions are converted to channels-last layouts before legalization
(constant weights are transposed once, at compile time, by ``FoldConstant``), and the fused
PrimFuncs get the default CPU schedules of ``host_schedule``. With ``schedules=False`` it is
exactly TVM's default build: the reference the verify command compares TFLite and Relax models
against.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import tvm
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu_generic

from .host_schedule import HOST_LAYOUTS, host_schedule_pass


@lru_cache(maxsize=None)
def host_cpu() -> str:
    """LLVM's name for this machine's CPU (e.g. ``"skylake-avx512"``)."""
    return str(tvm.target.Target.from_device(tvm.cpu()).attrs.get("mcpu", "generic"))


def host_target(cpu: str | None = None, num_cores: int | None = None) -> tvm.target.Target:
    """The LLVM target for the host path; ``cpu="generic"`` builds a portable library."""
    config: dict[str, Any] = {"kind": "llvm", "mcpu": cpu or host_cpu()}
    if num_cores:
        config["num-cores"] = num_cores
    return tvm.target.Target(config)


def host_pipeline(target: tvm.target.Target, schedules: bool = True) -> tvm.transform.Pass:
    """TVM's CPU Relax pipeline, plus the host layouts and schedules when ``schedules``."""

    @tvm.transform.module_pass(opt_level=0, name="edgebyoc.HostPipeline")
    def _pipeline(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        passes = [relax.transform.DecomposeOpsForInference()]
        if schedules:
            passes.append(relax.transform.ConvertLayout(HOST_LAYOUTS))
        passes += cpu_generic.library_dispatch_passes(target)
        passes += cpu_generic.legalize_passes(target)
        if schedules:
            passes.append(host_schedule_pass())
        passes += cpu_generic.dataflow_lower_passes(target)
        passes += cpu_generic.finalize_passes(target)
        with target:
            return tvm.transform.Sequential(passes)(mod)

    return _pipeline


def build_host(mod: tvm.IRModule, target: tvm.target.Target, schedules: bool = True):
    """Compile ``mod`` for the CPU; returns a ``tvm.runtime.Executable`` (VM bytecode + kernels)."""
    return tvm.compile(mod, target=target, relax_pipeline=host_pipeline(target, schedules))
