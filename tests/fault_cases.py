"""Worker-side functions shared by the fault tests and the multi-host tests (run inside RankPool ranks)."""
from __future__ import annotations

import time

import torch

import pycollect as pc


def case_all_reduce_until_failure(count: int = 16 * 1024 * 1024, algo: str = "auto", compress=None):
    """All-reduce `count` float32 (default 64 MiB) with `algo` (and wire format `compress`)
    until the group fails; return the error (class name, message, wall-clock time), whether
    a later call fails at once, and the calls made. algo "parts": a gather to rank 0, a
    scatter from it and an all-to-all, in turn, of `count` elements a rank and part (the
    shared arena's parts: shared_arena.h)."""
    t = torch.ones(count)
    if algo == "parts":  # a row a rank (views of one buffer: each rank's memory as the others' cases)
        n = pc.get_world_size()
        rows = list(torch.ones(n * count).chunk(n)) if pc.get_rank() == 0 else None
        sent, received = list(torch.ones(n * count).chunk(n)), list(torch.empty(n * count).chunk(n))
    calls = 0
    try:
        while True:
            if algo == "parts":
                if calls % 3 == 0:
                    pc.gather(t, rows, dst=0)
                elif calls % 3 == 1:
                    pc.scatter(t, rows, src=0)
                else:
                    pc.all_to_all(received, sent)
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
