"""The models and synthetic data of `pycollect demo`, seeded so that every run is the same.

    model = build_model("mlp", seed)
    x, y = batch("mlp", step, seed, world_size, rank)    # this rank's slice of the step's batch
    loss = loss_fn("mlp", model(x), y)

Targets come from a fixed rule (a frozen "teacher" network, or token sequences that
count up with a per-sequence stride), so the loss visibly falls within a few dozen steps.
"""
from __future__ import annotations

import functools
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import nn

from . import MODELS, ROWS_PER_RANK
from .gpt import GPT, GPTConfig

_VOCAB, _CTX = 64, 32


def _gpt_tiny() -> nn.Module:
    return GPT(GPTConfig(vocab=_VOCAB, seq=_CTX, dim=64, layers=2, heads=4, tied=False))


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def _cnn() -> nn.Module:  # 3x16x16 images; BatchNorm buffers exercise broadcast_buffers
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


def build_model(name: str, seed: int) -> nn.Module:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    torch.manual_seed(seed)
    return {"mlp": _mlp, "cnn": _cnn, "gpt-tiny": _gpt_tiny}[name]()


@functools.lru_cache(maxsize=4)
def _teacher(name: str, seed: int) -> nn.Module:
    model = build_model(name, seed + 12345)
    return model.eval().requires_grad_(False)


def batch(name: str, step: int, seed: int, world_size: int, rank: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """This rank's rows of step `step`'s global batch (ROWS_PER_RANK[name] x world_size rows)."""
    rows = ROWS_PER_RANK[name]
    g = torch.Generator().manual_seed(seed * 100003 + step)
    n = rows * world_size
    if name == "gpt-tiny":
        # Each sequence counts up from a random token with a stride of 1, 2 or 3 (mod the
        # vocabulary): the next token follows from the last two.
        start = torch.randint(0, _VOCAB, (n, 1), generator=g)
        stride = torch.randint(1, 4, (n, 1), generator=g)
        seq = (start + stride * torch.arange(_CTX + 1)) % _VOCAB
        x, y = seq[:, :-1], seq[:, 1:]
    else:
        x = torch.randn(n, 64, generator=g) if name == "mlp" else torch.randn(n, 3, 16, 16, generator=g)
        with torch.no_grad():
            y = _teacher(name, seed)(x).argmax(-1)
    sl = slice(rank * rows, (rank + 1) * rows)
    return x[sl].contiguous(), y[sl].contiguous()


def loss_fn(name: str, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
