"""Cross-rank checks run once when a model is sharded.

Every rank must build the same units with the same parameter shapes (else the ring
collectives would disagree about sizes mid-step), and, unless the caller asks for
rank 0's values to be broadcast, start from the same values. Each rank reduces its
model to a few lines of text (pycollect._sync.first_difference compares them) and the
error names the first rank and line that differ from the group's first rank.
"""
from __future__ import annotations

from typing import List

import torch
import torch.nn as nn

from .._sync import broadcast_from_root, first_difference
from .wrap_policy import UnitPlan


def _structure(plans: List[UnitPlan]) -> List[str]:
    """One line per unit: its name, then each parameter's name, shape and dtype."""
    return [f"unit {p.name or '<root>'}: " + ", ".join(f"{r.holders[0][2]} {tuple(r.param.shape)} {r.param.dtype}"
                                                    for r in p.params) for p in plans]


def _values(plans: List[UnitPlan], module: nn.Module) -> List[str]:
    """The sums of the parameters, of their absolute values and of the floating buffers, exactly."""
    with torch.no_grad():
        total = sum((torch.sum(r.param, dtype=torch.float64) for p in plans for r in p.params),
                    torch.zeros((), dtype=torch.float64))
        absolute = sum((torch.sum(r.param.abs(), dtype=torch.float64) for p in plans for r in p.params),
                       torch.zeros((), dtype=torch.float64))
        buffers = sum((torch.sum(b, dtype=torch.float64) for b in module.buffers() if b.is_floating_point()),
                      torch.zeros((), dtype=torch.float64))
    return [f"parameter sum {float(total)!r}", f"parameter abs sum {float(absolute)!r}",
            f"buffer sum {float(buffers)!r}"]


def check_same_structure(plans: List[UnitPlan], group) -> None:
    problem = first_difference(_structure(plans), group)
    if problem:
        raise ValueError(f"the model differs between ranks (units, parameter names, shapes or dtypes): {problem}; "
                         "every rank must build the same model and wrap policy")


def check_same_values(plans: List[UnitPlan], module: nn.Module, group) -> None:
    problem = first_difference(_values(plans, module), group)
    if problem:
        raise ValueError(f"the model's initial values differ between ranks: {problem}; seed every rank the same "
                         "way before building the model, or pass sync_module_states=True to copy the first "
                         "rank's values")


def broadcast_from_first(plans: List[UnitPlan], module: nn.Module, group) -> None:
    """Copy every parameter and buffer from the group's first rank."""
    broadcast_from_root([r.param for p in plans for r in p.params] + list(module.buffers()), group)
