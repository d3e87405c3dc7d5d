"""torch.distributed Work objects for the "pycollect" backend.

torch hands every collective a `Work` back and, for DDP, chains on its Future
(`work.get_future().then(...)`, waited on from C++ by the reducer). pycollect's own
Work (pycollect.work.Work) only completes when somebody waits on it, so each torch
group gets one completer thread: it takes the group's operations in issue order
(the engine completes them in that order too), blocks on each one without the GIL
(the engine's wait releases it), runs its copy-out, then marks the torch Work done
and completes its Future. `Work.wait(timeout)` waits for that moment with a
deadline; an error of the operation is raised by `wait()` and carried by the Future.

CUDA tensors, as NCCL's Work: when every engine operation of a Work is a staged call
without a finish step, `wait()` makes the caller's current stream wait for them and
returns at once (the host is not blocked; pycollect.work.Work.wait); the completer
still settles the Future once the results are in device memory, and an error surfaces
from is_completed(), exception(), the Future and the group's next call. A call with a
finish step (the list form of all-gather copies its flat buffer into the list there)
waits on the host until the completer ran the step, so that a read right after
`wait()` (DDP's constructor checks the model with `.item()`) sees the result.
PYCOLLECT_BLOCKING_WAIT=1 (or CUDA_DEVICE_MAX_CONNECTIONS <= 2) keeps the host-blocking
wait for every call.
"""
from __future__ import annotations

import queue
import threading
from typing import List, Optional, Sequence

import torch
import torch.distributed as dist

from ..errors import CollectiveTimeoutError
from ..options import to_seconds
from ..work import Work as EngineWork


class TorchWork(dist.Work):
    """One backend call: one or more engine operations and the tensors they yield.

    `engine_works` are pycollect Work objects in issue order; `result` is what the
    Future yields (the output tensors, as Gloo's and NCCL's Works do).
    """

    def __init__(self, method: str, engine_works: Sequence, result: List[torch.Tensor], source=None):
        super().__init__()
        self._method = method
        self._source = source  # a recv's: () -> the sender's rank
        self._engine_works = list(engine_works)
        # Staged calls without a finish step only: wait() may make the caller's stream wait
        # instead of the host. A finish step (all_gather's list form copies its flat buffer
        # into the list there) runs on the completer thread once the call is done, so
        # wait() must wait for the completer, as the host wait below does.
        streamable = [isinstance(w, EngineWork) and w._can_stream_wait() and w._finish is None
                      for w in self._engine_works]
        self._stream_works = list(self._engine_works) if streamable and all(streamable) else []
        self._result = result
        self._done = threading.Event()
        self._error: Optional[BaseException] = None
        # CUDA results: the Future knows their devices, so a consumer's stream syncs with it.
        devices = sorted({t.device for t in result if isinstance(t, torch.Tensor) and t.is_cuda}, key=str)
        self._future: torch.futures.Future = torch.futures.Future(devices=devices) if devices else torch.futures.Future()

    def _settle(self) -> None:
        """Completer thread: wait for the engine, then publish the outcome."""
        try:
            for w in self._engine_works:
                w.wait(blocking=True)  # the Future is set once the results are in place
        except CollectiveTimeoutError as e:  # worded as Gloo's, which callers match on
            self._error = CollectiveTimeoutError(f"pycollect backend: {self._method} Timed out (the group's timeout): {e}")
        except BaseException as e:  # noqa: BLE001 - delivered to every waiter
            self._error = e
        self._engine_works = []  # drops the buffers' keep-alives
        self._done.set()
        if self._error is None:
            self._future.set_result(self._result)
        else:
            self._future.set_exception(self._error)

    def wait(self, timeout=None) -> bool:
        if (self._stream_works and self._error is None and not self._stream_works[0]._group.options.blocking_wait
                and all(w._stream_wait() for w in self._stream_works)):
            return True  # the caller's stream waits; the host does not
        seconds = to_seconds(timeout)
        if seconds is not None and seconds <= 0:
            seconds = None  # torch's convention: a zero timeout means none
        if not self._done.wait(seconds):  # Event.wait releases the GIL
            raise CollectiveTimeoutError(
                f"pycollect backend: {self._method} not completed within {seconds:.3g} s of "
                "Work.wait(timeout); it is still running"
            )
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self) -> bool:
        return self._done.is_set()

    def is_success(self) -> bool:
        return self._done.is_set() and self._error is None

    def exception(self):
        return self._error

    def result(self) -> List[torch.Tensor]:
        self.wait()
        return self._result

    def _source_rank(self) -> int:
        """The sender of a recv (torch asks after dist.recv / irecv with src=None)."""
        if self._source is None:
            raise ValueError(f"pycollect backend: {self._method} has no source rank (only a recv has one)")
        self.wait()
        return self._source()

    def get_future(self) -> torch.futures.Future:
        return self._future

    def synchronize(self) -> None:
        self.wait()

    def __repr__(self) -> str:
        state = "done" if self._done.is_set() else "pending"
        return f"<pycollect.torch_backend.Work {self._method} {state}>"


class Completer:
    """The thread that settles a group's torch Works in issue order."""

    def __init__(self, name: str):
        self._queue: "queue.SimpleQueue[Optional[TorchWork]]" = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=f"pycollect-{name}-completer", daemon=True)
        self._thread.start()

    def add(self, work: TorchWork) -> TorchWork:
        self._queue.put(work)
        return work

    def _loop(self) -> None:
        while True:
            work = self._queue.get()  # blocks without the GIL
            if work is None:
                return
            work._settle()

    def close(self, timeout: float = 5.0) -> None:
        """Settle what is queued, then stop the thread."""
        self._queue.put(None)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
