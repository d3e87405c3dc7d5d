"""Spans -> a PNG timeline (matplotlib): the picture of a pipelined collective.

Ranks are rows, top to bottom; each rank has three lanes: what it sends, what it
receives (every peer in one lane) and what it reduces. A bar is one segment: its
colour is the phase (reduce-scatter, all-gather, chain, ...), alternate segments are
shaded lighter so neighbours stay apart, and a bar wide enough is labelled
"c<chunk>.<segment>" (or "s<step>.<segment>" where the algorithm names no chunk).
"""
from __future__ import annotations

from typing import Dict, List, Sequence

from .spans import Span

LANES = ("send", "recv", "reduce")
_KNOWN = {"header": "#9e9e9e", "reduce-scatter": "#1f77b4", "all-gather": "#2ca02c", "chain": "#ff7f0e"}
_OTHERS = ["#9467bd", "#d62728", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]


def phase_colours(phases: Sequence[str]) -> Dict[str, str]:
    colours, spare = {}, iter(_OTHERS * 4)
    for p in phases:
        colours[p] = _KNOWN.get(p) or next(spare)
    return colours


def _label(s: Span) -> str:
    first = f"c{s.chunk}" if s.chunk >= 0 else f"s{s.step}"
    return f"{first}.{s.segment}" if s.segment >= 0 else first


def write_timeline(spans: Sequence[Span], path: str, title: str = "", dpi: int = 110) -> str:
    """Draw `spans` into a PNG at `path` (`dpi`: its resolution); returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Patch

    ranks = sorted({s.rank for s in spans})
    phases: List[str] = []
    for s in sorted(spans, key=lambda s: s.start_ns):
        if s.phase not in phases:
            phases.append(s.phase)
    colours = phase_colours(phases)
    t0 = min((s.start_ns for s in spans), default=0)
    t1 = max((s.end_ns for s in spans), default=1)
    width_ms = max((t1 - t0) / 1e6, 1e-6)
    rows = len(ranks) * len(LANES)
    fig, ax = plt.subplots(figsize=(12, 0.9 + 0.42 * rows))
    yticks, ylabels = [], []
    for i, rank in enumerate(ranks):
        for k, lane in enumerate(LANES):
            y = i * (len(LANES) + 0.6) + k
            yticks.append(y)
            ylabels.append(f"rank {rank} {lane}")
            for s in spans:
                if s.rank != rank or s.kind != lane:
                    continue
                x = (s.start_ns - t0) / 1e6
                w = max((s.end_ns - s.start_ns) / 1e6, width_ms / 2000)
                rgb = to_rgb(colours[s.phase])
                if s.segment % 2 == 1:
                    rgb = tuple(c + (1 - c) * 0.45 for c in rgb)
                ax.barh(y, w, left=x, height=0.8, color=rgb, edgecolor="white", linewidth=0.4)
                if w > width_ms / 40:
                    ax.text(x + w / 2, y, _label(s), ha="center", va="center", fontsize=6, color="black")
    ax.set_yticks(yticks)
    ax.set_yticklabels(ylabels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time since the first event (ms, CLOCK_MONOTONIC: one clock for all ranks)")
    ax.set_xlim(0, width_ms * 1.01)
    ax.legend(handles=[Patch(color=colours[p], label=p) for p in phases], loc="upper right", fontsize=7,
              ncol=len(phases))
    ax.set_title(title or "pycollect trace", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
