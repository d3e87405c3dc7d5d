"""pycollect for torchft (PyPI `torchft`): a reconfigurable "pycollect" process group.

    from pycollect.torch_backend.torchft import ProcessGroupPycollect
    manager = torchft.Manager(pg=ProcessGroupPycollect(), ...)   # instead of ProcessGroupGloo()

torchft keeps a job training when a replica group dies: each step its Manager agrees on a
quorum with the lighthouse, and when the quorum changes it reconfigures its process groups
in place, `pg.configure(store_addr, replica_id, rank, world_size)` under a store prefix of
that quorum's. torchft's own wrappers re-form a Gloo or NCCL group there; this one forms an
engine group (formation.py: tens of milliseconds at a few ranks) with the native backend
over it, so every collective torchft issues runs on the engine, reduce_scatter included
(torchft's Gloo group has none, so FT-HSDP had no CPU backend). On top of torchft's wrapper:

- errored(): the engine group's failure once it failed (a peer lost, a timeout), which the
  Manager reads to fail the step and reconfigure;
- set_timeout(): the live group's timeout as well as the next configure's (torchft's tests
  shorten it to see a lost peer fail the survivors' next call within a second);
- abort() / configure(): the old group is aborted (its calls in flight end at once) and
  destroyed before the new one forms.

Import this module only where torchft is installed (docs/frameworks.md has a recipe).
"""
from __future__ import annotations

from datetime import timedelta
from typing import Optional

import torch
from torch.distributed import ProcessGroup as BaseProcessGroup
from torchft.process_group import ProcessGroupWrapper

from .native import engine_of, form_backend

BACKEND_NAME = "torchft-pycollect"


class ProcessGroupPycollect(ProcessGroupWrapper):
    """torchft's reconfigurable process group on pycollect (module docstring)."""

    def _create_pg(self, store, rank: int, world_size: int) -> BaseProcessGroup:
        # Each configure comes with a store prefix of its own (torchft's quorum's): one name serves.
        backend = form_backend("tft", store, rank, world_size, self._timeout)
        pg = BaseProcessGroup(store, rank, world_size)
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        for device in devices:
            pg._register_backend(torch.device(device), BaseProcessGroup.BackendType.CUSTOM, backend)
        pg._set_default_backend(BaseProcessGroup.BackendType.CUSTOM)
        return pg

    def _backend(self):
        pg = self._pg
        return None if pg is None else pg._get_backend(torch.device("cpu"))

    def errored(self) -> Optional[Exception]:
        backend = self._backend()
        if backend is None:
            return None
        try:
            failure = engine_of(backend)._comm.failure()
        except ValueError:  # shut down meanwhile
            return None
        return RuntimeError(f"pycollect group aborted: {failure}") if failure else None

    def set_timeout(self, timeout: timedelta) -> None:
        super().set_timeout(timeout)
        backend = self._backend()
        if backend is not None:
            backend.set_timeout(timeout)

    def getBackendName(self) -> str:
        return BACKEND_NAME
