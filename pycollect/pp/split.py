"""Cutting a sequential model into pipeline stages.

    stages = split_stages(layers, num_stages)             # contiguous, balanced by parameter count
    stages = split_stages(layers, 3, balance=[2, 1, 2])   # or by the number of layers per stage
    layers = gpt_pieces(model)   # a GPT-shaped model as [embedding, block, ..., block, final]

A pipeline stage is a contiguous run of layers (an nn.Sequential), so the activation
that leaves one stage is the whole input of the next: one tensor per micro-batch on the
wire. Balancing by parameter count is GPipe's default heuristic (Huang et al. 2019,
section 2.2: partition "to minimise the variance in the estimated cost"); parameters
stand in for compute, which holds for transformer blocks of one width.

Stages may not share a parameter: each rank holds one stage and steps its own
optimizer, so a weight in two stages would drift apart. A GPT with a tied embedding and
head is refused here; Megatron-LM instead all-reduces the tied weight's gradient between
the first and last stage each step. We refuse rather than add that second kind of
traffic: build the model with GPTConfig(tied=False).
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Union

import torch
from torch import nn


def split_stages(layers: Union[Sequence[nn.Module], nn.Sequential], num_stages: int,
                 balance: Optional[Sequence[int]] = None) -> List[nn.Sequential]:
    """`layers` cut into `num_stages` contiguous nn.Sequential stages (sharing the modules,
    not copies). `balance` gives the number of layers per stage; without it the cut
    minimises the largest stage's parameter count. Raises ValueError for more stages than
    layers, a bad balance, or a parameter that two stages share (a tied model)."""
    layers = list(layers)
    if not isinstance(num_stages, int) or num_stages < 1:
        raise ValueError(f"num_stages must be a positive int, got {num_stages!r}")
    if num_stages > len(layers):
        raise ValueError(f"cannot split {len(layers)} layers into {num_stages} stages: "
                         f"every stage needs at least one layer")
    if balance is None:
        balance = balance_by_params(layers, num_stages)
    balance = list(balance)
    if len(balance) != num_stages or any(not isinstance(b, int) or b < 1 for b in balance) \
            or sum(balance) != len(layers):
        raise ValueError(f"balance={balance} must be {num_stages} positive layer counts summing to "
                         f"{len(layers)} (the number of layers)")
    stages, start = [], 0
    for size in balance:
        stages.append(nn.Sequential(*layers[start:start + size]))
        start += size
    _refuse_shared_parameters(stages)
    return stages


def balance_by_params(layers: Sequence[nn.Module], num_stages: int) -> List[int]:
    """Layers per stage of the contiguous cut whose largest stage has the fewest parameters
    (the linear-partition dynamic programme; ties go to the earliest cut)."""
    weights = [sum(p.numel() for p in layer.parameters()) for layer in layers]
    n = len(weights)
    prefix = [0]
    for w in weights:
        prefix.append(prefix[-1] + w)
    inf = float("inf")
    # best[k][j]: the smallest possible largest stage when layers[:j] form k stages
    best = [[inf] * (n + 1) for _ in range(num_stages + 1)]
    cut = [[0] * (n + 1) for _ in range(num_stages + 1)]
    best[0][0] = 0
    for k in range(1, num_stages + 1):
        for j in range(k, n + 1):
            for i in range(k - 1, j):
                cost = max(best[k - 1][i], prefix[j] - prefix[i])
                if cost < best[k][j]:
                    best[k][j], cut[k][j] = cost, i
    sizes, j = [], n
    for k in range(num_stages, 0, -1):
        sizes.append(j - cut[k][j])
        j = cut[k][j]
    return sizes[::-1]


def _refuse_shared_parameters(stages: Sequence[nn.Module]) -> None:
    owner = {}
    for s, stage in enumerate(stages):
        for name, p in stage.named_parameters(remove_duplicate=False):
            first = owner.setdefault(id(p), (s, name))
            if first[0] != s:
                raise ValueError(
                    f"stage {first[0]} ({first[1]}) and stage {s} ({name}) share one parameter, e.g. a tied "
                    f"embedding and head: pipeline stages cannot share weights (each rank steps its own); "
                    f"build the model untied (GPTConfig(tied=False)) or keep both layers in one stage")


class GPTEmbedding(nn.Module):
    """The first piece of a GPT: token plus position embedding, (batch, seq) -> (batch, seq, dim)."""

    def __init__(self, wte: nn.Embedding, wpe: nn.Embedding):
        super().__init__()
        self.wte, self.wpe = wte, wpe

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))


class GPTFinal(nn.Module):
    """The last piece of a GPT: final LayerNorm and the head, (batch, seq, dim) -> logits."""

    def __init__(self, ln_f: nn.Module, head: nn.Module):
        super().__init__()
        self.ln_f, self.head = ln_f, head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln_f(x))


def gpt_pieces(model: nn.Module) -> List[nn.Module]:
    """[embedding, block 0, ..., block n-1, final] of a GPT-shaped model (attributes wte,
    wpe, blocks, ln_f, head, as pycollect.demo.gpt.GPT has), sharing its modules:
    nn.Sequential(*gpt_pieces(model)) computes model(tokens). Duck-typed, so pp does not
    import the demo package that sits above it."""
    missing = [a for a in ("wte", "wpe", "blocks", "ln_f", "head") if not hasattr(model, a)]
    if missing:
        raise TypeError(f"gpt_pieces needs a GPT-shaped model; {type(model).__name__} lacks {missing}")
    return [GPTEmbedding(model.wte, model.wpe), *model.blocks, GPTFinal(model.ln_f, model.head)]
