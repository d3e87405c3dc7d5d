"""The fault matrix: every wait honours the group's timeout. Each path a rank can block on
(tests/deadline_cases.py: a large all-reduce on TCP and on shared memory, the small inline
call, queued async calls, send/recv, recv from any source, the staged device path, and the
rendezvous of a new group) loops on its own group while one fault strikes: a rank stopped
with SIGSTOP (the store's host: its store stalls too), a rank killed, a cable cut between
namespace hosts with no shared memory between them, and one cut between two hosts of two
ranks each (shared memory inside a host, TCP between). Every rank that is still running
raises a pycollect error naming a rank within the group timeout + 5 s of the fault, and a
later group never waits longer than its timeout for a rank that is gone."""
import os
import re
import signal
import time

import pytest
import deadline_cases as dc
from pycollect import flight
from rank_pool import RankPool

TIMEOUT_S = 2.0
BOUND_S = TIMEOUT_S + 5.0
ERRORS = {"CollectiveTimeoutError", "PeerLostError", "GroupFailedError"}


def _check(outcomes: dict, rank: int, since: float, names=None, bound: float = BOUND_S) -> None:
    """Every path of `rank` raised a pycollect error within `bound` s of `since`, naming a
    rank (`names`: that one)."""
    for path, outcome in outcomes.items():
        assert outcome is not None, f"rank {rank}, path {path}: still running {bound:g} s after the fault"
        name, msg, at, calls = outcome
        where = f"rank {rank}, path {path}: {name}: {msg}"
        assert calls > 0, f"{where} (no call completed before the fault)"
        assert name in ERRORS, where
        assert re.search(r"\brank \d" if names is None else rf"\brank {names}\b", msg), f"{where} names no rank"
        assert at - since < bound, f"{where}: raised {at - since:.1f} s after the fault (bound {bound:g} s)"


def _check_rendezvous(outcome, rank: int, names: str) -> None:
    assert outcome is not None, f"rank {rank}: a group formed without the lost rank"
    name, msg, took = outcome
    assert name == "CollectiveTimeoutError", f"rank {rank}: {name}: {msg}"
    assert re.search(names, msg), f"rank {rank}: {msg}"
    assert took < BOUND_S, f"rank {rank}: forming the group took {took:.1f} s (bound {BOUND_S:g} s): {msg}"


def _reinitialised(pool) -> None:
    """Re-initialising on the same store, with other ranks and another world size, never
    meets an earlier formation's keys (each reuses the name g0)."""
    p0, p1 = pool.run(dc.case_reinit)
    assert p0 == [(1, 2, 3.0)] and p1 == [(0, 1, 1.0), (0, 2, 3.0)], (p0, p1)


def _ended_at_once(pool) -> None:
    """pc.destroy_process_group and a group's abort, called while a call blocks on another
    thread: each returns within a second, and the blocked call raises within one too; a
    receive nobody answers and an 8-byte all-reduce (the shared arena's, on shm) as well as
    a large all-reduce, on shared memory and on TCP."""
    cases = [("destroy", "all_reduce", "auto"), ("destroy", "irecv", "shm"), ("abort", "all_reduce", "auto")]
    cases += [("abort", call, transport) for call in ("recv", "irecv", "all_reduce_small") for transport in ("shm", "tcp")]
    for case in cases:
        out = pool.run(dc.case_destroy_while_blocked, *case)[0]
        assert out["end_s"] < 1.0 and out["call_s"] is not None and out["call_s"] < 1.0, (case, out)
        named = "recv" if case[1].endswith("recv") else "all_reduce"
        assert out["call"].startswith(("GroupFailedError", "PeerLostError")) and named in out["call"], (case, out)
        if case[0] == "abort":  # the abort's reason, not the links it closed
            assert "aborted by the test" in out["call"], (case, out)


def _flight_ring(pool) -> None:
    """The flight recorder keeps the last N calls (here 4) with what they were and how they ended."""
    for rank, record in enumerate(pool.run(dc.case_flight_ring)):
        assert [e["id"] for e in record] == [1, 2, 3, 4], record
        assert [e["op"] for e in record] == ["all_reduce", "all_reduce", "send/recv", "broadcast"]
        assert all(e["state"] == "done" for e in record), record
        assert [e["seq"] for e in record] == [1, 2, 0, 3], "collectives numbered per group, messages per pair"
        p2p, bcast = record[2], record[3]
        assert (p2p["peer"], p2p["send"], p2p["root"], p2p["count"]) == (1 - rank, rank == 0, 5, 8), p2p
        assert (bcast["dtype"], bcast["count"], bcast["root"]) == ("float64", 3, 1), bcast
        for e in record:
            assert 0 < e["issued_us"] <= e["started_us"] <= e["ended_us"], e
        assert record[0]["phase"] and record[0]["steps"] >= 1, record[0]


def _start(pool, paths) -> float:
    pool.run(dc.case_start_paths, list(paths), TIMEOUT_S)
    deadline = time.monotonic() + 20
    while min(pool.run(dc.case_fewest_calls)) == 0:  # every loop is running
        assert time.monotonic() < deadline, "a path made no call in 20 s"
        time.sleep(0.1)
    return time.time()


def test_stopped_store_host(tmp_path):
    """SIGSTOP on rank 0, which holds the store: rank 1 raises on every path naming rank 0,
    a new group does not wait on the silent store past its timeout, and rank 0, continued,
    finds every group failed at once. Each error names rank 1's flight record, and the
    records' verdict names rank 0 for every group."""
    with RankPool(2, init_gloo=False, timeout=60, env={"PYCOLLECT_FLIGHT_DIR": str(tmp_path)}) as pool:
        _start(pool, dc.PATHS)
        os.kill(pool.procs[0].pid, signal.SIGSTOP)
        stopped = time.time()
        try:
            (ok, outcomes), = pool.run_raw(dc.case_path_outcomes, BOUND_S + 1, ranks=[1], timeout=30)
            assert ok, outcomes
            _check(outcomes, 1, stopped, names=0)
            for path, (_, msg, _, _) in outcomes.items():
                assert f"flight record: {tmp_path}" in msg, (path, msg)
            records = flight.load(str(tmp_path))
            assert len(records) == len(dc.PATHS)
            for group, ranks in records.items():
                lines, culprits = flight.verdict(ranks)
                assert culprits == [0] and "rank 0 wrote no record" in "\n".join(lines), (group, lines)
            # Whom rank 1's failed calls waited for, where they say: rank 0 (a receive from any
            # source: any rank). The hierarchical call's wait for the rails' ring names it too.
            for group, ranks in records.items():
                failed = [e for e in ranks[1]["entries"] if e["state"] == "failed"]
                waits = {e["waiting_on"] for e in failed} - {-1}
                hierarchical = any(e["algo"] == "hierarchical" for e in failed)
                assert waits <= ({0} if hierarchical else {0, flight.ANY_PEER}) and (waits or not hierarchical), \
                    (group, failed)
            (ok, rendezvous), = pool.run_raw(dc.case_rendezvous, TIMEOUT_S, ranks=[1], timeout=30)
            assert ok, rendezvous
            _check_rendezvous(rendezvous, 1, "rendezvous store did not answer")
        finally:
            os.kill(pool.procs[0].pid, signal.SIGCONT)
        continued = time.time()
        (ok, outcomes), = pool.run_raw(dc.case_path_outcomes, BOUND_S + 1, ranks=[0], timeout=30)
        assert ok, outcomes
        _check(outcomes, 0, continued, names=1)


def _p2p_waits_honour_timeouts(pool) -> None:
    """A point-to-point wait against a peer that comes late ends at its own timeout (within
    100 ms), on TCP and on shared memory: irecv().wait(timeout), an isend's wait(timeout), and
    a blocking recv on a group whose timeout is that short. Ctrl-C during such a wait raises
    KeyboardInterrupt within 100 ms, async or blocking."""
    wait_s = 0.3
    for transport in ("tcp", "shm"):
        out = pool.run(dc.case_p2p_wait_timeout, transport, wait_s)[0]
        for call in ("irecv", "isend"):
            name, took = out[call][:2]
            assert name == "CollectiveTimeoutError" and wait_s <= took < wait_s + 0.1, (transport, call, out[call])
        name, took, msg = out["recv"]
        assert name == "CollectiveTimeoutError" and took < wait_s + 0.1 and "rank 1" in msg, (transport, out["recv"])
        for call, (name, after) in pool.run(dc.case_p2p_interrupted, transport)[0].items():
            assert name == "KeyboardInterrupt" and after < 0.1, (transport, call, name, after)


def _storms_end_when_the_peer_goes(pool) -> None:
    """A peer that goes in the middle of a storm of isends and irecvs, 200 times: every call
    on the other rank completes or raises a pycollect error, within the group timeout, and the
    process survives (the failure path used to drain the posted calls while another thread
    reaped them)."""
    seen = pool.run(dc.case_storm_then_peer_gone, 200, 24)[0]
    assert seen["rounds"] == 200 and not seen["other"], seen
    assert seen["failed"] > 0 and seen["slowest_s"] < 5.0 + 1.0, seen


def test_killed_rank():
    with RankPool(2, init_gloo=False, timeout=60) as pool:
        _reinitialised(pool)
        _ended_at_once(pool)
        _flight_ring(pool)
        _p2p_waits_honour_timeouts(pool)
        _storms_end_when_the_peer_goes(pool)
        _start(pool, dc.PATHS)
        pool.kill(1)
        killed = time.time()
        (ok, outcomes), = pool.run_raw(dc.case_path_outcomes, BOUND_S + 1, ranks=[0], timeout=30)
        assert ok, outcomes
        _check(outcomes, 0, killed, names=1)
        (ok, rendezvous), = pool.run_raw(dc.case_rendezvous, TIMEOUT_S, ranks=[0], timeout=30)
        assert ok, rendezvous
        _check_rendezvous(rendezvous, 0, r"rank 1 did not join")


@pytest.mark.slow
@pytest.mark.parametrize("layout", [(0, 1), (0, 0, 1, 1)], ids=["1+1 ranks", "2+2 ranks, shm inside a host"])
def test_cut_cable(netns_hosts4, layout):
    """Host 1's cable is pulled: the ranks on both sides raise on every path (those on one
    host wait on each other over shared memory while another waits on the cable), and a new
    group fails on each side: on host 0 naming the ranks of host 1, on host 1 the store."""
    hosts = netns_hosts4
    paths = [p for p in dc.PATHS if p != "ring_shm"]  # the hosts share no memory
    with RankPool(len(layout), netns=[hosts.names[h] for h in layout], master_addr=hosts.addrs[0],
                  init_gloo=False, timeout=60) as pool:
        _start(pool, paths)
        hosts.set_link(1, up=False)
        cut = time.time()
        try:
            results = pool.run_raw(dc.case_path_outcomes, BOUND_S + 1, timeout=30)
            for r, (ok, outcomes) in enumerate(results):
                assert ok, outcomes
                _check(outcomes, r, cut)
            far = "|".join(f"rank {r}" for r, h in enumerate(layout) if h == 1)
            for r, (ok, rendezvous) in enumerate(pool.run_raw(dc.case_rendezvous, TIMEOUT_S, timeout=30)):
                assert ok, rendezvous
                _check_rendezvous(rendezvous, r, rf"({far}).* did not join" if layout[r] == 0
                                  else "rendezvous store did not answer")
        finally:
            hosts.set_link(1, up=True)
