"""Integer arithmetic (TFLite requantization), the integerization pass and the MATCH schedule
search (against exhaustive enumeration)."""

import math

import numpy as np
import pytest

from edgebyoc.dse import LoopNest, exhaustive, search, spatial_unrolling
from edgebyoc.quant import arith
from edgebyoc.target import Cost


def test_single_shift_requantization_equals_tflite_two_step():
    rng = np.random.default_rng(0)
    for i in range(4000):
        m, s = arith.quantize_multiplier(10 ** rng.uniform(-6, 0.4))
        x = int(rng.integers(-2**22, 2**22)) if i % 2 else int(rng.integers(-300, 300))
        assert int(arith.multiply_by_quantized_multiplier(x, m, s)) == \
            arith.tflite_multiply_by_quantized_multiplier(x, m, s), (x, m, s)
    for s in (0, -1, -3):  # exact ties, where the two roundings are most fragile
        for x in range(-64, 64):
            assert int(arith.multiply_by_quantized_multiplier(x, 1 << 30, s)) == \
                arith.tflite_multiply_by_quantized_multiplier(x, 1 << 30, s)


def test_half_up_rounding_differs_by_at_most_one():
    rng = np.random.default_rng(1)
    x = rng.integers(-2**20, 2**20, 20000)
    m, s = arith.quantize_multiplier(0.0123)
    a = arith.multiply_by_quantized_multiplier(x, m, s, arith.ROUND_TFLITE)
    b = arith.multiply_by_quantized_multiplier(x, m, s, arith.ROUND_HALF_UP)
    assert np.abs(a - b).max() == 1 and (a != b).any()


def test_spatial_unrolling_rule():
    assert spatial_unrolling(32, 8) == (8, "exact", 32)
    assert spatial_unrolling(25, 8) == (8, "padded", 32)   # 5 (reduced) vs 4 (padded) trips
    assert spatial_unrolling(6, 4) == (3, "reduced", 6)    # 2 trips either way: no padding
    assert spatial_unrolling(5, 2) == (2, "padded", 6)


def _toy_price(schedule):
    """A cost monotone in transfers, bytes and chunks, like MATCH's models."""
    tiles = schedule.tiles
    ops = schedule.iterations * (100 + math.ceil(tiles["OY"] / 2) * math.ceil(tiles["K"] / 4)
                                 * tiles["OX"] * schedule.nest.C * schedule.nest.FY
                                 * schedule.nest.FX / 8)
    mem = sum(n * (b / 8 + 27 * c) for n, b, c in schedule.transfers.values())
    return Cost(max(ops, mem) if schedule.double_buffer else ops + mem)


def _random_nest(rng):
    kind = rng.choice(["conv2d", "conv2d", "depthwise", "dense", "add"])
    k = int(rng.choice([4, 8, 12, 16, 24, 32]))
    size = int(rng.choice([4, 6, 8, 10, 12, 16]))
    f = int(rng.choice([1, 3]))
    stride = int(rng.choice([1, 2]))
    if kind == "dense":
        return LoopNest("dense", K=k, C=int(rng.choice([16, 64])), OY=1, OX=1)
    c = k if kind in ("depthwise", "add") else int(rng.choice([3, 8, 16]))
    f = 1 if kind == "add" else f
    stride = 1 if kind == "add" else stride
    pad = f // 2
    out = (size + 2 * pad - f) // stride + 1
    return LoopNest(kind, K=k, C=c, OY=out, OX=out, FY=f, FX=f, IY=size, IX=size,
                    stride=(stride, stride), padding=(pad, pad, pad, pad))


def test_search_finds_the_exhaustive_optimum_on_random_workloads():
    rng = np.random.default_rng(7)
    checked = 0
    while checked < 24:
        nest = _random_nest(rng)
        capacity = int(rng.choice([1024, 4096, 16384]))
        fast = search(nest, capacity, _toy_price, {"OY": 2, "K": 4})
        full = exhaustive(nest, capacity, _toy_price, {"OY": 2, "K": 4})
        assert (fast.schedule is None) == (full.schedule is None)
        if full.schedule is None:
            continue
        assert fast.cost.latency_cycles == pytest.approx(full.cost.latency_cycles)
        assert fast.schedule.l1_bytes <= capacity
        checked += 1


def test_schedule_accounting_on_a_hand_computed_case():
    nest = LoopNest("conv2d", K=8, C=4, OY=4, OX=4, FY=3, FX=3, IY=4, IX=4,
                    padding=(1, 1, 1, 1))
    from edgebyoc.dse import Schedule
    s = Schedule(nest, {"K": 4, "OY": 2, "OX": 4}, ("K", "OY"), {"I": 2, "W": 1, "O": 2},
                 double_buffer=False)
    assert s.iterations == 4
    # weights: 4 filters of 3x3x4 plus 12 bytes of bias / multiplier / shift each, twice
    assert s.transfers["W"] == (2, 4 * 36 + 48, 1)
    # input: 2 output rows read 4 input rows (clipped to the padded image), whole width
    assert s.transfers["I"] == (4, 4 * 6 * 4, 1)
    assert s.transfers["O"] == (4, 4 * 2 * 4, 8)


def test_integerize_matches_the_float_chain_on_a_tflite_model(tflite_path):
    import tvm
    from tvm import relax

    from edgebyoc.frontend import import_model, random_inputs
    from edgebyoc.quant.integerize import integerize
    from edgebyoc.quant.reference import run_reference

    imported = import_model(tflite_path("vww_96_int8"))
    integer = relax.transform.FoldConstant()(integerize(imported.mod))
    ops = set()
    relax.analysis.post_order_visit(integer["main"].body, lambda e: ops.add(e.op.name)
                                    if isinstance(e, relax.Call)
                                    and isinstance(e.op, tvm.ir.Op) else None)
    assert "relax.call_tir" in ops and "relax.nn.conv2d" in ops
    x = random_inputs(imported.inputs, seed=3)
    vm = relax.VirtualMachine(tvm.compile(integer, target="llvm"), tvm.cpu())
    tvm_out = vm["main"](*[tvm.runtime.tensor(v) for v in x.values()]).numpy()
    assert np.array_equal(run_reference(integer, list(x.values()))[0], tvm_out)
    float_vm = relax.VirtualMachine(tvm.compile(relax.transform.FoldConstant()(imported.mod),
                                                target="llvm"), tvm.cpu())
    float_out = float_vm["main"](*[tvm.runtime.tensor(v) for v in x.values()]).numpy()
    assert np.abs(float_out.astype(int) - tvm_out).max() <= 1


@pytest.fixture
def tflite_path():
    from pathlib import Path
    root = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"

    def path(name):
        return str(root / f"{name}.tflite")
    return path
