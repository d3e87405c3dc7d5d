"""Sparse all-reduce (SUM), as Gloo offers it: every rank's COO indices and values are
all-gathered on the engine and the sum is formed locally, in rank order, so every rank
holds the same result.

Each rank coalesces its tensor; the ranks all-gather their non-zero counts, then their
indices and values padded to the largest count (the engine's all-gather moves equal
sizes), and every rank sums the sparse tensors of ranks 0, 1, ... . The input tensor
gets the (coalesced) result in place, as with Gloo.
"""
from __future__ import annotations

import torch

from .. import api
from ..types import ReduceOp


def sparse_all_reduce(tensor: torch.Tensor, op: ReduceOp, engine) -> None:
    if op != ReduceOp.SUM:
        raise ValueError(f"pycollect backend: sparse allreduce supports SUM only, not {op.name}")
    n = engine.size
    local = tensor.coalesce()
    indices, values = local.indices().contiguous(), local.values().contiguous()
    nnz = torch.tensor([indices.shape[1]], dtype=torch.int64)
    counts = torch.empty(n, dtype=torch.int64)
    api.all_gather_into_tensor(counts, nnz, group=engine)
    width = int(counts.max())
    row = values.shape[1:]
    pad_idx = torch.zeros((indices.shape[0], width), dtype=torch.int64)
    pad_idx[:, : indices.shape[1]] = indices
    pad_val = torch.zeros((width, *row), dtype=values.dtype)
    pad_val[: values.shape[0]] = values
    all_idx = torch.empty((n, *pad_idx.shape), dtype=torch.int64)
    all_val = torch.empty((n, *pad_val.shape), dtype=values.dtype)
    api.all_gather_into_tensor(all_idx, pad_idx.contiguous(), group=engine)
    api.all_gather_into_tensor(all_val, pad_val.contiguous(), group=engine)
    total = None
    for r in range(n):
        k = int(counts[r])
        part = torch.sparse_coo_tensor(all_idx[r][:, :k], all_val[r][:k], local.shape)
        total = part if total is None else total + part
    tensor.copy_(total.coalesce())
