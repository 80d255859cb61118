"""The plugin author's test kit: the conformance suite, model builders, compile / run / verify.

A plugin's tests import this module (and ``edgebyoc.api``) only::

    from edgebyoc.api.testing import check_installed_plugin, compile, verify

    def test_conformance():
        check_installed_plugin("mychip")

- ``check_installed_plugin(name, workloads=False)``: the plugin's source imports only
  ``edgebyoc.api`` (since 2.7; ``edgebyoc check-plugin NAME`` runs the same checks from the
  shell), every hook called the way the core calls it, the answers checked against the
  contract; with ``workloads``, the standard small workloads compiled for each of the
  plugin's targets (an int8-only target, one that refuses the float ones, also gets
  the int8 workloads: odd shapes, depthwise and pooling, dense layers), run, compared with
  the host build (bit-exact for integer models), compiled twice (in the default, automatic
  depth-first mode, which times nothing) for byte-identical artifacts, and everything left
  on the host checked to say why; what ran and what was skipped (and why) is printed.
- ``compile``, ``load``, ``verify``: the user API (``edgebyoc.compile`` ...), for end-to-end
  tests; ``run_cli(args)`` runs the ``edgebyoc`` command line in-process.
- ``region_check(compiled)``: every JSON / blob region's engine against TVM's host build of
  the same region, for a runtime plugin's tests.
- ``random_inputs(specs, seed)``: seeded inputs for a compiled model's ``inputs``.
- ``build_c_project(compiled, directory, sanitize=True)``, ``run_c_project(compiled,
  inputs, binary=None)``, ``check_c_project(compiled, inputs)`` (new in API 2.7): the deployable C project
  of a compiled (or loaded) model built on this machine with gcc and make (under
  AddressSanitizer and UBSan by default), run on inputs, and compared with ``compiled.run``
  (integer outputs bit-exactly).
- ``missing_mcu_tools(mcu)``: the cross compiler and QEMU programs a C project's bare-metal
  build for ``mcu`` (``cortex-m4``, ``cortex-m55``, ``rv32imc``) needs and this machine lacks,
  to skip a test that calls ``compiled.check_on_qemu(mcu)`` (new in API 2.5).
- ``GraphBuilder``, ``small_convnet``, ``resnet18``, ``mobilenet_v2``, ``resnet50``,
  ``int8_convnet``: ONNX model builders with seeded weights (float, or QDQ int8).

The pytest fixtures ``make_plugin`` and ``isolated_registry`` are registered by the core's
pytest plugin (entry point ``pytest11``) and need no import.

Example::

    >>> x = random_inputs(compile(small_convnet(), target="host").inputs, seed=0)
    >>> sorted(x), x["input"].shape
    (['input'], (1, 3, 16, 16))
"""

from __future__ import annotations

from typing import Sequence

from ..frontend import random_inputs
from ..pipeline import compile, load
from ..plugins import PluginRegistry
from ..testing.conformance import check_plugin as _check_plugin
from ..testing.conformance import check_workloads as _check_workloads
from ..testing.conformance import int8_convnet
from ..testing.conformance import summary as _summary
from ..testing.cproject import build_c_project, check_c_project, run_c_project
from ..testing.models import GraphBuilder, mobilenet_v2, resnet18, resnet50, small_convnet
from ..verify import region_host_outputs as _region_host_outputs
from ..verify import verify
from ._deprecated import deprecated_names


def check_installed_plugin(name: str, workloads: bool = False,
                           options: dict | None = None) -> None:
    """``check_plugin`` on the plugins installed in this environment; with ``workloads``, also
    ``check_workloads`` (the standard small models compiled with ``options``, run and
    compared)."""
    registry = PluginRegistry()
    _check_plugin(registry, name)
    if workloads:
        print(_summary(_check_workloads(name, registry, options)))  # shown by pytest -s


def region_check(compiled, seed: int = 0, rtol: float = 1e-4) -> dict[str, float]:
    """Every JSON / blob region of ``compiled`` (compiled in this process) run by its engine
    on seeded random arguments and by TVM's host build of the same region: symbol -> the
    relative error (max |engine - host| / max |host|). Raises ``AssertionError`` past
    ``rtol`` or when an engine's output shapes differ."""
    import numpy as np

    compiled.run(random_inputs(compiled.inputs, seed))  # binds the engines
    rng = np.random.default_rng(seed)
    errors = {}
    for symbol, engine in compiled.engines.items():
        region = compiled.regions[symbol]
        args = [region.constants[i] if i in region.constants else
                rng.standard_normal([int(d) for d in p.ty.shape.values]).astype(str(p.ty.dtype))
                for i, p in enumerate(region.function.params)]
        ours = engine(*args)
        ours = list(ours) if isinstance(ours, (list, tuple)) else [ours]
        reference = _region_host_outputs(region, args)
        assert [np.shape(o) for o in ours] == [np.shape(r) for r in reference], symbol
        errors[symbol] = max(_relative_error(np.asarray(o), r) for o, r in zip(ours, reference))
        assert errors[symbol] <= rtol, f"region {symbol}: relative error {errors[symbol]:.2e}"
    return errors


def _relative_error(ours, reference) -> float:
    """max |ours - reference| / max |reference| over one output's finite values; equal values
    (infinities included) differ by nothing, a value finite on one side only is an error."""
    import numpy as np

    with np.errstate(invalid="ignore"):
        same = ours == reference
        finite = np.isfinite(reference) & np.isfinite(ours)
        if not np.all(same | finite):
            return float("inf")
        scale = float(np.max(np.abs(reference[finite]), initial=0)) or 1.0
        return float(np.max(np.abs(ours - reference)[finite & ~same], initial=0)) / scale


def missing_mcu_tools(mcu: str) -> list[str]:
    """The programs (make, the cross compiler, its ``size``, QEMU) that building and running
    a C project for ``mcu`` needs and PATH lacks, with the Debian packages that provide them
    as the last item; ``[]`` when all are there. ``ValueError`` naming the known MCUs for
    another name.

    Example: a plugin test that runs its C project on an emulated Cortex-M4::

        >>> skip = pytest.mark.skipif(bool(missing_mcu_tools("cortex-m4")),
        ...                           reason=f"needs {missing_mcu_tools('cortex-m4')}")
        ...     # doctest: +SKIP
        >>> missing_mcu_tools("cortex-a53")
        Traceback (most recent call last):
        ValueError: unknown MCU target 'cortex-a53': one of cortex-m4, cortex-m55, rv32imc
    """
    from ..codegen.mcu import mcu_target, missing_tools

    target = mcu_target(mcu)
    missing = missing_tools(target)
    return missing + [f"Debian packages: {' '.join(target.packages)}"] if missing else []


def run_cli(args: Sequence[str]) -> tuple[int, str]:
    """Run ``edgebyoc ARGS`` in this process: (exit code, what it printed)."""
    from click.testing import CliRunner

    from ..cli import main

    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


__all__ = ["GraphBuilder", "build_c_project", "check_c_project", "check_installed_plugin",
           "compile", "int8_convnet", "load", "missing_mcu_tools",
           "mobilenet_v2", "random_inputs", "region_check", "resnet18", "resnet50", "run_c_project",
           "run_cli", "small_convnet", "verify"]

__getattr__ = deprecated_names(__name__, {
    **dict.fromkeys(["WorkloadOutcome", "check_plugin", "check_workloads",
                     "conformance_workloads", "plugin_problems"], "edgebyoc.testing.conformance"),
    "import_model": "edgebyoc.frontend", "region_host_outputs": "edgebyoc.verify"})
