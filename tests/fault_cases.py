"""Worker-side functions shared by the fault tests and the multi-host tests (run inside RankPool ranks)."""
from __future__ import annotations

import time

import torch

import pycollect as pc


def case_all_reduce_until_failure(count: int = 16 * 1024 * 1024, algo: str = "auto", compress=None):
    """All-reduce `count` float32 (default 64 MiB) with `algo` (and wire format `compress`)
    until the group fails; return the error (class name, message, wall-clock time), whether
    a later call fails at once, and the calls made. algo "gather_scatter": a gather to rank 0
    and a scatter from it, of `count` elements a rank, in turn (the shared arena's rounds)."""
    t = torch.ones(count)
    rows = [torch.ones(count) for _ in range(pc.get_world_size())] if pc.get_rank() == 0 else None
    calls = 0
    try:
        while True:
            if algo == "gather_scatter":
                pc.gather(t, rows, dst=0) if calls % 2 == 0 else pc.scatter(t, rows, src=0)
            else:
                pc.all_reduce(t, algo=algo, compress=compress)
            calls += 1
    except pc.PyCollectError as e:
        err = (type(e).__name__, str(e), time.time())
    t1 = time.perf_counter()
    try:
        pc.all_reduce(torch.ones(1))
        later = "no error"
    except pc.GroupFailedError:
        later = "GroupFailedError" if time.perf_counter() - t1 < 0.5 else "slow GroupFailedError"
    return err, later, calls


def case_host_and_sum():
    from pycollect import world

    t = torch.arange(1000, dtype=torch.float64)
    pc.all_reduce(t)
    return world.host, bool(torch.equal(t, torch.arange(1000, dtype=torch.float64) * pc.get_world_size()))
