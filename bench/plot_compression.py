"""The compressed all-reduce across namespace hosts, in one picture: for each run of
`pycollect bench --netns-hosts H --ranks-per-host G --compress bf16,int8` given (its JSON),
the largest size's time for Gloo, pycollect exact, bf16 and int8, each beside the cables'
bound for the bytes it sends (pycollect.benchmark.report.cable_bound x the format's wire
ratio, pycollect.tuning.compressed.WIRE_RATIO).

    .venv/bin/python bench/plot_compression.py RUN.json [RUN.json ...] [--out docs/img/compression_netns.png]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pycollect.benchmark.report import cable_bound  # noqa: E402
from pycollect.tuning.compressed import WIRE_RATIO  # noqa: E402

ENGINES = (("gloo", "Gloo", "#ff7f0e", None), ("pycollect", "pycollect exact", "#1f77b4", 1.0),
           ("pycollect-bf16", "pycollect bf16", "#2ca02c", WIRE_RATIO["bf16"]),
           ("pycollect-int8", "pycollect int8", "#d62728", WIRE_RATIO["int8"]))


def draw(runs, out: str) -> None:
    """One group of bars per run in `runs` (JSON paths), written to `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2.6 * len(runs) + 2, 3.8))
    w = 0.2
    labels = []
    for x, path in enumerate(runs):
        with open(path) as f:
            d = json.load(f)
        meta, row = d["meta"], d["rows"][-1]
        hosts = meta["world_size"] // meta["ranks_per_host"]
        labels.append(f"{hosts} hosts x {meta['ranks_per_host']} ranks")
        bound = cable_bound(meta["op"], row["size"], hosts, meta["line_rate_GBps"])
        exact = row["pycollect"]["time_us"]
        for i, (key, label, color, ratio) in enumerate(ENGINES):
            t = row[key]["time_us"] / 1e3
            at = x + (i - 1.5) * w
            ax.bar(at, t, w, color=color, label=label if x == 0 else None)
            ax.text(at, t, f"{exact / row[key]['time_us']:.2f}x", ha="center", va="bottom", fontsize=7)
            if ratio is not None:
                ax.hlines(bound * ratio * 1e3, at - w / 2, at + w / 2, colors="black", linewidth=1.5,
                          label="cable bound of the bytes sent" if x == 0 and i == 1 else None)
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels(labels)
    ax.set_ylabel("ms per 64 MiB all-reduce")
    ax.set_title("1 Gbit/s cables: time per call (label: speed relative to pycollect exact)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=80)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="`pycollect bench --json` files of namespace-host runs with --compress")
    ap.add_argument("--out", default="docs/img/compression_netns.png", help="the PNG to write")
    args = ap.parse_args()
    draw(args.runs, args.out)
    print(f"wrote {args.out}")
