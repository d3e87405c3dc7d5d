"""`pycollect bench --latency`: small-message latency, OSU-style, with the peer in the same run.

For each operation (all-reduce, broadcast, barrier, and a send/recv ping-pong between
ranks 0 and 1) and each size from 8 B to 64 KiB, the engines run in alternating blocks
of single calls, each call timed on its own after the previous one returned: the engine
alone (the same calls issued from C++ with no Python per call: benchmark/engine.py),
pycollect called directly, pycollect through torch.distributed (a
`new_group(backend="pycollect")` group, so torch's own dispatch is in the time), and the
peer. A row reports the median and the 99th percentile per call (the slowest rank's), and
the ratio of the peer's median to pycollect's (the API's). Before the rows, rank 0 measures the wire's own limit: an
8-byte ping-pong over loopback TCP with blocking and with busy-polling receives
(pycollect._C.tcp_round_trip_us), which a TCP transport can approach but not beat.
"""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch

OPS = ("all_reduce", "broadcast", "barrier", "ping_pong")
SIZES = (8, 64, 512, 4096, 32768, 65536)


@dataclass
class LatencyConfig:
    world_size: int = 2
    ops: tuple = OPS
    sizes: tuple = SIZES
    iters: int = 200
    repeats: int = 5
    peer: Optional[str] = "gloo"
    torch_backend: bool = True  # also time pycollect through torch.distributed
    engine: bool = True  # also time the engine's C++ loop (no Python per call)
    env: Dict[str, str] = field(default_factory=dict)


def call(comm, op: str, t, rank: int, out=None) -> None:
    """One call of `op` with pycollect.api's (or torch.distributed's) names on `t` (a tensor,
    or a numpy array for the API); all_gather, reduce_scatter, gather, scatter and all_to_all
    write `out` (the list calls' lists as rows() makes them)."""
    if op == "all_reduce":
        comm.all_reduce(t)
    elif op == "broadcast":
        comm.broadcast(t, src=0)
    elif op == "reduce":  # to rank 0
        comm.reduce(t, 0)
    elif op == "barrier":
        comm.barrier()
    elif op == "all_gather":
        comm.all_gather_into_tensor(out, t)
    elif op == "reduce_scatter":
        comm.reduce_scatter_tensor(out, t)
    elif op == "gather":  # to rank 0's `out`, a list of rows (rows())
        comm.gather(t, out if rank == 0 else None, 0)
    elif op == "scatter":  # from rank 0's `t`, a list of rows, into `out`
        comm.scatter(out, t if rank == 0 else None, 0)
    elif op == "all_to_all":  # row p of `t` to rank p, rank p's into row p of `out` (lists: rows())
        comm.all_to_all(out, t)
    elif rank == 0:  # ping-pong: one round trip between ranks 0 and 1
        comm.send(t, dst=1)
        comm.recv(t, src=1)
    elif rank == 1:
        comm.recv(t, src=0)
        comm.send(t, dst=0)


class _TorchGroup:
    """torch.distributed's collectives on one group, with pycollect.api's call shapes:
    the torch backend's path, measured beside the direct one."""

    def __init__(self, group):
        import torch.distributed as dist

        self._dist, self._group = dist, group

    def all_reduce(self, t):
        self._dist.all_reduce(t, group=self._group)

    def broadcast(self, t, src):
        self._dist.broadcast(t, src=src, group=self._group)

    def barrier(self):
        self._dist.barrier(group=self._group)

    def send(self, t, dst):
        self._dist.send(t, dst=dst, group=self._group)

    def recv(self, t, src):
        self._dist.recv(t, src=src, group=self._group)


def rows(op: str, t, out):
    """(t, out) with the root's buffer of gather (out) or scatter (t), or both buffers of
    all_to_all, as the list of rows, one a rank, that those calls take: made once, as a
    caller's would be."""
    if op == "gather":
        return t, list(out.reshape(out.shape[0] // t.shape[0], -1))
    if op == "scatter":
        return list(t.reshape(t.shape[0] // out.shape[0], -1)), out
    if op == "all_to_all":
        from .. import api

        world = api.get_world_size()
        return list(t.reshape(world, -1)), list(out.reshape(world, -1))
    return t, out


def block(e: str, comm, op: str, t, size: int, rank: int, iters: int, out=None) -> List[float]:
    """One block of `iters` single calls by engine `e` (`comm`'s calls; "engine": the C++
    loop on the default group, own buffers of `size` bytes), microseconds each."""
    if e == "engine":  # the C++ loop barriers before its timed calls
        from .engine import engine_loop

        return engine_loop(op, size, iters, warmup=0)[0]
    comm.barrier()
    t, out = rows(op, t, out)
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        call(comm, op, t, rank, out)
        samples.append((time.perf_counter() - t0) * 1e6)
    return samples


def percentiles(samples: List[float]) -> tuple:
    """(median, 99th percentile)."""
    s = sorted(samples)
    return statistics.median(s), s[min(len(s) - 1, int(0.99 * len(s)))]


def slowest(value: float) -> float:
    """The largest of every rank's `value` (an all-reduce MAX on the default group)."""
    from .. import api

    t = torch.tensor([value], dtype=torch.float64)
    api.all_reduce(t, op=api.ReduceOp.MAX)
    return float(t[0])


def _job(rank: int, n: int, emit, cfg: LatencyConfig) -> None:
    from .. import _C, api
    from .._sync import collectives

    if rank == 0:
        emit("wire", _C.tcp_round_trip_us(2000, False), _C.tcp_round_trip_us(2000, True))
    api.barrier()
    engines = (["engine"] if cfg.engine else []) + ["pycollect"] + (["torch_backend"] if cfg.torch_backend else []) \
        + ([cfg.peer] if cfg.peer else [])
    comms = {e: collectives(e) for e in engines if e not in ("engine", "torch_backend")}
    comms["engine"] = None  # block runs its calls from C++
    if cfg.torch_backend:
        import torch.distributed as dist

        from .. import torch_backend

        torch_backend.register()

        comms["torch_backend"] = _TorchGroup(dist.new_group(backend="pycollect"))
    for op in cfg.ops:
        for size in cfg.sizes if op != "barrier" else (0,):
            t = torch.ones(max(size // 4, 1) if size else 1)
            samples = {e: [] for e in engines}
            for e in engines:  # warm-up: 10 calls each
                block(e, comms[e], op, t, size, rank, 10)
            for rep in range(cfg.repeats):
                for e in engines if rep % 2 == 0 else engines[::-1]:
                    samples[e] += block(e, comms[e], op, t, size, rank, cfg.iters)
            row = {"op": op, "size": size}
            for e in engines:
                med, p99 = percentiles(samples[e]) if samples[e] else (0.0, 0.0)
                row[e] = {"median_us": slowest(med), "p99_us": slowest(p99)}
            if cfg.peer:
                row["ratio"] = row[cfg.peer]["median_us"] / row["pycollect"]["median_us"]
            if rank == 0:
                emit("row", row)


def run(cfg: LatencyConfig, json_path: Optional[str] = None, stream=None) -> Dict:
    """Run the latency table; print it as rows arrive; return {wire, rows}."""
    from ..launch import run_ranks
    from . import report

    stream = stream if stream is not None else sys.stdout
    if "ping_pong" in cfg.ops and cfg.world_size < 2:
        raise ValueError("the ping-pong needs at least 2 ranks")
    rows: List[Dict] = []
    wire: Dict[str, float] = {}
    peer = cfg.peer or "-"
    print(f"# pycollect bench --latency: {cfg.world_size} ranks on loopback, {cfg.iters} single calls x "
          f"{cfg.repeats} blocks per engine, median and p99 per call (slowest rank), peer {peer}",
          file=stream, flush=True)

    def on_event(rank: int, event: tuple) -> None:
        if event[0] == "wire":
            wire.update(blocking_us=event[1], busy_poll_us=event[2])
            print(f"# wire limit: raw loopback TCP 8-byte round trip {event[1]:.1f} us (blocking recv), "
                  f"{event[2]:.1f} us (busy-polling recv)", file=stream, flush=True)
            head = f"{'op':>11} {'size':>7}" + (f" {'engine us':>10} {'p99':>8}" if cfg.engine else "")
            head += f" {'pycollect us':>13} {'p99':>8}"
            if cfg.torch_backend:
                head += f" {'via torch us':>13} {'p99':>8}"
            print(head + f" {peer + ' us':>10} {'p99':>8} {'ratio':>7}", file=stream, flush=True)
            return
        row = event[1]
        rows.append(row)
        theirs = row.get(cfg.peer, {"median_us": float("nan"), "p99_us": float("nan")}) if cfg.peer else None
        line = f"{row['op']:>11} {row['size']:>7}"
        if cfg.engine:
            line += f" {row['engine']['median_us']:>10.2f} {row['engine']['p99_us']:>8.2f}"
        line += f" {row['pycollect']['median_us']:>13.1f} {row['pycollect']['p99_us']:>8.1f}"
        if cfg.torch_backend:
            line += f" {row['torch_backend']['median_us']:>13.1f} {row['torch_backend']['p99_us']:>8.1f}"
        if theirs:
            line += f" {theirs['median_us']:>10.1f} {theirs['p99_us']:>8.1f} {row['ratio']:>6.2f}x"
        print(line, file=stream, flush=True)

    backends = ("pycollect", cfg.peer) if cfg.peer else ("pycollect",)
    if cfg.torch_backend and "gloo" not in backends:
        backends += ("gloo",)  # new_group needs torch's default group
    run_ranks(_job, cfg.world_size, backends, job_args=(cfg,), timeout=1800, on_event=on_event, env=cfg.env)
    if json_path:
        report.write_json(json_path, {"latency": True, "wire": wire, "world_size": cfg.world_size}, rows)
        print(f"# wrote {json_path}", file=stream)
    return {"wire": wire, "rows": rows}
