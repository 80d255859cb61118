"""Code generation plumbing for offloaded regions: one place for every plugin (BYOC 3.3).

The core registers ``relax.ext.<target>`` for the duration of a compile; ``RunCodegen`` calls it
with the region functions, and for each the owning plugin's ``edgebyoc_codegen`` hook returns a
``CodegenOutput``:

- C source: wrapped into a TVM ``CSourceModule`` and linked into the artifact's library (the
  source must export ``__tvm_ffi_<symbol>``; ``packed_wrapper`` renders that wrapper around a
  plain C kernel);
- JSON graph or blob: kept as a payload file of the artifact and bound at load time to the
  runtime function the plugin's ``RuntimeLoader`` builds (once per load).

Every region is called destination-passing style: its inputs and constants in the region
function's parameter order (a constant the codegen replaced expanded into its replacement
arrays, see ``CodegenOutput.replaced_constants``), then its outputs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import tvm
from tvm import relax

from ..errors import PLUGIN_FAULTS, PluginError, first_line
from ..session import CompileSession
from ..target import CodegenContext, CodegenOutput, OutputKind, Target
from .render import render_core_template


def packed_wrapper(symbol: str, kernel: str, num_args: int) -> str:
    """C source exporting ``symbol`` with TVM's packed signature, calling ``kernel``.

    ``kernel`` must be defined as ``int kernel(DLTensor** args, int num_args)`` (0 on success)
    in the same translation unit; ``args`` are the region's inputs, constants and outputs.
    """
    return render_core_template("region_wrapper.c.mako", symbol=symbol, kernel=kernel,
                                num_args=num_args)


def packed_entry_wrapper(symbol: str, entry: str, num_args: int) -> str:
    """C source exporting ``symbol`` with TVM's packed signature, calling a C project entry
    ``int entry(void* const* data)`` (defined before it in the same translation unit) with the
    data pointers of the region's ``num_args`` arguments (``argument_layout``'s order)."""
    kernel = (f"\nint {symbol}_data_kernel(DLTensor** args, int num_args) {{\n"
              f"  void* data[{num_args}];\n  int i;\n"
              f"  for (i = 0; i < num_args && i < {num_args}; ++i)\n"
              f"    data[i] = (char*)args[i]->data + args[i]->byte_offset;\n"
              f"  return {entry}(data);\n}}\n")
    return packed_wrapper(symbol, f"{symbol}_data_kernel", num_args) + kernel


def include_dirs() -> list[str]:
    """Include directories generated C sources are compiled with: TVM FFI (``c_api.h``),
    DLPack and TVM's runtime headers (``tvm/runtime/c_backend_api.h``: the thread pool)."""
    import tvm.libinfo
    import tvm_ffi.libinfo

    dirs = [tvm_ffi.libinfo.find_include_path(), tvm_ffi.libinfo.find_dlpack_include_path()]
    tvm_dirs = tvm.libinfo.find_include_path()
    dirs += [tvm_dirs] if isinstance(tvm_dirs, str) else list(tvm_dirs)
    return list(dict.fromkeys(str(d) for d in dirs))


def compile_options(cpu: str) -> list[str]:
    """Compiler options for generated C: optimised, for the host CPU unless built generic."""
    options = ["-O3", "-fno-math-errno"] + [f"-I{d}" for d in include_dirs()]
    if cpu != "generic":
        options.append("-march=native")
    return options


class ExternalCodegen:
    """Runs the owning plugin's codegen hook for every offloaded region of one compile."""

    def __init__(self, target: Target, registry, functions: dict[str, Any],
                 options: dict[str, Any], session: CompileSession | None = None):
        self.target, self.registry = target, registry
        self.session = session or CompileSession(target.name)
        self.functions, self.options = functions, options
        self.outputs: dict[str, CodegenOutput] = {}
        #: symbol -> the ``Region`` as codegen received it (constants filled in)
        self.regions: dict[str, Any] = {}
        self.values: dict[str, dict[int, np.ndarray]] = {}
        self._error: BaseException | None = None

    def run(self, mod: tvm.IRModule) -> tvm.IRModule:
        if not self.functions:
            return mod
        self.values = _constant_values(mod)
        with self.session.codegen(self._codegen):
            mod = relax.transform.RunCodegen()(mod)
        if self._error is not None:
            raise self._error
        missing = sorted(set(self.functions) - set(self.outputs))
        if missing:
            raise PluginError(f"target {self.target.name!r}: no code generated for "
                              f"{', '.join(missing)}")
        return self.replace_constants(mod)

    def _codegen(self, functions, options, constant_names):  # called by RunCodegen
        modules = []
        for function in functions:
            symbol = str(function.attrs["global_symbol"])
            try:
                output = self._generate(symbol)
            except PLUGIN_FAULTS as err:  # re-raised after RunCodegen returns
                detail = str(err) if isinstance(err, PluginError) else \
                    f"{type(err).__name__}: {first_line(err)}"
                self._error = PluginError(f"target {self.target.name!r}: code generation of "
                                          f"{symbol} failed: {detail}")
                self._error.__cause__ = err
                return []
            if output.kind is OutputKind.C_SOURCE:
                create = tvm.get_global_func("runtime.CSourceModuleCreate")
                modules.append(create(output.c_source, "c", [symbol], []))
        return modules

    def _generate(self, symbol: str) -> CodegenOutput:
        info, region = self.functions[symbol]
        values = self.values.get(symbol, {})
        region = replace(region, constant_params=tuple(sorted(values)), constants=values)
        self.regions[symbol] = region
        module = self.target.module(region.module)
        bindings = {flavour: self.registry.call(self.target.name, "edgebyoc_runtime_apis",
                                                target=self.target, module=module,
                                                flavour=flavour)
                    for flavour in ("host", "soc")}
        context = CodegenContext(options=self.options, bindings=bindings,
                                 region_index=info.index)
        output = self.registry.call(self.target.name, "edgebyoc_codegen", target=self.target,
                                    module=module, region=region,
                                    schedule=_region_schedule(region),
                                    context=context)
        if not isinstance(output, CodegenOutput):
            raise PluginError(f"target {self.target.name!r}, module {module.name!r}: "
                              f"edgebyoc_codegen returned {type(output).__name__} for {symbol}, "
                              f"not a CodegenOutput")
        if output.symbol != symbol:
            raise PluginError(f"module {module.name!r}: codegen output names symbol "
                              f"{output.symbol!r}, the region is {symbol!r}")
        if output.kind is not module.output_kind:
            raise PluginError(f"module {module.name!r} declares {module.output_kind.value} "
                              f"output, its codegen returned {output.kind.value}")
        wrong = sorted(set(output.replaced_constants) - set(region.constant_params))
        if wrong:
            raise PluginError(f"module {module.name!r}: {symbol} replaces parameters {wrong}, "
                              f"which are not constants (constant parameters: "
                              f"{list(region.constant_params)})")
        self.outputs[symbol] = output
        return output

    def replace_constants(self, mod: tvm.IRModule) -> tvm.IRModule:
        """Pass each region the constants its codegen computed instead of the originals."""
        replacements = {symbol: output.replaced_constants
                        for symbol, output in self.outputs.items() if output.replaced_constants}
        if not replacements:
            return mod
        mod["main"] = _ConstantReplacer(mod, replacements).visit_expr(mod["main"])
        return mod


def _region_schedule(region):
    """The schedule of a one-layer region, the tuple of them for larger ones, or ``None``."""
    schedules = tuple(c.schedule for c in region.composites)
    if not any(s is not None for s in schedules):
        return None
    return schedules[0] if len(schedules) == 1 else schedules


def _constant_values(mod: tvm.IRModule) -> dict[str, dict[int, np.ndarray]]:
    """symbol -> {parameter index: value} of the constants ``main`` passes to each region."""
    values: dict[str, dict[int, np.ndarray]] = {}

    def visit(node):
        if isinstance(node, relax.Call) and isinstance(node.op, tvm.ir.GlobalVar):
            func = mod[node.op]
            if isinstance(func, relax.Function) and func.attrs and "Codegen" in func.attrs:
                values[str(func.attrs["global_symbol"])] = {
                    i: arg.value.numpy() for i, arg in enumerate(node.args)
                    if isinstance(arg, tvm.ir.expr.Constant)}

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return values


@relax.expr_functor.mutator
class _ConstantReplacer(relax.PyExprMutator):
    """Rewrites ``call_dps_packed(symbol, args)`` with the codegen's replacement constants."""

    def __init__(self, mod, replacements):
        super().__init__(mod)
        self.replacements = replacements

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.call_dps_packed"
                and isinstance(call.args[0], relax.ExternFunc)):
            return call
        replaced = self.replacements.get(str(call.args[0].global_symbol))
        if not replaced:
            return call
        args = []
        for index, arg in enumerate(call.args[1].fields):
            if index in replaced:
                args.extend(relax.const(np.ascontiguousarray(a)) for a in replaced[index])
            else:
                args.append(arg)
        out = list(call.ty_args)
        if len(out) == 1 and isinstance(out[0], relax.TupleType):  # a region of several outputs
            out = list(out[0].fields)
        return relax.op.call_dps_packed(call.args[0], relax.Tuple(args),
                                        out[0] if len(out) == 1 else out)
