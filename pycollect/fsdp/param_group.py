"""ParamGroup: one sharding unit's parameters as a flat local shard plus an unsharded
buffer that exists only while the unit computes.

The original parameters are removed from their modules. The unit's module gets one
nn.Parameter instead, `_fsdp_shard`: this rank's flat slice (fp32, padded so every
rank holds the same number of elements), which is what the optimizer sees. Before the
unit computes, the shards are gathered into `full` (in the compute dtype) and each
original attribute (e.g. `linear.weight`) is set to a view of `full`. `full` is an
autograd leaf, so the views' gradients land summed in `full.grad`, once per backward;
a post-accumulate-grad hook on `full` then tells the owner that the unit's backward is
over. The group only holds state (sharded / gathering / unsharded, the pending
works); the work itself is done by the stateless functions in collectives.py, and the
order of calls is decided by the FSDP state (state.py).
"""
from __future__ import annotations

from typing import Callable, List, Optional

import torch
import torch.nn as nn

from . import collectives as C
from .memory_stats import UnshardedTracker
from .mixed_precision import MixedPrecision
from .wrap_policy import UnitPlan

SHARD_ATTR = "_fsdp_shard"


class ParamGroup:
    SHARDED, GATHERING, UNSHARDED = "sharded", "gathering", "unsharded"

    def __init__(self, plan: UnitPlan, group, rank: int, world_size: int, mp: MixedPrecision,
                 tracker: UnshardedTracker, trace: Optional[list] = None, replicate_group=None):
        self.name = plan.name or "<root>"
        self.module = plan.module
        self.group = group
        self.replicate_group = replicate_group  # hybrid sharding: the same shard on other replicas
        self.tracker = tracker
        self.trace = trace if trace is not None else []
        params = [ref.param for ref in plan.params]
        self.holders = [list(ref.holders) for ref in plan.params]  # [(module, attr, fqn)] per param
        self.fqns = [h[0][2] for h in self.holders]
        dtype, requires_grad = self._check_params(params)
        self.layout = C.make_layout([p.shape for p in params], world_size)
        self.shard = nn.Parameter(C.shard_from_params(params, self.layout, rank, dtype), requires_grad)
        self.compute_dtype = mp.compute_dtype(dtype)
        self.reduce_dtype = mp.grad_reduce_dtype(dtype)
        self.full = C.alloc_unsharded(self.layout, self.compute_dtype, self.shard.device)
        # while sharded, each attribute holds a data-less stand-in of the right shape:
        # a view of freed storage would crash whoever reads it.
        self.placeholders = [torch.empty(s, dtype=self.compute_dtype, device="meta") for s in self.layout.shapes]
        self.on_grad_ready: Optional[Callable[["ParamGroup"], None]] = None
        if requires_grad:
            self.full.requires_grad_(True)
            self.full.register_post_accumulate_grad_hook(self._grad_ready)
        self.state = self.SHARDED
        self._gather_work = None
        self._reduce = None  # (work, reduced shard) in flight
        self._local_grad: Optional[torch.Tensor] = None  # unsharded grad kept by no_sync

    # -- setup ---------------------------------------------------------------
    def _check_params(self, params: List[nn.Parameter]):
        if not params:
            return torch.float32, False
        dtypes = {p.dtype for p in params}
        bad = [(f, p.dtype) for f, p in zip(self.fqns, params) if not p.is_floating_point()]
        if bad:
            raise TypeError(f"unit {self.name!r}: parameters {bad} are not floating point; FSDP shards float parameters")
        if len(dtypes) > 1:
            raise TypeError(f"unit {self.name!r} mixes parameter dtypes {sorted(map(str, dtypes))}; "
                            "cast the model to one dtype first")
        grads = {p.requires_grad for p in params}
        if len(grads) > 1:
            frozen = [f for f, p in zip(self.fqns, params) if not p.requires_grad]
            raise ValueError(f"unit {self.name!r} mixes frozen parameters {frozen} with trainable ones; "
                             "put frozen parameters in their own unit (wrap policy)")
        return dtypes.pop(), grads.pop()

    def install(self) -> None:
        """Replace the original parameters by the shard (and shape-only stand-ins)."""
        for holders in self.holders:
            for module, attr, _ in holders:
                del module._parameters[attr]
        if self.layout.total_numel:
            self.module.register_parameter(SHARD_ATTR, self.shard)
        self._point_at(self.placeholders)

    @property
    def empty(self) -> bool:
        return self.layout.total_numel == 0

    # -- gather / free ---------------------------------------------------------
    def unshard(self) -> None:
        """Start gathering the full parameters (async); no-op unless sharded."""
        if self.state != self.SHARDED or self.empty:
            return
        self.tracker.allocated(self.name, C.alloc_storage(self.full))
        self._gather_work = C.all_gather_params(self.shard, self.full, self.group, async_op=True)
        self.state = self.GATHERING
        self.trace.append(("all_gather", self.name))

    def wait_unshard(self) -> None:
        if self.state == self.GATHERING:
            self._gather_work.wait()
            self._gather_work = None
            self.trace.append(("gathered", self.name))
        if not self.empty:
            self.state = self.UNSHARDED

    def set_views(self) -> None:
        """Point every original attribute at its view of `full` (a fresh autograd node)."""
        self._point_at(C.unflatten(self.full, self.layout))

    def _point_at(self, tensors) -> None:
        for t, holders in zip(tensors, self.holders):
            for module, attr, _ in holders:
                setattr(module, attr, t)

    def reshard(self) -> None:
        """Free the unsharded parameters (waiting for a gather still in flight)."""
        if self.state == self.GATHERING:
            self.wait_unshard()
        if self.state == self.UNSHARDED:
            self._point_at(self.placeholders)
            self.tracker.freed(self.name, C.free_storage(self.full))
            self.state = self.SHARDED
            self.trace.append(("free", self.name))

    # -- gradients -----------------------------------------------------------
    def _grad_ready(self, full: torch.Tensor) -> None:
        if self.on_grad_ready is not None:
            self.on_grad_ready(self)

    def take_grad(self) -> Optional[torch.Tensor]:
        grad, self.full.grad = self.full.grad, None
        return grad

    def keep_local(self, grad: torch.Tensor) -> None:
        """no_sync: add the unsharded gradient to a local fp32 sum, no communication."""
        grad = grad.to(self.shard.dtype)  # the group owns `grad` (taken from full.grad)
        if self._local_grad is None:
            self._local_grad = grad
        else:
            self._local_grad.add_(grad)

    def reduce_grad(self, grad: torch.Tensor) -> None:
        """Start the reduce-scatter of the unsharded gradient (plus any no_sync sum)."""
        if self._local_grad is not None:
            grad = self._local_grad.add_(grad.to(self._local_grad.dtype))
            self._local_grad = None
        self._reduce = C.reduce_scatter_grads(grad, self.layout, self.reduce_dtype, self.group, async_op=True)
        self.trace.append(("reduce_scatter", self.name))

    @property
    def reducing(self) -> bool:
        return self._reduce is not None

    def finish_reduce(self) -> None:
        """Wait for the reduce-scatter and add the result to the shard's .grad."""
        if self._reduce is None:
            return
        work, reduced = self._reduce
        self._reduce = None
        work.wait()
        if self.replicate_group is not None:
            C.average_across_replicas(reduced, self.replicate_group)
            self.trace.append(("all_reduce", self.name))
        C.accumulate_into(self.shard, reduced)
        self.trace.append(("reduced", self.name))

    def __repr__(self) -> str:
        L = self.layout
        return (f"ParamGroup({self.name!r}, {len(self.fqns)} params, {L.total_numel} elements, shard "
                f"{L.shard_numel} + padding {L.padding}, {self.state})")
