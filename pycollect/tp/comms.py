"""The communication of tensor parallelism: four autograd functions, each the conjugate
of another (Megatron-LM, Shoeybi et al. 2019, section 3, operators f and g).

    copy_to_tp(x)        forward: identity            backward: all-reduce the gradient
    reduce_from_tp(x)    forward: all-reduce          backward: identity
    gather_from_tp(x)    forward: all-gather (last dim)  backward: keep this rank's slice
    split_to_tp(x)       forward: keep this rank's slice  backward: all-gather

Why conjugate: a column-parallel layer Y_i = X A_i needs the same X on every rank
(copy_to_tp: nothing moves forward), but every rank's dL/dX is only a partial sum over
its columns, so backward all-reduces it. A row-parallel layer Z = sum_i Y_i B_i sums
the ranks' partial products forward (reduce_from_tp), and its input gradient is already
local. With 2 ranks and an MLP X -> GeLU(X A) B split as A = [A_0 A_1] by columns and
B = [B_0; B_1] by rows: rank i computes GeLU(X A_i) B_i, and one all-reduce forward
(g) plus one backward (f) is all the MLP communicates.

`group` is a pycollect ProcessGroup (None: the default group); every rank of it must
call these in the same order.
"""
from __future__ import annotations

import torch

from .. import api


def _all_reduce(x: torch.Tensor, group) -> torch.Tensor:
    out = x.contiguous().clone()
    api.all_reduce(out, group=group)
    return out


def _all_gather_last(x: torch.Tensor, group) -> torch.Tensor:
    world = api.get_world_size(group)
    x = x.contiguous()
    flat = torch.empty(world * x.numel(), dtype=x.dtype)
    api.all_gather_into_tensor(flat, x.reshape(-1), group=group)
    return torch.cat(flat.view(world, *x.shape).unbind(0), dim=-1)


def _my_slice_last(x: torch.Tensor, group) -> torch.Tensor:
    world, rank = api.get_world_size(group), api.get_rank(group)
    if x.shape[-1] % world:
        raise ValueError(f"last dimension {x.shape[-1]} is not divisible by the tensor-parallel degree {world}")
    return x.chunk(world, dim=-1)[rank].contiguous()


def _identity(x: torch.Tensor, group) -> torch.Tensor:
    return x.view_as(x)


def _operator(name: str, forward, backward):
    """An autograd function that runs forward(x, group) and, on the gradient, backward(grad, group)."""
    def fwd(ctx, x, group):
        ctx.group = group
        return forward(x, group)

    def bwd(ctx, grad):
        return backward(grad, ctx.group), None

    return type(name, (torch.autograd.Function,), {"forward": staticmethod(fwd), "backward": staticmethod(bwd)})


# The table of the module docstring: each operator and its conjugate.
_CopyToTP = _operator("_CopyToTP", _identity, _all_reduce)
_ReduceFromTP = _operator("_ReduceFromTP", _all_reduce, _identity)
_GatherFromTP = _operator("_GatherFromTP", _all_gather_last, _my_slice_last)
_SplitToTP = _operator("_SplitToTP", _my_slice_last, _all_gather_last)


def copy_to_tp(x: torch.Tensor, group=None) -> torch.Tensor:
    return _CopyToTP.apply(x, group)


def reduce_from_tp(x: torch.Tensor, group=None) -> torch.Tensor:
    return _ReduceFromTP.apply(x, group)


def gather_from_tp(x: torch.Tensor, group=None) -> torch.Tensor:
    return _GatherFromTP.apply(x, group)


def split_to_tp(x: torch.Tensor, group=None) -> torch.Tensor:
    return _SplitToTP.apply(x, group)
