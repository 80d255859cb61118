"""The activation memory timeline estimator against timelines computed by hand."""

import json

import tvm
from click.testing import CliRunner
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu_generic
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from edgebyoc import cli
from edgebyoc.memory.timeline import MemoryTimeline, timeline_of


@I.ir_module
class Chain:
    """a = scale(x) with a 1 kB scratch buffer; b, c = half(a); d = join(a, c); e = join(a, b)."""

    @T.prim_func(private=True, s_tir=True)
    def scale(a: T.Buffer((1024,), "float32"), b: T.Buffer((1024,), "float32")):
        tmp = T.sblock_alloc_buffer((256,), "float32")
        for i in range(256):
            with T.sblock("t"):
                vi = T.axis.remap("S", [i])
                tmp[vi] = a[vi] * T.float32(2)
        for i in range(1024):
            with T.sblock("b"):
                vi = T.axis.remap("S", [i])
                b[vi] = a[vi] + tmp[vi % 256]

    @T.prim_func(private=True, s_tir=True)
    def half(a: T.Buffer((1024,), "float32"), b: T.Buffer((512,), "float32")):
        for i in range(512):
            with T.sblock("b"):
                vi = T.axis.remap("S", [i])
                b[vi] = a[vi * 2]

    @T.prim_func(private=True, s_tir=True)
    def join(a: T.Buffer((1024,), "float32"), c: T.Buffer((512,), "float32"),
             d: T.Buffer((512,), "float32")):
        for i in range(512):
            with T.sblock("d"):
                vi = T.axis.remap("S", [i])
                d[vi] = a[vi] + c[vi]

    @R.function
    def main(x: R.Tensor((1024,), "float32")) -> R.Tensor((512,), "float32"):
        cls = Chain
        with R.dataflow():
            a = R.call_tir(cls.scale, (x,), out_ty=R.Tensor((1024,), "float32"))
            b = R.call_tir(cls.half, (a,), out_ty=R.Tensor((512,), "float32"))
            c = R.call_tir(cls.half, (a,), out_ty=R.Tensor((512,), "float32"))
            d = R.call_tir(cls.join, (a, c), out_ty=R.Tensor((512,), "float32"))
            e = R.call_tir(cls.join, (a, b), out_ty=R.Tensor((512,), "float32"))
            R.output(e)
        return e


def test_timeline_matches_the_hand_computed_one():
    target = tvm.target.Target("llvm")
    with target:
        planned = tvm.transform.Sequential(cpu_generic.dataflow_lower_passes(target) +
                                           [relax.transform.StaticPlanBlockMemory()])(Chain)
    timeline = timeline_of(planned, target)
    # by hand: a = 4096 B lives to the end; b = 2048 B until e; c = 2048 B until d; d = 2048 B
    # is written and never read; e = 2048 B, the output. The input x is not an activation.
    assert [(s.kernel, s.relax_bytes, s.tir_bytes) for s in timeline.steps] == [
        ("scale", 4096, 1024),             # a + the kernel's 1 kB scratch
        ("half", 4096 + 2048, 0),          # a, b
        ("half", 4096 + 2048 + 2048, 0),   # a, b, c
        ("join", 4096 + 3 * 2048, 0),      # a, b, c, d
        ("join", 4096 + 2048 + 2048, 0),   # a, b, e (c and d are dead)
    ]
    assert timeline.peak_bytes == 10240 and timeline.peak_step.index == 3
    assert sorted(size for _, size in timeline.peak_step.live) == [2048, 2048, 2048, 4096]
    assert MemoryTimeline.from_dict(timeline.to_dict()).to_dict() == timeline.to_dict()


def test_compile_reports_the_peak_and_plots_it(small_model_path, tmp_path):
    plot = tmp_path / "memory.png"
    result = CliRunner().invoke(cli.main, ["compile", str(small_model_path), "-q", "-o",
                                           str(tmp_path / "out"), "--memory-plot", str(plot),
                                           "--no-dfs"])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["memory"]["kind"] == "host" and report["memory"]["mode"] == "off"
    memory = report["memory"]["timeline"]
    steps = memory["steps"]
    assert memory["peak_bytes"] == max(s["total_bytes"] for s in steps)
    assert report["summary"]["peak_activation_bytes"] == memory["peak_bytes"]
    assert memory["unmeasured_kernels"] == []
    # the first conv's output (8 x 16 x 16 fp32) is live while the second conv runs
    assert any(size == 8 * 16 * 16 * 4 for _, size in steps[1]["live"])
    from edgebyoc.report import human_bytes

    assert f"peak activation memory: {human_bytes(memory['peak_bytes'])}" in result.output
    assert human_bytes(272) == "272 B" and human_bytes(55296) == "55.3 kB" \
        and human_bytes(7_690_000) == "7.69 MB" and human_bytes(249_000) == "249 kB"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Peak activation memory" in (tmp_path / "out" / "report.md").read_text()


def _planned_main(sizes):
    """A main as StaticPlanBlockMemory leaves it: one storage reused by tensors of ``sizes``
    floats in turn (each consumed before the next is carved), grown to the largest."""
    from tvm import relax

    x = relax.Var("x", relax.TensorType((4,), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        storage = bb.emit(relax.op.memory.alloc_storage(
            relax.ShapeExpr([4 * max(sizes)]), 0, "global", "float32"), "storage")
        last = x
        for size in sizes:
            tensor = bb.emit(relax.op.memory.alloc_tensor(
                storage, 0, relax.ShapeExpr([size]), "float32"), "alloc")
            last = bb.emit(relax.op.add(relax.op.sum(last), relax.op.sum(tensor)))
        bb.emit_func_output(last)
    return bb.get()


def test_every_storage_takes_its_tensors_size():
    from tvm import relax

    from edgebyoc.memory.storage import exact_size_storages

    def storages(mod):
        found = []
        for block in mod["main"].body.blocks:
            for binding in block.bindings:
                value = binding.value
                if isinstance(value, relax.Call) and getattr(value.op, "name", "") == \
                        "relax.memory.alloc_storage":
                    found.append(int(value.args[0].values[0]))
                elif isinstance(value, relax.Call) and getattr(value.op, "name", "") == \
                        "relax.memory.alloc_tensor":
                    found.append(f"tensor {int(value.args[2].values[0])}")
        return found

    mod = _planned_main([100, 50, 400, 300])
    assert storages(mod) == [1600, "tensor 100", "tensor 50", "tensor 400", "tensor 300"]
    split = exact_size_storages(mod)
    # TVM's plan grew the storage for the 400 floats; each tensor now has a storage of its
    # own size, allocated where the tensor is
    assert storages(split) == [400, "tensor 100", 200, "tensor 50", 1600, "tensor 400",
                               1200, "tensor 300"]
    # a storage planned for a large tensor no longer holds the smaller ones at its size
    shrinking = _planned_main([400, 100])
    assert storages(exact_size_storages(shrinking)) == [1600, "tensor 400", 400,
                                                         "tensor 100"]
    # tensors of one size keep sharing their storage
    unchanged = _planned_main([100, 100])
    assert storages(exact_size_storages(unchanged)) == storages(unchanged)
