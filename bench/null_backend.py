"""A torch.distributed backend that moves nothing: what torch's own dispatch of a call costs.

    import null_backend; null_backend.register()        # once per process
    pg = dist.new_group(backend="null")                  # every rank, as any group
    dist.all_reduce(t, group=pg)                         # torch's checks and dispatch, then done

The backend is C++ (pycollect._torch.NullBackend, csrc/torch_backend/null_backend.h), as
"pycollect" is: each call returns at once a Work already settled, the same TorchWork
class the "pycollect" backend returns, so a call on this group costs torch's Python and
C++ around a C++ backend and nothing else. bench/p2p.py times the same calls on it beside
"pycollect" and Gloo: the part of a call through torch that no backend can remove.

Results are not computed (a receive leaves its tensor as it was); it is a measuring stick,
never registered outside the benchmarks.
"""
from __future__ import annotations

import torch.distributed as dist

from pycollect.torch_backend.native import load

NAME = "null"


def _create(options, backend_options=None):
    return load().NullBackend(options.group_rank, options.group_size)


def register() -> None:
    """Make "null" a torch.distributed backend for CPU tensors (once per process)."""
    if NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["cpu"])
