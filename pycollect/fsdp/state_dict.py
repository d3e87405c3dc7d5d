"""State dicts of a sharded model.

Full: one unit at a time, the fp32 shards are all-gathered and cut back into the
original parameters, under the names the unwrapped model uses (tied parameters under
each of their names, buffers included), so the dict loads with strict=True into the
model before fully_shard(). Only one unit is ever unsharded, so the peak is the dict
itself plus one unit. Loading cuts each rank's shard straight out of the full tensors.

Sharded: each rank's flat shards (and buffers), with the layout they were cut for.
Each rank saves its own and loads its own; the optimizer's state_dict() is already
per shard, as the optimizer only ever sees the shards.
"""
from __future__ import annotations

from typing import Dict, Optional

import torch
import torch.nn as nn

from .. import api
from .._sync import group_root
from . import collectives as C
from .state import get_state


def _buffers(module: nn.Module, keys) -> Dict[str, torch.Tensor]:
    wanted = set(keys)
    return {name: b for name, b in module.named_buffers(remove_duplicate=False) if name in wanted}


def full_state_dict(module: nn.Module, rank0_only: bool = True) -> dict:
    """The unsharded state dict (fp32 parameters) on the group's first rank ({} elsewhere
    when rank0_only). Every rank of the group must call it."""
    state = get_state(module)
    keep = state.rank == 0 or not rank0_only
    values: Dict[str, torch.Tensor] = {}
    for unit in state.units:
        if unit.empty:
            continue
        full = torch.empty(unit.layout.padded_numel, dtype=unit.shard.dtype, device=unit.shard.device)
        api.all_gather_into_tensor(full, unit.shard.detach(), group=state.group)
        if keep:
            for view, holders in zip(C.unflatten(full, unit.layout), unit.holders):
                value = view.clone()
                for _, _, fqn in holders:
                    values[fqn] = value
    if not keep:
        return {}
    for name, b in _buffers(module, state.full_state_dict_keys).items():
        values[name] = b.detach().clone()
    return {k: values[k] for k in state.full_state_dict_keys if k in values}


def _check_keys(state, sd: dict) -> None:
    missing = [k for k in state.full_state_dict_keys if k not in sd]
    unexpected = [k for k in sd if k not in set(state.full_state_dict_keys)]
    if missing or unexpected:
        raise KeyError(f"full state dict does not match the model: missing {missing[:8]}"
                       f"{'...' if len(missing) > 8 else ''}, unexpected {unexpected[:8]}"
                       f"{'...' if len(unexpected) > 8 else ''}")


def load_full_state_dict(module: nn.Module, state_dict: Optional[dict], broadcast_from_rank0: bool = False) -> None:
    """Load an unsharded state dict (e.g. from full_state_dict or an unwrapped model).

    Every rank passes the same dict, or, with broadcast_from_rank0=True, only the
    group's first rank passes it (others may pass None) and it is broadcast unit by unit.
    """
    state = get_state(module)
    first = group_root(state.group)
    has_dict = not broadcast_from_rank0 or state.rank == 0
    if has_dict:
        _check_keys(state, state_dict)
    with torch.no_grad():
        for unit in state.units:
            if unit.empty:
                continue
            if not broadcast_from_rank0:
                tensors = [state_dict[h[0][2]] for h in unit.holders]
                unit.shard.copy_(C.shard_from_params(tensors, unit.layout, state.rank, unit.shard.dtype))
                continue
            full = torch.zeros(unit.layout.padded_numel, dtype=unit.shard.dtype, device=unit.shard.device)
            if has_dict:
                for view, holders in zip(C.unflatten(full, unit.layout), unit.holders):
                    view.copy_(state_dict[holders[0][2]])
            api.broadcast(full, src=first, group=state.group)
            unit.shard.copy_(C.chunk_of(full, unit.layout, state.rank))
        for name, b in _buffers(module, state.full_state_dict_keys).items():
            if broadcast_from_rank0:
                src = state_dict[name].to(b.dtype).contiguous() if has_dict else torch.empty_like(b)
                api.broadcast(src, src=first, group=state.group)
                b.copy_(src)
            else:
                b.copy_(state_dict[name])


def sharded_state_dict(module: nn.Module) -> dict:
    """This rank's shards and buffers, with the layout they belong to (save per rank)."""
    state = get_state(module)
    return {
        "world_size": state.world_size,
        "rank": state.rank,
        "units": {u.name: {"numels": list(u.layout.numels), "shard": u.shard.detach().clone()}
                  for u in state.units if not u.empty},
        "buffers": {k: b.detach().clone() for k, b in _buffers(module, state.full_state_dict_keys).items()},
    }


def load_sharded_state_dict(module: nn.Module, state_dict: dict) -> None:
    """Load what sharded_state_dict() saved on this same rank of a same-size group."""
    state = get_state(module)
    saved_world, saved_rank = state_dict.get("world_size"), state_dict.get("rank")
    if (saved_world, saved_rank) != (state.world_size, state.rank):
        raise ValueError(f"this sharded state dict holds the shard of rank {saved_rank} of {saved_world} ranks, "
                         f"but this is rank {state.rank} of {state.world_size}: shards cannot be rebuilt for "
                         "another world size or rank; save and load a full state dict instead")
    units = {u.name: u for u in state.units if not u.empty}
    if set(units) != set(state_dict["units"]):
        raise KeyError(f"sharded state dict units {sorted(state_dict['units'])} do not match the model's "
                       f"{sorted(units)}")
    with torch.no_grad():
        for name, unit in units.items():
            saved = state_dict["units"][name]
            if list(saved["numels"]) != list(unit.layout.numels):
                raise ValueError(f"unit {name!r}: saved parameter sizes {saved['numels']} differ from the "
                                 f"model's {list(unit.layout.numels)}")
            unit.shard.copy_(saved["shard"])
        for name, b in _buffers(module, state.full_state_dict_keys).items():
            b.copy_(state_dict["buffers"][name])
