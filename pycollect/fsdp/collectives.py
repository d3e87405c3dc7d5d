"""Stateless steps of one FSDP unit: lay out, shard, gather, free, reduce-scatter.

A unit's parameters p_0 .. p_{k-1} (numels n_0 .. n_{k-1}) are laid end to end in one
flat vector of N = sum(n_i) elements, then padded with zeros to P = W * S elements,
where W is the world size and S = ceil(N / W) is the shard size. Rank r owns the
elements [r*S, (r+1)*S) of that vector: its *shard*.

Worked example, N = 10 (p_0 has 6 elements, p_1 has 4), W = 3:
    S = 4, P = 12, padding = 2
    rank 0 holds p_0[0:4]
    rank 1 holds p_0[4:6] + p_1[0:2]
    rank 2 holds p_1[2:4] + 2 zeros of padding

Gather: every rank casts its shard to the compute dtype and the ring all-gather writes
the W shards, in rank order, into the padded unsharded buffer; each parameter is a
view of that buffer (split at n_0, n_1, ..., padding). Free: the buffer keeps its
shape but its storage is resized to zero bytes, so views taken by autograd stay valid
objects and see the data again after the next gather into the same storage.
Reduce-scatter: the unsharded gradient (same layout, padding included) is divided by
W and ring reduce-scattered; rank r receives the averaged gradient of its own shard.

Nothing here keeps state between calls; the param group (param_group.py) decides when
each step runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence, Tuple

import torch

from .. import api
from ..types import ReduceOp


@dataclass(frozen=True)
class FlatLayout:
    """Where each parameter of a unit sits in the flat padded vector."""

    shapes: Tuple[torch.Size, ...]
    world_size: int

    @property
    def numels(self) -> Tuple[int, ...]:
        return tuple(int(torch.Size(s).numel()) for s in self.shapes)

    @property
    def total_numel(self) -> int:
        return sum(self.numels)

    @property
    def shard_numel(self) -> int:
        return -(-self.total_numel // self.world_size)  # ceil(N / W)

    @property
    def padded_numel(self) -> int:
        return self.shard_numel * self.world_size

    @property
    def padding(self) -> int:
        return self.padded_numel - self.total_numel

    def split_sizes(self) -> List[int]:
        """Sizes for torch.split of the padded vector: every parameter, then the padding."""
        return list(self.numels) + [self.padding]


def make_layout(shapes: Sequence[Sequence[int]], world_size: int) -> FlatLayout:
    """The layout of parameters with these shapes over `world_size` ranks."""
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"cannot build shards for a world size of {world_size!r}; it must be an integer >= 1")
    return FlatLayout(tuple(torch.Size(s) for s in shapes), world_size)


def shard_from_params(params: Sequence[torch.Tensor], layout: FlatLayout, rank: int,
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Copy rank `rank`'s shard out of the full parameters (no full-size temporary), on
    the parameters' device."""
    if not 0 <= rank < layout.world_size:
        raise ValueError(f"rank {rank} is outside the world [0, {layout.world_size})")
    S = layout.shard_numel
    lo, hi = rank * S, (rank + 1) * S
    shard = torch.zeros(S, dtype=dtype, device=params[0].device if len(params) else "cpu")
    start = 0
    for p, n in zip(params, layout.numels):
        # overlap of [start, start + n) (this parameter) with [lo, hi) (this shard)
        a, b = max(start, lo), min(start + n, hi)
        if a < b:
            shard[a - lo:b - lo].copy_(p.detach().reshape(-1)[a - start:b - start])
        start += n
    return shard


def chunk_of(full: torch.Tensor, layout: FlatLayout, rank: int) -> torch.Tensor:
    """Rank `rank`'s chunk (a view) of a padded full vector."""
    S = layout.shard_numel
    return full[rank * S:(rank + 1) * S]


def alloc_unsharded(layout: FlatLayout, dtype: torch.dtype, device="cpu") -> torch.Tensor:
    """An unsharded padded buffer on `device`, created with its storage already freed."""
    full = torch.empty(layout.padded_numel, dtype=dtype, device=device)
    free_storage(full)
    return full


def storage_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def free_storage(full: torch.Tensor) -> int:
    """Release the memory behind `full` (shape and views survive); returns bytes freed."""
    storage = full.untyped_storage()
    freed = storage.nbytes()
    if freed:
        storage.resize_(0)
    return freed


def alloc_storage(full: torch.Tensor) -> int:
    """Give `full` its memory back (contents undefined); returns bytes allocated."""
    storage = full.untyped_storage()
    need = storage_bytes(full)
    if storage.nbytes() == need:
        return 0
    storage.resize_(need)
    return need


def all_gather_params(shard: torch.Tensor, full: torch.Tensor, group=None, async_op: bool = True):
    """Ring all-gather of every rank's shard into `full`, cast to `full.dtype`.

    `full` must have its storage (see alloc_storage). Returns the engine's Work
    (async_op=True) or None once done.
    """
    if full.numel() != shard.numel() * api.get_world_size(group):
        raise ValueError(f"all_gather_params: unsharded buffer has {full.numel()} elements, expected "
                         f"{api.get_world_size(group)} ranks x {shard.numel()}")
    src = shard.detach().to(full.dtype).contiguous()
    return api.all_gather_into_tensor(full.detach(), src, group=group, async_op=async_op)


def unflatten(full: torch.Tensor, layout: FlatLayout) -> List[torch.Tensor]:
    """Views of `full`, one per parameter, in their shapes (padding dropped).

    One split node covers the whole unit, so autograd gives `full` a single gradient
    per backward however many parameters the unit has.
    """
    parts = torch.split(full, layout.split_sizes())
    return [part.view(shape) for part, shape in zip(parts, layout.shapes)]


def reduce_scatter_grads(flat_grad: torch.Tensor, layout: FlatLayout, reduce_dtype: torch.dtype,
                         group=None, async_op: bool = True):
    """Average the unsharded gradient over the ranks and keep this rank's shard.

    Returns (work, shard): `shard` (reduce_dtype, shard_numel elements) holds the result
    once `work` is done (work is None for async_op=False). `flat_grad` is consumed: when
    it already has reduce_dtype it is scaled in place instead of copied.
    """
    if flat_grad.numel() != layout.padded_numel:
        raise ValueError(f"reduce_scatter_grads: gradient has {flat_grad.numel()} elements, the layout "
                         f"expects {layout.padded_numel}")
    grad = flat_grad.detach().to(reduce_dtype).contiguous()
    grad.div_(layout.world_size)  # divide before summing: 16-bit sums stay in range
    shard = torch.empty(layout.shard_numel, dtype=reduce_dtype, device=grad.device)
    work = api.reduce_scatter_tensor(shard, grad, op=ReduceOp.SUM, group=group, async_op=async_op)
    return work, shard


def average_across_replicas(shard_grad: torch.Tensor, replicate_group) -> None:
    """Hybrid sharding: the mean of this shard's gradient over the replicas holding the same
    shard (one all-reduce in the replicate group), in place."""
    replicas = api.get_world_size(replicate_group)
    if replicas > 1:
        shard_grad.div_(replicas)
        api.all_reduce(shard_grad, op=ReduceOp.SUM, group=replicate_group)


def accumulate_into(param: torch.Tensor, shard_grad: torch.Tensor) -> None:
    """param.grad += shard_grad (cast to the parameter's dtype); sets it if None.

    `shard_grad` is handed over: it may become param.grad itself.
    """
    g = shard_grad.to(param.dtype)
    if param.grad is None:
        param.grad = g
    else:
        param.grad.add_(g)
