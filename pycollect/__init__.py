"""pycollect: a from-scratch collectives engine (ring all-reduce, all-gather,
reduce-scatter over TCP) with torch.distributed's names.

    import pycollect as pc
    pc.init_process_group()   # reads torchrun's environment
    pc.all_reduce(tensor)

The C++ engine lives in the private module pycollect._C; everything public is here.
`pycollect.memory` (the memory planner) needs neither the engine nor torch.
"""
from __future__ import annotations

__version__ = "0.1.0"

_API = {
    "init_process_group", "destroy_process_group", "is_initialized", "get_rank", "get_world_size",
    "get_backend", "new_group", "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "broadcast", "barrier", "send", "recv", "isend", "irecv", "get_counters",
    "all_to_all_single",
}
_ERRORS = {
    "PyCollectError", "CollectiveTimeoutError", "PeerLostError", "MismatchError", "GroupFailedError",
    "InvalidArgumentError", "NotInitializedError",
}

# Training wrappers, imported on first use: name -> (module, attribute or None for the module).
_LAZY = {
    "DistributedDataParallel": ("ddp", "DistributedDataParallel"),
    "NaiveDistributedDataParallel": ("ddp_naive", "NaiveDistributedDataParallel"),
    "FullyShardedDataParallel": ("fsdp", "FullyShardedDataParallel"),
    "fully_shard": ("fsdp", "fully_shard"),
    "demo": ("demo", None),
    "memory": ("memory", None),
}

from .types import ReduceOp  # noqa: E402  (pure Python)

__all__ = sorted(_API | _ERRORS | set(_LAZY) | {"ReduceOp", "ProcessGroup", "Work", "NON_GROUP_MEMBER"})


def _register_torch_backend() -> None:
    """Make dist.init_process_group("pycollect") work once pycollect is imported.

    Skipped quietly where torch or the compiled engine is absent (the memory
    planner needs neither)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return
    try:
        from . import torch_backend
    except ImportError:
        return
    torch_backend.register()


_register_torch_backend()


def __getattr__(name):
    # The engine is imported on first use, so `import pycollect.memory` works
    # without the compiled extension (and without torch).
    if name in _API:
        from . import api

        return getattr(api, name)
    if name in _ERRORS:
        from . import errors

        return getattr(errors, name)
    if name in ("ProcessGroup", "NON_GROUP_MEMBER"):
        from . import group

        return getattr(group, name)
    if name in _LAZY:
        import importlib

        module_name, attr = _LAZY[name]
        module = importlib.import_module(f".{module_name}", __name__)
        return module if attr is None else getattr(module, attr)
    if name == "Work":
        from .work import Work

        return Work
    raise AttributeError(f"module 'pycollect' has no attribute {name!r}")
