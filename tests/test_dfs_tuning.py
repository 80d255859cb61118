"""Depth-first plans decided by their measured speed: the tuning record, ``--tune``, and the
plans tried when the lowest-peak one runs too slow (``memory.choose_dfs_plan``'s
``slowdown_of``). Measurements are replaced by fixed ratios where the decision is tested, not
the clock."""

import json
import re

import numpy as np
import pytest
from test_dfs import chain_model
from tvm import relax

import edgebyoc
from edgebyoc.errors import CompileError
from edgebyoc.frontend import import_model, random_inputs
from edgebyoc.memory.dfs import Tile
from edgebyoc.memory.planner import DfsPlan, MacroKernel, find_chains
from edgebyoc.plugins import PluginRegistry


def peak_mb(compiled) -> str:
    """A build's activation peak as the reports print it (MB, 3 decimals)."""
    return f"{compiled.report['summary']['peak_activation_bytes'] / 1e6:.3f}"


def test_automatic_mode_uses_a_plan_a_tuning_record_measured_fast(small_model_path, tmp_path,
                                                                  monkeypatch):
    """Nothing is timed unless asked: without a tuning record the automatic mode keeps the
    untiled host build; ``tune`` measures into the record (the measurement is replaced here
    by a fixed ratio: what is tested is the decision, not the clock), and a compile with
    the record decides from it alone."""
    from click.testing import CliRunner

    from edgebyoc import cli, memory_stage
    from edgebyoc.testing.models import small_convnet

    registry = PluginRegistry(search_path=[])
    record = tmp_path / "tuning.json"
    untimed = edgebyoc.compile(small_convnet(), registry=registry)
    memory = untimed.report["memory"]
    assert not memory["enabled"] and memory["decision"] == "automatic mode: no tuning record"
    assert "only when a tuning record measured it within 1.05x" in memory["reason"]
    # nothing could approve a plan, so none is built or measured (each lowers the model)
    assert "its 1 candidate plan(s) were neither built nor measured" in memory["reason"]
    assert memory["candidates"] == [] and memory["failed_candidates"] == []
    measured = []
    monkeypatch.setattr(memory_stage, "measure_slowdown",
                        lambda *runs: measured.append(runs) or 1.01)
    automatic = edgebyoc.compile(small_convnet(), registry=registry, tuning_record=record,
                                 tune=True)
    untiled = edgebyoc.compile(small_convnet(), registry=registry, dfs=False)
    memory = automatic.report["memory"]
    # the two convolutions stream as one sliding kernel: 6,668 bytes instead of 23,168
    assert len(measured) == 1 and memory["enabled"] and memory["mode"] == "auto"
    assert memory["recompute_factor"] == 1.0 and memory["measured_slowdown"] == 1.01
    assert memory["decision"] == f"measured now (--tune), written to {record}: 1.01x the " \
                                 f"untiled build's time"
    assert memory["baseline_peak_bytes"] == untiled.report["summary"]["peak_activation_bytes"]
    assert automatic.report["summary"]["peak_activation_bytes"] == memory["peak_bytes"]
    assert memory["peak_bytes"] < 0.8 * memory["baseline_peak_bytes"]
    assert untiled.report["memory"]["enabled"] is False
    assert untiled.report["memory"]["reason"] == "turned off"
    inputs = random_inputs(untiled.inputs, 4)
    for key, value in untiled.run(inputs).items():
        assert np.abs(automatic.run(inputs)[key] - value).max() <= 1e-5 * np.abs(value).max()
    # the record decides without timing; two compiles with it write the same artifact
    again = edgebyoc.compile(small_convnet(), registry=registry, tuning_record=record)
    assert len(measured) == 1 and again.report["memory"]["enabled"]
    assert again.report["memory"]["decision"] == f"tuning record {record}: 1.01x the untiled " \
                                                 f"build's time"
    assert again.save(tmp_path / "a") and automatic.save(tmp_path / "b")
    for name in ("host.so", "constants.bin"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    # the CLI says what it chose and plots both timelines
    plot = tmp_path / "timeline.png"
    result = CliRunner().invoke(cli.main, ["compile", str(small_model_path), "-q", "-o",
                                           str(tmp_path / "out"), "--memory-plot", str(plot),
                                           "--tuning-record", str(record), "--tune"])
    assert result.exit_code == 0, result.output
    assert re.search(r"peak activation memory: 6\.\d+ kB", result.output), result.output
    # the untiled peak depends on the CPU's register blocks (each tile's padded input rows)
    untiled_mb = peak_mb(untiled)
    assert f"depth-first: 1 macro-kernels, 1.00x MACs, untiled peak {untiled_mb} MB" \
        in result.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # TVM's default build stays TVM's unless DFS is asked for
    default_build = edgebyoc.compile(small_convnet(), registry=registry, schedules=False)
    assert not default_build.report["memory"]["enabled"]
    assert default_build.report["memory"]["reason"].startswith("--no-schedules keeps TVM's")
    # a memory budget needs the planner; tune needs a record
    with pytest.raises(CompileError, match="memory budget needs depth-first planning"):
        edgebyoc.compile(small_convnet(), registry=registry, dfs=False, memory_budget=10_000)
    with pytest.raises(CompileError, match="name its file"):
        edgebyoc.compile(small_convnet(), registry=registry, tune=True)


def test_a_tuning_measurement_names_the_convolutions_it_tiled():
    """Two plans alike in the report (a kernel of two of four equal convolutions, the same
    output shape and band) but over different convolutions key different measurements; the
    same plan found in two imports of the model keys the same one."""
    from edgebyoc.memory_stage import _recorded_plan

    layers = [(8, 8, 3, 1, 1, 1)] * 4
    recorded = []
    for _ in range(2):
        mod = relax.transform.FoldConstant()(import_model(chain_model(layers)).mod)
        (chain,) = find_chains(mod["main"])
        plans = [DfsPlan([MacroKernel(chain[first:first + 2], Tile(1, 19, sliding=True))])
                 for first in (0, 2)]
        assert plans[0].to_dict() == plans[1].to_dict()
        recorded.append([_recorded_plan(mod, plan) for plan in plans])
    assert recorded[0] == recorded[1] and recorded[0][0] != recorded[0][1]
    assert json.loads(recorded[0][1])["macro_kernels"] == plans[1].to_dict()["macro_kernels"]


def test_automatic_mode_drops_a_plan_measured_slower(small_model_path, monkeypatch, tmp_path):
    """A plan the tuning record measured beyond ``AUTO_MAX_SLOWDOWN`` is not used, whether
    measured now or read from the record; forced tiling is not timed."""
    from edgebyoc import memory_stage

    monkeypatch.setattr(memory_stage, "measure_slowdown", lambda *runs: 1.5)
    registry = PluginRegistry(search_path=[])
    record = tmp_path / "tuning.json"
    first = edgebyoc.compile(small_model_path, registry=registry, tuning_record=record,
                             tune=True)
    memory = first.report["memory"]
    assert not memory["enabled"] and memory["macro_kernels"] == []
    assert memory["measured_slowdown"] == 1.5
    untiled_mb = peak_mb(edgebyoc.compile(small_model_path, registry=registry, dfs=False))
    assert memory["reason"] == (f"the depth-first build (peak 0.006 MB against {untiled_mb} MB) "
                                f"runs 1.50x the untiled build's time (measured now (--tune), "
                                f"written to {record}); automatic mode accepts up to 1.05x "
                                f"(--dfs or --memory-budget use it)")
    assert first.report["summary"]["peak_activation_bytes"] == memory["baseline_peak_bytes"]
    assert len(json.loads(record.read_text())["measurements"]) == 1
    monkeypatch.setattr(memory_stage, "measure_slowdown", None)  # not called again
    second = edgebyoc.compile(small_model_path, registry=registry, tuning_record=record)
    assert second.report["memory"]["reason"].endswith(
        f"(tuning record {record}); automatic mode accepts up to 1.05x (--dfs or "
        f"--memory-budget use it)")
    forced = edgebyoc.compile(small_model_path, registry=registry, dfs=True)
    assert forced.report["memory"]["enabled"]
    assert forced.report["memory"]["measured_slowdown"] is None


def test_measured_slowdown_is_the_ratio_of_the_fastest_runs(monkeypatch):
    """The measurement's arithmetic on a fake clock: interleaved rounds, the fastest run of
    each build, at least 5 rounds."""
    from edgebyoc.memory import tuning

    clock = [0.0]
    runs = {"untiled": [3.0, 1.0, 2.0], "tiled": [9.0, 4.0, 3.0]}
    counts = {"untiled": 0, "tiled": 0}

    def runner(name):
        def run():
            durations = runs[name]
            clock[0] += durations[counts[name] % len(durations)]
            counts[name] += 1
        return run

    monkeypatch.setattr(tuning.time, "perf_counter", lambda: clock[0])
    ratio = tuning.measure_slowdown(runner("untiled"), runner("tiled"), rounds=5, seconds=0)
    assert counts == {"untiled": 6, "tiled": 6}  # a warm-up run each, then 5 rounds
    assert ratio == 3.0  # fastest tiled 3.0 over fastest untiled 1.0


def test_a_tuning_record_is_checked(tmp_path):
    from edgebyoc.memory.tuning import TuningRecord

    broken = tmp_path / "broken.json"
    broken.write_text("[1, 2]")
    with pytest.raises(CompileError, match="not an edgebyoc tuning record"):
        TuningRecord(broken)
    record = TuningRecord(tmp_path / "new.json")
    record.store("k", 1.02, cpu="x")
    assert TuningRecord(tmp_path / "new.json").slowdown("k") == 1.02




#: a chain whose lowest-peak plan tiles four convolutions and the next one all five
FIVE_CONVS = [(4, 16, 3, 1, 1, 1), (16, 16, 3, 2, 1, 1), (16, 32, 3, 1, 1, 1),
              (32, 32, 3, 2, 1, 1), (32, 32, 3, 1, 1, 1)]


def test_a_plan_measured_too_slow_gives_way_to_the_next_lowest_peak(tmp_path, monkeypatch):
    """The lowest-peak plan measured beyond 1.05x: the next plan that still saves 20 % is
    measured and taken; the record then decides alone in both modes. With the faster plan's
    measurement gone, the automatic mode keeps the untiled build and says how to measure it,
    and ``--dfs`` keeps its lowest peak."""
    from edgebyoc import memory_stage

    registry = PluginRegistry(search_path=[])
    model = chain_model(FIVE_CONVS, size=(48, 48))
    ratios = iter([1.2, 1.0])
    monkeypatch.setattr(memory_stage, "measure_slowdown", lambda *runs: next(ratios))
    record = tmp_path / "tuning.json"
    tuned = edgebyoc.compile(model, registry=registry, tuning_record=record, tune=True)
    lowest = edgebyoc.compile(model, registry=registry, dfs=True).report["memory"]
    untiled = edgebyoc.compile(model, registry=registry, dfs=False)
    memory = tuned.report["memory"]
    assert memory["enabled"] and memory["measured_slowdown"] == 1.0
    assert [trial["slowdown"] for trial in memory["speed_trials"]] == [1.2, 1.0]
    assert [trial["peak_bytes"] for trial in memory["speed_trials"]] == \
        [lowest["peak_bytes"], memory["peak_bytes"]]
    assert lowest["peak_bytes"] < memory["peak_bytes"] <= 0.8 * memory["baseline_peak_bytes"]
    assert [k["units"] for k in lowest["macro_kernels"]] == [4]
    assert [k["units"] for k in memory["macro_kernels"]] == [5]
    assert memory["decision"] == (
        f"measured now (--tune), written to {record}: 1.00x the untiled build's time; also "
        f"tried: peak {lowest['peak_bytes'] / 1e6:.3f} MB 1.20x the untiled build's time")
    inputs = random_inputs(untiled.inputs, 2)
    for key, value in untiled.run(inputs).items():
        assert np.abs(tuned.run(inputs)[key] - value).max() <= 1e-5 * np.abs(value).max()
    assert len(json.loads(record.read_text())["measurements"]) == 2
    monkeypatch.setattr(memory_stage, "measure_slowdown", None)  # the record decides alone
    for dfs in (None, True):
        again = edgebyoc.compile(model, registry=registry, tuning_record=record, dfs=dfs)
        assert again.report["memory"]["peak_bytes"] == memory["peak_bytes"]
        assert again.report["memory"]["speed_trials"] == memory["speed_trials"]
    assert again.report["memory"]["decision"].startswith(f"forced (--dfs); tuning record "
                                                         f"{record}: 1.00x")
    data = json.loads(record.read_text())
    data["measurements"] = {k: v for k, v in data["measurements"].items()
                            if v["slowdown"] == 1.2}
    record.write_text(json.dumps(data))
    automatic = edgebyoc.compile(model, registry=registry, tuning_record=record)
    memory = automatic.report["memory"]
    assert not memory["enabled"] and memory["measured_slowdown"] == 1.2
    assert memory["speed_trials"][1]["slowdown"] is None
    assert "runs 1.20x the untiled build's time (tuning record" in memory["reason"]
    assert "MB not measured; automatic mode accepts up to 1.05x (--tune measures the plans " \
           "not measured)" in memory["reason"]
    forced = edgebyoc.compile(model, registry=registry, tuning_record=record, dfs=True)
    assert forced.report["memory"]["peak_bytes"] == lowest["peak_bytes"]
    assert forced.report["memory"]["measured_slowdown"] == 1.2


def test_the_speed_trials_skip_plans_holding_a_slow_kernel_and_stop_at_three():
    """``_fast_enough`` on plans by hand: a plan with every kernel of one measured slow is not
    tried; at most ``SPEED_TRIALS`` are; none fast enough gives the first (lowest peak)."""
    from edgebyoc.memory import SPEED_TRIALS, DfsChoice, _fast_enough
    from edgebyoc.memory.timeline import MemoryStep, MemoryTimeline

    mod = relax.transform.FoldConstant()(import_model(chain_model(FIVE_CONVS)).mod)
    (chain,) = find_chains(mod["main"])

    def plan(*groups):
        return DfsPlan([MacroKernel(chain[a:b], Tile(1, 19, sliding=True)) for a, b in groups])

    slow, holding_slow, other, third, fourth = (
        plan((0, 2)), plan((0, 2), (3, 5)), plan((1, 3)), plan((2, 4)), plan((3, 5)))
    ranked = [(p, 1000 + 100 * i) for i, p in enumerate([slow, holding_slow, other, third,
                                                        fourth])]
    timed = []

    def slowdown_of(p):
        timed.append(p)
        return {id(other): 1.1, id(third): 1.3, id(fourth): 1.0}.get(id(p), 1.2)

    choice = DfsChoice(slow, 1000, 1.0, MemoryTimeline([MemoryStep(0, "k", 5000, 0)]), [])
    result = _fast_enough(choice, ranked, lambda p, peak: (p, peak, 1.0), slowdown_of)
    assert SPEED_TRIALS == 3 and timed == [slow, other, third]  # not holding_slow, not fourth
    assert result.plan is slow and result.peak_bytes == 1000 and result.slowdown == 1.2
    assert [t.to_dict() for t in result.trials] == [
        {"peak_bytes": 1000, "slowdown": 1.2}, {"peak_bytes": 1200, "slowdown": 1.1},
        {"peak_bytes": 1300, "slowdown": 1.3}]
    timed.clear()
    ranked[2] = (fourth, 1200)  # fast: taken, nothing after it is timed
    result = _fast_enough(choice, ranked, lambda p, peak: (p, peak, 1.0), slowdown_of)
    assert timed == [slow, fourth] and result.plan is fourth and result.slowdown == 1.0


def test_tune_says_which_plan_it_times_and_what_it_measured(tmp_path, monkeypatch, capsys):
    """``--tune`` builds and times each plan while the memory stage runs (seconds to minutes
    on a real model): with progress on, a line under the stage names each plan before it is
    timed and gives its measurement after."""
    from edgebyoc import memory_stage

    ratios = iter([1.2, 1.0])
    monkeypatch.setattr(memory_stage, "measure_slowdown", lambda *runs: next(ratios))
    edgebyoc.compile(chain_model(FIVE_CONVS, size=(48, 48)), registry=PluginRegistry(
        search_path=[]), tuning_record=tmp_path / "tuning.json", tune=True, progress=True)
    lines = [line.strip() for line in capsys.readouterr().err.splitlines()]
    steps = [line for line in lines if line.startswith("memory:")]
    assert steps == [
        "memory: building and timing depth-first plan 1 (4 convolutions in 1 macro-kernel) "
        "against the untiled build (--tune)",
        "memory: depth-first plan 1 (4 convolutions in 1 macro-kernel) runs 1.20x the untiled "
        "build's time",
        "memory: building and timing depth-first plan 2 (5 convolutions in 1 macro-kernel) "
        "against the untiled build (--tune)",
        "memory: depth-first plan 2 (5 convolutions in 1 macro-kernel) runs 1.00x the untiled "
        "build's time"]
    # under the memory stage: after the stages before it, before its own line
    memory_line = next(i for i, line in enumerate(lines) if re.match(r"✓ memory\b", line))
    assert lines.index(steps[0]) < memory_line and lines.index(steps[-1]) < memory_line
    assert any(re.match(r"✓ partition\b", line) for line in lines[:lines.index(steps[0])])
