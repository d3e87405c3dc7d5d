"""Worker side of the benchmark: time pycollect and the peers on the same tensors.

For each size the engines run in alternating blocks of `iters` calls (ours, then the
peers, in even blocks; the reverse order in odd ones); a block's time divided by
`iters` is one sample and the row reports the median sample, the slowest rank's (and
the fastest sample as best_us, which the cost model's validation compares against).
Then one call of each runs on a known pattern and #wrong counts the elements
that differ from the expected result (a compressed all-reduce's: those past the error
bound that pycollect.compression states).
"""
from __future__ import annotations

import functools
import statistics
import time
from typing import Dict, Iterator, Optional, Sequence

import torch
import torch.distributed as dist

from .. import api as pc
from ..compression import error_bound
from ..measuring import DTYPE_BYTES, buffers, bus_factor, elements, max_over_ranks, op_caller


class Engine:
    """One engine's calls: pycollect's API, torch.distributed's (gloo, nccl: a peer), or MPI's
    (mpi: mpi4py's COMM_WORLD on numpy views of the same CPU tensors, in ranks that mpirun
    started; see benchmark.mpi)."""

    def __init__(self, name: str, group=None, algo: Optional[str] = None, compress: Optional[str] = None):
        self.name = name
        self.group = group
        self.algo = algo  # pycollect's algorithm for the timed op (None: the group's choice)
        self.compress = compress  # pycollect's all_reduce(compress=...): the engine "pycollect-<format>"
        self._torch = name not in ("pycollect", "mpi") and compress is None
        self._mpi = None
        if name == "mpi":
            from mpi4py import MPI

            self._mpi, self._comm = MPI, MPI.COMM_WORLD

    def call(self, op: str, a, b) -> None:
        self.caller(op, a, b)()

    def caller(self, op: str, a, b):
        """One call of `op` on (a, b) as a function of no arguments: what is asked once (the
        numpy views MPI takes, the function, the group, the algorithm) is asked here, so the
        timed loop charges each engine its own call and nothing of the harness's."""
        g = self.group
        if self._mpi is not None:
            MPI, comm, x = self._mpi, self._comm, a.numpy()
            # Positional arguments, as for every engine here (measuring.op_caller says why).
            if op == "all_reduce":
                return functools.partial(comm.Allreduce, MPI.IN_PLACE, x, MPI.SUM)
            if op == "all_gather":
                return functools.partial(comm.Allgather, x, b.numpy())
            if op == "reduce_scatter":
                return functools.partial(comm.Reduce_scatter_block, x, b.numpy(), MPI.SUM)
            return functools.partial(comm.Bcast, x, 0)
        if self._torch:
            if op == "all_reduce":
                return functools.partial(dist.all_reduce, a, dist.ReduceOp.SUM, g)
            if op == "all_gather":
                return functools.partial(_ag, b, a, g)
            if op == "reduce_scatter":
                return functools.partial(_rs, b, a, dist.ReduceOp.SUM, g)
            return functools.partial(dist.broadcast, a, 0, g)
        if self.compress is not None:
            return functools.partial(pc.all_reduce, a, group=g, algo=self.algo, compress=self.compress)
        return op_caller(op, a, b, g, self.algo)

    def ran(self, op: str) -> Optional[str]:
        """The algorithm pycollect's engine ran for this rank's last `op` (its flight
        record: "auto" resolved, "shm" for the shared arena); None for a peer."""
        if self._torch or self._mpi is not None:
            return None
        calls = [e for e in pc.get_flight_record(self.group) if e["op"] == op]
        return calls[-1]["algo"] if calls else None

    def barrier(self) -> None:
        if self._mpi is not None:
            self._comm.Barrier()
        elif self._torch:
            dist.barrier(group=self.group)
        else:
            pc.barrier(group=self.group)


_ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def count_wrong(engine: Engine, op: str, count: int, rank: int, n: int, dtype: torch.dtype,
                device: str = "cpu") -> int:
    """Run one call on a known pattern (on `device`); return how many elements are wrong."""
    idx = torch.arange(count, dtype=torch.int64)
    if op == "all_reduce":
        a, b = ((idx % 7 + 1) * (rank + 1)).to(dtype), None
        expected = ((idx % 7 + 1) * (n * (n + 1) // 2)).to(dtype)
    elif op == "all_gather":
        per = count // n
        a = ((torch.arange(per) % 5) + rank + 1).to(dtype)
        b = torch.zeros(count, dtype=dtype)
        expected = ((idx % per if per else idx) % 5 + idx // max(per, 1) + 1).to(dtype)
    elif op == "reduce_scatter":
        per = count // n
        a = ((idx % 3 + 1) * (rank + 1)).to(dtype)
        b = torch.zeros(per, dtype=dtype)
        expected = ((idx[rank * per:(rank + 1) * per] % 3 + 1) * (n * (n + 1) // 2)).to(dtype)
    else:
        a = ((idx % 11) + 1).to(dtype) if rank == 0 else torch.zeros(count, dtype=dtype)
        b, expected = None, ((idx % 11) + 1).to(dtype)
    a, b = a.to(device), None if b is None else b.to(device)
    engine.call(op, a, b)
    got = a if b is None else b
    if engine.compress is not None:  # wrong: past the stated bound (k = n, at least the ring's length)
        exact = expected.to(torch.float64).numpy()
        err = (got.cpu().to(torch.float64).numpy() - exact).__abs__()
        return int((err > error_bound(exact, engine.compress, n, n) * (1 + 1e-3)).sum())
    return int((got.cpu() != expected).sum())


def _sync(device: str) -> None:
    """CUDA: a block's time includes the device work its calls queued."""
    if device != "cpu":
        torch.cuda.synchronize()


def run(op: str, sizes, dtype_name: str, iters: int, warmup: int, repeats: int,
        peers: Sequence[Engine], ours: Engine, rank: int, n: int, device: str = "cpu") -> Iterator[Dict]:
    """One row per size: every engine's median time, algbw, busbw and #wrong, and for each peer
    its ratio (its time / ours; row["ratio"]: the first peer's)."""
    dtype = getattr(torch, dtype_name)
    esize = DTYPE_BYTES[dtype_name]
    engines = [ours] + list(peers)
    for size in sizes:
        count = elements(op, size, n, esize)
        if count == 0:
            continue
        row = {"size": count * esize, "count": count, "type": dtype_name,
               "redop": "sum" if op in ("all_reduce", "reduce_scatter") else "none"}
        bufs = {e.name: buffers(op, count, n, dtype, device) for e in engines}
        calls = {e.name: e.caller(op, *bufs[e.name]) for e in engines}
        samples = {e.name: [] for e in engines}
        for e in engines:
            for _ in range(warmup):
                calls[e.name]()
        for rep in range(repeats):
            order = engines if rep % 2 == 0 else engines[::-1]
            for e in order:
                _sync(device)
                e.barrier()
                call = calls[e.name]
                t0 = time.perf_counter()
                for _ in range(iters):
                    call()
                _sync(device)
                samples[e.name].append((time.perf_counter() - t0) / iters)
        ran = {e.name: e.ran(op) for e in engines}  # before the calls below join the record
        for e in engines:
            t = max_over_ranks(statistics.median(samples[e.name]), ours.group)
            algbw = row["size"] / t / 1e9
            row[e.name] = {"time_us": t * 1e6, "algbw": algbw, "busbw": algbw * bus_factor(op, n),
                           "algo": ran[e.name],
                           "wrong": count_wrong(e, op, count, rank, n, dtype, device),
                           # the fastest block (slowest rank's): what a quiet machine does
                           "best_us": max_over_ranks(min(samples[e.name]), ours.group) * 1e6}
            wrong = torch.tensor([row[e.name]["wrong"]], dtype=torch.int64)
            pc.all_reduce(wrong, group=ours.group)
            row[e.name]["wrong"] = int(wrong[0])
        for p in peers:
            row[p.name]["ratio"] = row[p.name]["time_us"] / row[ours.name]["time_us"]
        if peers:
            row["ratio"] = row[peers[0].name]["ratio"]
        yield row
