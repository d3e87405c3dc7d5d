"""ProcessGroup: one group of ranks, its rendezvous, its C++ Communicator, and what its
ranks report to each other through the store when something fails."""
from __future__ import annotations

import collections
import datetime
import json
import os
import secrets
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

from . import _C, flight
from ._buffers import copy_into
from .tuning import DEFAULT_SEGMENT_BYTES, ENGINE_ALGOS, Params, auto_table
from .tuning.hierarchy import OPS as HIERARCHY_OPS, hierarchical_from
from .errors import (CollectiveTimeoutError, DeviceError, GroupFailedError, MismatchError, PeerLostError,
                     PyCollectError)
from .options import WIRE_SETTINGS, Options, default_single_copy_bytes, default_spin_us
from .topology import Topology
from .types import Algo, TraceEvent
from .work import Work

# Kinds of failure that explain a neighbour's PeerLostError: the rank that saw one of these
# closed its links on purpose, and its neighbours only saw the links close.
_ROOT_CAUSES = {"MismatchError": MismatchError, "CollectiveTimeoutError": CollectiveTimeoutError,
                "DeviceError": DeviceError}


def _comm_options(timeout: datetime.timedelta, options: Options, size: int) -> "_C.CommOptions":
    o = _C.CommOptions()
    o.timeout = timeout.total_seconds()
    # torchrun says how many ranks share this host; else assume the whole group does
    local = min(size, int(os.environ.get("LOCAL_WORLD_SIZE") or size))
    o.spin_us = default_spin_us(local) if options.spin_us is None else options.spin_us
    o.shm_single_copy_bytes = default_single_copy_bytes(local)
    for name in ("segment_bytes", "inflight", "direct_max_bytes", "socket_buffer", "link_timeout", "secret",
                 "transport", "host_tag", "staging_bytes", "shm_single_copy_bytes", "flight_entries"):
        value = getattr(options, name)
        if value is not None:
            setattr(o, name, value)
    if options.trace:
        _check_trace_hooks()
    o.trace = options.trace
    return o


def _check_trace_hooks() -> None:
    if not _C.TRACE_HOOKS:
        raise NotImplementedError("this build of pycollect has no trace hooks (built with "
                                  "-DPYCOLLECT_TRACE_HOOKS=OFF, to measure their cost); reinstall it to trace")


def auto_tables(params: Params, size: int, options: Options) -> Dict[str, list]:
    """CommOptions' automatic-choice tables for a group of `size`: {field: [(max_bytes, code)]},
    among the algorithms the engine has (tuning.ENGINE_ALGOS)."""
    seg = options.segment_bytes or DEFAULT_SEGMENT_BYTES
    return {f"{op.replace('_', '')}_auto": [(b, int(Algo[a.upper()])) for b, a in
                                           auto_table(op, size, params, algos, segment_bytes=seg)]
            for op, algos in ENGINE_ALGOS.items()}


NEVER = 2**64 - 1  # a size no call reaches (the engine's SIZE_MAX)
ADMIT_GRACE_S = 1.0  # a rank > 0 waits this much longer than rank 0 for rank 0's answer


def store_scope(name: str) -> str:
    """Where a group named `name` keeps its keys in the store: under this torchrun attempt
    too. `torchrun --max-restarts` restarts every worker on the same agent store, which
    still holds the keys of the attempt before (its token, its ranks' addresses): a new
    rank that read them would knock on a dead rank's port or present a stale token. Each
    attempt's processes agree on TORCHELASTIC_RESTART_COUNT, so their keys never meet."""
    return f"{name}@{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"


def _formation_keys(scope: str, token: int) -> str:
    """Where one formation of a group (its token) keeps its keys: the roster, model, reports."""
    return f"{scope}/{token:016x}"


def published_address(store, name: str, rank: int, timeout: float = 15.0) -> Tuple[str, int]:
    """(host, port) where `rank` of the group named `name` listens: its address while the
    group forms, the roster once it formed; what any stranger with the store can read
    (tests, tools)."""
    scope = store_scope(name)
    key, deadline = f"{scope}/addr/{rank}", time.monotonic() + timeout
    while True:
        if store.check([key]):
            host, port = json.loads(store.get(key).decode())["addr"].rsplit(" ", 1)
            return host, int(port)
        if store.check([f"{scope}/token"]):  # never a blocking get: the client is shared
            roster = f"{_formation_keys(scope, int(store.get(f'{scope}/token').decode()))}/roster"
            if store.check([roster]):
                host, port = json.loads(store.get(roster).decode())[rank]["addr"].rsplit(" ", 1)
                return host, int(port)
        if time.monotonic() > deadline:
            raise TimeoutError(f"no address of rank {rank} of group {name} in the store within {timeout:g} s")
        time.sleep(0.01)


def _on_helper(name: str, fn, seconds: float) -> list:
    """fn() on a daemon thread, waited for up to `seconds`: [(True, what it returned)] or
    [(False, the exception it raised)], or [] while it still runs (a store client blocked
    on a silent store waits for the store's own timeout, not ours)."""
    outcome: list = []

    def body() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            outcome.append((False, e))

    helper = threading.Thread(target=body, name=name, daemon=True)
    helper.start()
    helper.join(seconds)
    return outcome


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
        self._store = store
        self._prefix = store_scope(name)
        self._pending: collections.deque = collections.deque()  # (cwork, keepalive) not known done, under _lock
        self._lock = threading.Lock()  # threads may submit on one group at once
        self._published = False   # this rank's failure is in the store
        self._store_silent = False  # the store did not answer while explaining a failure
        self._flight_path: Optional[str] = None  # this rank's flight record, once written
        self._token: Optional[int] = None  # this formation's, once the ranks met (_exchange)
        self.topology: Optional[Topology] = None  # which ranks share a host, once the ranks met
        self.cuda_device: Optional[int] = None  # the CUDA device its CUDA tensors live on (first use)
        self.host_device = False  # tests: CPU tensors take the staged path (use_host_device)
        self.host_stream_wait = False  # tests: wait() on them makes the host device's stream wait
        self.model: Optional[Params] = None  # the cost model behind "auto" (set while connecting)
        # What "auto" runs: {CommOptions field: [(max_bytes, algo code), ...]}; {} keeps the thresholds.
        self.auto: Dict[str, list] = {}
        # From which bytes "auto" runs each op hierarchically (None: never), once the ranks met.
        self.hierarchical_from: Dict[str, Optional[int]] = {}
        comm_options = _comm_options(timeout, self.options, self.size)
        # What every rank must have alike (options.WIRE_SETTINGS), defaults resolved: checked as the ranks meet.
        self._wire = {name: getattr(comm_options, attr) for name, attr in WIRE_SETTINGS.items()}
        self._comm = _C.Communicator(self.rank, self.size, comm_options)
        self._connect(host)

    def _uses_model(self) -> bool:
        return self.options.direct_max_bytes is None and self.size > 1

    def _publish_model(self) -> None:
        """Rank 0: the cost model's parameters behind the automatic algorithm choice
        (PYCOLLECT_MODEL, else the built-in defaults) and the tables they give this group,
        in the store before the ranks are admitted. The tables are built here once (~20 ms
        of arithmetic) rather than on every rank: with more ranks than cores that was half
        of forming a 64-rank group (docs/formation.md). Their inputs besides the model (the
        group's size, PYCOLLECT_SEGMENT_BYTES) are the same on every rank (checked)."""
        params = Params.load(self.options.model) if self.options.model else Params()
        self.auto = auto_tables(params, self.size, self.options)
        self._store.set(f"{self._keys}/model", json.dumps({"params": params.to_json(), "auto": self.auto}))

    def _adopt_model(self) -> None:
        """Every rank, once rank 0 admitted it (so the model is in the store): the same
        parameters and tables, given to the engine before it connects. A rank never waits
        for the others before it listens and publishes its own address."""
        published = json.loads(self._store.get(f"{self._keys}/model").decode())
        self.model = Params.from_json(published["params"])
        self.auto = {field: [tuple(row) for row in rows] for field, rows in published["auto"].items()}
        self._comm.set_auto_tables(self.auto["allreduce_auto"], self.auto["allgather_auto"])

    def _connect(self, host: str) -> None:
        """Meet the other ranks in the store, then connect the mesh. Every store step is bound
        by the group's timeout, even with the store's host stalled (a store client waits for
        the store's own timeout, not ours): the exchange runs on a helper thread."""
        addr, port = self._comm.listen(host)
        seconds = self.timeout.total_seconds()
        deadline = time.monotonic() + seconds
        outcome = _on_helper(f"pycollect-rendezvous-{self._prefix}",
                             lambda: self._exchange(f"{addr} {port}", deadline), seconds + ADMIT_GRACE_S + 1.0)
        if not outcome:
            raise CollectiveTimeoutError(
                f"forming group {self.name} on rank {self.rank}: the rendezvous store did not answer within "
                f"{seconds + ADMIT_GRACE_S + 1.0:.1f} s (its host, global rank 0 or the MASTER_ADDR process, may be stalled or out of reach)")
        returned, value = outcome[0]
        if not returned:
            raise value
        hosts, ports = value
        self._connect_mesh(hosts, ports, self._token)

    @property
    def _keys(self) -> str:
        """Where this formation keeps its keys: under its token once the ranks met (_exchange)."""
        return self._prefix if self._token is None else _formation_keys(self._prefix, self._token)

    def _exchange(self, address: str, deadline: float):
        """The group's rendezvous in the store; (hosts, ports), and its token in self._token.

        A job that re-initialises on the same store (destroy_process_group, then
        init_process_group with other ranks or another world size) makes groups whose
        names its earlier groups had, and their keys are still there. So no rank reads a
        key it did not see written fresh: each rank publishes its address with a random
        nonce; rank 0 reads and deletes the others' (a later formation cannot meet them),
        writes the roster of addresses under a token new to this formation, and answers
        each nonce with the token. A rank that never joins is named by rank 0, and rank 0
        tells the ranks that did."""
        store, p = self._store, self._prefix
        nonce = f"{secrets.randbits(63):016x}"
        # The host identity rides along: every rank learns the group's topology from the roster.
        mine = {"addr": address, "host": _C.host_identity(self.options.host_tag or ""), "wire": self._wire}
        store.set(f"{p}/addr/{self.rank}", json.dumps({"nonce": nonce, **mine}))

        def left() -> datetime.timedelta:
            return datetime.timedelta(seconds=max(0.001, deadline - time.monotonic()))

        if self.rank == 0:
            token = secrets.randbits(63)
            store.set(f"{p}/token", str(token))  # where a tool finds the roster, once written
            joins = [f"{p}/addr/{r}" for r in range(1, self.size)]
            missing = self._wait_keys(joins, left()) if joins else []
            found = {k: json.loads(store.get(k).decode()) for k in joins if k not in missing}
            for k in found:
                store.delete_key(k)
            if missing:
                names = ", ".join(self._rank_name(joins.index(k) + 1) for k in missing)
                for theirs in found.values():
                    store.set(f"{p}/ack/{theirs['nonce']}", f"!{names}")  # they raise at once, naming them
                raise self._join_timeout(f"{names} did not join")
            disagreement = self._wire_disagreement([found[k]["wire"] for k in joins])
            if disagreement:
                for theirs in found.values():
                    store.set(f"{p}/ack/{theirs['nonce']}", f"={disagreement}")
                raise MismatchError(disagreement)
            self._token = token
            roster = [mine] + [{"addr": found[k]["addr"], "host": found[k]["host"]} for k in joins]
            store.set(f"{self._keys}/roster", json.dumps(roster))
            if self._uses_model():
                self._publish_model()
            for theirs in found.values():
                store.set(f"{p}/ack/{theirs['nonce']}", str(token))
        else:
            ack = f"{p}/ack/{nonce}"  # rank 0 answers by its deadline: wait a little past ours
            if self._wait_keys([ack], left() + datetime.timedelta(seconds=ADMIT_GRACE_S)):
                raise self._join_timeout(f"{self._rank_name(0)} did not admit this rank (it waits for every rank "
                                         "to join, or is stalled or dead itself)")
            answer = store.get(ack).decode()
            store.delete_key(ack)
            if answer.startswith("!"):
                raise self._join_timeout(f"{answer[1:]} did not join (rank 0 says)")
            if answer.startswith("="):
                raise MismatchError(answer[1:])
            self._token = int(answer)
            roster = json.loads(store.get(f"{self._keys}/roster").decode())
        hosts, ports = [], []
        for entry in roster:
            h, pt = entry["addr"].rsplit(" ", 1)
            hosts.append(h)
            ports.append(int(pt))
        self.topology = Topology.from_identities([e["host"] for e in roster], self.ranks, self.ranks[self.rank])
        if self._uses_model():
            self._adopt_model()
        self._set_hierarchy()
        return hosts, ports

    def _set_hierarchy(self) -> None:
        """Tell the engine the group's hosts, and from which sizes "auto" runs each collective
        hierarchically: where the two-level model (tuning.hierarchy) predicts it faster than
        the flat ring, on a group that spans hosts with several ranks on some."""
        host_of = [self.topology.host_of(r) for r in self.ranks]
        layout = tuple(len(h) for h in self.topology.hosts)
        self.hierarchical_from = {op: hierarchical_from(op, layout, self.model, host_of) if self.model else None
                                  for op in HIERARCHY_OPS}
        self._comm.set_topology(host_of, *(NEVER if b is None else b for b in self.hierarchical_from.values()))

    def _wire_disagreement(self, theirs: List[dict]) -> Optional[str]:
        """Rank 0: what the joining ranks (1, 2, ...) set otherwise than it did among the
        settings every rank must share (options.WIRE_SETTINGS), as a sentence; None if nothing."""
        for name, own in self._wire.items():
            differ = [(r, wire[name]) for r, wire in enumerate(theirs, 1) if wire.get(name) != own]
            if differ:
                others = "; ".join(f"{value} on {self._rank_name(r)}" for r, value in differ[:3])
                more = f" and {len(differ) - 3} more ranks" if len(differ) > 3 else ""
                return (f"forming group {self.name}: {name} differs across ranks: {own} on {self._rank_name(0)}, "
                        f"{others}{more}. It shapes what goes on the wire, so every rank must set it alike")
        return None

    def _wait_keys(self, keys: List[str], timeout: datetime.timedelta) -> List[str]:
        """Wait until every key is in the store; the keys still missing when `timeout` passed."""
        try:
            self._store.wait(keys, timeout)
            return []
        except Exception:  # noqa: BLE001 - the store's own timeout error: say which are missing
            return [k for k in keys if not self._store.check([k])]

    def _rank_name(self, r: int) -> str:
        return f"rank {r}" + (f" (global rank {self.ranks[r]})" if self.ranks[r] != r else "")

    def _join_timeout(self, what: str) -> CollectiveTimeoutError:
        return CollectiveTimeoutError(f"forming group {self.name} on rank {self.rank}: {what} within "
                                      f"{self.timeout.total_seconds():.1f} s (stalled, dead, or not making this group)")

    def _connect_mesh(self, hosts: List[str], ports: List[int], token: int) -> None:
        """Connect the mesh on a helper thread (the engine releases the GIL) while this one
        watches the store: a rank that fails to connect publishes why under `connect_failed`,
        and every other rank then gives up within a fraction of a second, instead of waiting
        for the rendezvous timeout for a peer that will never come (e.g. a rank whose
        PYCOLLECT_SECRET differs: only the rank that checks the proof can tell, the other
        end only sees a stranger fail)."""
        store, key = self._store, f"{self._keys}/connect_failed"
        outcome: list = []

        def connect() -> None:
            try:
                self._comm.connect(hosts, ports, token)
            except BaseException as e:  # handed to the waiting thread
                outcome.append(e)

        worker = threading.Thread(target=connect, name=f"pycollect-connect-{self._prefix}", daemon=True)
        worker.start()
        report = None
        try:
            while worker.is_alive():
                worker.join(0.1)
                if report is None and worker.is_alive():
                    report = self._connect_report(store, key)
                    if report is not None:
                        self._comm.cancel_connect()
        except BaseException:
            self._comm.cancel_connect()  # e.g. Ctrl-C: stop connecting, then raise
            worker.join()
            raise
        if not outcome:
            return
        error = outcome[0]
        if report is None:
            try:
                store.set(key, f"rank {self.rank}: {type(error).__name__}: {error}")
            except Exception:
                pass  # the store may be gone with rank 0; the local error stands
        elif "authentication failed" not in str(error):
            error = type(error)(f"{error}; {report}")
        raise error

    @staticmethod
    def _connect_report(store, key: str) -> Optional[str]:
        """Another rank's connect failure, or None; an unreachable store is one too."""
        try:
            return store.get(key).decode(errors="replace") if store.check([key]) else None
        except Exception as e:  # noqa: BLE001 - the store's host (rank 0) may have exited
            return f"the rendezvous store is unreachable ({e})"

    # -- used by api.py -------------------------------------------------------
    def submit(self, launch, keepalive=(), finish=None) -> Work:
        """Run `launch(comm, False)` (which returns a C++ Work) and track the buffers: they
        stay referenced until the engine is done with them, a staged call's until its copies
        to the device completed (a wait() that only made a stream wait does not end them)."""
        return self._issue(launch, False, keepalive, finish, settle=False)

    def run_blocking(self, launch, keepalive=(), finish=None) -> None:
        """A blocking call: `launch(comm, True)`, the engine free to run it on this thread. A
        host call that ran inline comes back done: it returns then and there, without the
        Work and its wait (a few microseconds of a small call's ten); any other is waited on."""
        work = self._issue(launch, True, keepalive, finish, settle=True)
        if work is not None:
            work.wait()

    def _issue(self, launch, blocking: bool, keepalive, finish, settle: bool) -> Optional[Work]:
        """launch(comm, blocking) under the group's lock (issue order is the lock's order, so
        the engine's queue sees it too). `settle`: a host call already done without error
        (and no finish step to run) returns None, with neither a Work nor its buffers kept."""
        with self._lock:
            if self._pending:
                self._release_settled()
            cwork = launch(self._comm, blocking)
            if settle and finish is None and cwork.is_completed() and not cwork.failed() \
                    and type(cwork) is not _C.StagedWork:
                return None
            self._pending.append((cwork, keepalive))  # buffers live until the engine is done
        return Work(self, cwork, keepalive, finish)

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
        """Publish this rank's failure as {kind, message} in the store (once: the first one
        seen is the root of the others) and, for a lost peer, add what the other ranks
        reported: a rank that only saw a neighbour go away learns why (a mismatch or a
        timeout two ranks away), or which ranks never reported and so probably died.

        The store may be unreachable (its host is the one that failed, or a cut cable is
        between us), and its client would then wait for the store's own timeout: so the
        exchange runs on a helper thread and gets `wait_s` + 1 s, after which the error
        is raised as it is, and the store is not asked again for this group.

        This rank's flight record is written first (once per group) and named at the end."""
        flown = self._record_flight(error)
        explained = self._explained(error, wait_s)
        return type(explained)(f"{explained}{flown}") if flown else explained

    def _explained(self, error: PyCollectError, wait_s: float) -> PyCollectError:
        if self._store_silent:
            return error
        outcome = _on_helper(f"pycollect-explain-{self._prefix}", lambda: self._explain_now(error, wait_s),
                             wait_s + 1.0)
        if outcome and outcome[0][0]:  # (one that raised is as silent as one that hangs)
            return outcome[0][1]
        self._store_silent = True
        return type(error)(f"{error}; the rendezvous store did not answer within {wait_s + 1.0:.1f} s, "
                           "so what the other ranks saw is unknown")

    def _record_flight(self, error: PyCollectError) -> str:
        """Write the flight recorder's ring (pycollect/flight.py) the first time the group
        fails here; what to add to the error: the file, and how to read them all."""
        if self._flight_path is None:
            where = flight.directory(self.options.flight_dir, f"{self._token:016x}")
            try:
                self._flight_path = flight.dump(where, self._prefix, self.rank, self.ranks,
                                                self._comm.flight_record(), error)
            except OSError as e:
                self._flight_path = ""
                return f"; the flight record could not be written to {where}: {e}"
        if not self._flight_path:
            return ""
        return (f"; flight record: {self._flight_path} (`pycollect flight {os.path.dirname(self._flight_path)}` "
                "reads every rank's)")

    def _explain_now(self, error: PyCollectError, wait_s: float) -> PyCollectError:
        if not self._publish(error) or not isinstance(error, PeerLostError) or self.size <= 1:
            return error
        reports = self._reports(wait_s)
        causes = [(kind, m) for kind, m in reports.values() if kind in _ROOT_CAUSES]
        silent = [r for r in range(self.size) if r != self.rank and r not in reports]
        extra = []
        if causes:
            extra.append("root cause reported by another rank: " + causes[0][1])
        if silent:
            extra.append(f"rank(s) {silent} reported nothing (lost, or not in this call)")
        if not extra:
            return error
        kind = MismatchError if causes and causes[0][0] == "MismatchError" else type(error)
        return kind(str(error) + "; " + "; ".join(extra))

    def _publish(self, error: PyCollectError) -> bool:
        """False when the store is unreachable (it may be gone with rank 0; the local error stands)."""
        if self._published:
            return True
        kind = "GroupFailedError" if isinstance(error, GroupFailedError) else type(error).__name__
        try:
            self._store.set(f"{self._keys}/failed/{self.rank}", json.dumps({"kind": kind, "message": str(error)}))
        except Exception:
            return False
        self._published = True
        return True

    def _reports(self, wait_s: float) -> Dict[int, tuple]:
        """rank -> (kind, message) of the other ranks' published failures, waiting up to
        `wait_s` for a root cause or for every rank to report."""
        reports: Dict[int, tuple] = {}
        deadline = time.monotonic() + wait_s
        while True:
            for r in range(self.size):
                if r == self.rank or r in reports:
                    continue
                key = f"{self._keys}/failed/{r}"
                try:
                    if self._store.check([key]):
                        report = json.loads(self._store.get(key).decode(errors="replace"))
                        reports[r] = (report["kind"], report["message"])
                except Exception:
                    return reports
            if (any(kind in _ROOT_CAUSES for kind, _ in reports.values()) or len(reports) == self.size - 1
                    or time.monotonic() > deadline):
                return reports
            time.sleep(0.05)

    # -- state ----------------------------------------------------------------
    def counters(self) -> dict:
        """Calls per kind executed through this group's engine."""
        return dict(self._comm.counters())

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

    def abort(self, reason: str) -> None:
        """Fail the group from any thread: later calls raise GroupFailedError naming `reason`,
        and the peers see the links close."""
        self._comm.abort(reason)

    def destroy(self) -> None:
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
