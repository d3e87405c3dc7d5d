"""The cost of the shared arena's collectives (csrc/collectives/shared_arena.h), one
function each, in the terms of formulas.py, read from the arena's own parameter set
(Params.arena_set: fitted on `pycollect bench --algo shm` points, apart from the links').

On one host the arena replaces messages by flags in shared memory: a rank copies its data
into its slot and raises a flag, its peers see it and read the slot in place. In the
arena's set, alpha is therefore the cost of one such round of flags (a store seen across
cores, not a message through a link), beta a byte copied into or out of a slot and gamma
a byte reduced, at the caches' speed where the buffer per rank fits them (Params.per_byte);
overhead is paid once a call. Rounds: a call larger than the slot (SLOT_BYTES; the
broadcast's PIPE_BYTES) runs as several, each with its round of flags.

n: bytes per rank (all-reduce, broadcast) or N: total bytes gathered / the input
scattered per rank (all-gather, reduce-scatter), as nccl-tests counts; p: ranks.

    allreduce_shm     a round of at most ONE_PHASE_BYTES: each rank copies its input in
                      and reduces all p slots itself ((p-1) n gamma); larger rounds are a
                      pipeline in which each rank reduces one chunk of every piece and
                      copies the others' out: (2p-1)/p n beta + (p-1)/p n gamma
    allgather_shm     each rank copies its part in (N/p) and every part out (N)
    reduce_scatter_shm each rank copies its whole input in (N) and reduces its chunk of
                      every slot ((p-1)/p N gamma)
    broadcast_shm     the root copies in while the others copy the round before out:
                      n beta, plus the last round's copy out
"""
from __future__ import annotations

import math
from typing import Dict, Tuple

from .formulas import DEFAULT_SEGMENT_BYTES, Formula, _unpack
from .params import Params

# The arena's constants (csrc/collectives/shared_arena.h), copied so that the model loads
# no engine: a slot, the largest round reduced in one phase, a broadcast's round.
SLOT_BYTES = 1 << 20  # kArenaSlotBytes
ONE_PHASE_BYTES = 32 << 10  # kOnePhaseBytes
PIPE_BYTES = 64 << 10  # kArenaPipeBytes
ALGO = "shm"  # the engine's name for the arena (Algo::kShared)
# The engine's choice of the arena on one host is a rule by size, not this model
# (Communicator::sharedFits; docs/costmodel.md, "The shared arena"): the all-reduce,
# all-gather and reduce-scatter at every size, the broadcast up to this many bytes at 2
# ranks, SHARED_LARGE_BYTES on more.
SHARED_BROADCAST_BYTES = 256 << 10  # kSharedBroadcastBytes
SHARED_LARGE_BYTES = 1 << 20  # kSharedLargeBytes


def rule_takes_arena(op: str, nbytes: float, world_size: int) -> bool:
    """Whether the engine's rule runs `op` of `nbytes` on `world_size` ranks in the arena
    on one host."""
    if op != "broadcast":
        return True
    return nbytes <= (SHARED_LARGE_BYTES if world_size > 2 else SHARED_BROADCAST_BYTES)


def _rounds(total: float, per_round: float) -> Tuple[int, float]:
    """(m, r): `total` bytes in m rounds of r bytes (at least one round, of 0 bytes)."""
    m = max(1, math.ceil(total / per_round))
    return m, total / m


def allreduce_shm(n: float, p: int, P: Params, seg: int = DEFAULT_SEGMENT_BYTES) -> float:
    """allreduce_shared.cc: rounds of at most a slot, each a round of flags and its bytes."""
    a, b, g, o, _ = _unpack(P, p, n)
    if p == 1:
        return o
    m, r = _rounds(n, SLOT_BYTES)
    if r <= ONE_PHASE_BYTES:
        per = r * b + (p - 1) * r * g
    else:
        per = (2 * p - 1) / p * r * b + (p - 1) / p * r * g
    return o + m * (a + per)


def allgather_shm(N: float, p: int, P: Params, seg: int = DEFAULT_SEGMENT_BYTES) -> float:
    """broadcast_shared.cc (allgatherSharedTo): rounds of a slot of each rank's part."""
    a, b, _, o, _ = _unpack(P, p, N)
    if p == 1:
        return o
    m, _ = _rounds(N / p, SLOT_BYTES)
    return o + m * a + (N / p + N) * b


def reduce_scatter_shm(N: float, p: int, P: Params, seg: int = DEFAULT_SEGMENT_BYTES) -> float:
    """reduce_shared.cc (reduceScatterShared): rounds of a slot of the input."""
    a, b, g, o, _ = _unpack(P, p, N)
    if p == 1:
        return o
    m, _ = _rounds(N, SLOT_BYTES)
    return o + m * a + N * b + (p - 1) / p * N * g


def broadcast_shm(n: float, p: int, P: Params, seg: int = DEFAULT_SEGMENT_BYTES) -> float:
    """broadcast_shared.cc: rounds of PIPE_BYTES, the root filling one while the others
    copy the one before out."""
    a, b, _, o, _ = _unpack(P, p, n)
    if p == 1:
        return o
    m, r = _rounds(n, PIPE_BYTES)
    return o + m * a + (n + r) * b


# op -> formula of the arena's algorithm (choice.predict reads it for algo "shm").
ARENA_FORMULAS: Dict[str, Formula] = {
    "all_reduce": allreduce_shm,
    "all_gather": allgather_shm,
    "reduce_scatter": reduce_scatter_shm,
    "broadcast": broadcast_shm,
}
