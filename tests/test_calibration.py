"""Cost-model calibration: parameters a plugin declares, calibration files, the option that
applies one, the report's statement, and ``edgebyoc calibrate`` recovering a synthetic
board's constants from noisy measurements."""

import csv
import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import edgebyoc
from edgebyoc import plugins
from edgebyoc.api import CalibrationParameter, Target, calibrated_constants
from edgebyoc.calibration import Calibration, load_calibration
from edgebyoc.calibration_fit import calibrate, read_measurements
from edgebyoc.cli import main
from edgebyoc.errors import CompileError
from edgebyoc.testing.models import GraphBuilder, small_convnet

METER_PLUGIN = """
import math
from edgebyoc.api import CalibrationParameter, Cost, Target, calibrated_constants, hookimpl

PARAMETERS = (
    CalibrationParameter("cycles_per_mac", 8.0, 0.5, 50.0, "cycles", "per MAC", "assumption"),
    CalibrationParameter("cycles_per_element", 4.0, 0.0, 100.0, "cycles", "per output element",
                         "assumption"),
)
TARGET = Target("meter", "a processor priced per MAC and per element", api_version="2.6",
                clock_hz=100e6, calibration=PARAMETERS)

@hookimpl
def edgebyoc_targets():
    return [TARGET]

@hookimpl
def edgebyoc_host_cost(target, workload, options):
    k = calibrated_constants(target, options)
    elements = math.prod(workload.output[0]) if workload.output[0] else 0
    return Cost(k["cycles_per_mac"] * workload.macs + k["cycles_per_element"] * elements)
"""

TRUE = {"cycles_per_mac": 3.25, "cycles_per_element": 17.5}


@pytest.fixture
def meter(make_plugin, monkeypatch):
    """The test plugin ``meter`` installed in the default registry (the CLI finds it)."""
    make_plugin("meter", METER_PLUGIN)
    monkeypatch.setenv(plugins.ENV_LOAD, "meter")
    plugins.reset_default_registry()
    return plugins.default_registry()


def elementwise_net(size: int) -> onnx.ModelProto:
    """No MACs: only output elements (the per-element constant alone prices it)."""
    g = GraphBuilder(1)
    x = g.op("Relu", ["input"])
    x = g.op("Add", [x, "input"])
    x = g.op("Relu", [x])
    return g.model("input", [1, 8, size, size], x, [1, 8, size, size], "elementwise")


def wide_conv(channels: int) -> onnx.ModelProto:
    """MAC-heavy: one 3x3 convolution."""
    g = GraphBuilder(2)
    y = g.conv("input", channels, channels, 3)
    return g.model("input", [1, channels, 8, 8], y, [1, channels, 8, 8], "wide_conv")


@pytest.fixture
def board(tmp_path, meter):
    """A synthetic board: five models whose 'measured' latency is the meter model with the
    constants ``TRUE``, times 1 + 1 % Gaussian noise; two more rows are test rows."""
    models = {"convnet16": small_convnet(16), "convnet24": small_convnet(24),
              "elementwise12": elementwise_net(12), "elementwise20": elementwise_net(20),
              "conv32": wide_conv(32), "conv16": wide_conv(16), "elementwise16":
              elementwise_net(16)}
    truth = Calibration("meter", TRUE).save(tmp_path / "truth.json")
    rng = np.random.default_rng(3)
    rows = []
    for i, (name, model) in enumerate(models.items()):
        onnx.save(model, tmp_path / f"{name}.onnx")
        compiled = edgebyoc.compile(tmp_path / f"{name}.onnx", target="meter",
                                    options={"calibration": str(truth)})
        ms = compiled.report["summary"]["predicted_latency_ms"] * (1 + rng.normal(0, 0.01))
        rows.append([name, f"{name}.onnx", "", "false", "test" if i >= 5 else "fit", ms])
    path = tmp_path / "measured.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["name", "model", "options", "dfs", "split", "latency_ms"])
        writer.writerows(rows)
    return path


def test_the_fit_recovers_a_synthetic_boards_constants(board, meter):
    result = calibrate("meter", read_measurements(board), meter)
    for name, value in TRUE.items():
        assert result.calibration.values[name] == pytest.approx(value, rel=0.05)
    stats = result.calibration.fit
    assert stats["points"] == 5 and stats["test_points"] == 2
    assert stats["test"]["max_error"] < 0.05 and stats["fit"]["r2"] > 0.99
    assert stats["fit"]["spearman"] == pytest.approx(1.0)
    assert stats["loo_max_error"] < 0.1
    assert stats["error_band"] == max(stats["test"]["max_error"], stats["fit"]["max_error"])
    assert [r["split"] for r in result.rows] == ["fit"] * 5 + ["test"] * 2
    assert all("loo_error" in r for r in result.rows[:5])


def test_calibrate_cli_writes_a_file_the_option_applies(board, meter, tmp_path):
    out = tmp_path / "calib.json"
    result = CliRunner().invoke(main, ["calibrate", "meter", str(board), "-o", str(out),
                                       "-q"])
    assert result.exit_code == 0, result.output
    assert "fit rows: R^2" in result.output and "leave-one-out" in result.output
    assert "elementwise16" in result.output and "expected error within" in result.output
    saved = json.loads(out.read_text())
    assert saved["target"] == "meter" and saved["fitted_on"] == "measured.csv"
    assert saved["values"]["cycles_per_mac"] == pytest.approx(TRUE["cycles_per_mac"], rel=0.05)
    # the file changes the prediction, without code changes, and the report says so
    model = board.parent / "conv32.onnx"
    default = edgebyoc.compile(model, target="meter")
    calibrated = edgebyoc.compile(model, target="meter", options={"calibration": str(out)})
    macs = calibrated.report["summary"]["macs"]
    assert default.report["summary"]["predicted_cycles"] > 8 * macs
    assert calibrated.report["summary"]["predicted_cycles"] < 4 * macs
    stated = calibrated.report["summary"]["calibration"]
    assert stated["file"] == str(out) and stated["points"] == 5 and not stated["uncalibrated"]
    assert default.report["summary"]["calibration"]["uncalibrated"]
    markdown = (calibrated.save(tmp_path / "artifact") / "report.md").read_text()
    assert "Cost constants: calibrated by calib.json (5 points), expected error within" \
        in markdown


def test_fewer_rows_than_parameters_says_so(tmp_path, meter, small_model_path):
    default = edgebyoc.compile(small_model_path, target="meter").report["summary"]
    path = tmp_path / "one.csv"
    path.write_text(f"name,model,latency_ms\none,{small_model_path},"
                    f"{2 * default['predicted_latency_ms']}\n")
    notes = []
    result = calibrate("meter", read_measurements(path), meter, progress=notes.append)
    assert "note: 2 parameters fitted on 1 rows: the fit is not determined by the data " \
        "alone" in notes
    assert result.rows[0]["error"] == pytest.approx(0.0, abs=1e-3)  # one row: fitted exactly
    assert result.calibration.fit["error_band_from"] == "the fit row's error"


def test_fitting_only_named_parameters(board, meter):
    result = calibrate("meter", read_measurements(board), meter,
                       parameters=["cycles_per_mac"])
    assert result.calibration.values["cycles_per_element"] == 4.0
    with pytest.raises(CompileError, match="no calibration parameter 'cycles'"):
        calibrate("meter", read_measurements(board), meter, parameters=["cycles"])


def test_a_parameter_checks_its_bounds():
    with pytest.raises(ValueError, match="lower <= default <= upper"):
        CalibrationParameter("x", 5.0, 0.0, 1.0)
    p = CalibrationParameter("x", 0.5, 0.0, 1.0)
    assert p.check("0.25") == 0.25
    with pytest.raises(ValueError, match="calibration parameter x: 2.0 is outside its bounds"):
        p.check(2.0)
    with pytest.raises(ValueError, match="declares a calibration parameter twice"):
        Target("t", calibration=(p, p))


def test_declaring_parameters_adds_the_option():
    target = Target("t", calibration=(CalibrationParameter("x", 0.5, 0.0, 1.0),))
    assert [o.name for o in target.options] == ["calibration"]
    assert target.resolve_options(None)["calibration"] == ""
    assert Target("u").options == ()
    assert calibrated_constants(target, {"calibration": ""}) == {"x": 0.5}


@pytest.mark.parametrize("content, message", [
    ("not json", "is not valid JSON"),
    ('{"target": "meter"}', "is not an edgebyoc calibration file"),
    ('{"format": "edgebyoc-calibration/1", "target": "gap9", "values": {}}',
     "calibrates target 'gap9', not 'meter'"),
    ('{"format": "edgebyoc-calibration/1", "target": "meter", "values": {"speed": 1}}',
     "has no calibration parameter 'speed' \\(parameters: cycles_per_mac, "
     "cycles_per_element\\)"),
    ('{"format": "edgebyoc-calibration/1", "target": "meter", "values": '
     '{"cycles_per_mac": -1}}', "cycles_per_mac: -1.0 is outside its bounds"),
])
def test_a_bad_calibration_file_is_refused(tmp_path, meter, small_model_path, content,
                                           message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(CompileError, match=message):
        edgebyoc.compile(small_model_path, target="meter", options={"calibration": str(path)})
    with pytest.raises(CompileError, match="cannot be read"):
        load_calibration(tmp_path / "missing.json", meter.target("meter"))


@pytest.mark.parametrize("row, message", [
    ("a,missing.onnx,,false,fit,1.0", "model 'missing.onnx' not found"),
    ("a,m.onnx,,false,fit,-2", "latency_ms must be positive"),
    ("a,m.onnx,,false,later,1", "split 'later' is not fit or test"),
    ("a,m.onnx,lanes,false,fit,1", "option 'lanes' is not NAME=VALUE"),
    ("a,m.onnx,,maybe,fit,1", "dfs 'maybe' is not true or false"),
])
def test_bad_measurements_name_the_line(tmp_path, small_model_path, row, message):
    (tmp_path / "m.onnx").write_bytes(small_model_path.read_bytes())
    path = tmp_path / "rows.csv"
    path.write_text("name,model,options,dfs,split,latency_ms\n" + row + "\n")
    with pytest.raises(CompileError, match="rows.csv line 2: " + message):
        read_measurements(path)
    path.write_text("name,model\n")
    with pytest.raises(CompileError, match="missing column\\(s\\) latency_ms"):
        read_measurements(path)


def test_a_target_without_parameters_cannot_be_calibrated(tmp_path, small_model_path):
    path = tmp_path / "rows.csv"
    path.write_text(f"name,model,latency_ms\na,{small_model_path},1\n")
    with pytest.raises(CompileError, match="target 'host' declares no calibration parameters"):
        calibrate("host", read_measurements(path))


def test_a_sweep_carries_the_calibration_and_recomputes_when_it_changes(tmp_path, meter,
                                                                        small_model_path):
    """results.csv gets the calibration that priced each point; editing the calibration file
    (the same path) gives the point a new key, so it is computed again, not read from the
    cache, and its latency follows the file."""
    from edgebyoc.sweep import SweepSpec
    from edgebyoc.sweep.worker import run_point

    board = tmp_path / "board.json"
    Calibration("meter", {"cycles_per_mac": 2.0}, {"points": 3, "error_band": 0.1}).save(board)
    spec = SweepSpec(models=[str(small_model_path)], targets={"meter": {"calibration": [
        str(board)]}}, action="compile", base=tmp_path)
    first = spec.points(meter)[0]
    row = run_point(first.to_dict())
    assert row["status"] == "ok", row["error"]
    assert row["calibration"] == "board.json" and row["calibration_error_band"] == 0.1
    Calibration("meter", {"cycles_per_mac": 4.0}).save(board)
    second = spec.points(meter)[0]
    assert second.key != first.key
    again = run_point(second.to_dict())
    assert again["predicted_cycles"] > row["predicted_cycles"]
    board.write_text("{}")
    with pytest.raises(Exception, match="targets.meter: .*board.json is not an edgebyoc "
                                        "calibration file"):
        spec.points(meter)


def test_constants_are_remembered_within_one_compile_only(meter, tmp_path, monkeypatch):
    from edgebyoc import calibration

    target = meter.target("meter")
    first = str(Calibration("meter", {"cycles_per_mac": 2.0}).save(tmp_path / "a.json"))
    second = str(Calibration("meter", {"cycles_per_mac": 5.0}).save(tmp_path / "b.json"))
    loads = []
    real = calibration.load_calibration
    monkeypatch.setattr(calibration, "load_calibration",
                        lambda path, t: loads.append(path) or real(path, t))
    with calibration.constants_memo():
        one = calibrated_constants(target, {"calibration": first})
        one["cycles_per_mac"] = -1.0  # a hook's copy: changing it changes nothing remembered
        assert calibrated_constants(target, {"calibration": first})["cycles_per_mac"] == 2.0
        assert calibrated_constants(target, {"calibration": second})["cycles_per_mac"] == 5.0
        assert calibrated_constants(target, {})["cycles_per_mac"] == 8.0  # the default
        assert loads == [first, second]  # each file once, however often the hooks ask
    # outside a compile every call looks at the file: a new calibration is seen at once
    Calibration("meter", {"cycles_per_mac": 7.0}).save(tmp_path / "a.json")
    assert calibrated_constants(target, {"calibration": first})["cycles_per_mac"] == 7.0
