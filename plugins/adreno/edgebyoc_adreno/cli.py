"""``edgebyoc-adreno``: the plugin's own command line.

``edgebyoc-adreno calibrate -o device.json`` runs TMModel's micro-benchmarks on the first
OpenCL device (``--simulate DEVICE``: on the texture-cache simulator of a shipped device file
instead) and writes the fitted ``beta`` / ``D`` with the fit's R^2 and cross-validated R^2; pass
the file to a compile with ``--option calibration=device.json``.
``edgebyoc-adreno devices`` lists the shipped device files with the source of each number.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .tmmodel import DEVICES, load_device


def _calibrate(args) -> int:
    from .calibrate import OpenCLDevice, SimulatedDevice, calibrate

    spec = load_device(args.device)
    if args.simulate:
        device = SimulatedDevice(spec)
    else:
        from .runtime import opencl_missing

        reason = opencl_missing()
        if reason:
            print(f"edgebyoc-adreno: cannot calibrate on OpenCL: {reason}", file=sys.stderr)
            return 2
        device = OpenCLDevice()

    def progress(done, total):
        if not sys.stderr.isatty():
            return
        print(f"\r  {device.name}: {done}/{total} micro-benchmarks", end="", file=sys.stderr,
              flush=True)

    result = calibrate(device, spec, runs=args.runs, steps=args.steps, seed=args.seed,
                       progress=progress)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    Path(args.output).write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    fit = result.fit
    print(f"beta = {[round(b, 4) for b in result.beta]}, D = {result.D:.4f}; "
          f"R^2 {fit['r2']:.3f}, {5}-fold cross-validated R^2 {fit['r2_cv']:.3f} "
          f"({fit['runs']} runs on {fit['measured_on']}) -> {args.output}")
    return 0


def _devices(_args) -> int:
    for name in DEVICES:
        spec = load_device(name)
        print(f"{name}: {spec.name}")
        for field, source in spec.sources.items():
            print(f"  {field} = {getattr(spec, field)}  ({source})")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="edgebyoc-adreno", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    cal = commands.add_parser("calibrate", help="fit TMModel's beta and D on a device")
    cal.add_argument("-o", "--output", required=True, help="the calibration JSON to write")
    cal.add_argument("--device", default="pocl", choices=DEVICES,
                     help="device file giving the cache size and warp size (default: pocl)")
    cal.add_argument("--simulate", action="store_true",
                     help="time the micro-benchmarks on the texture-cache simulator")
    cal.add_argument("--runs", type=int, default=60, help="random-stride runs (default 60)")
    cal.add_argument("--steps", type=int, default=2048, help="reads per run (default 2048)")
    cal.add_argument("--seed", type=int, default=0)
    cal.set_defaults(run=_calibrate)
    devices = commands.add_parser("devices", help="list the shipped device files")
    devices.set_defaults(run=_devices)
    args = parser.parse_args(argv)
    if getattr(args, "runs", 1) < 10 or getattr(args, "steps", 2) < 2:
        parser.error("--runs must be at least 10 and --steps at least 2")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
