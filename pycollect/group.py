"""ProcessGroup: one group of ranks, its rendezvous and its C++ Communicator."""
from __future__ import annotations

import datetime
import os
import secrets
from typing import List, Sequence

from . import _C
from .errors import PyCollectError
from .work import Work, explain_failure


def _options(timeout: datetime.timedelta) -> "_C.CommOptions":
    o = _C.CommOptions()
    o.timeout = timeout.total_seconds()
    if os.environ.get("PYCOLLECT_SEGMENT_BYTES"):
        o.segment_bytes = int(os.environ["PYCOLLECT_SEGMENT_BYTES"])
    if os.environ.get("PYCOLLECT_INFLIGHT"):
        o.inflight = int(os.environ["PYCOLLECT_INFLIGHT"])
    if os.environ.get("PYCOLLECT_DIRECT_MAX_BYTES"):
        o.direct_max_bytes = int(os.environ["PYCOLLECT_DIRECT_MAX_BYTES"])
    if os.environ.get("PYCOLLECT_SOCKET_BUFFER"):
        o.socket_buffer = int(os.environ["PYCOLLECT_SOCKET_BUFFER"])
    return o


class ProcessGroup:
    """A set of ranks with its own links. Collectives on it run in issue order.

    `ranks` are the global ranks of the members (sorted); `rank` is this process's
    index among them.
    """

    def __init__(self, name: str, store, ranks: Sequence[int], global_rank: int,
                 timeout: datetime.timedelta, host: str):
        self.name = name
        self.ranks: List[int] = sorted(ranks)
        self.rank = self.ranks.index(global_rank)
        self.size = len(self.ranks)
        self.timeout = timeout
        self._store = store
        self._prefix = name
        self._pending: list = []  # (cwork, keepalive) of ops not yet known complete
        self._comm = _C.Communicator(self.rank, self.size, _options(timeout))
        self.algo = os.environ.get("PYCOLLECT_ALGO", "auto")
        if self.algo not in ("auto", "ring", "direct"):
            raise ValueError(f"PYCOLLECT_ALGO={self.algo!r}: choose auto, ring or direct")
        self._connect(host)

    def _connect(self, host: str) -> None:
        store, p = self._store, self._prefix
        if self.rank == 0:
            store.set(f"{p}/token", str(secrets.randbits(63)))
        addr, port = self._comm.listen(host)
        store.set(f"{p}/addr/{self.rank}", f"{addr} {port}")
        hosts, ports = [], []
        for r in range(self.size):
            h, pt = store.get(f"{p}/addr/{r}").decode().rsplit(" ", 1)
            hosts.append(h)
            ports.append(int(pt))
        token = int(store.get(f"{p}/token").decode())
        self._comm.connect(hosts, ports, token)

    # -- used by api.py -------------------------------------------------------
    def submit(self, launch, keepalive=(), finish=None) -> Work:
        """Run `launch(comm)` (which returns a C++ Work) and track the buffers."""
        self._pending = [(w, k) for (w, k) in self._pending if not w.is_completed()]
        cwork = launch(self._comm)
        self._pending.append((cwork, keepalive))  # buffers live until the engine is done
        return Work(self, cwork, keepalive, finish)

    def group_rank(self, global_rank: int, what: str) -> int:
        try:
            return self.ranks.index(global_rank)
        except ValueError:
            raise ValueError(f"{what}: rank {global_rank} is not in this group (ranks {self.ranks})") from None

    def _explain(self, error: PyCollectError) -> PyCollectError:
        return explain_failure(error, self._store, self._prefix, self.rank, self.size)

    def counters(self) -> dict:
        """Calls per kind executed through this group's engine."""
        return dict(self._comm.counters())

    def destroy(self) -> None:
        self._comm.shutdown()

    def __repr__(self) -> str:
        return f"<pycollect.ProcessGroup {self.name} rank {self.rank}/{self.size} ranks={self.ranks}>"


class _NonMember:
    """What new_group returns on ranks outside the new group (torch's NON_GROUP_MEMBER)."""

    def __repr__(self) -> str:
        return "<pycollect.NON_GROUP_MEMBER>"


NON_GROUP_MEMBER = _NonMember()
