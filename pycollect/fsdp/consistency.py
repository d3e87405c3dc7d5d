"""Cross-rank checks run once when a model is sharded.

Every rank must build the same units with the same parameter shapes (else the ring
collectives would disagree about sizes mid-step), and, unless the caller asks for
rank 0's values to be broadcast, start from the same values. Each rank reduces its
model to a few numbers; one all-gather compares them and the error names the ranks
that differ from the group's first rank and how.
"""
from __future__ import annotations

import zlib
from typing import List

import torch
import torch.nn as nn

from .. import api
from .wrap_policy import UnitPlan


def _structure(plans: List[UnitPlan]) -> List[float]:
    text = ";".join(f"{p.name}:" + ",".join(f"{r.holders[0][2]}{tuple(r.param.shape)}{r.param.dtype}"
                                             for r in p.params) for p in plans)
    numel = sum(r.param.numel() for p in plans for r in p.params)
    return [float(len(plans)), float(numel), float(zlib.crc32(text.encode()))]


def _values(plans: List[UnitPlan], module: nn.Module) -> List[float]:
    with torch.no_grad():
        total = sum((torch.sum(r.param, dtype=torch.float64) for p in plans for r in p.params),
                    torch.zeros((), dtype=torch.float64))
        absolute = sum((torch.sum(r.param.abs(), dtype=torch.float64) for p in plans for r in p.params),
                       torch.zeros((), dtype=torch.float64))
        buffers = sum((torch.sum(b, dtype=torch.float64) for b in module.buffers() if b.is_floating_point()),
                      torch.zeros((), dtype=torch.float64))
    return [float(total), float(absolute), float(buffers)]


def _gather_rows(row: List[float], group) -> torch.Tensor:
    mine = torch.tensor(row, dtype=torch.float64)
    rows = torch.empty(api.get_world_size(group) * mine.numel(), dtype=torch.float64)
    api.all_gather_into_tensor(rows, mine, group=group)
    return rows.view(-1, mine.numel())


def check_same_structure(plans: List[UnitPlan], group) -> None:
    rows = _gather_rows(_structure(plans), group)
    bad = [r for r in range(rows.shape[0]) if not torch.equal(rows[r], rows[0])]
    if bad:
        desc = ", ".join(f"rank {r}: {int(rows[r, 0])} units / {int(rows[r, 1])} parameters" for r in [0] + bad)
        raise ValueError(f"the model differs between ranks (units, parameter names, shapes or dtypes): {desc}; "
                         "every rank must build the same model and wrap policy")


def check_same_values(plans: List[UnitPlan], module: nn.Module, group) -> None:
    rows = _gather_rows(_values(plans, module), group)
    bad = [r for r in range(rows.shape[0]) if not torch.equal(rows[r], rows[0])]
    if bad:
        desc = ", ".join(f"rank {r}: sum {rows[r, 0].item():.9g}" for r in [0] + bad)
        raise ValueError(f"the model's initial values differ between ranks ({desc}); seed every rank the same "
                         "way before building the model, or pass sync_module_states=True to copy the first "
                         "rank's values")


def broadcast_from_first(plans: List[UnitPlan], module: nn.Module, group, src: int) -> None:
    """Copy every parameter and buffer from global rank `src` (the group's first rank)."""
    tensors = [r.param for p in plans for r in p.params] + list(module.buffers())
    with torch.no_grad():
        for t in tensors:
            buf = t.detach() if t.is_contiguous() else t.detach().contiguous()
            api.broadcast(buf, src=src, group=group)
            if buf.data_ptr() != t.data_ptr():
                t.copy_(buf)
