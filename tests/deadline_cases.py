"""Worker side of the fault matrix (tests/test_deadlines.py): every path on which a rank can
block, each on a group of its own over all the pool's ranks, each looping on a thread of
its own, so that one fault (a stopped, killed or cut-off rank) is seen by every path at once.

    case_start_paths(paths, timeout_s)   # forms one group per path, starts the loops
    case_fewest_calls()                  # > 0: every loop is running
    case_path_outcomes(wait_s)           # {path: (error class, message, wall time) or None}
    case_rendezvous(timeout_s)           # forms one more group: the wait for a peer that never comes

A path's loop ends at its first error; its outcome is what it raised and when.
"""
from __future__ import annotations

import datetime
import threading
import time

import torch

import pycollect as pc

# path -> the Options its group changes (ring_tcp and ring_shm: the transport)
PATHS = {
    "ring_tcp": {"transport": "tcp"},  # a large all-reduce on TCP links, run inline by the caller
    "ring_shm": {"transport": "shm"},  # the same on shared-memory links
    "inline": {},                      # 8 bytes: the small-call path
    "queued": {},                      # async calls queued behind each other on the worker, then wait()
    "send_recv": {},                   # each rank sends to its right, receives from its left
    "recv_any": {},                    # ... received from any source
    "staged": {},                      # device tensors staged through pinned memory (the host device here)
    "hierarchical": {},                # 16 MiB forced hierarchical, each rank a host of its own (host tags):
                                       # its levels pipelined, the rails' ring polled from the host's waits
}
_outcomes: dict = {}
_calls: dict = {}
_threads: list = []
_groups: list = []


def _group(timeout_s: float, **options):
    """A new group over every rank, with these Options fields changed from the environment's."""
    import dataclasses

    from pycollect.options import Options

    return pc.new_group(timeout=timeout_s, pg_options=dataclasses.replace(Options.from_env(), **options))


def _loop(path: str, g) -> None:
    n, r = g.size, g.rank
    right, left = (r + 1) % n, (r - 1) % n
    big = torch.ones(1 << 20)
    small = torch.ones(2)
    if path == "staged":
        g.use_host_device()
    if path in ("ring_tcp", "ring_shm", "staged"):
        step = lambda: pc.all_reduce(big, group=g)  # noqa: E731
    elif path == "hierarchical":
        sliced = torch.ones(1 << 22)  # 16 MiB: pipelined in slices
        step = lambda: pc.all_reduce(sliced, group=g, algo="hierarchical")  # noqa: E731
    elif path == "inline":
        step = lambda: pc.all_reduce(small, group=g)  # noqa: E731
    elif path == "queued":
        def step():
            works = [pc.all_reduce(big, group=g, async_op=True) for _ in range(3)]
            for w in works:
                w.wait()
    elif path == "send_recv":
        inbox = torch.empty(1 << 18)

        def step():
            w = pc.isend(big[: 1 << 18], g.ranks[right], group=g)
            pc.recv(inbox, g.ranks[left], group=g)
            w.wait()
    else:  # recv_any
        inbox = torch.empty(1 << 10)

        def step():
            w = pc.isend(big[: 1 << 10], g.ranks[right], group=g, tag=7)
            pc.recv(inbox, None, group=g, tag=7)
            w.wait()
    _calls[path] = 0
    try:
        while True:
            step()
            _calls[path] += 1
    except BaseException as e:  # noqa: BLE001 - the outcome is what this path raised
        _outcomes[path] = (type(e).__name__, str(e), time.time(), _calls[path])


def case_start_paths(paths, timeout_s: float) -> dict:
    """Form a group per path (in this order on every rank), start its loop; the links each uses."""
    kinds = {}
    for path in paths:
        options = dict(PATHS[path])
        if path == "hierarchical":
            options["host_tag"] = f"deadlines-host-{pc.get_rank()}"
        g = _group(timeout_s, **options)
        _groups.append(g)
        kinds[path] = sorted(set(g.transport_info().values()))
    for path, g in zip(paths, _groups):
        t = threading.Thread(target=_loop, args=(path, g), name=f"path-{path}", daemon=True)
        t.start()
        _threads.append(t)
    return kinds


def case_fewest_calls() -> int:
    """The fewest calls any path of this rank has completed so far."""
    return min(_calls.get(t.name[len("path-"):], 0) for t in _threads)


def case_path_outcomes(wait_s: float) -> dict:
    """Each path's (error class, message, wall time, calls made), once every loop ended or
    `wait_s` passed; a loop still running has None."""
    deadline = time.monotonic() + wait_s
    for t in _threads:
        t.join(max(0.0, deadline - time.monotonic()))
    paths = [t.name[len("path-"):] for t in _threads]
    return {p: _outcomes.get(p) for p in paths}


def case_rendezvous(timeout_s: float):
    """Form one more group over every rank: (error class, message, seconds it took) or None."""
    t0 = time.monotonic()
    try:
        _group(timeout_s)
    except BaseException as e:  # noqa: BLE001
        return type(e).__name__, str(e), time.monotonic() - t0
    return None


def case_destroy_while_blocked(how: str, call: str = "all_reduce", transport: str = "auto") -> dict:
    """Rank 0 blocks in a call that rank 1 never answers, and another thread ends the group
    with `how` ("destroy": pc.destroy_process_group(g); "abort": the group's abort): how long
    that took, and what the blocked call raised, how soon. `call`: "all_reduce" (4 MiB, run
    inline by the caller), "all_reduce_small" (8 B: the shared arena's on shm), "recv"
    (blocking, driven by its caller) or "irecv" (posted, then wait(): the worker or the
    waiter drives it); `transport`: the group's links."""
    g = _group(60.0, transport=transport)
    out: dict = {}
    if g.rank == 0:
        def end():
            time.sleep(0.3)
            t0 = time.monotonic()
            if how == "destroy":
                pc.destroy_process_group(g)
            else:
                g.abort("aborted by the test")
            out["end_s"] = time.monotonic() - t0
            out["ended"] = time.monotonic()

        t = threading.Thread(target=end)
        t.start()
        try:
            if call == "all_reduce":
                pc.all_reduce(torch.ones(1 << 20), group=g)
            elif call == "all_reduce_small":
                pc.all_reduce(torch.ones(2), group=g)
            elif call == "recv":
                pc.recv(torch.empty(2), 1, group=g)
            else:
                pc.irecv(torch.empty(2), 1, group=g).wait()
            out["call"] = "no error"
        except Exception as e:  # noqa: BLE001 - the test reads it
            out["call"] = f"{type(e).__name__}: {e}"
        out["raised"] = time.monotonic()
        t.join()
        out["call_s"] = out["raised"] - out.pop("ended") if "ended" in out else None
        del out["raised"]
    else:
        time.sleep(0.6)  # rank 0 ended the group (0.3 s in): its links are closed
    if how != "destroy" or g.rank != 0:
        pc.destroy_process_group(g)
    return out


def case_flight_ring() -> list:
    """A group whose flight recorder keeps 4 entries, after 3 all-reduces, a send/recv pair
    and a broadcast: its ring, oldest first."""
    g = _group(30.0, flight_entries=4)
    t = torch.ones(8)
    for _ in range(3):
        pc.all_reduce(t, group=g)
    if g.rank == 0:
        pc.send(t, 1, group=g, tag=5)
    else:
        pc.recv(t, 0, group=g, tag=5)
    pc.broadcast(torch.ones(3, dtype=torch.float64), 1, group=g)
    record = g._comm.flight_record()
    pc.destroy_process_group(g)
    return record


def case_reinit() -> list:
    """destroy_process_group, then init_process_group again on the same store: first
    process 1 alone (world size 1), then both with their ranks swapped, then as at first.
    Every formation reuses the name g0, whose earlier keys are still in the store. What
    each world saw: (rank, world size, all-reduce of rank + 1)."""
    from pycollect import world

    store, first = world.store, pc.get_rank()
    seen = []

    def world(rank, size):
        pc.init_process_group(store=store, rank=rank, world_size=size, timeout=datetime.timedelta(seconds=20))
        t = torch.full((4,), float(pc.get_rank() + 1))
        pc.all_reduce(t)
        seen.append((pc.get_rank(), pc.get_world_size(), t[0].item()))
        pc.barrier()
        pc.destroy_process_group()

    pc.barrier()
    pc.destroy_process_group()
    if first == 1:
        world(0, 1)
    else:
        time.sleep(0.5)
    world(1 - first, 2)
    pc.init_process_group(store=store, rank=first, world_size=2, timeout=datetime.timedelta(seconds=30))
    pc.barrier()
    return seen


LATE_S = 0.6  # how late the peer comes in the point-to-point wait cases


def case_p2p_wait_timeout(transport: str, wait_s: float) -> dict:
    """Rank 0 waits `wait_s` for a point-to-point call that rank 1 answers LATE_S late, on a
    group with `transport` links: an irecv (its wait), a 32 MiB isend (more than the sockets
    hold, so it waits for the receiver), and a blocking recv on a group whose own timeout is
    `wait_s`. {call: (what it raised,
    seconds until it did)}; each async call still completes once the peer comes."""
    from pycollect.errors import CollectiveTimeoutError

    out: dict = {}
    for call in ("irecv", "isend", "recv"):
        g = _group(wait_s if call == "recv" else 30.0, transport=transport)
        buf = torch.zeros(1 if call != "isend" else 1 << 23)
        pc.barrier(group=g)
        if g.rank == 0:
            t0 = time.monotonic()
            try:
                if call == "recv":
                    pc.recv(buf, g.ranks[1], group=g)
                else:
                    w = pc.irecv(buf, g.ranks[1], group=g) if call == "irecv" else pc.isend(buf, g.ranks[1], group=g)
                    try:
                        w.wait(timeout=wait_s)
                    finally:
                        late = time.monotonic() - t0
                    w.wait()  # the peer comes: the call completes after all
                    assert call != "irecv" or buf[0].item() == 7.0, buf
                out[call] = ("no error", time.monotonic() - t0)
            except CollectiveTimeoutError as e:
                out[call] = ("CollectiveTimeoutError", time.monotonic() - t0, str(e))
            if call != "recv" and call in out and out[call][0] == "no error":
                out[call] = ("returned", late)
        else:
            time.sleep(LATE_S)
            try:
                if call == "irecv":
                    pc.send(torch.full((1,), 7.0), g.ranks[0], group=g)
                elif call == "isend":
                    pc.recv(buf, g.ranks[0], group=g)
            except Exception:  # noqa: BLE001 - a blocking recv's group failed on rank 0: nothing to send to
                pass
        if call != "recv":
            pc.barrier(group=g)
        pc.destroy_process_group(g)
    return out


def case_p2p_interrupted(transport: str) -> dict:
    """Ctrl-C (SIGINT from another thread, 0.3 s in) while rank 0 waits for a recv that rank 1
    never sends: through irecv().wait() and a blocking recv. {call: (what it raised, seconds)}."""
    import os
    import signal

    out: dict = {}
    for call in ("irecv", "recv"):
        g = _group(30.0, transport=transport)
        pc.barrier(group=g)
        if g.rank == 0:
            previous = signal.signal(signal.SIGINT, signal.default_int_handler)
            timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
            t0 = time.monotonic()
            timer.start()
            try:
                buf = torch.zeros(4)
                if call == "irecv":
                    pc.irecv(buf, g.ranks[1], group=g).wait()
                else:
                    pc.recv(buf, g.ranks[1], group=g)
                out[call] = ("no error", time.monotonic() - t0)
            except KeyboardInterrupt:
                out[call] = ("KeyboardInterrupt", time.monotonic() - t0 - 0.3)
            finally:
                timer.join()
                signal.signal(signal.SIGINT, previous)
        else:
            time.sleep(0.6)  # rank 0 was interrupted meanwhile (0.3 s in): its group failed
        pc.destroy_process_group(g)
    return out


def case_storm_then_peer_gone(rounds: int, calls: int) -> dict:
    """`rounds` times: a fresh group, both ranks post `calls` isends and irecvs each way (8 B
    and 64 KiB, async, unwaited), and rank 1 abandons the group in the middle (abort: its links
    shut down, as its death would), on the thread that posts, while its worker and rank 0's
    move the bytes. Rank 0 then waits for every call: each completes or raises a pycollect
    error, none hangs. What rank 0 saw: {"rounds", "completed", "failed", "slowest_s",
    "other": errors that were not pycollect's}."""
    import random

    rng = random.Random(1234)
    seen = {"rounds": 0, "completed": 0, "failed": 0, "slowest_s": 0.0, "other": []}
    for _ in range(rounds):
        g = _group(5.0)
        peer = g.ranks[1 - g.rank]
        stop_at = rng.randrange(calls)
        works = []
        for i in range(calls):
            if g.rank == 1 and i == stop_at:
                g.abort("rank 1 leaves in the middle of the storm")
                break
            n = 2 if i % 2 else 1 << 14
            try:
                works.append(pc.isend(torch.ones(n), peer, group=g, tag=i))
                works.append(pc.irecv(torch.empty(n), peer, group=g, tag=i))
            except pc.PyCollectError:
                break  # the group already failed: nothing more can be posted
        if g.rank == 0:
            for w in works:
                t0 = time.monotonic()
                try:
                    w.wait()
                    seen["completed"] += 1
                except pc.PyCollectError:
                    seen["failed"] += 1
                except Exception as e:  # noqa: BLE001 - the test reads it
                    seen["other"].append(f"{type(e).__name__}: {e}")
                seen["slowest_s"] = max(seen["slowest_s"], time.monotonic() - t0)
        seen["rounds"] += 1
        pc.destroy_process_group(g)
    return seen
