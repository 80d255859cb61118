"""One activation arena per run of a host build (``memory.storage.arena_storages``)."""

import numpy as np
import pytest
from tvm import relax

from edgebyoc.memory.storage import ARENA_ALIGNMENT, arena_storages


def _op(value) -> str:
    return getattr(getattr(value, "op", None), "name", "") if isinstance(value, relax.Call) \
        else ""


def _allocations(mod) -> tuple[list[int], dict[str, tuple[str, int]], list[str]]:
    """(bytes of every alloc_storage, tensor name -> (its storage's name, offset), the
    names of the tensors moved to their data pointer by ensure_zero_offset)."""
    storages, tensors, zeroed = [], {}, []
    names = {}
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if _op(value) == "relax.memory.alloc_storage":
                storages.append(int(value.args[0].values[0]))
                names[binding.var] = binding.var.name
            elif _op(value) == "relax.memory.alloc_tensor":
                tensors[binding.var.name] = (names[value.args[0]], int(value.args[1].value))
            elif _op(value) == "relax.memory.ensure_zero_offset":
                zeroed.append(binding.var.name)
    return storages, tensors, zeroed


def _planned_main(return_tensor: bool = False):
    """A main as TVM's StaticPlanBlockMemory leaves it: ``a`` (256 B) read once, then ``b``
    (1,024 B) that lives on through a tuple, ``c`` (256 B) carved while ``b`` is alive; with
    ``return_tensor``, ``d`` (400 B) is returned."""
    x = relax.Var("x", relax.TensorType((4,), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        first = bb.emit(relax.op.memory.alloc_storage(
            relax.ShapeExpr([256]), 0, "global", "float32"), "first")
        a = bb.emit(relax.op.memory.alloc_tensor(first, 0, relax.ShapeExpr([64]), "float32"),
                    "a")
        bb.emit(relax.op.sum(a))
        second = bb.emit(relax.op.memory.alloc_storage(
            relax.ShapeExpr([1024]), 0, "global", "float32"), "second")
        b = bb.emit(relax.op.memory.alloc_tensor(second, 0, relax.ShapeExpr([256]), "float32"),
                    "b")
        pair = bb.emit(relax.Tuple([b, x]))  # b's last use is through this alias
        c = bb.emit(relax.op.memory.alloc_tensor(first, 0, relax.ShapeExpr([64]), "float32"),
                    "c")
        bb.emit(relax.op.sum(c))
        bb.emit(relax.op.sum(relax.TupleGetItem(pair, 0)))
        # as in a lowered main, the result is not computed from the planned tensors (the
        # kernels write it into an output tensor of its own); the pass takes any value bound
        # from a tensor to alias it, so sums of a and c would keep them alive to the end
        out = x
        if return_tensor:
            third = bb.emit(relax.op.memory.alloc_storage(
                relax.ShapeExpr([400]), 0, "global", "float32"), "third")
            d = bb.emit(relax.op.memory.alloc_tensor(third, 0, relax.ShapeExpr([100]),
                                                     "float32"), "d")
            out = bb.emit(relax.Tuple([out, d]))
        bb.emit_func_output(out)
    return bb.get()


def test_tensors_share_one_arena_by_lifetime():
    mod = _planned_main()
    assert _allocations(mod)[0] == [256, 1024]
    carved, planned = arena_storages(mod)
    storages, tensors, zeroed = _allocations(carved)
    # one arena: b (1,024 B) at 0, a (dead before b is carved) at 0 too, c beside b (b is
    # still read through the tuple when c is written): 1,280 bytes for the 1,536 planned
    assert storages == [1280] and planned == 1280
    assert tensors == {"a": ("arena", 0), "b": ("arena", 0), "c": ("arena", 1024)}
    # c is read through a view at its data pointer (the kernels take byte_offset 0)
    assert len(zeroed) == 1
    reads = [b.value.args[0] for block in carved["main"].body.blocks for b in block.bindings
             if _op(b.value) == "relax.sum"]
    assert [v.name for v in reads[:2]] == ["a", zeroed[0]]
    assert 1024 % ARENA_ALIGNMENT == 0


def test_a_returned_tensor_keeps_its_storage():
    carved, planned = arena_storages(_planned_main(return_tensor=True))
    storages, tensors, _ = _allocations(carved)
    assert planned == 1280 and storages == [1280, 400]
    assert tensors["d"] == ("third", 0)


def test_nothing_to_share_leaves_the_module():
    x = relax.Var("x", relax.TensorType((4,), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        only = bb.emit(relax.op.memory.alloc_storage(
            relax.ShapeExpr([400]), 0, "global", "float32"), "only")
        a = bb.emit(relax.op.memory.alloc_tensor(only, 0, relax.ShapeExpr([100]), "float32"))
        bb.emit_func_output(bb.emit(relax.op.sum(a)))
    mod = bb.get()
    carved, planned = arena_storages(mod)
    assert planned == 0 and carved is mod


@pytest.mark.parametrize("builder", ["mobilenet_v2", "small_convnet"])
def test_host_build_runs_from_one_arena(builder, tmp_path):
    """The built model holds one arena no larger than its exact-size storages' timeline peak
    (the report says so), and its outputs equal onnxruntime's."""
    import edgebyoc
    from edgebyoc.testing import models

    model = getattr(models, builder)(**({"image_size": 96, "width": 0.5}
                                        if builder == "mobilenet_v2" else {}))
    compiled = edgebyoc.compile(model)
    memory = compiled.report["memory"]
    arena, peak = memory["activation_arena_bytes"], memory["timeline"]["peak_bytes"]
    relax_peak = max(step["relax_bytes"] for step in memory["timeline"]["steps"])
    assert 0 < arena <= relax_peak <= peak
    compiled.save(tmp_path / "artifact")
    from edgebyoc.report import human_bytes

    report = (tmp_path / "artifact" / "report.md").read_text()
    assert f"one arena of {human_bytes(arena)}" in report
    spec = compiled.inputs[0]
    x = np.random.default_rng(0).standard_normal(spec.shape).astype(np.float32)
    result, _ = edgebyoc.verify(compiled, inputs={spec.name: x})
    assert result.passed, result
    first = compiled.run({spec.name: x})
    again = compiled.run({spec.name: x})  # the arena is handed back and reused
    for name, value in first.items():
        np.testing.assert_array_equal(value, again[name])
