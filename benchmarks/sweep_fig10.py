"""MATCH's Fig. 9 (DIANA) and Fig. 10 (GAP9) reproduced by ``edgebyoc sweep``: MACs per cycle
of the four int8 MLPerf Tiny networks against the L1 size, every point compiled and verified.

Runs the sweep of ``benchmarks/sweep_fig10.toml`` in a local pool (results cached in
``build/sweep_fig10``: a second run only re-plots), plots both targets side by side into
docs/sweep_fig10.png and records the table, the per-point times and what they mean for a
Ray cluster in docs/performance.md.

Run: python benchmarks/sweep_fig10.py [--no-record] [-j N]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from edgebyoc.sweep import load_spec, run_sweep

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import markdown_table, record  # noqa: E402

HERE = Path(__file__).resolve().parent
SPEC = HERE / "sweep_fig10.toml"
OUTPUT = HERE.parent / "build" / "sweep_fig10"
PLOT = HERE.parent / "docs" / "sweep_fig10.png"
NAMES = {"vww_96_int8.tflite": "MobileNet", "pretrainedResnet_quant.tflite": "ResNet",
         "kws_ref_model.tflite": "DSCNN", "ad01_int8.tflite": "DAE"}


def main(record_results: bool = True, jobs: int | None = None) -> None:
    result = run_sweep(load_spec(SPEC), OUTPUT, jobs=jobs)
    rows = result.rows
    tables, curves = [], {}
    for target in dict.fromkeys(row["target"] for row in rows):
        sizes = sorted({row["option.l1_kb"] for row in rows if row["target"] == target})
        body = []
        for model, name in NAMES.items():
            points = {row["option.l1_kb"]: row for row in rows
                      if row["target"] == target and row["model"] == model}
            curves[(target, name)] = [(kb, points[kb]["macs_per_cycle"]) for kb in sizes
                                      if points[kb]["macs_per_cycle"] is not None]
            body.append([name] + [_cell(points[kb]) for kb in sizes])
        tables.append(f"**{target}** (MACs/cycle of the untiled C project; verify against "
                      f"the numpy integer reference):\n\n" + markdown_table(
                          ["network"] + [f"L1 {kb} kB" for kb in sizes], body))
    plot(curves)
    times = [row["compile_seconds"] + (row["verify_seconds"] or 0) for row in rows
             if row["status"] == "ok"]
    median, total = statistics.median(times), sum(times)
    per_hour = 3600 / median
    errors = [row for row in rows if row["status"] != "ok"]
    text = (f"## Sweep: MACs/cycle against L1 (MATCH Fig. 9 and 10)\n\n"
            f"`edgebyoc sweep benchmarks/sweep_fig10.toml`: {len(rows)} points (4 networks x 5 "
            f"L1 sizes on gap9, x 6 on diana), each compiled and verified in its own process; "
            f"{len(errors)} error(s).\n\n" + "\n\n".join(tables)
            + f"\n\n![MACs/cycle against L1]({PLOT.name})\n\n" + shape(curves) + "\n\n"
            f"Per point (compile + verify, one process): median {median:.1f} s, max "
            f"{max(times):.1f} s, {total:.0f} s in all; about {per_hour:.0f} points per hour "
            f"per worker CPU, so a Ray cluster of N nodes with C CPUs each runs about "
            f"{per_hour:.0f} x N x C points per hour, memory allowing (a point's process peaked "
            f"at {max(r['peak_rss_mb'] or 0 for r in rows):.0f} MB resident here); Ray's task "
            f"scheduling and the model's transfer come on top (not measured here).")
    print(text)
    if record_results:
        record("sweep_fig10", text)


def shape(curves) -> str:
    """How the curves compare with the paper's: the smallest L1's MACs/cycle as a share of the
    largest's (#27's goal: at least 70 %)."""
    def share(target, name):
        points = curves[(target, name)]
        return points[0][1] / points[-1][1] if points and points[-1][1] else float("nan")

    parts = [f"{target} {name} {share(target, name):.0%}" for target in ("gap9", "diana")
             for name in NAMES.values() if (target, name) in curves]
    return ("MACs/cycle at the smallest L1 as a share of the largest's: "
            + ", ".join(parts) + ". The paper's text on its Fig. 9 and 10: DSCNN and DAE show "
            "no notable trend (they need little tiling); on DIANA MATCH keeps MobileNet near "
            "full speed down to 24 kB; for ResNet the competing tools decline sharply as L1 "
            "shrinks (HTVM 3.01x slower than MATCH at 16 kB, 1.61x at full L1). Ours: every "
            "MAC layer runs on an accelerator down to 8 kB on both targets: a layer whose "
            "weights for all input channels exceed L1 gets its input channels cut, with int32 "
            "partial sums in L1 (gap9's cluster and NE16 declare `accumulator_bits`; at 8 kB "
            "DS-CNN's four pointwise layers, which ran on the fabric controller before, are "
            "cut); the DIANA curves stay flat (planes cut in rows: a band of whole rows of "
            "every channel is one DMA run). On gap9 every network keeps at least 70 % of its "
            "128 kB speed at 8 kB since NE16 takes the layers it lost to the cluster at small "
            "L1: its 3x3 output blocks need row and column tiles that do not divide 32, 16 or "
            "8 (the last tile smaller, as MATCH's padded mapping), and a weight buffer holding "
            "one slice of the input channels reads slice-major weights in one DMA run per "
            "slice (a K-major copy paid 27 cycles per output channel and tap).")


def _cell(row) -> str:
    if row["status"] != "ok":
        return row["status"]
    mark = "" if row["verify_passed"] else " (verify FAILED)"
    return f"{row['macs_per_cycle']:.1f}{mark}"


def plot(curves) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = list(dict.fromkeys(target for target, _ in curves))
    figure, axes = plt.subplots(1, len(targets), figsize=(5.2 * len(targets), 3.6))
    for ax, target in zip([axes] if len(targets) == 1 else axes, targets):
        for (owner, name), points in curves.items():
            if owner == target and points:
                ax.plot([kb for kb, _ in points], [v for _, v in points], marker="o",
                        label=name)
        sizes = sorted({kb for (owner, _), pts in curves.items() if owner == target
                        for kb, _ in pts})
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.set_xlabel("L1 (kB)")
        ax.set_ylabel("MACs / cycle (predicted)")
        ax.set_title(f"{target} (cf. MATCH Fig. {10 if target == 'gap9' else 9})")
        ax.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(PLOT, dpi=110)


if __name__ == "__main__":
    jobs = int(sys.argv[sys.argv.index("-j") + 1]) if "-j" in sys.argv else None
    main(record_results="--no-record" not in sys.argv, jobs=jobs)
