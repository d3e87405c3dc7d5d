"""Cross-rank helpers that the training wrappers and the lesson's demo share, written once.

    comm = collectives("gloo")                       # pycollect.api or torch.distributed: same names
    src = group_root(group, comm)                    # global rank of the group's first rank
    broadcast_from_root(model_tensors, group, comm)  # the first rank's values on every rank
    average_gradients(params, world_size, group, comm)  # .grad = mean over ranks
    problem = first_difference(lines, group, comm)   # None when every rank passed the same lines

Each function takes `comm`, the module whose collectives to call: pycollect.api (the
default) or torch.distributed, which has the same names. Every rank must call each
function in the same order with the same group, like any collective. The calls each one
makes never depend on the values being compared, so ranks that disagree still issue the
same collectives, and all of them get the same answer instead of a hang.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch

BROADCAST_BUCKET_BYTES = 32 * 1024 * 1024  # one broadcast moves at most this much (plus one tensor)


def collectives(backend: Optional[str] = None):
    """The module whose collectives to use: "pycollect" (pycollect.api), "gloo" (torch.distributed),
    or None: pycollect if pycollect.init_process_group() was called, else an initialised
    torch.distributed."""
    import torch.distributed as dist

    from . import api

    if backend == "pycollect":
        return api
    if backend == "gloo":
        return dist
    if backend is not None:
        raise ValueError(f"backend must be 'pycollect', 'gloo' or None, got {backend!r}")
    if api.is_initialized():
        return api
    if dist.is_available() and dist.is_initialized():
        return dist
    raise RuntimeError("no process group: call pycollect.init_process_group() "
                       "(or torch.distributed.init_process_group) first")


def _default_comm(comm):
    if comm is not None:
        return comm
    from . import api

    return api


def group_root(group=None, comm=None) -> int:
    """Global rank of `group`'s first rank (None: the default group, whose first rank is 0)."""
    if group is None:
        return 0
    ranks = getattr(group, "ranks", None)  # a pycollect ProcessGroup
    if ranks is not None:
        return ranks[0]
    import torch.distributed as dist

    return dist.get_global_rank(group, 0)  # a torch.distributed group


def broadcast_from_root(tensors: Sequence[torch.Tensor], group=None, comm=None, src: Optional[int] = None) -> None:
    """Copy the values of `tensors` on the group's first rank (or global rank `src`) into every
    rank's, in place.

    Tensors of one dtype travel together, flattened into buckets of about
    BROADCAST_BUCKET_BYTES: few messages, and a bounded extra copy."""
    comm = _default_comm(comm)
    src = group_root(group, comm) if src is None else src
    by_dtype: Dict[torch.dtype, List[torch.Tensor]] = {}
    for t in tensors:
        by_dtype.setdefault(t.dtype, []).append(t)
    with torch.no_grad():
        for same in by_dtype.values():
            for bucket in _buckets(same):
                flat = torch.cat([t.detach().reshape(-1) for t in bucket])
                comm.broadcast(flat, src=src, group=group)
                offset = 0
                for t in bucket:
                    t.copy_(flat[offset:offset + t.numel()].view_as(t))
                    offset += t.numel()


def _buckets(tensors: List[torch.Tensor]):
    bucket, size = [], 0
    for t in tensors:
        bucket.append(t)
        size += t.numel() * t.element_size()
        if size >= BROADCAST_BUCKET_BYTES:
            yield bucket
            bucket, size = [], 0
    if bucket:
        yield bucket


def average_gradients(params: Sequence[torch.Tensor], world_size: int, group=None, comm=None) -> None:
    """.grad = the mean of .grad over the ranks, one all-reduce (SUM) per parameter, in order.

    A parameter without a gradient takes part with zeros: every rank must send the same
    sequence of messages."""
    comm = _default_comm(comm)
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        comm.all_reduce(p.grad, group=group)
        p.grad.div_(world_size)


def gather_lines(lines: Sequence[str], group=None, comm=None) -> List[List[str]]:
    """Every rank's `lines`, in group rank order, on every rank.

    Two collectives whose sizes do not depend on the lines: a MAX of the encoded
    length, then an all-gather of the zero-padded encodings."""
    comm = _default_comm(comm)
    world = comm.get_world_size(group)
    local = "\n".join(lines).encode()
    length = torch.tensor([len(local)], dtype=torch.int64)
    comm.all_reduce(length, op=comm.ReduceOp.MAX, group=group)
    padded = torch.zeros(int(length.item()), dtype=torch.uint8)
    if local:
        padded[:len(local)] = torch.frombuffer(bytearray(local), dtype=torch.uint8)
    gathered = torch.empty(world * padded.numel(), dtype=torch.uint8)
    comm.all_gather_into_tensor(gathered, padded, group=group)
    rows = gathered.view(world, -1).numpy()
    return [bytes(row).rstrip(b"\0").decode().split("\n") if row.size else [""] for row in rows]


def first_difference(lines: Sequence[str], group=None, comm=None, noun: str = "line") -> Optional[str]:
    """None if every rank of `group` passed the same `lines`, else a sentence naming the first
    rank and line that differ from the group's first rank, with both values. Every rank
    gets the same answer, so all of them can raise together."""
    every = gather_lines(lines, group, comm)
    ref = every[0]
    for r, mine in enumerate(every[1:], start=1):
        if mine == ref:
            continue
        for i in range(max(len(ref), len(mine))):
            a = ref[i] if i < len(ref) else "(nothing)"
            b = mine[i] if i < len(mine) else "(nothing)"
            if a != b:
                return (f"{noun} #{i} differs across ranks: rank 0 has {a!r}, rank {r} has {b!r} "
                        f"(rank 0 lists {len(ref)}, rank {r} lists {len(mine)})")
    return None
