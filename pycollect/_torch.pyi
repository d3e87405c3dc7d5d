# pycollect._torch: the "pycollect" torch.distributed backend (csrc/torch_backend/), built
# against the torch installed at build time; pycollect.torch_backend.native loads it.
from typing import Callable, List, Optional

import torch.distributed as dist

TORCH_VERSION: str  # the torch it was built against

class Backend(dist.distributed_c10d.Backend):
    def __init__(self, store: dist.Store, rank: int, size: int, communicator: object, timeout: float,
                 blocking_wait: bool = False, on_shutdown: Optional[Callable[[], None]] = None) -> None: ...
    @property
    def engine_key(self) -> int: ...  # identifies it to pycollect.torch_backend (its engine group)
    def monitored_barrier(self, timeout: float, wait_all_ranks: bool = False) -> None: ...

class ProcessGroup(dist.ProcessGroup):  # torch's, named "pycollect", with the backend for `devices`
    def __init__(self, store: dist.Store, rank: int, size: int, backend: Backend, devices: List[str]) -> None: ...

class NullBackend(dist.distributed_c10d.Backend):  # the benchmarks' floor: moves nothing
    def __init__(self, rank: int, size: int) -> None: ...
