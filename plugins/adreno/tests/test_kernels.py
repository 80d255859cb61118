"""Every adreno kernel, in every access pattern of each texture input, every thread tile, work
group and warp shape, run on the OpenCL device (PoCL here) against numpy (rtol 1e-4), on
random odd shapes that no tile divides; the fp16 variants rendered (compiled where the device
has cl_khr_fp16)."""

import numpy as np
import pytest

from edgebyoc_adreno.kernels import (GROUPS_1D, GROUPS_2D, PATTERNS, TILES, Config, Conv2D,
                                     Epilogue, MatMul, RowReduction, TextureLayout,
                                     configurations, render, warp_shapes)
from edgebyoc_adreno.runtime import Argument, KernelRun, device, opencl_missing

pytestmark = pytest.mark.skipif(opencl_missing() is not None,
                                reason=f"OpenCL: {opencl_missing()}")
RNG = np.random.default_rng(7)


def _dims() -> dict:
    """Odd random sizes (seeded): channels, height, width, out channels."""
    c, h, w, k = (int(v) for v in RNG.integers(3, 14, size=4) | 1)
    return {"c": c, "h": h, "w": w, "k": k}


def _conv(kind, stride, kernel, epilogue):
    d = _dims()
    fy, fx = kernel
    pad = (fy // 2, fx // 2, fy // 2, fx // 2)
    if kind == "deconv":
        oh, ow = (d["h"] - 1) * stride - 2 * pad[0] + fy, (d["w"] - 1) * stride - 2 * pad[1] + fx
    else:
        oh = (d["h"] + 2 * pad[0] - fy) // stride + 1
        ow = (d["w"] + 2 * pad[1] - fx) // stride + 1
    k = d["c"] if kind == "depthwise" else d["k"]
    return Conv2D(kind, d["c"], d["h"], d["w"], k, oh, ow, kernel, (stride, stride),
                  padding=pad, epilogue=epilogue)


KERNELS = {
    "conv2d_s1": _conv("conv", 1, (3, 3), Epilogue(True, "relu")),
    "conv2d_s2": _conv("conv", 2, (5, 3), Epilogue(True, "clip", 0.0, 6.0)),
    "dwconv2d": _conv("depthwise", 1, (3, 3), Epilogue(True, "clip", -1.0, 1.5)),
    "dwconv2d_s2": _conv("depthwise", 2, (5, 5), Epilogue(False)),
    "deconv2d_s1": _conv("deconv", 1, (3, 3), Epilogue(True)),
    "deconv2d_s2": _conv("deconv", 2, (4, 4), Epilogue(True, "relu")),
    "matmul": MatMul(37, 29, 23, epilogue=Epilogue(True, "relu")),
    "softmax": RowReduction("softmax", 13, 37),
    "layernorm": RowReduction("layernorm", 11, 45, epsilon=1e-5),
}


def _variants(kernel) -> list[Config]:
    """Configurations covering every pattern of every input, every tile, every work group and
    every warp shape at least once (cycling through them together)."""
    warp = 64
    if kernel.op == "rows":
        threads = [(g, w) for g in GROUPS_1D for w in warp_shapes(g, warp)]
        tiles = [(t, 1) for t in TILES]
    else:
        threads = [(g, w) for g in GROUPS_2D for w in warp_shapes(g, warp)]
        tiles = [(a, b) for a in TILES for b in TILES]
    count = max(len(PATTERNS), len(threads), len(tiles))
    inputs = len(kernel.inputs)
    return [Config(tuple(PATTERNS[(i + j) % len(PATTERNS)] for j in range(inputs)),
                   tiles[i % len(tiles)], *threads[i % len(threads)]) for i in range(count)]


def _arrays(name, kernel):
    if kernel.op == "conv2d":
        x = RNG.standard_normal((1, kernel.channels, kernel.height, kernel.width))
        fy, fx = kernel.kernel
        shape = {"conv": (kernel.out_channels, kernel.channels, fy, fx),
                 "depthwise": (kernel.channels, 1, fy, fx),
                 "deconv": (kernel.channels, kernel.out_channels, fy, fx)}[kernel.kind]
        arrays = [x, RNG.standard_normal(shape)]
        if kernel.epilogue.bias:
            arrays.append(RNG.standard_normal(kernel.out_channels))
    elif kernel.op == "matmul":
        arrays = [RNG.standard_normal((kernel.rows, kernel.depth)),
                  RNG.standard_normal((kernel.depth, kernel.cols)),
                  RNG.standard_normal(kernel.cols)]
    else:
        arrays = [RNG.standard_normal((kernel.rows, kernel.cols)) * 3]
        if kernel.kind == "layernorm":
            arrays += [RNG.standard_normal(kernel.cols), RNG.standard_normal(kernel.cols)]
    return [a.astype(np.float32) for a in arrays]


def _roles(kernel, count):
    textures = len(kernel.inputs)
    return [Argument("texture", i, i > 0) if i < textures else
            Argument("buffer", i - textures, True) for i in range(count)]


@pytest.mark.parametrize("name", KERNELS)
def test_every_variant_matches_numpy(name):
    kernel = KERNELS[name]
    arrays = _arrays(name, kernel)
    reference = kernel.reference(*arrays)
    scale = max(1.0, float(np.abs(reference).max()))
    variants = _variants(kernel)
    covered = {"patterns": set(), "tiles": set(), "threads": set()}
    for config in variants:
        source = render(kernel, config, name="k")
        out = KernelRun(kernel, config, source, "k", _roles(kernel, len(arrays)))(*arrays)
        assert out.shape == reference.shape
        error = float(np.abs(out - reference).max()) / scale
        assert error < 1e-4, f"{name} {config.label}: relative error {error:.2e}"
        covered["patterns"].update(enumerate(config.patterns))
        covered["tiles"].add(config.tile)
        covered["threads"].add((config.group, config.warp))
    assert len(covered["patterns"]) == len(PATTERNS) * len(kernel.inputs)
    assert len(covered["tiles"]) == (3 if kernel.op == "rows" else 9)
    assert len(covered["threads"]) == len({(c.group, c.warp) for c in configurations(
        kernel, 64)})


def test_a_constant_operand_is_uploaded_once_and_reused():
    kernel = KERNELS["matmul"]
    a, b, bias = _arrays("matmul", kernel)
    run = KernelRun(kernel, Config(("row", "column"), (2, 2), (8, 8), (8, 8)),
                    render(kernel, Config(("row", "column"), (2, 2), (8, 8), (8, 8)), name="k"),
                    "k", _roles(kernel, 3))
    first = run(a, b, bias)
    assert set(run._constants) == {1, 2}
    second = run(a * 2, b, bias)  # the activation changes, the constants are the uploaded ones
    expected = kernel.reference(a * 2, b, bias)
    assert np.allclose(second, expected, rtol=1e-4, atol=1e-4)
    assert not np.allclose(first, second)


def test_texture_layouts_place_each_texel_where_the_pattern_says():
    texels = np.arange(3 * 5 * 4, dtype=np.float32).reshape(3, 5, 4)
    row = TextureLayout("row", (3,), 5).image(texels)
    column = TextureLayout("column", (3,), 5).image(texels)
    block = TextureLayout("block2", (3,), 5).image(texels)
    assert row.shape == (3, 5, 4) and np.array_equal(row[1, 3], texels[1, 3])
    assert column.shape == (5, 3, 4) and np.array_equal(column[3, 1], texels[1, 3])
    # block2: lane 1's sequence walks rows 2-3, two texels down then right
    assert block.shape == (6, 3, 4)
    assert [tuple(block[y, x, 0:1]) for x, y in [(0, 2), (0, 3), (1, 2), (1, 3)]] == \
        [tuple(texels[1, s, 0:1]) for s in range(4)]
    two_d = TextureLayout("block4", (2, 3), 6)
    assert two_d.shape == (8, 6)
    assert TextureLayout("column", (2, 3), 6).coords(np.array(5), np.array(4)) == (2, 1 + 2 * 4)
    with pytest.raises(ValueError, match="access pattern 'diagonal' is not one of"):
        TextureLayout("diagonal", (2,), 2)


@pytest.mark.parametrize("name", ["conv2d_s1", "dwconv2d", "deconv2d_s2", "matmul", "softmax",
                                  "layernorm"])
def test_fp16_variants_are_half_precision_and_compile_where_the_device_can(name):
    kernel = KERNELS[name]
    config = _variants(kernel)[1]
    source = render(kernel, config, name="k", fp16=True)
    assert "#pragma OPENCL EXTENSION cl_khr_fp16 : enable" in source
    assert "typedef half4 real4;" in source and "read_imageh" in source
    assert "float" not in source.replace("read_imagef", "")
    if not device().has_fp16:
        pytest.skip(f"{device().name} has no cl_khr_fp16: the fp16 variant is rendered, "
                    f"not compiled")
    device().build(source)
