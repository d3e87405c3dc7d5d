"""Small models for the FSDP demo, tests and benchmark: a GPT-like decoder (token and
position embeddings, pre-norm transformer blocks, tied or untied head) and an MLP.

    model = GPT(GPTConfig(vocab=64, seq=16, dim=32, layers=2, heads=2, tied=True))
    logits = model(tokens)                      # tokens: (batch, seq) int64
    loss = lm_loss(logits, targets)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 64
    seq: int = 16
    dim: int = 32
    layers: int = 2
    heads: int = 2
    tied: bool = True


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        # no bias: a key bias gets an exactly-zero true gradient (softmax ignores it), and
        # Adam would blow the rounding noise in it up to full-size steps
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, heads, T, D/heads)
        return self.proj(y.transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab, cfg.dim)
        self.wpe = nn.Embedding(cfg.seq, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg.dim, cfg.heads) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        if cfg.tied:
            self.head.weight = self.wte.weight
        self.apply(_init_gpt2)


    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        T = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(T))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def _init_gpt2(module: nn.Module) -> None:
    """GPT-2's initialisation: N(0, 0.02) weights, zero biases (so the first loss is ~ln(vocab))."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy (computed in fp32 whatever the logits' dtype)."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def gpt_batch(cfg: GPTConfig, batch: int, seed: int):
    """(tokens, targets) of a deterministic random batch."""
    g = torch.Generator().manual_seed(seed)
    data = torch.randint(0, cfg.vocab, (batch, cfg.seq + 1), generator=g)
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def counting_batch(cfg: GPTConfig, batch: int, seed: int):
    """(tokens, targets) of sequences that count up from a random start (mod vocab): a task
    the model learns in a few steps, so a demo's loss visibly falls."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, cfg.vocab, (batch, 1), generator=g)
    data = (start + torch.arange(cfg.seq + 1)) % cfg.vocab
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def mlp(sizes=(8, 32, 32, 4)) -> nn.Sequential:
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
