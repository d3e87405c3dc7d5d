"""Predicted time of a call, the best algorithm, and the table the group hands the
engine for its automatic choice.

    predict("all_reduce", 1 << 20, 4, "ring", params)  -> seconds
    choose("all_reduce", 1 << 20, 4, params)           -> "ring"
    auto_table("all_reduce", 4, params)                -> [(16384, "direct"), (2**64 - 1, "ring")]
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ..types import CALL_ALGOS, Algo  # enum and tuples only: no torch, no engine
from . import arena
from .formulas import DEFAULT_SEGMENT_BYTES, FORMULAS
from .params import Params

# The one-level algorithms the engine has, per op with a choice among them
# (pycollect.types.CALL_ALGOS, the one list): the automatic choice's table picks only among
# these, and prefers the earlier one in a near-tie. The hierarchical ones are chosen by
# the two-level model (hierarchy.py) where a group spans hosts; the shared-memory ones by the
# engine itself, ahead of the table, where a group's ranks share one host (by size:
# Communicator::sharedFits, PYCOLLECT_SHM_COLLECTIVE_BYTES).
ENGINE_ALGOS: Dict[str, Tuple[str, ...]] = {
    op: tuple(a.name.lower() for a in algos if a not in (Algo.AUTO, Algo.HIERARCHICAL, Algo.SHM))
    for op, algos in CALL_ALGOS.items() if op in ("all_reduce", "all_gather")}
# Sizes (bytes per rank) above which the automatic choice never picks an algorithm,
# whatever the model says. direct: the model puts its crossover near 145 KiB, but
# --validate here measured direct slower than the others from 64 KiB on (it moves
# (p-1) n bytes per rank), so it stays within the 16 KiB the fixed threshold used. (The
# crash --validate first hit at 16-64 MiB, scratch released under a running call, is fixed.)
ENGINE_LIMITS: Dict[str, int] = {"direct": 16 * 1024}
AUTO_MARGIN = 0.05  # the automatic choice leaves the earlier algorithm only for a 5 % predicted gain
MAX_BYTES = 2**64 - 1  # the last row of a table: "and anything larger"


def _formula(op: str, algo: str):
    if op not in FORMULAS:
        raise ValueError(f"the cost model knows no op {op!r}; choose one of {', '.join(FORMULAS)}")
    if algo == arena.ALGO:
        return arena.ARENA_FORMULAS[op]
    if algo not in FORMULAS[op]:
        raise ValueError(f"the cost model knows no {op} algorithm {algo!r}; choose one of "
                         f"{', '.join(FORMULAS[op])} (or {arena.ALGO}: one host's shared arena)")
    return FORMULAS[op][algo]


def _check(nbytes, world_size) -> None:
    if not nbytes >= 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes!r}")
    if not (isinstance(world_size, int) and world_size >= 1):
        raise ValueError(f"world_size must be an integer >= 1, got {world_size!r}")


def predict(op: str, nbytes: float, world_size: int, algo: str, params: Params,
            segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> float:
    """Seconds for one call. nbytes: the buffer per rank (all_reduce, broadcast) or the
    total gathered / scattered bytes (all_gather, reduce_scatter), as nccl-tests counts.
    Where the ranks outnumber the cores, with the parameters fitted for that (Params.at);
    the shared arena's algorithm ("shm", arena.py) with the arena's set (Params.arena_set)."""
    f = _formula(op, algo)
    _check(nbytes, world_size)
    if segment_bytes < 1:
        raise ValueError(f"segment_bytes must be >= 1, got {segment_bytes!r}")
    if algo == arena.ALGO:
        params = params.arena_set()
    return f(float(nbytes), world_size, params.at(world_size), segment_bytes)


def choose(op: str, nbytes: float, world_size: int, params: Params, algos: Optional[Iterable[str]] = None,
           segment_bytes: int = DEFAULT_SEGMENT_BYTES, margin: float = 0.0) -> str:
    """The algorithm with the smallest predicted time: the first in `algos` (default every
    algorithm the model knows for `op`) within `margin` (a fraction) of the smallest, so
    near-ties go to the earlier, simpler algorithm instead of flipping with each byte."""
    names = list(algos) if algos is not None else list(FORMULAS.get(op, {}))
    if not names:
        raise ValueError(f"choose({op!r}): no algorithms to choose from")
    times = [predict(op, nbytes, world_size, a, params, segment_bytes) for a in names]
    best = min(times)
    return next(a for a, t in zip(names, times) if t <= best * (1 + margin))


def engine_choice(op: str, nbytes: float, world_size: int, params: Params, algos: Optional[Sequence[str]] = None,
                  segment_bytes: int = DEFAULT_SEGMENT_BYTES, limits: Optional[Dict[str, int]] = None) -> str:
    """What the automatic choice runs at this size: the best of `algos` (default the
    engine's, ENGINE_ALGOS) that its `limits` (default ENGINE_LIMITS) allow here, the
    earlier one winning a near-tie (AUTO_MARGIN). auto_table is this, size by size."""
    names = list(algos if algos is not None else ENGINE_ALGOS.get(op, FORMULAS.get(op, {})))
    limits = ENGINE_LIMITS if limits is None else limits
    allowed = [a for a in names if nbytes <= limits.get(a, MAX_BYTES)] or names
    return choose(op, nbytes, world_size, params, allowed, segment_bytes, AUTO_MARGIN)


def auto_table(op: str, world_size: int, params: Params, algos: Optional[Sequence[str]] = None,
               segment_bytes: int = DEFAULT_SEGMENT_BYTES, largest: int = 1 << 40,
               limits: Optional[Dict[str, int]] = None) -> List[Tuple[int, str]]:
    """[(max_bytes, algo), ...] sorted by max_bytes: `algo` is the best for every size up
    to max_bytes (and above the previous row's); the last row ends at MAX_BYTES. Sizes
    are scanned in steps of 2^(1/8) up to `largest`, each change of the best algorithm
    bisected to the byte; an algorithm is a candidate only up to its `limits` entry
    (default ENGINE_LIMITS), and the earlier of `algos` wins a near-tie (AUTO_MARGIN). Pure arithmetic on shared inputs: every rank builds the same table."""
    def best(nb: int) -> str:
        return engine_choice(op, nb, world_size, params, algos, segment_bytes, limits)

    table: List[Tuple[int, str]] = []
    lo, current = 1, best(1)
    x = 1.0
    while lo < largest:
        x *= 2 ** 0.125
        hi = min(largest, max(lo + 1, int(x)))
        if best(hi) != current:
            a, b = lo, hi  # best(a) == current != best(b)
            while b - a > 1:
                mid = (a + b) // 2
                a, b = (mid, b) if best(mid) == current else (a, mid)
            table.append((a, current))
            current = best(b)
        lo = hi
    table.append((MAX_BYTES, current))
    return table


def crossovers(op: str, nbytes: float, sizes: Sequence[int], params: Params, algos: Sequence[str],
               segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> List[Tuple[int, str, str]]:
    """Where the best algorithm changes along `sizes` (world sizes) at `nbytes`:
    [(world_size, before, after), ...]."""
    out, prev = [], None
    for p in sizes:
        b = choose(op, nbytes, p, params, algos, segment_bytes)
        if prev is not None and b != prev:
            out.append((p, prev, b))
        prev = b
    return out
