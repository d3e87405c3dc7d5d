"""The hierarchical collectives across namespace hosts, in one picture: for each run of
`pycollect bench --netns-hosts H --ranks-per-host G` kept in bench/results (its JSON), the
largest size's time on pycollect and on Gloo beside the cables' bound (the least time the
host's cable allows for that op: pycollect.benchmark.report.cable_bound).

    .venv/bin/python bench/plot_hierarchy.py [--results bench/results] [--out docs/img/hierarchy_netns.png]
"""
import argparse
import glob
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pycollect.benchmark.report import cable_bound  # noqa: E402


def runs(results_dir: str):
    """(label, pycollect s, Gloo s, bound s) per namespace-host run with several ranks a host."""
    out = []
    for path in sorted(glob.glob(os.path.join(results_dir, "*_netns_*.json"))):
        with open(path) as f:
            d = json.load(f)
        meta, rows = d["meta"], d["rows"]
        g = meta.get("ranks_per_host") or 1
        if not rows or g < 2 or "gloo" not in rows[-1]:
            continue
        hosts = meta["world_size"] // g
        row = rows[-1]
        label = f"{hosts}x{g}\n{meta['op'].replace('_', '-')}"
        out.append((label, row["pycollect"]["time_us"] / 1e6, row["gloo"]["time_us"] / 1e6,
                    cable_bound(meta["op"], row["size"], hosts, meta["line_rate_GBps"])))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default="bench/results", help="directory of `pycollect bench --json` files")
    ap.add_argument("--out", default="docs/img/hierarchy_netns.png", help="the PNG to write")
    args = ap.parse_args()
    data = runs(args.results)
    if not data:
        print(f"no namespace-host runs with several ranks a host in {args.results}: run "
              "`pycollect bench --netns-hosts 2 --ranks-per-host 2 --line-rate 1gbit -b 64M -e 64M` first",
              file=sys.stderr)
        return 2
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1.3 * len(data) + 2, 3.6))
    xs = range(len(data))
    w = 0.27
    ax.bar([x - w for x in xs], [d[3] * 1e3 for d in data], w, label="cable bound", color="#bbbbbb")
    ax.bar(list(xs), [d[1] * 1e3 for d in data], w, label="pycollect (hierarchical)", color="#1f77b4")
    ax.bar([x + w for x in xs], [d[2] * 1e3 for d in data], w, label="Gloo", color="#ff7f0e")
    for x, (_, pc, gloo, bound) in zip(xs, data):
        ax.text(x, pc * 1e3, f"{bound / pc:.2f}", ha="center", va="bottom", fontsize=7)
        ax.text(x + w, gloo * 1e3, f"{gloo / pc:.2f}x", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([d[0] for d in data], fontsize=8)
    ax.set_ylabel("ms per call (64 MiB)")
    ax.set_title("hosts x ranks, 1 Gbit/s cables: pycollect's time (label: its share of the bound's speed) "
                 "and Gloo's (label: x pycollect's)", fontsize=8)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(args.out, dpi=80)
    print(f"wrote {args.out}: {len(data)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
