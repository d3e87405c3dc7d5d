"""Rank-side cases of the compressed all-reduce (all_reduce(compress="bf16" | "int8"):
csrc/collectives/allreduce_compressed.cc, docs/compression.md).

Every case draws every rank's input from the seed, so each rank knows the exact sum
(float64) and checks its result against the bound the docs state; it returns a digest of
its result bytes, and the test asserts that the digests of all ranks are equal (the
results bit-identical, not merely close).

The bound is pycollect.compression.error_bound's (k: the ring's length, the group on one
host, its hosts across hosts); AVG divides A by the group's size as it divides the sum.
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch
from hierarchy_cases import tagged_group
from rank_pool import paired_groups

import pycollect as pc
from pycollect import _C
from pycollect.compression import INT8_BLOCK, error_bound

FORMATS = ("bf16", "int8")
BLOCK = INT8_BLOCK
# Odd counts, one short of, at and past an int8 block, a prime, and (with the pool's 512
# KiB segments, 128 Ki values a unit) several units per chunk with a ragged last one.
COUNTS = (0, 1, 13, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 7, 30011, 600_001)
SLACK = 1.0 + 1e-3  # float32's rounding of the scales, well inside this


def inputs(n: int, count: int, seed: int) -> np.ndarray:
    """Every rank's input: normal values of varying scale, so int8 blocks differ."""
    rng = np.random.default_rng(seed)
    scale = np.exp(rng.uniform(-3, 3, count))
    return (rng.standard_normal((n, count)) * scale).astype(np.float32)


def bound(xs: np.ndarray, fmt: str, k: int, divisor: int = 1) -> np.ndarray:
    """The stated error bound per position (pycollect.compression), for ring length k."""
    return error_bound(np.abs(xs.astype(np.float64)).sum(axis=0) / divisor, fmt, k, xs.shape[0]) * SLACK


def errors(got: np.ndarray, xs: np.ndarray, divisor: int = 1):
    """(max, mean) absolute error of `got` against the float64 sum of `xs`."""
    exact = xs.astype(np.float64).sum(axis=0) / divisor
    e = np.abs(got.astype(np.float64) - exact)
    return (float(e.max()), float(e.mean())) if e.size else (0.0, 0.0)


def _check(got: np.ndarray, xs: np.ndarray, fmt: str, k: int, divisor: int, what: str) -> None:
    exact = xs.astype(np.float64).sum(axis=0) / divisor
    e = np.abs(got.astype(np.float64) - exact)
    b = bound(xs, fmt, k, divisor)
    bad = np.nonzero(e > b)[0]
    assert bad.size == 0, f"{what}: {bad.size} values past the bound, first at {bad[0]}: error {e[bad[0]]} > {b[bad[0]]}"


def case_compressed(ws: int, seed: int = 0, counts=COUNTS):
    """all_reduce(compress=) on ranks [0, ws), every format, SUM and AVG, every count, the
    default algorithm (the compressed ring on one host): digests of the results, or None
    outside the group."""
    pair = paired_groups(ws)
    if pair is None:
        return None
    pg = pair[0]
    r = pc.get_rank()
    digest = hashlib.sha1()
    for fmt in FORMATS:
        for op, divisor in ((pc.ReduceOp.SUM, 1), (pc.ReduceOp.AVG, ws)):
            for count in counts:
                xs = inputs(ws, count, seed + count)
                t = torch.from_numpy(xs[r].copy())
                pc.all_reduce(t, op=op, group=pg, compress=fmt)
                _check(t.numpy(), xs, fmt, ws, divisor, f"{fmt} {op.name} ws={ws} count={count}")
                digest.update(t.numpy().tobytes())
    return digest.hexdigest()


def case_compressed_hierarchy(layout: str, seed: int = 0):
    """The hierarchical all-reduce with compress= on hosts made by tags (hierarchy_cases):
    within a host exact, across hosts compressed (ring length = hosts). With 64 KiB
    segments the larger count runs the pipelined slices. Digests, or None outside."""
    g = tagged_group(layout, "compress", segment_bytes=64 << 10)
    if g is pc.NON_GROUP_MEMBER:
        return None
    n, r, hosts = len(layout), pc.get_rank(), len(set(layout))
    digest = hashlib.sha1()
    for fmt in FORMATS:
        for count in (0, 1, BLOCK + 1, 30011, 1_200_007):
            xs = inputs(n, count, seed + count)
            t = torch.from_numpy(xs[r].copy())
            pc.all_reduce(t, group=g, compress=fmt)  # auto: hierarchical across hosts
            _check(t.numpy(), xs, fmt, hosts, 1, f"{fmt} layout={layout} count={count}")
            digest.update(t.numpy().tobytes())
    pc.destroy_process_group(g)
    return digest.hexdigest()


def case_refusals():
    """The errors of compress= that every rank raises before anything is sent:
    [message, ...] in a fixed order."""
    msgs = []
    for dt in (torch.int32, torch.int64, torch.int8, torch.uint8, torch.bool, torch.float64, torch.float16,
               torch.bfloat16):
        try:
            pc.all_reduce(torch.ones(5, dtype=dt), compress="int8")
            msgs.append(f"no error for {dt}")
        except ValueError as e:
            msgs.append(str(e))
    for kwargs in ({"op": pc.ReduceOp.MAX}, {"algo": "tree"}, {"compress": "fp4"}):
        try:
            pc.all_reduce(torch.ones(5), **{"compress": "bf16", **kwargs})
            msgs.append(f"no error for {kwargs}")
        except ValueError as e:
            msgs.append(str(e))
    pc.all_reduce(torch.ones(5), compress="bf16")  # the group still works
    return msgs


def case_mismatch():
    """Rank 0 compresses, the others do not: every rank gets an error naming both calls."""
    g = pc.new_group(list(range(pc.get_world_size())), timeout=20)
    try:
        pc.all_reduce(torch.ones(1000), group=g, compress="int8" if pc.get_rank() == 0 else None, algo="ring")
        return "no error"
    except pc.PyCollectError as e:  # MismatchError, or the peer failure that follows it
        return f"{type(e).__name__}: {e}"
    finally:
        pc.destroy_process_group(g)


def round_trip(x: np.ndarray, fmt: str) -> np.ndarray:
    """One encode and decode of float32 `x` in format `fmt` (reduce/compress.h)."""
    y = np.ascontiguousarray(x, dtype=np.float32).copy()
    _C.wire_round_trip(y.ctypes.data, y.size, int(pc.Compress.parse(fmt, "fmt")))
    return y


def case_ddp_hook(fmt: str, steps: int = 6):
    """DDP (over the pool's Gloo default group) with compressed_allreduce_hook on pycollect's
    default group: (digest of the parameters, max distance from the same run uncompressed,
    residual count)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from pycollect.hooks import CompressionState, compressed_allreduce_hook

    def train(hooked: bool):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 300), torch.nn.Tanh(), torch.nn.Linear(300, 3))
        ddp = DDP(model, bucket_cap_mb=0.05)  # several buckets, one not a multiple of 256 values
        state = CompressionState(compress=fmt)
        if hooked:
            ddp.register_comm_hook(state, compressed_allreduce_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(100 + dist.get_rank())
        for _ in range(steps):
            x = torch.randn(16, 64, generator=g)
            loss = ddp(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return torch.cat([p.detach().flatten() for p in model.parameters()]), state

    plain, _ = train(False)
    hooked, state = train(True)
    return (hashlib.sha1(hooked.numpy().tobytes()).hexdigest(), float((hooked - plain).abs().max()),
            len(state.residuals))


class _Bucket:
    """What the hook reads of torch's GradBucket."""

    def __init__(self, t, index=0):
        self._t, self._i = t, index

    def buffer(self):
        return self._t

    def index(self):
        return self._i


def case_error_feedback(fmt: str, steps: int = 32):
    """The same gradient every step (each rank its own), through the hook with and without
    error feedback: the largest error of the mean of what the group averaged over the steps
    against the exact average, each way."""
    from pycollect.hooks import CompressionState, compressed_allreduce_hook

    n, r = pc.get_world_size(), pc.get_rank()
    rng = np.random.default_rng(3)
    grads = (rng.standard_normal((n, 1000)) * np.exp(rng.uniform(-4, 0, 1000))).astype(np.float32)
    exact = grads.astype(np.float64).mean(axis=0)
    out = []
    for feedback in (True, False):
        state = CompressionState(compress=fmt, error_feedback=feedback)
        total = np.zeros(1000)
        for _ in range(steps):
            fut = compressed_allreduce_hook(state, _Bucket(torch.from_numpy(grads[r].copy())))
            total += fut.wait().numpy()
        out.append(float(np.abs(total / steps - exact).max()))
    return out
