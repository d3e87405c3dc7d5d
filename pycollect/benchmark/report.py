"""Printing (nccl-tests layout), JSON and the PNG plot of a benchmark run."""
from __future__ import annotations

import json
from typing import Dict, List, Optional, Sequence, Union

from ..measuring import format_size

_ENGINE_COLS = "{:>10} {:>8} {:>8} {:>6}"
Peers = Union[None, str, Sequence[str]]  # the engines beside pycollect: a name, a list, or None


def _peers(peers: Peers) -> List[str]:
    return [peers] if isinstance(peers, str) else list(peers or [])


def header(op: str, peers: Peers) -> str:
    """Column titles: pycollect's columns, each peer's, then each peer's ratio (its time / ours)."""
    peers = _peers(peers)
    left = f"{'size':>10} {'count':>10} {'type':>8} {'redop':>6}"
    eng = _ENGINE_COLS.format("time(us)", "algbw", "busbw", "#wrong")
    line1 = f"#{'':>37}  {'pycollect':^35}" + "".join(f"  {p:^35}" for p in peers)
    line2 = f"#{left}  {eng}" + f"  {eng}" * len(peers)
    if peers:
        ratios = [f"{p + '/us':>7}" for p in peers]
        line1 += f"  {'ratio':^{len('  '.join(ratios))}}"
        line2 += "  " + "  ".join(ratios)
    return f"# {op}\n{line1.rstrip()}\n{line2}"


def _engine(cols: Dict) -> str:
    return _ENGINE_COLS.format(f"{cols['time_us']:.1f}", f"{cols['algbw']:.3f}", f"{cols['busbw']:.3f}",
                               cols["wrong"])


def format_row(row: Dict, peers: Peers) -> str:
    peers = _peers(peers)
    s = f" {row['size']:>10} {row['count']:>10} {row['type']:>8} {row['redop']:>6}  {_engine(row['pycollect'])}"
    s += "".join(f"  {_engine(row[p])}" for p in peers)
    return s + "".join(f"  {_ratio(row, p):>6.2f}x" for p in peers)


def _ratio(row: Dict, peer: str) -> float:
    """The peer's time / pycollect's (rows written before there were several peers: row["ratio"])."""
    return row[peer].get("ratio", row.get("ratio"))


# The bytes each host's cable must carry each way, as a fraction of the size nccl-tests
# counts (per rank for all-reduce and broadcast, gathered for the others), with h hosts:
# what the hierarchical algorithms move (docs/hierarchy.md).
CABLE_SHARE = {"all_reduce": lambda h: 2 * (h - 1) / h, "all_gather": lambda h: (h - 1) / h,
               "reduce_scatter": lambda h: (h - 1) / h, "broadcast": lambda h: 1.0}


def cable_bound(op: str, nbytes: float, hosts: int, line_rate: float) -> float:
    """Seconds the cables need at least for one call of `op` on `hosts` hosts (line_rate in GB/s)."""
    return CABLE_SHARE[op](hosts) * nbytes / (line_rate * 1e9)


def summary(rows: List[Dict], op: str, peers: Peers, link_limit: Optional[float],
            line_rate: Optional[float] = None, memcpy: Optional[float] = None, hosts: Optional[int] = None) -> str:
    peers = _peers(peers)
    lines = []
    if memcpy:
        lines.append(f"# memcpy: {memcpy:.3f} GB/s (one rank copying 64 MiB between warm buffers)")
    if link_limit:
        lines.append(f"# link limit: {link_limit:.3f} GB/s per direction (pycollect's links, both ways at once, ranks 0<->1)")
    if line_rate:
        lines.append(f"# line rate: {line_rate:.3f} GB/s per direction (each host's cable, tc tbf)")
    if rows:
        big = rows[-1]
        busbw = big['pycollect']['busbw']
        lines.append(f"# largest size {format_size(big['size'])}: pycollect busbw {busbw:.3f} GB/s"
                     + (f" = {busbw / link_limit:.2f} x link limit" if link_limit else "")
                     + (f" = {busbw / line_rate:.2f} x line rate" if line_rate else "")
                     + (f" = {busbw / memcpy:.2f} x memcpy" if memcpy else "")
                     + "".join(f"; {p} {big[p]['busbw']:.3f} GB/s" for p in peers))
        for peer in (p for p in peers if p.startswith("pycollect-")):  # compressed: does it pay?
            speedups = [1.0 / _ratio(r, peer) for r in rows]
            lines.append(f"# {peer}: {speedups[-1]:.2f}x the speed of uncompressed pycollect at {format_size(big['size'])} "
                         f"({'pays' if speedups[-1] > 1.0 else 'does not pay'}); over the sizes min {min(speedups):.2f}x, "
                         f"max {max(speedups):.2f}x")
        for peer in (p for p in peers if not p.startswith("pycollect-")):
            ratios = [_ratio(r, peer) for r in rows]
            slower = [format_size(r["size"]) for r, x in zip(rows, ratios) if x < 1.0]
            lines.append(f"# ratio {peer} time / pycollect time: min {min(ratios):.2f}x, "
                         f"max {max(ratios):.2f}x; sizes where pycollect is slower: {', '.join(slower) or 'none'}")
        if hosts and line_rate and op in CABLE_SHARE:
            bound = cable_bound(op, big["size"], hosts, line_rate)
            lines.append(f"# cable bound at {format_size(big['size'])}, {hosts} hosts: {bound * 1e3:.1f} ms "
                         f"({CABLE_SHARE[op](hosts):.3g} x size / line rate); pycollect "
                         f"{big['pycollect']['time_us'] / 1e3:.1f} ms = {bound * 1e6 / big['pycollect']['time_us']:.2f} x "
                         f"the bound's speed" + "".join(f", {p} {big[p]['time_us'] / 1e3:.1f} ms = "
                                                        f"{bound * 1e6 / big[p]['time_us']:.2f} x" for p in peers)
                         + (" (the bound of uncompressed bytes)" if any(p.startswith("pycollect-") for p in peers) else ""))
        wrong = sum(r["pycollect"]["wrong"] for r in rows)
        lines.append(f"# #wrong total (pycollect): {wrong}"
                     + "".join(f"; {p}: {sum(r[p]['wrong'] for r in rows)}" for p in peers))
    return "\n".join(lines)


def compression_forecast(size: int, layout: Sequence[int], formats: Sequence[str],
                         line_rate: Optional[float] = None) -> str:
    """The cost model's word on compression beside a run that measured it: exact and
    compressed seconds for an all-reduce of `size` bytes on hosts of `layout` ranks
    (pycollect.tuning.compressed.pays), the machine's parameters (PYCOLLECT_MODEL, else the
    built-in ones) and, between hosts, a cable of `line_rate` GB/s (else the model's own)."""
    import os

    from ..tuning import Params
    from ..tuning.compressed import PAYS_MARGIN, pays
    from ..tuning.hierarchy import between_hosts

    params = Params.load(os.environ["PYCOLLECT_MODEL"]) if os.environ.get("PYCOLLECT_MODEL") else Params()
    if line_rate and len(layout) > 1:
        params = params.with_(inter_host=between_hosts(params).with_(beta=1 / (line_rate * 1e9)))
    parts = []
    for fmt in formats:
        exact, fast = pays("all_reduce", size, layout, params, fmt)
        verdict = "pays" if fast < (1 - PAYS_MARGIN) * exact else "does not pay"
        parts.append(f"{fmt} {fast * 1e3:.1f} ms ({exact / fast:.2f}x, {verdict})")
    return (f"# cost model at {format_size(size)}: exact {exact * 1e3:.1f} ms; " + "; ".join(parts)
            + f" [{params.source}" + (f", cables {line_rate:.3f} GB/s" if line_rate and len(layout) > 1 else "") + "]")


def write_json(path: str, meta: Dict, rows: List[Dict]) -> None:
    with open(path, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=2)


def plot(path: str, op: str, rows: List[Dict], peers: Peers, link_limit: Optional[float],
         title: str, memcpy: Optional[float] = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["size"] for r in rows]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    ax.plot(sizes, [r["pycollect"]["busbw"] for r in rows], "o-", label="pycollect")
    for peer, style in zip(_peers(peers), ("s--", "^-.", "v:")):
        ax.plot(sizes, [r[peer]["busbw"] for r in rows], style, label=peer)
    if link_limit:
        ax.axhline(link_limit, color="gray", linestyle=":", label=f"link limit {link_limit:.2f} GB/s")
    if memcpy:
        ax.axhline(memcpy, color="black", linestyle="-.", label=f"memcpy {memcpy:.2f} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes[:: max(1, len(sizes) // 10)])
    ax.set_xticklabels([format_size(s) for s in sizes[:: max(1, len(sizes) // 10)]])
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
