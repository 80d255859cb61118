"""Wide 1x1 convolutions in a sliding macro-kernel sum their input channels in chunks over a
row's register tiles (``sliding_rows.channel_chunk``, ``sliding._chunked_columns``): the same
additions in the same order, so the same outputs to the bit as reading every channel per
tile."""

import re

import numpy as np
import tvm
from test_dfs import build, chain_model
from tvm import relax

from edgebyoc.codegen.host import host_pipeline, host_target
from edgebyoc.frontend import import_model, random_inputs
from edgebyoc.memory import sliding, sliding_rows
from edgebyoc.memory.dfs import Tile
from edgebyoc.memory.planner import DfsPlan, MacroKernel, find_chains

# 320 channels in blocks of 32 are 40 kB of weights a block: chunks of 80 channels (10 kB);
# 37 columns are five register tiles of 7 and one of 2
WIDE = [(320, 320, 1, 1, 1, 1), (320, 320, 3, 1, 320, 1), (320, 64, 1, 1, 1, 1)]


def test_wide_1x1_layers_sum_their_channels_in_chunks_to_the_same_bits(monkeypatch):
    imported = import_model(chain_model(WIDE, size=(9, 37), seed=2))
    imported.mod = relax.transform.FoldConstant()(imported.mod)
    (chain,) = find_chains(imported.mod["main"])
    assert [sliding_rows.channel_chunk(layer, 32) for layer in chain] == [80, 0, 80]
    # the last layer's NCHW row (37 x 32) and the widest row of partial sums
    assert sliding_rows.accumulator_bytes(chain)[0] == 2 * 37 * 32 * 4
    plan = DfsPlan([MacroKernel(chain, Tile(1, chain[-1].out_shape[3], sliding=True))])
    target = host_target("skylake-avx512")
    with target:
        lowered = host_pipeline(target, True, dfs=plan)(imported.mod)
    (script,) = [f.script() for gv, f in lowered.functions.items()
                 if isinstance(f, tvm.tirx.PrimFunc) and gv.name_hint.endswith("_sliding")]
    # the first layer splits its rows by channel blocks (a whole row of partial sums), the
    # last one (82 kB of weights) by column halves of 21 and 16 columns
    found = re.findall(r"psum = T\.alloc_buffer\(\((\d+), (\d+)\)\)", script)
    assert sorted((int(c), int(b)) for c, b in found) == [(16, 32), (21, 32), (37, 32)]
    # a run of tiles of one width per loop: 5 of 7 and 1 of 2 columns; 3 of 7; 2 of 7 and 1 of 2
    assert script.count("T.if_then_else(cc == 0") == 5
    computed = "\n".join(line for line in script.splitlines() if "prefetch" not in line)
    assert computed.count("cc * 80 + ci") == 2 * 5
    # each row's first run of tiles prefetches the weights of the next chunk, after the last
    # chunk those of the next channel block (10 blocks in the first layer, 2 in the last): a
    # prefetch per 64-byte line of a block's 32 weights, in 3 runs (the last layer's 2 halves)
    prefetches = re.findall(
        r"llvm\.prefetch\", T\.address_of\(p(\d+)\[T\.if_then_else\(cc < 3, ko, T\.min\(ko \+ 1, "
        r"(\d+)\)\), T\.if_then_else\(cc < 3, cc \* 80 \+ ci \+ 80, cc \* 80 \+ ci - 240\), 0, 0, "
        r"(\d+)\]\), 0, 2, 1\)", script)
    # p1, p5: the first and last layers' weights (the data, then each layer's weight and bias)
    assert sorted((int(p), int(last), int(kb)) for p, last, kb in prefetches) == sorted(
        [(1, 9, 0), (1, 9, 16)] + [(5, 1, 0), (5, 1, 16)] * 2)
    assert script.count("llvm.prefetch") == 6
    untiled, _ = build(imported, None)
    chunked, _ = build(imported, plan)
    monkeypatch.setattr(sliding, "channel_chunk", lambda *args: 0)
    whole, _ = build(imported, plan)
    for seed in (0, 1):
        inputs = random_inputs(imported.inputs, seed=seed)
        expected, got, reference = untiled.run(inputs), chunked.run(inputs), whole.run(inputs)
        for key in expected:
            assert np.array_equal(got[key], reference[key])
            assert np.abs(got[key] - expected[key]).max() <= 1e-5 * np.abs(expected[key]).max()


def test_narrow_or_odd_layers_read_every_channel_per_tile():
    """Up to 32 kB of weights a block the tiles read all channels; a chunk divides the input
    channels, from 32 up (none: no chunks), and holds at most 16 kB of a block's weights."""
    def conv(channels, kernel=1, groups=1):
        return sliding_rows.Layer(1, None, None, None, (1, 1), (0, 0, 0, 0), (1, 1), groups,
                                  (1, channels, 8, 8), (1, 64, 8, 8),
                                  (64, channels // groups, kernel, kernel))

    assert sliding_rows.channel_chunk(conv(256), 32) == 0  # 32 kB: read whole
    assert sliding_rows.channel_chunk(conv(264), 32) == 88
    assert sliding_rows.channel_chunk(conv(263), 32) == 0  # a prime: no divisor
    assert sliding_rows.channel_chunk(conv(896), 32) == 128
    assert sliding_rows.channel_chunk(conv(896), 16) == 224
    assert sliding_rows.channel_chunk(conv(896, kernel=3), 32) == 0  # 1x1 only
