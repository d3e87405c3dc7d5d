"""The "pycollect" backend for torch.distributed.

    import pycollect                                # registers the backend (see register())
    dist.init_process_group("pycollect")            # or dist.new_group(backend="pycollect")
    model = DistributedDataParallel(model)          # or fully_shard(block, mesh=...)

Files: process_group.py (PyCollectProcessGroup, the torch ProcessGroup subclass, and its
creator), ops.py (torch's reduce ops onto the engine's), work.py (torch Work objects and
the completer thread that settles them), sparse.py (sparse all-reduce).

register() is cheap: it imports torch.distributed but neither the engine nor
process_group.py, which load when torch first creates a group of this backend. torch
2.5+ calls autoload() (register, never raising) when it is imported, through the entry
point pyproject.toml declares; pycollect/__init__.py keeps an import hook for the rest.
"""
from __future__ import annotations

BACKEND = "pycollect"


def _create(options, backend_options=None):
    from .process_group import create

    return create(options, backend_options)


def register() -> None:
    """Make "pycollect" a torch.distributed backend for CPU and CUDA tensors (CUDA ones are
    staged through pinned host memory by the engine). Safe to call again."""
    import torch.distributed as dist

    if BACKEND.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu", "cuda"])


def autoload() -> None:
    """torch's backend autoload entry point ("torch.backends" in pyproject.toml): torch 2.5+
    calls it at the end of `import torch`, so "pycollect" is a backend in any program of an
    environment where pycollect is installed. It must never break torch's import: a
    failure is a warning (torch's TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns the call off)."""
    try:
        register()
    except Exception as e:  # noqa: BLE001
        import warnings

        warnings.warn(f"pycollect: could not register the torch.distributed backend: {e}")


def monitored_barrier(group=None, timeout=None, wait_all_ranks: bool = False) -> None:
    """dist.monitored_barrier for a "pycollect" group: torch's own refuses every backend
    but Gloo by name before it asks the group, so call this one (same arguments; see
    PyCollectProcessGroup.monitored_barrier for what it reports)."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _get_default_group, _rank_not_in_group

    if _rank_not_in_group(group):
        return None
    pg = _get_default_group() if group is None else group
    if dist.get_backend(pg) != BACKEND:
        raise ValueError(f"pycollect.torch_backend.monitored_barrier: the group's backend is "
                         f"{dist.get_backend(pg)!r}; use dist.monitored_barrier")
    return pg.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)


def __getattr__(name):
    # engine_group(group=None): the pycollect engine group behind a torch group of this backend.
    if name in ("PyCollectProcessGroup", "engine_group", "create"):
        from . import process_group

        return getattr(process_group, name)
    raise AttributeError(f"module 'pycollect.torch_backend' has no attribute {name!r}")
