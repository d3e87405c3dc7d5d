"""FSDP against DDP on pycollect: per-rank memory and step time for a ~210M-parameter GPT.

    python bench/bench_fsdp.py                      # 2 and 4 ranks, 1 warm-up + 3 timed steps
    python bench/bench_fsdp.py --worlds 2 --steps 5 --layers 8

Every (world size, mode) runs in fresh processes, so memory figures do not mix. Each
rank builds the same GPT (seed 0; d=1024, 16 blocks, vocab 8192, tied head), wraps it
with pycollect.fsdp.fully_shard (one unit per block, the root holding the embeddings)
or with pycollect.ddp.DistributedDataParallel (plain replication with an all-reduce of
every gradient when pycollect.ddp is absent), and trains with Adam (fp32) on batches of
--batch sequences of --seq tokens per rank. Large allocations are mmap'ed
(MALLOC_MMAP_THRESHOLD_), so freed memory leaves the process, and the resident-set
high-water mark is reset after set-up, so "peak RSS" covers the training steps only.

Printed per world size: model state per rank (parameters + gradients + optimizer state,
counted from the tensors), the peak of gathered parameter bytes (FSDP), the peak RSS
per rank (the largest over ranks) and what it adds to the RSS before the model was
built, and the step time (median over timed steps of the slowest rank). Losses of the
two modes are compared step by step, as they train on the same data.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pycollect.launch import run_ranks  # noqa: E402

MODES = ("DDP", "FSDP")
GiB = 2 ** 30


def _trim() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def _job(rank, world, emit, mode, args):
    """One rank of one (world size, mode) run; pycollect is initialised by run_ranks."""
    import torch

    import pycollect as pc
    from pycollect.ddp import DistributedDataParallel
    from pycollect.demo.gpt import GPT, Block, GPTConfig, gpt_batch, lm_loss
    from pycollect.fsdp import (ModuleWrapPolicy, fully_shard, memory_stats, model_state_bytes,
                                peak_rss_bytes, reset_peak_rss)
    from pycollect.fsdp.memory_stats import current_rss_bytes

    cfg = GPTConfig(vocab=args.vocab, seq=args.seq, dim=args.dim, layers=args.layers, heads=args.heads)
    base_rss = current_rss_bytes()
    torch.manual_seed(0)
    model = GPT(cfg)
    if mode == "FSDP":
        model = fully_shard(model, policy=ModuleWrapPolicy({Block}))
    else:
        model = DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    _trim()
    reset_peak_rss()
    times, losses = [], []
    for step in range(args.warmup + args.steps):
        tokens, targets = gpt_batch(cfg, args.batch * world, seed=step)
        rows = slice(rank * args.batch, (rank + 1) * args.batch)
        pc.barrier()
        start = time.perf_counter()
        loss = lm_loss(model(tokens[rows]), targets[rows])
        opt.zero_grad(set_to_none=True)
        loss.backward()  # both wrappers have averaged the gradients when this returns
        opt.step()
        elapsed = time.perf_counter() - start
        mean = loss.detach().reshape(1).clone()
        pc.all_reduce(mean, op=pc.ReduceOp.AVG)
        losses.append(mean.item())
        if step >= args.warmup:
            times.append(elapsed)
    stats = memory_stats(model, opt) if mode == "FSDP" else model_state_bytes(model, opt)
    gathered = max(stats.get("peak_unsharded_bytes", {}).values() or [0])
    return {"state": stats["total"], "gathered": gathered, "peak_rss": peak_rss_bytes(), "base_rss": base_rss,
            "times": times, "losses": losses}


def _mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def _estimate(mode: str, world: int, n_params: int) -> float:
    """Bytes the whole run may need at its peak (set-up included), with margin."""
    base = 0.6 * GiB
    build = 4 * n_params  # every rank builds the full fp32 model before sharding / replicating
    # DDP: params, grads, Adam's two moments and DDP's flat bucket copy of the grads
    state = 20 * n_params if mode == "DDP" else 16 * n_params / world + 4 * n_params
    return world * (base + max(build, state) + 0.5 * GiB)


def run_config(mode, world, args, n_params):
    need, have = _estimate(mode, world, n_params), _mem_available()
    if need > have:
        return f"skipped: needs ~{need / GiB:.1f} GiB, {have / GiB:.1f} GiB available"
    try:
        results = run_ranks(_job, world, ("pycollect",), job_args=(mode, args), timeout=args.timeout)
    except (RuntimeError, TimeoutError) as e:
        return str(e)
    return dict(enumerate(results))


def _row(mode, res):
    slowest = [max(step) for step in zip(*(r["times"] for r in res.values()))]
    peak = max(r["peak_rss"] for r in res.values())
    added = max(r["peak_rss"] - r["base_rss"] for r in res.values())
    state = max(r["state"] for r in res.values())
    gathered = max(r["gathered"] for r in res.values())
    return (f"{mode:<5} {state / 2**20:>12.0f} {gathered / 2**20:>13.0f} {peak / 2**20:>13.0f} "
            f"{added / 2**20:>13.0f} {statistics.median(slowest):>11.2f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args(argv)
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(1 << 20))  # inherited by the spawned ranks

    from pycollect.demo.gpt import GPT, GPTConfig, num_params

    import torch
    with torch.device("meta"):
        n = num_params(GPT(GPTConfig(vocab=args.vocab, seq=args.seq, dim=args.dim, layers=args.layers,
                                     heads=args.heads)))
    print(f"GPT d={args.dim} layers={args.layers} vocab={args.vocab} (tied): {n / 1e6:.1f} M parameters, "
          f"fp32 + Adam; batch {args.batch} x {args.seq} tokens per rank; {args.warmup} warm-up + {args.steps} "
          f"timed steps; MiB = 2^20 bytes")
    failed = False
    for world in args.worlds:
        print(f"\n{world} ranks")
        print(f"{'mode':<5} {'state MiB/rk':>12} {'gathered MiB':>13} {'peak RSS MiB':>13} "
              f"{'RSS added MiB':>13} {'step s (med)':>11}")
        done = {}
        for mode in MODES:
            res = run_config(mode, world, args, n)
            if isinstance(res, str):
                print(f"{mode:<5} {res}")
                failed |= not res.startswith("skipped")
                continue
            done[mode] = res
            print(_row(mode, res), flush=True)
        if len(done) == 2:
            ddp, fsdp = done["DDP"], done["FSDP"]
            d_state = max(r["state"] for r in ddp.values()) / max(r["state"] for r in fsdp.values())
            d_rss = max(r["peak_rss"] for r in ddp.values()) / max(r["peak_rss"] for r in fsdp.values())
            dl = max(abs(a - b) for a, b in zip(ddp[0]["losses"], fsdp[0]["losses"]))
            print(f"DDP/FSDP: model state x{d_state:.2f}, peak RSS x{d_rss:.2f}; "
                  f"largest loss difference between the modes {dl:.2e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
