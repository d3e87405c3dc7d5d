"""What a group is configured with: the PYCOLLECT_* environment, read in one place, and timeouts.

    Options.from_env()          # every PYCOLLECT_* variable, checked; a bad value raises ValueError
    to_timedelta(30)            # a group's timeout: seconds, a timedelta or None (the default)
    to_seconds(timeout)         # a wait's: seconds, a timedelta, None or inf (no limit) -> seconds or None

Every variable, what it means and its default: docs/configuration.md, whose table
tests/test_options.py holds to this module (KNOWN, from_env and the defaults below).
"""
from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field
from typing import Mapping, Optional

from .tuning.params import SHM_SINGLE_COPY_BYTES, SHM_SINGLE_COPY_BYTES_FIT
from .types import Algo

DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)  # as torch.distributed's default
MAX_TIMEOUT = datetime.timedelta(days=3650)  # longer is clamped: deadlines must not overflow the clock

# name -> (Options attribute, smallest allowed value), for the integer tunables.
_INTEGERS = {
    "PYCOLLECT_SEGMENT_BYTES": ("segment_bytes", 1),
    "PYCOLLECT_INFLIGHT": ("inflight", 1),
    "PYCOLLECT_DIRECT_MAX_BYTES": ("direct_max_bytes", 0),
    "PYCOLLECT_SOCKET_BUFFER": ("socket_buffer", 0),
    "PYCOLLECT_SPIN_US": ("spin_us", 0),
    "PYCOLLECT_STAGING_BYTES": ("staging_bytes", 1),
    "PYCOLLECT_SHM_SINGLE_COPY_BYTES": ("shm_single_copy_bytes", 1),
    "PYCOLLECT_FLIGHT_ENTRIES": ("flight_entries", 0),
    "PYCOLLECT_EAGER_BYTES": ("eager_bytes", 0),
    "PYCOLLECT_SHM_COLLECTIVE_BYTES": ("shm_collective_bytes", 0),
}
KNOWN = frozenset(_INTEGERS) | {"PYCOLLECT_ALGO", "PYCOLLECT_SOCKET_IFNAME", "PYCOLLECT_LINK_TIMEOUT",
                                 "PYCOLLECT_SECRET", "PYCOLLECT_SECRET_FILE", "PYCOLLECT_TRANSPORT",
                                 "PYCOLLECT_HOST_TAG", "PYCOLLECT_TRACE", "PYCOLLECT_MODEL",
                                 "PYCOLLECT_BLOCKING_WAIT", "PYCOLLECT_FLIGHT_DIR", "PYCOLLECT_LINKS"}
# Read outside a group's Options, where they are used (from_env lets them pass): the cache's
# place (cache.py) and the torch backend's first-use build (torch_backend/builder.py).
ELSEWHERE = frozenset({"PYCOLLECT_CACHE_DIR", "PYCOLLECT_BUILD_TORCH_BACKEND"})
TRANSPORTS = ("auto", "tcp", "shm")
LINKS = ("used", "all")  # made when first used (the ring's at formation), or every one at formation

# The tunables every rank of a group must set alike, because they shape what goes on the wire
# where no header says so (name -> the engine's CommOptions attribute, the default resolved):
# the segment size cuts the pipelined hierarchy into slices (collectives/rail_pipeline.cc), and
# which links a rank makes as the group forms is which it waits for its peers to make. A
# group whose ranks disagree fails as it forms, with a MismatchError naming the setting.
# The others need no such check: the algorithm (PYCOLLECT_ALGO, _DIRECT_MAX_BYTES, _MODEL,
# _SHM_COLLECTIVE_BYTES) and a
# device call's piece count (PYCOLLECT_STAGING_BYTES) travel in every call's header, which
# refuses a disagreement per call; the transport and the secret are negotiated at the handshake;
# the ring's segments are cut from one byte stream either way; how deep receives are posted
# (_INFLIGHT), when shared memory reads in place (_SHM_SINGLE_COPY_BYTES: each record says which
# it is), which messages go eagerly (_EAGER_BYTES: each message's frame says how it goes), spinning,
# socket buffers, timeouts, tracing, the flight recorder and host tags are local.
WIRE_SETTINGS = {"PYCOLLECT_SEGMENT_BYTES": "segment_bytes", "PYCOLLECT_LINKS": "all_links_at_start"}


@dataclass(frozen=True)
class Options:
    """Engine tunables; None leaves the engine's own default."""

    algo: Algo = Algo.AUTO
    segment_bytes: Optional[int] = None
    inflight: Optional[int] = None
    direct_max_bytes: Optional[int] = None
    socket_buffer: Optional[int] = None
    spin_us: Optional[int] = None
    socket_ifname: Optional[str] = None
    link_timeout: Optional[float] = None
    secret: Optional[bytes] = field(default=None, repr=False)  # never printed, never stored
    transport: Optional[str] = None  # auto, tcp or shm; None: the engine's (auto)
    links: str = "used"  # PYCOLLECT_LINKS: links made when first used, or "all" as the group forms
    host_tag: Optional[str] = None
    staging_bytes: Optional[int] = None  # CUDA tensors: bytes per staged piece
    shm_single_copy_bytes: Optional[int] = None  # None: default_single_copy_bytes
    trace: bool = False  # record engine events for every call
    model: Optional[str] = None  # PYCOLLECT_MODEL: a parameters file of pycollect.costmodel
    blocking_wait: bool = False  # PYCOLLECT_BLOCKING_WAIT: wait() on CUDA calls blocks the host
    flight_dir: Optional[str] = None  # PYCOLLECT_FLIGHT_DIR: where flight records go on a failure
    flight_entries: Optional[int] = None  # PYCOLLECT_FLIGHT_ENTRIES: the flight ring's size
    eager_bytes: Optional[int] = None  # PYCOLLECT_EAGER_BYTES: larger messages go by rendezvous
    # PYCOLLECT_SHM_COLLECTIVE_BYTES: "auto" runs calls up to this many bytes per rank through the
    # group's shared memory when all its ranks share a host (0: never); None: the engine's limit
    # per call (16 KiB, or 1 MiB for the all-gather and, on more than 2 ranks, the all-reduce)
    shm_collective_bytes: Optional[int] = None

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "Options":
        """Read every PYCOLLECT_* variable; an unknown name or a bad value raises ValueError naming it."""
        env = os.environ if environ is None else environ
        unknown = sorted(k for k in env if k.startswith("PYCOLLECT_") and k not in KNOWN | ELSEWHERE)
        if unknown:
            raise ValueError(f"unknown environment variable(s) {', '.join(unknown)}; pycollect reads "
                             f"{', '.join(sorted(KNOWN | ELSEWHERE))}")
        values = {}
        for name, (attr, lowest) in _INTEGERS.items():
            raw = env.get(name, "").strip()
            if not raw:
                continue
            try:
                value = int(raw)
            except ValueError:
                raise ValueError(f"{name}={raw!r} is not an integer") from None
            if value < lowest:
                raise ValueError(f"{name}={raw!r} must be >= {lowest}")
            values[attr] = value
        algo = env.get("PYCOLLECT_ALGO", "").strip()
        if algo:
            values["algo"] = Algo.parse(algo, "PYCOLLECT_ALGO")
        ifname = env.get("PYCOLLECT_SOCKET_IFNAME", "").strip()
        if ifname:
            values["socket_ifname"] = ifname
        raw = env.get("PYCOLLECT_LINK_TIMEOUT", "").strip()
        if raw:
            try:
                values["link_timeout"] = float(raw)
            except ValueError:
                raise ValueError(f"PYCOLLECT_LINK_TIMEOUT={raw!r} is not a number of seconds") from None
            if not 0 < values["link_timeout"] < float("inf"):
                raise ValueError(f"PYCOLLECT_LINK_TIMEOUT={raw!r} must be a positive, finite number of seconds")
        transport = env.get("PYCOLLECT_TRANSPORT", "").strip().lower()
        if transport:
            if transport not in TRANSPORTS:
                raise ValueError(f"PYCOLLECT_TRANSPORT={transport!r} must be one of {', '.join(TRANSPORTS)}")
            values["transport"] = transport
        links = env.get("PYCOLLECT_LINKS", "").strip().lower()
        if links:
            if links not in LINKS:
                raise ValueError(f"PYCOLLECT_LINKS={links!r} must be one of {', '.join(LINKS)}")
            values["links"] = links
        flight_dir = env.get("PYCOLLECT_FLIGHT_DIR", "").strip()
        if flight_dir:
            values["flight_dir"] = flight_dir
        tag = env.get("PYCOLLECT_HOST_TAG", "").strip()
        if tag:
            values["host_tag"] = tag
        values["blocking_wait"] = _few_hardware_queues(env)
        for name, attr in (("PYCOLLECT_TRACE", "trace"), ("PYCOLLECT_BLOCKING_WAIT", "blocking_wait")):
            raw = env.get(name, "").strip()
            if raw:
                if raw not in ("0", "1"):
                    raise ValueError(f"{name}={raw!r} must be 0 or 1")
                values[attr] = raw == "1"
        model = env.get("PYCOLLECT_MODEL", "").strip()
        if model:
            if not os.path.isfile(model):
                raise ValueError(f"PYCOLLECT_MODEL={model!r} is not a file (write one with `pycollect model --fit`)")
            from .tuning.params import Params  # a leaf: checks the file now, not at group creation

            try:
                Params.load(model)
            except ValueError as e:
                raise ValueError(f"PYCOLLECT_MODEL: {e}") from None
            values["model"] = model
        values["secret"] = _secret(env)
        return cls(**values)


DEFAULT_SPIN_US = 50


def ranks_fit_cores(local_ranks: int) -> bool:
    """Whether each of this host's `local_ranks` can have a core of its own (this process's
    CPU affinity, else the machine's count). A process allowed one core alone, on a machine
    with a core for every rank, was bound to it by its launcher (mpirun --bind-to core, srun
    --cpu-bind=cores, launch.pin_to_core), each rank to its own: its peers have theirs."""
    machine = os.cpu_count() or 1
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = machine
    if cores == 1 and local_ranks <= machine:
        return True
    return local_ranks <= cores


def default_spin_us(local_ranks: int) -> int:
    """Spinning pays when each rank of this host has a core to spin on; when ranks outnumber
    cores (4 ranks on 2 cores), a spinning rank steals the very core its peer needs."""
    return DEFAULT_SPIN_US if ranks_fit_cores(local_ranks) else 0


def default_single_copy_bytes(local_ranks: int) -> int:
    """Shared memory's single-copy threshold (csrc/transport/shm/link.h explains it): through
    the ring two cores copy one message (the sender in, the receiver out), which is faster
    while every rank has a core, so only messages of at least SHM_SINGLE_COPY_BYTES_FIT
    (1 MiB, two default ring segments) are read from the sender; where ranks outnumber cores
    that second copy takes a core another rank needs, so every message from
    SHM_SINGLE_COPY_BYTES (64 KiB, the engine's own default) is."""
    return SHM_SINGLE_COPY_BYTES_FIT if ranks_fit_cores(local_ranks) else SHM_SINGLE_COPY_BYTES


def _secret(env: Mapping[str, str]) -> Optional[bytes]:
    inline, path = env.get("PYCOLLECT_SECRET"), env.get("PYCOLLECT_SECRET_FILE")
    if inline is not None and path is not None:
        raise ValueError("set PYCOLLECT_SECRET or PYCOLLECT_SECRET_FILE, not both")
    if path is not None:
        try:
            with open(path, "rb") as f:
                secret = f.read().strip()
        except OSError as e:
            raise ValueError(f"PYCOLLECT_SECRET_FILE={path!r} cannot be read: {e.strerror}") from None
        if not secret:
            raise ValueError(f"PYCOLLECT_SECRET_FILE={path!r} is empty")
        return secret
    if inline is not None:
        if not inline.strip():
            raise ValueError("PYCOLLECT_SECRET is set but empty")
        return inline.strip().encode()
    return None


FEW_CONNECTIONS = 2  # CUDA_DEVICE_MAX_CONNECTIONS at or below this: the host waits


def _few_hardware_queues(env: Mapping[str, str]) -> bool:
    """Whether CUDA_DEVICE_MAX_CONNECTIONS leaves so few hardware queues that the host-free
    wait is unsafe: the driver's scheduler does not see the order a flag word makes
    (cuStreamWaitValue32), so with the streams folded onto one or two queues the caller's
    blocked wait could sit ahead of the very copies it waits for. Megatron-style jobs set
    it to 1. A value that is not an integer is CUDA's business, not ours: ignored."""
    raw = env.get("CUDA_DEVICE_MAX_CONNECTIONS", "").strip()
    try:
        return int(raw) <= FEW_CONNECTIONS if raw else False
    except ValueError:
        return False


def to_timedelta(timeout) -> datetime.timedelta:
    """A group's timeout: None -> DEFAULT_TIMEOUT; a timedelta or seconds (> 0) as given, with
    infinity and anything longer than MAX_TIMEOUT clamped to MAX_TIMEOUT."""
    if timeout is None:
        return DEFAULT_TIMEOUT
    seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)
    if not seconds > 0:  # also refuses NaN
        raise ValueError(f"timeout must be positive, got {timeout!r}")
    if seconds >= MAX_TIMEOUT.total_seconds():
        return MAX_TIMEOUT
    return timeout if isinstance(timeout, datetime.timedelta) else datetime.timedelta(seconds=seconds)


def to_seconds(timeout) -> Optional[float]:
    """A wait's timeout (None, seconds or a timedelta) as float seconds; None and infinity
    mean no limit (None); anything longer than MAX_TIMEOUT is clamped to it."""
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)
    if seconds != seconds:
        raise ValueError("timeout must be a number of seconds, got NaN")
    if seconds == float("inf"):
        return None
    return min(seconds, MAX_TIMEOUT.total_seconds())
