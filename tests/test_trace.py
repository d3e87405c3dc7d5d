"""Engine traces (csrc/trace/, pc.tracing, pycollect.trace): event counts per step and
segment, sends matched by receives on the peer, ordered timestamps, the Chrome JSON and
PNG outputs, nothing recorded when off, and the torch.profiler range."""
from __future__ import annotations

import json
import math
from collections import Counter, defaultdict

import pytest
from rank_pool import paired_groups

from pycollect.options import Options
from pycollect.trace import to_spans, write_chrome, write_timeline

SEG = 512 * 1024  # the engine's default segment (the pools set no PYCOLLECT_SEGMENT_BYTES)


def _nseg(elements_per_chunk: int, es: int = 4) -> int:
    per = max(1, SEG // es)
    return math.ceil(elements_per_chunk / per)


def case_traced(size: int, op: str, count: int, algo: str = "ring"):
    """One traced call of `op` on the first `size` ranks; returns (group rank, events)."""
    import torch

    import pycollect as pc

    pair = paired_groups(size)
    if pair is None:
        return None
    g = pair[0]
    n = pc.get_world_size(g)
    pc.barrier(group=g)
    pc.take_trace(g)
    if op == "all_reduce":
        a = torch.ones(count)
        call = lambda: pc.all_reduce(a, group=g, algo=algo)  # noqa: E731
    elif op == "all_gather":
        a, b = torch.ones(count), torch.empty(count * n)
        call = lambda: pc.all_gather_into_tensor(b, a, group=g, algo="ring")  # noqa: E731 (auto may pick Bruck)
    elif op == "reduce_scatter":
        a, b = torch.ones(count * n), torch.empty(count)
        call = lambda: pc.reduce_scatter_tensor(b, a, group=g, algo="ring")  # noqa: E731 (auto: shm on one host)
    else:
        a = torch.ones(count)
        call = lambda: pc.broadcast(a, src=0, group=g, algo="ring")  # noqa: E731
    call()  # untraced
    untraced = pc.take_trace(g)
    with pc.tracing(g):
        call()
    return pc.get_rank(g), untraced, pc.take_trace(g)


def _gather(pool, size, op, count):
    out = [r for r in pool.run(case_traced, size, op, count) if r is not None]
    assert len(out) == size
    return out


def _payload(events):
    return [e for e in events if e.phase != "header"]


# (pool fixture, ranks used): 2 and 3 ranks from pool3, 4 from pool4 (shared memory) and pool4_tcp.
SIZES = [("pool3", 2), ("pool3", 3), ("pool4", 4), ("pool4_tcp", 4)]
COUNTS = [1000, 300_000, 700_001]  # 1, up to 2, up to 5 segments per chunk


@pytest.mark.parametrize("pool_name, size", SIZES)
@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast"])
def test_one_event_per_step_and_segment(request, pool_name, size, op, count):
    pool = request.getfixturevalue(pool_name)
    n = size
    for rank, untraced, events in _gather(pool, size, op, count):
        assert untraced == [], "a call outside pc.tracing() recorded events"
        c = Counter((e.type, e.phase) for e in _payload(events))
        types = Counter(e.type for e in _payload(events))
        if op == "all_reduce":
            nseg = _nseg(math.ceil(count / n))
            units = (n - 1) * nseg
            for t in ("send_posted", "send_done", "recv_posted", "recv_done"):
                assert c[(t, "reduce-scatter")] == units and c[(t, "all-gather")] == units, (rank, c)
            assert c[("reduce_start", "reduce-scatter")] == units == c[("reduce_end", "reduce-scatter")]
            recvs = {(e.phase, e.step, e.segment) for e in events if e.type == "recv_done" and e.phase != "header"}
            assert recvs == {(p, s, j) for p in ("reduce-scatter", "all-gather") for s in range(n - 1)
                             for j in range(nseg)}
        elif op in ("all_gather", "reduce_scatter"):
            units = (n - 1) * _nseg(count)
            for t in ("send_posted", "send_done", "recv_posted", "recv_done"):
                assert types[t] == units, (rank, types)
            assert types["reduce_start"] == (units if op == "reduce_scatter" else 0)
        else:
            nseg = _nseg(count)
            position = rank  # root 0
            assert types["send_posted"] == types["send_done"] == (nseg if position < n - 1 else 0)
            assert types["recv_posted"] == types["recv_done"] == (nseg if position > 0 else 0)
            assert types["reduce_start"] == 0
        assert all(e.op == op for e in events)
        assert len({e.seq for e in events}) == 1  # one call


@pytest.mark.parametrize("pool_name, size", SIZES)
@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast"])
def test_every_send_meets_its_receive_in_order(request, pool_name, size, op):
    pool = request.getfixturevalue(pool_name)
    results = _gather(pool, size, op, 700_001)
    sends, recvs = defaultdict(list), defaultdict(list)
    for rank, _, events in results:
        for e in events:
            if e.type == "send_posted":
                sends[(rank, e.peer)].append((e.bytes, e.phase, e.step, e.chunk, e.segment))
            elif e.type == "recv_posted":
                recvs[(e.peer, rank)].append((e.bytes, e.phase, e.step, e.chunk, e.segment))
    assert sends and set(sends) == set(recvs)
    for link in sends:
        assert sends[link] == recvs[link], f"link {link[0]} -> {link[1]}"


@pytest.mark.parametrize("size", [2, 3])
def test_ring_all_reduce_goes_in_blocks_of_two_segments(pool3, size):
    """allreduce_ring.cc sends every stage (reduce-scatter steps, then all-gather steps)
    of a block of two segments before the next block's first: with 6 (2 ranks) and 4
    (3 ranks) segments per chunk, not each stage for the whole chunk in turn."""
    count = 1_400_003
    nseg = _nseg(math.ceil(count / size))
    assert nseg > 2
    want = [(j, t) for b in range(0, nseg, 2) for t in range(2 * (size - 1)) for j in range(b, min(nseg, b + 2))]
    for rank, _, events in _gather(pool3, size, "all_reduce", count):
        for kind in ("send_posted", "recv_posted"):
            got = [(e.segment, (e.phase == "all-gather") * (size - 1) + e.step)
                   for e in _payload(events) if e.type == kind]
            assert got == want, f"rank {rank} {kind}"


@pytest.mark.parametrize("op", ["all_reduce", "broadcast"])
def test_timestamps_ordered_and_posted_before_done(pool3, op):
    spans_total = 0
    for rank, _, events in _gather(pool3, 3, op, 700_001):
        ns = [e.ns for e in events]
        assert ns == sorted(ns), f"rank {rank}: events out of time order"
        assert all(e.rank == rank for e in events)
        spans = to_spans(events)
        spans_total += len(spans)
        for s in spans:
            assert s.posted_ns <= s.start_ns <= s.end_ns
    assert spans_total > 0


def test_chrome_json_and_png(pool4, tmp_path):
    events = [e for _, _, evs in _gather(pool4, 4, "all_reduce", 700_001) for e in evs]
    spans = to_spans(events)
    path = write_chrome(spans, str(tmp_path / "t.json"), {"op": "all_reduce"})
    with open(path) as f:
        trace = json.load(f)
    names = {(e["pid"], e["args"]["name"]) for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {(r, f"rank {r}") for r in range(4)}
    tracks = defaultdict(set)
    for e in trace["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "thread_name":
            tracks[e["pid"]].add(e["args"]["name"])
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    for r in range(4):
        right, left = (r + 1) % 4, (r - 1) % 4
        # Payload flows right; the only bytes going left are the call headers.
        assert tracks[r] == {f"send -> rank {right}", f"recv <- rank {left}", "reduce",
                             f"send -> rank {left}", f"recv <- rank {right}"}, tracks[r]
        tids = {e["args"]["name"]: e["tid"] for e in trace["traceEvents"]
                if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == r}
        leftward = {e["cat"] for e in slices if e["pid"] == r and e["tid"] == tids[f"send -> rank {left}"]}
        assert leftward == {"header"}
    assert len(slices) == len(spans)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in slices)
    by_track = defaultdict(list)
    for e in slices:
        by_track[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for track, xs in by_track.items():  # slices of one track never overlap (spans.py)
        xs.sort()
        assert all(a[1] <= b[0] + 1e-6 for a, b in zip(xs, xs[1:])), track
    png = write_timeline(spans, str(tmp_path / "t.png"), "test")
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_cli_writes_both_files(tmp_path, capsys):
    from pycollect.cli import main

    assert main(["trace", "-o", "all_reduce", "-s", "1M", "-g", "2", "--algo", "ring", "--segment-bytes", "128K",
                 "--warmup", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "all_reduce_ring_g2_1M.json").stat().st_size > 0
    assert (tmp_path / "all_reduce_ring_g2_1M.png").stat().st_size > 0
    assert str(tmp_path / "all_reduce_ring_g2_1M.json") in out
    trace = json.loads((tmp_path / "all_reduce_ring_g2_1M.json").read_text())
    segs = {e["args"]["segment"] for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "all-gather"}
    assert segs == set(range(4))  # 512 KiB chunks in 128 KiB segments


def test_cli_refuses_an_algorithm_the_op_has_not(capsys):
    from pycollect.cli import main

    assert main(["trace", "-o", "broadcast", "--algo", "tree", "-g", "2"]) == 2
    assert "broadcast has no algorithm 'tree': choose one of auto, ring, hierarchical" in capsys.readouterr().err
    assert main(["trace", "-g", "3", "--ranks-per-host", "2"]) == 2
    assert "--ranks-per-host 2 must divide the 3 ranks" in capsys.readouterr().err


def test_pycollect_trace_variable():
    assert Options.from_env({"PYCOLLECT_TRACE": "1"}).trace is True
    assert Options.from_env({}).trace is False
    with pytest.raises(ValueError, match="PYCOLLECT_TRACE='yes' must be 0 or 1"):
        Options.from_env({"PYCOLLECT_TRACE": "yes"})


def test_pycollect_trace_reaches_the_engine():
    import datetime

    from pycollect import _C
    from pycollect.group import _comm_options

    td = datetime.timedelta(seconds=5)
    for on in (True, False):
        comm = _C.Communicator(0, 1, _comm_options(td, Options(trace=on), 1))
        assert comm.tracing() is on
        assert comm.set_tracing(not on) is on and comm.tracing() is (not on)
        assert comm.take_trace() == ([], 0)
        comm.shutdown()


def test_a_build_without_hooks_refuses_to_trace(monkeypatch):
    """A build made with -DPYCOLLECT_TRACE_HOOKS=OFF (bench/trace_overhead.sh) records
    nothing: asking it to trace raises instead of handing back an empty trace."""
    import datetime

    from pycollect import _C
    from pycollect.group import _comm_options

    assert _C.TRACE_HOOKS is True  # this build has them
    monkeypatch.setattr(_C, "TRACE_HOOKS", False)
    with pytest.raises(NotImplementedError, match="no trace hooks"):
        _comm_options(datetime.timedelta(seconds=5), Options(trace=True), 1)
    _comm_options(datetime.timedelta(seconds=5), Options(trace=False), 1)  # not tracing: fine


def case_profiled():
    import torch
    from torch.profiler import ProfilerActivity, profile

    import pycollect as pc

    t = torch.ones(1000)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        pc.all_reduce(t)
        pc.broadcast(t, src=0)
    names = {e.name for e in prof.events()}
    return "pycollect::all_reduce" in names, "pycollect::broadcast" in names, float(t[0])


def test_torch_profiler_sees_named_ranges(pool3):
    for found_ar, found_bc, value in pool3.run(case_profiled):
        assert found_ar and found_bc
        assert value == 3.0


def test_hierarchy_levels_get_tracks_of_their_own():
    """A hierarchical call's intra- and inter-host phases land on tracks named by level,
    after the one-level ones (the header exchange)."""
    from pycollect.trace.chrome import chrome_events
    from pycollect.types import TraceEvent

    def pair(ns, phase, peer):
        return [TraceEvent(0, ns, "send_posted", "all_reduce", 1, phase, 0, -1, -1, peer, 8),
                TraceEvent(0, ns + 5, "send_done", "all_reduce", 1, phase, 0, -1, -1, peer, 8)]

    spans = to_spans(pair(10, "inter-host all-gather", 2) + pair(20, "intra-host reduce-scatter", 1)
                     + pair(30, "header", 3))
    assert [(s.level, s.track) for s in spans] == [
        ("inter-host", "inter-host: send -> rank 2"), ("intra-host", "intra-host: send -> rank 1"),
        ("", "send -> rank 3")]
    names = [e["args"]["name"] for e in chrome_events(spans)["traceEvents"] if e["name"] == "thread_name"]
    assert names == ["send -> rank 3", "intra-host: send -> rank 1", "inter-host: send -> rank 2"]
