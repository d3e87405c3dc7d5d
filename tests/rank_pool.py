"""A pool of real rank processes on loopback, started once and reused by many tests.

    pool = RankPool(4)                     # 4 processes; pycollect and Gloo both initialised
    results = pool.run(fn, arg1, arg2)     # fn(arg1, arg2) on every rank, list of returns
    outcomes = pool.run_raw(fn)            # [(ok, value_or_error_text), ...] per rank

tests/conftest.py keeps the pools most modules share for the whole session. Worker
functions (the `fn`s) are named `case_*`; paired_groups() gives them a pycollect group
and the Gloo group over the same ranks.

`fn` must be a module-level function (it is pickled by reference). Each worker has
run pycollect.launch.init_rank: pycollect.init_process_group and (init_gloo=True)
torch.distributed.init_process_group("gloo") on a shared TCPStore, so tests can run
both engines on the same inputs in the same processes. A rank that does not answer within `timeout` fails the call (and the
pool is torn down), so a hang is a test failure, never a stuck suite. With
`netns=[namespace per rank]` and `master_addr` (rank 0's address) each rank runs on a
pycollect.netns host instead of loopback (tests/netns_hosts.py).
"""
from __future__ import annotations

import os
import traceback
from typing import Any, Callable, List, Tuple

from pycollect.group import NON_GROUP_MEMBER
from pycollect.launch import adopt_environment, close_rank, enter_host, free_port, init_rank, rank_context


def _worker(rank: int, world: int, port: int, conn, env: dict, backends: tuple, timeout_s: float,
            master_addr: str, netns, parent_env: dict) -> None:
    adopt_environment(parent_env, env)
    try:
        enter_host(netns)
        init_rank(rank, world, port, backends, timeout_s, master_addr)
        conn.send(("ready", None))
    except BaseException:  # report start-up failures to the parent
        conn.send(("err", traceback.format_exc()))
        return
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            break
        if msg is None:
            break
        fn, args, kwargs = msg
        try:
            conn.send(("ok", fn(*args, **kwargs)))
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the test
            conn.send(("err", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
    close_rank()


_PAIRS: dict = {}


def paired_groups(size: int):
    """Worker side: (pycollect group, Gloo group) over ranks [0, size), or None on a rank
    outside them. (None, None) when `size` is the whole pool: the default groups. Sub-groups
    are made once per worker process; every rank must call this with the same sizes in
    the same order (new_group is collective), members or not."""
    import torch.distributed as dist

    import pycollect as pc

    if size == pc.get_world_size():
        return None, None
    if size not in _PAIRS:
        ranks = list(range(size))
        _PAIRS[size] = (pc.new_group(ranks), dist.new_group(ranks))
    pg, gg = _PAIRS[size]
    return None if pg is NON_GROUP_MEMBER else (pg, gg)


def next_group_name() -> str:
    """Worker side: the store prefix of the next group this process makes."""
    from pycollect import world

    return f"g{world.group_seq}"


def next_group_address(rank: int, group: str | None = None, timeout: float = 15.0):
    """Worker side: (host, port) where `rank` listens for `group` (default: the next group
    this process makes), read from the store as any stranger could, once published."""
    from pycollect import world
    from pycollect.formation import published_address

    return published_address(world.store, group or next_group_name(), rank, timeout)


class RankPool:
    def __init__(self, world_size: int, *, init_gloo: bool = True, timeout: float = 60.0,
                 env: dict | None = None, op_timeout: float = 30.0, master_addr: str = "127.0.0.1",
                 netns=None):
        self.world_size = world_size
        self.timeout = timeout
        ctx = rank_context()
        hosts = list(netns) if netns is not None else [None] * world_size
        port = free_port(master_addr, hosts[0])
        backends = ("pycollect", "gloo") if init_gloo else ("pycollect",)
        self._conns = []
        self.procs = []
        for rank in range(world_size):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(rank, world_size, port, child, dict(env or {}), backends,
                                                  op_timeout, master_addr, hosts[rank], dict(os.environ)),
                            daemon=True)
            p.start()
            self._conns.append(parent)
            self.procs.append(p)
        for rank, c in enumerate(self._conns):
            if not c.poll(timeout * 2):
                self.close()
                raise RuntimeError(f"rank {rank} did not start within {timeout * 2:.0f} s")
            status, info = c.recv()
            if status != "ready":
                self.close()
                raise RuntimeError(f"rank {rank} failed to start:\n{info}")

    def submit(self, fn: Callable, *args, ranks=None, **kwargs) -> None:
        """Start fn on `ranks` (default all) without waiting; see collect()."""
        for r in range(self.world_size) if ranks is None else ranks:
            self._conns[r].send((fn, args, kwargs))

    def collect(self, ranks=None, timeout: float | None = None, what: str = "call") -> List[Tuple[bool, Any]]:
        """(ok, result or error text) of the call running on each of `ranks`."""
        ranks = range(self.world_size) if ranks is None else ranks
        out = []
        limit = self.timeout if timeout is None else timeout
        for r in ranks:
            if not self._conns[r].poll(limit):
                self.close()
                raise TimeoutError(f"rank {r} did not finish {what} within {limit:.0f} s (hang?)")
            status, value = self._conns[r].recv()
            out.append((status == "ok", value))
        return out

    def run_raw(self, fn: Callable, *args, timeout: float | None = None, ranks=None, **kwargs) -> List[Tuple[bool, Any]]:
        """Run fn on `ranks` (default all); returns (ok, result or error text) per rank."""
        self.submit(fn, *args, ranks=ranks, **kwargs)
        return self.collect(ranks, timeout, fn.__name__)

    def run(self, fn: Callable, *args, **kwargs) -> List[Any]:
        """Run fn on every rank; raise AssertionError with every rank's error if any failed."""
        outcomes = self.run_raw(fn, *args, **kwargs)
        errors = [f"rank {r}: {v}" for r, (ok, v) in enumerate(outcomes) if not ok]
        if errors:
            raise AssertionError("\n".join(errors))
        return [v for _, v in outcomes]

    def kill(self, rank: int) -> None:
        self.procs[rank].kill()

    def close(self) -> None:
        for c in self._conns:
            try:
                c.send(None)
            except Exception:
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
