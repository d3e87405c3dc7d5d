"""Measurements for the model (these start ranks and run the engine; imported on use).

    available(ops)     which algorithms the engine has: each tried once on a 1-rank group
    probe()            a quick measurement to fit from: a send/recv ping-pong (alpha, beta),
                       a reduce kernel timing (gamma) and a few small all-reduces (overhead)
    probe_links(rate)  the probe on two network-namespace hosts with `rate` cables, fitted
                       with a link's terms only: the parameters of those links, or a
                       ValueError naming the step (probe or fit) that failed
    validate(params)   the benchmark for each algorithm at 2, 3, 4 ranks; predicted vs measured
"""
from __future__ import annotations

import contextlib
import math
import statistics
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from ..tuning.choice import predict
from ..tuning.formulas import DEFAULT_SEGMENT_BYTES, FORMULAS, engine_name
from ..tuning.params import Params


def _try_algos(rank: int, n: int, emit, pairs) -> None:
    import torch

    from ..errors import InvalidArgumentError
    from ..measuring import buffers, run_op

    for op, algo in pairs:
        try:
            a, b = buffers(op, 4, 1, torch.float32)
            run_op(op, a, b, None, engine_name(algo))
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


def _rounds(size: int, iters: int) -> int:
    """Timed calls of `size` bytes for a median: 5 x `iters` up to 64 KiB (such a call's time
    is the machine's noise as much as the link's; the median of many holds still under load),
    `iters` up to 4 MiB, then fewer, as many as 4 MiB would take (at least 5: the noise of a
    call that long is a small part of it)."""
    if size <= 64 << 10:
        return 5 * iters
    return iters if size <= 4 << 20 else max(5, iters * (4 << 20) // size)


def _probe_job(rank: int, n: int, emit, sizes: Sequence[int], iters: int) -> None:
    import torch

    from .. import api as pc
    from ..launch import pin_to_core

    pin_to_core(rank)
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
        sec = _median_time(pingpong, _rounds(size, iters))
        if rank == 0:
            emit("sample", "ping_pong", "-", float(t.numel() * 4), 2, sec)
    for algo in ("direct", "ring"):
        for size in (8, 65536):
            t = torch.zeros(max(1, size // 4))
            pc.all_reduce(t, algo=algo)
            pc.barrier()
            sec = _median_time(lambda: pc.all_reduce(t, algo=algo), _rounds(size, iters))
            if rank == 0:
                emit("sample", "all_reduce", algo, float(t.numel() * 4), n, sec)
    if rank == 0:  # gamma: one reduction pass over 16 MiB (torch's add stands in for the engine's kernel)
        a, b = torch.ones(4 << 20), torch.ones(4 << 20)
        torch.add(a, b, out=a)
        emit("gamma", _median_time(lambda: torch.add(a, b, out=a), 9) / (16 << 20))


@contextlib.contextmanager
def _placement(world_size: int, line_rate: Optional[str]):
    """run_ranks' keywords for where `world_size` ranks run: with `line_rate` (tc syntax,
    e.g. "1gbit") one per network-namespace host whose cable carries that rate each way
    (netns.Hosts, deleted on exit), else on loopback."""
    if not line_rate:
        yield {}
        return
    from .. import netns

    with netns.Hosts(world_size, line_rate) as hosts:
        yield hosts.placement(world_size)


# The probe's sizes: a ping-pong at each (alpha from the first, beta from the others).
_PROBE_SIZES = (8, 1 << 20, 4 << 20)
# A link's (probe_links, probe_inter_host): up to 16 MiB too. A link's first bytes may pass
# faster than its rate (tc tbf's burst, 128 KiB at 1 Gbit/s, refills while a ping-pong
# waits for the answer): a 1 MiB round trip on a 0.125 GB/s cable ran at 0.131, 4 MiB at
# 0.122, and the 7-point fit put beta between. At 16 MiB the burst is under 1 %, and beta
# is pinned by three sizes the small calls' time does not reach.
_LINK_PROBE_SIZES = (8, 1 << 20, 4 << 20, 16 << 20)
# A fit of a link's terms only (what Params.for_cluster keeps): no core sharing, caches or
# shared-memory reads, which a TCP link between hosts does not have; overlap is tried.
_LINK_TERMS = dict(cores=None, cache_sizes=(None,), mem_sharing=(False,), single_copy=(None,), crowded=False)
# A link fit solves alpha, beta and overhead (gamma is timed): at least one sample more.
_LINK_MIN_SAMPLES = 4


class _ProbeRecord:
    """What _probe_job emits, kept: `samples` for the fit, `gamma` (seconds per byte reduced)."""

    def __init__(self):
        self.samples: List[tuple] = []
        self.gamma: List[float] = []

    def emit(self, kind: str, *values) -> None:
        if kind == "sample":
            self.samples.append(tuple(values) + (DEFAULT_SEGMENT_BYTES,))
        else:
            self.gamma.append(values[0])


def _probe_samples(iters: int, line_rate: Optional[str] = None) -> Tuple[List[tuple], List[float]]:
    """The probe's measurement (_probe_job at 2 ranks; on `line_rate` hosts when given, at a
    link's sizes): (samples, [gamma: seconds per byte reduced])."""
    from ..launch import run_ranks

    record = _ProbeRecord()
    with _placement(2, line_rate) as where:
        run_ranks(_probe_job, 2, ("pycollect",), job_args=(_LINK_PROBE_SIZES if line_rate else _PROBE_SIZES, iters),
                  timeout=300,
                  on_event=lambda _rank, ev: record.emit(*ev), **where)
    return record.samples, record.gamma


def probe(iters: int = 50, cores: Optional[int] = None) -> Tuple[Params, float, List[tuple]]:
    """A quick fit (seconds, at 2 ranks): (params, rms relative error, samples)."""
    import os

    from .fit import fit

    samples, gamma = _probe_samples(iters)
    params, err = fit(samples, cores=cores if cores is not None else os.cpu_count(), fixed={"gamma": gamma[0]})
    return params.with_(source="probe"), err, samples


def probe_links(line_rate: str, iters: int = 20) -> Tuple[Params, float, List[tuple]]:
    """The parameters of network-namespace links with `line_rate` cables, for validating
    on them (not loopback's): the probe (_probe_job) run on two such hosts, then fitted
    with a link's terms only (_LINK_TERMS). (params, rms relative error, samples). A step
    that fails raises ValueError naming it, so that no caller goes on with other
    parameters: step 1, the probe (the hosts cannot be built, a rank failed); step 2, the
    fit (fewer than _LINK_MIN_SAMPLES usable samples, no reduction timing, or the fit
    itself refused them). `iters` is smaller than probe()'s: the link is steady, and a
    4 MiB round trip takes 67 ms at 1 Gbit/s (16 MiB: 5 rounds of 270 ms, _rounds)."""
    from .. import netns

    where = f"2 namespace hosts with {line_rate} cables"
    try:
        why = netns.unavailable()
        if why:
            raise RuntimeError(f"namespace hosts cannot be built here: {why}")
        samples, gamma = _probe_samples(iters, line_rate)
    except (RuntimeError, OSError, ValueError) as e:  # OSError: TimeoutError too
        raise ValueError(f"fitting the links: step 1 of 2, the probe on {where}, failed: {e}") from e
    return _fit_link(samples, gamma, where)


def _fit_link(samples: List[tuple], gamma: List[float], where: str) -> Tuple[Params, float, List[tuple]]:
    """Step 2 of a link's fit: a link's terms only (_LINK_TERMS) to the probe's samples,
    gamma timed. (params, rms relative error, the samples used); ValueError naming the step."""
    from .fit import fit

    usable = [s for s in samples if math.isfinite(s[4]) and s[4] > 0]
    step = "fitting the links: step 2 of 2, the fit of the probe's samples, failed"
    if len(usable) < _LINK_MIN_SAMPLES or not gamma:
        raise ValueError(f"{step}: {len(usable)} usable samples of {len(samples)} (need {_LINK_MIN_SAMPLES}) and "
                         f"{len(gamma)} reduction timing(s) (need 1)")
    try:
        params, err = fit(usable, fixed={"gamma": gamma[0]}, **_LINK_TERMS)
    except ValueError as e:
        raise ValueError(f"{step}: {e}") from e
    return params.with_(source=f"fitted on {where}"), err, usable


def probe_inter_host(iters: int = 20) -> Optional[Tuple[Params, float, List[tuple]]]:
    """The links between two real hosts, measured from inside a job of two ranks, one on
    each (torchrun --nnodes 2 --nproc-per-node 1; the default group is joined here unless
    it was): the probe (_probe_job) in this process, then the link fit. Rank 0 gets
    (params, rms relative error, samples), rank 1 None. Raises ValueError naming the step
    that failed: step 1, the probe (not two ranks on two hosts, a rank failed); step 2, the
    fit."""
    from .. import api as pc

    step = "fitting the links between hosts: step 1 of 2, the probe"
    try:
        if not pc.is_initialized():
            pc.init_process_group()
        topo = pc.get_topology()
    except Exception as e:  # noqa: BLE001 - any failure to join is this step's
        raise ValueError(f"{step}, failed: could not join the job's group ({type(e).__name__}: {e}); run it "
                         "under torchrun --nnodes 2 --nproc-per-node 1") from e
    if pc.get_world_size() != 2 or len(topo.hosts) != 2:
        raise ValueError(f"{step}, needs two ranks on two hosts (torchrun --nnodes 2 --nproc-per-node 1); this job "
                         f"is {topo}")
    record = _ProbeRecord()
    rank = pc.get_rank()
    try:
        _probe_job(rank, 2, record.emit, _LINK_PROBE_SIZES, iters)
    except pc.PyCollectError as e:
        raise ValueError(f"{step}, failed: {type(e).__name__}: {e}") from e
    if rank != 0:
        return None
    return _fit_link(record.samples, record.gamma, "the link between two hosts (ranks 0 and 1 of a torchrun job)")


@dataclass
class Row:
    op: str
    algo: str
    world_size: int
    nbytes: int
    measured_s: float   # the fastest block's time per call
    predicted_s: float
    median_s: float = float("nan")  # the median block's: how far the machine's noise reaches
    # The second-fastest launch's fastest block over the fastest launch's, - 1: how closely
    # another launch reproduced `measured_s` (nan with one launch). Where it exceeds the
    # model's target, the measured figure itself is that uncertain.
    second_launch: float = float("nan")

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1


def _algos_job(rank: int, n: int, emit, op: str, algos: Sequence[str], sizes: Sequence[int],
               block_s: float, repeats: int, warmup: int) -> None:
    """Every algorithm of `op` at each size, in interleaved blocks (one rank set, so the
    algorithms are compared on the same machine state): per size, `warmup` calls of each,
    then `repeats` rounds in which each algorithm runs one block (the order rotates from
    round to round). A block has as many calls as fill `block_s` (from the slowest rank's
    time of one call, so every rank agrees on it); its time / calls is one sample."""
    import torch

    from .. import api as pc
    from ..measuring import buffers, elements, max_over_ranks, run_op
    from ..launch import pin_to_core

    pin_to_core(rank)
    # Every timed call names its algorithm: on one host "auto" would take the shared arena.
    picks = [engine_name(a) for a in algos]  # each run's algo=
    for size in sizes:
        count = elements(op, size, n, 4)
        if count == 0:
            continue
        a, b = buffers(op, count, n, torch.float32)
        iters = []
        for pick in picks:
            for _ in range(warmup):
                run_op(op, a, b, None, pick)
            pc.barrier()
            t0 = time.perf_counter()
            run_op(op, a, b, None, pick)
            one = max_over_ranks(time.perf_counter() - t0, None)
            iters.append(max(1, min(200, math.ceil(block_s / max(one, 1e-7)))))
        samples: List[List[float]] = [[] for _ in picks]
        for rep in range(repeats):
            for j in range(len(picks)):
                i = (j + rep) % len(picks)
                pc.barrier()
                t0 = time.perf_counter()
                for _ in range(iters[i]):
                    run_op(op, a, b, None, picks[i])
                samples[i].append((time.perf_counter() - t0) / iters[i])
        for i, algo in enumerate(algos):
            best = max_over_ranks(min(samples[i]), None)
            median = max_over_ranks(statistics.median(samples[i]), None)
            if rank == 0:
                emit("measured", algo, count * 4, best, median, iters[i])


def measure_algos(op: str, algos: Sequence[str], world_size: int, sizes: Sequence[int], block_s: float = 0.01,
                  repeats: int = 7, warmup: int = 2, line_rate: Optional[str] = None
                  ) -> Dict[str, List[Tuple[int, float, float]]]:
    """{algo: [(bytes, best seconds, median seconds)]}: each algorithm of `op` at each size,
    measured in interleaved blocks by one set of ranks (`_algos_job`); seconds per call,
    the slowest rank's. Best is the fastest block: the model predicts what the machine
    does, and on a machine that other work shares the slow blocks measure that work.
    `line_rate` (tc syntax, e.g. "1gbit"): one rank per network-namespace host, whose
    cables carry that rate each way (a steady link); else loopback."""
    from ..launch import run_ranks

    out: Dict[str, List[Tuple[int, float, float]]] = {a: [] for a in algos}

    def on_event(rank, ev):
        if ev[0] == "measured":
            out[ev[1]].append((ev[2], ev[3], ev[4]))

    with _placement(world_size, line_rate) as where:
        run_ranks(_algos_job, world_size, ("pycollect",),
                  job_args=(op, list(algos), list(sizes), block_s, repeats, warmup), timeout=1800,
                  on_event=on_event, **where)
    return out


def _keep_fastest(best: Dict[Tuple[str, int], Tuple[float, float, float]],
                  got: Dict[str, List[Tuple[int, float, float]]]) -> None:
    """Fold one launch's {algo: [(bytes, best, median)]} into `best`: per point the fastest
    best and median, and the second-fastest launch's best (inf until a second launch)."""
    for a, rows in got.items():
        for nb, fast, median in rows:
            old = best.get((a, nb))
            if old is None:
                best[(a, nb)] = (fast, median, float("inf"))
            else:
                best[(a, nb)] = (min(old[0], fast), min(old[1], median), sorted((old[0], old[2], fast))[1])


def validate(params: Params, cases: Sequence[Tuple[str, str]], world_sizes: Sequence[int], sizes: Sequence[int],
             block_s: float = 0.01, repeats: int = 7, on_row=None, line_rate: Optional[str] = None,
             launches: int = 1, on_launch=None) -> List[Row]:
    """Predicted vs measured for each (op, algo) in `cases` at each world size (on
    network-namespace hosts with `line_rate` cables when given, else on loopback). The
    algorithms of one op are measured together, interleaved (measure_algos), by one set of
    ranks per op and world size; the whole grid is measured `launches` times, in rounds,
    and each point keeps its fastest. Rounds, not launches back to back: on a shared
    virtual machine the speed drifts over tens of seconds (a whole set of processes can
    run 2x slower than the next, for a minute), so the launches of one point are spread
    over the whole measurement. Two measurements of 5 back-to-back launches agreed within
    25 % at 130-141 of 144 points; the fastest of the two, pairwise, at 143-144. Each row
    also says how closely another launch reproduced its figure (Row.second_launch).
    on_row(row, failure) as each point's last launch ends; on_launch(round, rounds, op, p)
    before each launch (progress)."""
    groups = [(op, p) for op in dict.fromkeys(op for op, _ in cases) for p in world_sizes]
    best: Dict[Tuple[str, int], Dict[Tuple[str, int], Tuple[float, float, float]]] = {g: {} for g in groups}
    failed: Dict[Tuple[str, int], set] = {g: set() for g in groups}  # sizes that failed: not retried
    rows = []
    for launch in range(launches):
        for op, p in groups:
            algos = [a for o, a in cases if o == op]
            todo = [s for s in sizes if s not in failed[(op, p)]]
            kw = dict(block_s=block_s, repeats=repeats, line_rate=line_rate)
            if on_launch:
                on_launch(launch, launches, op, p)
            try:
                _keep_fastest(best[(op, p)], measure_algos(op, algos, p, todo, **kw) if todo else {})
            except RuntimeError:  # size by size, so that one size's failure costs only its rows
                for size in todo:
                    try:
                        _keep_fastest(best[(op, p)], measure_algos(op, algos, p, [size], **kw))
                    except RuntimeError as e:  # a point that fails once is reported failed, not measured
                        failed[(op, p)].add(size)
                        for a in algos:
                            best[(op, p)].pop((a, size), None)
                        for a in algos:
                            if on_row:
                                on_row(Row(op, a, p, size, float("nan"), float("nan")),
                                       failure=str(e).strip().splitlines()[-1])
            if launch < launches - 1:
                continue
            order = {a: i for i, a in enumerate(algos)}
            for (a, nbytes), (fast, median, second) in sorted(best[(op, p)].items(),
                                                              key=lambda kv: (order[kv[0][0]], kv[0][1])):
                again = second / fast - 1 if second < float("inf") else float("nan")
                row = Row(op, a, p, nbytes, fast, predict(op, nbytes, p, a, params), median, again)
                rows.append(row)
                if on_row:
                    on_row(row, failure=None)
    return rows
