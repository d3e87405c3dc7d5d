"""Work handles returned by async_op=True (and used internally by every call)."""
from __future__ import annotations

import time
import warnings
from typing import Callable, Optional

from ._C import StagedWork
from .errors import CollectiveTimeoutError, PyCollectError
from .options import to_seconds


WAIT_SLICE_S = 0.05  # longest a wait goes without returning to Python (signal handlers)


def _slice(deadline: Optional[float]) -> float:
    if deadline is None:
        return WAIT_SLICE_S
    return min(WAIT_SLICE_S, max(0.0, deadline - time.monotonic()))


_fallback_noted = False  # the note that wait() blocks the host (no stream memory operations)


def _note_host_wait() -> None:
    global _fallback_noted
    if not _fallback_noted:
        _fallback_noted = True
        warnings.warn("pycollect: this CUDA driver has no stream memory operations (cuStreamWaitValue32_v2, "
                      "CUDA 11.7+) or cannot map host memory: wait() on a CUDA call still running blocks the "
                      "host until the result is in device memory", RuntimeWarning, stacklevel=3)


class Work:
    """A queued operation. Operations of a group complete in the order issued.

    wait(timeout=None, blocking=None) blocks (without the GIL) until the operation is done
    and raises its error if it failed; is_completed() polls.

    A call on CUDA tensors (staged through pinned memory) waits as NCCL's does: wait()
    makes the caller's current CUDA stream wait for the result and returns at once, even
    while the call is still on the wire; work queued on that stream afterwards (a kernel,
    a copy, .cpu()) sees the result, and the tensors stay referenced until the copies are
    done, even if this Work is dropped. Its errors then surface later: from
    is_completed()/exception(), from a blocking wait, and from the group's next call (the
    group has failed); a stream waiting on a failed call is released, never left hanging.
    wait(blocking=True), or PYCOLLECT_BLOCKING_WAIT=1 for every wait, blocks the host
    until the result is in device memory and raises the call's error there.
    """

    def __init__(self, group, cwork, keepalive=(), finish: Optional[Callable[[], None]] = None):
        self._group = group
        self._cwork = cwork
        self._keepalive = keepalive
        self._finish = finish
        self._finished = False
        self._staged = isinstance(cwork, StagedWork)  # a CUDA (staged) call: see the class docstring

    def _complete(self) -> None:
        if not self._finished:
            self._finished = True
            if self._finish is not None:
                self._finish()
            self._keepalive = ()

    def _can_stream_wait(self) -> bool:
        """A staged call whose wait may be the caller's stream's (host-free wait on). A finish
        step then runs right after the stream wait, on this thread: its copies queue behind
        the wait and it returns once they are done (ProcessGroup.copy_result)."""
        return self._staged and self._group.host_free_wait()

    def _stream_wait(self) -> bool:
        """Makes the caller's current stream wait for the call (no host wait); False when
        the host must wait instead (a call that failed: the host wait raises its error)."""
        if not self._can_stream_wait() or self._cwork.failed():
            return False
        try:
            queued = self._cwork.stream_wait(self._group.caller_stream())
        except PyCollectError:
            return False  # failed meanwhile
        if not queued:
            _note_host_wait()
        return queued

    def wait(self, timeout: Optional[float] = None, blocking: Optional[bool] = None) -> bool:
        """Wait until done; raise its error. Waits in slices of WAIT_SLICE_S, so Ctrl-C
        (any Python signal handler) gets through within one slice; a KeyboardInterrupt
        fails the group, so that the peers learn of it instead of waiting for this rank.

        A CUDA call: the caller's current stream waits and the host does not (see the class
        docstring), unless `blocking` (None: PYCOLLECT_BLOCKING_WAIT) or the call failed."""
        if self._staged and not (self._group.options.blocking_wait if blocking is None else blocking) \
                and self._stream_wait():
            self._complete()  # a finish's copies queue behind the wait; the group keeps the buffers
            return True
        seconds = None if timeout is None else to_seconds(timeout)
        deadline = None if seconds is None else time.monotonic() + seconds
        try:
            # The caller drives the links itself while the worker only progresses posted
            # sends and receives (Communicator::waitDriving): no wake-up hand-off at the end.
            # Without a deadline it also runs the call itself if the worker has not begun it
            # (not a staged call: those are the worker's, comm/communicator_staged.cc).
            comm = self._group._comm
            if deadline is None:
                while not comm.wait_driving(self._cwork, WAIT_SLICE_S, not self._staged):
                    pass
            else:
                while not comm.wait_driving(self._cwork, _slice(deadline), False):
                    self._check_deadline(deadline, seconds)
            while self._staged and not self._cwork.wait_device(_slice(deadline)):  # its last copies too
                self._check_deadline(deadline, seconds)
        except PyCollectError as e:
            self._fail_group_on_late_error(e)
            raise self._group.explain(e) from None
        except KeyboardInterrupt:
            self._group.abort(f"interrupted (KeyboardInterrupt) while waiting for {self._cwork.what}")
            raise
        self._complete()
        return True

    def _check_deadline(self, deadline: Optional[float], seconds: Optional[float]) -> None:
        if deadline is not None and time.monotonic() >= deadline:
            raise CollectiveTimeoutError(f"{self._cwork.what}: not completed within {seconds:.3g} s of "
                                         "wait(); it is still running")

    def _fail_group_on_late_error(self, error: PyCollectError) -> None:
        if self._staged:  # only a staged call's copies can fail after it ended (ProcessGroup.fail_late)
            self._group.fail_late(self._cwork, error)

    def _device_done(self) -> bool:
        """A staged call's result is in device memory; raises if its copies failed."""
        try:
            return self._cwork.device_done()
        except PyCollectError as e:
            self._fail_group_on_late_error(e)
            raise

    def _device_error(self):
        """A staged call's: its copies to the device failed (else None)."""
        try:
            self._device_done()
        except PyCollectError as e:
            return e
        return None

    def is_completed(self) -> bool:
        """Done (or failed); a CUDA call once its result is in device memory."""
        if not self._cwork.is_completed():
            return False
        if self._cwork.failed():
            return True
        if self._staged:
            try:
                if not self._device_done():
                    return False
            except PyCollectError:
                return True
        self._complete()
        return True

    def is_success(self) -> bool:
        return self.is_completed() and self.exception() is None

    def exception(self):
        if not self._cwork.is_completed():
            return None
        if not self._cwork.failed():
            return self._device_error() if self._staged else None
        try:
            self._cwork.wait(0.0)
        except PyCollectError as e:
            return e
        return None

    def __repr__(self) -> str:
        state = "done" if self._cwork.is_completed() else "pending"
        return f"<pycollect.Work {self._cwork.what} {state}>"
