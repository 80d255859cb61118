"""TMModel's equations on a case computed by hand, the calibration fit recovering known
parameters, the texture-cache simulator's LRU and thrashing, and the device files."""

import json
import math

import numpy as np
import pytest

from edgebyoc_adreno import calibrate as cal
from edgebyoc_adreno.kernels import Config, Conv2D, MatMul, RowReduction, configurations
from edgebyoc_adreno.simulator import first_wave_threads, line_keys, run_warps, simulate
from edgebyoc_adreno.tmmodel import (DEVICES, Calibration, DeviceSpec, TMModel, histogram,
                                     load_calibration, load_device, occupancy,
                                     register_footprint, thread_histograms, warp_lanes,
                                     waves)

ADRENO = load_device("adreno740")
CALIBRATION = Calibration(((2, 2), (4, 4)), (2.0, 1.0, 3.0, 5.0, 0.5, 0.25, 0.75), 1.5)


def test_histogram_counts_reads_and_block_crossings():
    x, y = np.array([0, 1, 2, 3, 4, 4]), np.array([0, 0, 0, 1, 2, 5])
    # 2x2 blocks: x crosses at 1->2 and 3->4 (with y: 3->4 moves 1->2 too), y at 2->5 alone;
    # 4x4: x at 3->4 only, y at 2->5 only
    assert histogram(x, y, ((2, 2), (4, 4))).tolist() == [6, 1, 1, 1, 1, 1, 0]


def test_matmul_prediction_equals_the_equations_by_hand():
    kernel = MatMul(8, 8, 8)
    config = Config(("row", "row"), (1, 1), (8, 8), (8, 8))
    # representative thread (1, 4, 0): lhs lane 4 reads k4 = 0, 1 along its row -> x 0..1;
    # rhs lane 1 reads k = 0..7 along its row -> x 0..7 (2x2: 3 crossings, 4x4: 1)
    lhs, rhs = thread_histograms(kernel, config, CALIBRATION.block_shapes)
    assert lhs.tolist() == [2, 0, 0, 0, 0, 0, 0] and rhs.tolist() == [8, 3, 0, 0, 1, 0, 0]
    thread = 2.0 * 10 + 1.0 * 3 + 0.5 * 1
    # eq. 3: w_i s_i; an 8x8 warp reads 8 rows of lhs and 8 column groups of rhs per
    # instruction (row pattern: s = 1, one lane per thread): 16 lines, the cache's 16
    # one work group, one warp: its 8 rows, and the grid's 2 column groups
    assert warp_lanes(kernel, config, ADRENO) == (8, 2)
    exponent = max(0, math.ceil((8 + 2 - ADRENO.cache_lines) / ADRENO.cache_lines))
    assert exponent == 0
    big = MatMul(64, 8, 256)  # 64 rows x 64 column groups: 64 groups of one warp
    threads = first_wave_threads(big, config, ADRENO)  # work groups 0, 5, 10, ... on SP 0
    assert len(threads) == occupancy(big, config, ADRENO) == 9
    rows, columns = len(np.unique(threads[..., 1])), len(np.unique(threads[..., 0]))
    assert warp_lanes(big, config, ADRENO) == (rows, columns) == (48, 64)
    slow = TMModel(ADRENO, CALIBRATION).predict(big, config)
    assert slow.warp == pytest.approx(slow.thread * 1.5 ** math.ceil(
        (rows + columns - ADRENO.cache_lines) / ADRENO.cache_lines))
    footprint = ADRENO.base_registers + 4 * (1 + 2)
    resident = ADRENO.registers_per_sp // (footprint * 64)
    assert register_footprint(kernel, config, ADRENO) == footprint
    assert occupancy(kernel, config, ADRENO) == resident == 9
    assert waves(kernel, config, ADRENO) == 1  # one work group
    prediction = TMModel(ADRENO, CALIBRATION).predict(kernel, config)
    assert prediction.thread == pytest.approx(thread)
    assert prediction.latency == pytest.approx(thread * 1.5 ** exponent)


def test_column_access_never_thrashes_and_occupancy_limits_waves():
    model = TMModel(ADRENO, CALIBRATION)
    kernel = Conv2D("conv", 16, 64, 64, 16, 64, 64, (3, 3), padding=(1, 1, 1, 1))
    column = model.predict(kernel, Config(("column", "column"), (1, 1), (8, 8), (8, 8)))
    assert column.warp == pytest.approx(column.thread)  # s = 0: D^0
    block = model.predict(kernel, Config(("block8", "column"), (1, 1), (8, 8), (8, 8)))
    assert block.warp > block.thread
    big_tile = Config(("column", "column"), (4, 4), (8, 8), (8, 8))
    assert occupancy(kernel, big_tile, ADRENO) < occupancy(kernel, Config(
        ("column", "column"), (1, 1), (8, 8), (8, 8)), ADRENO)
    # more work per thread: fewer work groups, each wave a longer thread
    assert waves(kernel, big_tile, ADRENO) < column.waves


def test_search_is_ordered_and_best_is_its_head():
    model = TMModel(ADRENO, load_calibration("adreno740"))
    kernel = RowReduction("softmax", 512, 512)
    ranked = model.search(kernel)
    assert len(ranked) == len(configurations(kernel, 64, ADRENO.max_image))
    assert all(a.latency <= b.latency for a, b in zip(ranked, ranked[1:]))
    assert model.best(kernel).latency == ranked[0].latency


def test_configurations_respect_the_device_image_limits():
    kernel = MatMul(4096, 4096, 64)  # lhs block8: 4096 * 8 rows
    allowed = configurations(kernel, 64, ADRENO.max_image)
    assert allowed and all(c.patterns[0] != "block8" for c in allowed)
    assert any(c.patterns[0] == "block8" for c in configurations(kernel, 64, None))


def test_calibration_recovers_a_known_beta_and_D():
    runs = cal.stride_runs(40, 512, seed=3)
    features = np.array([histogram(r.x, r.y, cal.BLOCK_SHAPES) for r in runs])
    truth = np.array([3.0, 1.5, 4.0, 0.75, 2.5, 1.0, 0.5])
    beta, r2, r2_cv = cal.fit_beta(features, features @ truth)
    assert np.allclose(beta, truth, rtol=1e-6) and r2 == pytest.approx(1.0)
    assert r2_cv == pytest.approx(1.0)
    noisy = features @ truth * np.random.default_rng(0).normal(1.0, 0.01, len(runs))
    beta, r2, r2_cv = cal.fit_beta(features, noisy)
    # 1 % noise: the coefficients of the correlated crossing counts move, the fit does not
    assert np.allclose(features @ beta, features @ truth, rtol=0.03)
    assert abs(beta[0] - truth[0]) < 0.1 and r2 > 0.95 and r2_cv > 0.9
    points = [(e, 1.7 ** e) for e in range(6)]
    assert cal.fit_thrashing(points) == pytest.approx(1.7)
    assert cal.fit_thrashing([(0, 1.0)]) == 1.0


class _KnownDevice:
    """A device whose latencies come from a known TMModel: calibrate() must give it back."""

    name = "known model"

    def __init__(self, beta, d, spec):
        self.beta, self.d, self.spec = np.array(beta), d, spec

    def chase(self, run):
        return float(histogram(run.x, run.y, cal.BLOCK_SHAPES) @ self.beta)

    def stream(self, threads, reuse, steps):
        capacity = self.spec.cache_lines
        return self.d ** max(0, math.ceil((threads * reuse - capacity) / capacity))


def test_calibrate_end_to_end_on_a_known_model():
    truth = (2.0, 1.0, 3.0, 0.5, 0.25, 1.5, 0.75)
    result = cal.calibrate(_KnownDevice(truth, 1.3, ADRENO), ADRENO, runs=20, steps=256)
    assert np.allclose(result.beta, truth, rtol=1e-6)
    assert result.D == pytest.approx(1.3) and result.fit["r2_cv"] == pytest.approx(1.0)
    assert Calibration.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_simulator_lru_hits_misses_and_thrashing():
    lines = ADRENO.cache_lines
    one = lambda keys: np.array(keys, np.int64)[None, :, None]  # noqa: E731 - one thread
    assert run_warps(one([5, 5, 5]), ADRENO)[1:] == (2, 1)
    fits = list(range(lines)) * 3  # cycles through C lines: hits after the first round
    assert run_warps(one(fits), ADRENO)[1:] == (2 * lines, lines)
    thrash = list(range(lines + 1)) * 3  # LRU with one line too many: every read misses
    assert run_warps(one(thrash), ADRENO)[1:] == (0, 3 * (lines + 1))
    # a warp instruction looks each distinct line up once, and costs hit + miss when any
    # thread misses
    warp = np.array([[0] * 32 + [1] * 32, [0] * 64], np.int64)[None]
    cycles, hits, misses = run_warps(warp, ADRENO)
    assert (hits, misses) == (1, 2)
    assert cycles == ADRENO.simulator["hit_cycles"] * 2 + ADRENO.simulator["miss_cycles"]


def test_line_keys_group_texels_in_blocks_per_texture():
    assert ADRENO.cache_line_texels == (2, 1)  # TMModel Fig. 3: two horizontal texels a line
    keys = line_keys(np.array([0, 0, 0, 1]), np.array([[0, 1, 0, 0]]),
                     np.array([[0, 0, 1, 0]]), np.array([[True] * 4]), ADRENO)
    assert keys[0, 0] == keys[0, 1] and len(set(keys[0, 1:])) == 3  # next row; next texture
    assert line_keys(np.array([0]), np.array([[3]]), np.array([[3]]), np.array([[False]]),
                     ADRENO)[0, 0] == -1


def test_simulated_first_wave_is_the_occupancy_group_of_processor_zero():
    kernel = Conv2D("conv", 16, 64, 64, 16, 64, 64, (3, 3), padding=(1, 1, 1, 1))
    config = Config(("column", "column"), (1, 1), (16, 8), (16, 4))
    threads = first_wave_threads(kernel, config, ADRENO)
    assert threads.shape == (occupancy(kernel, config, ADRENO), 64, 3)
    # work group 0's two warps: 16x4 blocks of its 16x8 threads
    assert threads[0, :, 0].max() == 15 and threads[0, :, 1].max() == 3
    assert threads[1, :, 1].min() == 4
    assert threads[2, 0, 0] == 16 * ADRENO.shader_processors % 64  # work group 5 next
    assert simulate(kernel, config, ADRENO) > 0


@pytest.mark.parametrize("name", DEVICES)
def test_device_files_give_a_source_for_every_number(name):
    spec = load_device(name)
    assert set(spec.sources) == set(DeviceSpec.__dataclass_fields__) - {"name", "simulator",
                                                                         "sources"}
    assert all(len(source) > 10 for source in spec.sources.values())
    assert load_calibration(name).D >= 1.0


def test_a_device_file_without_sources_or_an_unknown_device_is_refused(tmp_path):
    data = json.loads(json.dumps({"name": "x", "warp_size": {"value": 64}}))
    with pytest.raises(ValueError, match="'warp_size' needs a value and its source"):
        DeviceSpec.from_dict(data)
    with pytest.raises(ValueError, match="unknown device 'adreno999'"):
        load_device("adreno999")
    with pytest.raises(ValueError, match="need 7"):
        Calibration(((2, 2), (4, 4)), (1.0,), 1.0)
