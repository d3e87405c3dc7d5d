"""Work handles returned by async_op=True (and used internally by every call)."""
from __future__ import annotations

import time
from typing import Callable, Optional

from .errors import CollectiveTimeoutError, GroupFailedError, PyCollectError
from .options import to_seconds


WAIT_SLICE_S = 0.05  # longest a wait goes without returning to Python (signal handlers)


def _slice(deadline: Optional[float]) -> float:
    if deadline is None:
        return WAIT_SLICE_S
    return min(WAIT_SLICE_S, max(0.0, deadline - time.monotonic()))


class Work:
    """A queued operation. Operations of a group complete in the order issued.

    wait(timeout=None) blocks (without the GIL) until the operation is done and
    raises its error if it failed; is_completed() polls.
    """

    def __init__(self, group, cwork, keepalive=(), finish: Optional[Callable[[], None]] = None):
        self._group = group
        self._cwork = cwork
        self._keepalive = keepalive
        self._finish = finish
        self._finished = False

    def _complete(self) -> None:
        if not self._finished:
            self._finished = True
            if self._finish is not None:
                self._finish()
            self._keepalive = ()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until done; raise its error. Waits in slices of WAIT_SLICE_S, so Ctrl-C
        (any Python signal handler) gets through within one slice; a KeyboardInterrupt
        fails the group, so that the peers learn of it instead of waiting for this rank."""
        seconds = to_seconds(timeout)
        deadline = None if seconds is None else time.monotonic() + seconds
        try:
            while not self._cwork.wait(_slice(deadline)):
                if deadline is not None and time.monotonic() >= deadline:
                    raise CollectiveTimeoutError(f"{self._cwork.what}: not completed within {seconds:.3g} s of "
                                                 "wait(); it is still running")
        except PyCollectError as e:
            raise self._group.explain(e) from None
        except KeyboardInterrupt:
            self._group.abort(f"interrupted (KeyboardInterrupt) while waiting for {self._cwork.what}")
            raise
        self._complete()
        return True

    def is_completed(self) -> bool:
        if not self._cwork.is_completed():
            return False
        if not self._cwork.failed():
            self._complete()
        return True

    def is_success(self) -> bool:
        return self._cwork.is_completed() and not self._cwork.failed()

    def exception(self):
        if not self._cwork.failed():
            return None
        try:
            self._cwork.wait(0.0)
        except PyCollectError as e:
            return e
        return None

    def __repr__(self) -> str:
        state = "done" if self._cwork.is_completed() else "pending"
        return f"<pycollect.Work {self._cwork.what} {state}>"


class WorkList:
    """Several Works that finish together, e.g. the sends and receives of an all-to-all."""

    def __init__(self, works):
        self.works = list(works)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait for every Work; if some failed, raise the root cause: an error of its own
        (a mismatch, a timeout, a lost peer) rather than a GroupFailedError it caused."""
        seconds = to_seconds(timeout)
        deadline = None if seconds is None else time.monotonic() + seconds
        errors = []
        for w in self.works:
            try:
                w.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
            except PyCollectError as e:
                errors.append(e)
        if errors:
            raise next((e for e in errors if not isinstance(e, GroupFailedError)), errors[0])
        return True

    def is_completed(self) -> bool:
        return all(w.is_completed() for w in self.works)

    def __repr__(self) -> str:
        return f"<pycollect.WorkList of {len(self.works)}>"
