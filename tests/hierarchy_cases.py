"""Rank-side cases of the hierarchical collectives (csrc/collectives/*_hierarchical.cc):
hosts are made with PYCOLLECT_HOST_TAG per group, so one loopback pool plays any layout.

A layout is a string of host letters, one per group rank: "aabb" is 2 hosts x 2 ranks,
"aaab" 3 + 1, "abab" interleaved. Inputs are small integers in every dtype, so every sum,
product, min and max is exact in the dtype and the results can be checked exactly against
numpy; AVG and a float32 SUM of random values are checked for bit-identity across ranks.
"""
import dataclasses
import hashlib

import numpy as np
import torch

import pycollect as pc
from pycollect.options import Options

DTYPES = (torch.int64, torch.int32, torch.float32, torch.float64, torch.float16, torch.bfloat16)
OPS = {pc.ReduceOp.SUM: np.sum, pc.ReduceOp.MAX: np.max, pc.ReduceOp.MIN: np.min,
       pc.ReduceOp.PRODUCT: np.prod}
COUNTS = (0, 1, 13, 30011)  # with the pool's 4 KiB segments, the last runs hundreds of units


def tagged_group(layout: str, name: str, **options):
    """A group over ranks 0..len(layout)-1 with host tag layout[rank] (and these Options
    fields changed); NON_GROUP_MEMBER elsewhere."""
    r = pc.get_rank()
    tag = f"{name}-{layout[r]}" if r < len(layout) else "outside"
    opts = dataclasses.replace(Options.from_env(), host_tag=tag, **options)
    return pc.new_group(list(range(len(layout))), timeout=60, pg_options=opts)


def _inputs(n: int, count: int, seed: int, low: int = -3, high: int = 4):
    return np.stack([np.random.default_rng(seed * 1000 + k).integers(low, high, count) for k in range(n)])


def _check(got: torch.Tensor, want: np.ndarray, what: str) -> None:
    g = got.to(torch.float64).numpy()
    assert np.array_equal(g, want.astype(np.float64)), f"{what}: got {g[:8]} want {want[:8]}"


def case_hierarchical(layout: str):
    """Every collective, forced hierarchical, every dtype and reduce op, on `layout`:
    (this group's topology, the digest of its float results) or None outside the group."""
    g = tagged_group(layout, "hier")
    if g is pc.NON_GROUP_MEMBER:
        return None
    n, r = len(layout), pc.get_rank()
    digest = hashlib.sha1()
    for count in COUNTS:
        for dt in DTYPES:
            for op, fn in OPS.items():
                if count > 13 and (op is not pc.ReduceOp.SUM or dt not in (torch.int64, torch.float16)):
                    continue  # the large size: two dtypes, SUM (the units and folds, not the kernels)
                xs = _inputs(n, count * n, count + 7, *((1, 3) if op is pc.ReduceOp.PRODUCT else (-3, 4)))
                want = fn(xs, axis=0)
                t = torch.from_numpy(xs[r].copy()).to(dt)
                pc.all_reduce(t, op=op, group=g, algo="hierarchical")
                _check(t, want, f"all_reduce {op.name} {dt} count={count} layout={layout}")
                out = torch.empty(count, dtype=dt)
                pc.reduce_scatter_tensor(out, torch.from_numpy(xs[r].copy()).to(dt), op=op, group=g,
                                         algo="hierarchical")
                _check(out, want[r * count:(r + 1) * count], f"reduce_scatter {op.name} {dt} count={count} {layout}")
            mine = torch.from_numpy(_inputs(n, count, count + 11)[r].copy()).to(dt)
            gathered = torch.empty(count * n, dtype=dt)
            pc.all_gather_into_tensor(gathered, mine, group=g, algo="hierarchical")
            _check(gathered, _inputs(n, count, count + 11).reshape(-1), f"all_gather {dt} count={count} {layout}")
            for root in {0, n - 1, n // 2}:
                b = torch.from_numpy(_inputs(n, count, root)[r].copy()).to(dt)
                pc.broadcast(b, src=root, group=g, algo="hierarchical")
                _check(b, _inputs(n, count, root)[root], f"broadcast root={root} {dt} count={count} {layout}")
        f = torch.from_numpy(np.random.default_rng(count + r).standard_normal(count).astype(np.float32))
        avg = f.clone()
        pc.all_reduce(f, group=g, algo="hierarchical")
        pc.all_reduce(avg, op=pc.ReduceOp.AVG, group=g, algo="hierarchical")
        assert torch.allclose(avg * n, f, rtol=1e-5, atol=1e-5), f"AVG != SUM / n, layout {layout}"
        digest.update(f.numpy().tobytes() + avg.numpy().tobytes())
    topo = str(pc.get_topology(g))
    pc.destroy_process_group(g)
    return topo, digest.hexdigest()


def case_hierarchical_staged(layout: str):
    """All-reduce, reduce-scatter and all-gather, forced hierarchical, through the staged
    (CUDA) path on the host device: 30011 elements in staged pieces of 32 KiB, each piece a
    hierarchical call of its own (pipelined in the pool's 4 KiB segments); exact against
    numpy. None outside the group."""
    g = tagged_group(layout, "staged", staging_bytes=32 << 10)
    if g is pc.NON_GROUP_MEMBER:
        return None
    g.use_host_device()
    n, r, count = len(layout), pc.get_rank(), 30011
    for dt in (torch.float32, torch.int64):
        xs = _inputs(n, count * n, 5)
        t = torch.from_numpy(xs[r].copy()).to(dt)
        pc.all_reduce(t, group=g, algo="hierarchical")
        _check(t, xs.sum(axis=0), f"staged all_reduce {dt} {layout}")
        out = torch.empty(count, dtype=dt)
        pc.reduce_scatter_tensor(out, torch.from_numpy(xs[r].copy()).to(dt), group=g, algo="hierarchical")
        _check(out, xs.sum(axis=0)[r * count:(r + 1) * count], f"staged reduce_scatter {dt} {layout}")
        gathered = torch.empty(count * n * n, dtype=dt)
        pc.all_gather_into_tensor(gathered, torch.from_numpy(xs[r].copy()).to(dt), group=g, algo="hierarchical")
        _check(gathered, xs.reshape(-1), f"staged all_gather {dt} {layout}")
    pieces = g._comm.staged_pieces()  # the six calls went through the staging, in several pieces each
    pc.destroy_process_group(g)
    return pieces >= 6 * 3


def case_against_gloo(layout: str):
    """Random float32 all-reduce, reduce-scatter, all-gather and broadcast of 100k elements,
    hierarchical on `layout`, against Gloo on the same inputs (the pool's default Gloo group)."""
    import torch.distributed as dist

    g = tagged_group(layout, "gloo")
    if g is pc.NON_GROUP_MEMBER:
        return None
    n, r, count = len(layout), pc.get_rank(), 100_000
    x = torch.from_numpy(np.random.default_rng(r).standard_normal(count * n).astype(np.float32))
    mine, ref = x.clone(), x.clone()
    pc.all_reduce(mine, group=g, algo="hierarchical")
    dist.all_reduce(ref)
    out, ref_out = torch.empty(count), torch.empty(count)
    pc.reduce_scatter_tensor(out, x, group=g, algo="hierarchical")
    dist.reduce_scatter_tensor(ref_out, x)
    ag, ref_ag = torch.empty(count * n * n), torch.empty(count * n * n)
    pc.all_gather_into_tensor(ag, x, group=g, algo="hierarchical")
    dist.all_gather_into_tensor(ref_ag, x)
    b, ref_b = x.clone(), x.clone()
    pc.broadcast(b, src=n - 1, group=g, algo="hierarchical")
    dist.broadcast(ref_b, src=n - 1)
    pc.destroy_process_group(g)
    return [float((a - e).abs().max()) for a, e in ((mine, ref), (out, ref_out), (ag, ref_ag), (b, ref_b))]


_loop: dict = {}


def case_start_loop(layout: str):
    """Starts hierarchical all-reduces of 4 MiB in a loop on a thread (group timeout 60 s)."""
    import threading
    import time

    g = tagged_group(layout, "loop")
    big = torch.ones(1 << 20)

    def loop():
        try:
            while True:
                pc.all_reduce(big, group=g, algo="hierarchical")
                _loop["calls"] = _loop.get("calls", 0) + 1
        except Exception as e:  # noqa: BLE001 - the outcome the test checks
            _loop["error"] = (f"{type(e).__name__}: {e}", time.time())

    threading.Thread(target=loop, daemon=True).start()
    while _loop.get("calls", 0) < 3:
        time.sleep(0.01)


def case_loop_outcome(wait_s: float):
    """(error text, its wall time) once the loop failed (waiting up to wait_s), else (None, None)."""
    import time

    start = time.time()
    while "error" not in _loop and time.time() - start < wait_s:
        time.sleep(0.01)
    return _loop.get("error", (None, None))
