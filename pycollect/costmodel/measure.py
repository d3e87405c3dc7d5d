"""Measurements for the model (these start ranks and run the engine; imported on use).

    available(ops)     which algorithms the engine has: each tried once on a 1-rank group
    probe()            a quick measurement to fit from: a send/recv ping-pong (alpha, beta),
                       a reduce kernel timing (gamma) and a few small all-reduces (overhead)
    validate(params)   the benchmark for each algorithm at 2, 3, 4 ranks; predicted vs measured
"""
from __future__ import annotations

import io
import statistics
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from .choice import predict
from .formulas import DEFAULT_SEGMENT_BYTES, FORMULAS
from .params import Params

# The engine's default algorithm for ops that take no algo= (their only one).
_IMPLICIT = {"all_gather": "ring", "reduce_scatter": "ring", "broadcast": "chain"}


def _try_algos(rank: int, n: int, emit, pairs) -> None:
    import torch

    from .. import api as pc
    from ..errors import InvalidArgumentError

    for op, algo in pairs:
        try:
            t = torch.ones(4)
            if op == "all_reduce":
                pc.all_reduce(t, algo=algo)
            elif op == "all_gather":
                pc.all_gather_into_tensor(torch.empty(4), t, **({} if algo == _IMPLICIT[op] else {"algo": algo}))
            elif algo != _IMPLICIT.get(op):
                raise NotImplementedError(f"{op} takes no algo=")
            emit("algo", op, algo, None)
        except (TypeError, ValueError, NotImplementedError, InvalidArgumentError) as e:
            emit("algo", op, algo, f"{type(e).__name__}: {e}")


def available(ops: Sequence[str] = tuple(FORMULAS)) -> Dict[Tuple[str, str], Optional[str]]:
    """{(op, algo): None if the engine runs it, else the engine's refusal}."""
    from ..launch import run_ranks

    pairs = [(op, a) for op in ops for a in FORMULAS[op]]
    out: Dict[Tuple[str, str], Optional[str]] = {}
    run_ranks(_try_algos, 1, ("pycollect",), job_args=(pairs,), timeout=120,
              on_event=lambda rank, ev: out.__setitem__((ev[1], ev[2]), ev[3]))
    return out


def _median_time(fn, iters: int) -> float:
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _probe_job(rank: int, n: int, emit, sizes: Sequence[int], iters: int) -> None:
    import torch

    from .. import api as pc

    for size in sizes:  # ping-pong between ranks 0 and 1
        t = torch.zeros(max(1, size // 4))

        def pingpong():
            if rank == 0:
                pc.send(t, dst=1)
                pc.recv(t, src=1)
            else:
                pc.recv(t, src=0)
                pc.send(t, dst=0)
        pingpong()
        pc.barrier()
        sec = _median_time(pingpong, iters)
        if rank == 0:
            emit("sample", "ping_pong", "-", float(t.numel() * 4), 2, sec)
    for algo in ("direct", "ring"):
        for size in (8, 65536):
            t = torch.zeros(max(1, size // 4))
            pc.all_reduce(t, algo=algo)
            pc.barrier()
            sec = _median_time(lambda: pc.all_reduce(t, algo=algo), iters)
            if rank == 0:
                emit("sample", "all_reduce", algo, float(t.numel() * 4), n, sec)
    if rank == 0:  # gamma: one reduction pass over 16 MiB (torch's add stands in for the engine's kernel)
        a, b = torch.ones(4 << 20), torch.ones(4 << 20)
        torch.add(a, b, out=a)
        emit("gamma", _median_time(lambda: torch.add(a, b, out=a), 9) / (16 << 20))


def probe(iters: int = 50, cores: Optional[int] = None) -> Tuple[Params, float, List[tuple]]:
    """A quick fit (seconds, at 2 ranks): (params, rms relative error, samples)."""
    import os

    from ..launch import run_ranks
    from .fit import fit

    samples: List[tuple] = []
    gamma: List[float] = []

    def on_event(rank, ev):
        if ev[0] == "sample":
            samples.append(tuple(ev[1:]) + (DEFAULT_SEGMENT_BYTES,))
        else:
            gamma.append(ev[1])

    run_ranks(_probe_job, 2, ("pycollect",), job_args=((8, 1 << 20, 4 << 20), iters), timeout=300,
              on_event=on_event)
    params, err = fit(samples, cores=cores if cores is not None else os.cpu_count(), fixed={"gamma": gamma[0]})
    return params.with_(source="probe"), err, samples


@dataclass
class Row:
    op: str
    algo: str
    world_size: int
    nbytes: int
    measured_s: float
    predicted_s: float

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1


def measure(op: str, algo: str, world_size: int, sizes: Sequence[int], iters: int, repeats: int,
            warmup: int = 1, line_rate: Optional[str] = None) -> List[Tuple[int, float]]:
    """[(bytes, seconds)] from the benchmark (pycollect only, no peer, no link limit): the
    fastest of `repeats` blocks of `iters` calls, the slowest rank's. The fastest, not the
    median: the model predicts the machine's cost, and on a machine that other work
    shares the slow blocks measure that work. `line_rate` (tc syntax, e.g. "1gbit"): one
    rank per network-namespace host, whose cables carry that rate each way (a steady link)."""
    from ..benchmark.launch import Config, run

    # All-reduce: the group's algorithm (PYCOLLECT_ALGO, as `bench --algo`), so the benchmark's own
    # small all-reduces use it too.
    env = {"PYCOLLECT_ALGO": algo} if op == "all_reduce" else {}
    cfg = Config(op=op, world_size=world_size, sizes=list(sizes), iters=iters, warmup=warmup, repeats=repeats,
                 peer=None, link_limit=False, env=env,
                 algo=None if op == "all_reduce" or _IMPLICIT.get(op) == algo else algo,
                 netns_hosts=line_rate is not None, line_rate=line_rate or "1gbit")
    result = run(cfg, stream=io.StringIO(), timeout=1800)
    return [(r["size"], r["pycollect"]["best_us"] * 1e-6) for r in result["rows"]]


def validate(params: Params, cases: Sequence[Tuple[str, str]], world_sizes: Sequence[int], sizes: Sequence[int],
             iters: int, repeats: int, on_row=None, line_rate: Optional[str] = None) -> List[Row]:
    """Predicted vs measured for each (op, algo) in `cases` at each world size (on
    network-namespace hosts with `line_rate` cables when given, else on loopback)."""
    rows = []
    for op, algo in cases:
        for p in world_sizes:
            try:
                measured = measure(op, algo, p, sizes, iters, repeats, line_rate=line_rate)
            except RuntimeError:  # size by size, so that one size's failure costs only its row
                measured = []
                for size in sizes:
                    try:
                        measured += measure(op, algo, p, [size], iters, repeats, line_rate=line_rate)
                    except RuntimeError as e:
                        if on_row:
                            on_row(Row(op, algo, p, size, float("nan"), float("nan")),
                                   failure=str(e).strip().splitlines()[-1])
            for nbytes, sec in measured:
                row = Row(op, algo, p, nbytes, sec, predict(op, nbytes, p, algo, params))
                rows.append(row)
                if on_row:
                    on_row(row, failure=None)
    return rows
