"""Megatron-style parallel layers: each rank of a tensor-parallel group holds a slice of
the weight and computes the matching slice of the result (Shoeybi et al. 2019).

    ColumnParallelLinear   W split by output features (rows of weight); y_i = x W_i^T.
                           Input replicated (copy_to_tp); output split, or gathered.
    RowParallelLinear      W split by input features (columns of weight); the ranks'
                           partial products are summed (reduce_from_tp); bias added once.
    VocabParallelEmbedding the vocabulary split in contiguous ranges: each rank looks up
                           the tokens in its range, zeros elsewhere, and the sum over
                           ranks (reduce_from_tp) is the full embedding.

Each has `from_full(...)`, which takes this rank's slice of an ordinary layer, so that a
tensor-parallel model can start from exactly the weights of a single-process one.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .. import api
from .comms import copy_to_tp, gather_from_tp, reduce_from_tp, split_to_tp


def tp_degree(group, what: str, **sizes: int) -> int:
    """The group's size; ValueError naming `what` if any of `sizes` is not divisible by it."""
    world = api.get_world_size(group)
    for name, size in sizes.items():
        if size % world:
            raise ValueError(f"{what}: {name}={size} is not divisible by the tensor-parallel degree {world}")
    return world


def _rows(full: torch.Tensor, group, index: Optional[torch.Tensor]) -> torch.Tensor:
    """This rank's rows of `full` (dim 0): its chunk, or `index` when the split is not contiguous."""
    if index is not None:
        return full.detach().index_select(0, index).clone()
    return full.detach().chunk(api.get_world_size(group), dim=0)[api.get_rank(group)].clone()


class _ShardedLinear(nn.Module):
    """This rank's weight (normal, std 0.02, as the full layer's init) and bias (zeros; none
    for bias_features 0) of a linear layer split over the group."""

    def __init__(self, group, weight_shape, bias_features: int):
        super().__init__()
        self.group = group
        self.weight = nn.Parameter(torch.empty(*weight_shape))
        self.bias = nn.Parameter(torch.zeros(bias_features)) if bias_features else None
        nn.init.normal_(self.weight, std=0.02)


class ColumnParallelLinear(_ShardedLinear):
    def __init__(self, in_features: int, out_features: int, bias: bool = True, gather_output: bool = False,
                 group=None):
        per = out_features // tp_degree(group, "ColumnParallelLinear", out_features=out_features)
        super().__init__(group, (per, in_features), per if bias else 0)
        self.gather_output = gather_output

    @classmethod
    def from_full(cls, linear: nn.Linear, group=None, gather_output: bool = False,
                  index: Optional[torch.Tensor] = None) -> "ColumnParallelLinear":
        """This rank's output features of `linear` (its chunk, or the rows in `index`)."""
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, gather_output, group)
        with torch.no_grad():
            layer.weight.copy_(_rows(linear.weight, group, index))
            if linear.bias is not None:
                layer.bias.copy_(_rows(linear.bias, group, index))
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(copy_to_tp(x, self.group), self.weight, self.bias)
        return gather_from_tp(y, self.group) if self.gather_output else y


class RowParallelLinear(_ShardedLinear):
    def __init__(self, in_features: int, out_features: int, bias: bool = True, input_is_parallel: bool = True,
                 group=None):
        per = in_features // tp_degree(group, "RowParallelLinear", in_features=in_features)
        super().__init__(group, (out_features, per), out_features if bias else 0)  # bias: replicated, added once
        self.input_is_parallel = input_is_parallel

    @classmethod
    def from_full(cls, linear: nn.Linear, group=None, input_is_parallel: bool = True) -> "RowParallelLinear":
        """This rank's input features of `linear` (its chunk of the weight's columns)."""
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, input_is_parallel, group)
        with torch.no_grad():
            layer.weight.copy_(_rows(linear.weight.t(), group, None).t())
            if linear.bias is not None:
                layer.bias.copy_(linear.bias.detach())
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.input_is_parallel:
            x = split_to_tp(x, self.group)
        y = reduce_from_tp(F.linear(x, self.weight), self.group)
        return y if self.bias is None else y + self.bias


class VocabParallelEmbedding(nn.Module):
    def __init__(self, num_embeddings: int, embedding_dim: int, group=None):
        super().__init__()
        tp = tp_degree(group, "VocabParallelEmbedding", num_embeddings=num_embeddings)
        per = num_embeddings // tp
        self.group = group
        self.start, self.end = api.get_rank(group) * per, (api.get_rank(group) + 1) * per
        self.weight = nn.Parameter(torch.empty(per, embedding_dim))
        nn.init.normal_(self.weight, std=0.02)

    @classmethod
    def from_full(cls, embedding: nn.Embedding, group=None) -> "VocabParallelEmbedding":
        layer = cls(embedding.num_embeddings, embedding.embedding_dim, group)
        with torch.no_grad():
            layer.weight.copy_(_rows(embedding.weight, group, None))
        return layer

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        outside = (ids < self.start) | (ids >= self.end)
        local = torch.where(outside, torch.zeros_like(ids), ids - self.start)
        out = F.embedding(local, self.weight) * (~outside).unsqueeze(-1).to(self.weight.dtype)
        return reduce_from_tp(out, self.group)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """The tied output layer: h @ E^T over the full vocabulary (each rank computes its
        range of logits, one all-gather joins them)."""
        return gather_from_tp(F.linear(copy_to_tp(h, self.group), self.weight), self.group)
