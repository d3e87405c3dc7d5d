"""Latency against size, one line per engine, from bench/deepspeed_allreduce.py's --json.

    .venv/bin/python bench/plot_latency.py ROWS.json [--links LINKS.json] [--mpi SIZE:US ...] -o docs/img/F.png

ROWS.json: pycollect (engine, API, torch), DeepSpeed and Gloo measured in the same ranks.
--links: the same run with PYCOLLECT_SHM_COLLECTIVE_BYTES=0 (pycollect's link algorithms),
drawn dashed. --mpi: Open MPI points measured in the same hour (its C loop), as markers.
"""
import argparse
import json

LABELS = {"engine": "pycollect engine (C++ loop)", "api": "pycollect API (Python)",
          "torch": "pycollect through torch.distributed", "deepspeed": "DeepSpeed inference_all_reduce",
          "gloo": "torch Gloo"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rows")
    p.add_argument("--links", help="rows of the same run with the shared-memory collectives off")
    p.add_argument("--mpi", nargs="*", default=[], help="Open MPI's C loop: SIZE:US points")
    p.add_argument("-o", "--out", required=True)
    p.add_argument("--title", default="all-reduce latency, 2 ranks on one host (float32, median)")
    args = p.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.load(open(args.rows))
    rows = data["rows"]
    sizes = [r["size"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 5))
    for e, label in LABELS.items():
        ax.plot(sizes, [r[e] for r in rows], marker="o", label=label)
    if args.links:
        links = json.load(open(args.links))["rows"]
        ax.plot([r["size"] for r in links], [r["api"] for r in links], linestyle="--", color="gray",
                label="pycollect API, link algorithms (shared arena off)")
    if args.mpi:
        pts = [tuple(float(x) for x in s.split(":")) for s in args.mpi]
        ax.plot([s for s, _ in pts], [u for _, u in pts], linestyle="none", marker="*", markersize=12,
                color="black", label="Open MPI C loop (vader)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("bytes per rank")
    ax.set_ylabel("µs per call (median, slowest rank)")
    ax.set_title(args.title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
