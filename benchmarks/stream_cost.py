"""Where a streamed C project's predicted cycles go (issue #30, goal 1: streamed C projects
within 1.20x of the untiled predicted latency at the same RAM).

For the four int8 MLPerf Tiny networks on gap9 and diana: the ``--dfs --io-in-arena``
project (the smallest RAM), and the projects ``--memory-budget`` gives at the RAM of bands of
2 and 8 rows, each with its activation RAM, its predicted latency against the untiled
project's, and the extra cycles split by the parts of the modules' cost models
(``report.json``: ``memory.streamed_regions``, summed over the regions): the fixed cost every
call pays (``overhead``: gap9's calibrated ``*_layer_cycles``; diana's calibration has none),
the compute (``L_ops``) and the transfers (``L_mem``) beyond the whole layers', and the
weight bytes moved again (each call loads its layer's weights, except the layers a chain keeps
in their module's weight memory: diana's digital array, ``ExecModule.weight_memory``), with
the weight memory's bytes the chains use. "without the fixed cost per call" is the predicted latency minus the extra ``overhead``: what the project would predict
if a region paid its fixed cost once for all of a chain's calls (an offload per chain),
which no build here does yet. Predictions only, no timing: deterministic.

    python benchmarks/stream_cost.py [--no-record]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import edgebyoc  # noqa: E402
from record import markdown_table, record  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"
NETWORKS = [("ResNet-8", "pretrainedResnet_quant.tflite"),
            ("MobileNetV1-0.25 VWW", "vww_96_int8.tflite"),
            ("DS-CNN", "kws_ref_model.tflite"), ("AutoEncoder", "ad01_int8.tflite")]
TARGETS = ("gap9", "diana")
#: the wider bands shown beside the smallest RAM: each at the RAM its --dfs plan needs
WIDER_BANDS = (2, 8)


def _extra(regions, part: str) -> float:
    return sum(r["parts"][part][0] - r["parts"][part][1] for r in regions if part in r["parts"])


def row(name: str, target: str, compiled) -> list[str]:
    summary, memory = compiled.report["summary"], compiled.report["memory"]
    whole = summary["predicted_cycles_untiled"]
    regions = memory["streamed_regions"]
    overhead = _extra(regions, "overhead")
    moved = sum(r["weight_bytes"][0] - r["weight_bytes"][1] for r in regions)
    return [name, target, str(memory["band_rows"]), f"{memory['total_activation_bytes']:,}",
            str(sum(r["calls"] for r in regions)), f"{summary['predicted_cycles'] / whole:.2f}x",
            f"{overhead / whole:.2f}x", f"{_extra(regions, 'L_ops') / whole:.2f}x",
            f"{_extra(regions, 'L_mem') / whole:.2f}x", f"{moved:,}",
            f"{(summary['predicted_cycles'] - overhead) / whole:.2f}x",
            f"{compiled.project.weight_memory_bytes:,}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    rows = []
    for name, file in NETWORKS:
        path = str(MODELS / file)
        for target in TARGETS:
            smallest = edgebyoc.compile(path, target=target, dfs=True, io_in_arena=True)
            if not smallest.report["memory"]["enabled"]:
                rows.append([name, target, "-", "not streamed", *["-"] * 8])
                continue
            rows.append(row(name, target, smallest))
            print(rows[-1], flush=True)
            options = {o["band_rows"]: o["total_activation_bytes"]
                       for o in smallest.report["memory"]["band_options"]}
            for band in WIDER_BANDS:
                budget = options.get(band)  # --memory-budget takes the widest band that fits
                if budget is None or budget <= smallest.project.total_activation_bytes:
                    continue
                wider = edgebyoc.compile(path, target=target, memory_budget=budget,
                                         io_in_arena=True)
                rows.append(row(name, target, wider))
                print(rows[-1], flush=True)
    headers = ["network", "target", "band (rows)", "activation RAM (B)", "calls",
               "predicted / untiled", "extra: fixed cost per call", "extra: L_ops",
               "extra: L_mem", "weight bytes moved again",
               "without the fixed cost per call", "weight memory kept (B)"]
    text = ("## C projects: where a streamed project's predicted cycles go\n\n"
            + markdown_table(headers, rows)
            + "\n\nEach streamed project is `--dfs --io-in-arena` (the smallest activation "
              "RAM, bands of one row) or `--memory-budget` at the RAM a wider band needs, "
              "with `--io-in-arena`. The extra columns are cycles beyond the untiled "
              "project's, as multiples of its predicted latency, summed over the offloaded "
              "regions the chains call (`memory.streamed_regions` of report.json): the fixed "
              "cost every call pays (gap9's calibrated `cluster_layer_cycles` 10,295 and "
              "`ne16_layer_cycles` 33,329; diana's calibration fits none), the modules' "
              "compute and transfers. On gap9 the parts overlap (double buffering: a call "
              "takes the larger of L_ops and L_mem, plus the fixed cost), on diana they add "
              "(blocking DMA). diana's digital array keeps a chain's weights in its 64 kB weight "
              "memory (`ExecModule.weight_memory`): only a layer's first call of the chain "
              "loads them (the last column: the weight memory the chains use; ResNet-8's "
              "chain is cut in two where the arena allows, so that each part's weights fit). "
              "gap9's modules have no memory of weights only (its L1 holds the activation "
              "tiles too), so every call loads its weights. \"without the fixed cost per "
              "call\" subtracts the extra fixed cost: the figure an offload per chain (one "
              "fixed cost per region for all its calls) would predict. No build does that "
              "yet; it is the lever the gap9 figures point at, not a result.")
    print(text)
    if not args.no_record:
        record("stream_cost", text)


if __name__ == "__main__":
    main()
