"""fully_shard() and FullyShardedDataParallel: the public shape of FSDP on pycollect.

    model = fully_shard(model, policy=ModuleWrapPolicy({Block}))   # in place, returns model
    opt = torch.optim.Adam(model.parameters())                     # the local flat shards
    loss = model(x).mean(); loss.backward(); opt.step()

    model = FullyShardedDataParallel(model, policy=...)             # the same, as a wrapper

The wrapper is thin: it plans the units (wrap_policy), checks the ranks agree
(consistency), builds one ParamGroup per unit and lets FSDPState's hooks drive them.
"""
from __future__ import annotations

import contextlib
from typing import Optional

import torch.nn as nn

from .. import api
from . import consistency
from .memory_stats import UnshardedTracker, model_state_bytes
from .mixed_precision import MixedPrecision
from .param_group import ParamGroup
from .state import STATE_ATTR, FSDPState, get_state
from .state_dict import full_state_dict, load_full_state_dict, load_sharded_state_dict, sharded_state_dict
from .wrap_policy import Policy, as_policy, plan_units

def fully_shard(module: nn.Module, *, group=None, policy: Policy = None, reshard_after_forward: bool = True,
                mixed_precision: Optional[MixedPrecision] = None, sync_module_states: bool = False,
                replicate_group=None) -> nn.Module:
    """Shard `module`'s parameters, gradients and optimizer state over `group`, in place.

    group: a pycollect ProcessGroup (None: the default group). policy: which submodules
    become units besides the root (ModuleWrapPolicy, SizeWrapPolicy or a callable
    (module, name, unowned_numel) -> bool). reshard_after_forward: free each unit's
    gathered parameters after its forward (ZeRO-3) or keep them until its backward
    (ZeRO-2-like). mixed_precision: compute/reduce dtypes (shards stay fp32).
    sync_module_states: copy the first rank's parameters and buffers to every rank
    instead of requiring them to be equal already. replicate_group: hybrid sharding
    (HSDP): `group` shards, and the ranks holding the same shard on other replicas
    (e.g. from pycollect.mesh.grid_groups) average their reduced gradients. Returns
    `module`.
    """
    if getattr(module, STATE_ATTR, None) is not None:
        raise ValueError(f"{type(module).__name__} is already sharded by fully_shard()")
    if replicate_group is api.NON_GROUP_MEMBER:
        raise ValueError("fully_shard: this rank is not a member of `replicate_group`")
    if group is api.NON_GROUP_MEMBER:
        raise ValueError("fully_shard: this rank is not a member of `group`, so it cannot hold a shard; "
                         "only the group's ranks may wrap the model")
    world, rank = api.get_world_size(group), api.get_rank(group)
    if world < 1:
        raise ValueError(f"fully_shard: cannot build shards for a world size of {world}")
    mp = mixed_precision or MixedPrecision()
    plans = plan_units(module, as_policy(policy))
    groups = (group,) if replicate_group is None else (group, replicate_group)
    for g in groups:
        consistency.check_same_structure(plans, g)
    for g in groups:
        # shard group first, then across replicas: every rank ends with the first rank's values
        if sync_module_states:
            consistency.broadcast_from_first(plans, module, g)
        else:
            consistency.check_same_values(plans, module, g)
    full_keys = list(module.state_dict().keys())
    tracker, trace = UnshardedTracker(), []
    units = [ParamGroup(p, group, rank, world, mp, tracker, trace, replicate_group) for p in plans]
    del plans  # drop the last references to the original full-size parameters
    for unit in units:
        unit.install()
    state = FSDPState(units, mp, reshard_after_forward, tracker, trace)
    state.full_state_dict_keys = full_keys
    state.group, state.rank, state.world_size = group, rank, world
    object.__setattr__(module, STATE_ATTR, state)
    return module


@contextlib.contextmanager
def no_sync(module: nn.Module):
    """Accumulate gradients locally (unsharded, fp32) without any reduce-scatter; the
    first backward outside the block reduces the sum."""
    state = get_state(module)
    before, state.no_sync = state.no_sync, True
    try:
        yield
    finally:
        state.no_sync = before


def memory_stats(module: nn.Module, optimizer=None) -> dict:
    """Model-state bytes on this rank plus the unsharded-parameter peaks per phase."""
    state = get_state(module)
    out = model_state_bytes(module, optimizer)
    out.update(state.tracker.report())
    out["units"] = {u.name: {"numel": u.layout.total_numel, "shard_numel": u.layout.shard_numel,
                             "padding": u.layout.padding,
                             "unsharded_bytes": u.layout.padded_numel * u.full.element_size()}
                    for u in state.units}
    return out


class FullyShardedDataParallel(nn.Module):
    """`module` sharded by fully_shard(), behind a wrapper with torch's FSDP name.

    Its parameters are the flat local shards (`module.<unit>._fsdp_shard`); give them to
    any torch optimizer. Takes the keyword arguments of fully_shard().
    """

    def __init__(self, module: nn.Module, **kwargs):
        super().__init__()
        self.module = fully_shard(module, **kwargs)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def no_sync(self):
        return no_sync(self.module)

    def memory_stats(self, optimizer=None) -> dict:
        return memory_stats(self.module, optimizer)

    def full_state_dict(self, rank0_only: bool = True) -> dict:
        return full_state_dict(self.module, rank0_only)

    def load_full_state_dict(self, state_dict: Optional[dict], broadcast_from_rank0: bool = False) -> None:
        load_full_state_dict(self.module, state_dict, broadcast_from_rank0)

    def sharded_state_dict(self) -> dict:
        return sharded_state_dict(self.module)

    def load_sharded_state_dict(self, state_dict: dict) -> None:
        load_sharded_state_dict(self.module, state_dict)
