"""Markdown summary of benchmark JSON files (written by `pycollect bench --json`).

    python bench/summarize.py bench/results/*.json

One table per file's op and world size: busbw of pycollect and the peer at a few
landmark sizes, the ratio, and the link limit measured in that same run.
"""
import json
import sys

LANDMARKS = [8, 4096, 65536, 1 << 20, 16 << 20, 64 << 20, 256 << 20]


def fmt_size(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:g} {unit}"
    return f"{n} B"


def main(paths):
    print("| op | ranks | size | pycollect time (us) | pycollect busbw (GB/s) | Gloo time (us) | Gloo busbw (GB/s) "
          "| Gloo time / pycollect time | link limit (GB/s) | #wrong |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    meta_line = None
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        meta, rows = data["meta"], data["rows"]
        meta_line = meta_line or f"{meta['date'][:10]}, {meta['machine']}, Python {meta['python']}"
        link = meta.get("link_limit_GBps")
        by_size = {r["size"]: r for r in rows}
        chosen = [min(by_size, key=lambda s: abs(s - want)) for want in LANDMARKS]
        for size in sorted(set(chosen)):
            r = by_size[size]
            ours, peer = r["pycollect"], r.get("gloo")
            print(f"| {meta['op']} | {meta['world_size']} | {fmt_size(size)} | {ours['time_us']:.0f} | "
                  f"{ours['busbw']:.3f} | {peer['time_us']:.0f} | {peer['busbw']:.3f} | {r['ratio']:.2f}x | "
                  f"{link:.2f} | {ours['wrong']} |")
        slower = [fmt_size(r["size"]) for r in rows if r.get("ratio", 1) < 1]
        print(f"| | | sizes slower than Gloo: {', '.join(slower) or 'none'} of {len(rows)} | | | | | | | |")
    print(f"\nMeasured {meta_line}; medians of 5 blocks of 5 calls, the slowest rank's.")


if __name__ == "__main__":
    main(sys.argv[1:])
