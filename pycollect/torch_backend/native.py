"""The bridge to the native backend (pycollect._torch, csrc/torch_backend/): loading it under
the torch it was built against, and making one backend per torch group.

For each group torch calls `create` (registered by pycollect.torch_backend.register) with
the group's own PrefixStore, rank, size and timeout. Python forms the engine group
(pycollect.formation: rendezvous on that store, HMAC, topology, the cost model's tables: one
formation for the engine API and the backend alike) and hands its Communicator to the C++
c10d::Backend; from then on no Python runs on a call. When torch shuts the group down
the backend calls back here once, and the engine group is forgotten.
"""
from __future__ import annotations

import datetime
import os

from .. import _C, api
from .._torch_build import built_against, prebuilt
from ..group import ProcessGroup as EngineGroup
from ..rendezvous import _store_host, listen_address
from . import BACKEND

_module = None
_engines: dict = {}  # backend.engine_key -> the engine group behind it
_made: dict = {}  # torch group name -> groups of this backend made under it in this process


def load():
    """pycollect._torch for the torch this process runs: the one built with the package if
    it was built against this torch, else one compiled for it on first use (builder.py)."""
    global _module
    if _module is not None:
        return _module
    import torch

    built = built_against()
    if built == torch.__version__:
        _module = prebuilt(torch)
    else:
        why = ("pycollect was installed without it: its build had no torch" if built is None else
               f"pycollect's own was built against torch {built}")
        from . import builder  # only here: its imports are no part of a formation's cost

        _module = builder.load(torch, why)
    _C.know_tensor_reader(_module.tensor_reader)  # the API's fast calls read tensors through it
    return _module


def create(options, backend_options=None):
    """torch's creator hook (extended API: one _DistributedBackendOptions): the native
    backend, or, when it serves every device of its group, torch's ProcessGroup with it.

    torch 2.13's _new_process_group_helper takes what the creator returns in one of two
    ways. A c10d Backend it registers on its own ProcessGroup for the devices the backend
    string gives it, then goes on to the other devices of a device map
    ("cpu:gloo,cuda:pycollect"), and under TORCH_DISTRIBUTED_DEBUG=DETAIL wraps it in its
    ProcessGroupWrapper; but its group is then named "custom" (pg.name(), DDP's logging
    data) and refuses pg._get_sequence_number_for_group(). A ProcessGroup it takes as the
    group, for every device, unwrapped, and stops there. So the group is returned only where
    that loses nothing: pycollect serves every device torch sets up and DETAIL is off
    (_serves_whole_group); anywhere else, the Backend."""
    native = load()
    store, rank, size = options.store, options.group_rank, options.group_size
    # torch gives every group its own PrefixStore, named after the group; a group made
    # again under the same name in this process (destroy_process_group, then
    # init_process_group on the same store) gets keys of its own: its count.
    group_id = str(options.group_id)
    made = _made.get(group_id, 0)
    _made[group_id] = made + 1
    backend = form_backend(f"tb{made}", store, rank, size, options.timeout)
    devices = _serves_whole_group()
    return backend if devices is None else native.ProcessGroup(store, rank, size, backend, devices)


def form_backend(name: str, store, rank: int, size: int, timeout):
    """An engine group named `name` formed on `store` (its ranks meet there, under the name:
    formation.py), and the native backend over it: what torch's creator returns, and
    torchft's wrapper (torchft.py)."""
    load()
    host = listen_address(os.environ.get("MASTER_ADDR") or _store_host(store))
    engine = api.register_group(EngineGroup(name, store, range(size), rank, timeout, host))
    return _backend_over(engine, store)


SHRINK_ABORT = 0x01  # torch.distributed's flag: end the group's calls in flight first


def _backend_over(engine: EngineGroup, store):
    """The native backend over a formed engine group (registered with pycollect.api), which
    forgets the group when torch shuts it down, shrinks into another such backend
    (dist.shrink_group: the engine group shrunk, shrink.py) and splits into a child
    (ProcessGroup.split_group: a group of some of its ranks, formed on torch's store for it)."""
    native = load()
    key = []

    def forget() -> None:  # the backend's shutdown or abort, once
        _engines.pop(key[0] if key else None, None)
        api.unregister_group(engine)

    def shrink(excluded, flags: int):
        survivors = api.register_group(engine.shrunk(excluded, abort=bool(flags & SHRINK_ABORT)))
        return _backend_over(survivors, store)

    def split(child_store, ranks, timeout_s: float):
        # torch gives the child a store of its own (its group name's prefix): one name serves.
        timeout = datetime.timedelta(seconds=timeout_s) if timeout_s > 0 else engine.timeout
        child = EngineGroup("split", child_store, [engine.ranks[r] for r in ranks], engine.ranks[engine.rank],
                            timeout, engine.host, engine.options)
        return _backend_over(api.register_group(child), child_store)

    backend = native.Backend(store, engine.rank, engine.size, engine._comm.capsule(),
                             engine.timeout.total_seconds(), engine.options.blocking_wait, forget)
    backend.set_shrinker(shrink)  # they hold `engine` and `store`, not the backend: no cycle
    backend.set_splitter(split)
    key.append(backend.engine_key)
    _engines[backend.engine_key] = engine
    return backend


def _serves_whole_group():
    """The devices of the group torch is making, when this backend serves all of them and
    torch will not wrap it (DETAIL off); else None. torch passes the creator neither, so
    they are read from its caller, _new_process_group_helper: its `backend_config`, the
    device -> backend map of the backend string. Where torch keeps them otherwise, None: the
    Backend is returned, right for every device map, named "custom"."""
    import sys

    import torch.distributed as dist

    if dist.get_debug_level() == dist.DebugLevel.DETAIL:
        return None
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "_new_process_group_helper":
        frame = frame.f_back
    config = frame.f_locals.get("backend_config") if frame is not None else None
    try:
        devices = dict(config.get_device_backend_map())
    except AttributeError:
        return None
    if not devices or any(str(b).lower() != BACKEND for b in devices.values()):
        return None
    return [str(d) for d in devices]


def engine_of(backend) -> EngineGroup:
    engine = _engines.get(getattr(backend, "engine_key", None))
    if engine is None:
        raise ValueError(f"{backend!r} was shut down")
    return engine
