"""Partial quantization at region boundaries (BYOC paper, section 3.2, Figure 4a).

For every region of a module with a ``QuantizationSpec``:

- each float tensor entering the region is quantized on the host side of the boundary
  (``R.quantize`` with a per-tensor symmetric scale ``max|x| / 127`` measured on the user's
  calibration inputs) and each constant entering it (weights, biases) is quantized once, at
  compile time, with the scale ``max|w| / 127``;
- the region function receives int8 tensors and starts by dequantizing them, and quantizes its
  results before returning them; the host dequantizes them after the call.

So the region's code sees the dequantize -> op -> quantize form that pre-quantized models (QDQ
ONNX, int8 TFLite) arrive in, and runs on int8 data end to end. Scales come from the model when
it is pre-quantized (a boundary tensor produced by a per-tensor int8 ``dequantize``, or consumed
by a ``quantize``, keeps that scale); the others are measured by running the partitioned model
on the host (regions included) over the calibration inputs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

import numpy as np
import tvm
from tvm import relax

from ..errors import CompileError
from ..target import Target

QMAX = {"int8": 127}


def _boundary_order(main, quantized: set) -> list[tuple[Any, int | str]]:
    """(call var, argument index or "out") of every boundary tensor, in program order."""
    order = []
    for block in main.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar) \
                    and value.op in quantized:
                for index, arg in enumerate(value.args):
                    if not isinstance(arg, tvm.ir.expr.Constant):
                        order.append((binding.var, index))
                order.append((binding.var, "out"))
    return order


def _calibrate(mod: tvm.IRModule, quantized: set, samples: Sequence[Mapping[str, np.ndarray]],
               input_names: list[str]) -> list[float]:
    """max |value| of every boundary tensor over the calibration samples, in boundary order."""
    from ..codegen.host import build_host, host_target

    calibration = tvm.IRModule(mod.functions)
    for gv, func in list(calibration.functions.items()):
        if isinstance(func, relax.Function) and func.attrs and "Codegen" in func.attrs:
            plain = relax.Function(func.params, func.body, func.ret_ty, func.is_pure)
            calibration[gv] = plain.with_attr("global_symbol", gv.name_hint)
    calibration = relax.transform.ToNonDataflow()(calibration)
    main = calibration["main"]
    order = _boundary_order(main, {gv for gv in calibration.get_global_vars()
                                   if gv.name_hint in {g.name_hint for g in quantized}})
    values = []
    for block in main.body.blocks:
        for binding in block.bindings:
            for var, index in order:
                if binding.var.same_as(var):
                    values.append(binding.var if index == "out" else binding.value.args[index])
    fields = [main.body.body] + values
    body = relax.SeqExpr(main.body.blocks, relax.Tuple(fields))
    ret = relax.TupleType([field.ty for field in fields])
    calibration["main"] = relax.Function(main.params, body, ret, main.is_pure, main.attrs)
    calibration = relax.transform.LambdaLift()(calibration)
    executable = build_host(calibration, host_target(), schedules=False)
    vm_main = relax.VirtualMachine(executable, tvm.cpu())["main"]
    maxima = np.zeros(len(values))
    expected = {p.name: tuple(int(d) for d in p.ty.shape.values)
                for p in main.params[:len(input_names)]}
    for number, sample in enumerate(samples):
        for name in input_names:
            given = np.shape(sample[name]) if name in sample else None
            if given != expected[name]:
                raise CompileError(f"calibration sample {number}: input {name!r} "
                                   f"{'is missing' if given is None else f'has shape {list(given)}'}"
                                   f", the model expects {list(expected[name])}")
        arrays = [tvm.runtime.tensor(np.ascontiguousarray(sample[name], dtype=np.float32))
                  for name in input_names]
        result = vm_main(*arrays)
        for i in range(len(values)):
            maxima[i] = max(maxima[i], float(np.abs(result[i + 1].numpy()).max(initial=0.0)))
    return list(maxima)


def _scalar_constant(expr) -> float | None:
    if isinstance(expr, tvm.ir.expr.Constant):
        value = expr.value.numpy() if hasattr(expr.value, "numpy") else np.asarray(expr.value)
        if value.size == 1:
            return float(value.reshape(()))
    return None


def _is_per_tensor_int8(call, op_name: str) -> bool:
    return isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op) \
        and call.op.name == op_name and _scalar_constant(call.args[1]) is not None \
        and _scalar_constant(call.args[2]) == 0.0


def _model_scales(main, order) -> dict:
    """Scales a pre-quantized (QDQ) model already gives its boundary tensors.

    An input produced by a per-tensor int8 ``dequantize`` with zero point 0 keeps that scale; an
    output consumed only by such a ``quantize`` takes its scale.
    """
    values, consumers = {}, {}
    for block in main.body.blocks:
        for binding in block.bindings:
            values[binding.var] = binding.value
            if isinstance(binding.value, relax.Call):
                for arg in binding.value.args:
                    if isinstance(arg, relax.Var):
                        consumers.setdefault(arg, []).append(binding.value)
    scales = {}
    for var, index in order:
        if index == "out":
            users = consumers.get(var, [])
            if len(users) == 1 and _is_per_tensor_int8(users[0], "relax.quantize") \
                    and str(users[0].attrs.out_dtype) == "int8":
                scales[(var, index)] = _scalar_constant(users[0].args[1])
            continue
        arg = values[var].args[index]
        producer = values.get(arg)
        if _is_per_tensor_int8(producer, "relax.dequantize") \
                and str(producer.args[0].ty.dtype) == "int8":
            scales[(var, index)] = _scalar_constant(producer.args[1])
    return scales


def _scale(maximum: float, dtype: str) -> float:
    return float(np.float32(maximum / QMAX[dtype])) if maximum > 0 else 1.0


def quantize_regions(mod: tvm.IRModule, partition, target: Target,
                     calibration: Sequence[Mapping[str, np.ndarray]] | None,
                     input_names: list[str]) -> tvm.IRModule:
    """Apply partial quantization to the regions of quantizing modules (module docstring)."""
    quantizing = {symbol: entry for symbol, entry in partition.functions.items()
                  if target.module(entry[1].module).quantization is not None}
    if not quantizing:
        return mod
    modules = sorted({entry[1].module for entry in quantizing.values()})
    by_symbol = {}
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function) and func.attrs and "global_symbol" in func.attrs \
                and str(func.attrs["global_symbol"]) in quantizing:
            by_symbol[str(func.attrs["global_symbol"])] = gv
    quantized = set(by_symbol.values())
    order = _boundary_order(mod["main"], quantized)
    scales = _model_scales(mod["main"], order)
    if len(scales) < len(order):
        if not calibration:
            raise CompileError(
                f"target {target.name!r}: module(s) {', '.join(modules)} run quantized and "
                f"{len(order) - len(scales)} region boundary tensor(s) have no scale in the "
                f"model; pass calibration inputs (calibration=[{{input: array}}, ...], command "
                f"line --calibration FILE.npz)")
        maxima = _calibrate(mod, quantized, calibration, input_names)
        for key, maximum in zip(order, maxima):
            scales.setdefault(key, _scale(maximum, "int8"))
    rewriter = _MainRewriter(mod, quantized, scales, {
        gv: target.module(quantizing[s][1].module).quantization.dtype
        for s, gv in by_symbol.items()})
    mod = rewriter.rewrite(mod["main"])
    for symbol, gv in by_symbol.items():
        info, region = partition.functions[symbol]
        partition.functions[symbol] = (info, replace(region, function=rewriter.functions[gv]))
        info.quantization = rewriter.report[gv]
    return mod


@relax.expr_functor.mutator
class _MainRewriter(relax.PyExprMutator):
    """Rewrites the calls of ``main`` to quantized regions, and the region functions."""

    def __init__(self, mod, quantized, scales, dtypes):
        super().__init__(mod)
        self.mod, self.quantized, self.dtypes = mod, quantized, dtypes
        self.scales = scales  # (call var, arg index | "out") -> scale
        self.functions: dict[Any, relax.Function] = {}
        self.replaced: dict[Any, Any] = {}  # old region global var -> quantized one
        self.report: dict[Any, dict[str, Any]] = {}

    def rewrite(self, main: relax.Function) -> tvm.IRModule:
        new_main = self.visit_expr(main)
        built = self.builder_.get()
        functions = {gv: func for gv, func in built.functions.items()
                     if gv not in self.replaced and gv.name_hint != "main"}
        mod = tvm.IRModule(functions, attrs=built.attrs)
        mod["main"] = new_main
        return mod

    def visit_var_binding_(self, binding) -> None:
        value = binding.value
        if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar)
                and value.op in self.quantized):
            super().visit_var_binding_(binding)
            return
        new_value = self._quantized_call(binding.var, self.visit_expr(value))
        new_var = self.builder_.emit(new_value, binding.var.name) \
            if isinstance(binding.var, relax.DataflowVar) \
            else self.builder_.emit_output(new_value, binding.var.name)
        self.set_var_remap(binding.var, new_var)

    def _quantized_call(self, var, call):
        gv = call.op
        dtype = self.dtypes[gv]
        function = self.mod[gv]
        if not isinstance(function.body.body.ty, relax.TensorType):
            raise CompileError(f"region {function.attrs['global_symbol']}: partial "
                               f"quantization needs a region with one tensor output")
        args, param_scales = [], []
        for index, arg in enumerate(call.args):
            if not _is_float_tensor(arg):
                args.append(arg)
                param_scales.append(None)
                continue
            if isinstance(arg, tvm.ir.expr.Constant):
                values = arg.value.numpy()
                scale = _scale(float(np.abs(values).max(initial=0.0)), dtype)
                q = np.clip(np.round(values / np.float32(scale)), -QMAX[dtype], QMAX[dtype])
                args.append(relax.const(q.astype(dtype), dtype))
            else:
                scale = self.scales[(var, index)]
                args.append(self.builder_.emit(relax.op.quantize(
                    arg, relax.const(scale, "float32"), relax.const(0, dtype), axis=-1,
                    out_dtype=dtype)))
            param_scales.append(scale)
        out_scale = self.scales[(var, "out")]
        self.functions[gv] = _quantized_function(function, param_scales, out_scale, dtype)
        self.report[gv] = {"dtype": dtype, "input_scales": param_scales,
                           "output_scale": out_scale}
        # a new global var: calls are checked against the callee's type, carried by the var
        new_gv = self.builder_.add_func(self.functions[gv], gv.name_hint + "_int8")
        self.replaced[gv] = new_gv
        result = self.builder_.emit(relax.Call(new_gv, args))
        return relax.op.dequantize(result, relax.const(out_scale, "float32"),
                                   relax.const(0, dtype), axis=-1, out_dtype="float32")


def _is_float_tensor(expr) -> bool:
    ty = getattr(expr, "ty", None)
    return isinstance(ty, relax.TensorType) and str(ty.dtype) == "float32"


def _quantized_function(function: relax.Function, param_scales, out_scale: float,
                        dtype: str) -> relax.Function:
    """``function`` taking ``dtype`` tensors for float parameters and returning ``dtype``."""
    params, prologue = [], []
    for param, scale in zip(function.params, param_scales):
        if scale is None:
            params.append(param)
            continue
        new = relax.Var(param.name, relax.TensorType(param.ty.shape, dtype))
        params.append(new)
        prologue.append(relax.VarBinding(param, relax.op.dequantize(
            new, relax.const(scale, "float32"), relax.const(0, dtype), axis=-1,
            out_dtype="float32")))
    result = relax.Var("quantized_output", relax.TensorType(function.body.body.ty.shape, dtype))
    epilogue = [relax.VarBinding(result, relax.op.quantize(
        function.body.body, relax.const(out_scale, "float32"), relax.const(0, dtype), axis=-1,
        out_dtype=dtype))]
    blocks = [relax.BindingBlock(prologue)] + list(function.body.blocks) + \
        [relax.BindingBlock(epilogue)]
    body = relax.SeqExpr(blocks, result)
    new_function = relax.Function(params, body, relax.TensorType(result.ty.shape, dtype),
                                  function.is_pure, function.attrs)
    return new_function
