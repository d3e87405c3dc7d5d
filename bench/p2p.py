"""Point-to-point and pipelines, in one table (issue 33's targets; docs/measurements.md).

On 2 local ranks, each figure the median of single calls (p99 beside it), the peer in the
same run:

1. 8-byte ping-pong (a send and the reply) on shared memory and on TCP: pycollect's API,
   pycollect through torch.distributed (a "pycollect" group), Gloo; and the wire's own
   limit, loopback TCP with a busy-polling receive (pycollect._C.tcp_round_trip_us).
2. Each call through torch against the same call on pycollect's API and on the null
   backend (bench/null_backend.py: a C++ backend that moves nothing, torch's own dispatch),
   8 bytes a rank, an async all-reduce and an isend/irecv round trip (each waited on at
   once) among them; targets: through torch at most API + null + 1 us, a ping-pong at most
   1.5x the API.
3. torch.distributed.pipelining: 2 stages (an 8-layer MLP cut in half, 256 and 64 wide:
   the narrower, the larger the communication's share of a step), Schedule1F1B,
   8 micro-batches of 16 rows, step time with "pycollect" and with "gloo" as the default
   group's backend (target: at most 0.7x), and whether the losses are equal.
4. pycollect's own pipeline (pycollect.pp), 1F1B at 2 stages: the measured idle fraction
   against the textbook (p-1)/(m+p-1) for m = 4 and 8 (target: within 0.05).

    .venv/bin/python bench/p2p.py [--iters 2000] [--steps 20]
"""
import argparse
import os
import statistics
import sys
import time

import null_backend

from pycollect._C import ANY_SOURCE as _ANY_SOURCE

OPS = ("ping_pong", "ping_pong_any", "all_reduce", "broadcast", "barrier", "reduce", "all_gather", "reduce_scatter",
       "all_gather_list", "reduce_scatter_list", "gather", "scatter", "all_to_all", "all_reduce_async", "isend_irecv")
# Calls whose Work the caller waits on: the hand-off to the engine's thread is most of them, and
# the stubbed API (python_share) has no engine thread to hand to.
ASYNC_OPS = ("all_reduce_async", "isend_irecv")
# The engine's own C++ loop (pycollect.benchmark.engine) for each blocking call, at its sizes in
# the benchmark's convention (2 ranks, 2 floats a rank): the part of a call through torch that
# the engine itself takes. The list forms are timed by their flat call's loop and the
# any-source ping-pong by the named one (the loop has neither).
ENGINE_LOOPS = {"ping_pong": ("ping_pong", 8), "ping_pong_any": ("ping_pong", 8), "all_reduce": ("all_reduce", 8),
                "broadcast": ("broadcast", 8), "barrier": ("barrier", 8), "reduce": ("reduce", 8),
                "all_gather": ("all_gather", 16), "reduce_scatter": ("reduce_scatter", 8),
                "all_gather_list": ("all_gather", 16), "reduce_scatter_list": ("reduce_scatter", 16),
                "gather": ("gather", 16), "scatter": ("scatter", 16), "all_to_all": ("all_to_all", 16)}


def _median_p99(xs):
    xs = sorted(xs)
    return statistics.median(xs) * 1e6, xs[min(len(xs) - 1, int(len(xs) * 0.99))] * 1e6


def _caller(api, rank, op, group):
    """One call of `op` with pycollect.api's or torch.distributed's names (the same for both)."""
    import torch

    t = torch.ones(2)
    out2 = torch.empty(4)
    parts = [torch.empty(2), torch.empty(2)]
    # Views and inputs made once: a slice or a clone per call would be timed as the call's.
    rs_out, rs_in, a2a_in, part_out = t[:1], out2[:2], torch.ones(4), torch.empty(2)
    if op == "ping_pong":
        def call():
            if rank == 0:
                api.send(t, 1, group=group)
                api.recv(t, 1, group=group)
            else:
                api.recv(t, 0, group=group)
                api.send(t, 0, group=group)
    elif op == "ping_pong_any":  # the replies received from any source (recv src=None)
        def call():
            if rank == 0:
                api.send(t, 1, group=group)
                api.recv(t, None, group=group)
            else:
                api.recv(t, None, group=group)
                api.send(t, 0, group=group)
    elif op == "all_reduce":
        def call():
            api.all_reduce(t, group=group)
    elif op == "broadcast":
        def call():
            api.broadcast(t, 0, group=group)
    elif op == "barrier":
        def call():
            api.barrier(group=group)
    elif op == "reduce":
        def call():
            api.reduce(t, 0, group=group)
    elif op == "all_gather":
        all_gather = getattr(api, "all_gather_single", None) or api.all_gather_into_tensor  # torch 2.13: the old names warn on every call

        def call():
            all_gather(out2, t, group=group)
    elif op == "reduce_scatter":
        reduce_scatter = getattr(api, "reduce_scatter_single", None) or api.reduce_scatter_tensor

        def call():
            reduce_scatter(rs_out, rs_in, group=group)
    elif op == "all_gather_list":  # torch's list forms: a tensor per rank
        def call():
            api.all_gather(parts, t, group=group)
    elif op == "reduce_scatter_list":
        def call():
            api.reduce_scatter(part_out, parts, group=group)
    elif op == "gather":
        def call():
            api.gather(t, parts if rank == 0 else None, 0, group=group)
    elif op == "scatter":
        def call():
            api.scatter(t, parts if rank == 0 else None, 0, group=group)
    elif op == "all_reduce_async":
        def call():
            api.all_reduce(t, group=group, async_op=True).wait()
    elif op == "isend_irecv":  # a round trip of isend and irecv, each waited on at once
        def call():
            if rank == 0:
                api.isend(t, 1, group=group).wait()
                api.irecv(t, 1, group=group).wait()
            else:
                api.irecv(t, 0, group=group).wait()
                api.isend(t, 0, group=group).wait()
    else:
        def call():
            api.all_to_all_single(out2, a2a_in, group=group)
    return call


class _StubWork:
    """An engine call that completed, without error, as it was issued (a receive's: from
    rank 0, with nothing in it)."""
    __slots__ = ()
    source = 0
    bytes = 0

    def is_completed(self) -> bool:
        return True

    def failed(self) -> bool:
        return False


_STUB_WORK = _StubWork()


class _StubEngine:
    """Stands in for a group's C++ communicator on the API's path: every call completes as it
    is issued and touches nothing, so what an API call costs then is its Python alone. (The
    torch backend holds the C++ communicator itself: no Python stands between torch and the
    engine there, and nothing to stub.) The rest of the communicator is the real one's."""

    def __init__(self, real):
        self._real = real

    def wait_driving(self, *_args) -> bool:
        return True

    def __getattr__(self, name):
        return getattr(self._real, name)


def _stub_call(_self, *args):
    """A call done as issued: a blocking one (its last argument) comes back as None, as the
    engine's does (pycollect._C's unlessSettled)."""
    return None if args[-1] is True else _STUB_WORK


def _stub_recv(_self, *args):
    """As _stub_call; a receive from any source keeps its Work (it names the sender)."""
    return _STUB_WORK if args[3] == _ANY_SOURCE else _stub_call(_self, *args)


for _name in ("send", "all_reduce", "broadcast", "barrier", "reduce", "all_gather",
              "reduce_scatter", "gather", "scatter", "all_to_all"):
    setattr(_StubEngine, _name, _stub_call)
_StubEngine.recv = _stub_recv


class _StubFront:
    """Stands in for the API's fast calls (pycollect.api._fast, which the public functions hand
    their arguments first): each takes them and is done, as a small blocking call that ran to
    its end on the caller's thread is."""


def _stub_fast_call(*_args):
    return None


for _name in ("all_reduce", "broadcast", "barrier", "reduce", "all_gather", "reduce_scatter", "all_gather_list",
              "reduce_scatter_list", "all_reduce_coalesced", "all_gather_coalesced", "gather", "scatter", "all_to_all",
              "all_to_all_single", "send", "recv"):
    setattr(_StubFront, _name, staticmethod(_stub_fast_call))


def _time_calls(call, iters: int) -> float:
    """Median microseconds of `iters` single calls, after a warm-up."""
    for _ in range(50):
        call()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def python_share(rank, ops, engines, stubbed, iters):
    """Rank 0's API calls with the engine of every group in `stubbed` replaced by _StubEngine:
    each op's cost on the API when the engine costs nothing (the API's Python)."""
    if rank != 0:
        return {}
    api = engines["api"][0]
    real, front = [g._comm for g in stubbed], api._fast
    # The public functions with a fast call are C entries bound to the real front: made
    # again on the stand-in, under every name they have (all_gather_single too).
    entries = {name: getattr(api, name) for name in api._FAST_CALLS}
    stand_ins = api._fast_entries(_StubFront(), {name: e.__wrapped__ for name, e in entries.items()})
    ids = {id(e) for e in entries.values()}
    saved = {attr: value for attr, value in vars(api).items() if id(value) in ids}
    for g in stubbed:
        g._comm = _StubEngine(g._comm)
    api._fast = _StubFront()
    vars(api).update({attr: stand_ins[value.__name__] for attr, value in saved.items()})
    try:
        return {op: {"api": _time_calls(_caller(api, 0, op, engines["api"][1]), iters)} for op in ops
                if op not in ASYNC_OPS}
    finally:
        api._fast = front
        vars(api).update(saved)
        for g, comm in zip(stubbed, real):
            g._comm = comm


def latency_job(rank, world, emit, ops, iters):
    import torch.distributed as dist

    import pycollect as pc
    import pycollect.api as api
    import pycollect.torch_backend as tb
    from pycollect import _C
    from pycollect.benchmark.engine import engine_loop
    from pycollect.launch import pin_to_core

    # Each rank on a core of its own (as pycollect bench's MPI ranks and the cost model's
    # are). Three runs each way with Gloo's blocks in the rotation (2026-12-07, 01:48-01:50;
    # four calls through torch a run, 8 blocks of medians): unpinned, 10 of 12 calls came out
    # 1.3-2x above the quick runs' figures, the null backend's often too; pinned, 2 of 12.
    cores = os.sched_getaffinity(0)
    pin_to_core(rank)
    null_backend.register()
    pg = dist.new_group(backend="pycollect")
    gloo = dist.new_group(backend="gloo")
    null = dist.new_group(backend=null_backend.NAME)
    engines = {"api": (api, None), "torch": (dist, pg), "gloo": (dist, gloo), "null": (dist, null)}
    out = {}
    for op in ops:
        calls = {name: _caller(mod, rank, op, grp) for name, (mod, grp) in engines.items()}
        times = {name: [] for name in calls}
        for block in range(4):  # alternating blocks, each engine warm
            for name, call in calls.items():
                for _ in range(50):
                    call()
                pc.barrier()
                for _ in range(iters // 4):
                    t0 = time.perf_counter()
                    call()
                    times[name].append(time.perf_counter() - t0)
        out[op] = {name: _median_p99(v) for name, v in times.items()}
    out["engine"] = {op: statistics.median(engine_loop(*ENGINE_LOOPS[op], iters)[0]) for op in ops
                     if op in ENGINE_LOOPS}
    out["stubbed"] = python_share(rank, ops, engines, [api._default()], iters)
    out["engine_calls"] = sum(tb.engine_group(pg).counters().values())  # the torch calls ran on the engine
    pc.barrier()
    # Unpinned again: the wire's busy-polling echo runs two threads, which one core would
    # take turns at a time slice a round trip (2000 of them took 15 s).
    os.sched_setaffinity(0, cores)
    out["wire_us"] = _C.tcp_round_trip_us(2000, True) if rank == 0 else None
    out["links"] = sorted(set(pc.get_transport_info().values()))
    for group in (pg, gloo, null):
        dist.destroy_process_group(group)
    return out


def pipelining_job(rank, world, emit, backend, steps, port, hidden=256, rows=16, micro=8):
    """torch.distributed.pipelining with `backend` as the default group's."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    import pycollect  # noqa: F401 - registers the "pycollect" backend

    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(hidden, hidden), nn.ReLU())])
    half = len(model) // 2
    part = model[:half] if rank == 0 else model[half:]
    stage = PipelineStage(part, rank, world, torch.device("cpu"), input_args=(torch.randn(rows, hidden),))
    schedule = Schedule1F1B(stage, micro, loss_fn=lambda out, y: ((out - y) ** 2).mean())
    opt = torch.optim.SGD(part.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(rows * micro, hidden, generator=g), torch.randn(rows * micro, hidden, generator=g)
    times, losses = [], []
    for _ in range(steps):
        opt.zero_grad()
        t0 = time.perf_counter()
        if rank == 0:
            schedule.step(x)
        else:
            got: list = []
            schedule.step(target=y, losses=got)
            losses.append(float(sum(v.item() for v in got)))
        times.append(time.perf_counter() - t0)
        opt.step()
    dist.barrier()
    dist.destroy_process_group()
    return statistics.median(times[2:]), losses


def bubble_job(rank, world, emit, micro, steps):
    import torch
    from torch import nn

    from pycollect.pp import train_steps

    torch.manual_seed(0)
    layers = [m for _ in range(8) for m in (nn.Linear(512, 512), nn.ReLU())]
    g = torch.Generator().manual_seed(2)
    batches = [(torch.randn(64 * micro, 512, generator=g), torch.randn(64 * micro, 512, generator=g))
               for _ in range(steps)]
    out = train_steps(layers, batches, lambda o, t: ((o - t) ** 2).mean(), micro_batches=micro, schedule="1f1b",
                      optimizer="sgd", warmup_steps=2)
    b = out["bubble"]
    return b.mean_measured, b.textbook, b.measured


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=2000, help="timed calls per engine and op")
    ap.add_argument("--steps", type=int, default=20, help="pipeline steps per run (the first two are not timed)")
    args = ap.parse_args()
    if args.iters < 1 or args.steps < 3:
        ap.error(f"--iters must be >= 1 and --steps >= 3 (two warm-up steps and one timed), got {args.iters} "
                 f"and {args.steps}")
    from pycollect.launch import free_port, run_ranks

    print(f"# bench/p2p.py: 2 local ranks, load {os.getloadavg()[0]:.1f}; medians (p99) in microseconds")
    rows = []
    for transport in ("shm", "tcp"):
        res = run_ranks(latency_job, 2, ["pycollect", "gloo"], job_args=(OPS if transport == "shm" else ("ping_pong",),
                                                                         args.iters), timeout=900,
                        env={"PYCOLLECT_TRANSPORT": transport})[0]
        rows.append((transport, res))
    wire = rows[1][1]["wire_us"]
    print("\n## 8-byte ping-pong (a round trip)")
    print("| links | pycollect API | through torch | Gloo | target |")
    print("|---|---|---|---|---|")
    for transport, res in rows:
        pp = res["ping_pong"]
        target = "<= 15 us, p99 <= 5x" if transport == "shm" else f"<= 1.5x wire ({wire:.1f} us busy-poll TCP)"
        print(f"| {transport} ({','.join(res['links'])}) | {pp['api'][0]:.1f} ({pp['api'][1]:.0f}) | "
              f"{pp['torch'][0]:.1f} ({pp['torch'][1]:.0f}) | {pp['gloo'][0]:.1f} ({pp['gloo'][1]:.0f}) | {target} |")
    print("\n## Through torch against pycollect's API (shared memory, 8 bytes a rank)")
    print("null: the same call through torch on a C++ backend that does nothing (bench/null_backend.py),")
    print("torch's own dispatch. The backend's own cost is through torch - null; the API's engine part is")
    print("API - API stubbed (rank 0, the engine replaced by a stub that completes every call as issued).")
    print("engine: the same call in the engine's C++ loop (the list forms: their flat call; any-source:")
    print("the named ping-pong); torch - null - engine is the backend's glue plus the wait for the slower")
    print("rank, which grows with torch's own time per call (the null backend waits for nobody).")
    print("| op | API | API's Python | through torch | null | torch - null | engine | torch - null - engine | "
          "target: API + null + 1 | met | Gloo |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for op in OPS:
        r, st, eng = rows[0][1][op], rows[0][1]["stubbed"].get(op), rows[0][1]["engine"].get(op)
        bound = r["api"][0] + r["null"][0] + 1.0
        python = "-" if st is None else f"{st['api']:.1f}"
        over = r["torch"][0] - r["null"][0]
        engine = ("-", "-") if eng is None else (f"{eng:.2f}", f"{over - eng:.1f}")
        print(f"| {op} | {r['api'][0]:.1f} | {python} | {r['torch'][0]:.1f} | {r['null'][0]:.1f} | "
              f"{over:.1f} | {engine[0]} | {engine[1]} | {bound:.1f} | {'yes' if r['torch'][0] <= bound else 'no'} | "
              f"{r['gloo'][0]:.1f} |")
    pp = rows[0][1]["ping_pong"]
    print(f"\nping-pong through torch / API: {pp['torch'][0] / pp['api'][0]:.2f}x (target <= 1.5x)")
    print("\n## torch.distributed.pipelining: 2 stages, Schedule1F1B, 8 micro-batches (step, ms)")
    print("| MLP width | pycollect | gloo | ratio (target <= 0.7x) | losses equal |")
    print("|---|---|---|---|---|")
    for hidden in (256, 64):
        step = {}
        for backend in ("pycollect", "gloo", "pycollect", "gloo"):
            res = run_ranks(pipelining_job, 2, ["pycollect"], job_args=(backend, args.steps, free_port(), hidden),
                            timeout=600)
            step.setdefault(backend, []).append((max(r[0] for r in res) * 1e3, res[1][1]))
        same = all(step["pycollect"][0][1] == s[1] for b in step for s in step[b])
        pc_ms = statistics.median(s[0] for s in step["pycollect"])
        gl_ms = statistics.median(s[0] for s in step["gloo"])
        print(f"| {hidden} | {pc_ms:.1f} | {gl_ms:.1f} | {pc_ms / gl_ms:.2f}x | {same} |")
    print("\n## pycollect.pp 1F1B at 2 stages: idle fraction against the textbook")
    print("| micro-batches | measured (mean of stages) | per stage | textbook | difference (target <= 0.05) |")
    print("|---|---|---|---|---|")
    for micro in (4, 8):
        measured, textbook, per = run_ranks(bubble_job, 2, ["pycollect"], job_args=(micro, args.steps // 2 + 2),
                                            timeout=600)[0]
        print(f"| {micro} | {measured:.3f} | {', '.join(f'{v:.3f}' for v in per)} | {textbook:.3f} | "
              f"{measured - textbook:+.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
