"""The pictures of `pycollect model`: --predict's time and busbw per world size, and
--validate's error per size (one panel per group size, the targets shaded), drawn with
matplotlib to a PNG."""
from __future__ import annotations

import math
import textwrap
from typing import Dict, List, Sequence, Tuple

from ..costmodel import Params, bus_bandwidth
from ..costmodel.check import HOSTS_TARGET, LOOPBACK_TARGET
from ..measuring import format_size


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def predict_plot(path: str, op: str, nbytes: int, algos: Sequence[str], table, cross, params: Params) -> None:
    """--predict: predicted time and busbw against ranks (log axes), crossovers marked.
    `table`: [(world size, [seconds per algorithm])]; `cross`: {world size: (before, after)}."""
    plt = _pyplot()
    worlds = [p for p, _ in table]
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(11, 4.5))
    for i, a in enumerate(algos):
        times = [t[i] for _, t in table]
        ax_t.plot(worlds, [t * 1e3 for t in times], "o-", label=a)
        ax_b.plot(worlds, [bus_bandwidth(op, nbytes, p, t) / 1e9 for p, t in zip(worlds, times)], "o-", label=a)
    for p, (before, after) in cross.items():
        for ax in (ax_t, ax_b):
            ax.axvline(p, color="gray", linestyle=":")
        ax_t.annotate(f"{before}->{after}", (p, ax_t.get_ylim()[1]), rotation=90, va="top", fontsize=8)
    for ax, label in ((ax_t, "predicted time (ms)"), (ax_b, "busbw (GB/s)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("ranks")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"{op}, {format_size(nbytes)}: alpha {params.alpha * 1e6:.2g} us, "
                 f"beta {1 / params.beta / 1e9:.3g} GB/s, gamma {1 / params.gamma / 1e9:.3g} GB/s")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def validate_plot(path: str, rows, title: str, ylabel: str = "predicted / measured - 1 (%)") -> Dict[int, Tuple[int, int]]:
    """--validate: each (op, algorithm)'s error, predicted / measured - 1, against the
    message size, one panel per group size. The band is the loopback target (25 %), the
    dashed lines the namespace hosts' (15 %); a point beyond the axis is drawn on its edge
    as a triangle pointing out. `rows`: measure.Row (op, algo, world_size, nbytes, error).
    Returns each panel's count in its title: {world size: (within the 25 %, points)}."""
    plt = _pyplot()
    worlds = sorted({r.world_size for r in rows})
    series: Dict[Tuple[str, str], Dict[int, List[Tuple[int, float]]]] = {}
    for r in rows:
        series.setdefault((r.op, r.algo), {}).setdefault(r.world_size, []).append((r.nbytes, r.error))
    worst = max((abs(r.error) for r in rows), default=0.0)
    lim = min(1.0, max(0.35, worst * 1.1))
    colors = plt.get_cmap("tab10")
    width = 4.6 * len(worlds) + 2.4  # inches: the panels and the legend beside them
    fig, axes = plt.subplots(1, len(worlds), figsize=(width, 4.6), sharey=True, squeeze=False)
    counts: Dict[int, Tuple[int, int]] = {}
    for ax, p in zip(axes[0], worlds):
        ax.axhspan(-LOOPBACK_TARGET * 100, LOOPBACK_TARGET * 100, color="tab:green", alpha=0.12)
        for y in (-HOSTS_TARGET * 100, HOSTS_TARGET * 100):
            ax.axhline(y, color="tab:green", linestyle="--", linewidth=0.8)
        ax.axhline(0, color="black", linewidth=0.8)
        for i, (key, by_world) in enumerate(sorted(series.items())):
            points = sorted(by_world.get(p, []))
            if not points:
                continue
            xs = [n for n, _ in points]
            ys = [max(-lim, min(lim, e)) * 100 for _, e in points]
            ax.plot(xs, ys, "o-", color=colors(i % 10), markersize=4, linewidth=1.2, label=f"{key[0]} {key[1]}")
            for x, (_, e) in zip(xs, points):
                if abs(e) > lim:
                    ax.plot([x], [lim * 100 if e > 0 else -lim * 100], "^" if e > 0 else "v", color=colors(i % 10),
                            markersize=9)
        inside = sum(1 for r in rows if r.world_size == p and abs(r.error) <= LOOPBACK_TARGET)
        counts[p] = (inside, sum(1 for r in rows if r.world_size == p))
        ax.set_title(f"{p} ranks: {inside} of {counts[p][1]} within {LOOPBACK_TARGET * 100:.0f} %")
        ax.set_xscale("log", base=2)
        # nominal sizes: 3 ranks gather 4M as 3 x 1398100 bytes, drawn at 4M's tick
        sizes = sorted({2 ** round(math.log2(max(1, r.nbytes))) for r in rows if r.world_size == p})
        ax.set_xticks(sizes)
        ax.set_xticklabels([format_size(s) for s in sizes], fontsize=8)
        ax.set_ylim(-lim * 100 * 1.08, lim * 100 * 1.08)
        ax.set_xlabel("message size")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel(ylabel)
    handles, labels = axes[0][-1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8, frameon=False)
    fig.suptitle("\n".join(textwrap.wrap(title, int(width * 12))), fontsize=9)  # ~12 characters an inch
    fig.tight_layout(rect=(0, 0, 1 - 2.2 / width, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return counts


def formation_plot(path: str, schemes: Sequence[str], rows, params) -> None:
    """--formation: the predicted time until a first ring collective can run against ranks,
    one line per scheme (log-log). `rows`: costmodel.formation.Terms."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for s in schemes:
        mine = [t for t in rows if t.scheme == s]
        ax.plot([t.ranks for t in mine], [t.time_s for t in mine], marker="o", label=s,
                linestyle="-" if s.startswith("pycollect") else "--")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("ranks")
    ax.set_ylabel("predicted formation + first ring links (s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("\n".join(textwrap.wrap(f"formation on paper: {params.describe()}", 100)), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
