"""Rendezvous: find the store, pick the address to listen on.

pycollect reuses torch.distributed's TCPStore. A job started by torchrun, mpirun or
srun (or with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set) needs no arguments:
launcher.py reads whichever launcher's variables are there. Explicit
rank=/world_size=/init_method="tcp://host:port" or store= also work, and win.
"""
from __future__ import annotations

import datetime
import os
import socket
import warnings
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlparse

from .launcher import detect
from .options import Options

@dataclass
class Rendezvous:
    store: object
    rank: int
    world_size: int
    master_addr: Optional[str]


def _require(value, name: str, env: str, ignored=()) -> int:
    """`value`, or ValueError saying how to give it and which variables were found but ignored
    (a launcher's notes that say so: an sbatch script's SLURM_PROCID, say)."""
    if value is None or value < 0:
        why = "".join(f"; {n}" for n in ignored)
        raise ValueError(f"{name} is not known: pass {name}= or set {env} (torchrun sets it){why}")
    return value


def rendezvous(init_method, rank: int, world_size: int, store, timeout: datetime.timedelta) -> Rendezvous:
    # Only an env:// rendezvous meets at MASTER_ADDR:MASTER_PORT; the others need the launcher for ranks only.
    launch = detect(need_master=store is None and init_method in (None, "env://"))
    if rank is None or rank < 0 or world_size is None or world_size < 0:
        for conflict in launch.conflicts:  # e.g. RANK and OMPI_COMM_WORLD_RANK both set, and different
            warnings.warn(f"pycollect: {conflict}", RuntimeWarning, stacklevel=3)
    if rank is None or rank < 0:
        rank = launch.rank
    if world_size is None or world_size < 0:
        world_size = launch.world_size
    ignored = [n for n in launch.notes if "ignored" in n]
    rank = _require(rank, "rank", "RANK", ignored)
    world_size = _require(world_size, "world_size", "WORLD_SIZE", ignored)
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside [0, {world_size})")
    if store is not None:
        if init_method is not None:
            raise ValueError("pass either store= or init_method=, not both")
        return Rendezvous(store, rank, world_size, _store_host(store) or launch.master_addr)

    import torch.distributed as dist

    if init_method is None or init_method == "env://":
        host, port = launch.master_addr, launch.master_port
        if host is None or port is None:
            raise ValueError(
                "no rendezvous: set MASTER_ADDR and MASTER_PORT (torchrun does), or pass "
                'init_method="tcp://host:port" or store='
            )
    elif init_method.startswith("tcp://"):
        url = urlparse(init_method)
        host, port = url.hostname, url.port
        if host is None or port is None:
            raise ValueError(f"init_method {init_method!r} must look like tcp://host:port")
    else:
        raise ValueError(f"unsupported init_method {init_method!r}: use env:// or tcp://host:port")
    # Under torchrun the agent already serves the store on MASTER_PORT.
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    tcp_store = dist.TCPStore(
        host,
        port,
        world_size,
        is_master=(rank == 0 and not agent_store),
        timeout=timeout,
        wait_for_workers=False,
    )
    return Rendezvous(dist.PrefixStore("pycollect", tcp_store), rank, world_size, host)


def _store_host(store) -> Optional[str]:
    while store is not None:
        host = getattr(store, "host", None)
        if isinstance(host, str) and host:
            return host
        store = getattr(store, "underlying_store", None)
    return None


def _route_target(host: str):
    """(family, sockaddr for port 9) through which to probe the route to `host` (socket.gaierror
    if it does not resolve). An IP address written as one needs no lookup
    (socket.getaddrinfo encodes every name as IDNA, and importing that codec cost each rank
    3 ms of CPU while forming its group)."""
    for family, sockaddr in ((socket.AF_INET, (host, 9)), (socket.AF_INET6, (host, 9, 0, 0))):
        try:
            socket.inet_pton(family, host)
            return family, sockaddr
        except (OSError, ValueError):
            continue
    info = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)[0]
    return info[0], info[4]


def listen_address(master_addr: Optional[str]) -> str:
    """The local address to listen on and publish.

    PYCOLLECT_SOCKET_IFNAME picks an interface by name; otherwise the address
    through which this host reaches MASTER_ADDR (loopback when it is local).
    """
    from . import _C

    ifname = Options.from_env().socket_ifname
    if ifname:  # MASTER_ADDR only says which family to prefer, where it resolves
        family = 0
        if master_addr:
            try:
                family = _route_target(master_addr)[0]
            except socket.gaierror:
                pass
        return _C.interface_address(ifname, int(family))
    if not master_addr:
        return "127.0.0.1"
    try:
        family, sockaddr = _route_target(master_addr)
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(sockaddr)  # no packet is sent: this only asks the routing table
            return probe.getsockname()[0]
    except OSError as e:  # socket.gaierror among them
        raise RuntimeError(f"cannot find a local address that reaches MASTER_ADDR={master_addr!r}: {e}") from None
