"""gap9: predicted latency of the four int8 MLPerf Tiny networks beside MATCH's Table IV.

For each network and module set (CPU only, cluster+CPU, NE16+CPU, full) the network is compiled
for gap9 and its latency predicted at 260 MHz: the offloaded layers by the module cost models
under the schedule the search found, the layers left on the fabric controller by the host
model (``edgebyoc_gap9.cost.host_cycles`` through ``edgebyoc_host_cost``, fitted to the
paper's CPU-only ResNet figure): the report's whole-network ``predicted_cycles``. The
paper's columns are board measurements; ours are model predictions. Also printed: the schedule
search time per network, and the search's optimality gap against exhaustive enumeration on 24
random convolution workloads.

Run: python benchmarks/gap9_table_iv.py [--no-record]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

import edgebyoc
from edgebyoc.dse import LoopNest, exhaustive, search
from edgebyoc_gap9 import cost

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import markdown_table, record  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"
NETWORKS = [("MobileNet", "vww_96_int8"), ("ResNet", "pretrainedResnet_quant"),
            ("DSCNN", "kws_ref_model"), ("DAE", "ad01_int8")]
CONFIGS = [("CPU only", ""), ("Cluster+CPU", "cluster"), ("NE16+CPU", "ne16"),
           ("Full", "cluster,ne16")]
PAPER = {"MobileNet": (236.22, 11.2, 5.02, 4.94), "ResNet": (342.72, 5.48, 2.9, 2.15),
         "DSCNN": (83.41, 4.25, 14.46, 1.57), "DAE": (6.12, 0.54, 6.12, 0.54)}


def optimality_gap(count: int = 24, seed: int = 11):
    rng = np.random.default_rng(seed)
    gaps, fast_s, full_s = [], 0.0, 0.0
    while len(gaps) < count:
        k, c = int(rng.choice([8, 16, 32, 64])), int(rng.choice([3, 8, 16, 32]))
        size, f = int(rng.choice([8, 12, 16, 24, 32])), int(rng.choice([1, 3]))
        stride = int(rng.choice([1, 2]))
        pad = f // 2
        out = (size + 2 * pad - f) // stride + 1
        nest = LoopNest("conv2d", K=k, C=c, OY=out, OX=out, FY=f, FX=f, IY=size, IX=size,
                        stride=(stride, stride), padding=(pad, pad, pad, pad))
        module = str(rng.choice(["cluster", "ne16"]))
        unroll = {"OY": 8, "OX": 2, "K": 4} if module == "cluster" else \
            {"OY": 3, "OX": 3, "K": 32}
        capacity = int(rng.choice([8, 16, 32])) * 1024

        def price(s):
            return cost.price(module, nest, s)

        a = search(nest, capacity, price, unroll)
        b = exhaustive(nest, capacity, price, unroll)
        if b.schedule is None:
            continue
        fast_s += a.seconds
        full_s += b.seconds
        gaps.append(a.cost.latency_cycles / b.cost.latency_cycles - 1.0)
    return max(gaps), fast_s, full_s, count


def main(record_results: bool = True) -> None:
    rows = []
    for name, file in NETWORKS:
        path = str(MODELS / f"{file}.tflite")
        row = [name]
        search_seconds = 0.0
        for label, modules in CONFIGS:
            start = time.perf_counter()
            # untiled (no depth-first streaming of the C project): the latency MATCH measures
            compiled = edgebyoc.compile(path, target="gap9", options={"modules": modules},
                                        dfs=False)
            elapsed = time.perf_counter() - start
            ms = compiled.report["summary"]["predicted_latency_ms"]
            paper = PAPER[name][CONFIGS.index((label, modules))]
            row.append(f"{ms:.2f} / {paper:.2f}")
            if modules == "cluster,ne16":
                search_seconds = compiled.report["summary"]["schedule_search_seconds"]
                layers = ", ".join(f"{r['module']}" for r in compiled.report["regions"])
                compile_s = elapsed
        row += [f"{search_seconds:.2f} s", f"{compile_s:.1f} s"]
        rows.append(row)
        print(name, "full placement:", layers, flush=True)
    headers = ["network"] + [f"{label} (ours / paper), ms" for label, _ in CONFIGS] + \
        ["schedule search (full)", "compile (full)"]
    table = markdown_table(headers, rows)
    gap, fast_s, full_s, count = optimality_gap()
    text = (f"## gap9 (MATCH): predicted latency beside Table IV\n\n{table}\n\n"
            f"Ours: the model's prediction at 260 MHz, untiled (`--no-dfs`); paper: MATCH's board "
            f"measurement (Table IV). CPU-only uses the host model fitted to the paper's "
            f"ResNet CPU-only figure.\n\nSchedule search against exhaustive enumeration on "
            f"{count} random convolution workloads (cluster or NE16, L1 8-32 kB): largest "
            f"optimality gap {100 * gap:.2f} %, search {fast_s:.2f} s against {full_s:.2f} s "
            f"exhaustive.")
    print(text)
    if record_results:
        record("gap9_table_iv", text)


if __name__ == "__main__":
    main(record_results="--no-record" not in sys.argv)
