"""``const_fold``: the calls on constants numpy folds give TVM's ``FoldConstant`` bits, the
others are left to it, and a CNN's compile builds no folding kernel."""

import importlib

import numpy as np
import tvm
from tvm import relax

from edgebyoc.const_fold import fold_constants, fold_numpy_constants


def _folded_values(mod) -> list[np.ndarray]:
    """The constants ``main`` returns once every call in it is folded."""
    body = mod["main"].body
    bindings = {b.var: b.value for block in body.blocks for b in block.bindings}
    result = body.body
    while isinstance(result, relax.Var) and result in bindings:
        result = bindings[result]

    def value(expr):
        while isinstance(expr, relax.Var) and expr in bindings:
            expr = bindings[expr]
        assert isinstance(expr, tvm.ir.expr.Constant), expr
        return expr.value.numpy()

    fields = result.fields if isinstance(result, relax.Tuple) else [result]
    return [value(f) for f in fields]


def _module(build) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    with bb.function("main", []):
        with bb.dataflow():
            outputs = [bb.emit(expr) for expr in build()]
            result = bb.emit_output(relax.Tuple(outputs))
        bb.emit_func_output(result)
    return bb.get()


def _calls(mod) -> list[str]:
    names = []

    @relax.expr_functor.visitor
    class Calls(relax.PyExprVisitor):
        def visit_call_(self, call):
            super().visit_call_(call)
            if isinstance(call.op, tvm.ir.Op):
                names.append(call.op.name)

    Calls().visit_expr(mod["main"])
    return names


def test_numpy_folds_give_tvms_bits_and_leave_the_rest_to_it():
    rng = np.random.default_rng(0)
    f = rng.standard_normal((3, 4)).astype("float32")
    f[0, 0], f[1, 1], f[2, 2] = np.nan, np.inf, -0.0
    g = (rng.standard_normal((3, 4)) * 1e3).astype("float32")
    h = rng.standard_normal(4).astype("float16")
    i = rng.integers(-100, 100, (3, 4)).astype("int32")
    j = rng.integers(1, 7, (3, 4)).astype("int32")
    zeros = np.zeros(4, "float32")
    c = lambda v: relax.const(v)  # noqa: E731
    op = relax.op

    def exact():
        return [op.permute_dims(c(f)), op.reshape(c(i), (4, 3)), op.expand_dims(c(g), [0]),
                op.squeeze(op.expand_dims(c(h), [0])), op.broadcast_to(c(h), (2, 4)),
                op.concat([c(f), c(g)], axis=1), op.where(op.isnan(c(f)), c(g), c(f)),
                op.isinf(c(f)), op.logical_or(op.less(c(f), c(g)), op.equal(c(i), c(j))),
                op.add(c(f), c(g)), op.subtract(c(g), c(f)), op.multiply(c(f), c(g)),
                op.divide(c(g), c(f)), op.negative(c(f)), op.abs(c(f)), op.sqrt(c(g)),
                op.add(c(h), c(h)), op.maximum(c(i), c(j)), op.minimum(c(g), c(g)),
                op.astype(c(i), "float32"), op.astype(c(f), "float16"),
                op.astype(c(i), "int8")]

    # left to TVM: integer division, float -> int casts, NaN in max / min, mixed dtypes,
    # transcendental functions
    def left():
        return [op.divide(c(i), c(j)), op.floor_divide(c(i), c(j)), op.astype(c(g), "int32"),
                op.maximum(c(f), c(g)), op.minimum(c(zeros), c(-zeros)), op.exp(c(f)),
                op.power(c(g), c(g))]

    for build, folded_by_numpy in ((exact, True), (left, False)):
        mod = _module(build)
        numpy_only = fold_numpy_constants(mod)
        assert (not _calls(numpy_only)) == folded_by_numpy, _calls(numpy_only)
        if not folded_by_numpy:
            assert len(_calls(numpy_only)) >= len(build())  # none of them folded
        ours, tvms = (_folded_values(fold_constants(mod)),
                      _folded_values(relax.transform.FoldConstant()(mod)))
        assert len(ours) == len(tvms) == len(build())
        for a, b in zip(ours, tvms):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert np.array_equal(a.view(np.uint8) if a.dtype != bool else a,
                                  b.view(np.uint8) if b.dtype != bool else b)  # bits


def test_a_cnn_compile_builds_no_folding_kernel(monkeypatch):
    """MobileNetV2's ReLU6 clamps (TVM's ONNX ``Clip`` guards its constant bounds with
    ``isnan`` / ``where``) and the transposed weights are all folded by numpy: TVM builds only
    the network's own kernels (it built 296 more, one per folded call, before)."""
    import edgebyoc
    from edgebyoc.plugins import PluginRegistry
    from edgebyoc.testing.models import mobilenet_v2

    build = importlib.import_module("tvm.tirx.build")
    built = []
    original = build.codegen_build

    def counting(mod, *args, **kwargs):
        built.extend(gv.name_hint for gv in mod.functions)
        return original(mod, *args, **kwargs)

    monkeypatch.setattr(build, "codegen_build", counting)
    compiled = edgebyoc.compile(mobilenet_v2(32, num_classes=10, width=0.35),
                                registry=PluginRegistry(search_path=[]))
    assert built and not [name for name in built if name.startswith("tir_function")], built
    verdict, _ = edgebyoc.verify(compiled)  # against onnxruntime
    assert verdict.passed


def test_a_folded_scalar_stays_a_scalar_and_uses_read_the_constant():
    """A 0-d result folds to a 0-d constant (numpy's scalar once became shape (1,), and a
    ``take`` by it grew the ViT's output by an axis); a variable bound to a folded constant
    reads as the constant where it is used (as after TVM's fold: the clamp rewrites match
    constant arguments); a scalar immediate argument (``R.prim_value``) is left alone."""
    x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            flag = bb.emit(relax.op.less(relax.const(0, "int64"), relax.const(1, "int64")))
            index = bb.emit(relax.op.where(flag, relax.const(1, "int64"),
                                           relax.const(0, "int64")))
            row = bb.emit(relax.op.take(x, index, axis=0))
            bound = bb.emit(relax.op.add(relax.const(np.float32(6)), relax.const(np.float32(0))))
            # tril's diagonal is a scalar immediate (an IntImm, a Constant in TVM 0.27)
            lower = bb.emit(relax.op.tril(relax.const(np.ones((3, 3), "float32")), 1))
            out = bb.emit_output(relax.op.add(relax.op.minimum(row, bound), lower))
        bb.emit_func_output(out)
    folded = fold_numpy_constants(bb.get())
    assert str(folded["main"].ty.ret) == str(bb.get()["main"].ty.ret)  # (3,), not (1, 3)
    calls = {}

    @relax.expr_functor.visitor
    class Args(relax.PyExprVisitor):
        def visit_call_(self, call):
            super().visit_call_(call)
            calls[call.op.name] = call.args

    Args().visit_expr(folded["main"])
    assert sorted(calls) == ["relax.add", "relax.minimum", "relax.take", "relax.tril"]
    assert int(calls["relax.tril"][1]) == 1  # left to TVM, its immediate as it was
    index, bound = calls["relax.take"][1], calls["relax.minimum"][1]
    assert isinstance(index, tvm.ir.expr.Constant) and index.value.numpy().shape == ()
    assert int(index.value.numpy()) == 1 and float(bound.value.numpy()) == 6.0
