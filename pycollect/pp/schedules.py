"""Pipeline schedules: the order in which one stage runs the forward ("F") and backward
("B") passes of the micro-batches of one batch. Pure functions, no communication.

GPipe (Huang et al. 2019, "GPipe: Efficient Training of Giant Neural Networks using
Pipeline Parallelism"): every stage runs all m forwards, then all m backwards. Stage s
keeps the activations of all m micro-batches until their backward: memory grows with m.

1F1B (PipeDream-Flush, Narayanan et al. 2021, "Memory-Efficient Pipeline-Parallel DNN
Training", and Megatron-LM's schedule): stage s runs p-1-s warm-up forwards, then
alternates one forward and one backward, then drains the remaining backwards. Stage s
never holds more than p-s micro-batches' activations, whatever m. Both schedules flush
the pipeline at the end of every batch, so the weights each micro-batch sees are the
same and the update equals one step on the whole batch.

Their bubble is the same: with p stages, m micro-batches and uniform passes, every stage
idles (p-1) forward+backward slots out of m+p-1, a fraction (p-1)/(m+p-1). For p=3, m=4
(timeline(ONE_F_ONE_B, 3, 4), forward and backward one slot each; '.' is idle):

    stage 0 | F0 F1 F2 .  .  B0 F3 B1 .  B2 .  B3
    stage 1 | .  F0 F1 .  B0 F2 B1 F3 B2 .  B3 .
    stage 2 | .  .  F0 B0 F1 B1 F2 B2 F3 B3 .  .

Each row has 8 busy slots of 12: a bubble of 4/12 = 2/6 = (p-1)/(m+p-1).
"""
from __future__ import annotations

from typing import Dict, List, Tuple

GPIPE = "gpipe"
ONE_F_ONE_B = "1f1b"

Action = Tuple[str, int]  # ("F" or "B", micro-batch index)


def gpipe_order(stages: int, micro_batches: int, stage: int) -> List[Action]:
    """All forwards, then all backwards (in micro-batch order, so stage p-1 starts the
    backward of micro-batch 0 as soon as its last forward is done)."""
    return [("F", j) for j in range(micro_batches)] + [("B", j) for j in range(micro_batches)]


def one_f_one_b_order(stages: int, micro_batches: int, stage: int) -> List[Action]:
    """Warm-up forwards, steady one-forward-one-backward, cool-down backwards."""
    warmup = min(stages - 1 - stage, micro_batches)
    order: List[Action] = [("F", j) for j in range(warmup)]
    for j in range(micro_batches - warmup):
        order += [("F", warmup + j), ("B", j)]
    order += [("B", j) for j in range(micro_batches - warmup, micro_batches)]
    return order


SCHEDULES = {GPIPE: gpipe_order, ONE_F_ONE_B: one_f_one_b_order}


def schedule_order(schedule: str, stages: int, micro_batches: int, stage: int) -> List[Action]:
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule={schedule!r}: choose one of {sorted(SCHEDULES)}")
    return SCHEDULES[schedule](stages, micro_batches, stage)


def textbook_bubble(stages: int, micro_batches: int) -> float:
    """(p-1)/(m+p-1): the idle fraction of every stage with uniform passes."""
    return (stages - 1) / (micro_batches + stages - 1)


def peak_in_flight(order: List[Action]) -> int:
    """The most micro-batches whose activations one stage holds at once under `order`."""
    held = peak = 0
    for kind, _ in order:
        held += 1 if kind == "F" else -1
        peak = max(peak, held)
    return peak


def simulate(schedule: str, stages: int, micro_batches: int, f: int = 1, b: int = 1) -> List[Dict[int, str]]:
    """Per stage, {time slot: action name} when each forward takes f slots and each backward
    b, a stage starts an action as soon as its inputs have arrived (free, instant wires)."""
    orders = [schedule_order(schedule, stages, micro_batches, s) for s in range(stages)]
    done: Dict[Tuple[str, int, int], int] = {}  # (kind, stage, micro-batch) -> end slot
    free, pos = [0] * stages, [0] * stages
    slots: List[Dict[int, str]] = [{} for _ in range(stages)]
    while any(pos[s] < len(orders[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            if pos[s] == len(orders[s]):
                continue
            kind, j = orders[s][pos[s]]
            if kind == "F":
                dep = ("F", s - 1, j) if s > 0 else None            # the previous stage's activation
            else:
                dep = ("B", s + 1, j) if s < stages - 1 else ("F", s, j)  # the next stage's gradient
            if dep is not None and dep not in done:
                continue
            start = max(free[s], done[dep] if dep else 0)
            length = f if kind == "F" else b
            for t in range(start, start + length):
                slots[s][t] = f"{kind}{j}"
            free[s] = done[(kind, s, j)] = start + length
            pos[s] += 1
            progressed = True
        if not progressed:
            raise RuntimeError(f"schedule {schedule!r} deadlocks for p={stages}, m={micro_batches}")
    return slots


def timeline(schedule: str, stages: int, micro_batches: int, f: int = 1, b: int = 1) -> str:
    """simulate() drawn as one row per stage, '.' for an idle slot."""
    slots = simulate(schedule, stages, micro_batches, f, b)
    end = max(max(s) for s in slots) + 1
    width = max(len(a) for s in slots for a in s.values())
    return "\n".join(f"stage {i} | " + " ".join(s.get(t, ".").ljust(width) for t in range(end)).rstrip()
                     for i, s in enumerate(slots))
