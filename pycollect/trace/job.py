"""Run one collective on local ranks with tracing on, and bring every rank's events home.

    result = run_trace("all_reduce", 4 << 20, world_size=4, algo="ring")
    result.events   # pycollect.TraceEvent of every rank, rank by rank

Each rank (pycollect.launch.run_ranks, pinned to core r mod cores) runs the op `warmup`
times untraced (links, scratch and page faults warm), then once inside pc.tracing(), and
returns its events.
"""
from __future__ import annotations

import inspect
from typing import Dict, List, NamedTuple, Optional

from ..measuring import DTYPE_BYTES, OPS, buffers, elements, op_function, run_op
from ..types import Algo, TraceEvent


class TraceRun(NamedTuple):
    op: str
    nbytes: int
    world_size: int
    algo: str
    events: List[TraceEvent]
    links: Dict[int, Dict[int, str]]  # rank -> {peer: "shm" or "tcp"}


def check_request(op: str, algo: str, world_size: int, nbytes: int, dtype: str) -> str:
    """Refuse what cannot run, before any rank starts; returns the algorithm's name."""
    if op not in OPS:
        raise ValueError(f"op {op!r}: choose one of {', '.join(OPS)}")
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r}: choose one of {', '.join(sorted(DTYPE_BYTES))}")
    if world_size < 1:
        raise ValueError(f"world size must be >= 1, got {world_size}")
    if nbytes < 0:
        raise ValueError(f"size must be >= 0 bytes, got {nbytes}")
    name = Algo.parse(algo, "algo").name.lower()
    if name != "auto" and "algo" not in inspect.signature(op_function(op)).parameters:
        raise ValueError(f"{op} takes no algorithm choice (algo={name}); it always runs its own")
    return name


def _rank_job(rank: int, world_size: int, emit, op: str, nbytes: int, dtype: str, algo: str, warmup: int):
    import torch

    from .. import api as pc
    from ..launch import pin_to_core

    pin_to_core(rank)  # the picture shows the algorithm, not where the scheduler put the ranks
    count = elements(op, nbytes, world_size, DTYPE_BYTES[dtype])
    a, b = buffers(op, count, world_size, getattr(torch, dtype))
    for _ in range(warmup):
        run_op(op, a, b, None, algo)
    pc.barrier()
    pc.take_trace()  # what PYCOLLECT_TRACE=1 recorded so far
    with pc.tracing():
        run_op(op, a, b, None, algo)
    events = pc.take_trace()
    return events, pc.get_transport_info()


def run_trace(op: str, nbytes: int, world_size: int, algo: str = "auto", dtype: str = "float32",
              warmup: int = 2, env: Optional[dict] = None, timeout: float = 120.0) -> TraceRun:
    """Trace one call of `op` on `nbytes` at `world_size` local ranks (see the module doc)."""
    from ..launch import run_ranks

    algo = check_request(op, algo, world_size, nbytes, dtype)
    results = run_ranks(_rank_job, world_size, ("pycollect",), job_args=(op, nbytes, dtype, algo, warmup),
                        timeout=timeout, env=env)
    events = [e for rank_events, _ in results for e in rank_events]
    links = {rank: kinds for rank, (_, kinds) in enumerate(results)}
    return TraceRun(op, nbytes, world_size, algo, events, links)
