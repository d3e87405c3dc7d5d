"""Start ranks on this machine and collect what they return: the one launcher behind
pycollect.demo, `pycollect demo` (DDP and --fsdp), `pycollect bench`, the bench/ scripts
and (through init_rank and free_port) the test suite's rank pools.

    results = run_ranks(job, world_size=2, backends=("pycollect", "gloo"), job_args=(...))

Each rank is a process of its own on 127.0.0.1, forked from a server that imported torch
and pycollect once (rank_context: multiprocessing "forkserver"), with its parent's
environment (adopt_environment), as a spawned rank would have. Rank 0 hosts a
TCPStore on a free port. Every rank joins pycollect's default group and/or
torch.distributed's Gloo group through that store, sets torch to one thread, then calls
`job(rank, world_size, emit, *job_args)`. `emit(*event)` sends a progress event to the
parent, which hands it to `on_event(rank, event)` while the ranks are still running.
A rank that raises, dies, or is still running when `timeout` seconds are up makes the
parent kill all ranks and raise with that rank's traceback. `env` is set in each rank
before anything is initialised (e.g. the PYCOLLECT_* tunables).

`netns=[name per rank]` runs each rank on a host of pycollect.netns.Hosts (its network
namespace) instead, with the store on `master_addr` (that of rank 0's host).
"""
from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import queue as queue_mod
import random
import socket
import threading
import time
import traceback
from typing import Any, Callable, List, Optional, Sequence

BACKENDS = ("pycollect", "gloo", "nccl")  # nccl: one GPU per rank (rank r on cuda:r)


def free_port(host: str = "127.0.0.1", netns: Optional[str] = None) -> int:
    """A TCP port that is free on `host` (IPv4 or IPv6) right now; `host` is looked up inside
    network namespace `netns` when given (see pycollect.netns).

    Drawn from below the kernel's ephemeral range: a port bind(0) returns is one the kernel
    hands out again to the next connect() or port-0 listener, and the rank that binds it a
    second later (the store's host, as MASTER_PORT) found it taken now and then (EADDRINUSE,
    in a suite full of connections); below the range only an explicit bind takes a port."""
    if netns is not None:
        from . import netns as ns

        return ns.run_in(netns, free_port, host)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    low = _ephemeral_low()
    draw = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(64):
        port = draw.randrange(max(1024, low - 16384), low)
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue  # in use: draw again
            return port
    with socket.socket(family, socket.SOCK_STREAM) as s:  # the range below is full: any port
        s.bind((host, 0))
        return s.getsockname()[1]


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default 32768 elsewhere)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _check_backends(backends: Sequence[str]) -> None:
    if not backends or any(b not in BACKENDS for b in backends):
        raise ValueError(f"backends must be a non-empty subset of {BACKENDS}, got {tuple(backends)!r}")


def init_rank(rank: int, world_size: int, port: int, backends: Sequence[str], timeout_s: float,
              master_addr: str = "127.0.0.1") -> None:
    """What every local rank does first: one thread for torch, a TCPStore that rank 0 hosts on
    `master_addr:port`, and on it the default groups named in `backends` ("pycollect":
    pycollect's, "gloo" or "nccl": torch.distributed's), each under its own store prefix. With
    "nccl" rank r uses cuda:r (NCCL refuses two ranks on one GPU)."""
    _check_backends(backends)
    import torch
    import torch.distributed as dist

    from . import api

    torch.set_num_threads(1)
    td = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(master_addr, port, world_size, is_master=(rank == 0), timeout=td, wait_for_workers=False)
    if "pycollect" in backends:
        api.init_process_group(store=dist.PrefixStore("pycollect", store), rank=rank, world_size=world_size,
                               timeout=td)
    if "nccl" in backends:
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", store=dist.PrefixStore("nccl", store), rank=rank, world_size=world_size,
                                timeout=td)
    elif "gloo" in backends:
        dist.init_process_group("gloo", store=dist.PrefixStore("gloo", store), rank=rank, world_size=world_size,
                                timeout=td)


def close_rank() -> None:
    """Destroy the default groups init_rank made (best effort: the job may have broken them)."""
    import torch.distributed as dist

    from . import api

    try:
        if api.is_initialized():
            api.destroy_process_group()
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass


def enter_host(netns: Optional[str]) -> None:
    """A new rank's first step when it runs on a namespace host (netns=None: stay here)."""
    if netns is not None:
        from . import netns as ns

        ns.enter(netns)
        # Namespace hosts share the machine's boot id and IPC namespace: without a tag of
        # their own the engine would give them shared-memory links that no cable cut reaches.
        os.environ["PYCOLLECT_HOST_TAG"] = netns


def pin_to_core(rank: int) -> None:
    """Pins this rank's process to one core (rank r to core r mod the cores it may use):
    left to the scheduler, two ranks that wake each other are often placed on one core
    for a whole run (Linux's wake-affine placement), and that run measures the placement
    (up to 9x slower on a 2-core machine), not the algorithm. For measurements and
    pictures; a training job leaves placement to its launcher."""
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[rank % len(cores)]})


# torch._dynamo too: torch imports it at the first call of anything it keeps from being
# compiled (an optimizer's constructor, for one), 1.2-1.7 s of CPU that every training
# rank paid again; the server pays it once.
RANK_PRELOAD = ["torch", "torch.distributed", "torch._dynamo", "pycollect"]
_server_lock = threading.Lock()


def rank_context():
    """The multiprocessing context local ranks start from: a fork server that imported torch
    and pycollect once (RANK_PRELOAD), so a rank starts in a fraction of the time a fresh
    interpreter takes (spawn: ~1.5 s of CPU for torch alone, per rank). Each rank is still a
    process of its own that inherits no thread, no CUDA context and no group: the server
    never made one. Pass the parent's environment and apply it with adopt_environment."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(RANK_PRELOAD)
    _start_server_beside_this_package()
    return ctx


def _start_server_beside_this_package() -> None:
    """Ranks import what their parent imported. The fork server runs `python -c`, so its
    working directory comes first on its sys.path (Python 3.11 ignores the sys.path the
    parent hands it): started in a directory that holds a pycollect source tree (the
    repository root, with pycollect installed as a package), it preloaded that tree, and
    every rank failed with "cannot import name '_C'". So it starts in the directory this
    pycollect was imported from. The ranks still run in the parent's working directory
    (multiprocessing sets it in each child, with the parent's sys.path, before the job).
    Changing directory is process-wide: the lock keeps two starts apart, and the change
    lasts as long as the server's start."""
    from multiprocessing import forkserver

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with _server_lock:
        cwd = os.getcwd()
        os.chdir(root)
        try:
            forkserver.ensure_running()
        finally:
            os.chdir(cwd)


def adopt_environment(parent_env: dict, env: dict) -> None:
    """A rank forked from the server has the server's environment, which may be older than
    its parent's: it takes the parent's (as under spawn), then `env` on top."""
    os.environ.clear()
    os.environ.update(parent_env)
    os.environ.update(env)


def _rank_main(rank: int, world_size: int, port: int, backends: Sequence[str], job: Callable,
               job_args: tuple, out, timeout_s: float, env: dict, master_addr: str,
               netns: Optional[str], parent_env: dict) -> None:
    adopt_environment(parent_env, env)
    try:
        enter_host(netns)
        init_rank(rank, world_size, port, backends, timeout_s, master_addr)

        def emit(*event: Any) -> None:
            out.put(("event", rank, event))

        result = job(rank, world_size, emit, *job_args)
        # Nobody leaves (taking rank 0's store with it) before everyone is done.
        if "gloo" in backends:
            import torch.distributed as dist

            dist.barrier()
        else:
            from . import api

            api.barrier()
        out.put(("done", rank, result))
    except BaseException:  # every failure goes back to the parent
        out.put(("error", rank, traceback.format_exc()))
    finally:
        close_rank()


def _failure_report(out, world_size: int, errors: dict, grace_s: float = 1.0) -> str:
    """Wait a moment for the other ranks' errors too: the first to arrive is not always the cause."""
    deadline = time.monotonic() + grace_s
    while len(errors) < world_size and time.monotonic() < deadline:
        try:
            kind, rank, payload = out.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue_mod.Empty:
            break
        if kind == "error":
            errors[rank] = payload
    return "\n".join(f"rank {r} of {world_size} failed:\n{errors[r]}" for r in sorted(errors))


def collect_results(get: Callable, world_size: int, timeout: float, on_event: Optional[Callable[[int, tuple], None]],
                    check_alive: Callable[[dict], None], failure: Callable[[int, str], str],
                    where: str = "") -> dict:
    """The parent's side of a run: take the ranks' messages from `get(timeout=...)` (which
    raises queue.Empty when none came) until every rank reported, handing events to
    `on_event(rank, event)`. A rank's error raises RuntimeError(failure(rank, traceback));
    between messages `check_alive(results)` raises for a rank that died silently; past
    `timeout` seconds, TimeoutError names the ranks still out (`where`: how they run)."""
    results: dict = {}
    deadline = time.monotonic() + timeout
    while len(results) < world_size:
        left = deadline - time.monotonic()
        if left <= 0:
            missing = [r for r in range(world_size) if r not in results]
            raise TimeoutError(f"rank(s) {missing} did not finish within {timeout:g} s{where}")
        try:
            kind, rank, payload = get(timeout=min(left, 0.5))
        except queue_mod.Empty:
            check_alive(results)
            continue
        if kind == "event":
            if on_event is not None:
                on_event(rank, payload)
        elif kind == "error":
            raise RuntimeError(failure(rank, payload))
        else:
            results[rank] = payload
    return results


def run_ranks(job: Callable, world_size: int, backends: Sequence[str], job_args: tuple = (),
              timeout: float = 60.0, on_event: Optional[Callable[[int, tuple], None]] = None,
              env: Optional[dict] = None, netns: Optional[Sequence[str]] = None,
              master_addr: str = "127.0.0.1", group_timeout: Optional[float] = None) -> List[Any]:
    """Run `job` on `world_size` local ranks; return the list of their results, in rank order.
    `timeout` bounds the whole run; the groups' own timeout is `group_timeout` (None: the same)."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if netns is not None and len(netns) != world_size:
        raise ValueError(f"netns names one namespace per rank: {len(netns)} for {world_size} ranks")
    _check_backends(backends)
    ctx = rank_context()
    out = ctx.Queue()
    hosts = list(netns) if netns is not None else [None] * world_size
    port = free_port(master_addr, hosts[0])
    procs = [ctx.Process(target=_rank_main, args=(r, world_size, port, tuple(backends), job, job_args, out,
                                                  float(timeout if group_timeout is None else group_timeout),
                                                  dict(env or {}), master_addr, hosts[r], dict(os.environ)),
                         daemon=True)
             for r in range(world_size)]
    for p in procs:
        p.start()

    return collect_processes(procs, out, timeout, on_event,
                             lambda rank, payload: _failure_report(out, world_size, {rank: payload}))


def collect_processes(procs: list, out, timeout: float, on_event: Optional[Callable[[int, tuple], None]],
                      failure: Callable[[int, str], str], where: str = "", join_s: float = 5.0) -> List[Any]:
    """collect_results for ranks that are local processes (`procs`, rank order) reporting on
    queue `out`: a rank that exits before reporting is an error; at the end every process is
    joined (`join_s` each when all reported), and any still alive killed. The results, in
    rank order."""
    world_size = len(procs)

    def check_alive(results: dict) -> None:
        for r, p in enumerate(procs):
            if r not in results and p.exitcode not in (None, 0):
                raise RuntimeError(f"rank {r} died with exit code {p.exitcode} before reporting")

    results: dict = {}
    try:
        results = collect_results(out.get, world_size, timeout, on_event, check_alive, failure, where)
    finally:
        for p in procs:
            p.join(timeout=join_s if len(results) == world_size else 0.1)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    return [results[r] for r in range(world_size)]
