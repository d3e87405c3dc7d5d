"""A flood of silent connections on a rank's port during rendezvous, with a tight
file-descriptor limit: the group still forms at once, the listener does not spin,
and the refusals are logged as a summary, not one line each."""
import os
import resource
import socket
import tempfile
import threading
import time

import torch

import pycollect as pc
from rank_pool import RankPool, next_group_address

STRANGERS = 40


def case_form_under_flood(strangers: int):
    """Rank 0 opens `strangers` silent connections to rank 1's port for the next group, then
    both form it; rank 1 runs with a tight RLIMIT_NOFILE and its stderr in a file."""
    r = pc.get_rank()
    held, ready = [], threading.Event()
    if r == 0:
        def flood():
            addr = next_group_address(1)
            for _ in range(strangers):
                held.append(socket.create_connection(addr, timeout=15))
            ready.set()

        th = threading.Thread(target=flood)
        th.start()
        ready.wait(15)
    else:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        open_now = len(os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 12, hard))
        log = tempfile.TemporaryFile()
        saved_stderr = os.dup(2)
        os.dup2(log.fileno(), 2)
    cpu0, t0 = time.process_time(), time.perf_counter()
    try:
        g = pc.new_group([0, 1])
    finally:
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        if r == 1:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    t = torch.ones(1000)
    pc.all_reduce(t, group=g)
    # The listener greets connections as long as the group lives (links are made when first
    # used): its summary of refusals comes when the group is destroyed, if not before.
    pc.destroy_process_group(g)
    if r == 1:
        os.dup2(saved_stderr, 2)
        os.close(saved_stderr)
    out = {"sum_ok": bool(torch.all(t == 2)), "seconds": elapsed, "cpu": cpu}
    if r == 0:
        th.join(20)
        for s in held:
            s.close()
    else:
        log.seek(0)
        out["log"] = log.read().decode(errors="replace")
    return out


def test_flood_of_silent_connections_during_rendezvous():
    with RankPool(2, init_gloo=False) as pool:
        quiet = pool.run(case_form_under_flood, 0, timeout=60)
        flooded = pool.run(case_form_under_flood, STRANGERS, timeout=60)
    base = max(o["seconds"] for o in quiet)
    took = max(o["seconds"] for o in flooded)
    print(f"\nformation: {base:.3f} s quiet, {took:.3f} s with {STRANGERS} silent strangers "
          f"(rank 1 CPU {flooded[1]['cpu']:.3f} s)\nrank 1's log:\n{flooded[1]['log']}")
    assert all(o["sum_ok"] for o in quiet + flooded)
    assert took - base < 2.0, f"formation took {took:.2f} s under the flood ({base:.2f} s without)"
    assert flooded[1]["cpu"] < 1.0, f"rank 1 spent {flooded[1]['cpu']:.2f} s of CPU forming the group"
    lines = [ln for ln in flooded[1]["log"].splitlines() if "refused" in ln]
    assert 1 <= len(lines) <= 3, f"expected a summary, got {len(lines)} lines:\n{flooded[1]['log']}"
    assert f"refused {STRANGERS} connections" in flooded[1]["log"]
