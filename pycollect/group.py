"""ProcessGroup: one group of ranks and its C++ Communicator, and the calls issued on it.

Forming the group is formation.py's job (the ranks meet in the store and connect), and
explaining its failures, with the flight record, is failures.py's; a ProcessGroup makes
one of each and issues the calls, in order, with their buffers kept alive.
"""
from __future__ import annotations

import collections
import datetime
import os
import weakref
from typing import Dict, List, Optional, Sequence

from . import _C
from ._buffers import copy_into
from .errors import PyCollectError
from .failures import Failures
from .formation import Formation
from .options import WIRE_SETTINGS, Options, default_single_copy_bytes, default_spin_us
from .shrink import agree, checked_exclusion, shrunk_name
from .topology import Topology
from .tuning import Params
from .types import CALL_ALGOS, Algo, TraceEvent
from .work import Work


def _comm_options(timeout: datetime.timedelta, options: Options, size: int) -> "_C.CommOptions":
    o = _C.CommOptions()
    o.timeout = timeout.total_seconds()
    # torchrun says how many ranks share this host; else assume the whole group does
    local = min(size, int(os.environ.get("LOCAL_WORLD_SIZE") or size))
    o.spin_us = default_spin_us(local) if options.spin_us is None else options.spin_us
    o.shm_single_copy_bytes = default_single_copy_bytes(local)
    for name in ("segment_bytes", "inflight", "direct_max_bytes", "socket_buffer", "link_timeout", "secret",
                 "transport", "host_tag", "staging_bytes", "shm_single_copy_bytes", "flight_entries", "eager_bytes",
                 "shm_collective_bytes"):
        value = getattr(options, name)
        if value is not None:
            setattr(o, name, value)
    o.all_links_at_start = options.links == "all"
    if options.trace:
        _check_trace_hooks()
    o.trace = options.trace
    return o


def _check_trace_hooks() -> None:
    if not _C.TRACE_HOOKS:
        raise NotImplementedError("this build of pycollect has no trace hooks (built with "
                                  "-DPYCOLLECT_TRACE_HOOKS=OFF, to measure their cost); reinstall it to trace")


class ProcessGroup:
    """A set of ranks with its own links. Collectives on it run in issue order.

    `ranks` are the global ranks of the members (sorted); `rank` is this process's
    index among them. `options` default to Options.from_env().
    """

    def __init__(self, name: str, store, ranks: Sequence[int], global_rank: int,
                 timeout: datetime.timedelta, host: str, options: Optional[Options] = None):
        self.name = name
        self.ranks: List[int] = sorted(ranks)
        self.rank = self.ranks.index(global_rank)
        self.size = len(self.ranks)
        self.timeout = timeout
        self.options = Options.from_env() if options is None else options
        self.algo = self.options.algo
        # What each call with a choice runs when the caller names none (looked up per call).
        self._default_algos = {call: Algo.for_call(call, None, self.algo) for call in CALL_ALGOS}
        self._pending: collections.deque = collections.deque()  # (cwork, keepalive) not known done, under _lock
        self._lock = _C.IssueLock()  # threads may submit on one group at once (a threading.Lock's kind)
        self.cuda_device: Optional[int] = None  # the CUDA device its CUDA tensors live on (first use)
        self.host_device = False  # tests: CPU tensors take the staged path (use_host_device)
        self.host_stream_wait = False  # tests: wait() on them makes the host device's stream wait
        comm_options = _comm_options(timeout, self.options, self.size)
        # What every rank must have alike (options.WIRE_SETTINGS), defaults resolved: checked as the ranks meet.
        wire = {name: getattr(comm_options, attr) for name, attr in WIRE_SETTINGS.items()}
        self._comm = _C.Communicator(self.rank, self.size, comm_options)
        # The blocking calls on plain host buffers in one crossing (csrc/bindings/
        # register_fast_calls.cc); None: every call takes the general path.
        algos = self._default_algos
        self.fast: Optional[_C.FastCalls] = _C.fast_calls(self._comm, self._lock, self._pending,
                                                          weakref.WeakMethod(self._release_settled), self.ranks,
                                                          algos["all_reduce"], algos["broadcast"],
                                                          algos["all_gather"], algos["reduce_scatter"])
        formed = Formation(name, store, self.ranks, self.rank, timeout, self.options, self._comm, wire)
        formed.connect(host)
        self._store, self._keys = store, formed.keys  # where it formed (shrunk)
        self.host = host  # the address its ranks listen on (a group made from it listens there too)
        self.topology: Topology = formed.topology  # which ranks share a host
        self.model: Optional[Params] = formed.model  # the cost model behind "auto" (None: thresholds)
        # What "auto" runs: {CommOptions field: [(max_bytes, algo code), ...]}; {} keeps the thresholds.
        self.auto: Dict[str, list] = formed.auto
        # From which bytes "auto" runs each op hierarchically (None: never).
        self.hierarchical_from: Dict[str, Optional[int]] = formed.hierarchical_from
        self._failures = Failures(store, formed.keys, formed.scope, formed.token, self.rank, self.ranks,
                                  self.options.flight_dir, self._comm)

    # -- used by api.py -------------------------------------------------------
    def algo_for(self, call: str, value, name: str = "") -> Algo:
        """The algorithm `call` runs on this group: Algo.for_call's answer, the group's own
        default computed once (`value` None, the common case)."""
        if value is None:
            return self._default_algos[call]
        return Algo.for_call(call, value, self.algo, name)

    def submit(self, launch, args, keepalive=(), finish=None) -> Work:
        """Run `launch(*args, False)` (an engine call returning a C++ Work; `launch` is a method
        of this group's communicator, or a function calling one) and track the buffers: they
        stay referenced until the engine is done with them, a staged call's until its copies
        to the device completed (a wait() that only made a stream wait does not end them)."""
        with self._lock:  # issue order is the lock's order, so the engine's queue sees it too
            if self._pending:
                self._release_settled()
            cwork = launch(*args, False)
            self._pending.append((cwork, keepalive))  # buffers live until the engine is done
        return Work(self, cwork, keepalive, finish)

    def run_blocking(self, launch, args, keepalive=(), finish=None):
        """A blocking call: `launch(*args, True)`, the engine free to run it on this thread. A
        host call that ran there to its end without error returns then and there, its
        finish step run: it comes back as None (the engine keeps no Work for it:
        pycollect._C's unlessSettled), or done (a receive from any source: its Work names
        the sender); any other is waited on. Returns the engine's Work where one came back."""
        with self._lock:
            if self._pending:
                self._release_settled()
            cwork = launch(*args, True)
            settled = cwork is None or (type(cwork) is not _C.StagedWork and cwork.is_completed()
                                        and not cwork.failed())
            if not settled:
                self._pending.append((cwork, keepalive))  # buffers live until the engine is done
        if settled:
            if finish is not None:
                finish()
            return cwork
        return self.wait_issued(cwork, keepalive, finish)

    def wait_issued(self, cwork, keepalive=(), finish=None):
        """Wait for a blocking call that was issued but did not end on this thread (already
        among the calls in flight): its error raised as any Work's. Returns the engine's Work."""
        Work(self, cwork, keepalive, finish).wait()
        return cwork

    def _release_settled(self) -> None:
        """Drops the buffers of the oldest calls the engine is done with (calls mostly end in
        the order issued; one still running holds the later ones' until it ends)."""
        pending = self._pending
        while pending and self._settled(pending[0][0]):
            pending.popleft()

    def _settled(self, cwork) -> bool:
        """The engine is done with a call's buffers: it completed, and a staged call's copies
        to the device completed too, or failed: that fails the group (if the call itself had
        not), so this very call raises it."""
        if not cwork.is_completed():
            return False
        if not isinstance(cwork, _C.StagedWork):
            return True
        try:
            return cwork.device_done()
        except PyCollectError as e:
            self.fail_late(cwork, e)
            return True

    def fail_late(self, cwork, error: PyCollectError) -> None:
        """A staged call whose copies back failed after it ended on the host fails the
        group, as a failure during the call does: the peers learn of it, later calls
        raise it (once: a call that failed by itself already failed the group)."""
        if cwork.is_completed() and not cwork.failed():
            self.abort(str(error))

    def group_rank(self, global_rank: int, what: str) -> int:
        try:
            return self.ranks.index(global_rank)
        except ValueError:
            raise ValueError(f"{what}: rank {global_rank} is not in this group (ranks {self.ranks})") from None

    def use_host_device(self, copy_delay_us: int = 0, fail_copy: int = 0, stream_wait: bool = False,
                        sticky_errors: bool = False, fail_flags: bool = False) -> None:
        """Tests only: from now on CPU tensors take the CUDA path, staged through the engine's
        host device (an asynchronous stand-in for a GPU: each copy runs later on a stream
        thread, after `copy_delay_us`; the `fail_copy`-th copy fails, and with
        `sticky_errors` that failure is the whole device's, as a sticky CUDA error is;
        `fail_flags`: the device cannot make flag words, so wait() blocks the host).

        wait() blocks the host by default here, since a test reads CPU tensors directly;
        with `stream_wait` it behaves as on CUDA (the host device's stream 0, the caller's,
        waits; the host returns at once), and a test reads results through that stream
        (the comm's host_device_snapshot / host_device_synchronize)."""
        self._comm.use_host_device(copy_delay_us, fail_copy, sticky_errors, fail_flags, stream_wait)
        self.host_device = True
        self.fast = None  # its calls take the staged path, which only the general path knows
        self.host_stream_wait = stream_wait

    def copy_result(self, dst, src) -> None:
        """A call's finish step copies a result (all_gather's list form: the flat buffer into
        each tensor) in the order of the call's own copies, and returns once it is done (the
        step may run on another thread than the caller's): on CUDA on the current stream,
        then a stream synchronize; on the host device in its stream-wait mode through its
        stream 0 (the caller's), likewise. Else a plain copy."""
        if self.host_stream_wait and self.cuda_device is None:
            nbytes = dst.numel() * dst.element_size()
            self._comm.host_device_snapshot(dst.data_ptr(), src.data_ptr(), nbytes)
            self._comm.host_device_synchronize()
        else:
            copy_into(dst, src)

    def host_free_wait(self) -> bool:
        """Whether wait() on a staged call may make the caller's stream wait instead of the
        host (CUDA tensors; the host device when asked): Work.wait decides with `blocking`."""
        return self.cuda_device is not None or self.host_stream_wait

    def caller_stream(self) -> int:
        """The stream a wait() on this thread orders: torch's current stream of the group's
        CUDA device (the host device's stream 0 in tests)."""
        if self.cuda_device is None:
            return 0
        import torch

        return torch.cuda.current_stream(self.cuda_device).cuda_stream

    # -- failures -------------------------------------------------------------
    def explain(self, error: PyCollectError, wait_s: float = 1.5) -> PyCollectError:
        """The error to raise for a failed call: this rank's failure published to the others,
        what they reported added, the flight record named (failures.Failures.explain)."""
        return self._failures.explain(error, wait_s)

    # -- state ----------------------------------------------------------------
    def counters(self) -> dict:
        """Calls per kind executed through this group's engine."""
        return dict(self._comm.counters())

    def flight_record(self) -> List[dict]:
        """This rank's flight record for the group (csrc/trace/flight.h), oldest first."""
        return list(self._comm.flight_record())

    def transport_info(self) -> Dict[int, str]:
        """global rank of each peer -> what carries the link to it ("shm" or "tcp")."""
        return {self.ranks[p]: kind for p, kind in self._comm.link_kinds().items()}

    def scratch_bytes(self) -> int:
        """Scratch memory the engine holds for this group (released after a second idle
        once it exceeds 8 MiB)."""
        return self._comm.scratch_bytes()

    def bytes_sent(self) -> int:
        """Bytes this rank has put on its links for this group (payload and headers), as of
        the last finished operation: communication volume measured, not estimated."""
        return self._comm.bytes_sent()

    def set_tracing(self, on: bool) -> bool:
        """Trace the calls issued from now on (or stop); returns the previous setting."""
        if on:
            _check_trace_hooks()
        return self._comm.set_tracing(bool(on))

    def take_trace(self) -> List[TraceEvent]:
        """The engine events recorded so far for this group, oldest first; the buffer is
        emptied. Raises if events were dropped because the buffer was full."""
        events, dropped = self._comm.take_trace()
        if dropped:
            raise RuntimeError(f"the trace buffer of {self!r} was full: {dropped} events were dropped; "
                               "take_trace() more often or trace fewer calls")
        return [TraceEvent(self.rank, *e) for e in events]

    def shrunk(self, excluded: Sequence[int], abort: bool = True) -> "ProcessGroup":
        """A new group of this one's ranks but `excluded` (ranks of this group), this rank
        renumbered among the rest as torch does; the survivors must all call it with the same
        ranks (shrink.py: how they agree, and why they form anew). With `abort`, this group
        fails first ("shrunk"), so that a call still blocked on it ends at once; without, its
        calls in flight go on until it is destroyed."""
        excluded = checked_exclusion(excluded, self.size, self.rank)
        if abort:
            self.abort(f"shrunk: rank(s) {excluded} excluded")
        agree(self._store, self._keys, self.rank, self.size, excluded, self.timeout.total_seconds())
        members = [r for i, r in enumerate(self.ranks) if i not in excluded]
        return ProcessGroup(shrunk_name(self.name, excluded), self._store, members, self.ranks[self.rank],
                            self.timeout, self.host, self.options)

    def abort(self, reason: str) -> None:
        """Fail the group from any thread: later calls raise GroupFailedError naming `reason`,
        and the peers see the links close."""
        self._comm.abort(reason)

    def destroy(self) -> None:
        self.fast = None  # the API's calls on it take the general path, which says it was destroyed
        self._comm.shutdown()  # the staged copies in flight end first (at most 10 s)
        with self._lock:
            self._pending.clear()

    def __repr__(self) -> str:
        return f"<pycollect.ProcessGroup {self.name} rank {self.rank}/{self.size} ranks={self.ranks}>"


class _NonMember:
    """What new_group returns on ranks outside the new group (torch's NON_GROUP_MEMBER)."""

    def __repr__(self) -> str:
        return "<pycollect.NON_GROUP_MEMBER>"


NON_GROUP_MEMBER = _NonMember()
