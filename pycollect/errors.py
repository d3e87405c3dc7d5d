"""The exceptions pycollect raises.

All engine errors derive from PyCollectError (a RuntimeError):
- CollectiveTimeoutError (also a TimeoutError): a wait ran past the group's timeout;
  the message names the op, the step and the peer.
- PeerLostError: a peer closed its connection or died.
- MismatchError: ranks issued different calls at the same point; names both calls.
- GroupFailedError: the group failed earlier; every later call raises this.
- DeviceError: a device (CUDA) call failed: a staging copy, or CUDA missing at run time.
Bad arguments raise TypeError / ValueError / NotImplementedError before anything is sent.
"""
from ._C import (  # noqa: F401
    CollectiveTimeoutError,
    DeviceError,
    GroupFailedError,
    InvalidArgumentError,
    MismatchError,
    PeerLostError,
    PyCollectError,
)


class NotInitializedError(RuntimeError):
    """A collective was called before init_process_group()."""
