"""Forming a group at scale, on paper: store round trips, bytes through the store, the
store server's serialized time and the connections each rank makes, for pycollect's
formation and for Gloo's and NCCL's (docs/formation.md, "Beyond one machine, on paper").

One store server thread serves every rank (torch's TCPStore: one libuv loop), so its
requests queue: a phase of the formation lasts the longer of its critical chain (the
sequential round trips of its slowest rank) and the server's busy time for the phase's
requests (each `service` + `per_key` per key + its bytes at `bandwidth`), plus one round
trip. Connections cost a TCP connect (1 round trip), a handshake (1.5) and, between ranks
of one host, the shared-memory upgrade (2), each plus `connect_cpu`. The time reported is
until a first ring collective can run: formation, plus the links a ring needs where links
are made on first use. Pure arithmetic: a what-if at 16 384 ranks takes microseconds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Sequence


@dataclass(frozen=True)
class StoreParams:
    """The network, the store server and the sizes of what the ranks put in it."""
    rtt: float = 100e-6            # a round trip between two hosts (a store request, a handshake step), s
    local_rtt: float = 20e-6       # a round trip between two ranks of one host (loopback), s
    bandwidth: float = 1e9         # bytes per second through the store server (its NIC and its one thread)
    service: float = 10e-6         # the server thread's time per request, s
    per_key: float = 1e-6          # ... and per key of a request (multi_get / multi_set), s
    connect_cpu: float = 30e-6     # a rank's CPU per connection it makes (socket, options, proof), s
    per_host: int = 8              # ranks per host (same-host links upgrade to shared memory)
    batch: int = 0                 # keys per multi_get / multi_set (0: all in one request)
    address_bytes: int = 150       # a rank's address key: host:port, host identity, wire settings
    roster_entry_bytes: int = 60   # one rank's entry in the roster rank 0 writes
    model_bytes: int = 1000        # the cost model's parameters and tables rank 0 publishes
    ack_bytes: int = 20            # rank 0's answer to each rank (the token)
    poll_s: float = 0.1            # today's connect watchdog: one `check` per rank this often

    def with_(self, **kw) -> "StoreParams":
        return replace(self, **kw)

    def describe(self) -> str:
        return (f"round trip {self.rtt * 1e6:g} us between hosts, {self.local_rtt * 1e6:g} us within one; "
                f"store server {self.service * 1e6:g} us a request + {self.per_key * 1e6:g} us a key, "
                f"{self.bandwidth / 1e9:g} GB/s, one thread; {self.connect_cpu * 1e6:g} us CPU a connection; "
                f"{self.per_host} ranks a host")


@dataclass(frozen=True)
class Terms:
    """One scheme's formation at one group size."""
    scheme: str
    ranks: int
    requests: int        # requests the store server serves, all ranks together
    store_bytes: int     # bytes through the store server, in and out
    server_s: float      # the server thread's busy time for them, serialized
    round_trips: int     # sequential store round trips of the slowest rank (rank 0)
    conns: int           # connections a typical rank takes part in before a first ring collective runs
    conns_max: int       # ... the busiest rank (a root, rank 0)
    store_s: float       # the store phases
    connect_s: float     # the connections on the critical path
    time_s: float        # until a first ring collective can run


class _Ledger:
    """The store's side of a formation, phase by phase: each phase lasts the longer of its
    critical chain and the server's busy time for its requests (plus one round trip)."""

    def __init__(self, p: StoreParams):
        self.p = p
        self.requests = self.nbytes = self.round_trips = 0
        self.server_s = self.time_s = 0.0

    def cost(self, keys: int = 1, nbytes: int = 0) -> float:
        """The server's time for one request of `keys` keys and `nbytes` bytes."""
        return self.p.service + keys * self.p.per_key + nbytes / self.p.bandwidth

    def phase(self, chain: Sequence[tuple], crowd: Sequence[tuple] = ()) -> None:
        """`chain`: the slowest rank's sequential requests; `crowd`: everyone else's in the
        phase, as (count, keys, bytes) each. The chain counts in the round trips."""
        work = sum(c * self.cost(k, b) for c, k, b in (*chain, *crowd))
        path = sum(c * (self.p.rtt + self.cost(k, b)) for c, k, b in chain)
        self.requests += sum(c for c, _, _ in (*chain, *crowd))
        self.nbytes += sum(c * b for c, _, b in (*chain, *crowd))
        self.round_trips += sum(c for c, _, _ in chain)
        self.server_s += work
        self.time_s += max(path, work + self.p.rtt)

    def terms(self, scheme: str, n: int, conns: int, conns_max: int, connect_s: float) -> Terms:
        return Terms(scheme, n, self.requests, self.nbytes, self.server_s, self.round_trips, conns, conns_max,
                     self.time_s, connect_s, self.time_s + connect_s)


def _batches(keys: int, p: StoreParams) -> List[int]:
    """Keys per request when `keys` keys go in multi_get / multi_set requests of p.batch."""
    if keys <= 0:
        return []
    size = p.batch or keys
    return [size] * (keys // size) + ([keys % size] if keys % size else [])


def _connection(p: StoreParams, same_host: bool, round_trips: float) -> float:
    return round_trips * (p.local_rtt if same_host else p.rtt) + p.connect_cpu


def mesh_connect_s(n: int, p: StoreParams, handshake: float = 1.5, upgrade: float = 2.0) -> float:
    """A rank that dials its n-1 peers one after the other (the slowest, rank 0): the ones on
    its host over loopback with the shared-memory upgrade, the others across the network."""
    local = min(n, p.per_host) - 1
    return (local * _connection(p, True, 1 + handshake + upgrade)
            + (n - 1 - local) * _connection(p, False, 1 + handshake))


def ring_connect_s(n: int, p: StoreParams, handshake: float = 1.5) -> float:
    """Links made on first use by a ring: each rank dials its right neighbour while it accepts
    its left, all ranks at once; the slowest link crosses hosts (where the group does)."""
    if n < 2:
        return 0.0
    if n <= p.per_host:
        return _connection(p, True, 1 + handshake + 2.0)
    return _connection(p, False, 1 + handshake)


def pycollect(n: int, p: StoreParams, lazy: bool, batched: bool) -> Terms:
    """pycollect's formation (pycollect/formation.py, Formation._exchange). Every rank sets its
    address key; rank 0 waits for the n-1 others, reads and deletes them, writes the token,
    the roster (O(n)) and the model, and answers each rank; each rank then reads its answer,
    the roster and the model. `batched`: rank 0 reads the addresses with multi_get and
    answers with one multi_set; each rank reads answer, roster and model with one multi_get
    and deletes its own address key itself (torch's Store has no batch delete), so rank 0's
    chain holds no per-rank step. Eager: every rank connects to every other at formation,
    and watches the store (one `check` per poll_s) while it does. Lazy: no link until a
    collective needs it; a ring needs 2 per rank (an all-to-all, n-1)."""
    led, m = _Ledger(p), n - 1
    a, roster = p.address_bytes, n * p.roster_entry_bytes
    led.phase(chain=[(1, 1, a)], crowd=[(m, 1, a), (m, 1, 0)])  # the address keys; the others park a wait
    if batched:
        led.phase(chain=[(1, 1, 0)] + [(1, k, k * a) for k in _batches(m, p)])
        answers = [(1, k, k * p.ack_bytes) for k in _batches(m, p)]
        reads = [(1, 3, p.ack_bytes + roster + p.model_bytes), (2, 1, 0)]  # multi_get; delete answer, address
    else:
        led.phase(chain=[(1, 1, 0), (m, 1, a), (m, 1, 0)])  # wait, n-1 get, n-1 delete_key
        answers = [(m, 1, p.ack_bytes)]
        reads = [(1, 1, p.ack_bytes), (1, 1, 0), (1, 1, roster), (1, 1, p.model_bytes)]  # get, delete, roster, model
    writes = [(1, 1, 8), (1, 1, roster), (1, 1, p.model_bytes)] + answers  # token, roster, model, answers
    # The ranks read as their answers land: the last one reads after rank 0's last answer.
    led.phase(chain=writes + reads, crowd=[(c * (m - 1), k, b) for c, k, b in reads])
    if lazy:
        connect, conns = ring_connect_s(n, p), min(2, m)
    else:
        connect, conns = mesh_connect_s(n, p), m
        polls = m * int(connect / p.poll_s)  # the watchdog's checks, off the critical path
        led.requests += polls
        led.server_s += polls * led.cost()
    name = "pycollect " + ("lazy" if lazy else "eager") + (" batched" if batched else "")
    return led.terms(name, n, conns, conns, connect)


def gloo(n: int, p: StoreParams, tuned: bool = False) -> Terms:
    """torch's ProcessGroupGloo over gloo's TCP transport (gloo/transport/tcp/context.cc,
    createAndConnectAllPairs): every rank sets one key, its host name, device address and,
    unless GLOO_ENABLE_RANK_AS_SEQUENCE_NUMBER, one 8-byte pair identifier per rank (O(n));
    then reads all n keys, one wait_get each unless GLOO_ENABLE_STORE_V2_API (multi_get,
    128 keys a request), and connects a pair to every other rank at formation. `tuned`:
    both variables set."""
    led, m = _Ledger(p), n - 1
    key = 8 + 16 + 8 + 136 + (0 if tuned else 8 * n)  # sizes, host name, sockaddr + sequence, pair ids
    reads = [(1, k, k * key) for k in _batches(n, p.with_(batch=128))] if tuned else [(n, 1, key)]
    led.phase(chain=[(1, 1, key)] + reads, crowd=[(c * m, k, b) for c, k, b in [(1, 1, key)] + reads])
    return led.terms("gloo tuned" if tuned else "gloo", n, m, m, mesh_connect_s(n, p, handshake=0.5, upgrade=0))


def nccl(n: int, p: StoreParams, allgathers: int = 1, info_bytes: int = 300) -> Terms:
    """NCCL's bootstrap under torch (src/bootstrap.cc): rank 0 puts the unique id (the root's
    address) in the store and every other rank reads it; every rank connects to the root
    and sends its listening addresses; the root, one rank after the other, connects back
    and sends each rank its ring neighbour's address; the ranks connect the bootstrap ring
    and all-gather their information over it, n-1 steps of a small message. Data links are
    made at a collective's first use (NCCL_RUNTIME_CONNECT): a ring's 2 a rank."""
    led, m = _Ledger(p), n - 1
    led.phase(chain=[(1, 1, 128), (1, 1, 128)], crowd=[(m - 1, 1, 128)])  # set, then the readers' get
    root = n * (p.connect_cpu + info_bytes / p.bandwidth)  # the root thread takes n connections, in turn
    root_sends = m * _connection(p, False, 1.0)  # ... and connects back to each rank, in turn
    steps = allgathers * m * (p.rtt / 2 + p.connect_cpu)  # ring steps, each as slow as its slowest hop
    connect = root + root_sends + _connection(p, False, 1.0) + steps + ring_connect_s(n, p)
    return led.terms("nccl bootstrap", n, 2 + 2, 2 * n + 2, connect)


SCHEMES: Dict[str, Callable[[int, StoreParams], Terms]] = {
    "pycollect eager": lambda n, p: pycollect(n, p, lazy=False, batched=False),
    "pycollect eager batched": lambda n, p: pycollect(n, p, lazy=False, batched=True),
    "pycollect lazy": lambda n, p: pycollect(n, p, lazy=True, batched=False),
    "pycollect lazy batched": lambda n, p: pycollect(n, p, lazy=True, batched=True),
    "gloo": lambda n, p: gloo(n, p),
    "gloo tuned": lambda n, p: gloo(n, p, tuned=True),
    "nccl bootstrap": lambda n, p: nccl(n, p),
}


def formation_table(worlds: Sequence[int], p: StoreParams, schemes: Sequence[str] = tuple(SCHEMES)) -> List[Terms]:
    """Every scheme at every group size, by size then scheme."""
    unknown = [s for s in schemes if s not in SCHEMES]
    if unknown:
        raise ValueError(f"unknown formation schemes {unknown}: known are {sorted(SCHEMES)}")
    if any(n < 2 for n in worlds):
        raise ValueError("a formation needs at least 2 ranks")
    return [SCHEMES[s](n, p) for n in worlds for s in schemes]


def growth(terms: Sequence[Terms], field: str) -> float:
    """How a term grows with the group: the log-log slope between the first and last sizes
    (1: linear, 2: quadratic)."""
    a, b = terms[0], terms[-1]
    va, vb = getattr(a, field), getattr(b, field)
    return math.log(vb / va) / math.log(b.ranks / a.ranks) if va > 0 and vb > 0 else 0.0
