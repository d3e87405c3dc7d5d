"""The lesson's data-parallel demo, on pycollect's transport or on Gloo.

    from pycollect import demo
    r = demo.run_distributed_demo(world_size=2)            # backend="pycollect" (default) or "gloo"
    r["param_sum_spread"], r["fsdp_round_trip_all_ranks_ok"]

run_distributed_demo spawns `world_size` ranks on loopback, and each rank runs three drills:

1. Manual all-reduce. Each rank computes the gradient of the loss on its slice of a
   batch, then all-reduces the gradients (SUM) and divides by world_size. The result
   equals the gradient that one process computes on the whole batch. Each rank checks
   this against its own single-process copy.
2. Naive DDP. A small MLP is wrapped in NaiveDistributedDataParallel (rank 0's weights
   are broadcast, and gradients are averaged after each backward) and trained for a few
   SGD steps, each rank on its own data. The replicas stay identical, and
   `param_sum_spread` shows it.
3. FSDP round trip. Each parameter is flattened and padded to a multiple of
   world_size. Each rank keeps one slice, and an all-gather rebuilds the whole
   parameter. The result must equal the original.

The helpers take `backend=None`: pycollect if pycollect.init_process_group() was
called, else torch.distributed. "pycollect" or "gloo" picks one of them explicitly.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

import torch
from torch import nn

from .._sync import average_gradients, broadcast_from_root, collectives
from ..ddp.naive import NaiveDistributedDataParallel
from ..launch import run_ranks

__all__ = ["run_distributed_demo", "fsdp_round_trip_sketch", "broadcast_module", "all_reduce_grads_",
           "shard_for_rank", "make_model", "manual_all_reduce_matches_single_process"]


def make_model(in_dim: int, hidden: int, out_dim: int) -> nn.Module:
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.GELU(), nn.Linear(hidden, out_dim))


def broadcast_module(module: nn.Module, src: int = 0, *, backend: Optional[str] = None, group=None) -> None:
    """Copy rank `src`'s parameters and buffers into every rank's `module`, in place."""
    broadcast_from_root(list(module.parameters()) + list(module.buffers()), group, collectives(backend), src)


def all_reduce_grads_(module: nn.Module, world_size: Optional[int] = None, *, backend: Optional[str] = None,
                      group=None) -> float:
    """Average .grad across ranks in place (SUM, then / world_size); return the L2 norm of the result.

    A parameter without a gradient takes part with zeros, so every rank sends the same messages.
    """
    comm = collectives(backend)
    world_size = comm.get_world_size(group) if world_size is None else world_size
    params = list(module.parameters())
    average_gradients(params, world_size, group, comm)
    return math.sqrt(sum(float(p.grad.double().square().sum()) for p in params))


def shard_for_rank(x: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank `rank`'s contiguous slice of `x` along dim 0; shard sizes differ by at most one
    (the first len(x) % world_size ranks get one extra row)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside [0, {world_size})")
    base, extra = divmod(x.shape[0], world_size)
    start = rank * base + min(rank, extra)
    return x[start:start + base + (1 if rank < extra else 0)]


def fsdp_round_trip_sketch(module: nn.Module, world_size: int, rank: int, *, backend: Optional[str] = None,
                           group=None) -> bool:
    """Shard each parameter across ranks and all-gather it back; True if every one comes back equal.

    For each parameter: flatten, pad with zeros to a multiple of world_size, keep slice
    `rank` (what FSDP stores between uses), all-gather the slices (FSDP's unshard
    before forward), drop the padding, compare with the original, bit for bit.
    """
    comm = collectives(backend) if world_size > 1 else None
    ok = True
    for p in module.parameters():
        full = p.detach().reshape(-1)
        per = -(-full.numel() // world_size)  # ceil
        padded = torch.zeros(per * world_size, dtype=full.dtype)
        padded[:full.numel()] = full
        mine = padded[rank * per:(rank + 1) * per].clone()
        if comm is None:
            shards = [mine]
        else:
            shards = [torch.empty_like(mine) for _ in range(world_size)]
            comm.all_gather(shards, mine, group=group)
        rebuilt = torch.cat(shards)[:full.numel()].view_as(p)
        ok = ok and torch.equal(rebuilt, p.detach())
    return ok


def _rank_data(rows: int, in_dim: int, out_dim: int, seed: int) -> Tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, in_dim, generator=g), torch.randint(0, out_dim, (rows,), generator=g)


def manual_all_reduce_matches_single_process(rank: int, world_size: int, in_dim: int, hidden: int, out_dim: int,
                                             batch_size: int, seed: int = 0, *,
                                             backend: Optional[str] = None) -> Tuple[float, float]:
    """Drill 1: (norm of the all-reduced gradient, its max abs difference from one process
    on the concatenated batch of world_size * batch_size rows)."""
    full_x, full_y = _rank_data(batch_size * world_size, in_dim, out_dim, seed + 7)
    torch.manual_seed(seed + 1)
    model = make_model(in_dim, hidden, out_dim)
    single = make_model(in_dim, hidden, out_dim)
    broadcast_module(model, backend=backend)
    single.load_state_dict(model.state_dict())
    loss_fn = nn.CrossEntropyLoss()
    loss_fn(model(shard_for_rank(full_x, rank, world_size)), shard_for_rank(full_y, rank, world_size)).backward()
    norm = all_reduce_grads_(model, world_size, backend=backend)
    loss_fn(single(full_x), full_y).backward()
    diff = max(float((p.grad - q.grad).abs().max()) for p, q in zip(model.parameters(), single.parameters()))
    return norm, diff


def _demo_rank(rank: int, world_size: int, emit, backend: str, in_dim: int, hidden: int, out_dim: int,
               batch_size: int, num_steps: int, lr: float, seed: int) -> Dict[str, object]:
    norm, diff = manual_all_reduce_matches_single_process(rank, world_size, in_dim, hidden, out_dim, batch_size,
                                                          seed, backend=backend)
    torch.manual_seed(seed + 100 + rank)  # different on every rank: the wrapper's broadcast evens them out
    model = NaiveDistributedDataParallel(make_model(in_dim, hidden, out_dim), comm=collectives(backend))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    for step in range(num_steps):
        x, y = _rank_data(batch_size, in_dim, out_dim, seed * 1000 + 31 * step + rank)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()  # the wrapper averages the gradients when backward ends
        opt.step()
        losses.append(float(loss.detach()))
    return {
        "grad_norm_after_all_reduce": norm,
        "max_diff_vs_single_process": diff,
        "losses": losses,
        "param_sum": sum(float(p.detach().double().sum()) for p in model.parameters()),
        "fsdp_round_trip_ok": fsdp_round_trip_sketch(model.module, world_size, rank, backend=backend),
    }


def run_distributed_demo(world_size: int = 2, *, backend: str = "pycollect", in_dim: int = 32, hidden: int = 16,
                         out_dim: int = 4, batch_size: int = 8, num_steps: int = 6, lr: float = 0.05,
                         seed: int = 0, timeout: float = 60.0) -> Dict[str, object]:
    """Spawn `world_size` ranks on loopback, run the three drills, return what they found.

    batch_size is per rank. Keys: world_size, backend, param_sum_per_rank ({rank: sum}),
    param_sum_spread (max - min of those), losses (each rank's loss at the last step, in
    rank order), loss_per_step (mean over ranks), grad_norm_after_all_reduce (rank 0's),
    manual_all_reduce_max_diff_vs_single_process (max over ranks),
    fsdp_round_trip_all_ranks_ok.
    """
    if backend not in ("pycollect", "gloo"):
        raise ValueError(f"backend must be 'pycollect' or 'gloo', got {backend!r}")
    if num_steps < 1 or batch_size < 1:
        raise ValueError(f"num_steps and batch_size must be >= 1, got {num_steps} and {batch_size}")
    results = run_ranks(_demo_rank, world_size, (backend,), timeout=timeout,
                        job_args=(backend, in_dim, hidden, out_dim, batch_size, num_steps, lr, seed))
    sums = {r: res["param_sum"] for r, res in enumerate(results)}
    per_step: List[float] = [sum(res["losses"][s] for res in results) / world_size for s in range(num_steps)]
    return {
        "world_size": world_size,
        "backend": backend,
        "param_sum_per_rank": sums,
        "param_sum_spread": max(sums.values()) - min(sums.values()),
        "losses": [res["losses"][-1] for res in results],
        "loss_per_step": per_step,
        "grad_norm_after_all_reduce": results[0]["grad_norm_after_all_reduce"],
        "manual_all_reduce_max_diff_vs_single_process": max(res["max_diff_vs_single_process"] for res in results),
        "fsdp_round_trip_all_ranks_ok": all(res["fsdp_round_trip_ok"] for res in results),
    }
