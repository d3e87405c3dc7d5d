"""A rendezvous store in a directory, for ranks that do not import torch ("light ranks").

torch's TCPStore needs torch in every rank; forming groups of hundreds of ranks on one
machine to measure formation (bench/formation.py --light, tests/test_formation_bench.py)
needs only pycollect and numpy in each. `DirStore(path)` answers the calls a group makes
of its store (set, get, check, wait, delete_key) with one file per key, written
whole and renamed into place, so a reader never sees half a value:

    store = DirStore("/dev/shm/job-1234")          # every rank, the same path
    pc.init_process_group(store=store, rank=r, world_size=n)

It is for one machine (a tmpfs path is best); a waiter polls, from every 1 ms to every 20 ms.
"""
from __future__ import annotations

import datetime
import os
import time
from typing import List, Optional, Sequence

_POLL_S = 0.001
_POLL_MAX_S = 0.02


class DirStore:
    def __init__(self, path: str, timeout: datetime.timedelta = datetime.timedelta(seconds=300)):
        self.path = path
        self.timeout = timeout
        os.makedirs(path, exist_ok=True)

    def _file(self, key: str) -> str:
        return os.path.join(self.path, key.replace("%", "%25").replace("/", "%2F"))

    def set(self, key: str, value) -> None:
        data = value.encode() if isinstance(value, str) else bytes(value)
        tmp = f"{self._file(key)}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, self._file(key))

    def get(self, key: str) -> bytes:
        self.wait([key])
        with open(self._file(key), "rb") as f:
            return f.read()

    def check(self, keys: Sequence[str]) -> bool:
        return all(os.path.exists(self._file(k)) for k in keys)

    def wait(self, keys: Sequence[str], timeout: Optional[datetime.timedelta] = None) -> None:
        limit = (timeout or self.timeout).total_seconds()
        deadline = time.monotonic() + limit
        missing: List[str] = list(keys)
        pause = _POLL_S
        while True:
            missing = [k for k in missing if not os.path.exists(self._file(k))]
            if not missing:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"DirStore {self.path}: key(s) {', '.join(missing[:3])} not set within {limit:g} s")
            time.sleep(pause)
            pause = min(pause * 1.5, _POLL_MAX_S)  # hundreds of waiters polling fast would take the cores

    def delete_key(self, key: str) -> bool:
        try:
            os.unlink(self._file(key))
            return True
        except FileNotFoundError:
            return False
