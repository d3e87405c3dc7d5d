"""Run one collective on local ranks with tracing on, and bring every rank's events home.

    result = run_trace("all_reduce", 4 << 20, world_size=4, algo="ring")
    result.events   # pycollect.TraceEvent of every rank, rank by rank

Each rank (pycollect.launch.run_ranks, pinned to core r mod cores) runs the op `warmup`
times untraced (links, scratch and page faults warm), then once inside pc.tracing(), and
returns its events.
"""
from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional

from ..measuring import DTYPE_BYTES, OPS, buffers, elements, run_op
from ..types import CALL_ALGOS, Algo, TraceEvent


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
    chosen = Algo.parse(algo, "algo")
    if chosen is not Algo.AUTO and chosen not in CALL_ALGOS.get(op, ()):
        names = ", ".join(a.name.lower() for a in CALL_ALGOS.get(op, (Algo.AUTO,)))
        raise ValueError(f"{op} has no algorithm {chosen.name.lower()!r}: choose one of {names}")
    return chosen.name.lower()


def hosts_group(rank: int, ranks_per_host: int):
    """A group over every rank with ranks_per_host consecutive ranks on each (loopback) host:
    PYCOLLECT_HOST_TAG per host, shared memory within, TCP between. None: the default group."""
    import dataclasses

    from .. import api as pc
    from ..options import Options

    if not ranks_per_host:
        return None
    options = Options.from_env()
    tag = f"{options.host_tag or ''}host{rank // ranks_per_host}"
    return pc.new_group(pg_options=dataclasses.replace(options, host_tag=tag))


def _rank_job(rank: int, world_size: int, emit, op: str, nbytes: int, dtype: str, algo: str, warmup: int,
              ranks_per_host: int = 0):
    import torch

    from .. import api as pc
    from ..launch import pin_to_core

    pin_to_core(rank)  # the picture shows the algorithm, not where the scheduler put the ranks
    g = hosts_group(rank, ranks_per_host)
    count = elements(op, nbytes, world_size, DTYPE_BYTES[dtype])
    a, b = buffers(op, count, world_size, getattr(torch, dtype))
    for _ in range(warmup):
        run_op(op, a, b, g, algo)
    pc.barrier(group=g)
    pc.take_trace(g)  # what PYCOLLECT_TRACE=1 recorded so far
    with pc.tracing(g):
        run_op(op, a, b, g, algo)
    events = pc.take_trace(g)
    return events, pc.get_transport_info(g)


def run_trace(op: str, nbytes: int, world_size: int, algo: str = "auto", dtype: str = "float32",
              warmup: int = 2, env: Optional[dict] = None, timeout: float = 120.0,
              ranks_per_host: int = 0) -> TraceRun:
    """Trace one call of `op` on `nbytes` at `world_size` local ranks (see the module doc);
    ranks_per_host > 0: on hosts of that many ranks (hosts_group), as the hierarchical
    algorithms see them."""
    from ..launch import run_ranks

    algo = check_request(op, algo, world_size, nbytes, dtype)
    if ranks_per_host < 0 or (ranks_per_host and world_size % ranks_per_host):
        raise ValueError(f"--ranks-per-host {ranks_per_host} must divide the {world_size} ranks")
    results = run_ranks(_rank_job, world_size, ("pycollect",),
                        job_args=(op, nbytes, dtype, algo, warmup, ranks_per_host),
                        timeout=timeout, env=env)
    events = [e for rank_events, _ in results for e in rank_events]
    links = {rank: kinds for rank, (_, kinds) in enumerate(results)}
    return TraceRun(op, nbytes, world_size, algo, events, links)
