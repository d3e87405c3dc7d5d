"""Worker-side functions for the collective cross-checks (run inside RankPool ranks).

Every rank builds every rank's input from the same seed, so each rank can compute
the numpy reference on its own; the same inputs go through pycollect and through
torch.distributed's Gloo in the same process. Returns a digest of pycollect's
result so the test can check that all ranks hold bit-identical results.
"""
from __future__ import annotations

import functools
import hashlib

import numpy as np
import torch
import torch.distributed as dist

import pycollect as pc
from rank_pool import paired_groups

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int32, torch.int64]
OPS = ["SUM", "PRODUCT", "MIN", "MAX", "AVG"]
BIG = 2 * 1024 * 1024 // 4 + 3  # ~2 MiB of float32, not divisible by 2, 3 or 4
COUNTS = [0, 1, 13, BIG]
# Tolerances for floats (ours vs the float64 numpy reference, and vs Gloo).
TOL = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-12, 1e-12), torch.float16: (1e-2, 2e-2),
       torch.bfloat16: (2e-2, 1e-1)}

def make_input(dtype, count: int, rank: int, seed: int, op: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype.is_floating_point:
        if op == "PRODUCT":
            x = torch.rand(count, generator=g, dtype=torch.float64) + 0.5
        else:
            x = torch.rand(count, generator=g, dtype=torch.float64) * 2 - 1
        return x.to(dtype)
    hi = 3 if op == "PRODUCT" else 30  # keeps int8 sums and products in range
    lo = 1 if op == "PRODUCT" else 0
    return torch.randint(lo, hi, (count,), generator=g, dtype=torch.int64).to(dtype)


def reduce_ref(inputs, op: str, dtype) -> np.ndarray:
    wide = np.stack([x.to(torch.float64 if dtype.is_floating_point else torch.int64).numpy()
                     for x in inputs])
    fn = {"SUM": np.sum, "PRODUCT": np.prod, "MIN": np.min, "MAX": np.max, "AVG": np.mean}[op]
    return fn(wide, axis=0)


def assert_close(got: torch.Tensor, ref, dtype, what: str) -> None:
    wide = got.to(torch.float64 if dtype.is_floating_point else torch.int64).numpy()
    ref = np.asarray(ref)
    if dtype.is_floating_point:
        rtol, atol = TOL[dtype]
        bad = ~np.isclose(wide, ref, rtol=rtol, atol=atol)
    else:
        ref = torch.from_numpy(np.ascontiguousarray(ref)).to(dtype).to(torch.int64).numpy()  # wrap like C
        bad = wide != ref
    if bad.any():
        i = int(np.argmax(bad))
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} elements differ; first at {i}: "
                             f"got {wide[i]!r}, expected {ref.reshape(-1)[i]!r}")


def digest(t: torch.Tensor) -> str:
    return hashlib.sha1(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def _gloo(fn, what: str):
    """Run a Gloo call; return False if Gloo does not support this dtype/op."""
    try:
        fn()
        return True
    except (RuntimeError, ValueError) as e:
        if "not supported" in str(e) or "Unsupported" in str(e) or "unsupported" in str(e):
            return False
        raise


# torch 2.13 renamed the tensor forms; older versions only have the old names.
_all_gather_single = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)


def _torch_op(op: str):
    return getattr(dist.ReduceOp, op)


def case_collective(kind: str, ws: int, seed: int = 0, counts=COUNTS, dtypes=DTYPES, ops=OPS):
    """Run every (dtype, count, op) case of one collective on ranks [0, ws)."""
    pair = paired_groups(ws)
    return None if pair is None else run_cases(kind, pair, ws, seed, counts, dtypes, ops)


def check_members(results, kind: str, ws: int) -> None:
    """Parent side of case_collective: `ws` ranks ran cases, Gloo was compared where it can
    be, and every rank holds bit-identical results (reduce-scatter: checked per rank)."""
    members = [res for res in results if res is not None]
    assert len(members) == ws
    assert members[0]["cases"] > 0
    if kind != "all_reduce" or ws > 1:
        # Gloo must have been compared on most cases (it lacks a few dtypes/ops)
        assert members[0]["gloo_compared"] > 0 or kind == "broadcast"
    if kind.startswith("reduce_scatter"):
        return  # each rank holds a different chunk; checked against the reference
    for case_index, (what, d0) in enumerate(members[0]["digests"]):
        for r, res in enumerate(members[1:], start=1):
            assert res["digests"][case_index] == (what, d0), f"{what}: rank {r} differs from rank 0"


def run_cases(kind: str, pair, ws: int, seed: int = 0, counts=COUNTS, dtypes=DTYPES, ops=OPS, comm=pc):
    """Every (dtype, count, op) case of one collective on `pair` (pycollect-side group, Gloo
    group). `comm` is the module the pycollect-side calls go through: pycollect itself, or
    a stand-in with the same names (the torch backend's tests route them through dist.*)."""
    pg, gg = pair
    r = comm.get_rank(pg)
    out = {"digests": [], "gloo_compared": 0, "cases": 0}
    for dtype in dtypes:
        for count in counts:
            case_ops = ops if kind in ("all_reduce", "reduce_scatter_tensor", "reduce_scatter") else ["SUM"]
            for op in case_ops:
                what = f"{kind} ws={ws} {dtype} count={count} op={op}"
                if op == "AVG" and not dtype.is_floating_point:
                    try:
                        _run_one(comm, kind, pg, gg, ws, r, dtype, count, op, seed, what)
                    except ValueError as e:
                        assert "AVG" in str(e) and "int" in str(e), str(e)
                        continue
                    raise AssertionError(f"{what}: AVG on an integer dtype did not raise")
                d, compared = _run_one(comm, kind, pg, gg, ws, r, dtype, count, op, seed, what)
                out["digests"].append((what, d))
                out["gloo_compared"] += compared
                out["cases"] += 1
    return out


@functools.lru_cache(maxsize=2)
def _all_inputs(dtype, count: int, ws: int, seed: int, product: bool):
    """Every rank's input of one case. SUM, MIN, MAX and AVG draw the same inputs (only
    PRODUCT's range differs), so consecutive ops reuse them; callers never modify them."""
    return tuple(make_input(dtype, count, k, seed, "PRODUCT" if product else "SUM") for k in range(ws))


def _run_one(comm, kind, pg, gg, ws, r, dtype, count, op, seed, what):
    per_rank = count * ws if kind in ("reduce_scatter_tensor", "reduce_scatter") else count
    inputs = _all_inputs(dtype, per_rank, ws, seed, op == "PRODUCT")
    mine = inputs[r].clone()
    rop = getattr(comm.ReduceOp, op)
    compared = 0
    if kind == "all_reduce":
        comm.all_reduce(mine, op=rop, group=pg)
        assert_close(mine, reduce_ref(inputs, op, dtype), dtype, what + " vs numpy")
        theirs = inputs[r].clone()
        if op != "AVG" and _gloo(lambda: dist.all_reduce(theirs, op=_torch_op(op), group=gg), what):
            assert_close(mine, theirs.to(torch.float64 if dtype.is_floating_point else torch.int64).numpy(),
                         dtype, what + " vs gloo")
            compared = 1
        return digest(mine), compared
    if kind == "broadcast":
        root = ws - 1
        comm.broadcast(mine, src=root, group=pg)
        assert torch.equal(mine, inputs[root]), what
        return digest(mine), 0
    if kind in ("all_gather_into_tensor", "all_gather"):
        if kind == "all_gather_into_tensor":
            result = torch.full((count * ws,), 7, dtype=dtype)
            comm.all_gather_into_tensor(result, mine, group=pg)
        else:
            parts = [torch.empty(count, dtype=dtype) for _ in range(ws)]
            comm.all_gather(parts, mine, group=pg)
            result = torch.cat(parts)
        assert torch.equal(result, torch.cat(inputs)), what + " vs inputs"
        theirs = torch.empty(count * ws, dtype=dtype)
        if _gloo(lambda: _all_gather_single(theirs, inputs[r], group=gg), what):
            assert torch.equal(result, theirs), what + " vs gloo"
            compared = 1
        return digest(result), compared
    # reduce-scatter: rank r gets chunk r of the reduction
    ref = reduce_ref(inputs, op, dtype)[r * count:(r + 1) * count]
    result = torch.full((count,), 7, dtype=dtype)
    if kind == "reduce_scatter_tensor":
        comm.reduce_scatter_tensor(result, mine, op=rop, group=pg)
    else:
        comm.reduce_scatter(result, list(mine.chunk(ws)) if count else [mine[:0]] * ws, op=rop, group=pg)
    assert_close(result, ref, dtype, what + " vs numpy")
    theirs = torch.empty(count, dtype=dtype)
    if op != "AVG" and _gloo(lambda: _reduce_scatter_single(theirs, inputs[r].clone(), op=_torch_op(op),
                                                                  group=gg), what):
        assert_close(result, theirs.to(torch.float64 if dtype.is_floating_point else torch.int64).numpy(),
                     dtype, what + " vs gloo")
        compared = 1
    return digest(result), compared


def case_all_to_all(ws: int, seed: int = 0):
    """pc.all_to_all_single against Gloo's, even and uneven splits, several dtypes."""
    pair = paired_groups(ws)
    if pair is None:
        return None
    pg, gg = pair
    r = pc.get_rank(pg)
    cases = 0
    for dtype in (torch.float32, torch.int64, torch.bfloat16, torch.uint8):
        for even in (True, False):
            # uneven: rank k sends (k + p + seed) % 3 rows of 5 elements to rank p
            send_rows = [ws] * ws if even else [(r + p + seed) % 3 for p in range(ws)]
            recv_rows = [ws] * ws if even else [(p + r + seed) % 3 for p in range(ws)]
            x = make_input(dtype, sum(send_rows) * 5, r, seed + cases, "SUM").reshape(-1, 5)
            ours = torch.full((sum(recv_rows), 5), 7, dtype=dtype)
            theirs = torch.full((sum(recv_rows), 5), 9, dtype=dtype)
            splits = (None, None) if even else (recv_rows, send_rows)
            pc.all_to_all_single(ours, x, *splits, group=pg)
            dist.all_to_all_single(theirs, x, *splits, group=gg)
            assert torch.equal(ours, theirs), f"all_to_all_single ws={ws} {dtype} even={even}"
            cases += 1
    return cases
