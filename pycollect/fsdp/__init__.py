"""FSDP (ZeRO-3) on pycollect: parameters, gradients and optimizer state sharded over
the ranks of a group, gathered unit by unit with the engine's ring all-gather and
reduced with its ring reduce-scatter. See docs/fsdp.md.

    from pycollect.fsdp import fully_shard, ModuleWrapPolicy
    model = fully_shard(model, policy=ModuleWrapPolicy({Block}))
    opt = torch.optim.Adam(model.parameters())      # sees only this rank's shards

Files: wrapper.py (fully_shard, FullyShardedDataParallel) -> state.py (the hooks) ->
param_group.py (one unit) -> collectives.py (stateless gather/free/reduce-scatter).
"""
from .memory_stats import model_state_bytes, peak_rss_bytes, reset_peak_rss
from .mixed_precision import MixedPrecision
from .state import get_state
from .state_dict import full_state_dict, load_full_state_dict, load_sharded_state_dict, sharded_state_dict
from .wrap_policy import ModuleWrapPolicy, SizeWrapPolicy
from .wrapper import FullyShardedDataParallel, fully_shard, memory_stats, no_sync

__all__ = [
    "FullyShardedDataParallel", "fully_shard", "no_sync", "MixedPrecision", "ModuleWrapPolicy", "SizeWrapPolicy",
    "full_state_dict", "load_full_state_dict", "sharded_state_dict", "load_sharded_state_dict",
    "memory_stats", "model_state_bytes", "peak_rss_bytes", "reset_peak_rss", "get_state",
]
