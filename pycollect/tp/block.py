"""A tensor-parallel pre-norm transformer block: the attention heads and the MLP's hidden
units split across the ranks of a group, two all-reduces forward and two backward.

    x = x + proj(attention(qkv(ln1(x))))     qkv: column-parallel by heads, proj: row-parallel
    x = x + fc2(gelu(fc1(ln2(x))))           fc1: column-parallel,          fc2: row-parallel

With H heads and t ranks, rank i keeps heads [i H/t, (i+1) H/t): its rows of the q, k
and v projections and the matching columns of `proj`; attention itself needs nothing
from the other ranks, and proj's row-parallel sum joins the heads. The layer norms are
replicated (their inputs and gradients are the same on every rank).

ParallelBlock.from_block takes a block with the layout of pycollect.demo.gpt.Block (ln1,
attn.qkv, attn.proj, attn.heads, ln2, mlp = [Linear, GELU, Linear]) and keeps this
rank's slices, so a tensor-parallel model can start from a single-process one.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from .. import api
from .layers import ColumnParallelLinear, RowParallelLinear, tp_degree


def _head_rows(dim: int, heads: int, group) -> torch.Tensor:
    """Rows of a fused [q; k; v] projection (3 x heads x head_dim) that carry this rank's heads."""
    tp, rank, hd = api.get_world_size(group), api.get_rank(group), dim // heads
    mine = range(rank * heads // tp, (rank + 1) * heads // tp)
    return torch.tensor([w * dim + h * hd + j for w in range(3) for h in mine for j in range(hd)])


class ParallelSelfAttention(nn.Module):
    def __init__(self, qkv: ColumnParallelLinear, proj: RowParallelLinear, local_heads: int):
        super().__init__()
        self.qkv, self.proj, self.local_heads = qkv, proj, local_heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        h = self.local_heads
        q, k, v = self.qkv(x).view(B, T, 3, h, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, local heads, T, head_dim)
        return self.proj(y.transpose(1, 2).reshape(B, T, -1))


class ParallelBlock(nn.Module):
    def __init__(self, ln1: nn.Module, attn: ParallelSelfAttention, ln2: nn.Module, mlp: nn.Sequential):
        super().__init__()
        self.ln1, self.attn, self.ln2, self.mlp = ln1, attn, ln2, mlp

    @classmethod
    def from_block(cls, block: nn.Module, group=None) -> "ParallelBlock":
        dim, heads = block.attn.qkv.in_features, block.attn.heads
        tp = tp_degree(group, "ParallelBlock", heads=heads, mlp_hidden=block.mlp[0].out_features)
        qkv = ColumnParallelLinear.from_full(block.attn.qkv, group, index=_head_rows(dim, heads, group))
        attn = ParallelSelfAttention(qkv, RowParallelLinear.from_full(block.attn.proj, group), heads // tp)
        mlp = nn.Sequential(ColumnParallelLinear.from_full(block.mlp[0], group), nn.GELU(),
                            RowParallelLinear.from_full(block.mlp[2], group))
        return cls(copy.deepcopy(block.ln1), attn, copy.deepcopy(block.ln2), mlp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))
