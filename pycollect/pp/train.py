"""A few training steps of a pipeline, for the lesson's demo (`pycollect demo --paradigm pp`).

    from pycollect.demo.gpt import GPT, GPTConfig, counting_batch, lm_loss
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab=64, seq=16, dim=32, layers=4, tied=False))   # the same on every rank
    batches = [counting_batch(model.cfg, 8, seed=s) for s in range(steps)]
    out = train_steps(gpt_pieces(model), batches, lm_loss, micro_batches=4, schedule="1f1b")
    out["losses"], out["step_times"], out["state_bytes"], out["bubble"].table()

The model, data and loss come in as arguments, so pp never imports the demo package
(which sits above it); gpt_pieces() turns any GPT-shaped model into layers.
"""
from __future__ import annotations

import time
from typing import Callable, Optional, Sequence, Tuple

import torch
from torch import nn

from .. import api
from ..fsdp.memory_stats import model_state_bytes
from .pipeline import Pipeline
from .split import split_stages

OPTIMIZERS = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}


def train_steps(layers: Sequence[nn.Module], batches: Sequence[Tuple[torch.Tensor, torch.Tensor]],
                loss_fn: Callable, micro_batches: int = 4, schedule: str = "1f1b", group=None,
                optimizer: str = "adam", lr: float = 1e-2, balance: Optional[Sequence[int]] = None,
                warmup_steps: int = 1) -> dict:
    """Cut `layers` into one stage per rank of `group`, train one step per (inputs, targets)
    batch, and return on every rank:

    losses       [float] the mean loss of each step (the same on every rank)
    step_times   [float] seconds per step on this rank (pipeline step + optimizer step)
    state_bytes  int     this rank's parameter + gradient + optimizer-state bytes
    bubble       BubbleStats over the steps after the first `warmup_steps` (all steps if
                 there are no more): per stage compute/wall, .measured, .textbook, .table()
    stage        int     this rank's stage; stage_layers: its layers' class names
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer={optimizer!r}: choose one of {sorted(OPTIMIZERS)}")
    stages = split_stages(layers, api.get_world_size(group), balance)
    pipe = Pipeline(stages, loss_fn, micro_batches, schedule, group)
    opt = OPTIMIZERS[optimizer](pipe.parameters(), lr=lr)
    losses, times = [], []
    for step, (inputs, targets) in enumerate(batches):
        if step == warmup_steps:
            pipe.reset_bubble()  # the first steps pay for allocation and warm caches
        start = time.perf_counter()
        opt.zero_grad()
        losses.append(pipe.step(inputs, targets))
        opt.step()
        times.append(time.perf_counter() - start)
    return {
        "losses": losses,
        "step_times": times,
        "state_bytes": model_state_bytes(pipe.module, opt)["total"],
        "bubble": pipe.bubble(),
        "stage": pipe.stage,
        "stage_layers": [type(m).__name__ for m in pipe.module],
    }
