"""torch.distributed Work objects for the "pycollect" backend.

torch hands every collective a `Work` back and, for DDP, chains on its Future
(`work.get_future().then(...)`, waited on from C++ by the reducer). pycollect's own
Work (pycollect.work.Work) only completes when somebody waits on it. Whoever comes
first settles a torch Work, once (`_settle`: wait for the engine, run its copy-out,
mark it done, complete its Future): the caller, when the call is already done as it
returns (a small send posted on the caller's thread) or when it calls `wait()` (it then
waits on the engine itself, woken by the engine's own completion, no thread between),
`is_completed()` once the engine is done; else, once its Future is asked for (DDP's
buckets chain on it) or a wait has a timeout, the group's completer thread, which waits
for the engine without the GIL. A Work nobody asks about costs no thread at all.
`Work.wait(timeout)` waits for that moment with a deadline; an error of the operation
is raised by `wait()` and carried by the Future.

CUDA tensors, as NCCL's Work: when every engine operation of a Work is a staged call
without a finish step, `wait()` makes the caller's current stream wait for them and
returns at once (the host is not blocked; pycollect.work.Work.wait); the completer
still settles the Future once the results are in device memory, and an error surfaces
from is_completed(), exception(), the Future and the group's next call. A call with a
finish step (the list form of all-gather copies its flat buffer into the list there)
waits on the host and runs the step as it settles the Work, so that a read right after
`wait()` (DDP's constructor checks the model with `.item()`) sees the result.
PYCOLLECT_BLOCKING_WAIT=1 (or CUDA_DEVICE_MAX_CONNECTIONS <= 2) keeps the host-blocking
wait for every call.
"""
from __future__ import annotations

import queue
import threading
import time
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

    # Every Work's state before anything happens to it: __init__ and settled() set only
    # what differs from these.
    _source = None  # a recv's: () -> the sender's rank
    _engine_works: Sequence = ()
    _stream_works: Sequence = ()
    _completer: Optional["Completer"] = None  # settles it once asked to (_hand_over)
    _handed = False
    _error: Optional[BaseException] = None
    _future: Optional[torch.futures.Future] = None  # made when asked for (get_future)

    def __init__(self, method: str, engine_works: Sequence, result: List[torch.Tensor], source=None):
        super().__init__()
        self._method = method
        self._source = source
        self._engine_works = list(engine_works)
        # Staged calls without a finish step only: wait() may make the caller's stream wait
        # instead of the host. A finish step (all_gather's list form copies its flat buffer
        # into the list there) runs when the Work is settled, so wait() settles it on the
        # host, as for any other call.
        streamable = bool(self._engine_works) and all(
            isinstance(w, EngineWork) and w._staged and w._can_stream_wait() and w._finish is None
            for w in self._engine_works)
        self._stream_works = list(self._engine_works) if streamable else []
        self._result = result
        # Held by whoever settles it, until it is settled: a waiter that did not get it
        # waits on it (cheaper to make than an Event, and a call makes one per Work).
        self._claim = threading.Lock()
        self._done = False

    @classmethod
    def settled(cls, method: str, result: List[torch.Tensor], error: Optional[BaseException],
                source=None) -> "TorchWork":
        """A Work for a call that already ran on the caller's thread (its engine error, if
        any). Made without __init__'s questions about engine works (it has none): a small
        call's whole cost is a few microseconds, and this is on its path."""
        work = cls.__new__(cls)
        dist.Work.__init__(work)
        work._method = method
        work._result = result
        if source is not None:
            work._source = source
        if error is not None:
            work._error = _torch_error(method, error)
        work._done = True
        return work  # the rest is the class's defaults: no engine works, claim, completer or future

    def _engine_completed(self) -> bool:
        return all(w.is_completed() for w in self._engine_works)

    def _hand_over(self) -> None:
        """Let the completer settle it: its Future completes with nobody waiting."""
        if not self._handed and not self._done and self._completer is not None:
            self._handed = True
            self._completer.settle_later(self)

    def _settle_once(self) -> bool:
        """Settle it on this thread unless another thread does (then return False at once)."""
        if not self._claim.acquire(blocking=False):
            return False
        self._settle_claimed()
        return True

    def _settle_claimed(self) -> None:
        try:
            if not self._done:
                self._settle()
        finally:
            self._claim.release()
        self._publish()

    def _settle(self) -> None:
        """Wait for the engine and keep the outcome (under the claim)."""
        try:
            for w in self._engine_works:
                w.wait(blocking=True)  # the Future is set once the results are in place
        except BaseException as e:  # noqa: BLE001 - delivered to every waiter
            self._error = _torch_error(self._method, e)
        self._engine_works = []  # drops the buffers' keep-alives
        self._done = True

    def _publish(self) -> None:
        """Complete the Future, if one was asked for, outside the claim: its callbacks may
        wait on this Work."""
        future = self._future
        if future is None or future.done():
            return
        try:
            if self._error is None:
                future.set_result(self._result)
            else:
                future.set_exception(self._error)
        except RuntimeError:  # another thread completed it first
            pass

    def wait(self, timeout=None) -> bool:
        if self._done and not self._stream_works:  # settled (a small call usually is by now)
            if self._error is not None:
                raise self._error
            return True
        if (self._stream_works and self._error is None and not self._stream_works[0]._group.options.blocking_wait
                and all(w._stream_wait() for w in self._stream_works)):
            self._hand_over()  # the Future completes once the results are in device memory
            return True  # the caller's stream waits; the host does not
        seconds = to_seconds(timeout)
        if seconds is not None and seconds <= 0:
            seconds = None  # torch's convention: a zero timeout means none
        if not self._done:
            if seconds is not None:  # the engine first, with the deadline; settling is quick after
                deadline = time.monotonic() + seconds
                for w in list(self._engine_works):
                    if not _wait_engine(w, max(0.0, deadline - time.monotonic())):
                        raise CollectiveTimeoutError(
                            f"pycollect backend: {self._method} not completed within {seconds:.3g} s of "
                            "Work.wait(timeout); it is still running")
            # Settle it here (waiting on the engine), or wait for the thread that does.
            self._claim.acquire()  # without the GIL
            self._settle_claimed()
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self) -> bool:
        if not self._done and self._engine_completed():
            self._settle_once()
        return self._done

    def is_success(self) -> bool:
        return self.is_completed() and self._error is None

    def exception(self):
        self.is_completed()
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
        if self._future is None:
            # CUDA results: the Future knows their devices, so a consumer's stream syncs with it.
            devices = sorted({t.device for t in self._result if isinstance(t, torch.Tensor) and t.is_cuda}, key=str)
            self._future = torch.futures.Future(devices=devices) if devices else torch.futures.Future()
        if self._done:
            self._publish()  # settled before anyone asked
        else:
            self._hand_over()
        return self._future

    def synchronize(self) -> None:
        self.wait()

    def __repr__(self) -> str:
        state = "done" if self._done else "pending"
        return f"<pycollect.torch_backend.Work {self._method} {state}>"


def _torch_error(method: str, e: BaseException) -> BaseException:
    """An engine timeout worded as Gloo's ("Timed out"), which callers match on; else `e`."""
    if isinstance(e, CollectiveTimeoutError):
        return CollectiveTimeoutError(f"pycollect backend: {method} Timed out (the group's timeout): {e}")
    return e


def _wait_engine(w, seconds: float) -> bool:
    """Whether engine Work `w` completed within `seconds` (the GIL released meanwhile)."""
    cwork = getattr(w, "_cwork", None)
    if cwork is None:
        return w.is_completed()
    try:
        return bool(cwork.wait(seconds))
    except Exception:  # noqa: BLE001 - it failed: done; _settle raises it to the waiters
        return True


class Completer:
    """The thread that settles the torch Works handed to it (TorchWork._hand_over), in order."""

    def __init__(self, name: str):
        self._queue: "queue.SimpleQueue[Optional[TorchWork]]" = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=f"pycollect-{name}-completer", daemon=True)
        self._thread.start()

    def settle_later(self, work: TorchWork) -> None:
        self._queue.put(work)

    def add(self, work: TorchWork) -> TorchWork:
        work._completer = self
        if work._engine_completed():
            work._settle_once()  # done already (a small send): nothing to hand over
        return work

    def _loop(self) -> None:
        while True:
            work = self._queue.get()  # blocks without the GIL
            if work is None:
                return
            # Wait for the engine first, claiming nothing: a caller that waits meanwhile
            # settles the Work itself, woken by the engine directly.
            for w in list(work._engine_works):
                while not work._done and not _wait_engine(w, 0.05):
                    pass
            work._settle_once()

    def close(self, timeout: float = 5.0) -> None:
        """Settle what was handed over, then stop the thread."""
        self._queue.put(None)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
