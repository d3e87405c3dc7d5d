"""The alpha-beta-gamma cost of each algorithm, one function each, all in this file.

n: bytes per rank (all-reduce, broadcast) or N: total bytes gathered / scattered
(all-gather, reduce-scatter), as nccl-tests counts sizes; p: ranks; S: segment bytes.
alpha per message, beta per byte on the wire, gamma per byte reduced (params.py).
Every collective pays `overhead` once per call and, except where the payload rides
behind the header (direct), one alpha for the header exchange with its neighbours
(csrc/collectives/context.h). With p ranks on fewer cores, a step's costs are stretched
by the number of its working ranks (those that copy or reduce) on the busiest core, and
its messages cost `wake` more when that is over 1 (Params.busiest, Params.message_at):
ceil(p / cores) in the ring's steps, where every rank works, but often 1 in a tree's,
where few do. Where the
buffer per rank stays in the CPU caches, beta and gamma are divided by cache_speedup, and
where it does not, the busy cores share the DRAM's bandwidth (Params.per_byte; shared
memory only: its "wire" is a memory copy).

Pipelined ring steps (see _ring_reduce_scatter): a chunk of c bytes is cut into
k = ceil(c / S) segments of s = c / k bytes; moving one is L = alpha + s*beta and
reducing it R = s*gamma. A rank spends U = max(L, R) + (1 - overlap) * min(L, R) per
segment when both kinds of work queue up, so a phase of (p-1)k segments takes the longer
of its work, (p-1)k*U, and the path of the first segment through all p-1 steps plus the
others behind it, (p-1)(L + R) + (k-1)U.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, Tuple

from .params import Params

DEFAULT_SEGMENT_BYTES = 512 * 1024  # csrc/collectives/context.h Tunables::segmentBytes


def _segments(chunk: float, seg: int) -> Tuple[int, float]:
    """(k, s): a chunk of `chunk` bytes in k segments of s bytes (csrc Segments)."""
    k = max(1, math.ceil(chunk / max(1, seg)))
    return k, chunk / k


def _log2ceil(p: int) -> int:
    return max(0, math.ceil(math.log2(p))) if p > 1 else 0


def _ring_reduce_scatter(chunk: float, p: int, a: float, b: float, g: float, ov: float, seg: int):
    """(time, L): the reduce-scatter phase of allreduce_ring.cc (its first loop)."""
    k, s = _segments(chunk, seg)
    link, red = a + s * b, s * g
    unit = max(link, red) + (1 - ov) * min(link, red)
    return max((p - 1) * k * unit, (p - 1) * (link + red) + (k - 1) * unit), link, k, unit


def _ring(p: int):
    """A ring step's transfers (receiver, sender): every rank from its left neighbour."""
    return [(r, (r - 1) % p) for r in range(p)]


def _unpack(P: Params, p: int, working_set: float, transfers=None, all_pairs: bool = False):
    """(alpha, beta, gamma, overhead) of a step made of `transfers` (receiver, sender; default
    a ring step), for a call whose buffer per rank is `working_set` bytes. beta counts every
    copy the busiest core makes in the step (Params.copies: the receiver copies; within a core,
    faster), so a transfer's bytes times beta is the step's copying; gamma and alpha are
    stretched by the receivers on the busiest core (Params.busiest). What a core's caches
    must hold is the buffers of every rank on it (ceil(p / cores) of them). `all_pairs`:
    every rank receives from every other (direct), counted without listing the p^2 pairs.
    `transfers` is a function returning the list, called only when ranks share cores: with
    a core per rank a step costs the same whoever works in it (one copy per receiver, p-1
    for all_pairs), and what-ifs at thousands of ranks need no lists."""
    if P.cores is None:
        f = P.per_byte(working_set)
        return P.message_at(1), P.beta * f * (max(0, p - 1) if all_pairs else 1), P.gamma * f, P.overhead
    transfers = [] if all_pairs else _ring(p) if transfers is None else list(transfers())
    receivers = range(p) if all_pairs else sorted({dst for dst, _ in transfers})
    busiest = P.busiest(receivers)
    f = P.per_byte(working_set * P.stretch(p), P.cores_busy(receivers))
    copies = P.copies_all_pairs(p) if all_pairs else P.copies(transfers)
    return P.message_at(busiest), P.beta * f * copies, P.gamma * f * busiest, P.overhead


def allreduce_ring(n: float, p: int, P: Params, seg: int = DEFAULT_SEGMENT_BYTES) -> float:
    """allreduce_ring.cc: header round, reduce-scatter then all-gather over chunks of n/p.
    The all-gather's (p-1)k forwards (L each) follow the reduce-scatter on the link; its
    last segment needs p-1 more hops after the last reduce."""
    a, b, g, o = _unpack(P, p, n)
    if p == 1:
        return o
    rs, link, k, unit = _ring_reduce_scatter(n / p, p, a, b, g, P.overlap, seg)
    return o + a + max(rs + (p - 1) * link, (p - 1) * k * (unit + link))


def allreduce_direct(n: float, p: int, P: Params, seg: int = DEFAULT_SEGMENT_BYTES) -> float:
    """allreduce_direct.cc: the payload rides behind the header (one alpha); each rank
    sends n bytes to each of p-1 peers and receives as much ((p-1)n beta), copies its own
    input and reduces p-1 vectors (p n gamma, the copy counted as one pass)."""
    a, b, g, o = _unpack(P, p, n, all_pairs=True)
    if p == 1:
        return o
    return o + a + n * b + p * n * g


def allreduce_halving_doubling(n: float, p: int, P: Params, seg: int = DEFAULT_SEGMENT_BYTES) -> float:
    """Rabenseifner: fold the r = p - p' extra ranks in (one whole-vector exchange and
    reduce), recursive halving reduce-scatter and doubling all-gather over p' = 2^floor(log2 p)
    ranks (log2 p' rounds each, (p'-1)/p' n bytes each), then send the r folded ranks the result."""
    a, b, g, o = _unpack(P, p, n)
    if p == 1:
        return o
    pp = 1 << (p.bit_length() - 1)
    r = p - pp
    # The fold: the odd ranks below 2r receive from the even one below; the unfold the
    # reverse. The p' survivors (those odd ranks and every rank from 2r on, renumbered
    # 0..p'-1) exchange with the survivor whose number differs in one bit: the halving
    # round of mask m moves m / p' n bytes each way and reduces them, the doubling round
    # of the same mask moves them back.
    def survivors():
        return [q for q in range(p) if q >= 2 * r or q % 2 == 1]

    t = o + a
    m = pp // 2
    while m >= 1:
        am, bm, gm, _ = _unpack(P, p, n, lambda: [(s[v], s[v ^ m]) for s in [survivors()] for v in range(pp)])
        t += (am + m / pp * n * (bm + gm)) + (am + m / pp * n * bm)
        m //= 2
    if r > 0:
        af, bf, gf, _ = _unpack(P, p, n, lambda: [(q, q - 1) for q in range(1, 2 * r, 2)])
        au, bu, _, _ = _unpack(P, p, n, lambda: [(q, q + 1) for q in range(0, 2 * r, 2)])
        t += (af + n * bf + n * gf) + (au + n * bu)
    return t


def allreduce_tree(n: float, p: int, P: Params, seg: int = DEFAULT_SEGMENT_BYTES) -> float:
    """Binomial reduce to rank 0, then binomial broadcast, the whole vector on each edge:
    ceil(log2 p) rounds of (alpha + n beta + n gamma), then as many of (alpha + n beta).
    In the round of distance d the ranks r with r mod 2d = 0 receive from r + d (reduce),
    and r + d from r (broadcast): only they work in it."""
    a, b, g, o = _unpack(P, p, n)
    t = o + (a if p > 1 else 0)
    d = 1
    while d < p:
        ar, br, gr, _ = _unpack(P, p, n, lambda: [(q, q + d) for q in range(0, p - d, 2 * d)])
        ab, bb, _, _ = _unpack(P, p, n, lambda: [(q + d, q) for q in range(0, p - d, 2 * d)])
        t += (ar + n * br + n * gr) + (ab + n * bb)
        d *= 2
    return t


def allgather_ring(N: float, p: int, P: Params, seg: int = DEFAULT_SEGMENT_BYTES) -> float:
    """allgather_ring.cc: (p-1) steps of the N/p chunks, k segments each, forwarded at
    once, so the link is busy (p-1)k L; plus the copy of the rank's own chunk into the
    output (N/p bytes, a memory pass: gamma, not the link's beta), hidden behind the
    transfer only when they overlap."""
    a, b, g, o = _unpack(P, p, N)
    if p == 1:
        return o
    k, s = _segments(N / p, seg)
    return o + a + (p - 1) * k * (a + s * b) + (1 - P.overlap) * N / p * g


def allgather_bruck(N: float, p: int, P: Params, seg: int = DEFAULT_SEGMENT_BYTES) -> float:
    """allgather_bruck.cc: ceil(log2 p) rounds, doubling the blocks sent, (p-1)/p N bytes
    in all. Blocks land in place (no final rotation): the only local copy is the rank's own
    block into the output, N/p bytes at gamma (a memory pass), made while the first round's
    transfer runs (round 0 sends from the input), so hidden as far as they overlap."""
    a, b, g, o = _unpack(P, p, N)
    if p == 1:
        return o
    t = o + a + (1 - P.overlap) * N / p * g
    d = 1
    while d < p:  # the round of distance d: every rank receives min(d, p - d) blocks from rank + d
        ad, bd, _, _ = _unpack(P, p, N, lambda: [(q, (q + d) % p) for q in range(p)])
        t += ad + min(d, p - d) * N / p * bd
        d *= 2
    return t


def reduce_scatter_ring(N: float, p: int, P: Params, seg: int = DEFAULT_SEGMENT_BYTES) -> float:
    """reduce_scatter_ring.cc: the reduce-scatter phase of the ring all-reduce on N/p chunks."""
    a, b, g, o = _unpack(P, p, N)
    if p == 1:
        return o
    return o + a + _ring_reduce_scatter(N / p, p, a, b, g, P.overlap, seg)[0]


def broadcast_chain(n: float, p: int, P: Params, seg: int = DEFAULT_SEGMENT_BYTES) -> float:
    """broadcast_chain.cc: k segments down a chain of p-1 links, one behind the other:
    (p - 2 + k) segment times. The p-1 receivers work (root 0, as the benchmark's)."""
    a, b, g, o = _unpack(P, p, n, lambda: [(q, q - 1) for q in range(1, p)])
    if p == 1:
        return o
    k, s = _segments(n, seg)
    return o + a + (p - 2 + k) * (a + s * b)


Formula = Callable[..., float]

# op -> algorithm -> formula. Every algorithm the model knows, whether or not the engine
# has it yet (see choice.ENGINE_ALGOS for the ones the automatic choice may pick).
FORMULAS: Dict[str, Dict[str, Formula]] = {
    "all_reduce": {"ring": allreduce_ring, "direct": allreduce_direct,
                   "halving_doubling": allreduce_halving_doubling, "tree": allreduce_tree},
    "all_gather": {"ring": allgather_ring, "bruck": allgather_bruck},
    "reduce_scatter": {"ring": reduce_scatter_ring},
    "broadcast": {"chain": broadcast_chain},
}
