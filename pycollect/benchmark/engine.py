"""The engine's own floor: pycollect._C.engine_latency, an OSU-style loop in C++ on a formed
group's Communicator, with no Python per call. Each call is issued as a blocking API call
is (the engine may run it on the calling thread) and timed alone after the previous one
returned; the GIL is released for the whole loop. This module sizes the buffers and hands
back the times, so that the callers (pycollect bench --latency, bench/engine_latency.py,
the tests) print medians beside the API's.

Sizes follow the benchmark's conventions: `nbytes` is the buffer of all_reduce, broadcast,
reduce and ping_pong, the total gathered by all_gather and gather, the total input of
reduce_scatter and scatter, and each rank's total sent by all_to_all (nccl-tests), float32
elements, at least one (per rank); barrier moves none. The rooted calls' root is rank 0.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

OPS = ("all_reduce", "broadcast", "reduce", "barrier", "ping_pong", "all_gather", "reduce_scatter", "gather",
       "scatter", "all_to_all")


def buffers(op: str, nbytes: int, world: int) -> Tuple[np.ndarray, Optional[np.ndarray], int]:
    """(data, out, count) for engine_latency: count as Communicator's calls take it."""
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    if op in ("all_gather", "reduce_scatter", "gather", "scatter", "all_to_all"):
        count = max(1, nbytes // (4 * world))
        small, big = np.zeros(count, np.float32), np.zeros(count * world, np.float32)
        if op == "all_to_all":  # a part a rank each way
            return np.zeros(count * world, np.float32), big, count
        return (small, big, count) if op in ("all_gather", "gather") else (big, small, count)
    count = max(1, nbytes // 4)
    return np.zeros(count, np.float32), None, count


def engine_loop(op: str, nbytes: int, iters: int, warmup: int = 10, group=None,
                fill: float = 0.0) -> Tuple[List[float], np.ndarray, Optional[np.ndarray]]:
    """Runs the C++ loop on `group` (None: the default group); every rank of the group must
    call it with the same arguments. Returns (microseconds per timed call, data, out) with
    the buffers as the last call left them; `data` starts filled with `fill` (zeros keep
    repeated sums finite)."""
    from .. import _C
    from ..world import resolve

    g = resolve(group)
    data, out, count = buffers(op, nbytes, g.size)
    data.fill(fill)
    with g._lock:  # issue order as the API's: no other thread's call interleaves with the loop
        times = _C.engine_latency(g._comm, op, data.ctypes.data, 0 if out is None else out.ctypes.data, count,
                                  iters, warmup)
    return times, data, out
