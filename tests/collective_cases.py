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
# A reduce-scatter's count is its output's: each rank's input holds ws times as many. Its
# large count (what BIG stands for in its cases) is a third of BIG, odd: in float32 each
# input is then 1.3-2.7 MiB at 2-4 ranks, past the arena's 1 MiB slot and a link segment's
# 512 KiB, where BIG's was 4-8 MiB (the reduce-scatters were half of this matrix's time).
SCATTER_BIG = BIG // 3
COUNTS = [0, 1, 13, BIG]
# The algorithms forced with algo=, each checked like "auto" (with every dtype x op): 3 is
# fewer elements than ranks at 4 ranks, so some blocks of the log-step algorithms are empty.
# "auto" runs the shared-memory algorithms up to 1 MiB per rank in these single-host pools,
# so the link algorithms are forced here at the small counts too. The shared-memory ones also
# at 70001 elements (over 32 KiB in every dtype: the all-reduce's pipeline of 128 KiB pieces,
# one piece for 8-bit dtypes, a short last piece cut unevenly among the ranks for the others)
# and BIG (more than one round of the 1 MiB slot).
ALGO_COUNTS = [0, 1, 3, 13, BIG]
LINK_COUNTS = [0, 1, 3, 13]
SHM_COUNTS = [0, 1, 3, 13, 70001, BIG]
ALGOS = {"all_reduce": ["halving_doubling", "tree", "ring", "direct", "shm"],
         "all_gather_into_tensor": ["bruck", "ring", "shm"], "all_gather": ["bruck", "shm"],
         "reduce_scatter_tensor": ["ring", "shm"], "broadcast": ["ring", "shm"]}


# The calls "auto" puts in the arena at every size on one host (csrc Communicator::sharedFits):
# over shared-memory links their automatic run is the "shm" one, so it is checked there at
# SHM_COUNTS (and the forced "shm" run is left to the TCP links' pool, where "auto" never
# takes the arena).
ARENA_AT_EVERY_SIZE = ("all_reduce", "all_gather_into_tensor", "all_gather", "reduce_scatter_tensor")


def algo_counts(algo: str) -> list:
    """The counts a forced algorithm runs (above)."""
    return {"ring": LINK_COUNTS, "direct": LINK_COUNTS, "shm": SHM_COUNTS}.get(algo, ALGO_COUNTS)
# Tolerances for floats (ours vs the float64 numpy reference, and vs Gloo).
TOL = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-12, 1e-12), torch.float16: (1e-2, 2e-2),
       torch.bfloat16: (2e-2, 1e-1)}

@functools.lru_cache(maxsize=32)
def _draw(count: int, rank: int, seed: int) -> torch.Tensor:
    """The uniform [0, 1) draw every dtype's and op's input of (count, rank, seed) is made
    from: drawn once and shared (the cases run every dtype x op over the same counts; one
    draw for all was a third of the cross-checks' CPU). Callers never modify it."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.rand(count, generator=g, dtype=torch.float64)


def make_input(dtype, count: int, rank: int, seed: int, op: str) -> torch.Tensor:
    """Rank `rank`'s input of a case, a new tensor: uniform in [-1, 1) for floats ([0.5, 1.5)
    for PRODUCT), integers in [0, 30) ([1, 3) for PRODUCT, so that int8 sums and products stay
    in range), bools 0 or 1."""
    # Draws of up to 8 MiB are kept (the suite's); larger ones (bench/soak.py's) are not.
    u = _draw(count, rank, seed) if count <= 1 << 20 else _draw.__wrapped__(count, rank, seed)
    if dtype.is_floating_point:
        return (u + 0.5 if op == "PRODUCT" else u * 2 - 1).to(dtype)
    if dtype == torch.bool:
        return u < 0.5
    lo, hi = (1, 3) if op == "PRODUCT" else (0, 30)
    return (u * (hi - lo) + lo).to(torch.int64).to(dtype)  # floor: the values are >= 0


def reduce_ref(inputs, op: str, dtype) -> np.ndarray:
    wide = np.stack([x.to(torch.float64 if dtype.is_floating_point else torch.int64).numpy()
                     for x in inputs])
    fn = {"SUM": np.sum, "PRODUCT": np.prod, "MIN": np.min, "MAX": np.max, "AVG": np.mean,
          "BAND": np.bitwise_and.reduce, "BOR": np.bitwise_or.reduce, "BXOR": np.bitwise_xor.reduce}[op]
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
        if any(w in str(e) for w in ("not supported", "Unsupported", "unsupported", "Invalid scalar type")):
            return False
        raise


# torch 2.13 renamed the tensor forms; older versions only have the old names.
_all_gather_single = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)


def _torch_op(op: str):
    return getattr(dist.ReduceOp, op)


def case_collective(kind: str, ws: int, seed: int = 0, counts=COUNTS, dtypes=DTYPES, ops=OPS, algo=None):
    """Run every (dtype, count, op) case of one collective on ranks [0, ws), with `algo`
    forced (all_reduce and the all-gathers) or the group's choice (None). The result's
    "algos": the algorithms the engine ran for the calls with data (its flight record)."""
    pair = paired_groups(ws)
    if pair is None:
        return None
    pg = pair[0]
    before = pc.get_flight_record(pg)
    first = before[-1]["id"] if before else -1
    out = run_cases(kind, pair, ws, seed, counts, dtypes, ops, algo=algo)
    out["algos"] = sorted({e["algo"] for e in pc.get_flight_record(pg) if e["id"] > first and e["count"] > 0})
    return out


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


def run_cases(kind: str, pair, ws: int, seed: int = 0, counts=COUNTS, dtypes=DTYPES, ops=OPS, comm=pc,
              algo=None):
    """Every (dtype, count, op) case of one collective on `pair` (pycollect-side group, Gloo
    group). `comm` is the module the pycollect-side calls go through: pycollect itself, or
    a stand-in with the same names (the torch backend's tests route them through dist.*).
    `algo`: passed as algo= to pycollect's all_reduce / all-gathers (None: not passed)."""
    pg, gg = pair
    r = comm.get_rank(pg)
    out = {"digests": [], "gloo_compared": 0, "cases": 0}
    index = 0
    if kind in ("reduce_scatter_tensor", "reduce_scatter"):
        counts = [SCATTER_BIG if count == BIG else count for count in counts]
    for dtype in dtypes:
        for count in counts:
            case_ops = ops if kind in ("all_reduce", "reduce_scatter_tensor", "reduce_scatter") else ["SUM"]
            for op in case_ops:
                what = f"{kind} ws={ws} {dtype} count={count} op={op}"
                index += 1
                # An all-reduce's result is the same on every rank (the digests show it), so one
                # rank a case, in turn, checks it against numpy and Gloo: every rank reducing
                # every rank's input for every case was most of the suite's largest module.
                checks = index % ws == r
                if op == "AVG" and not dtype.is_floating_point:
                    try:
                        _run_one(comm, kind, pg, gg, ws, r, dtype, count, op, seed, what, algo, checks)
                    except ValueError as e:
                        assert "AVG" in str(e) and "int" in str(e), str(e)
                        continue
                    raise AssertionError(f"{what}: AVG on an integer dtype did not raise")
                d, compared = _run_one(comm, kind, pg, gg, ws, r, dtype, count, op, seed, what, algo, checks)
                out["digests"].append((what, d))
                out["gloo_compared"] += compared
                out["cases"] += 1
    return out


@functools.lru_cache(maxsize=2)
def _all_inputs(dtype, count: int, ws: int, seed: int, product: bool):
    """Every rank's input of one case. SUM, MIN, MAX and AVG draw the same inputs (only
    PRODUCT's range differs), so consecutive ops reuse them; callers never modify them."""
    return tuple(make_input(dtype, count, k, seed, "PRODUCT" if product else "SUM") for k in range(ws))


@functools.lru_cache(maxsize=16)
def _input_chunk(dtype, count: int, rank: int, chunk: int, seed: int, product: bool):
    """Chunk `chunk` of rank `rank`'s reduce-scatter input, drawn on its own: rank r's
    reference needs only chunk r of every input (ws + ws - 1 chunks drawn instead of ws^2,
    which was most of the 4-rank case's time). Callers never modify it."""
    return make_input(dtype, count, rank, seed * 64 + chunk + 1, "PRODUCT" if product else "SUM")


def _scattered_input(dtype, count: int, ws: int, rank: int, seed: int, product: bool) -> torch.Tensor:
    """Rank `rank`'s whole reduce-scatter input (ws chunks of `count`), a new tensor."""
    return torch.cat([_input_chunk(dtype, count, rank, j, seed, product) for j in range(ws)])


def _run_one(comm, kind, pg, gg, ws, r, dtype, count, op, seed, what, algo=None, checks=True):
    """One case on this rank; (digest of the result, whether Gloo's was compared).
    `checks`: an all-reduce's result is checked against numpy and Gloo here (on one rank
    per case; every rank's digest is compared by the test)."""
    chosen = {} if algo is None else {"algo": algo}
    scatters = kind in ("reduce_scatter_tensor", "reduce_scatter")
    inputs = None if scatters else _all_inputs(dtype, count, ws, seed, op == "PRODUCT")
    mine = _scattered_input(dtype, count, ws, r, seed, op == "PRODUCT") if scatters else inputs[r].clone()
    rop = getattr(comm.ReduceOp, op)
    compared = 0
    if kind == "all_reduce":
        comm.all_reduce(mine, op=rop, group=pg, **chosen)
        if checks:
            assert_close(mine, reduce_ref(inputs, op, dtype), dtype, what + " vs numpy")
        theirs = inputs[r].clone()
        if op != "AVG" and _gloo(lambda: dist.all_reduce(theirs, op=_torch_op(op), group=gg), what) and checks:
            assert_close(mine, theirs.to(torch.float64 if dtype.is_floating_point else torch.int64).numpy(),
                         dtype, what + " vs gloo")
            compared = 1
        return digest(mine), compared
    if kind == "broadcast":
        root = ws - 1
        comm.broadcast(mine, src=root, group=pg, **chosen)
        assert torch.equal(mine, inputs[root]), what
        return digest(mine), 0
    if kind in ("all_gather_into_tensor", "all_gather"):
        if kind == "all_gather_into_tensor":
            result = torch.full((count * ws,), 7, dtype=dtype)
            # torch 2.13's name on odd counts, where the caller has it (pycollect does)
            gather = getattr(comm, "all_gather_single", None) if count % 2 else None
            (gather or comm.all_gather_into_tensor)(result, mine, group=pg, **chosen)
        else:
            parts = [torch.empty(count, dtype=dtype) for _ in range(ws)]
            comm.all_gather(parts, mine, group=pg, **chosen)
            result = torch.cat(parts)
        assert torch.equal(result, torch.cat(inputs)), what + " vs inputs"
        theirs = torch.empty(count * ws, dtype=dtype)
        if _gloo(lambda: _all_gather_single(theirs, inputs[r], group=gg), what):
            assert torch.equal(result, theirs), what + " vs gloo"
            compared = 1
        return digest(result), compared
    # reduce-scatter: rank r gets chunk r of the reduction
    ref = reduce_ref([_input_chunk(dtype, count, k, r, seed, op == "PRODUCT") for k in range(ws)], op, dtype)
    result = torch.full((count,), 7, dtype=dtype)
    if kind == "reduce_scatter_tensor":
        scatter = getattr(comm, "reduce_scatter_single", None) if count % 2 else None
        (scatter or comm.reduce_scatter_tensor)(result, mine, op=rop, group=pg, **chosen)
    else:
        comm.reduce_scatter(result, list(mine.chunk(ws)) if count else [mine[:0]] * ws, op=rop, group=pg)
    assert_close(result, ref, dtype, what + " vs numpy")
    theirs = torch.empty(count, dtype=dtype)
    fresh = _scattered_input(dtype, count, ws, r, seed, op == "PRODUCT")
    if op != "AVG" and _gloo(lambda: _reduce_scatter_single(theirs, fresh, op=_torch_op(op), group=gg), what):
        assert_close(result, theirs.to(torch.float64 if dtype.is_floating_point else torch.int64).numpy(),
                     dtype, what + " vs gloo")
        compared = 1
    return digest(result), compared


def case_broadcast_algos(ws: int, sizes) -> list:
    """The algorithm "auto" ran for a broadcast of each of `sizes` bytes on ranks [0, ws)
    (the flight record's), each result checked against the root's buffer."""
    pair = paired_groups(ws)
    if pair is None:
        return None
    pg = pair[0]
    ran = []
    for size in sizes:
        t = torch.full((size,), pc.get_rank(pg), dtype=torch.uint8)
        pc.broadcast(t, src=ws - 1, group=pg)
        assert bool((t == ws - 1).all()), f"broadcast of {size} B at {ws} ranks"
        ran.append(pc.get_flight_record(pg)[-1]["algo"])
    return ran


def case_all_to_all(ws: int, seed: int = 0):
    """pc.all_to_all_single against Gloo's, even and uneven splits (both the API's fast call
    on these 2-D rows), several dtypes; the even splits also on 1-D tensors and numpy arrays."""
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
            if even:  # flat: the fast call's even chunks, as torch and numpy buffers
                flat, mine = x.reshape(-1), torch.full((ours.numel(),), 7, dtype=dtype)
                pc.all_to_all_single(mine, flat, group=pg)
                assert torch.equal(mine, theirs.reshape(-1)), f"all_to_all_single ws={ws} {dtype} 1-D"
                if dtype != torch.bfloat16:
                    arr = np.full(ours.numel(), 7, dtype=mine.numpy().dtype)
                    pc.all_to_all_single(arr, flat.numpy(), group=pg)
                    assert np.array_equal(arr, mine.numpy()), f"all_to_all_single ws={ws} {dtype} numpy"
    return cases


# -- the calls torch's suite needs beyond the ring collectives ----------------------------------
NEW_KINDS = ["reduce", "gather", "scatter", "all_to_all", "all_reduce_coalesced", "all_gather_coalesced",
             "recv_any"]


def case_new_collective(kind: str, ws: int, seed: int = 0, counts=(0, 1, 13), dtypes=DTYPES, algo=None):
    """pc.<kind> on ranks [0, ws) against numpy and Gloo's dist.<kind>, every dtype x count
    (x op for the reductions); uneven sizes where the call allows them. Returns the
    digests of results every rank holds (checked bit-identical by the test). `algo`:
    the algorithm of all_reduce_coalesced or all_gather_coalesced (None: the group's)."""
    chosen = {} if algo is None else {"algo": algo}
    pair = paired_groups(ws)
    if pair is None:
        return None
    pg, gg = pair
    r = pc.get_rank(pg)
    out = {"digests": [], "gloo_compared": 0, "cases": 0}
    for dtype in dtypes:
        for count in counts:
            ops = OPS if kind in ("reduce", "all_reduce_coalesced") else ["SUM"]
            for op in ops:
                what = f"{kind} ws={ws} {dtype} count={count} op={op}"
                if op == "AVG" and not dtype.is_floating_point:
                    try:
                        _NEW[kind](pg, gg, ws, r, dtype, count, op, seed, what, **chosen)
                    except ValueError as e:
                        assert "AVG" in str(e), str(e)
                        continue
                    raise AssertionError(f"{what}: AVG on an integer dtype did not raise")
                digests, compared = _NEW[kind](pg, gg, ws, r, dtype, count, op, seed, what, **chosen)
                out["digests"] += [(what, d) for d in digests]
                out["gloo_compared"] += compared
                out["cases"] += 1
    return out


def _wide(t: torch.Tensor, dtype) -> np.ndarray:
    return t.to(torch.float64 if dtype.is_floating_point else torch.int64).numpy()


def _new_reduce(pg, gg, ws, r, dtype, count, op, seed, what):
    root = ws - 1
    inputs = _all_inputs(dtype, count, ws, seed, op == "PRODUCT")
    mine = inputs[r].clone()
    pc.reduce(mine, dst=root, op=getattr(pc.ReduceOp, op), group=pg)
    if r != root:
        assert torch.equal(mine, inputs[r]), what + ": a non-root tensor changed"
        if op != "AVG":
            _gloo(lambda: dist.reduce(inputs[r].clone(), dst=root, op=_torch_op(op), group=gg), what)
        return [], 0
    assert_close(mine, reduce_ref(inputs, op, dtype), dtype, what + " vs numpy")
    theirs = inputs[r].clone()
    if op != "AVG" and _gloo(lambda: dist.reduce(theirs, dst=root, op=_torch_op(op), group=gg), what):
        assert_close(mine, _wide(theirs, dtype), dtype, what + " vs gloo")
        return [], 1
    return [], 0


def _new_gather(pg, gg, ws, r, dtype, count, op, seed, what):
    """Uneven (rank k sends count + k elements) on the engine; even against Gloo."""
    root = 0
    inputs = [make_input(dtype, count + k, k, seed, "SUM") for k in range(ws)]
    slots = [torch.full((count + k,), 7, dtype=dtype) for k in range(ws)] if r == root else None
    pc.gather(inputs[r], slots, dst=root, group=pg)
    compared = 0
    if r == root:
        for k in range(ws):
            assert torch.equal(slots[k], inputs[k]), f"{what}: slot {k}"
    even = inputs[r][:count].contiguous()
    ours = [torch.empty(count, dtype=dtype) for _ in range(ws)] if r == root else None
    theirs = [torch.empty(count, dtype=dtype) for _ in range(ws)] if r == root else None
    pc.gather(even, ours, dst=root, group=pg)
    if _gloo(lambda: dist.gather(even, theirs, dst=root, group=gg), what):
        if r == root:
            assert all(torch.equal(a, b) for a, b in zip(ours, theirs)), what + " vs gloo"
        compared = 1
    return [], compared


def _new_scatter(pg, gg, ws, r, dtype, count, op, seed, what):
    root = ws - 1
    parts = [make_input(dtype, count + k, k, seed, "SUM") for k in range(ws)]
    mine = torch.full((count + r,), 7, dtype=dtype)
    pc.scatter(mine, parts if r == root else None, src=root, group=pg)
    assert torch.equal(mine, parts[r]), what
    even = [p[:count].contiguous() for p in parts]
    ours, theirs = torch.empty(count, dtype=dtype), torch.empty(count, dtype=dtype)
    pc.scatter(ours, even if r == root else None, src=root, group=pg)
    compared = 0
    if _gloo(lambda: dist.scatter(theirs, even if r == root else None, src=root, group=gg), what):
        assert torch.equal(ours, theirs), what + " vs gloo"
        compared = 1
    return [], compared


def _new_all_to_all(pg, gg, ws, r, dtype, count, op, seed, what):
    """Rank k sends count + (k + p) % 3 elements to rank p."""
    size = lambda k, p: count + (k + p) % 3  # noqa: E731
    ins = [make_input(dtype, size(r, p), r * ws + p, seed, "SUM") for p in range(ws)]
    ours = [torch.full((size(p, r),), 7, dtype=dtype) for p in range(ws)]
    pc.all_to_all(ours, ins, group=pg)
    for p in range(ws):
        assert torch.equal(ours[p], make_input(dtype, size(p, r), p * ws + r, seed, "SUM")), f"{what}: from {p}"
    # Gloo's list form needs equal sizes: compare on the first `count` elements of each
    even_in = [t[:count].contiguous() for t in ins]
    ours = [torch.empty(count, dtype=dtype) for _ in range(ws)]
    theirs = [torch.full((count,), 9, dtype=dtype) for _ in range(ws)]
    pc.all_to_all(ours, even_in, group=pg)
    compared = 0
    if _gloo(lambda: dist.all_to_all(theirs, even_in, group=gg), what):
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs)), what + " vs gloo"
        compared = 1
    return [], compared


def _new_all_reduce_coalesced(pg, gg, ws, r, dtype, count, op, seed, what, algo=None):
    sizes = (count, 2, 5)
    inputs = [_all_inputs(dtype, n, ws, seed + i, op == "PRODUCT") for i, n in enumerate(sizes)]
    mine = [inp[r].clone() for inp in inputs]
    pc.all_reduce_coalesced(mine, op=getattr(pc.ReduceOp, op), group=pg, algo=algo)
    for t, inp in zip(mine, inputs):
        assert_close(t, reduce_ref(inp, op, dtype), dtype, what + " vs numpy")
    compared = 0
    theirs = [inp[r].clone() for inp in inputs]
    if op != "AVG" and _gloo(lambda: dist.all_reduce_coalesced(theirs, op=_torch_op(op), group=gg), what):
        for a, b in zip(mine, theirs):
            assert_close(a, _wide(b, dtype), dtype, what + " vs gloo")
        compared = 1
    return [digest(t) for t in mine], compared


def _new_all_gather_coalesced(pg, gg, ws, r, dtype, count, op, seed, what, algo=None):
    sizes = (count, 3)
    inputs = [_all_inputs(dtype, n, ws, seed + i, False) for i, n in enumerate(sizes)]
    mine = [inp[r] for inp in inputs]
    ours = [[torch.full((n,), 7, dtype=dtype) for n in sizes] for _ in range(ws)]
    pc.all_gather_coalesced(ours, mine, group=pg, algo=algo)
    for k in range(ws):
        for i in range(len(sizes)):
            assert torch.equal(ours[k][i], inputs[i][k]), f"{what}: rank {k} tensor {i}"
    theirs = [[torch.empty(n, dtype=dtype) for n in sizes] for _ in range(ws)]
    compared = 0
    if _gloo(lambda: dist.all_gather_coalesced(theirs, mine, group=gg), what):
        assert all(torch.equal(a, b) for ra, rb in zip(ours, theirs) for a, b in zip(ra, rb)), what + " vs gloo"
        compared = 1
    return [digest(torch.cat([t for row in ours for t in row]))], compared


def _new_recv_any(pg, gg, ws, r, dtype, count, op, seed, what):
    """Every other rank sends two messages to rank 0, which receives them from any source."""
    if ws == 1:
        return [], 0
    sent = {k: [make_input(dtype, count, k * 2 + j, seed, "SUM") for j in range(2)] for k in range(1, ws)}
    # A tag per case: a sender already in the next case must not match this one (its
    # message waits among the receiver's unexpected ones until the next case asks for its tag).
    tag = 100 + count + 1000 * DTYPES.index(dtype)
    if r != 0:
        for j in range(2):
            pc.send(sent[r][j], 0, group=pg, tag=tag)
        return [], 0
    seen = {k: 0 for k in range(1, ws)}
    for _ in range(2 * (ws - 1)):
        t = torch.full((count,), 7, dtype=dtype)
        src = pc.recv(t, None, group=pg, tag=tag)
        assert torch.equal(t, sent[src][seen[src]]), f"{what}: message {seen[src]} of rank {src}"
        seen[src] += 1
    assert all(v == 2 for v in seen.values()), f"{what}: {seen}"
    return [], 0


_NEW = {"reduce": _new_reduce, "gather": _new_gather, "scatter": _new_scatter, "all_to_all": _new_all_to_all,
        "all_reduce_coalesced": _new_all_reduce_coalesced, "all_gather_coalesced": _new_all_gather_coalesced,
        "recv_any": _new_recv_any}


# -- gather, scatter and all-to-all: parts in the shared arena and over links -------------------
def case_parts(ws: int):
    """gather, scatter and all-to-all on the shared arena (shared_arena.h, "Parts": a part of
    at most 8 KiB travels in the arena, a larger one over its link) with parts whose sizes
    differ by rank (by pair for the all-to-all) and fall on both sides of that limit and on
    it: none, a large one, exactly 8 KiB, one element more; a root other than 0; float64 and
    bfloat16. Against the parts themselves, and an even large gather and scatter against
    Gloo. Blocking gathers and scatters take the API's fast path, async ones the general
    path: both are checked. Returns the cases checked."""
    pair = paired_groups(ws)
    if pair is None:
        return None
    pg, gg = pair
    r = pc.get_rank(pg)
    cases = 0
    for dtype in (torch.float64, torch.bfloat16):
        limit = 8192 // torch.empty(0, dtype=dtype).element_size()
        counts = [0, 300001, limit, limit + 1][:ws]
        parts = [torch.arange(c, dtype=torch.float64).mul_(0.5).add_(k).to(dtype) for k, c in enumerate(counts)]
        root = ws - 1
        for async_op in (False, True):
            slots = [torch.zeros(c, dtype=dtype) for c in counts] if r == root else None
            work = pc.gather(parts[r], slots, dst=root, group=pg, async_op=async_op)
            if work is not None:
                work.wait()
            if r == root:
                for k in range(ws):
                    assert torch.equal(slots[k], parts[k]), f"gather ws={ws} {dtype} async={async_op}: part {k}"
            src = 1 % ws
            mine = torch.zeros(counts[r], dtype=dtype)
            work = pc.scatter(mine, parts if r == src else None, src=src, group=pg, async_op=async_op)
            if work is not None:
                work.wait()
            assert torch.equal(mine, parts[r]), f"scatter ws={ws} {dtype} async={async_op}"
            cases += 2
        # all-to-all: rank k sends rank p a part of counts[(k + 2 * p) % 4] (every size above
        # meets every pair's direction at 4 ranks), valued by (k, p)
        choice = [0, 300001, limit, limit + 1]
        def part(k, p):
            return torch.arange(choice[(k + 2 * p) % 4], dtype=torch.float64).add_(10 * k + p).to(dtype)
        outs = [torch.zeros(choice[(p + 2 * r) % 4], dtype=dtype) for p in range(ws)]
        pc.all_to_all(outs, [part(r, p) for p in range(ws)], group=pg)
        for p in range(ws):
            assert torch.equal(outs[p], part(p, r)), f"all_to_all ws={ws} {dtype}: from rank {p}"
        cases += 1
    even = torch.arange(300001, dtype=torch.float64).add_(r)
    ours = [torch.empty_like(even) for _ in range(ws)] if r == 0 else None
    theirs = [torch.empty_like(even) for _ in range(ws)] if r == 0 else None
    pc.gather(even, ours, dst=0, group=pg)
    dist.gather(even, theirs, dst=0, group=gg)
    if r == 0:
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs)), f"gather ws={ws} vs gloo"
    rows = [torch.arange(300001, dtype=torch.float64).add_(k) for k in range(ws)] if r == 0 else None
    ours, theirs = torch.empty(300001, dtype=torch.float64), torch.empty(300001, dtype=torch.float64)
    pc.scatter(ours, rows, src=0, group=pg)
    dist.scatter(theirs, rows, src=0, group=gg)
    assert torch.equal(ours, theirs), f"scatter ws={ws} vs gloo"
    return cases + 2
