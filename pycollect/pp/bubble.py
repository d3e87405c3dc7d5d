"""The measured pipeline bubble, stage by stage, beside the textbook (p-1)/(m+p-1).

    stats = pipe.bubble()          # collective over the pipeline's group: every stage's figures
    print(stats.table())           # markdown: per stage compute, wall, idle fraction, peak in flight

A stage's step (its schedule, from its first action to its last send) takes `wall_s`; of
that, `compute_s` is spent in forward, loss and backward, and the rest is idle: waiting
for a neighbour (the bubble), on the wire, or descheduled by the OS. The measured idle
fraction 1 - compute/wall matches (p-1)/(m+p-1) only when stages are equally fast and the
wire is free; unequal stages (the last one also computes the loss) show up as a larger
idle fraction on the quicker stages.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Tuple

import torch

from .. import api
from .schedules import textbook_bubble

_FIELDS = 5  # compute_s, wall_s, wait_s, peak_in_flight, steps


@dataclass(frozen=True)
class BubbleStats:
    schedule: str
    stages: int
    micro_batches: int
    steps: int                          # steps summed into the times below
    compute_s: Tuple[float, ...]        # per stage, over `steps` steps
    wall_s: Tuple[float, ...]
    wait_s: Tuple[float, ...]           # time blocked in receives and send completions
    peak_in_flight: Tuple[int, ...]     # most micro-batches' activations held at once

    @property
    def textbook(self) -> float:
        return textbook_bubble(self.stages, self.micro_batches)

    @property
    def measured(self) -> Tuple[float, ...]:
        """Per stage idle fraction, 1 - compute/wall."""
        return tuple(1.0 - c / w if w > 0 else 0.0 for c, w in zip(self.compute_s, self.wall_s))

    @property
    def mean_measured(self) -> float:
        return sum(self.measured) / len(self.measured)

    def as_dict(self) -> dict:
        out = asdict(self)
        out.update(textbook=self.textbook, measured=self.measured, mean_measured=self.mean_measured)
        return out

    def table(self) -> str:
        steps = max(self.steps, 1)
        rows = [f"{self.schedule}, p={self.stages}, m={self.micro_batches}, {self.steps} steps: measured idle "
                f"{self.mean_measured:.2f} (mean over stages), textbook (p-1)/(m+p-1) = {self.textbook:.2f}",
                "",
                "| stage | compute ms/step | wall ms/step | idle fraction | peak micro-batches held |",
                "|---|---|---|---|---|"]
        for s in range(self.stages):
            rows.append(f"| {s} | {1e3 * self.compute_s[s] / steps:.2f} | {1e3 * self.wall_s[s] / steps:.2f} | "
                        f"{self.measured[s]:.2f} | {self.peak_in_flight[s]} |")
        return "\n".join(rows)


def gather_bubble(schedule: str, micro_batches: int, compute_s: float, wall_s: float, wait_s: float,
                  peak: int, steps: int, group=None) -> BubbleStats:
    """Every stage's figures on every stage: one all-gather over the pipeline's group."""
    mine = torch.tensor([compute_s, wall_s, wait_s, float(peak), float(steps)], dtype=torch.float64)
    world = api.get_world_size(group)
    every = torch.empty(world * _FIELDS, dtype=torch.float64)
    api.all_gather_into_tensor(every, mine, group=group)
    rows = every.view(world, _FIELDS).tolist()
    return BubbleStats(schedule=schedule, stages=world, micro_batches=micro_batches, steps=int(rows[0][4]),
                       compute_s=tuple(r[0] for r in rows), wall_s=tuple(r[1] for r in rows),
                       wait_s=tuple(r[2] for r in rows), peak_in_flight=tuple(int(r[3]) for r in rows))
