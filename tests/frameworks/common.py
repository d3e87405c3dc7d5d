"""What every framework script here shares: the model, the data, and how a rank writes its
final parameters. Identical initial weights on every rank (seed 0); each rank its own
fixed batches (so the gradient average matters); fp32 throughout.

A rank writes OUT/<tag>.rank<r>.pt: {"backend", "names", "flat", "counters"} where flat is
every parameter, in named_parameters() order, concatenated (float32, CPU), and counters
pycollect's engine count of calls per kind, all groups (empty for Gloo). tests/test_frameworks.py
compares the files of a "pycollect" run with those of a "gloo" run.
"""
from __future__ import annotations

import argparse
import os

import torch
from torch import nn

IN, HIDDEN, OUT_DIM = 16, 32, 4
ROWS = 8       # per rank per step
STEPS = 5
LR = 1e-2


def args():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("what", nargs="*")
    return p.parse_args()


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT_DIM))


def batch(rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(ROWS, IN, generator=g), torch.randn(ROWS, OUT_DIM, generator=g)


def loss_fn(out, y):
    return nn.functional.mse_loss(out, y)


def save(out: str, tag: str, rank: int, backend: str, named) -> None:
    named = [(n, p.detach().to("cpu", torch.float32).reshape(-1).clone()) for n, p in named]
    counters = engine_counters() if backend == "pycollect" else {}
    os.makedirs(out, exist_ok=True)
    torch.save({"backend": backend, "names": [n for n, _ in named],
                "flat": torch.cat([p for _, p in named]), "counters": counters},
               os.path.join(out, f"{tag}.rank{rank}.pt"))


def engine_counters() -> dict:
    """pycollect's engine count of calls per kind, summed over every group of this process
    (frameworks make their own: DeepSpeed's data-parallel group): proof it was not Gloo."""
    import pycollect.torch_backend as tb
    from torch.distributed import distributed_c10d as c10d

    total = {}
    for pg in list(c10d._world.pg_map):
        try:
            counts = tb.engine_group(pg).counters()
        except TypeError:  # a group of another backend
            continue
        for kind, n in counts.items():
            total[kind] = total.get(kind, 0) + n
    return total
