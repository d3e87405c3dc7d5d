"""The "pycollect" backend for torch.distributed.

    import pycollect                                # registers the backend (see register())
    dist.init_process_group("pycollect")            # or dist.new_group(backend="pycollect")
    model = DistributedDataParallel(model)          # or fully_shard(block, mesh=...)

The backend is native: a C++ c10d::Backend (csrc/torch_backend/, the module
pycollect._torch) over the engine's own groups; native.py loads it and makes one per torch
group.

register() is cheap: it imports torch.distributed but neither the engine nor the native
module, which load when torch first creates a group of this backend. torch
2.5+ calls autoload() (register, never raising) when it is imported, through the entry
point pyproject.toml declares; pycollect/__init__.py keeps an import hook for the rest.
"""
from __future__ import annotations

BACKEND = "pycollect"


def _create(options, backend_options=None):
    from .native import create

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
    but Gloo by name before it asks the group (torch 2.13: `get_backend(group) !=
    Backend.GLOO`, no hook), so call this one, or the group's own `pg.monitored_barrier(timeout)`
    (same arguments; see docs/torch_backend.md for what it reports). `timeout` None: the
    group's (as set at creation or by `pg.set_timeout`)."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _get_default_group, _rank_not_in_group

    if _rank_not_in_group(group):
        return None
    pg = _get_default_group() if group is None else group
    try:
        backend = _backend(pg)
    except TypeError:
        raise ValueError(f"pycollect.torch_backend.monitored_barrier: the group's backend is "
                         f"{dist.get_backend(pg)!r}; use dist.monitored_barrier") from None
    seconds = (-1.0 if timeout is None else timeout.total_seconds() if hasattr(timeout, "total_seconds")
               else float(timeout))
    return backend.monitored_barrier(seconds, wait_all_ranks=wait_all_ranks)


def _backend(pg):
    """The native backend of torch group `pg`: that of the device it serves (a device map
    such as "cpu:gloo,cuda:pycollect" gives the other devices other backends), unwrapped
    from torch's ProcessGroupWrapper under TORCH_DISTRIBUTED_DEBUG=DETAIL. TypeError if no
    device of `pg` has it."""
    import torch.distributed as dist

    from .native import load

    native = load()
    for device in pg._device_types:
        backend = pg._get_backend(device)
        backend = getattr(backend, "wrapped_pg", backend)  # DETAIL's ProcessGroupWrapper
        if isinstance(backend, native.Backend):
            return backend
    raise TypeError(f"{pg!r} is not a group of the {BACKEND!r} backend (its backend is {dist.get_backend(pg)!r})")


def engine_group(group=None):
    """The pycollect engine group behind a torch group of this backend (None: the default
    group): its counters, links and flight record show what ran."""
    import torch.distributed as dist

    from .native import engine_of

    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return engine_of(_backend(pg))


def is_backend(obj) -> bool:
    """Whether `obj` is a torch group with this backend (for one of its devices at least), or
    this backend's native object."""
    import torch.distributed as dist

    from .native import load

    if isinstance(obj, dist.ProcessGroup):
        try:
            _backend(obj)
        except TypeError:
            return False
        return True
    return isinstance(obj, load().Backend)
