"""Soak: thousands of mixed collectives on local ranks, every result checked, resources watched.

    python bench/soak.py                              # 3 ranks, 3000 operations
    python bench/soak.py --ops 20000 --world-size 4 --progress 1000 --seed 7

Every rank draws the same plan from the seed: windows of 1 to 8 asynchronous calls
(all_reduce, all_gather_into_tensor, reduce_scatter_tensor, broadcast, barrier, and a
send/recv between two random ranks), each with a random size (0, 1, primes up to
~1 MiB of float32), dtype and reduction. Each rank then waits on its window's handles in
an order of its own, and checks every result against a reference it computes by itself
from the seeds: each rank's input is a function of (seed, call, rank), so any rank can
build all of them (tests/collective_cases.py's inputs, references and tolerances).

Printed per rank at the start (groups formed, nothing run yet), after the first tenth
of the calls (warm: buffers and threads made) and at the end: open file descriptors
(/proc/self/fd), threads (/proc/self/task, so the engine's own count) and RSS. A leak
shows as a figure that grows from "warm" to "end". Exit code 0 when every check passed.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))  # collective_cases: inputs, references, tolerances

from pycollect.launch import run_ranks  # noqa: E402

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier", "send_recv")
COUNTS = (0, 1, 2, 3, 7, 13, 31, 127, 1021, 4099, 65537, 262147)  # 0, 1, then primes up to ~1 MiB of float32
WEIGHTS = (3, 3, 2, 2, 2, 3, 2, 2, 2, 2, 1, 1)  # mostly small: many calls, a few large ones


def resources() -> dict:
    with open("/proc/self/status") as f:
        rss_kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return {"fds": len(os.listdir("/proc/self/fd")), "threads": len(os.listdir("/proc/self/task")),
            "rss_mib": round(rss_kb / 1024, 1)}


def draw(plan: random.Random, ws: int) -> dict:
    """One call of the plan (the same on every rank)."""
    import collective_cases as cc

    kind = plan.choice(KINDS)
    dtype = plan.choice(cc.DTYPES)
    ops = cc.OPS if dtype.is_floating_point else [o for o in cc.OPS if o != "AVG"]
    ends = plan.sample(range(ws), 2) if ws > 1 else [0, 0]
    return {"kind": kind, "count": plan.choices(COUNTS, WEIGHTS)[0], "dtype": dtype, "op": plan.choice(ops),
            "root": plan.randrange(ws), "src": ends[0], "dst": ends[1]}


def issue(call: dict, index: int, seed: int, rank: int, ws: int):
    """Start one call asynchronously; return (work handles, a function that checks the result)."""
    import torch

    import collective_cases as cc
    import pycollect as pc

    kind, dtype, count, op = call["kind"], call["dtype"], call["count"], call["op"]
    what = f"call {index}: {kind}(count={count}, {dtype}, {op})"
    per_rank = count * ws if kind == "reduce_scatter" else count
    inputs = [cc.make_input(dtype, per_rank, k, seed * 1_000_003 + index, op) for k in range(ws)]
    mine = inputs[rank].clone()
    rop = getattr(pc.ReduceOp, op)
    if kind == "all_reduce":
        return [pc.all_reduce(mine, op=rop, async_op=True)], \
            lambda: cc.assert_close(mine, cc.reduce_ref(inputs, op, dtype), dtype, what)
    if kind == "all_gather":
        out = torch.full((count * ws,), 7, dtype=dtype)
        return [pc.all_gather_into_tensor(out, mine, async_op=True)], \
            lambda: _assert(torch.equal(out, torch.cat(inputs)), what)
    if kind == "reduce_scatter":
        out = torch.full((count,), 7, dtype=dtype)
        ref = cc.reduce_ref(inputs, op, dtype)[rank * count:(rank + 1) * count]
        return [pc.reduce_scatter_tensor(out, mine, op=rop, async_op=True)], \
            lambda: cc.assert_close(out, ref, dtype, what)
    if kind == "broadcast":
        root = call["root"]
        return [pc.broadcast(mine, src=root, async_op=True)], \
            lambda: _assert(torch.equal(mine, inputs[root]), f"{what} from rank {root}")
    if kind == "barrier":
        return [pc.barrier(async_op=True)], lambda: None
    src, dst = call["src"], call["dst"]
    if rank == src:
        return [pc.isend(mine, dst)], lambda: None
    if rank == dst:
        got = torch.full((count,), 7, dtype=dtype)
        return [pc.irecv(got, src)], lambda: _assert(torch.equal(got, inputs[src]), f"{what} {src}->{dst}")
    return [], lambda: None


def _assert(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(f"{what}: result differs from the reference")


def _rank_job(rank: int, ws: int, emit, ops: int, seed: int, progress: int) -> dict:
    emit("resources", "start", resources())
    plan = random.Random(seed)  # the same on every rank
    order = random.Random(seed * 7919 + rank)  # each rank waits in its own order
    kinds = dict.fromkeys(KINDS, 0)
    done, depths, t0 = 0, [], time.perf_counter()
    while done < ops:
        depth = min(plan.randint(1, 8), ops - done)
        depths.append(depth)
        window = []
        for i in range(done, done + depth):
            call = draw(plan, ws)
            kinds[call["kind"]] += 1
            window.append(issue(call, i, seed, rank, ws))
        handles = [w for works, _ in window for w in works]
        order.shuffle(handles)
        for w in handles:
            w.wait()
        for _, check in window:
            check()
        before, done = done, done + depth
        if rank == 0 and done // progress > before // progress:
            emit("progress", done, time.perf_counter() - t0)
        if before < ops // 10 <= done:
            emit("resources", "warm", resources())
    import pycollect as pc

    pc.barrier()
    emit("resources", "end", resources())
    return {"kinds": kinds, "mean_depth": sum(depths) / len(depths), "seconds": time.perf_counter() - t0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=3000, help="collective calls per rank")
    ap.add_argument("--world-size", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--progress", type=int, default=500, help="print a line every this many calls")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds before the run counts as hung")
    args = ap.parse_args(argv)
    if args.ops < 1 or args.world_size < 1 or args.progress < 1:
        ap.error("--ops, --world-size and --progress must be >= 1")
    print(f"# soak: {args.ops} calls on {args.world_size} local ranks, seed {args.seed}", flush=True)
    figures: dict = {}

    def on_event(rank: int, event: tuple) -> None:
        if event[0] == "progress":
            print(f"  {event[1]:>7} calls checked  {event[2]:7.1f} s", flush=True)
        else:
            figures[(rank, event[1])] = event[2]

    try:
        results = run_ranks(_rank_job, args.world_size, ("pycollect",), (args.ops, args.seed, args.progress),
                            timeout=args.timeout, on_event=on_event)
    except (RuntimeError, TimeoutError) as e:
        print(f"soak FAILED:\n{e}", file=sys.stderr)
        return 1
    r0 = results[0]
    print(f"# all {args.ops} calls checked on every rank in {r0['seconds']:.1f} s; mean async depth "
          f"{r0['mean_depth']:.1f}; calls per kind: " + ", ".join(f"{k} {n}" for k, n in r0["kinds"].items()))
    print(f"# {'rank':>4}  {'fds start/warm/end':>20}  {'threads start/warm/end':>24}  {'RSS MiB start/warm/end':>26}")
    for rank in range(args.world_size):
        cols = [figures.get((rank, when), {}) for when in ("start", "warm", "end")]
        print(f"  {rank:>4}  " + "  ".join(f"{'/'.join(str(c.get(k, '?')) for c in cols):>{w}}"
                                           for k, w in (("fds", 20), ("threads", 24), ("rss_mib", 26))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
