"""Schedule-search time per network (#27's goal: at most 1 s per network for the four int8
MLPerf Tiny networks on gap9 and diana, with input-channel and filter tiling in the search
space).

Each point compiles the network (one process, after a warm-up compile of the same network) and
reads the report's ``schedule_search_seconds``: the time spent in the core's search over every
layer and module (each candidate priced by the plugin's cost hook). Repeated; medians.

Run: python benchmarks/search_time.py [--no-record] [--repeats N]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from edgebyoc import compile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import markdown_table, record  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"
NETWORKS = {"MobileNet (VWW)": "vww_96_int8.tflite", "ResNet-8": "pretrainedResnet_quant.tflite",
            "DS-CNN": "kws_ref_model.tflite", "DAE": "ad01_int8.tflite"}
POINTS = [("gap9", 8), ("gap9", 128), ("diana", 8), ("diana", 256)]


def search_seconds(model: Path, target: str, l1_kb: int, repeats: int) -> float:
    """Median search time over ``repeats`` compiles (after one warm-up)."""
    times = []
    for _ in range(repeats + 1):
        compiled = compile(model, target=target, options={"l1_kb": l1_kb}, progress=False)
        times.append(compiled.report["summary"]["schedule_search_seconds"])
    return statistics.median(times[1:])


def main(record_results: bool = True, repeats: int = 3) -> None:
    rows, worst = [], 0.0
    for network, file in NETWORKS.items():
        cells = [network]
        for target, kb in POINTS:
            seconds = search_seconds(MODELS / file, target, kb, repeats)
            worst = max(worst, seconds)
            cells.append(f"{seconds:.2f}")
            print(f"{network} {target} {kb} kB: {seconds:.2f} s", flush=True)
        rows.append(cells)
    text = ("## Schedule search time per network\n\n"
            f"Seconds the core's schedule search takes over a whole network (the report's "
            f"`schedule_search_seconds`: every layer, every module, each candidate priced by "
            f"the plugin's calibrated cost hook), median of {repeats} compiles after a warm-up, "
            f"one process. The search space includes input-channel tiles (partial sums) for "
            f"modules with an accumulator, filter-row and filter-column tiles where the "
            f"module names them (gap9's cluster: `partial_sum_dims` C, FY, FX), and tiles "
            f"that do not divide their dimension.\n\n"
            + markdown_table(["network"] + [f"{t} {kb} kB" for t, kb in POINTS], rows)
            + f"\n\nLongest: {worst:.2f} s (goal: at most 1 s per network).")
    print(text)
    if record_results:
        record("search_time", text)


if __name__ == "__main__":
    count = int(sys.argv[sys.argv.index("--repeats") + 1]) if "--repeats" in sys.argv else 3
    main(record_results="--no-record" not in sys.argv, repeats=count)
