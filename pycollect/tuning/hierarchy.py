"""Two levels: what a collective costs on a group that spans hosts, flat or hierarchical,
and from which size the group's automatic choice runs the hierarchy.

    layout = (2, 2)                                   # ranks on each host, hosts in order
    two_level("all_reduce", 64 << 20, layout, params)        # seconds, hierarchical
    flat("all_reduce", 64 << 20, layout, params)             # seconds, the ring over all
    hierarchical_from("all_reduce", layout, params)          # bytes; None: never

The hierarchical algorithms (csrc/collectives/*_hierarchical.cc) are made of the one-level
ones, so their cost is the one-level formulas' (formulas.py), each phase on its links:
within a host the machine's parameters (`params`), between hosts `params.inter_host`
(INTER_HOST where none was fitted). With m = min(ranks per host) core ranks a host, h
hosts and S bytes:

    all_reduce      fold + RS(S, m, intra) + AR(S/m, h, inter, m rails) + AG(S, m, intra) + unfold,
                    pipelined from 16 segments on (8 MiB at the default 512 KiB;
                    pipeline_slices, rail_pipeline.h): in P slices of S/P,
                    fold + RS(S/P) + (P-1) max(RS(S/P) + AG(S/P), AR(S/(mP))) + AR(S/(mP))
                    + AG(S/P) + unfold (the cable busy with one slice while the host
                    reduce-scatters the next and all-gathers the one before)
    all_gather      fold + AG(S/m, h, inter, m rails) + AG(S, m, intra) + unfold
    reduce_scatter  fold + RS(S, m, intra) + RS(S/m, h, inter, m rails) + unfold
                    (both pipelined too: in P slices,
                    first + (P-1) max(first, second) + second, each phase of S/P)
    broadcast       chain(S, h, inter) + chain(S, max ranks a host, intra)

The m rails cross each host's cable at once, so the inter-host phase's beta is m times the
cable's. An extra rank (hosts of uneven size) folds its data into a core rank and gets the
result back: one message of S each way within the host (S/n in for all-gather).

The flat algorithms over all n ranks run at their slowest hop, a cable, shared by the ring's
hops that leave the host through it: one where each host's ranks are consecutive, more where
they are interleaved (the log-step algorithms are costed the same way).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

from .choice import ENGINE_ALGOS, ENGINE_LIMITS, MAX_BYTES
from .compressed import compressed_ring
from .formulas import DEFAULT_SEGMENT_BYTES, FORMULAS
from .params import Params

# The links between hosts where the model has none measured: a 10 Gbit/s network, 30 us a
# message, reductions at the machine's own speed.
INTER_HOST = dict(alpha=30e-6, beta=1 / 1.25e9, overlap=1.0)
HIERARCHY_MARGIN = 0.10  # the hierarchy only where it is predicted 10 % faster
# The hierarchical calls' pipeline (csrc/collectives/rail_pipeline.h, pipelineSlices): slices
# of at least SLICE_SEGMENTS segments, at most MAX_SLICES of them, so a call is cut in two
# (pipelined) from 2 x SLICE_SEGMENTS segments on. The engine's constants
# (pycollect._C.ENGINE_DEFAULTS), copied so that the model loads no engine.
SLICE_SEGMENTS = 8
MAX_SLICES = 16
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
_FLAT = {"reduce_scatter": ("ring",), "broadcast": ("chain",), **ENGINE_ALGOS}  # the one-level algorithms


def between_hosts(params: Params) -> Params:
    """The parameters of the links between hosts: params.inter_host, else INTER_HOST."""
    if params.inter_host is not None:
        return params.inter_host
    return params.for_cluster(inter_host=None, source="assumed network", **INTER_HOST)


def _check(layout: Sequence[int]) -> None:
    if not layout or any(not isinstance(k, int) or k < 1 for k in layout):
        raise ValueError(f"layout must list each host's ranks (integers >= 1), got {layout!r}")


def _shared(P: Params, streams: int) -> Params:
    """P with its cable shared by `streams` transfers at once."""
    return P.with_(beta=P.beta * streams)


def crossings(layout: Sequence[int], hosts_of: Optional[Sequence[int]] = None) -> int:
    """How many of the flat ring's hops leave the busiest host: 1 when each host's ranks are
    consecutive (hosts_of None: they are), more when interleaved. hosts_of[r]: rank r's host."""
    _check(layout)
    if len(layout) == 1:
        return 0
    if hosts_of is None:
        return 1
    n = len(hosts_of)
    out = [0] * (max(hosts_of) + 1)
    for r in range(n):
        if hosts_of[r] != hosts_of[(r + 1) % n]:
            out[hosts_of[r]] += 1
    return max(out)


def flat(op: str, nbytes: float, layout: Sequence[int], params: Params, hosts_of: Optional[Sequence[int]] = None,
         segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> float:
    """Seconds for the fastest one-level algorithm over every rank of `layout` (the ring and
    the others the automatic choice has, within their ENGINE_LIMITS; broadcast's chain),
    every step at the pace of the cables."""
    _check(layout)
    n = sum(layout)
    link = params.at(n) if len(layout) == 1 else _shared(between_hosts(params), crossings(layout, hosts_of))
    return min(FORMULAS[op][a](float(nbytes), n, link, segment_bytes) for a in _FLAT[op]
               if nbytes <= ENGINE_LIMITS.get(a, MAX_BYTES))


def two_level(op: str, nbytes: float, layout: Sequence[int], params: Params,
              segment_bytes: int = DEFAULT_SEGMENT_BYTES, compress: Optional[str] = None) -> float:
    """Seconds for the hierarchical algorithm of `op` on hosts of `layout` ranks each;
    `compress` ("bf16", "int8"; all_reduce only): its inter-host ring compressed
    (compressed.py), the host's levels exact."""
    if op not in OPS:
        raise ValueError(f"the two-level model knows no op {op!r}; choose one of {', '.join(OPS)}")
    _check(layout)
    S, h, n, m, seg = float(nbytes), len(layout), sum(layout), min(layout), segment_bytes
    intra, inter = params.at(max(layout)), between_hosts(params)
    rails = _shared(inter, m)
    F = FORMULAS
    if op == "broadcast":
        return (F["broadcast"]["chain"](S, h, inter, seg) if h > 1 else 0.0) + F["broadcast"]["chain"](S, max(layout), intra, seg)
    extras = max(layout) > m
    fold_in = S / n if op == "all_gather" else S
    fold_out = S / n if op == "reduce_scatter" else S
    t = 2 * intra.alpha + (fold_in + fold_out) * intra.beta if extras else 0.0
    P = pipeline_slices(S, seg)
    if op == "all_reduce":
        rs, ag = F["reduce_scatter"]["ring"](S / P, m, intra, seg), F["all_gather"]["ring"](S / P, m, intra, seg)
        ar = (compressed_ring(S / (m * P), h, rails, compress, seg) if compress
              else F["all_reduce"]["ring"](S / (m * P), h, rails, seg))
        return t + rs + (P - 1) * max(rs + ag, ar) + ar + ag + (S * intra.gamma if extras else 0.0)
    if op == "all_gather":
        first, second = F["all_gather"]["ring"](S / (m * P), h, rails, seg), F["all_gather"]["ring"](S / P, m, intra, seg)
    else:
        first, second = F["reduce_scatter"]["ring"](S / P, m, intra, seg), F["reduce_scatter"]["ring"](S / (m * P), h, rails, seg)
    return t + first + (P - 1) * max(first, second) + second + (S * intra.gamma if extras and op != "all_gather" else 0.0)


def pipeline_slices(nbytes: float, segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> int:
    """The slices a hierarchical call of `nbytes` runs in, as the engine's pipelineSlices cuts
    it: nbytes // (SLICE_SEGMENTS segments), from 1 (the levels in turn: below 16 segments,
    8 MiB at the default segment) to MAX_SLICES."""
    return int(min(MAX_SLICES, max(1, nbytes // (SLICE_SEGMENTS * max(1, segment_bytes)))))


def hierarchical_from(op: str, layout: Sequence[int], params: Params, hosts_of: Optional[Sequence[int]] = None,
                      segment_bytes: int = DEFAULT_SEGMENT_BYTES, largest: int = 1 << 36) -> Optional[int]:
    """The smallest size from which the hierarchy is predicted HIERARCHY_MARGIN faster than
    the flat ring at every size up to `largest` (sizes in steps of 2^(1/4)); None where it
    never is: one host, or one rank a host (the hierarchy is then the flat ring)."""
    _check(layout)
    if len(layout) == 1 or max(layout) == 1:
        return None
    sizes = [int(2 ** (k / 4)) for k in range(0, 4 * int(math.log2(largest)) + 1)]
    start = None
    for nb in reversed(sizes):
        if two_level(op, nb, layout, params, segment_bytes) <= (1 - HIERARCHY_MARGIN) * flat(
                op, nb, layout, params, hosts_of, segment_bytes):
            start = nb
        else:
            break
    return start
