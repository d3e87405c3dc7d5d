"""The model's parameters, their units, and where they are read from and written to.

    Params(alpha=5e-6, beta=1 / 50e9, gamma=1 / 10e9)     # seconds, s/byte, s/byte
    Params.load("model.json"); p.save("model.json")
    parse_time("5us") -> 5e-06; parse_rate("400gbit") -> 2e-11 (seconds per byte)

alpha: cost of one message (latency: post, wake-up, per-segment bookkeeping).
beta: seconds per byte on the wire (1 / bandwidth of one link, one direction).
gamma: seconds per byte reduced (one pass of a reduction kernel reading two inputs).
overhead: fixed cost of one call (Python, hand-off to the engine's worker, header check).
overlap: 1 when a rank's transfers and its reductions run at the same time (a NIC moves
  the bytes), 0 when the same CPU does both (shared memory: the rank's own thread copies
  through the segment); the fit tries 0, 1/2 and 1 and keeps the best.
cores: CPU cores the ranks share (None: every rank has its own). With p ranks on c < p
  cores, every per-byte and per-message cost is stretched by ceil(p / c) (Params.stretch),
wake: ... and a message to a rank that shares its core with another rank of the call
  costs `wake` more: the receiver, waiting on a core that another rank (working, or
  waiting and spinning) also holds, has to be scheduled back in (Params.shares_core;
  fitted; 0 when cores is None).
cache_bytes, cache_speedup: on shared memory the "wire" is a memory copy, so a call whose
  buffer per rank (its working set, Params.per_byte) stays in the CPU caches moves and
  reduces its bytes `cache_speedup` times faster than one that goes to DRAM: at most
  cache_bytes the per-byte costs are divided by cache_speedup, from CACHE_FADE x
  cache_bytes on they are beta and gamma as given, and in between the factor moves
  log-linearly. None
  (the default, and for typed parameters): one speed for every size, as on a NIC.
mem_parallel: what the cores' copies to and from DRAM share: k cores copying at once
  each run at min(1, mem_parallel / k) of one core's speed alone (the memory bus, not the
  cores, is then the limit). None (the default, and for typed parameters): no sharing;
  it needs `cores` (the cores of one machine share its DRAM).
  It applies to the part of a call that the caches do not hold (Params.dram_fraction).
local_speedup: a copy between two ranks pinned to the same core runs this much faster
  than one between cores (the bytes come from that core's own caches). Halving-doubling
  and Bruck at 4 ranks on 2 cores exchange within a core in half their rounds; the ring's
  neighbours sit on different cores. 1 (the default): no difference. Fitted here:
  1.03-1.05 (1.4-1.6 before the shared-memory receive fix).
single_copy_bytes, single_copy_alpha: shared memory moves a message of at least
  single_copy_bytes (64 KiB where ranks outnumber cores, 1 MiB where not:
  Params.single_copy_from, csrc/transport/shm/link.h) by one read
  of the sender's memory (process_vm_readv, then an acknowledgement the sender waits
  for), and a smaller one through the ring in the segment (two copies, one per side, in
  the caches). Each such read costs single_copy_alpha more than a message through the
  ring (Params.read_cost). None (the default, and for typed parameters): every message
  costs alpha, as on a NIC.
crowded: the parameters of calls whose ranks outnumber `cores` (Params.at), a full set of
  its own: ranks that the kernel time-slices on one core copy, reduce and wait at other
  rates than ranks with a core each (their caches are shared and refilled at each switch,
  a waiting rank spins beside a working one), which the stretch and `wake` above capture
  only in part. The fit fits each regime on its own samples where it has both. On the
  development machine (2 cores) one set for 2, 3 and 4 ranks put 121 of 144 points of one
  measurement within 25 % of the other's, the two sets 130. None (the default): these
  parameters for every call.
arena: the shared arena's own set (pycollect/tuning/arena.py: the collectives that run
  through one host's shared segment, "shm"): there alpha is a round of flags seen across
  cores, beta a byte copied into or out of a slot, gamma a byte reduced; fitted on its own
  samples, as crowded is. None (the default): ARENA, fitted on the development machine.
inter_host: the links between hosts, for groups that span several (the two-level model,
  pycollect/tuning/hierarchy.py): a full set of their own, typically a NIC's (no cores,
  caches or shared memory terms). None (the default): hierarchy.INTER_HOST, a 10 Gbit/s
  network with 30 us messages, until `pycollect model --fit` measures one.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, fields, replace
from typing import Dict, Iterable, Optional, Tuple

# Where `pycollect model --fit` writes and what the group's automatic choice loads when
# PYCOLLECT_MODEL is not set.
DEFAULT_PATH = os.path.join(os.path.expanduser("~"), ".cache", "pycollect", "model.json")
# Shared memory reads messages of at least this many bytes from the sender's memory
# (csrc/transport/shm/link.h; pycollect/options.py): Params.single_copy_bytes ... (the
# engine's kDefaultShmSingleCopyBytes, pycollect._C.ENGINE_DEFAULTS, copied so that the model
# loads no engine; tests/test_options.py holds it to the engine's)
SHM_SINGLE_COPY_BYTES = 64 * 1024
# ... where the ranks outnumber the cores; where each rank has a core of its own, from
# 1 MiB (longer than a ring segment): pycollect/options.py default_single_copy_bytes.
SHM_SINGLE_COPY_BYTES_FIT = 1 << 20
# The caches help less and less from cache_bytes to CACHE_FADE x cache_bytes of buffers per
# core (Params.dram_fraction). Chosen over 20 fit/check pairs of five measurements of the
# 2-core development machine (each fitted at 4 MiB: the fade ends at its 32 MiB L3), points
# within 25 % of 2880: 2631, 2626, 2666, 2683, 2644, 2619 with 2, 4, 6, 8, 11, 16.
CACHE_FADE = 8


def _leading(ranks) -> bool:
    """Whether `ranks` is range(0, n): the steps in which every rank works, whose counts per
    core have a closed form (the cost model's hot path: fitting calls it millions of times)."""
    return isinstance(ranks, range) and ranks.start == 0 and ranks.step == 1


@dataclass(frozen=True)
class Params:
    # Built-in defaults: `pycollect model --fit` on 87 validation points (2-4 ranks, shared
    # memory, 64 KiB-64 MiB) of the 2-core development machine at load ~2-3; cores left
    # None (a core per rank) and wake 0: a uniform stretch changes no choice.
    alpha: float = 16.6e-6
    beta: float = 1 / 9.08e9
    gamma: float = 1 / 6.58e9
    overhead: float = 0.0
    overlap: float = 0.0
    cores: Optional[int] = None
    wake: float = 0.0
    cache_bytes: Optional[float] = None
    cache_speedup: float = 1.0
    mem_parallel: Optional[float] = None
    local_speedup: float = 1.0
    single_copy_bytes: Optional[float] = None
    single_copy_alpha: float = 0.0
    crowded: Optional["Params"] = None
    inter_host: Optional["Params"] = None
    arena: Optional["Params"] = None
    source: str = "built-in defaults"

    def __post_init__(self):
        for name in ("alpha", "beta", "gamma", "overhead", "wake", "single_copy_alpha"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value >= 0 and value != float("inf")):
                raise ValueError(f"Params.{name} must be a finite number >= 0, got {value!r}")
        if not 0.0 <= self.overlap <= 1.0:
            raise ValueError(f"Params.overlap must be in [0, 1], got {self.overlap!r}")
        if self.cores is not None and (not isinstance(self.cores, int) or self.cores < 1):
            raise ValueError(f"Params.cores must be None or an integer >= 1, got {self.cores!r}")
        for name in ("cache_bytes", "single_copy_bytes"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"Params.{name} must be None or a number of bytes > 0, got {value!r}")
        for name in ("cache_speedup", "local_speedup", "mem_parallel"):  # factors: 1 is "no effect"
            value = getattr(self, name)
            if name == "mem_parallel" and value is None:
                continue
            if not (isinstance(value, (int, float)) and 1.0 <= value < float("inf")):
                none = "None or " if name == "mem_parallel" else ""
                raise ValueError(f"Params.{name} must be {none}a finite number >= 1, got {value!r}")
        if self.crowded is not None:
            if not isinstance(self.crowded, Params) or self.crowded.crowded is not None:
                raise ValueError("Params.crowded must be None or a Params without a crowded set of its own")
            if self.cores is None or self.crowded.cores != self.cores:
                raise ValueError(f"Params.crowded is for ranks that outnumber the cores: it needs cores set, "
                                 f"and the same ({self.cores!r} here, {self.crowded.cores!r} in crowded)")

        if self.inter_host is not None and (not isinstance(self.inter_host, Params)
                                            or self.inter_host.inter_host is not None):
            raise ValueError("Params.inter_host must be None or a Params without an inter_host of its own")
        if self.arena is not None and (not isinstance(self.arena, Params) or self.arena.arena is not None
                                       or self.arena.inter_host is not None):
            raise ValueError("Params.arena must be None or a Params without an arena or inter_host of its own")

    def arena_set(self) -> "Params":
        """The parameters of the shared arena's collectives: `arena`, else ARENA."""
        return self.arena if self.arena is not None else ARENA

    def at(self, world_size: int) -> "Params":
        """The parameters of a `world_size`-rank call: `crowded` where the ranks outnumber
        the cores and a crowded set was fitted, else these."""
        if self.crowded is not None and world_size > self.cores:
            return self.crowded
        return self

    def busiest(self, working: Iterable[int]) -> int:
        """How many of the `working` ranks (those that copy or reduce in a step) share the
        busiest core, with rank r on core r mod cores (round-robin, as the model's
        measurements pin them); 1 when every rank has its own core. A step's costs are
        stretched by it: the ranks of a collective advance together, at that core's pace."""
        if self.cores is None:
            return 1
        if _leading(working):
            return max(1, -(-len(working) // self.cores))  # ranks 0..p-1: ceil(p / cores), the fitting's hot case
        per_core: Dict[int, int] = {}
        for r in working:
            c = r % self.cores
            per_core[c] = per_core.get(c, 0) + 1
        return max(per_core.values(), default=1)

    def shares_core(self, working: Iterable[int], world_size: int) -> bool:
        """Whether a `working` rank shares its core with another rank of the call (working,
        or waiting for a message: a rank that waits spins on its core, then sleeps), so a
        message may find its receiver off the core: the step's messages cost `wake` more."""
        if self.cores is None or world_size <= self.cores:
            return False
        if _leading(working):
            return len(working) > 0  # rank 0 shares its core with rank `cores`
        return any(len(range(self.core(r), world_size, self.cores)) > 1 for r in working)

    def core(self, rank: int) -> int:
        """The core of `rank`: rank mod cores (pinned round-robin); its own with cores None."""
        return rank if self.cores is None else rank % self.cores

    def copies(self, transfers: Iterable[Tuple[int, int]]) -> float:
        """The copies a step puts on its busiest core, for `transfers` (receiver, sender):
        the receiver's core does the copy; one within a core counts 1 / local_speedup."""
        per_core: Dict[int, float] = {}
        cores, local = self.cores, 1.0 / self.local_speedup
        for dst, src in transfers:
            c = dst if cores is None else dst % cores
            same = (src if cores is None else src % cores) == c
            per_core[c] = per_core.get(c, 0.0) + (local if same else 1.0)
        return max(per_core.values(), default=1.0)

    def copies_all_pairs(self, world_size: int) -> float:
        """copies() of the step in which every rank receives from every other (direct),
        counted per core instead of pair by pair (p^2 pairs at thousands of ranks)."""
        if self.cores is None:
            return float(max(0, world_size - 1))
        out = 0.0
        for c in range(min(self.cores, world_size)):
            here = len(range(c, world_size, self.cores))
            out = max(out, here * ((here - 1) / self.local_speedup + (world_size - here)))
        return out

    def cores_busy(self, working: Iterable[int]) -> int:
        """How many cores the `working` ranks occupy (rank r on core r mod cores); with a core
        per rank, one per rank."""
        if self.cores is not None and _leading(working):
            return min(len(working), self.cores)
        working = list(working)
        return len({self.core(r) for r in working}) if self.cores is not None else max(1, len(working))

    def stretch(self, world_size: int) -> float:
        """The stretch of a step in which every rank works: ceil(p / cores) (see busiest)."""
        return float(self.busiest(range(world_size)))

    def dram_fraction(self, working_set: float) -> float:
        """How much of a call whose buffer per rank is `working_set` bytes goes to DRAM:
        0 up to cache_bytes, 1 from CACHE_FADE x cache_bytes on (and always without a
        cache term), log-linear in between."""
        if self.cache_bytes is None or working_set >= CACHE_FADE * self.cache_bytes:
            return 1.0
        if working_set <= self.cache_bytes:
            return 0.0
        return math.log2(working_set / self.cache_bytes) / math.log2(CACHE_FADE)

    def per_byte(self, working_set: float, cores_busy: int = 1) -> float:
        """The factor on beta and gamma for a call whose buffer per rank is `working_set`
        bytes, in a step in which `cores_busy` cores copy or reduce: 1 / cache_speedup in
        the caches, 1 in DRAM, times the DRAM share of the step's cores (mem_parallel)."""
        dram = self.dram_fraction(working_set)
        fast = 1.0 / self.cache_speedup
        shared = 1.0 if self.mem_parallel is None or self.cores is None else max(1.0, cores_busy / self.mem_parallel)
        return fast + (1.0 - fast) * dram + (shared - 1.0) * dram

    def single_copy_from(self, world_size: int) -> Optional[float]:
        """The shortest message shared memory reads from the sender's memory in a call of
        `world_size` ranks (None: none): single_copy_bytes where the ranks outnumber the
        `cores`, at least SHM_SINGLE_COPY_BYTES_FIT where each has a core of its own (the
        engine's default, pycollect/options.py default_single_copy_bytes)."""
        if self.single_copy_bytes is None or self.cores is None or world_size > self.cores:
            return self.single_copy_bytes
        return max(self.single_copy_bytes, SHM_SINGLE_COPY_BYTES_FIT)

    def read_cost(self, message_bytes: float, world_size: int) -> float:
        """What one copy of a `message_bytes` message in a `world_size`-rank call costs
        beyond alpha and its bytes: single_copy_alpha where shared memory reads it from the
        sender's memory (Params.single_copy_from), else 0."""
        shortest = self.single_copy_from(world_size)
        if shortest is None or message_bytes < shortest:
            return 0.0
        return self.single_copy_alpha

    def message(self, world_size: int) -> float:
        """Seconds per message in a step where every rank of `world_size` works (see
        message_at)."""
        ranks = range(world_size)
        return self.message_at(self.busiest(ranks), self.shares_core(ranks, world_size))

    def message_at(self, busiest: int, shared: bool) -> float:
        """Seconds per message in a step whose busiest core carries `busiest` working
        ranks: alpha stretched by it, plus `wake` when a working rank `shared` its core
        with another rank of the call (the receiver must be scheduled back in)."""
        return self.alpha * busiest + (self.wake if shared else 0.0)

    def with_(self, **changes) -> "Params":
        return replace(self, **changes)

    def for_cluster(self, **changes) -> "Params":
        """These parameters without the terms of one shared-memory machine (cores, caches,
        shared DRAM, copies within a core, reads from the sender's memory), with `changes`
        on top: what typed values such as --beta 400gbit describe, a rank per core on a NIC."""
        return replace(self, cores=None, cache_bytes=None, cache_speedup=1.0, mem_parallel=None,
                       local_speedup=1.0, single_copy_bytes=None, single_copy_alpha=0.0, crowded=None, arena=None,
                       **changes)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict, source: str = "") -> "Params":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"model parameters: unknown field(s) {', '.join(unknown)}; known: "
                             f"{', '.join(sorted(known))}")
        d = dict(d)
        if source:
            d["source"] = source
        if isinstance(d.get("crowded"), dict):
            d["crowded"] = cls.from_dict(d["crowded"], source=f"{source or d.get('source', '')}, crowded")
        if isinstance(d.get("inter_host"), dict):
            d["inter_host"] = cls.from_dict(d["inter_host"], source=f"{source or d.get('source', '')}, between hosts")
        if isinstance(d.get("arena"), dict):
            d["arena"] = cls.from_dict(d["arena"], source=f"{source or d.get('source', '')}, shared arena")
        return cls(**d)

    @classmethod
    def from_json(cls, text: str) -> "Params":
        return cls.from_dict(json.loads(text))

    @classmethod
    def load(cls, path: str) -> "Params":
        try:
            with open(path) as f:
                data = json.load(f)
        except OSError as e:
            raise ValueError(f"model parameters {path!r} cannot be read: {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"model parameters {path!r} are not JSON: {e}") from None
        if not isinstance(data, dict):
            raise ValueError(f"model parameters {path!r}: expected a JSON object")
        return cls.from_dict(data.get("params", data), source=path)

    def save(self, path: str, extra: Optional[dict] = None) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump({"params": asdict(self), **(extra or {})}, f, indent=2)

    def describe(self) -> str:
        crowded = "" if self.crowded is None else (
            f"; where ranks outnumber the cores: {self.crowded.with_(source='').describe()}")
        between = "" if self.inter_host is None else (
            f"; between hosts: {self.inter_host.with_(source='').describe()}")
        arena = "" if self.arena is None else f"; the shared arena: {self.arena.with_(source='').describe()}"
        return self._describe_one() + crowded + between + arena

    def _describe_one(self) -> str:
        cores = "own core per rank" if self.cores is None else f"{self.cores} shared cores"
        # wake is a cost of ranks sharing a core: none where a crowded set takes those calls
        wake = f", wake {self.wake * 1e6:.1f} us" if self.cores is not None and self.crowded is None else ""
        if self.cache_bytes is not None and self.cache_speedup > 1:
            wake += f", {self.cache_speedup:.2f}x faster up to {self.cache_bytes / 2**20:g} MiB per rank"
        if self.mem_parallel is not None:
            wake += f", DRAM shared: {self.mem_parallel:.2f} cores' worth"
        if self.local_speedup > 1:
            wake += f", copies within a core {self.local_speedup:.2f}x faster"
        if self.single_copy_bytes is not None:
            wake += (f", reads of >= {self.single_copy_bytes / 1024:g} KiB from the sender"
                     f" {self.single_copy_alpha * 1e6:.1f} us more")
        return (f"alpha {self.alpha * 1e6:.2f} us{wake}, beta {1 / self.beta / 1e9 if self.beta else float('inf'):.3f} GB/s, "
                f"gamma {1 / self.gamma / 1e9 if self.gamma else float('inf'):.3f} GB/s, "
                f"overhead {self.overhead * 1e6:.1f} us, overlap {self.overlap:g}, {cores}"
                + (f" ({self.source})" if self.source else ""))


# The shared arena's built-in set (Params.arena_set): `pycollect model --fit` on the 140
# arena points (8 B-32 MiB, 2-4 ranks, the four ops) of one `model --validate` of the
# 2-core development machine, with its cores: 3 and 4 ranks take the crowded set (a flag
# waits for its rank to be scheduled: `wake`). docs/costmodel.md, "The shared arena".
ARENA = Params(alpha=1.29e-6, beta=1 / 12.61e9, gamma=1 / 6.955e9, overhead=0.0, cores=2,
               cache_bytes=float(4 << 20), cache_speedup=1.5,
               crowded=Params(alpha=0.252e-6, beta=1 / 9.417e9, gamma=1 / 9.013e9, overhead=2.14e-6, cores=2,
                              wake=1.84e-6, cache_bytes=float(8 << 20), cache_speedup=1.89, local_speedup=1.06),
               source="built-in arena defaults")

_TIME = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def parse_time(text) -> float:
    """'5us' -> 5e-6 seconds ('2.5ms', '1e-6', '3ns', '0.1s')."""
    m = re.fullmatch(r"\s*([0-9.]+(?:e-?\d+)?)\s*(s|ms|us|µs|ns)?\s*", str(text).lower())
    if not m:
        raise ValueError(f"cannot read time {text!r}: use a number with s, ms, us or ns (e.g. 5us)")
    return float(m.group(1)) * _TIME[m.group(2) or ""]


def parse_rate(text) -> float:
    """A bandwidth as seconds per byte. Bits as tc and NIC sheets write them ('400gbit',
    '100Gbps', '10Gb/s' -> bits per second) or bytes ('50GB/s', '50GBps')."""
    m = re.fullmatch(r"\s*([0-9.]+(?:e-?\d+)?)\s*([kKmMgGtT]?)(bit|bps|b/s|Bps|B/s)\s*", str(text))
    if not m:
        raise ValueError(f"cannot read bandwidth {text!r}: use e.g. 400gbit, 100Gbps (bits) or 50GB/s (bytes)")
    per_second = float(m.group(1)) * _PREFIX[m.group(2).lower()]
    if m.group(3) in ("bit", "bps", "b/s"):
        per_second /= 8
    if per_second <= 0:
        raise ValueError(f"bandwidth {text!r} must be positive")
    return 1.0 / per_second
