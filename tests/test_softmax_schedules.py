"""The host build's softmax: ``fast_exp`` arithmetic, rows in whole vectors and a scalar rest
(``softmax.lane_softmax``, ``row_schedules.HostLaneSoftmaxRule``), one row, and reductions over
a leading axis, each in time linear in the tensor's size and within ``fast_exp``'s error of the
exact softmax."""

import math
import re

import numpy as np
import pytest
import tvm
from tvm import relax

from edgebyoc.codegen.host import host_pipeline, host_target


def _softmax_module(shape: list, axis: int = -1) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.softmax(x, axis=axis))
        bb.emit_func_output(y)
    return bb.get()


def _host_build(mod: tvm.IRModule) -> tuple[tvm.IRModule, relax.VirtualMachine]:
    """(the scheduled TIR module, a VM of the host build) of ``mod``."""
    target = host_target()
    with target:
        lowered = host_pipeline(target)(mod)
    executable = tvm.compile(mod, target=target, relax_pipeline=host_pipeline(target))
    return lowered, relax.VirtualMachine(executable, tvm.cpu())


def _assert_within_fast_exp_error(got: np.ndarray, scores: np.ndarray, axis: int = -1) -> None:
    """``got`` (a softmax of ``scores`` over ``axis``) is within 2e-7 absolute and 1e-5
    relative of the exact float64 softmax wherever that is finite and above 1e-30."""
    wide = scores.astype(np.float64)
    with np.errstate(invalid="ignore"):
        e = np.exp(wide - wide.max(axis, keepdims=True))
        exact = e / e.sum(axis, keepdims=True)
    normal = np.isfinite(exact) & (exact > 1e-30)
    assert np.abs(got - exact)[normal].max() < 2e-7
    assert (np.abs(got - exact)[normal] / exact[normal]).max() < 1e-5


def test_fast_softmax_is_within_2e_7_of_the_exact_one_and_keeps_masks_and_nan_rows():
    """Softmax through ``fast_exp``: masked (-inf) scores stay exactly 0, a fully masked row
    stays NaN as onnxruntime gives it, the rest within 2e-7 absolute and 1e-5 relative
    (``fast_exp``'s own error, as in ``fast_sigmoid``) of the exact one."""
    from edgebyoc.rewrites import fast_softmax

    mod = fast_softmax(_softmax_module([5, 1500]))
    assert "fast_exp" in mod["softmax"].script()
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    rng = np.random.default_rng(0)
    v = (rng.standard_normal((5, 1500)) * 30).astype(np.float32)
    v[1, :700] = -np.inf
    v[2] = -np.inf
    v[3] = rng.standard_normal(1500).astype(np.float32) * 1e-3
    v[4] = np.linspace(-100, 100, 1500)
    got = vm["main"](tvm.runtime.tensor(v)).numpy().astype(np.float64)
    assert np.isnan(got[2]).all() and (got[1, :700] == 0).all()
    _assert_within_fast_exp_error(got, v)


@pytest.mark.parametrize("width", [16, 20, 49, 197, 1500])
def test_softmax_rows_run_in_whole_vectors_and_a_scalar_rest(width):
    """The host build's softmax over rows no lane count divides (197 tokens, 49 in a Swin
    window, 1,500 frames): the row maximum and sum keep 16 lanes of partial results over the
    row's whole vectors and reduce its last ``width % 16`` elements in scalar code; masked
    scores stay 0, a fully masked row NaN, the rest within ``fast_exp``'s 2e-7 / 1e-5."""
    lowered, vm = _host_build(_softmax_module([2, 3, width]))
    text = lowered["softmax"].script()
    assert re.search(r"T\.parallel\((T\.int64\()?6\)", text)
    assert len(re.findall(r"T\.vectorized\((T\.int64\()?16\)", text)) >= 4, text
    assert ("softmax_tail_max" in text) == bool(width % 16)
    rng = np.random.default_rng(width)
    v = (rng.standard_normal((2, 3, width)) * 30).astype(np.float32)
    v[0, 1, : width // 2] = -np.inf
    v[0, 2] = -np.inf
    v[1, 0, -1] = 200.0  # the row's maximum in its scalar rest
    v[1, 1] = np.linspace(-100, 100, width)
    got = vm["main"](tvm.runtime.tensor(v)).numpy().astype(np.float64)
    assert np.isnan(got[0, 2]).all() and (got[0, 1, : width // 2] == 0).all()
    assert got[1, 0, -1] == pytest.approx(1.0, abs=1e-6)
    _assert_within_fast_exp_error(got, v)


@pytest.mark.parametrize("width", [1000, 100003])
def test_a_softmax_of_one_row_runs_its_blocks_once_each(width):
    """A 1-D softmax (one row) runs each block once over the row, in vectors, on the calling
    thread: not once per element (before, the row's maximum and sum were recomputed for each
    element: 1.9 ms for 1,000 elements, against onnxruntime's 0.023; minutes for 100,003)."""
    lowered, vm = _host_build(_softmax_module([width]))
    sch = tvm.s_tir.Schedule(lowered["softmax"])
    for name in ("softmax_lane_max_update", "softmax_lane_sum_update"):
        assert len(sch.get_loops(sch.get_sblock(name))) == 2  # (vector, lane): no outer loop
    assert "T.parallel" not in lowered["softmax"].script()
    v = (np.random.default_rng(width).standard_normal(width) * 30).astype(np.float32)
    v[-1] = 200.0  # the maximum in the scalar rest
    got = vm["main"](tvm.runtime.tensor(v)).numpy().astype(np.float64)
    _assert_within_fast_exp_error(got, v)


@pytest.mark.parametrize("shape, axis", [([5000, 4], 0), ([1, 1000, 49], 1), ([2, 21, 16, 16], 1)])
def test_a_softmax_over_a_leading_axis_runs_each_block_once(shape, axis):
    """A softmax over an axis other than the last (classes in an NCHW segmentation head): TVM's
    dlight reduction rule would run every block inside the output's first loop, recomputing
    the maximum and the sum per element (5,000 x 4 over axis 0: 188 ms, onnxruntime 0.055);
    declined, each block makes one pass over its tensor."""
    lowered, vm = _host_build(_softmax_module(shape, axis))
    sch = tvm.s_tir.Schedule(lowered["softmax"])
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        iterations = math.prod(int(sch.get(loop).extent) for loop in sch.get_loops(block))
        assert iterations <= math.prod(shape), sch.get(block).name_hint
    v = (np.random.default_rng(axis).standard_normal(shape) * 30).astype(np.float32)
    got = vm["main"](tvm.runtime.tensor(v)).numpy().astype(np.float64)
    _assert_within_fast_exp_error(got, v, axis)


def test_the_guard_keeps_tvms_rule_for_symbolic_rows_and_declines_a_leading_axis():
    """Where every block reads the reductions at its own leading axes (a softmax over the last
    axis of symbolic length, which the lane rule leaves to it), TVM's reduction rule still
    schedules the function: its rows in parallel."""
    from edgebyoc.row_schedules import ReductionOverRowsOnly

    target = host_target()
    with target:
        lowered = host_pipeline(target)(_softmax_module([tvm.tirx.Var("rows", "int64"), 300]))
    assert "T.parallel" in lowered["softmax"].script()
    leading = _softmax_module([300, 4], axis=0)
    with target:
        legalized = relax.transform.LegalizeOps()(leading)
    rule = ReductionOverRowsOnly(tvm.s_tir.dlight.cpu.Reduction())
    assert rule.apply(legalized["softmax"], target, False) is None
