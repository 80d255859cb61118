import pytest

from edgebyoc.target import (API_VERSION, CodegenOutput, ExecModule, MemoryLevel, OutputKind,
                             Target, TargetOption, api_major)


def test_api_major():
    assert api_major("1.0") == 1
    assert api_major("2.7") == 2
    assert api_major(API_VERSION) == 1
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
