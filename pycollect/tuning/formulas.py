"""The alpha-beta-gamma cost of each algorithm, one function each, all in this file.

n: bytes per rank (all-reduce, broadcast) or N: total bytes gathered / scattered
(all-gather, reduce-scatter), as nccl-tests counts sizes; p: ranks; S: segment bytes.
alpha per message, beta per byte on the wire, gamma per byte reduced (params.py).
Every collective pays `overhead` once per call and, except where the payload rides
behind the header (direct), one alpha for the header exchange with its neighbours
(csrc/collectives/context.h). With p ranks on fewer cores, a step's costs are stretched
by the number of its working ranks (those that copy or reduce) on the busiest core
(Params.busiest): ceil(p / cores) in the ring's steps, where every rank works, but often
1 in a tree's, where few do. Its messages cost `wake` more when a working rank shares its
core with any other rank of the call, working or waiting (Params.shares_core,
Params.message_at). Where the
buffer per rank stays in the CPU caches, beta and gamma are divided by cache_speedup, and
where it does not, the busy cores share the DRAM's bandwidth (Params.per_byte; shared
memory only: its "wire" is a memory copy). A message that shared memory reads from the
sender's memory (at least Params.single_copy_from(p) bytes) costs single_copy_alpha more
per copy (Params.read_cost; _move).

Pipelined ring steps (see _ring_reduce_scatter): a chunk of c bytes is cut into
k = ceil(c / S) segments of s = c / k bytes; moving one is L = alpha + s*beta and
reducing it R = s*gamma. A rank spends U = max(L, R) + (1 - overlap) * min(L, R) per
segment when both kinds of work queue up, so a phase of (p-1)k segments takes the longer
of its work, (p-1)k*U, and the path of the first segment through all p-1 steps plus the
others behind it, (p-1)(L + R) + (k-1)U.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, NamedTuple, Tuple

from .params import Params

# The engine's constants (pycollect._C.ENGINE_DEFAULTS), copied so that the model loads no
# engine; tests/test_options.py holds them to the engine's.
DEFAULT_SEGMENT_BYTES = 512 * 1024  # csrc/collectives/context.h Tunables::segmentBytes
RING_BLOCK_SEGMENTS = 2  # csrc/collectives/collectives.h kBlockSegments


def _segments(chunk: float, seg: int) -> Tuple[int, float]:
    """(k, s): a chunk of `chunk` bytes in k segments of s bytes (csrc Segments)."""
    k = max(1, math.ceil(chunk / max(1, seg)))
    return k, chunk / k


class Step(NamedTuple):
    """The costs of one step, from _unpack: per message, per byte moved, per byte
    reduced, per call, and the copies its busiest core makes."""
    alpha: float
    beta: float
    gamma: float
    overhead: float
    copies: float


def _move(P: Params, a: float, b: float, copies: float, m: float, p: int) -> float:
    """One message of m bytes in a step of a p-rank call (a, b, copies: its Step's fields):
    its alpha, its bytes, and the fixed cost of each single-copy read the busiest core makes."""
    return a + m * b + copies * P.read_cost(m, p)


def _segmented(P: Params, a: float, b: float, copies: float, m: float, p: int, seg: int) -> float:
    """A message of m bytes sent in pipelining segments (k = ceil(m / seg) messages of m/k
    bytes, as csrc Segments cuts it), one after the other: k times _move."""
    k, s = _segments(m, seg)
    return k * _move(P, a, b, copies, s, p)


def _ring_reduce_scatter(chunk: float, p: int, P: Params, step: Step, seg: int):
    """(time, L, k, U): the reduce-scatter phase of allreduce_ring.cc (its first loop), for
    a ring step unpacked by _unpack."""
    a, b, g, _, c = step
    ov = P.overlap
    k, s = _segments(chunk, seg)
    link, red = _move(P, a, b, c, s, p), s * g
    unit = max(link, red) + (1 - ov) * min(link, red)
    return max((p - 1) * k * unit, (p - 1) * (link + red) + (k - 1) * unit), link, k, unit


def _ring(p: int):
    """A ring step's transfers (receiver, sender): every rank from its left neighbour."""
    return [(r, (r - 1) % p) for r in range(p)]


def _unpack(P: Params, p: int, working_set: float, transfers=None, all_pairs: bool = False) -> Step:
    """(alpha, beta, gamma, overhead, copies) of a step made of `transfers` (receiver, sender; default
    a ring step), for a call whose buffer per rank is `working_set` bytes. beta counts every
    copy the busiest core makes in the step (Params.copies: the receiver copies; within a core,
    faster), so a transfer's bytes times beta is the step's copying; gamma and alpha are
    stretched by the receivers on the busiest core (Params.busiest). What a core's caches
    must hold is the buffers of every rank on it (ceil(p / cores) of them). `all_pairs`:
    every rank receives from every other (direct), counted without listing the p^2 pairs.
    `transfers` is a function returning the list, called only when ranks share cores: with
    a core per rank a step costs the same whoever works in it (one copy per receiver, p-1
    for all_pairs), and what-ifs at thousands of ranks need no lists. `copies`: the copies
    the busiest core makes in the step (each pays Params.read_cost: _move)."""
    if P.cores is None:
        f = P.per_byte(working_set)
        copies = float(max(0, p - 1)) if all_pairs else 1.0
        return Step(P.message_at(1, False), P.beta * f * copies, P.gamma * f, P.overhead, copies)
    message, copies, busiest, stretch, cores_busy = _shape(P, p, transfers, all_pairs)
    f = P.per_byte(working_set * stretch, cores_busy)
    return Step(message, P.beta * f * copies, P.gamma * f * busiest, P.overhead, copies)


def _shape(P: Params, p: int, transfers, all_pairs: bool) -> Tuple[float, float, int, float, int]:
    """(message cost, copies, busiest, stretch, cores busy) of a step with ranks sharing cores:
    what _unpack needs besides the working set, which these do not depend on. Kept on the
    Params (immutable) per step shape: fitting evaluates thousands of sizes for each Params,
    and counting ranks per core for each was most of its time."""
    listed = None if all_pairs or transfers is None else tuple(transfers())
    memo = P.__dict__.get("_step_shapes")
    if memo is None:
        memo = {}
        object.__setattr__(P, "_step_shapes", memo)  # not a field: equality, asdict, replace ignore it
    key = (p, all_pairs, listed)
    shape = memo.get(key)
    if shape is None:
        pairs = [] if all_pairs else _ring(p) if listed is None else listed
        dsts = {dst for dst, _ in pairs}
        receivers = range(p) if all_pairs or len(dsts) == p else sorted(dsts)  # range: every rank (Params' fast paths)
        busiest = P.busiest(receivers)
        copies = P.copies_all_pairs(p) if all_pairs else P.copies(pairs)
        shape = memo[key] = (P.message_at(busiest, P.shares_core(receivers, p)), copies, busiest,
                             P.stretch(p), P.cores_busy(receivers))
    return shape


def allreduce_ring(n: float, p: int, P: Params, seg: int = DEFAULT_SEGMENT_BYTES) -> float:
    """allreduce_ring.cc: header round, then each segment of the n/p chunks through the
    p-1 reduce-scatter and p-1 all-gather steps, a block of two segments at a time. A rank
    spends U on each of its (p-1)k reduce-scatter units and L on each all-gather one; the
    last segment needs p-1 more hops after the last reduce. Since a block's segments are
    forwarded while still in cache, L's beta is that of a block's working set (two
    segments of each chunk), where the reductions (gamma) read and write the vector."""
    step = _unpack(P, p, n)
    a, o = step.alpha, step.overhead
    if p == 1:
        return o
    s = _segments(n / p, seg)[1]  # beta at a block's working set (above)
    step = step._replace(beta=_unpack(P, p, min(n, RING_BLOCK_SEGMENTS * s * p)).beta)
    rs, link, k, unit = _ring_reduce_scatter(n / p, p, P, step, seg)
    return o + a + max(rs + (p - 1) * link, (p - 1) * k * (unit + link))


def allreduce_direct(n: float, p: int, P: Params, seg: int = DEFAULT_SEGMENT_BYTES) -> float:
    """allreduce_direct.cc: the payload rides behind the header (one alpha); each rank
    sends n bytes to each of p-1 peers and receives as much ((p-1)n beta), copies its own
    input and reduces p-1 vectors (p n gamma, the copy counted as one pass)."""
    a, b, g, o, c = _unpack(P, p, n, all_pairs=True)
    if p == 1:
        return o
    return o + _move(P, a, b, c, n, p) + p * n * g


def allreduce_halving_doubling(n: float, p: int, P: Params, seg: int = DEFAULT_SEGMENT_BYTES) -> float:
    """Rabenseifner: fold the r = p - p' extra ranks in (one whole-vector exchange and
    reduce), recursive halving reduce-scatter and doubling all-gather over p' = 2^floor(log2 p)
    ranks (log2 p' rounds each, (p'-1)/p' n bytes each), then send the r folded ranks the result.
    Each message goes in ceil(m / S) segments, one alpha each."""
    first = _unpack(P, p, n)
    a, o = first.alpha, first.overhead
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

    # Every message goes in pipelining segments (sendRange): each costs its alpha, and
    # where shared memory reads it from the sender, its read.
    t = o + a
    m = pp // 2
    while m >= 1:
        am, bm, gm, _, cm = _unpack(P, p, n, lambda: [(s[v], s[v ^ m]) for s in [survivors()] for v in range(pp)])
        t += 2 * _segmented(P, am, bm, cm, m / pp * n, p, seg) + m / pp * n * gm
        m //= 2
    if r > 0:
        af, bf, gf, _, cf = _unpack(P, p, n, lambda: [(q, q - 1) for q in range(1, 2 * r, 2)])
        au, bu, _, _, cu = _unpack(P, p, n, lambda: [(q, q + 1) for q in range(0, 2 * r, 2)])
        t += (_segmented(P, af, bf, cf, n, p, seg) + n * gf) + _segmented(P, au, bu, cu, n, p, seg)
    return t


def allreduce_tree(n: float, p: int, P: Params, seg: int = DEFAULT_SEGMENT_BYTES) -> float:
    """allreduce_tree.cc: binomial reduce to rank 0 and binomial broadcast from it, both
    pipelined in k segments of s bytes over L = ceil(log2 p) rounds. In the reduce round of
    distance d the ranks r with r mod 2d = 0 receive a segment from r + d and reduce it
    (R_d = alpha + s beta + s gamma, as unpacked for those transfers), and in the broadcast
    round r + d receives it from r (B_d = alpha + s beta): only they work in it. The first
    segment's trip up and down takes sum(R_d + B_d); each further one the longer of rank
    0's receiving and reducing, sum(R_d), and the copies down, sum(B_d):
        sum(R_d + B_d) + (k - 1) max(sum R_d, sum B_d)
    With one segment, the unpipelined tree: L rounds of (alpha + n beta + n gamma), then L
    of (alpha + n beta)."""
    first = _unpack(P, p, n)
    t = first.overhead + (first.alpha if p > 1 else 0)
    if p == 1:
        return t
    k, s = _segments(n, seg)
    up = down = 0.0
    d = 1
    while d < p:
        ar, br, gr, _, cr = _unpack(P, p, n, lambda: [(q, q + d) for q in range(0, p - d, 2 * d)])
        ab, bb, _, _, cb = _unpack(P, p, n, lambda: [(q + d, q) for q in range(0, p - d, 2 * d)])
        up += _move(P, ar, br, cr, s, p) + s * gr
        down += _move(P, ab, bb, cb, s, p)
        d *= 2
    return t + up + down + (k - 1) * max(up, down)


def allgather_ring(N: float, p: int, P: Params, seg: int = DEFAULT_SEGMENT_BYTES) -> float:
    """allgather_ring.cc: (p-1) steps of the N/p chunks, k segments each, forwarded at
    once, so the link is busy (p-1)k L; plus the copy of the rank's own chunk into the
    output (N/p bytes, a memory pass: gamma, not the link's beta), hidden behind the
    transfer only when they overlap."""
    a, b, g, o, c = _unpack(P, p, N)
    if p == 1:
        return o
    return o + a + (p - 1) * _segmented(P, a, b, c, N / p, p, seg) + (1 - P.overlap) * N / p * g


def allgather_bruck(N: float, p: int, P: Params, seg: int = DEFAULT_SEGMENT_BYTES) -> float:
    """allgather_bruck.cc: ceil(log2 p) rounds, doubling the blocks sent, (p-1)/p N bytes
    in all. Round 0 sends the rank's own block (N/p bytes) in k segments, as the ring
    does; each later round its blocks as one message. Blocks land in place (no final
    rotation): the only local copy is the rank's own block into the output, N/p bytes at
    gamma (a memory pass), made segment by segment during round 0, so hidden as far as
    copies and transfers overlap."""
    a, b, g, o, c = _unpack(P, p, N)
    if p == 1:
        return o
    t = o + a + _segmented(P, a, b, c, N / p, p, seg) + (1 - P.overlap) * N / p * g
    d = 2
    while d < p:  # the round of distance d: every rank receives min(d, p - d) blocks from rank + d
        ad, bd, _, _, cd = _unpack(P, p, N, lambda: [(q, (q + d) % p) for q in range(p)])
        t += _move(P, ad, bd, cd, min(d, p - d) * N / p, p)
        d *= 2
    return t


def reduce_scatter_ring(N: float, p: int, P: Params, seg: int = DEFAULT_SEGMENT_BYTES) -> float:
    """reduce_scatter_ring.cc: the reduce-scatter phase of the ring all-reduce on N/p chunks."""
    step = _unpack(P, p, N)
    a, o = step.alpha, step.overhead
    if p == 1:
        return o
    return o + a + _ring_reduce_scatter(N / p, p, P, step, seg)[0]


def broadcast_chain(n: float, p: int, P: Params, seg: int = DEFAULT_SEGMENT_BYTES) -> float:
    """broadcast_chain.cc: k segments down a chain of p-1 links, one behind the other (root
    0, as the benchmark's). The first segment's p-1 hops run one at a time, each costing
    what its one receiver pays (rank q from q-1); the k-1 behind it arrive one segment
    time apart, a time in which all p-1 receivers work (stretched on shared cores)."""
    a, b, g, o, c = _unpack(P, p, n, lambda: [(q, q - 1) for q in range(1, p)])
    if p == 1:
        return o
    k, s = _segments(n, seg)
    fill = 0.0
    for q in range(1, p):
        aq, bq, _, _, cq = _unpack(P, p, n, lambda: [(q, q - 1)])
        fill += _move(P, aq, bq, cq, s, p)
    return o + a + fill + (k - 1) * _move(P, a, b, c, s, p)


Formula = Callable[..., float]


def engine_name(algo: str) -> str:
    """The engine's name (algo=, the flight record) of one of the model's algorithms: the
    model's chain broadcast is the engine's "ring"; the others share their names."""
    return "ring" if algo == "chain" else algo


def model_name(op: str, algo: str) -> str:
    """The model's name of the algorithm the engine ran for `op` (engine_name's inverse)."""
    return "chain" if op == "broadcast" and algo == "ring" else algo

# op -> algorithm -> formula. Every algorithm the model knows, whether or not the engine
# has it yet (see choice.ENGINE_ALGOS for the ones the automatic choice may pick).
FORMULAS: Dict[str, Dict[str, Formula]] = {
    "all_reduce": {"ring": allreduce_ring, "direct": allreduce_direct,
                   "halving_doubling": allreduce_halving_doubling, "tree": allreduce_tree},
    "all_gather": {"ring": allgather_ring, "bruck": allgather_bruck},
    "reduce_scatter": {"ring": reduce_scatter_ring},
    "broadcast": {"chain": broadcast_chain},
}
