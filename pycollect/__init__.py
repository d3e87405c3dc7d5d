"""pycollect: a from-scratch collectives engine (ring all-reduce, all-gather,
reduce-scatter over TCP) with torch.distributed's names.

    import pycollect as pc
    pc.init_process_group()   # reads torchrun's, mpirun's or srun's environment
    pc.all_reduce(tensor)

The C++ engine lives in the private module pycollect._C; everything public is here,
loaded on first use: `import pycollect.memory` (the memory planner) loads neither the
engine nor torch. Packages: ddp/, fsdp/ (training wrappers), torch_backend/ ("pycollect"
as a torch.distributed backend), tp/ and pp/ (tensor and pipeline parallelism), mesh
(2-D rank grids), memory/ (planner), benchmark/, demo/ (the lesson's jobs), cli/ (the
`pycollect` command).
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import warnings

__version__ = "0.1.0"

_API = {
    "init_process_group", "destroy_process_group", "is_initialized", "get_rank", "get_world_size",
    "get_backend", "new_group", "shrink_group", "all_reduce", "all_gather", "all_gather_into_tensor",
    "all_gather_single", "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "broadcast", "barrier",
    "send", "recv", "isend", "irecv", "get_counters",
    "all_to_all_single", "register_group", "unregister_group", "get_bytes_sent", "get_transport_info",
    "get_flight_record",
    "get_topology", "reduce", "gather",
    "scatter", "all_to_all", "all_reduce_coalesced", "all_gather_coalesced", "tracing", "take_trace",
}
_ERRORS = {
    "PyCollectError", "CollectiveTimeoutError", "PeerLostError", "MismatchError", "GroupFailedError",
    "InvalidArgumentError", "NotInitializedError", "DeviceError",
}

# Imported on first use: name -> (module, attribute or None for the module).
_LAZY = {
    "DistributedDataParallel": ("ddp", "DistributedDataParallel"),
    "NaiveDistributedDataParallel": ("ddp", "NaiveDistributedDataParallel"),
    "FullyShardedDataParallel": ("fsdp", "FullyShardedDataParallel"),
    "fully_shard": ("fsdp", "fully_shard"),
    "demo": ("demo", None),
    "memory": ("memory", None),
    "torch_backend": ("torch_backend", None),
    "Options": ("options", "Options"),
    "Topology": ("topology", "Topology"),
    "export_torch_env": ("launcher", "export_torch_env"),
}

from .types import Algo, Compress, ReduceOp, TraceEvent  # noqa: E402  (pure Python)

__all__ = sorted(_API | _ERRORS | set(_LAZY) | {"Algo", "Compress", "ReduceOp", "TraceEvent", "ProcessGroup", "Work",
                                                "NON_GROUP_MEMBER"})


def _register_torch_backend() -> None:
    """Make dist.init_process_group("pycollect") work once pycollect is imported, without
    importing torch (or the engine) here. torch 2.5+ loads the entry points of the group
    "torch.backends" when it is imported, and pyproject.toml names ours
    (pycollect.torch_backend.autoload): with an installed pycollect and torch's autoload on,
    there is nothing to do, even for a program that never imports pycollect. Otherwise
    (older torch, TORCH_DEVICE_BACKEND_AUTOLOAD=0, a source tree on sys.path) registration
    runs now if torch.distributed is loaded already, else right after it is first imported
    (a one-shot import hook)."""
    if "torch.distributed" in sys.modules:
        _register_now()
    elif importlib.util.find_spec("torch") is not None and not _torch_autoloads_us():
        sys.meta_path.insert(0, _AfterImport("torch.distributed", _register_now))


def _torch_autoloads_us() -> bool:
    """Whether importing torch will call our "torch.backends" entry point."""
    if os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "1") != "1":
        return False
    try:
        from importlib import metadata

        major, minor = (int(x) for x in metadata.version("torch").split(".")[:2])
        if (major, minor) < (2, 5):
            return False
        points = metadata.entry_points()
        group = points.select(group="torch.backends") if hasattr(points, "select") else points.get("torch.backends", ())
        return any(ep.name == "pycollect" and ep.value.startswith("pycollect.") for ep in group)
    except Exception:  # noqa: BLE001 - anything odd: the import hook, which always works
        return False


def _register_now() -> None:
    from . import torch_backend

    torch_backend.register()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `callback` right after module `name` has been executed, then steps aside."""

    def __init__(self, name: str, callback) -> None:
        self.name, self.callback = name, callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                break
        else:
            return None
        exec_module = spec.loader.exec_module

        def exec_then_call(module) -> None:
            exec_module(module)
            try:
                self.callback()
            except Exception as e:  # never break the import of torch itself
                warnings.warn(f"pycollect: could not register the torch.distributed backend: {e}")

        spec.loader.exec_module = exec_then_call
        return spec


_register_torch_backend()


def __getattr__(name):
    # The engine is imported on first use, so `import pycollect.memory` works
    # without the compiled extension (and without torch). What is found is kept in the
    # module: Python asks __getattr__ only for names it lacks, and `pc.all_reduce` would
    # otherwise cost a failed lookup and an import statement (about 1 us) on every call.
    value = _lookup(name)
    globals()[name] = value
    return value


def _lookup(name):
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
