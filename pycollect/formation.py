"""Forming a group: its ranks meet in the store, agree on what goes on the wire, learn which
of them share a host and what "auto" runs, and connect: each rank to its ring neighbours, the
other links being made when first used (docs/formation.md).

rendezvous.py finds the store once per process; a Formation is one group's meeting in it.
Every store step is bound by the group's timeout, and each formation keeps its keys under
a token of its own (Formation._exchange says why).
"""
from __future__ import annotations

import datetime
import json
import os
import secrets
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

from . import _C
from ._bounded import on_helper
from .errors import CollectiveTimeoutError, MismatchError
from .options import Options
from .topology import Topology
from .tuning import DEFAULT_SEGMENT_BYTES, ENGINE_ALGOS, Params, auto_table, table_cache
from .tuning.choice import AUTO_MARGIN, ENGINE_LIMITS
from .tuning.hierarchy import OPS as HIERARCHY_OPS, hierarchical_from
from .types import Algo


def auto_tables(params: Params, size: int, options: Options) -> Dict[str, list]:
    """CommOptions' automatic-choice tables for a group of `size`: {field: [(max_bytes, code)]},
    among the algorithms the engine has (tuning.ENGINE_ALGOS); kept on disk for the next
    formation with the same inputs (tuning/table_cache.py)."""
    seg = options.segment_bytes or DEFAULT_SEGMENT_BYTES
    codes = {a: int(Algo[a.upper()]) for algos in ENGINE_ALGOS.values() for a in algos}

    def build() -> Dict[str, list]:
        return {f"{op.replace('_', '')}_auto": [(b, codes[a]) for b, a in
                                               auto_table(op, size, params, algos, segment_bytes=seg)]
                for op, algos in ENGINE_ALGOS.items()}

    inputs = {"params": params.to_json(), "size": size, "segment_bytes": seg, "algos": ENGINE_ALGOS,
              "limits": ENGINE_LIMITS, "margin": AUTO_MARGIN, "codes": codes}
    return table_cache.cached(inputs, build)


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


class Formation:
    """One formation of a group on its C++ Communicator (made, not yet connected): connect()
    meets the other ranks and connects its first links; then `token`, `topology`, `model`, `auto`
    and `hierarchical_from` hold what the ranks agreed on, and `keys` where they keep it."""

    def __init__(self, name: str, store, ranks: Sequence[int], rank: int, timeout: datetime.timedelta,
                 options: Options, comm, wire: dict):
        self.name = name
        self.ranks = list(ranks)
        self.rank = rank
        self.size = len(self.ranks)
        self.timeout = timeout
        self.options = options
        self._store = store
        self.scope = store_scope(name)  # where the group keeps its keys in the store
        self._comm = comm
        self._wire = wire  # what every rank must have alike (options.WIRE_SETTINGS), defaults resolved
        self.token: Optional[int] = None  # this formation's, once the ranks met (_exchange)
        self.topology: Optional[Topology] = None  # which ranks share a host, once the ranks met
        self.model: Optional[Params] = None  # the cost model behind "auto"
        # What "auto" runs: {CommOptions field: [(max_bytes, algo code), ...]}; {} keeps the thresholds.
        self.auto: Dict[str, list] = {}
        # From which bytes "auto" runs each op hierarchically (None: never), once the ranks met.
        self.hierarchical_from: Dict[str, Optional[int]] = {}

    def _uses_model(self) -> bool:
        return self.options.direct_max_bytes is None and self.size > 1

    def _build_model(self) -> str:
        """Rank 0: the cost model's parameters behind the automatic algorithm choice
        (PYCOLLECT_MODEL, else the built-in defaults) and the tables they give this group, as
        the JSON every rank adopts. The tables are built here once (~20 ms of arithmetic)
        rather than on every rank: with more ranks than cores that was half of forming a
        64-rank group; and while the other ranks are still arriving, not after, which took
        a third of forming a 16-rank group (docs/formation.md); and kept on disk, so a later
        formation with the same inputs reads them (tuning/table_cache.py). Their inputs besides the
        model (the group's size, PYCOLLECT_SEGMENT_BYTES) are the same on every rank
        (checked as the ranks join)."""
        params = Params.load(self.options.model) if self.options.model else Params()
        self.auto = auto_tables(params, self.size, self.options)
        return json.dumps({"params": params.to_json(), "auto": self.auto})

    def _adopt_model(self, model: str) -> None:
        """Every rank, once rank 0 admitted it (so the model is in the store): the same
        parameters and tables, given to the engine before it connects. A rank never waits
        for the others before it listens and publishes its own address."""
        published = json.loads(model)
        self.model = Params.from_json(published["params"])
        self.auto = {field: [tuple(row) for row in rows] for field, rows in published["auto"].items()}
        self._comm.set_auto_tables(self.auto["allreduce_auto"], self.auto["allgather_auto"])

    def connect(self, host: str) -> None:
        """Meet the other ranks in the store, then connect the first links. Every store step is bound
        by the group's timeout, even with the store's host stalled (a store client waits for
        the store's own timeout, not ours): the exchange runs on a helper thread."""
        addr, port = self._comm.listen(host)
        seconds = self.timeout.total_seconds()
        deadline = time.monotonic() + seconds
        outcome = on_helper(f"pycollect-rendezvous-{self.scope}",
                            lambda: self._exchange(f"{addr} {port}", deadline), seconds + ADMIT_GRACE_S + 1.0)
        if not outcome:
            raise CollectiveTimeoutError(
                f"forming group {self.name} on rank {self.rank}: the rendezvous store did not answer within "
                f"{seconds + ADMIT_GRACE_S + 1.0:.1f} s (its host, global rank 0 or the MASTER_ADDR process, may be stalled or out of reach)")
        returned, value = outcome[0]
        if not returned:
            raise value
        hosts, ports = value
        self._connect_mesh(hosts, ports, self.token)

    @property
    def keys(self) -> str:
        """Where this formation keeps its keys: under its token once the ranks met (_exchange)."""
        return self.scope if self.token is None else _formation_keys(self.scope, self.token)

    def _exchange(self, address: str, deadline: float):
        """The group's rendezvous in the store; (hosts, ports), and its token in self.token.

        A job that re-initialises on the same store (destroy_process_group, then
        init_process_group with other ranks or another world size) makes groups whose
        names its earlier groups had, and their keys are still there. So no rank reads a
        key it did not see written fresh: each rank publishes its address with a random
        nonce; rank 0 reads and deletes the others' (a later formation cannot meet them),
        writes the roster of addresses under a token new to this formation, and answers
        each nonce with the token. A rank that never joins is named by rank 0, and rank 0
        tells the ranks that did."""
        store, p = self._store, self.scope
        nonce = f"{secrets.randbits(63):016x}"
        # The host identity rides along: every rank learns the group's topology from the roster.
        mine = {"addr": address, "host": _C.host_identity(self.options.host_tag or ""), "wire": self._wire}
        store.set(f"{p}/addr/{self.rank}", json.dumps({"nonce": nonce, **mine}))

        def left() -> datetime.timedelta:
            return datetime.timedelta(seconds=max(0.001, deadline - time.monotonic()))

        if self.rank == 0:
            token = secrets.randbits(63)
            store.set(f"{p}/token", str(token))  # where a tool finds the roster, once written
            model = self._build_model() if self._uses_model() else None
            joins = [f"{p}/addr/{r}" for r in range(1, self.size)]
            missing = self._wait_keys(joins, left()) if joins else []
            present = [k for k in joins if k not in missing]
            found = dict(zip(present, (json.loads(v.decode()) for v in self._get_many(present))))

            for k in found:  # before any answer: a rank answered may form this group's next
                store.delete_key(k)  # formation at once, and set its key again

            def answer(text: str) -> None:  # every rank that joined, at once
                self._set_many({f"{p}/ack/{theirs['nonce']}": text for theirs in found.values()})

            if missing:
                names = ", ".join(self._rank_name(joins.index(k) + 1) for k in missing)
                answer(f"!{names}")  # they raise at once, naming them
                raise self._join_timeout(f"{names} did not join")
            disagreement = self._wire_disagreement([found[k]["wire"] for k in joins])
            if disagreement:
                answer(f"={disagreement}")
                raise MismatchError(disagreement)
            self.token = token
            published = model
            roster = [mine] + [{"addr": found[k]["addr"], "host": found[k]["host"]} for k in joins]
            self._set_many({f"{self.keys}/roster": json.dumps(roster),
                            # in the store before the ranks are admitted
                            **({f"{self.keys}/model": model} if model is not None else {})})
            answer(str(token))
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
            self.token = int(answer)
            wanted = [f"{self.keys}/roster"] + ([f"{self.keys}/model"] if self._uses_model() else [])
            values = [v.decode() for v in self._get_many(wanted)]  # one round trip where the store batches
            roster, published = json.loads(values[0]), values[1] if len(values) > 1 else None
        hosts, ports = [], []
        for entry in roster:
            h, pt = entry["addr"].rsplit(" ", 1)
            hosts.append(h)
            ports.append(int(pt))
        self.topology = Topology.from_identities([e["host"] for e in roster], self.ranks, self.ranks[self.rank])
        if published is not None:
            self._adopt_model(published)
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

    def _get_many(self, keys: List[str]) -> List[bytes]:
        """The values of `keys`, in one round trip where the store batches (torch's multi_get):
        rank 0 reads every rank's address, and n round trips one after another were most of
        its part in forming a large group (docs/formation.md)."""
        if not keys:
            return []
        multi_get = getattr(self._store, "multi_get", None)
        return list(multi_get(keys)) if multi_get else [self._store.get(k) for k in keys]

    def _set_many(self, items: Dict[str, str]) -> None:
        """Set every key, in one round trip where the store batches (torch's multi_set)."""
        if not items:
            return
        multi_set = getattr(self._store, "multi_set", None)
        if multi_set:
            multi_set(list(items), list(items.values()))
        else:
            for k, v in items.items():
                self._store.set(k, v)

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
        """Connect the first links on a helper thread (the engine releases the GIL) while this one
        watches the store: a rank that fails to connect publishes why under `connect_failed`,
        and every other rank then gives up within a fraction of a second, instead of waiting
        for the rendezvous timeout for a peer that will never come (e.g. a rank whose
        PYCOLLECT_SECRET differs: only the rank that checks the proof can tell, the other
        end only sees a stranger fail)."""
        store, key = self._store, f"{self.keys}/connect_failed"
        outcome: list = []

        def connect() -> None:
            try:
                self._comm.connect(hosts, ports, token)
            except BaseException as e:  # handed to the waiting thread
                outcome.append(e)

        worker = threading.Thread(target=connect, name=f"pycollect-connect-{self.scope}", daemon=True)
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
