"""Pipeline: each rank of a group holds one stage and runs one schedule per batch.

    stages = split_stages(layers, pc.get_world_size(group))     # the same cut on every rank
    pipe = Pipeline(stages, loss_fn, micro_batches=4, schedule="1f1b", group=group)
    opt = torch.optim.Adam(pipe.parameters())                   # this rank's stage only
    for tokens, targets in batches:                             # every rank gets the whole batch
        opt.zero_grad()
        loss = pipe.step(tokens, targets)                       # mean loss, on every rank
        opt.step()
    print(pipe.bubble().table())                                # collective: every stage's idle time

Stage s = the rank's index in the group. A step cuts the batch into m equal
micro-batches; stage 0 feeds them to its layers, stage p-1 applies `loss_fn(output,
targets)` and backpropagates loss/m, and the activations (forward) and their gradients
(backward) cross between neighbours through communications.StageLinks. Gradients
accumulate in .grad over the m micro-batches, so for a loss that is a mean over rows the
step's gradient is the gradient of the whole batch's loss: one optimizer step equals one
process training on the whole batch (up to float rounding in the sum).

Misuse raises ValueError on every rank of the group, before any activation is sent:
construction all-gathers a signature of the layout (stage count, each stage's layers and
parameter count, m, schedule) and compares it across ranks (pycollect._sync's
first_difference), then checks it against the group's size; step() checks that m
divides the batch on every rank, which is why every rank is given the batch.
"""
from __future__ import annotations

import time
from typing import Callable, List, Optional, Sequence

import torch
from torch import nn

from .. import api
from .._sync import broadcast_from_root, first_difference
from .bubble import BubbleStats, gather_bubble
from .communications import StageLinks
from .schedules import SCHEDULES, peak_in_flight, schedule_order


def layout_lines(stages: Sequence[nn.Module], micro_batches: int, schedule: str) -> List[str]:
    """What every rank of a pipeline must agree on, one line each."""
    lines = [f"stages={len(stages)}", f"micro_batches={micro_batches}", f"schedule={schedule}"]
    for s, stage in enumerate(stages):
        kinds = ",".join(type(m).__name__ for m in (stage.children() if isinstance(stage, nn.Sequential) else [stage]))
        lines.append(f"stage {s}: {sum(p.numel() for p in stage.parameters())} parameters in [{kinds}]")
    return lines


class Pipeline(nn.Module):
    """This rank's stage of a pipeline over `group` (None: the default group)."""

    def __init__(self, stages: Sequence[nn.Module], loss_fn: Callable, micro_batches: int,
                 schedule: str = "1f1b", group=None):
        super().__init__()
        world = api.get_world_size(group)  # raises on a rank outside the group
        self.ranks: List[int] = list(range(world)) if group is None else list(group.ranks)
        problem = first_difference(layout_lines(stages, micro_batches, schedule), group, noun="pipeline layout line")
        if problem:
            raise ValueError(f"the ranks disagree on the pipeline: {problem}")
        if len(stages) != world:
            raise ValueError(f"{len(stages)} stages on a group of {world} ranks: a pipeline needs one rank per stage")
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule={schedule!r}: choose one of {sorted(SCHEDULES)}")
        if not isinstance(micro_batches, int) or micro_batches < 1:
            raise ValueError(f"micro_batches must be a positive int, got {micro_batches!r}")
        self.group, self.loss_fn, self.schedule, self.micro_batches = group, loss_fn, schedule, micro_batches
        self.stage = api.get_rank(group)
        self.num_stages = world
        self.module = stages[self.stage]
        self.order = schedule_order(schedule, world, micro_batches, self.stage)
        self.links = StageLinks(group, self.ranks, self.stage)
        self._announced: Optional[tuple] = None  # (shape, dtype) of the micro-batch the header describes
        self.reset_bubble()

    @property
    def is_first(self) -> bool:
        return self.stage == 0

    @property
    def is_last(self) -> bool:
        return self.stage == self.num_stages - 1

    def forward(self, *args, **kwargs):
        raise RuntimeError("a Pipeline runs a whole schedule per batch: call pipe.step(inputs, targets)")

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> float:
        """Forward and backward of one batch under the schedule; returns the mean loss over the
        micro-batches on every rank. Gradients add into .grad (call zero_grad before)."""
        m = self.micro_batches
        for what, t in (("inputs", inputs), ("targets", targets)):
            if not isinstance(t, torch.Tensor):
                raise ValueError(f"step({what}=...) must be a tensor on every stage (it sizes the micro-batches)")
        if inputs.shape[0] != targets.shape[0] or inputs.shape[0] % m:
            raise ValueError(f"a batch of {inputs.shape[0]} inputs and {targets.shape[0]} targets cannot be cut "
                             f"into {m} equal micro-batches")
        xs, ys = inputs.chunk(m), targets.chunk(m)
        key = (tuple(xs[0].shape), xs[0].dtype)
        announce, self._announced = key != self._announced, key
        wait_before, compute, losses = self.links.wait_s, 0.0, []
        held_in, held_out = {}, {}  # micro-batch -> its input / output (the loss on the last stage)
        start = time.perf_counter()
        for kind, j in self.order:
            if kind == "F":
                x = xs[j] if self.is_first else self.links.recv_forward(announce and j == 0)
                t0 = time.perf_counter()
                if not self.is_first and x.is_floating_point():
                    x.requires_grad_()
                y = self.module(x)
                if self.is_last:
                    loss = self.loss_fn(y, ys[j])
                    losses.append(loss.detach())
                    y = loss / m
                compute += time.perf_counter() - t0
                if not self.is_last:
                    self.links.send_forward(y, announce and j == 0)
                held_in[j], held_out[j] = x, y
            else:
                x, y = held_in.pop(j), held_out.pop(j)
                grad = None
                if not self.is_last and y.is_floating_point():
                    grad = self.links.recv_backward(y)
                t0 = time.perf_counter()
                if y.requires_grad:
                    torch.autograd.backward(y, grad)
                compute += time.perf_counter() - t0
                if not self.is_first and x.is_floating_point():
                    self.links.send_backward(x.grad if x.grad is not None else torch.zeros_like(x))
        self.links.flush()
        self._compute_s += compute
        self._wall_s += time.perf_counter() - start
        self._wait_s += self.links.wait_s - wait_before
        self._steps += 1
        mean = torch.zeros(1, dtype=torch.float64)
        if self.is_last:
            mean[0] = torch.stack(losses).double().mean()
        broadcast_from_root([mean], self.group, src=self.ranks[-1])
        return float(mean.item())

    def reset_bubble(self) -> None:
        """Forget the times summed so far (e.g. after a warm-up step)."""
        self._compute_s = self._wall_s = self._wait_s = 0.0
        self._steps = 0

    def bubble(self) -> BubbleStats:
        """Every stage's compute and wall time since reset_bubble(), on every rank (collective)."""
        return gather_bubble(self.schedule, self.micro_batches, self._compute_s, self._wall_s, self._wait_s,
                             peak_in_flight(self.order), self._steps, self.group)
