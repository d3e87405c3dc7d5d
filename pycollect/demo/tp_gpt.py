"""The demo's GPT (gpt.py) in tensor-parallel form: the same model, each rank of a group
holding its slice of every block, of the vocabulary and of the output layer.

    tp_model = tensor_parallel_gpt(model, group)     # model: a GPT with the full weights

Embedding: vocabulary-parallel (each rank its range of token rows; one all-reduce).
Positions, layer norms: replicated. Blocks: pycollect.tp.ParallelBlock (heads and MLP
units split). Output: tied to the embedding (each rank its range of logits, one
all-gather), or a column-parallel head gathered the same way.
"""
from __future__ import annotations

import copy

import torch
from torch import nn

from ..tp import ColumnParallelLinear, ParallelBlock, VocabParallelEmbedding
from .gpt import GPT


class TensorParallelGPT(nn.Module):
    def __init__(self, model: GPT, group=None):
        super().__init__()
        self.cfg = model.cfg
        self.wte = VocabParallelEmbedding.from_full(model.wte, group)
        self.wpe = copy.deepcopy(model.wpe)
        self.blocks = nn.ModuleList(ParallelBlock.from_block(b, group) for b in model.blocks)
        self.ln_f = copy.deepcopy(model.ln_f)
        self.head = None if model.cfg.tied else ColumnParallelLinear.from_full(model.head, group, gather_output=True)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x)
        h = self.ln_f(x)
        return self.wte.logits(h) if self.head is None else self.head(h)


def tensor_parallel_gpt(model: GPT, group=None) -> TensorParallelGPT:
    """This rank's tensor-parallel slice of `model` (every rank passes the same model)."""
    return TensorParallelGPT(model, group)
