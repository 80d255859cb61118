import re

import pytest

from edgebyoc.target import (API_VERSION, CodegenOutput, ExecModule, MemoryLevel, OutputKind,
                             Target, TargetOption, api_major)


def test_api_major():
    assert api_major("1.0") == 1
    assert api_major("2.7") == 2
    assert api_major(API_VERSION) == 2
    with pytest.raises(ValueError, match="MAJOR.MINOR"):
        api_major("one")


def test_target_options_resolve_and_parse():
    t = Target("chip", options=(TargetOption("l1_kb", int, 128, "L1 size"),
                                TargetOption("double_buffer", bool, True)))
    assert t.resolve_options(None) == {"l1_kb": 128, "double_buffer": True}
    assert t.resolve_options({"l1_kb": "16", "double_buffer": "off"}) == \
        {"l1_kb": 16, "double_buffer": False}
    with pytest.raises(ValueError, match="has no option 'l2_kb'.*options: l1_kb, double_buffer"):
        t.resolve_options({"l2_kb": "1"})
    with pytest.raises(ValueError, match="option l1_kb: 'big' is not a valid int"):
        t.resolve_options({"l1_kb": "big"})


def test_target_validation():
    with pytest.raises(ValueError, match="alphanumeric"):
        Target("my-chip")
    with pytest.raises(ValueError, match="module name twice"):
        Target("chip", modules=(ExecModule("a"), ExecModule("a")))
    with pytest.raises(ValueError, match="contain no '.'"):
        ExecModule("a.b")
    with pytest.raises(ValueError, match="size_bytes must be positive"):
        MemoryLevel("L1", 0)
    t = Target("chip", modules=(ExecModule("accel"),))
    assert t.module("accel").name == "accel"
    with pytest.raises(KeyError, match="modules: accel"):
        t.module("npu")


def test_codegen_output_needs_its_payload():
    out = CodegenOutput(OutputKind.C_SOURCE, "f", c_source="int x;")
    assert out.kind is OutputKind.C_SOURCE
    with pytest.raises(ValueError, match="has no json_graph payload"):
        CodegenOutput(OutputKind.JSON_GRAPH, "g")
    with pytest.raises(ValueError, match="needs a loader_kind"):
        CodegenOutput(OutputKind.BLOB, "b", blob=b"\0")


def test_the_static_descriptions_are_hashable_cache_keys():
    from edgebyoc.api import ApiBinding, CodegenContext, Cost, Workload
    from edgebyoc.target import FrozenMap

    a = ExecModule("accel", spatial_mapping={"OY": 8, "K": 4},
                   layouts={"relax.nn.conv2d": ["NHWC", "OHWI"]},
                   memory_levels=[MemoryLevel("L1", 1024)])
    b = ExecModule("accel", spatial_mapping={"K": 4, "OY": 8},
                   layouts={"relax.nn.conv2d": ("NHWC", "OHWI")},
                   memory_levels=(MemoryLevel("L1", 1024),))
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert isinstance(a.spatial_mapping, FrozenMap) and a.spatial_mapping["OY"] == 8
    with pytest.raises(TypeError):
        a.spatial_mapping["OY"] = 2
    target = Target("chip", modules=(a,), options=(TargetOption("l1_kb", int, 64),))
    work = Workload("relax.nn.conv2d", "chip.accel.conv2d", inputs=([[1, 8, 8, 16], "int8"],),
                    output=([1, 8, 8, 32], "int8"), attrs={"strides": [1, 1]}, bits={"I": 8})
    assert work.attrs["strides"] == [1, 1] and work.inputs == (((1, 8, 8, 16), "int8"),)
    cost = Cost(10.0, breakdown={"L_ops": 10.0})
    binding = ApiBinding("host", memory={"dma": "memcpy_dma"}, headers=["host.h"])
    context = CodegenContext(options={"l1_kb": 64}, bindings={"host": binding, "soc": None})
    cache = {(target, work, cost, binding, context): "cached"}
    assert cache[(target, work, Cost(10.0, breakdown={"L_ops": 10.0}), binding,
                  CodegenContext(options={"l1_kb": 64},
                                 bindings={"soc": None, "host": binding}))] == "cached"
    assert context.binding("host") is binding and context.binding("soc") is None


def test_option_values_are_checked_with_what_is_allowed():
    t = Target("chip", options=(
        TargetOption("l1_kb", int, 256, "L1 in kB", minimum=8, maximum=256),
        TargetOption("modules", str, "digital,analog", choices=("digital", "analog"),
                     multiple=True, minimum=1),
        TargetOption("mode", str, "auto", choices=("auto", "force", "off"))))
    assert t.resolve_options({"l1_kb": "16", "modules": "analog"}) == \
        {"l1_kb": 16, "modules": "analog", "mode": "auto"}
    for given, message in [
            ({"l1_kb": "-5"}, "option l1_kb: -5 is out of range (8 to 256)"),
            ({"l1_kb": "512"}, "option l1_kb: 512 is out of range (8 to 256)"),
            ({"modules": "foo"}, "option modules: 'foo' is not allowed (allowed: a "
                                 "comma-separated subset of digital, analog, at least one)"),
            ({"modules": "digital,analog,gpu"}, "'digital,analog,gpu' is not allowed"),
            ({"modules": ""}, "option modules: '' is not allowed"),
            ({"mode": "always"}, "option mode: 'always' is not allowed (allowed: one of auto, "
                                 "force, off)")]:
        with pytest.raises(ValueError, match=re.escape(message)):
            t.resolve_options(given)
    with pytest.raises(ValueError, match="option l1_kb: 4 is out of range"):
        Target("bad", options=(TargetOption("l1_kb", int, 4, minimum=8),)).resolve_options(None)


def test_spatial_mapping_is_validated():
    """Any of K, C, OY, OX, FY, FX with a positive factor (a K x C systolic array is the common
    case); anything else names what is allowed instead of being ignored."""
    from edgebyoc.api import Cost
    from edgebyoc.api.match import LoopNest, search

    array = ExecModule("array", spatial_mapping={"K": 64, "C": 64})
    assert dict(array.spatial_mapping) == {"K": 64, "C": 64}
    for mapping, message in (({"FOO": 3}, "spatial_mapping dimension 'FOO' is not a loop dimension "
                                          "\\(allowed: K, C, OY, OX, FY, FX\\)"),
                             ({"K": 0}, "spatial_mapping\\['K'\\] = 0 must be a positive "
                                        "integer"),
                             ({"C": 2.5}, "spatial_mapping\\['C'\\] = 2.5 must be a positive"),
                             ({"OY": True}, "spatial_mapping\\['OY'\\] = True must be a positive")):
        with pytest.raises(ValueError, match=f"module 'array': {message}"):
            ExecModule("array", spatial_mapping=mapping)
    nest = LoopNest("conv2d", K=64, C=48, OY=8, OX=8, FY=3, FX=3, IY=8, IX=8,
                    padding=(1, 1, 1, 1))
    seen = []

    def price(schedule):
        seen.append(dict(schedule.spatial))
        return Cost(latency_cycles=schedule.iterations + schedule.l1_bytes / 1e6)

    result = search(nest, 64 * 1024, price, unrolling=dict(array.spatial_mapping))
    # C = 48 on the 64-wide C axis: MATCH's rule reduces the parallelism to 48 (one pass)
    assert result.schedule.spatial["C"] == (48, "reduced", 48)
    assert result.schedule.spatial["K"] == (64, "exact", 64)
    assert all("C" in s for s in seen)


def test_a_weight_memory_is_an_inner_level_holding_only_weights():
    """``ExecModule.weight_memory`` (API 2.10) names an inner level with operands ("W",);
    ``Schedule.weights_resident`` prices a call without a weight transfer."""
    from edgebyoc.dse import LoopNest, Schedule

    l1 = MemoryLevel("L1", 4096, operands=("I", "O"))
    wmem = MemoryLevel("WMEM", 2048, operands=("W",))
    l2 = MemoryLevel("L2", 1 << 20)
    module = ExecModule("npu", memory_levels=(l1, wmem, l2), weight_memory="WMEM")
    assert module.weight_memory_level() is wmem
    assert ExecModule("npu", memory_levels=(l1, wmem, l2)).weight_memory_level() is None
    for levels, name in (((l1, wmem, l2), "L1"), ((l1, wmem, l2), "SRAM"), ((l1, wmem), "WMEM")):
        with pytest.raises(ValueError, match=f"weight_memory '{name}' must name an inner "
                                             f"memory level"):
            ExecModule("npu", memory_levels=levels, weight_memory=name)
    nest = LoopNest("conv2d", K=32, C=16, OY=8, OX=8, FY=3, FX=3, IY=8, IX=8,
                    padding=(1, 1, 1, 1))
    s = Schedule(nest, tiles={"K": 32, "OY": 4, "OX": 8}, order=("OY",),
                 fill={"I": 1, "W": 0, "O": 1}, double_buffer=True)
    resident = Schedule(nest, s.tiles, s.order, s.fill, True, weights_resident=True)
    assert s.transfers["W"] == (1, 32 * 16 * 9 + 12 * 32, 1)
    assert resident.transfers["W"] == (0, 32 * 16 * 9 + 12 * 32, 1)
    assert resident.transfers["I"] == s.transfers["I"] and resident.l1_bytes == s.l1_bytes
    with pytest.raises(ValueError, match="resident_weights needs a c_entry_rows"):
        CodegenOutput(OutputKind.C_SOURCE, "f", c_source="int x;", c_entry="f_entry",
                      resident_weights="f_resident", resident_weight_bytes=64)
