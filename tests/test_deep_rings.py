"""Rings deeper than the main suite's 4 ranks: 5, 6 and 7 ranks, where the reduce-scatter
reuses its step accumulators and every ring runs 4-6 steps per phase; and the log-step
algorithms where their non-power-of-two handling matters most (halving-doubling folds 1,
2 and 3 ranks away, the tree and Bruck run 3 steps with a partial last one). Checked
against numpy, with all ranks bit-identical. Small segments force many pipelined units.

The same 8-rank pool plays hosts (PYCOLLECT_HOST_TAG per group) for the hierarchical
collectives: every layout the issue names, uneven ones and interleaved ranks, then a rank
killed mid-call on one host (the last test: it breaks the pool)."""
import hashlib
import os
import time

import numpy as np
import pytest
import torch

import hierarchy_cases as hc
import pycollect as pc
from rank_pool import RankPool

pytestmark = pytest.mark.slow  # its own 6-rank pool, several sizes per world

WORLD = 8
COUNTS = [0, 1, 13, 100003]


@pytest.fixture(scope="module")
def pool():
    with RankPool(WORLD, init_gloo=False, timeout=180, env={"PYCOLLECT_SEGMENT_BYTES": "4096"}) as p:
        yield p


def _inputs(ws, count, seed):
    return [np.random.default_rng(seed * 100 + k).integers(-50, 50, count).astype(np.int64) for k in range(ws)]


def case_deep_ring(ws: int):
    r = pc.get_rank()
    g = pc.new_group(list(range(ws)))
    if g is pc.NON_GROUP_MEMBER:
        return None
    digests = []
    for count in COUNTS:
        xs = _inputs(ws, count * ws, count)
        # reduce-scatter (SUM and MAX) and all-reduce (ring forced) and all-gather
        for op, fn in ((pc.ReduceOp.SUM, np.sum), (pc.ReduceOp.MAX, np.max)):
            out = torch.zeros(count, dtype=torch.int64)
            pc.reduce_scatter_tensor(out, torch.from_numpy(xs[r].copy()), op=op, group=g)
            want = fn(np.stack(xs), axis=0)[r * count:(r + 1) * count]
            assert np.array_equal(out.numpy(), want), f"reduce_scatter {op.name} ws={ws} count={count}"
        for algo in ("ring", "halving_doubling", "tree"):
            for op, fn in ((pc.ReduceOp.SUM, np.sum), (pc.ReduceOp.MIN, np.min)):
                t = torch.from_numpy(xs[r].copy())
                pc.all_reduce(t, op=op, group=g, algo=algo)
                assert np.array_equal(t.numpy(), fn(np.stack(xs), axis=0)), f"all_reduce {algo} ws={ws} count={count}"
            f = torch.from_numpy(xs[r][:count].astype(np.float32))
            pc.all_reduce(f, op=pc.ReduceOp.AVG, group=g, algo=algo)
            assert np.allclose(f.numpy(), np.mean(np.stack([x[:count] for x in xs]), axis=0), rtol=1e-6), algo
            digests.append(hashlib.sha1(f.numpy().tobytes()).hexdigest())
        for algo in ("ring", "bruck"):
            gathered = torch.empty(count * ws, dtype=torch.int64)
            pc.all_gather_into_tensor(gathered, torch.from_numpy(xs[r][:count].copy()), group=g, algo=algo)
            want = np.concatenate([x[:count] for x in xs])
            assert np.array_equal(gathered.numpy(), want), f"all_gather {algo} ws={ws}"
        b = torch.from_numpy(xs[r].copy())
        pc.broadcast(b, src=ws - 2, group=g)
        assert np.array_equal(b.numpy(), xs[ws - 2]), f"broadcast ws={ws}"
    pc.destroy_process_group(g)
    return digests


def case_receive_windows(ws: int):
    """The tree forwards segment j-D of the result after sending j up, D = inflight (at
    most the segment count): D = 1, 2 and 3 with ~200 segments, and D = k (one segment).
    The ring's reduce-scatter receives take D scratch slots, reused segment by segment
    as its all-gather receives go past them: the same D, the same sizes."""
    r = pc.get_rank()
    out = []
    for inflight, count in (("1", 100003), ("2", 100003), ("3", 100003), ("4", 500)):
        os.environ["PYCOLLECT_INFLIGHT"] = inflight
        try:
            g = pc.new_group(list(range(ws)))
        finally:
            del os.environ["PYCOLLECT_INFLIGHT"]
        if g is pc.NON_GROUP_MEMBER:
            continue
        xs = _inputs(ws, count, count + int(inflight))
        for algo in ("tree", "ring"):
            t = torch.from_numpy(xs[r].copy())
            pc.all_reduce(t, group=g, algo=algo)
            assert np.array_equal(t.numpy(), np.sum(np.stack(xs), axis=0)), f"{algo} inflight={inflight} ws={ws}"
        out.append(inflight)
        pc.destroy_process_group(g)
    return out or None


@pytest.mark.parametrize("ws", [3, 7])
def test_receive_windows_match_numpy(pool, ws):
    results = [res for res in pool.run(case_receive_windows, ws) if res is not None]
    assert results == [["1", "2", "3", "4"]] * ws


@pytest.mark.parametrize("ws", [5, 6, 7])
def test_deep_rings_match_numpy_and_agree(pool, ws):
    results = [res for res in pool.run(case_deep_ring, ws) if res is not None]
    assert len(results) == ws
    assert all(res == results[0] for res in results), "float AVG results differ between ranks"


# layout (a host letter per rank) -> its topology as the group reports it
LAYOUTS = {
    "aabb": "2 hosts x 2 ranks: [0, 1] [2, 3]",
    "aaabbb": "2 hosts x 3 ranks: [0, 1, 2] [3, 4, 5]",
    "aabbcc": "3 hosts x 2 ranks: [0, 1] [2, 3] [4, 5]",
    "aaaabbbb": "2 hosts x 4 ranks: [0, 1, 2, 3] [4, 5, 6, 7]",
    "aaab": "2 hosts of 3+1 ranks: [0, 1, 2] [3]",
    "aabbc": "3 hosts of 2+2+1 ranks: [0, 1] [2, 3] [4]",
    "abab": "2 hosts x 2 ranks: [0, 2] [1, 3]",
    "aaaa": "1 host x 4 ranks: [0, 1, 2, 3]",
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_hierarchical_collectives_on_every_layout(pool, layout):
    """All-reduce (4 ops), reduce-scatter (4 ops), all-gather and broadcast (3 roots), forced
    hierarchical, in six dtypes, exact against numpy; AVG and random float sums identical on
    every rank."""
    results = [res for res in pool.run(hc.case_hierarchical, layout) if res is not None]
    assert len(results) == len(layout)
    assert {topo for topo, _ in results} == {LAYOUTS[layout]}
    assert len({digest for _, digest in results}) == 1, "float results differ between ranks"


@pytest.mark.parametrize("layout", ["aabb", "aaab"])
def test_hierarchical_through_the_staged_path(pool, layout):
    """The CUDA path (staged pieces, on the host device) runs the hierarchy on each piece."""
    assert [res for res in pool.run(hc.case_hierarchical_staged, layout) if res is not None] == [True] * len(layout)


def test_killed_rank_on_one_host_fails_every_host(pool):
    """2 hosts x 4 ranks looping on hierarchical all-reduces: rank 5 (host 1) is killed; every
    other rank, on both hosts, raises within 5 s (the group's timeout is 60 s)."""
    pool.run(hc.case_start_loop, "aaaabbbb")
    pool.kill(5)
    killed = time.time()
    others = [r for r in range(WORLD) if r != 5]
    for r, (ok, outcome) in zip(others, pool.run_raw(hc.case_loop_outcome, 6.0, ranks=others, timeout=30)):
        assert ok, outcome
        error, when = outcome
        assert error is not None, f"rank {r} still running 6 s after the kill"
        assert when - killed < 5.0, f"rank {r} raised {when - killed:.1f} s after the kill: {error}"
        assert error.split(":")[0] in ("PeerLostError", "GroupFailedError") and "rank" in error, (r, error)
