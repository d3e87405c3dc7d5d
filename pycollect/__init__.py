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
}
_ERRORS = {
    "PyCollectError", "CollectiveTimeoutError", "PeerLostError", "MismatchError", "GroupFailedError",
    "InvalidArgumentError", "NotInitializedError",
}

from .types import ReduceOp  # noqa: E402  (pure Python)

__all__ = sorted(_API | _ERRORS | {"ReduceOp", "ProcessGroup", "Work", "NON_GROUP_MEMBER"})


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
    if name == "Work":
        from .work import Work

        return Work
    raise AttributeError(f"module 'pycollect' has no attribute {name!r}")
