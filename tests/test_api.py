"""API behaviour and bad input: async handles, ordering, the GIL, numpy inputs,
send/recv, new_group, shrink_group's refusals, and every error path that must be caught before anything is
sent. The session's 4-rank pool (conftest.py); a case that breaks a group uses a fresh
sub-group so the pool stays usable.
"""
import contextlib
import datetime
import mmap
import os
import threading
import time
import warnings

import numpy as np
import pytest
import shrink_cases
import torch

import pycollect as pc

WORLD = 4




# -- worker functions (module level so they pickle) ----------------------------------

def case_async_in_order():
    r, n = pc.get_rank(), pc.get_world_size()
    ts = [torch.full((1000 + k,), float(r + k)) for k in range(20)]
    works = [pc.all_reduce(t, async_op=True) for t in ts]
    works[-1].wait()  # the last one done implies the earlier ones are done
    done = [w.is_completed() for w in works]
    for w in works:
        w.wait(timeout=10)
    expect = [sum(range(n)) + n * k for k in range(20)]
    return done, [float(t[0]) for t in ts] == expect


def case_gil_released():
    """A Python thread keeps counting while this rank blocks in a large all-reduce."""
    t = torch.ones(8 * 1024 * 1024)
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    th = threading.Thread(target=count)
    th.start()
    time.sleep(0.05)
    before = len(ticks)
    start = time.perf_counter()
    for _ in range(3):
        pc.all_reduce(t)
    elapsed = time.perf_counter() - start
    during = len(ticks) - before
    stop.set()
    th.join()
    return elapsed, during


def case_forced_algorithms():
    r = pc.get_rank()
    out = {}
    for algo in ("ring", "direct", "auto", "halving_doubling", "tree"):
        t = torch.arange(1001, dtype=torch.float64) * (r + 1)
        pc.all_reduce(t, algo=algo)
        out[algo] = t.tolist()
    for algo in ("ring", "bruck", "auto"):
        t = torch.empty(3 * pc.get_world_size(), dtype=torch.int32)
        pc.all_gather_into_tensor(t, torch.arange(3, dtype=torch.int32) + 10 * r, algo=algo)
        out["gather_" + algo] = t.tolist()
    # An algorithm of another call: ValueError naming it, before anything is sent (the
    # calls after it still pair up on every rank).
    for name, call in (("bad", lambda: pc.all_reduce(torch.ones(1), algo="bruck")),
                       ("bad_gather", lambda: pc.all_gather_into_tensor(torch.empty(4 * pc.get_world_size()),
                                                                        torch.ones(4), algo="tree")),
                       ("bad_coalesced", lambda: pc.all_reduce_coalesced([torch.ones(1)], algo=pc.Algo.BRUCK)),
                       ("bad_gather_coalesced", lambda: pc.all_gather_coalesced(
                           [[torch.empty(1)] for _ in range(pc.get_world_size())], [torch.ones(1)], algo="tree"))):
        try:
            call()
            out[name] = "no error"
        except ValueError as e:
            out[name] = str(e)
    t = torch.ones(5)
    pc.all_reduce(t, algo="tree")
    out["after"] = t.tolist()
    return out


class _Subclass(torch.Tensor):
    """A tensor subclass: its attributes may be overridden, so the fast calls leave it to the
    general path."""


def case_fast_calls():
    """The blocking all_reduce and broadcast of a plain host buffer run in one crossing
    (ProcessGroup.fast, csrc/bindings/register_fast_calls.cc): what it takes, what it
    declines (False, nothing issued: the next call still lines up on every rank), and the
    same bits as the general path."""
    import pycollect.api as api
    from pycollect import _buffers
    from pycollect.world import default

    r, n = pc.get_rank(), pc.get_world_size()
    g = default()
    _buffers._torch_kinds()  # torch known to the fast calls (done by the first tensor's slow call)
    out = {}
    a = np.full(5, r + 1, dtype=np.float32)
    out["numpy"] = (g.fast.all_reduce(a, pc.ReduceOp.SUM), a.tolist())
    t = torch.full((3,), float(r + 1), dtype=torch.float64)
    out["torch"] = (g.fast.all_reduce(t, int(pc.ReduceOp.MAX)), t.tolist())
    b = torch.full((2,), float(r), dtype=torch.int64)
    out["broadcast"] = (g.fast.broadcast(b, 1), b.tolist())
    p = torch.nn.Parameter(torch.ones(2), requires_grad=False)  # torch reads a Parameter as a plain tensor
    out["parameter"] = (g.fast.all_reduce(p, 0), p.tolist())
    m = np.zeros((4, 4), dtype=np.float32)
    read_only = np.zeros(4, dtype=np.float32)
    read_only.flags.writeable = False
    mapping = mmap.mmap(-1, 4096, prot=mmap.PROT_READ)
    with warnings.catch_warnings():  # torch: "The given buffer is not writable"
        warnings.simplefilter("ignore")
        read_only_tensor = torch.frombuffer(mapping, dtype=torch.float32, count=4)
    declined = {
        "numpy_strided": (m[:, 1], 0), "numpy_read_only": (read_only, 0), "numpy_uint16": (np.zeros(2, np.uint16), 0),
        "numpy_big_endian": (np.zeros(2, ">f4"), 0), "list": ([1.0, 2.0], 0), "torch_strided": (torch.ones(4, 4).t(), 0),
        "subclass": (torch.ones(2).as_subclass(_Subclass), 0), "torch_uint16": (torch.ones(2, dtype=torch.uint16), 0),
        "torch_read_only_mapping": (read_only_tensor, 0),
        "op_bool": (np.ones(2, np.float32), True), "op_unknown": (np.ones(2, np.float32), 99),
        "op_negative": (np.ones(2, np.float32), -1), "op_torch": (np.ones(2, np.float32), torch.distributed.ReduceOp.SUM),
        "op_name": (np.ones(2, np.float32), "sum"),
    }
    out["declined"] = {k: g.fast.all_reduce(x, op) for k, (x, op) in declined.items()}
    after = np.ones(1, np.float64)
    pc.all_reduce(after)  # lines up only if no rank issued anything above
    out["after"] = after.tolist()
    # A call still running (a receive not yet matched): the fast call declines, the general
    # path runs it; once it ended, the fast call drops its buffers and runs again.
    box = torch.zeros(2)
    w = pc.irecv(box, src=(r - 1) % n, tag=77)
    small = np.ones(2, np.float32)
    out["in_flight"] = g.fast.all_reduce(small, 0)
    pc.all_reduce(small)
    pc.send(torch.full((2,), float(r)), (r + 1) % n, tag=77)
    w.wait()
    out["after_flight"] = (small.tolist(), box.tolist())
    done = pc.all_reduce(np.ones(1, np.float32), async_op=True)
    done.wait()
    out["ended_dropped"] = (g.fast.all_reduce(small, 0), len(g._pending))
    # The other calls: reduce to rank 1, the gathers, a message around the ring.
    red = np.full(3, r + 1, dtype=np.int64)
    out["reduce"] = (g.fast.reduce(red, pc.ReduceOp.SUM, 1), red.tolist())
    gathered = torch.zeros(2 * n)
    out["all_gather"] = (g.fast.all_gather(gathered, torch.full((2,), float(r))), gathered.tolist())
    part = np.zeros(2, np.float64)
    out["reduce_scatter"] = (g.fast.reduce_scatter(part, np.arange(2 * n, dtype=np.float64), 0), part.tolist())
    got = np.zeros(3, np.int32)
    if r % 2 == 0:
        sent = g.fast.send(np.full(3, r, np.int32), (r + 1) % n, 5)
        received = g.fast.recv(got, (r - 1) % n, 5)
    else:
        received = g.fast.recv(got, (r - 1) % n, 5)
        sent = g.fast.send(np.full(3, r, np.int32), (r + 1) % n, 5)
    out["message"] = (sent, received, got.tolist())
    out["declined_more"] = {
        "gather_size": g.fast.all_gather(torch.zeros(2 * n + 1), torch.ones(2)),
        "gather_dtype": g.fast.all_gather(torch.zeros(2 * n, dtype=torch.float64), torch.ones(2)),
        "scatter_size": g.fast.reduce_scatter(np.zeros(3), np.zeros(2 * n), 0),
        "recv_any": g.fast.recv(got, -1, 5), "tag_big": g.fast.send(got, (r + 1) % n, 1 << 40),
        "tag_bool": g.fast.send(got, (r + 1) % n, True), "reduce_op": g.fast.reduce(red, 8, 0),
    }
    check = np.ones(1, np.float64)
    pc.all_reduce(check)  # nothing was issued by the declined calls
    out["after_more"] = check.tolist()
    # Same bits as the general path (algo named: the general path), odd counts, every rank's values.
    rng = np.random.default_rng(r)
    x = rng.standard_normal(1001).astype(np.float32)
    y = x.copy()
    pc.all_reduce(x)
    pc.all_reduce(y, algo="auto")
    out["same_bits"] = x.tobytes() == y.tobytes()
    # pc.all_reduce takes the fast call: with the general path's validation broken it still works.
    real, api.as_buffer = api.as_buffer, None
    try:
        z = np.ones(3, np.int32)
        pc.all_reduce(z)
        out["api_fast"] = z.tolist()
        pc.all_reduce(z, async_op=True).wait()  # async_op=True too (FastAsyncScope)
        out["api_fast"] += z.tolist()
        # An algorithm named as an Algo or a name in lower or upper case goes with the fast
        # call, sync or async; each of the calls that take algo=, with one the call has.
        pc.all_reduce(z, async_op=True, algo="ring").wait()
        pc.all_reduce(z, algo=pc.Algo.SHM)
        out["api_fast"] += z.tolist()
        y = np.full(2, r, np.float32)
        gathered, part = np.zeros(2 * n, np.float32), np.zeros(2, np.float32)
        parts = [np.zeros(2, np.float32) for _ in range(n)]
        pc.broadcast(y, 1, algo="RING")
        pc.all_gather_into_tensor(gathered, y, algo="shm")
        pc.all_gather(parts, y, algo="bruck")
        pc.reduce_scatter_tensor(part, gathered, algo=pc.Algo.RING)
        pc.reduce_scatter(part, parts, algo="shm")
        out["algo_fast"] = (y.tolist(), gathered.tolist(), [p.tolist() for p in parts], part.tolist())
        # Anything else declines: the general path runs it (a name in mixed case) or raises
        # (an int, an algorithm the call does not have), and here it fails on its broken check.
        general = {}
        for what, call in (("mixed case", lambda: pc.all_reduce(z, algo="RiNg")),
                           ("an int", lambda: pc.all_reduce(z, algo=1)),
                           ("not the call's", lambda: pc.all_reduce(z, algo="bruck")),
                           ("another enum", lambda: pc.broadcast(y, 0, algo=pc.ReduceOp.SUM))):
            try:
                call()
                general[what] = "not general"
            except (TypeError, ValueError):  # None is not callable, or the algorithm named
                general[what] = "general"
        out["algo_general"] = general
    finally:
        api.as_buffer = real
    return out


def case_fast_front():
    """The API's fast calls (pycollect.api._fast, csrc/bindings/register_fast_calls.cc) find
    the group (None: the default), map global ranks to the group's, and decline (False,
    nothing issued) where the general path must run: no such group, a rank outside it, a
    torch profiler recording, a destroyed group."""
    import torch.profiler
    from pycollect import _C, api

    r, n = pc.get_rank(), pc.get_world_size()
    front = api._fast
    pc.all_reduce(torch.zeros(1))  # a first call on a tensor (the general path) teaches the fast calls torch's
    out = {}
    a = np.full(2, r + 1, np.float32)
    out["default"] = (front.all_reduce(None, a, 0, None), a.tolist())
    odd = [q for q in range(n) if q % 2 == 1]  # global ranks 1 and 3: group ranks 0 and 1
    sub = pc.new_group(odd)
    if r in odd:
        b = np.full(2, float(r), np.float64)
        out["sub_broadcast"] = (front.broadcast(sub, b, 3, None), b.tolist())
        out["outside_src"] = front.broadcast(sub, b, 0, None)
        c = np.full(1, r, np.int64)
        out["sub_reduce"] = (front.reduce(sub, c, 1, 0), c.tolist())
        got, mine, peer = np.zeros(2, np.int32), np.full(2, r, np.int32), 4 - r
        if r == 1:
            out["sub_message"] = (front.send(sub, mine, peer, 3), front.recv(sub, got, peer, 3), got.tolist())
        else:
            received = front.recv(sub, got, peer, 3)
            out["sub_message"] = (front.send(sub, mine, peer, 3), received, got.tolist())
        # From any source: the sender's global rank comes back (None: a named one's)
        anyone = np.zeros(2, np.int32)
        if r == 1:
            out["sub_any"] = (front.send(sub, mine + 10, peer, 4), front.recv(sub, anyone, None, 4), anyone.tolist())
        else:
            received = front.recv(sub, anyone, None, 4)
            out["sub_any"] = (front.send(sub, mine + 10, peer, 4), received, anyone.tolist())
        try:
            pc.broadcast(b, src=0, group=sub)
            out["outside_src_api"] = "no error"
        except ValueError as e:
            out["outside_src_api"] = str(e)
        # Rooted calls by global rank: a gather to global rank 3, a scatter from it (a tuple).
        mine = np.full(3, r, np.int16)
        slots = [np.zeros(3, np.int16) for _ in range(2)] if r == 3 else None
        out["sub_gather"] = (front.gather(sub, mine, slots, 3), None if slots is None else [x.tolist() for x in slots])
        got = np.zeros(2, np.float32)
        rows = (np.full(2, 10.0, np.float32), np.full(2, 20.0, np.float32)) if r == 3 else None
        out["sub_scatter"] = (front.scatter(sub, got, rows, 3), got.tolist())
        # An all-to-all: group rank q (global 1 or 3) sends q * 10 + p to group rank p.
        q = odd.index(r)
        a2a_out = [np.zeros(2, np.int64) for _ in range(2)]
        out["sub_all_to_all"] = (front.all_to_all(sub, a2a_out, tuple(np.full(2, q * 10 + p, np.int64) for p in range(2))),
                                 [x.tolist() for x in a2a_out])
        short, other = [a2a_out[0]], [a2a_out[0], a2a_out[1].astype(np.int32)]
        own = [np.zeros(3, np.int64), np.zeros(3, np.int64)]
        out["all_to_all_declines"] = [front.all_to_all(sub, short, a2a_out), front.all_to_all(sub, other, a2a_out),
                                      front.all_to_all(sub, own, a2a_out), front.all_to_all(sub, a2a_out, None)]
        # all_to_all_single's even chunks of the rows: group rank q sends q * 10 + p to group
        # rank p, from 1-D buffers and from 2-D ones (a row a rank)
        flat_out = np.zeros(4, np.int64)
        flat_in = np.repeat(np.array([q * 10, q * 10 + 1], np.int64), 2)
        a2a = front.all_to_all_single
        out["sub_all_to_all_single"] = (a2a(sub, flat_out, flat_in, None, None), flat_out.tolist())
        rows_out = np.zeros((2, 2), np.int64)
        out["rows_all_to_all_single"] = (a2a(sub, rows_out, torch.from_numpy(flat_in.reshape(2, 2)), None, None),
                                         rows_out.tolist())
        # split sizes: group rank 0 sends rows [1, 3], group rank 1 [2, 2]; rows of 2 elements
        sends = [[1, 3], [2, 2]]
        recvs = [sends[0][q], sends[1][q]]
        rows_in = np.arange(8, dtype=np.int64).reshape(4, 2) + 100 * q
        split_out = np.zeros((sum(recvs), 2), np.int64)
        out["split_all_to_all_single"] = (a2a(sub, split_out, rows_in, recvs, tuple(sends[q])), split_out.tolist())
        zeros = np.zeros(6, np.int64)
        out["single_declines"] = [a2a(sub, zeros[:3], zeros[3:], None, None),
                                  a2a(sub, np.zeros(4, np.int32), flat_in, None, None),
                                  a2a(sub, zeros, flat_in, None, None),
                                  a2a(sub, zeros.reshape(2, 3), zeros.reshape(3, 2), None, None),
                                  a2a(sub, np.zeros((0, 4), np.int64), np.zeros((0, 4), np.int64), None, None),
                                  a2a(sub, np.int64(5), flat_in, None, None),  # 0-d: no rows
                                  a2a(sub, flat_out, flat_in, [2, 2], [3, 1]),  # this rank's own chunk
                                  a2a(sub, flat_out, flat_in, [2, 2], [2, 1]),  # splits add up to 3
                                  a2a(sub, flat_out, flat_in, [2, 2], [5, -1]),
                                  a2a(sub, flat_out, flat_in, [2, 2], [4]),
                                  a2a(sub, flat_out, flat_in, [2, 2], [np.int64(2), 2]),
                                  # rows of 2 elements out, of 1 in (one row each to itself)
                                  a2a(sub, rows_out, flat_in, [1, 1], [1, 3] if q == 0 else [3, 1])]
        # Declined before anything is issued, on the rank whose arguments are wrong (the
        # general path names them): a list on a non-root, a short list, a list of another
        # dtype, a root's own slot of another size, a non-list.
        if r == 1:
            out["rooted_declines"] = [front.gather(sub, mine, [mine, mine], 3)]
        else:
            out["rooted_declines"] = [front.gather(sub, mine, [mine], 3),
                                      front.gather(sub, mine, [mine, mine.astype(np.int32)], 3),
                                      front.gather(sub, mine, [mine, np.zeros(4, np.int16)], 3),
                                      front.scatter(sub, got, iter(rows), 3)]
    else:
        out["non_member"] = front.all_reduce(sub, a, 0, None)
    out["not_a_group"] = front.all_reduce("g0", a, 0, None)
    out["barrier"] = (front.barrier(None), front.barrier("g0"))
    # The list forms: rank q's tensor into slot q; the sum of every rank's slot r at rank r.
    slots = [np.zeros(2, np.float32) for _ in range(n)]
    out["gather_list"] = (front.all_gather_list(None, slots, np.full(2, r, np.float32), None),
                          [s.tolist() for s in slots])
    mine = np.zeros(3, np.int64)
    parts = tuple(np.full(3, 10 * r + p, np.int64) for p in range(n))
    out["scatter_list"] = (front.reduce_scatter_list(None, mine, parts, 0, None), mine.tolist())
    # The coalesced forms: two tensors summed in one call; two gathered from every rank.
    pair = [np.full(2, r + 1.0, np.float64), np.full(3, 10.0 * (r + 1), np.float64)]
    out["reduce_coalesced"] = (front.all_reduce_coalesced(None, pair, 0), [p.tolist() for p in pair])
    rows = [[np.zeros(1, np.int32), np.zeros(2, np.int32)] for _ in range(n)]
    out["gather_coalesced"] = (front.all_gather_coalesced(None, rows, (np.full(1, r, np.int32), np.full(2, -r, np.int32))),
                               [[t.tolist() for t in row] for row in rows])
    ones = [np.ones(1, np.int32), np.ones(2, np.int32)]
    out["coalesced_declines"] = [front.all_reduce_coalesced(None, [], 0),  # nothing to reduce
                                 front.all_reduce_coalesced(None, [pair[0], np.ones(2, np.float32)], 0),  # dtypes
                                 front.all_reduce_coalesced(None, iter(pair), 0),
                                 front.all_gather_coalesced(None, rows[:-1], ones),  # a rank's list missing
                                 front.all_gather_coalesced(None, [row[:1] for row in rows], ones),  # an output missing
                                 front.all_gather_coalesced(None, [row[::-1] for row in rows], ones)]  # sizes
    strided = torch.zeros(2, 2 * n)[:, ::2]  # not contiguous: the general path copies into it
    x = np.zeros(2, np.float32)
    out["list_declines"] = [front.all_gather_list(None, slots[:-1], x, None),  # a short list
                            front.all_gather_list(None, slots[:-1] + [np.zeros(3, np.float32)], x, None),  # a size
                            front.all_gather_list(None, slots[:-1] + [np.zeros(2, np.int32)], x, None),  # a dtype
                            front.all_gather_list(None, [strided[:, k] for k in range(n)], torch.zeros(2), None),
                            front.all_gather_list(None, iter(slots), x, None),  # not a list or tuple
                            front.reduce_scatter_list(None, mine, parts[:-1] + (np.zeros(2, np.int64),), 0, None),
                            front.reduce_scatter_list(None, mine, parts, "sum", None)]  # an op by name
    with torch.profiler.profile():
        out["profiling"] = front.all_reduce(None, a, 0, None)
    pc.destroy_process_group(sub)
    out["destroyed"] = front.all_reduce(sub, a, 0, None) if r in odd else False
    errors = {}
    for name, call in (("arity", lambda: front.all_reduce(None, a)),
                       ("keywords", lambda: front.all_reduce(None, a, 0, algo=None)),
                       ("make_calls", _C.FastCalls), ("make_front", _C.FastFront),
                       ("rank_type", lambda: pc.world.default().fast.broadcast(a, "0"))):
        try:
            call()
            errors[name] = "no error"
        except TypeError as e:
            errors[name] = str(e)
    out["errors"] = errors
    after = np.ones(1, np.float64)
    pc.all_reduce(after)  # lines up only if no rank issued anything above
    out["after"] = after.tolist()
    return out


def case_fast_entries():
    """The public functions with a fast call are C entries (csrc/bindings/
    register_fast_entry.cc): they bind the caller's arguments as the Python function would,
    take the fast call only where the `off` parameters are None or False, run the function
    on whatever they decline or cannot bind, and wait through `finish` for a call issued
    behind another still running."""
    import inspect
    import pickle

    import torch.profiler as torch_profiler

    from pycollect import _C, api

    r, n = pc.get_rank(), pc.get_world_size()
    out = {}
    looks = {}
    for name, value in vars(api).items():
        if isinstance(value, _C.FastEntry):
            looks[name] = (inspect.signature(value) == inspect.signature(value.__wrapped__),
                           value.__doc__ == value.__wrapped__.__doc__, pickle.loads(pickle.dumps(value)) is value,
                           getattr(pc, name, value) is value, repr(value).startswith("<function pycollect.api."))
    out["looks"] = looks
    # The same call bound positionally, by keyword and mixed; off parameters left at False/None.
    calls = [lambda t: pc.all_reduce(t, pc.ReduceOp.MAX, None, False, None, None),
             lambda t: pc.all_reduce(op=pc.ReduceOp.MAX, tensor=t),
             lambda t: pc.all_reduce(t, group=None, op=pc.ReduceOp.MAX, async_op=False)]
    got = []
    for call in calls:
        t = np.full(3, float(r), np.float32)
        got.append((call(t), t.tolist()))
    out["bound"] = got
    # Off parameters set: the general path (a Work; an algorithm named).
    t = torch.full((2,), float(r))
    w = pc.all_reduce(t, async_op=True)
    out["async"] = (type(w).__name__, w.wait(), t.tolist())
    t = torch.full((2,), float(r))
    out["algo"] = (pc.all_reduce(t, algo="ring"), t.tolist())
    out["barriers"] = (pc.barrier(), pc.barrier(timeout=30.0), type(pc.barrier(async_op=True)).__name__)
    # Arguments that do not bind: the Python function's own TypeError.
    errors = {}
    for what, call in (("unknown", lambda: pc.all_reduce(t, opp=pc.ReduceOp.SUM)),
                       ("twice", lambda: pc.all_reduce(t, pc.ReduceOp.SUM, op=pc.ReduceOp.SUM)),
                       ("missing", lambda: pc.broadcast()), ("too_many", lambda: pc.send(t, 0, None, 0, 1)),
                       ("general", lambda: pc.all_reduce("not a tensor"))):
        try:
            call()
            errors[what] = "no error"
        except (TypeError, ValueError) as e:
            errors[what] = f"{type(e).__name__}: {e}"
    out["errors"] = errors
    # A recv returns its src (named) or the sender (any source), as the function does.
    peer = r ^ 1
    m = np.zeros(2, np.int32)
    if r % 2 == 0:
        out["recv"] = (pc.send(np.full(2, r, np.int32), peer, tag=9), pc.recv(m, peer, tag=9), m.tolist())
    else:
        named = pc.recv(m, peer, tag=9)
        out["recv"] = (pc.send(np.full(2, r, np.int32), peer, tag=9), named, m.tolist())
    # The list forms on the fast path and on the general one meet in the same call: rank 0
    # records a torch profile (its calls take the general path, which names them in the
    # trace), the others take the fast one; small (the shared arena) and large (the ring,
    # 2^19 floats a rank).
    mixed = []
    for count in (3, 1 << 19):
        slots = [torch.zeros(count) for _ in range(n)]
        got = torch.zeros(count)
        parts = [torch.full((count,), 10.0 * r + k) for k in range(n)]
        with torch_profiler.profile() if r == 0 else contextlib.nullcontext():
            pc.all_gather(slots, torch.full((count,), float(r)))
            pc.reduce_scatter(got, parts)
        mixed.append(([float(s.min()) for s in slots] == [float(s.max()) for s in slots] == [float(q) for q in range(n)],
                      float(got.min()) == float(got.max()) == float(sum(10 * q + r for q in range(n)))))
    out["mixed_lists"] = mixed
    # Issued but failed (counts that differ across ranks): the entry's finish waits on the
    # Work and raises its error, through a recording finish on an entry made as the API's.
    seen = []

    def finish(work, group, *keep):
        seen.append(type(work).__name__)
        return api._waited(work, group, *keep)

    entry = _C.fast_entry(api.all_reduce.__wrapped__, api._fast.all_reduce, finish, ("group", "tensor", "op", "algo"),
                          ("async_op", "compress"))
    out["failed"] = _on_fresh_group(lambda g, rank: entry(np.ones(2 + (rank == 0), np.float32), group=g), 30.0)
    out["seen"] = seen
    after = np.ones(1, np.float64)
    pc.all_reduce(after)
    out["after"] = after.tolist()
    return out


def case_fast_async():
    """async_op=True on the fast path (register_fast_entry.cc, FastAsyncScope): the call is
    queued by the C entry, never run on the caller's thread, even behind calls still in
    flight; it comes back as the API's Work, its buffers held by the group until the engine
    is done with them, whoever drops the Work."""
    import gc
    import weakref

    from pycollect import _C, api

    r, n = pc.get_rank(), pc.get_world_size()
    total = float(n * (n - 1) / 2)
    out = {}
    pc.all_reduce(torch.zeros(1))  # the fast calls read torch tensors once the general path has met one
    # Through an entry made as the API's, with a recording general path and Work maker.
    general, made = [], []

    def function(tensor, op=pc.ReduceOp.SUM, group=None, async_op=False, algo=None, compress=None):
        general.append(async_op)
        return api.all_reduce.__wrapped__(tensor, op, group, async_op, algo, compress)

    def work_of(work, group, *keep):
        made.append((type(work).__name__, len(keep)))
        return api._async_work(work, group, *keep)

    entry = _C.fast_entry(function, api._fast.all_reduce, api._waited, ("group", "tensor", "op", "algo"),
                          ("async_op", "compress"), None, "async_op", work_of)
    t = torch.full((2,), float(r))
    w = entry(t, async_op=True)
    out["entry"] = (type(w).__name__, w.wait(), t.tolist(), list(general), list(made))
    t = torch.full((2,), float(r))
    w = entry(t, compress="bf16", async_op=True)  # a compressed call: the general path
    out["entry_declined"] = (type(w).__name__, w.wait(), t.tolist(), list(general), len(made))
    # A front that answers a queued call with None (the engine's never does): an error, no Work.
    stub = _C.fast_entry(function, lambda group, tensor, op, algo: None, api._waited,
                         ("group", "tensor", "op", "algo"), ("async_op", "compress"), None, "async_op", work_of)
    try:
        stub(t, async_op=True)
        out["no_work"] = "no error"
    except RuntimeError as e:
        out["no_work"] = (str(e), len(general), len(made))
    # Several in flight at once, waited in reverse.
    a, b = np.full(3, float(r), np.float32), torch.full((2,), float(r + 1))
    slots, c = [torch.zeros(2) for _ in range(n)], np.full(1, float(r), np.float64)
    works = [pc.all_reduce(a, async_op=True), pc.broadcast(b, 1, async_op=True),
             pc.all_gather(slots, torch.full((2,), float(r)), async_op=True), pc.all_reduce(c, async_op=True),
             pc.barrier(async_op=True)]
    out["in_flight"] = [type(x).__name__ for x in works]
    out["waited"] = [x.wait() for x in reversed(works)]
    out["values"] = (a.tolist(), b.tolist(), [s.tolist() for s in slots], c.tolist())
    # A blocking call behind an async one still in flight (the fast call declines; the
    # general path queues behind it).
    x, y = torch.full((2,), float(r)), torch.full((2,), 1.0)
    w = pc.all_reduce(x, async_op=True)
    pc.all_reduce(y)
    out["behind"] = (w.is_completed(), w.wait(), x.tolist(), y.tolist())
    # The buffer of a Work nobody keeps: held by the group until the call ended and the
    # group's next call dropped it.
    buffer = np.full(4, float(r), np.float32)
    alive = weakref.ref(buffer)
    pc.all_reduce(buffer, async_op=True)
    del buffer
    gc.collect()
    held = alive() is not None
    pc.barrier()
    pc.barrier()
    gc.collect()
    out["held"] = (held, alive() is None)
    # isend and irecv: every call queued by their entries; tags out of order, one from any source.
    peer = r ^ 1
    got = [np.zeros(2, np.int32), np.zeros(3, np.int32)]
    recvs = [pc.irecv(got[1], peer, tag=2), pc.irecv(got[0], None, tag=1)]
    sends = [pc.isend(np.full(2, r, np.int32), peer, tag=1), pc.isend(np.full(3, 10 + r, np.int32), peer, tag=2)]
    out["p2p"] = ([type(x).__name__ for x in recvs + sends], [x.wait() for x in sends + recvs],
                  [x.source_rank() for x in recvs], [x.received_bytes() for x in recvs], [v.tolist() for v in got])
    # A call that fails (counts that differ across ranks): its Work's wait raises, on every rank.
    out["failed"] = _on_fresh_group(
        lambda grp, rank: pc.all_reduce(np.ones(2 + (rank == 0), np.float32), group=grp, async_op=True).wait(), 30.0)
    after = np.ones(1, np.float64)
    pc.all_reduce(after)
    out["after"] = (after.tolist(), total)
    # The groups' workers sleep in SCHED_BATCH with nothing to do (worker.cc, [Note: the
    # worker's wake-up]); the caller's thread keeps its own class.
    time.sleep(0.1)
    classes = []
    for tid in os.listdir("/proc/self/task"):
        try:
            classes.append(os.sched_getscheduler(int(tid)))
        except OSError:  # a thread that ended meanwhile
            pass
    out["classes"] = (classes.count(os.SCHED_BATCH), os.sched_getscheduler(0))
    return out


def case_numpy_inputs():
    r, n = pc.get_rank(), pc.get_world_size()
    a = np.arange(10, dtype=np.int32) * (r + 1)
    pc.all_reduce(a, op=pc.ReduceOp.MAX)
    g = np.empty(3 * n, dtype=np.float64)
    pc.all_gather_into_tensor(g, np.full(3, r, dtype=np.float64))
    h = np.zeros(2, dtype=np.float16)
    pc.reduce_scatter_tensor(h, np.ones(2 * n, dtype=np.float16))
    return a.tolist(), g.tolist(), h.tolist()


def case_in_place_all_gather():
    """The input is the output's own block, with each algorithm (Bruck sends its first
    round from the input and copies it into place beside that round)."""
    r, n = pc.get_rank(), pc.get_world_size()
    outs = []
    for algo in ("auto", "ring", "bruck"):
        out = torch.zeros(5 * n, dtype=torch.int64)
        out[r * 5:(r + 1) * 5] = r + 1
        pc.all_gather_into_tensor(out, out[r * 5:(r + 1) * 5], algo=algo)
        outs.append(out.tolist())
    return outs


def case_ring_send_recv():
    """Each rank sends to its right and receives from its left, with tags, async."""
    r, n = pc.get_rank(), pc.get_world_size()
    got = torch.zeros(100, dtype=torch.int64)
    s = pc.isend(torch.full((100,), r, dtype=torch.int64), (r + 1) % n, tag=7)
    rw = pc.irecv(got, (r - 1) % n, tag=7)
    s.wait()
    rw.wait()
    return int(got[0]), int(got[-1])


def case_matching_by_source_and_tag():
    """Every rank sends each peer tags 2, 1, 0 (a small, a medium and a 1 MiB message, which
    goes by rendezvous), then tag 9; and receives each peer's tag 0 first, into a buffer two
    elements larger, an all-reduce between the receives and the sends, then tag 9 from any
    source. Returns, per received message: (source_rank, received_bytes, its values, the
    two elements past it); and the senders of the tag-9 messages, in the order received."""
    r, n = pc.get_rank(), pc.get_world_size()
    sizes = {2: 2, 1: 4096, 0: 1 << 18}
    peers = [q for q in range(n) if q != r]
    works = []
    for q in peers:
        for tag in (0, 1, 2):
            got = torch.full((sizes[tag] + 2,), -1.0)
            works.append((q, tag, got, pc.irecv(got, q, tag=tag)))
    total = torch.ones(1)
    pc.all_reduce(total)
    sends = [pc.isend(torch.full((sizes[tag],), 100.0 * r + 10 * q + tag), q, tag=tag) for q in peers for tag in (2, 1, 0)]
    sends += [pc.isend(torch.full((3,), float(r)), q, tag=9) for q in peers]
    received = {}
    for q, tag, got, w in works:
        w.wait()
        n_el = sizes[tag]
        received[q, tag] = (w.source_rank(), w.received_bytes(), sorted(set(got[:n_el].tolist())), got[n_el:].tolist())
    anyone = []
    for _ in peers:
        got = torch.zeros(3)
        anyone.append((pc.recv(got, None, tag=9), got.tolist()))
    for s in sends:
        s.wait()
    return received, anyone, total.item()


def case_transfers_complete_whoever_moves_the_bytes(iters: int, limit_s: float):
    """Pairs (0, 1) and (2, 3) exchange messages of 8 B, 16 KiB and 4 MiB, each rank
    posting its irecv, then (after a random pause) its isend, and polling is_completed()
    (which leaves the progress to the engine's threads) until both are done. A transfer
    that one thread's pass completed while another thread held it must still complete:
    the longest wait (seconds), which a missed wake-up would stretch to the group's
    timeout (there is no periodic re-check to hide it)."""
    import random

    r = pc.get_rank()
    peer, rng = r ^ 1, random.Random(r)
    longest = 0.0
    for i in range(iters):
        n = (2, 4096, 1 << 20)[i % 3]
        got, out = torch.empty(n), torch.full((n,), float(r))
        q = pc.irecv(got, peer, tag=11)
        time.sleep(rng.random() * 3e-4)
        s = pc.isend(out, peer, tag=11)
        t0 = time.perf_counter()
        while not (s.is_completed() and q.is_completed()):
            if time.perf_counter() - t0 > limit_s:
                raise AssertionError(f"call {i} ({n} floats) not complete after {limit_s} s: a missed wake-up")
            time.sleep(0)
        longest = max(longest, time.perf_counter() - t0)
        s.wait()
        q.wait()
        assert got[0].item() == got[-1].item() == float(peer)
    return longest


def case_large_exchange_both_ways():
    """Both ranks isend 8 MiB to each other before receiving: must not deadlock."""
    r, n = pc.get_rank(), pc.get_world_size()
    peer = r ^ 1
    if peer >= n:
        return None
    out = torch.full((2 * 1024 * 1024,), float(r))
    got = torch.empty_like(out)
    s = pc.isend(out, peer, tag=3)
    q = pc.irecv(got, peer, tag=3)
    s.wait(timeout=20)
    q.wait(timeout=20)
    pc.send(out[:10], peer)  # the blocking forms, in the same order on both sides, also pass
    tail = torch.empty(10)
    pc.recv(tail, peer)
    return float(got.min()), float(got.max()), float(tail.sum())


def _on_fresh_group(fn, timeout: float):
    """fn(group, rank) on a new group over every rank, so that breaking it leaves the pool's
    groups usable; None if it returned, else (error class name, message)."""
    g = pc.new_group(list(range(pc.get_world_size())), timeout=timeout)
    try:
        fn(g, pc.get_rank())
        result = None
    except pc.PyCollectError as e:
        result = (type(e).__name__, str(e))
    pc.destroy_process_group(g)
    return result


def case_recv_mismatch():
    """A message larger than its receive's buffer (a larger buffer is fine: its front is filled)."""
    def exchange(g, r):
        if r == 0:
            pc.send(torch.ones(12), 1, group=g)
        elif r == 1:
            pc.recv(torch.empty(10), 0, group=g)

    return _on_fresh_group(exchange, timeout=20)


def case_all_to_all_disagreement():
    """Rank 0 sends rank 1 two elements where rank 1 expects three."""
    def exchange(g, r):
        n = pc.get_world_size()
        send, recv = [1] * n, [1] * n
        if r == 0:
            send[1] = 2
        if r == 1:
            recv[0] = 3
        pc.all_to_all_single(torch.empty(sum(recv)), torch.ones(sum(send)), recv, send, group=g)

    return _on_fresh_group(exchange, timeout=20)


def case_unlimited_timeouts():
    """timeout=inf waits without limit; a group timeout of 1e10 s is clamped, not an overflow."""
    g = pc.new_group(list(range(pc.get_world_size())), timeout=datetime.timedelta(seconds=1e10))
    t = torch.ones(4)
    pc.all_reduce(t, group=g)
    w = pc.all_reduce(t, group=g, async_op=True)
    done = w.wait(timeout=float("inf"))
    pc.destroy_process_group(g)
    return done, t.tolist()


def case_bytes_sent():
    """The engine's own count of bytes put on the wire by a ring all-reduce and an all-gather."""
    g = pc.new_group(list(range(pc.get_world_size())))
    before = g.bytes_sent()
    pc.all_reduce(torch.ones(1 << 18), group=g, algo="ring")
    ring = g.bytes_sent() - before
    pc.all_gather_into_tensor(torch.empty(4 * 1000), torch.ones(1000), group=g, algo="ring")
    gather = g.bytes_sent() - before - ring
    pc.all_reduce(torch.ones(10), group=g, algo="shm")  # forms the shared arena (over the links)
    before = g.bytes_sent()
    pc.all_reduce(torch.ones(1000), group=g, algo="shm")  # one phase: each rank puts its input
    pc.all_reduce(torch.ones(1 << 16), group=g, algo="shm")  # pieces: the others' chunks, then its own reduced
    shared = g.bytes_sent() - before
    pc.destroy_process_group(g)
    return ring, gather, shared


def _on_rank0(call, timeout: float, others_wait: float):
    """Rank 0 makes `call(group)` on a new group with `timeout` while the others wait
    `others_wait` s: (its error's type, message, seconds), or ("no error", "", 0.0)."""
    g = pc.new_group(list(range(pc.get_world_size())), timeout=timeout)
    result = None
    if pc.get_rank() == 0:
        t0 = time.perf_counter()
        try:
            call(g)
            result = ("no error", "", 0.0)
        except pc.PyCollectError as e:
            result = (type(e).__name__, str(e), time.perf_counter() - t0)
    else:
        time.sleep(others_wait)
    pc.destroy_process_group(g)
    return result


def case_recv_timeout():
    return _on_rank0(lambda g: pc.recv(torch.empty(4), 1, group=g), 1.0, 2.5)  # rank 1 never sends


def case_sub_group_ops():
    r = pc.get_rank()
    g = pc.new_group([1, 3])
    if r not in (1, 3):
        assert g is pc.NON_GROUP_MEMBER
        return None
    t = torch.tensor([float(r)])
    pc.all_reduce(t, group=g)
    b = torch.tensor([float(r)])
    pc.broadcast(b, src=3, group=g)
    pc.destroy_process_group(g)
    return float(t), float(b)


def case_barrier_waits():
    r = pc.get_rank()
    time.sleep(0.3 * (r == 2))
    t0 = time.perf_counter()
    pc.barrier()
    return time.perf_counter() - t0


def case_bad_inputs():
    """Each call must raise before anything is sent; the group must still work after."""
    n = pc.get_world_size()
    errors = {}

    def expect(name, exc, fn, *words):
        try:
            fn()
        except exc as e:
            msg = str(e)
            missing = [w for w in words if w not in msg]
            errors[name] = "ok" if not missing else f"message lacks {missing}: {msg}"
        except Exception as e:  # wrong type
            errors[name] = f"raised {type(e).__name__}: {e}"
        else:
            errors[name] = "did not raise"

    x = torch.ones(4, 4)
    expect("non_contiguous", ValueError, lambda: pc.all_reduce(x.t()), "contiguous")
    expect("uint16_dtype", TypeError, lambda: pc.all_reduce(torch.ones(3, dtype=torch.uint16)), "torch.uint16", "int16, bool")
    expect("complex_dtype", TypeError, lambda: pc.all_reduce(torch.ones(3, dtype=torch.complex64)), "complex64")
    expect("numpy_dtype", TypeError, lambda: pc.all_reduce(np.ones(3, dtype=np.uint16)), "uint16")
    expect("not_a_tensor", TypeError, lambda: pc.all_reduce([1, 2, 3]), "list")
    expect("device", NotImplementedError, lambda: pc.all_reduce(torch.ones(3, device="meta")), "meta")
    expect("unknown_op", ValueError, lambda: pc.all_reduce(torch.ones(3), op="median"), "median")
    expect("avg_int", ValueError, lambda: pc.all_reduce(torch.ones(3, dtype=torch.int32), op=pc.ReduceOp.AVG),
           "AVG", "int32")
    expect("gather_out_size", ValueError,
           lambda: pc.all_gather_into_tensor(torch.empty(3 * n + 1), torch.ones(3)), str(3 * n + 1), str(3 * n))
    expect("gather_out_dtype", TypeError,
           lambda: pc.all_gather_into_tensor(torch.empty(3 * n, dtype=torch.float64), torch.ones(3)), "float64")
    expect("gather_list_len", ValueError, lambda: pc.all_gather([torch.empty(3)], torch.ones(3)), "list has 1")
    expect("rs_in_size", ValueError, lambda: pc.reduce_scatter_tensor(torch.empty(2), torch.ones(2 * n + 1)),
           "expected")
    expect("readonly_numpy", ValueError,
           lambda: pc.all_reduce(np.frombuffer(b"\0" * 16, dtype=np.float32)), "read-only")
    with warnings.catch_warnings():  # torch: "The given buffer is not writable"
        warnings.simplefilter("ignore")
        mapped = torch.frombuffer(mmap.mmap(-1, 4096, prot=mmap.PROT_READ), dtype=torch.float32, count=4)
    expect("readonly_torch_mapping", ValueError, lambda: pc.all_reduce(mapped), "read-only")
    for np_dtype, torch_dtype in ((np.float64, torch.float64), (np.int64, torch.int64)):
        # an odd offset into a buffer (numpy and torch.frombuffer allow it): the kernels cast to T*
        odd = np.frombuffer(bytearray(8 * 4 + 1), dtype=np_dtype, count=4, offset=1)
        expect(f"misaligned_numpy_{odd.dtype}", ValueError, lambda: pc.all_reduce(odd), "not aligned", "8-byte",
               ".copy()")
        odd_t = torch.frombuffer(bytearray(8 * 4 + 1), dtype=torch_dtype, count=4, offset=1)
        expect(f"misaligned_torch_{odd.dtype}", ValueError, lambda: pc.all_reduce(odd_t), "not aligned", ".clone()")
    expect("broadcast_src", ValueError, lambda: pc.broadcast(torch.ones(1), src=n + 5), str(n + 5))
    expect("send_to_self", ValueError, lambda: pc.send(torch.ones(1), pc.get_rank()), "itself")
    expect("a2a_splits", ValueError,
           lambda: pc.all_to_all_single(torch.empty(4), torch.ones(4), [1] * n, [5] + [0] * (n - 1)),
           "input_split_sizes", "summing to the first dimension 4")
    expect("a2a_rows", ValueError, lambda: pc.all_to_all_single(torch.empty(4 * n), torch.ones(3 * n)),
           "sends itself 3", "expects 4")
    expect("reinit", RuntimeError, lambda: pc.init_process_group(), "already")
    me = pc.get_rank()
    other = (me + 1) % n
    expect("gather_list_off_root", ValueError,
           lambda: pc.gather(torch.ones(2), [torch.empty(2)] * n, dst=other), "gather_list", "must not")
    expect("scatter_list_missing", ValueError, lambda: pc.scatter(torch.empty(2), None, src=me), "required")
    expect("gather_own_slot", ValueError,
           lambda: pc.gather(torch.ones(2), [torch.empty(3)] * n, dst=me), "gather_list", "expected 2")
    expect("reduce_dst", ValueError, lambda: pc.reduce(torch.ones(1), dst=n + 3), str(n + 3))
    expect("a2a_list_own", ValueError,
           lambda: pc.all_to_all([torch.empty(1)] * n, [torch.ones(2)] * n), "expected 2")
    expect("coalesced_dtypes", TypeError,
           lambda: pc.all_reduce_coalesced([torch.ones(2), torch.ones(2, dtype=torch.float64)]), "float64")
    expect("agc_shape", ValueError,
           lambda: pc.all_gather_coalesced([[torch.empty(3)] for _ in range(n)], [torch.ones(2)]), "expected 2")
    expect("new_group_options", TypeError, lambda: pc.new_group(pg_options={"transport": "tcp"}),
           "pycollect.Options", "dict")
    t = torch.ones(3)
    pc.all_reduce(t)  # the group still works
    errors["still_works"] = "ok" if t.tolist() == [n] * 3 else f"got {t.tolist()}"
    return errors


def case_mismatch(kind_on_rank1: str):
    """Rank 1 calls something else than everyone else; every rank must raise naming both."""
    g = pc.new_group(list(range(pc.get_world_size())), timeout=30)
    r = pc.get_rank()
    t0 = time.perf_counter()
    try:
        if r == 1 and kind_on_rank1 == "all_gather":
            pc.all_gather_into_tensor(torch.empty(50 * pc.get_world_size()), torch.ones(50), group=g)
        elif r == 1 and kind_on_rank1 == "count":
            pc.all_reduce(torch.ones(99), group=g)
        elif kind_on_rank1 == "count_pipelined":  # the arena's pipelined all-reduce, pieces cut apart
            pc.all_reduce(torch.ones(99999 if r == 1 else 100000), group=g, algo="shm")
        elif kind_on_rank1 == "algo":  # same call, but rank 1 forces another algorithm
            pc.all_reduce(torch.ones(100), group=g, algo="direct" if r == 1 else "ring")
        elif kind_on_rank1 == "algo_hd":
            pc.all_reduce(torch.ones(100), group=g, algo="halving_doubling" if r == 1 else "ring")
        elif kind_on_rank1 == "algo_tree":
            pc.all_reduce(torch.ones(100), group=g, algo="tree" if r == 1 else "halving_doubling")
        elif kind_on_rank1 == "algo_bruck":
            n = pc.get_world_size()
            pc.all_gather_into_tensor(torch.empty(100 * n), torch.ones(100), group=g,
                                      algo="bruck" if r == 1 else "ring")
        elif kind_on_rank1 == "algo_bruck_coalesced":
            n = pc.get_world_size()
            pc.all_gather_coalesced([[torch.empty(100)] for _ in range(n)], [torch.ones(100)], group=g,
                                    algo="bruck" if r == 1 else "ring")
        elif r == 1 and kind_on_rank1 == "reduce":
            pc.reduce(torch.ones(100), dst=0, group=g)
        elif kind_on_rank1 == "gather_size":  # rank 1 sends 7 elements, the root expects 5000 (over links)
            n = pc.get_world_size()
            slots = [torch.empty(5000) for _ in range(n)] if r == 0 else None
            pc.gather(torch.ones(7 if r == 1 else 5000), slots, dst=0, group=g)
            if r not in (0, 1):
                pc.all_reduce(torch.ones(100), group=g)  # learns of the failure
        elif kind_on_rank1 == "scatter_size":  # rank 1 expects 5000 (over its link), the root sends 100 (arena)
            rows = [torch.ones(100) for _ in range(pc.get_world_size())] if r == 0 else None
            pc.scatter(torch.empty(5000 if r == 1 else 100), rows, src=0, group=g)
            if r not in (0, 1):
                pc.all_reduce(torch.ones(100), group=g)
        else:
            pc.all_reduce(torch.ones(100), group=g)
        outcome = ("no error", "")
    except pc.PyCollectError as e:
        outcome = (type(e).__name__, str(e))
    elapsed = time.perf_counter() - t0
    # The failed group refuses further calls at once.
    t1 = time.perf_counter()
    try:
        pc.all_reduce(torch.ones(1), group=g)
        later = "no error"
    except pc.GroupFailedError:
        later = "GroupFailedError" if time.perf_counter() - t1 < 0.5 else "slow"
    pc.destroy_process_group(g)
    return outcome, elapsed, later


def case_wire_settings(setting: str, rank1_value: int):
    """A group whose rank 1 sets `setting` (an Options field) to `rank1_value`, the other ranks
    leaving it alone: what forming it raised on this rank ("formed" if nothing), and an
    all-reduce on a group formed next (the failed formation leaves nothing behind)."""
    import dataclasses

    from pycollect.options import Options

    options = Options.from_env()
    if pc.get_rank() == 1:
        options = dataclasses.replace(options, **{setting: rank1_value})
    try:
        pc.destroy_process_group(pc.new_group(pg_options=options))
        outcome = "formed"
    except pc.MismatchError as e:
        outcome = f"MismatchError: {e}"
    t = torch.ones(3)
    pc.all_reduce(t, group=pc.new_group())
    return outcome, t.tolist()


def case_barrier_timeout_argument():
    """Only rank 0 enters a barrier with timeout=0.5 s on a group whose timeout is 60 s
    (the others leave only after rank 0 timed out)."""
    return _on_rank0(lambda g: pc.barrier(group=g, timeout=0.5), 60, 1.0)


def case_timeout():
    g = pc.new_group(list(range(pc.get_world_size())), timeout=1.0)
    r = pc.get_rank()
    result = None
    if r != 2:  # rank 2 never joins this all-reduce
        t0 = time.perf_counter()
        try:
            pc.all_reduce(torch.ones(10), group=g)
            result = ("no error", "", 0.0)
        except pc.PyCollectError as e:
            result = (type(e).__name__, str(e), time.perf_counter() - t0)
    else:
        time.sleep(3.0)  # alive but absent: its neighbours must time out, not see it leave
    pc.destroy_process_group(g)
    return result


# -- tests ---------------------------------------------------------------------------

def test_async_ops_complete_in_issue_order(pool4):
    for done, correct in pool4.run(case_async_in_order):
        assert correct
        assert all(done), done


def test_gil_is_released_during_collectives(pool4):
    for elapsed, ticks in pool4.run(case_gil_released):
        # a thread sleeping 1 ms per tick gets most of the blocking time
        assert ticks >= max(5, 0.2 * elapsed / 0.001 / 2), (elapsed, ticks)


def test_algorithm_override(pool4):
    expect = (torch.arange(1001, dtype=torch.float64) * sum(range(1, WORLD + 1))).tolist()
    for out in pool4.run(case_forced_algorithms):
        for algo in ("ring", "direct", "auto", "halving_doubling", "tree"):
            assert out[algo] == expect, algo
        gathered = [k * 10 + i for k in range(WORLD) for i in range(3)]
        assert out["gather_ring"] == out["gather_bruck"] == out["gather_auto"] == gathered
        assert "'bruck' is not an algorithm of all_reduce" in out["bad"] and "tree" in out["bad"]
        assert "'tree' is not an algorithm of all_gather_into_tensor" in out["bad_gather"]
        assert "bruck" in out["bad_gather"]
        assert "'bruck' is not an algorithm of all_reduce_coalesced" in out["bad_coalesced"]
        assert "'tree' is not an algorithm of all_gather_coalesced" in out["bad_gather_coalesced"]
        assert out["after"] == [float(WORLD)] * 5


def test_numpy_arrays(pool4):
    results = pool4.run(case_numpy_inputs)
    for a, g, h in results:
        assert a == (np.arange(10) * WORLD).tolist()
        assert g == np.repeat(np.arange(WORLD, dtype=np.float64), 3).tolist()
        assert h == [float(WORLD)] * 2


def test_fast_calls_take_plain_buffers_and_decline_the_rest(pool4):
    half = WORLD * (WORLD + 1) / 2
    for r, out in enumerate(pool4.run(case_fast_calls)):
        assert out["numpy"] == (None, [half] * 5)
        assert out["torch"] == (None, [float(WORLD)] * 3)
        assert out["broadcast"] == (None, [1, 1])
        assert out["parameter"] == (None, [float(WORLD)] * 2)
        assert out["declined"] == {k: False for k in out["declined"]}, out["declined"]
        assert out["after"] == [float(WORLD)]
        assert out["in_flight"] is False
        assert out["after_flight"] == ([float(WORLD)] * 2, [float((r - 1) % WORLD)] * 2)
        assert out["ended_dropped"] == (None, 0)
        assert out["reduce"] == (None, [half if r == 1 else r + 1] * 3)
        assert out["all_gather"] == (None, [float(k) for k in range(WORLD) for _ in range(2)])
        assert out["reduce_scatter"] == (None, [float(WORLD * (2 * r + k)) for k in range(2)])
        assert out["message"] == (None, None, [(r - 1) % WORLD] * 3)
        assert out["declined_more"] == {k: False for k in out["declined_more"]}, out["declined_more"]
        assert out["after_more"] == [float(WORLD)]
        assert out["same_bits"]
        assert out["api_fast"] == [WORLD] * 3 + [WORLD * WORLD] * 3 + [WORLD ** 4] * 3
        assert out["algo_fast"] == ([1.0] * 2, [1.0] * (2 * WORLD), [[1.0] * 2] * WORLD, [float(WORLD)] * 2)
        assert out["algo_general"] == {k: "general" for k in out["algo_general"]}


def case_recv_any_against_gloo():
    """pc.recv(t, None) (the fast call: the sender's rank comes back from C++) and dist.recv
    on Gloo's default group run the same program: ranks 2k and 2k + 1 trade a message, the
    even one sending first, each receiving from any source."""
    import torch.distributed as dist

    r = pc.get_rank()
    peer = r ^ 1
    out = {}
    for name, send, recv in (("pycollect", pc.send, pc.recv), ("gloo", dist.send, dist.recv)):
        got, mine = torch.zeros(3, dtype=torch.int32), torch.full((3,), 10 * r + 1, dtype=torch.int32)
        if r % 2 == 0:
            send(mine, peer, tag=6)
            src = recv(got, None, tag=6)
        else:
            src = recv(got, None, tag=6)
            send(mine, peer, tag=6)
        out[name] = (src, got.tolist())
    return out


def test_recv_from_any_source_matches_gloo(pool4):
    for r, out in enumerate(pool4.run(case_recv_any_against_gloo)):
        assert out["pycollect"] == out["gloo"] == (r ^ 1, [10 * (r ^ 1) + 1] * 3), (r, out)


def test_fast_front_needs_every_calls_algorithms():
    """The front's algo= dicts, one per call that takes it, are checked as it is made: a
    missing one (or one that is not a dict) is named, not found later on a call."""
    from pycollect import _C, api, world
    from pycollect.errors import InvalidArgumentError

    codes = dict(api._FAST_ALGO_CODES)
    del codes["broadcast"]
    with pytest.raises(InvalidArgumentError, match="no dict for broadcast"):
        _C.fast_front(world, pc.Algo, codes)
    with pytest.raises(InvalidArgumentError, match="no dict for all_reduce"):
        _C.fast_front(world, pc.Algo, dict(api._FAST_ALGO_CODES, all_reduce=[("ring", 1)]))


def test_fast_front_finds_the_group_and_declines_for_the_general_path(pool4):
    for r, out in enumerate(pool4.run(case_fast_front)):
        assert out["default"] == (None, [WORLD * (WORLD + 1) / 2] * 2)
        if r % 2 == 1:
            assert out["sub_broadcast"] == (None, [3.0, 3.0])
            assert out["outside_src"] is False
            assert out["outside_src_api"].startswith("broadcast(src): rank 0 is not in this group")
            assert out["sub_reduce"] == (None, [4] if r == 1 else [3])
            assert out["sub_message"] == (None, None, [4 - r] * 2)
            assert out["sub_any"] == (None, 4 - r, [14 - r] * 2)  # the sender by global rank
            assert out["sub_gather"] == (None, [[1] * 3, [3] * 3] if r == 3 else None)
            assert out["sub_scatter"] == (None, [10.0] * 2 if r == 1 else [20.0] * 2)
            assert out["rooted_declines"] == [False] * (1 if r == 1 else 4)
            q = (r - 1) // 2
            assert out["sub_all_to_all"] == (None, [[q] * 2, [10 + q] * 2])
            assert out["all_to_all_declines"] == [False] * 4
            assert out["sub_all_to_all_single"] == (None, [q, q, 10 + q, 10 + q])
            assert out["rows_all_to_all_single"] == (None, [[q, q], [10 + q, 10 + q]])
            # rows from group rank 0 (offset 0), then from group rank 1 (offset 100)
            want = {0: [[0, 1], [100, 101], [102, 103]], 1: [[2, 3], [4, 5], [6, 7], [104, 105], [106, 107]]}
            assert out["split_all_to_all_single"] == (None, want[q])
            # not divisible, another dtype, another size, rows of 3 elements out and 2 in, no
            # rows (a first dimension of 0; a 0-d buffer), this rank's own chunk of two sizes,
            # splits that do not add up, a negative split, a short split list, a split that is
            # not an int, rows of different lengths
            assert out["single_declines"] == [False] * 12
            assert out["destroyed"] is False
        else:
            assert out["non_member"] is False
        assert out["not_a_group"] is False
        assert out["barrier"] == (None, False)
        assert out["gather_list"] == (None, [[float(q)] * 2 for q in range(WORLD)])
        assert out["scatter_list"] == (None, [sum(10 * q + r for q in range(WORLD))] * 3)
        assert out["list_declines"] == [False] * 7
        total = WORLD * (WORLD + 1) / 2
        assert out["reduce_coalesced"] == (None, [[total] * 2, [10 * total] * 3])
        assert out["gather_coalesced"] == (None, [[[q], [-q, -q]] for q in range(WORLD)])
        assert out["coalesced_declines"] == [False] * 6
        assert out["profiling"] is False
        errors = out["errors"]
        assert "takes 4 arguments (2 given)" in errors["arity"]
        assert "keyword" in errors["keywords"]
        assert "not called" in errors["make_calls"] and "not called" in errors["make_front"]
        assert "a rank is an int, got str" in errors["rank_type"]
        assert out["after"] == [float(WORLD)]


def test_fast_entries_bind_as_the_functions_and_fall_back_to_them(pool4):
    results = pool4.run(case_fast_entries)
    for r, out in enumerate(results):
        names = set(out["looks"])
        assert {"all_reduce", "broadcast", "barrier", "send", "recv", "isend", "irecv", "all_gather_single",
                "scatter", "all_gather", "reduce_scatter", "all_to_all_single"} <= names, names
        assert all(all(v) for v in out["looks"].values()), out["looks"]
        assert out["bound"] == [(None, [float(WORLD - 1)] * 3)] * 3
        assert out["async"] == ("Work", True, [float(WORLD * (WORLD - 1) / 2)] * 2)
        assert out["algo"] == (None, [float(WORLD * (WORLD - 1) / 2)] * 2)
        assert out["barriers"] == (None, None, "Work")
        assert out["mixed_lists"] == [(True, True)] * 2
        errors = out["errors"]
        assert "unexpected keyword argument 'opp'" in errors["unknown"]
        assert "multiple values for argument 'op'" in errors["twice"]
        assert "missing 1 required positional argument: 'tensor'" in errors["missing"]
        assert "takes from 2 to 4 positional arguments but 5 were given" in errors["too_many"]
        assert errors["general"].startswith("TypeError: all_reduce(tensor)"), errors["general"]
        assert out["recv"] == (None, r ^ 1, [r ^ 1] * 2)
        assert out["failed"][0] == "MismatchError" and "count" in out["failed"][1], out["failed"]
        assert out["seen"] == ["Work"]
        assert out["after"] == [float(WORLD)]


def test_async_calls_take_the_fast_path(pool4):
    for r, out in enumerate(pool4.run(case_fast_async)):
        total = out["after"][1]
        assert out["entry"] == ("Work", True, [total] * 2, [], [("Work", 3)])  # (tensor, op, algo) kept
        assert out["entry_declined"] == ("Work", True, [total] * 2, [True], 1)
        assert out["no_work"] == ("pycollect: a queued fast call came back without its Work", 1, 1)
        assert out["in_flight"] == ["Work"] * 5
        assert out["waited"] == [True] * 5
        assert out["values"] == ([total] * 3, [2.0] * 2, [[float(q)] * 2 for q in range(WORLD)], [total])
        assert out["behind"][1:] == (True, [total] * 2, [float(WORLD)] * 2)
        assert out["held"] == (True, True)
        assert out["p2p"] == (["Work"] * 4, [True] * 4, [r ^ 1] * 2, [12, 8], [[r ^ 1] * 2, [10 + (r ^ 1)] * 3])
        assert out["failed"][0] == "MismatchError" and "count" in out["failed"][1], out["failed"]
        assert out["after"][0] == [float(WORLD)]
        batch, caller = out["classes"]
        assert batch >= 1 and caller == os.SCHED_OTHER, out["classes"]


def test_issue_lock_is_a_lock_whose_waiters_release_the_gil():
    """ProcessGroup._lock (csrc/bindings/issue_lock.h): threading.Lock's calls, only its holder
    releases it, and a thread that finds it held waits without the GIL, so the holder (which
    needs the GIL) goes on and releases it."""
    from pycollect import _C

    lock = _C.IssueLock()
    assert not lock.locked()
    with lock:
        assert lock.locked()
    assert not lock.locked()
    with pytest.raises(RuntimeError, match="does not hold"):
        lock.release()
    with pytest.raises(TypeError, match="no arguments"):
        _C.IssueLock(1)
    order, refused = [], []

    def other():
        try:
            lock.release()  # not its own
        except RuntimeError as e:
            refused.append(str(e))
        with lock:
            order.append("other")

    lock.acquire()
    t = threading.Thread(target=other)
    t.start()
    time.sleep(0.2)  # the other thread waits on the lock meanwhile, without the GIL
    order.append("holder")
    lock.release()
    t.join(10)
    assert not t.is_alive()
    assert order == ["holder", "other"]
    assert refused and "does not hold" in refused[0]


_ATTRIBUTE_READER = """
import mmap, sys, warnings
import torch
import pycollect as pc
from pycollect import _buffers
from pycollect.world import default


def no_native(torch):  # as where pycollect._torch was built for another torch, or fails to import
    if sys.argv[2] == "fails":
        raise ImportError("pycollect._torch: undefined symbol (a stand-in)")
    return None


_buffers.prebuilt = no_native
pc.init_process_group(init_method=sys.argv[1], rank=0, world_size=1)
assert "pycollect._torch" not in sys.modules
_buffers._torch_kinds()
g = default()
t = torch.full((3,), 2.0)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    mapped = torch.frombuffer(mmap.mmap(-1, 4096, prot=mmap.PROT_READ), dtype=torch.float32, count=4)
print(g.fast.all_reduce(t, 0), t.tolist(), g.fast.all_reduce(torch.ones(4, 4).t(), 0),
      g.fast.all_reduce(torch.ones(2, dtype=torch.uint16), 0), g.fast.all_reduce(mapped, 0),
      g.fast.all_reduce(torch.nn.Parameter(torch.ones(2)), 0), "pycollect._torch" in sys.modules)
rows = torch.zeros(2, 3)  # all_to_all_single's rows: the first dimension, read as `shape`
print(g.fast.all_to_all_single(rows, torch.arange(6.0).reshape(2, 3), None, None), rows.tolist(),
      g.fast.all_to_all_single(rows.view(6), torch.tensor(1.0), None, None))
"""


@pytest.mark.parametrize("native", ["another torch", "fails"])
def test_fast_calls_read_tensors_by_attribute_without_the_native_backend(native):
    """Where pycollect._torch does not fit the running torch, or fails to import, the fast
    calls read a tensor through its Python attributes: the same answers (a Parameter, an
    exact type check, is left to the general path there), and no API call fails for it."""
    import subprocess
    import sys

    from pycollect.launch import free_port

    out = subprocess.run([sys.executable, "-c", _ATTRIBUTE_READER, f"tcp://127.0.0.1:{free_port()}", native],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert lines[0] == "None [2.0, 2.0, 2.0] False False False False False"
    assert lines[1] == "None [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] False"  # a 0-d input has no rows


def test_in_place_all_gather(pool4):
    for outs in pool4.run(case_in_place_all_gather):
        assert outs == [[k + 1 for k in range(WORLD) for _ in range(5)]] * 3


def test_send_recv_ring(pool4):
    for r, (first, last) in enumerate(pool4.run(case_ring_send_recv)):
        assert first == last == (r - 1) % WORLD


def test_large_isend_irecv_both_ways_does_not_deadlock(pool4):
    for r, res in enumerate(pool4.run(case_large_exchange_both_ways, timeout=60)):
        assert res == (float(r ^ 1), float(r ^ 1), 10.0 * (r ^ 1)), (r, res)


def test_messages_match_by_source_and_tag(pool4):
    sizes = {2: 2, 1: 4096, 0: 1 << 18}
    for r, (received, anyone, total) in enumerate(pool4.run(case_matching_by_source_and_tag, timeout=60)):
        peers = [q for q in range(WORLD) if q != r]
        assert total == WORLD, (r, total)
        for q in peers:
            for tag in (0, 1, 2):
                assert received[q, tag] == (q, 4 * sizes[tag], [100.0 * q + 10 * r + tag], [-1.0, -1.0]), \
                    (r, q, tag, received[q, tag])
        assert sorted(anyone) == [(q, [float(q)] * 3) for q in peers], (r, anyone)


def test_shrink_refuses_survivors_that_disagree_or_stay_away(pool4):
    """Ranks that exclude different ranks all raise MismatchError naming both views, at once;
    a survivor that never shrinks is named by the others' CollectiveTimeoutError, within the
    group's timeout (2 s) and a second."""
    disagree = pool4.run(shrink_cases.case_shrink_disagreement, "disagree", timeout=60)
    for r, (name, msg, took) in enumerate(disagree[:3]):
        assert name == "MismatchError" and "[3]" in msg and "[1, 3]" in msg and took < 2.0, (r, name, msg, took)
    missing = pool4.run(shrink_cases.case_shrink_disagreement, "missing", timeout=60)
    for r, (name, msg, took) in enumerate(missing[:2]):
        assert name == "CollectiveTimeoutError" and "rank(s) [2]" in msg and 2.0 <= took < 3.0, (r, name, msg, took)
    assert missing[2:] == [None, None] and disagree[3] is None


def test_transfers_complete_whoever_moves_the_bytes(pool4):
    for r, longest in enumerate(pool4.run(case_transfers_complete_whoever_moves_the_bytes, 300, 5.0, timeout=60)):
        assert longest < 5.0, (r, longest)


def test_recv_too_small_for_its_message_names_both_sizes(pool4):
    results = pool4.run(case_recv_mismatch, timeout=60)
    name, msg = results[1]
    assert name == "MismatchError", msg
    assert "count=10" in msg and "room for 40 bytes" in msg and "has 48 bytes" in msg and "rank 0" in msg, msg


def test_all_to_all_size_disagreement_is_a_mismatch(pool4):
    name, msg = pool4.run(case_all_to_all_disagreement, timeout=60)[1]
    assert name == "MismatchError", msg
    assert "count=3" in msg and "count=2" in msg and "rank 0" in msg, msg


def test_infinite_and_huge_timeouts(pool4):
    n = 4
    assert pool4.run(case_unlimited_timeouts) == [(True, [float(n * n)] * 4)] * n


def test_bytes_sent_is_the_ring_volume(pool4):
    n, nbytes = 4, (1 << 18) * 4
    for ring, gather, shared in pool4.run(case_bytes_sent):
        payload = 2 * (n - 1) * nbytes // n  # reduce-scatter + all-gather, one chunk per step
        assert payload <= ring <= payload + 2 * 32, ring  # plus a 32-byte header to each ring peer
        assert (n - 1) * 4000 <= gather <= (n - 1) * 4000 + 2 * 32, gather
        # Through the arena nothing goes on a link: what a rank put there for its peers.
        assert shared == 4000 + (1 << 18), shared


def test_recv_without_sender_times_out(pool4):
    name, msg, elapsed = pool4.run(case_recv_timeout, timeout=60)[0]
    assert name == "CollectiveTimeoutError", msg
    assert "recv from rank 1" in msg and "timed out" in msg, msg
    assert 0.9 < elapsed < 3.0, elapsed


def test_new_group_members_only(pool4):
    results = pool4.run(case_sub_group_ops)
    assert results[0] is None and results[2] is None
    assert results[1] == results[3] == (4.0, 3.0)


def test_barrier_waits_for_the_slowest(pool4):
    waits = pool4.run(case_barrier_waits)
    assert min(waits[r] for r in (0, 1, 3)) > 0.2, waits


def test_bad_input_raises_clear_errors_before_sending(pool4):
    for r, errors in enumerate(pool4.run(case_bad_inputs)):
        bad = {k: v for k, v in errors.items() if v != "ok"}
        assert not bad, f"rank {r}: {bad}"


def test_numpy_arrays_are_validated_on_every_call_even_reused():
    """The API reads a plain numpy array in one engine call (pycollect._C.array_span) and
    asks numpy the slow way only to explain a refusal: an array changed in place since
    its last call (dtype, shape, flags, memory) is seen as it is now."""
    from pycollect._buffers import as_buffer

    a = np.zeros(4, dtype=np.float64)
    b = as_buffer(a, "x", writable=True)
    assert (b.address, b.numel, b.dtype) == (a.ctypes.data, 4, "float64")
    a.dtype = np.int32  # the same array, reinterpreted in place
    assert (as_buffer(a, "x").numel, as_buffer(a, "x").dtype) == (8, "int32")
    a.dtype = np.uint16
    with pytest.raises(TypeError, match="uint16"):
        as_buffer(a, "x")
    a.dtype = np.float64
    a.resize(64, refcheck=False)  # new memory, same object
    assert (as_buffer(a, "x").address, as_buffer(a, "x").numel) == (a.ctypes.data, 64)
    a.flags.writeable = False
    assert as_buffer(a, "x").numel == 64  # read: fine
    with pytest.raises(ValueError, match="read-only"):
        as_buffer(a, "x", writable=True)
    m = np.zeros((4, 4), dtype=np.float32)
    assert as_buffer(m[1], "x").address == m.ctypes.data + 16  # a contiguous row, another address
    with pytest.raises(ValueError, match="not C-contiguous"):
        as_buffer(m[:, 1], "x")
    swapped = np.zeros(3, dtype=">f4")  # not native order: refused by the fast path, taken as before
    assert as_buffer(swapped, "x").dtype == "float32"
    for flag, want in ((np.bool_, "bool"), (np.int8, "int8"), (np.uint8, "uint8"), (np.int16, "int16"),
                       (np.int64, "int64"), (np.float16, "float16"), (np.longlong, "int64")):
        assert as_buffer(np.zeros(2, dtype=flag), "x").dtype == want


def test_api_names_are_kept_in_the_package_after_first_use():
    """pycollect.all_reduce resolves once (the package's __getattr__), then is a plain attribute."""
    import pycollect.api

    assert pc.all_reduce is pycollect.api.all_reduce
    assert pc.__dict__["all_reduce"] is pycollect.api.all_reduce
    with pytest.raises(AttributeError):
        pc.no_such_name  # noqa: B018


def test_call_before_init_raises():
    with pytest.raises(pc.NotInitializedError, match="init_process_group"):
        pc.all_reduce(torch.ones(1))
    with pytest.raises(pc.NotInitializedError):
        pc.get_rank()


@pytest.mark.parametrize("kind", ["all_gather", "count", "count_pipelined", "algo", "algo_hd", "algo_tree", "algo_bruck",
                                  "algo_bruck_coalesced", "reduce", "gather_size", "scatter_size"])
def test_mismatched_calls_fail_on_every_rank(pool4, kind):
    results = pool4.run(case_mismatch, kind, timeout=60)
    other = {"all_gather": "all_gather(count=50", "count": "all_reduce(count=99",
             "count_pipelined": "all_reduce(count=99999", "algo": "direct)",
             "algo_hd": "halving_doubling)", "algo_tree": "tree)", "algo_bruck": "bruck)",
             "algo_bruck_coalesced": "bruck)",
             "reduce": "reduce(count=100, float32, SUM, root=0)", "gather_size": "gather(count=7",
             "scatter_size": "scatter(count=5000"}[kind]
    mine = {"gather_size": "gather(count=5000", "scatter_size": "scatter(count=100", "algo_bruck": "all_gather(count=100",
            "algo_bruck_coalesced": "ring)"}.get(kind, "all_reduce(count=100")
    for r, ((name, msg), elapsed, later) in enumerate(results):
        assert name in ("MismatchError",), f"rank {r}: {name}: {msg}"
        assert mine in msg and other in msg, f"rank {r}: {msg}"
        assert elapsed < 3.0, f"rank {r} took {elapsed:.2f} s"
        assert later == "GroupFailedError", f"rank {r}: {later}"


def test_settings_that_shape_the_wire_must_agree(pool4):
    """The pipelined hierarchy's slices follow PYCOLLECT_SEGMENT_BYTES, which no header
    carries: a rank set otherwise gets a wrong result or a hang. So a group whose ranks
    disagree fails as it forms, on every rank, naming the setting and both values; the
    engine's default set explicitly is no disagreement. (A device call's pieces, which
    PYCOLLECT_STAGING_BYTES cuts, are counted in its header: test_staging.)"""
    for r, (outcome, after) in enumerate(pool4.run(case_wire_settings, "segment_bytes", 4096)):
        assert outcome.startswith("MismatchError") and "PYCOLLECT_SEGMENT_BYTES" in outcome \
            and "524288 on rank 0, 4096 on rank 1" in outcome, (r, outcome)
        assert after == [4.0] * 3, (r, after)
    for r, (outcome, _) in enumerate(pool4.run(case_wire_settings, "segment_bytes", 512 * 1024)):
        assert outcome == "formed", (r, outcome)


def test_barrier_timeout_argument_overrides_the_group(pool4):
    name, message, elapsed = pool4.run(case_barrier_timeout_argument, timeout=60)[0]
    assert name == "CollectiveTimeoutError" and "barrier" in message and "timed out" in message, message
    assert 0.4 < elapsed < 5.0, elapsed


def test_timeout_names_op_step_and_peer(pool4):
    results = pool4.run(case_timeout, timeout=60)
    for r, res in enumerate(results):
        if r == 2:
            continue
        name, msg, elapsed = res
        if r in (1, 3):  # rank 2's neighbours wait on it directly
            assert name == "CollectiveTimeoutError", f"rank {r}: {name} {msg}"
            assert "all_reduce" in msg and "step" in msg and "rank 2" in msg, msg
        else:  # rank 0 sees its neighbours give up, and learns why from them
            assert name in ("CollectiveTimeoutError", "PeerLostError"), f"rank {r}: {name} {msg}"
            assert "timed out" in msg and "rank 2" in msg, msg
        assert 0.9 < elapsed < 5.0, elapsed
    assert isinstance(pc.CollectiveTimeoutError("x"), TimeoutError)


def test_import_registers_the_torch_backend():
    import torch.distributed as dist

    assert "pycollect" in dist.Backend.backend_list
    assert pc.memory.memory_calculator(params_billions=70, num_gpus=8, sharding="fsdp")["fits_on_80gb"] is False


def case_engine_loop(iters):
    """Every op of the engine's C++ latency loop on a 2-rank group (ranks 0 and 1; the
    others None), 64 B, data filled with rank + 1: {op: (times, data, out)}."""
    from rank_pool import paired_groups

    from pycollect.benchmark.engine import OPS, engine_loop

    pair = paired_groups(2)
    if pair is None:
        return None
    group, rank = pair[0], pair[0].rank
    results = {}
    for op in OPS:
        times, data, out = engine_loop(op, 64, iters, warmup=1, group=group, fill=rank + 1.0)
        results[op] = (times, data.tolist(), None if out is None else out.tolist())
    return results


def test_engine_latency_loop_runs_each_op_from_cpp(pool4):
    """The loop really runs the op: after warm-up + iters in-place sums of (1, 2) every rank
    holds 3 * 2^(calls - 1); broadcast and the ping-pong leave rank 0's 1 on rank 1; the
    gather fills only the root's output, the scatter gives each rank the root's 1s, the
    all-to-all each rank a row from each, the reduce rank 0 its 1 plus rank 1's 2 per call."""
    iters = 5
    calls = iters + 1
    results = pool4.run(case_engine_loop, iters, timeout=120)
    assert results[2:] == [None, None]
    expect = {"all_reduce": 3.0 * 2 ** (calls - 1), "broadcast": 1.0, "ping_pong": 1.0}
    for rank, res in enumerate(results[:2]):
        for op, (times, data, out) in res.items():
            assert len(times) == iters and all(0 < t < 5e6 for t in times), (op, times)
            if op in expect:
                assert data == [expect[op]] * 16, (rank, op, data)
            elif op == "barrier":
                assert data == [rank + 1.0] * 16
            elif op == "reduce":  # into rank 0's buffer, rank 1's left as it was
                assert data == [1.0 + 2.0 * calls if rank == 0 else 2.0] * 16, (rank, data)
            elif op == "all_gather":  # 64 B gathered: 8 floats from each rank
                assert out == [1.0] * 8 + [2.0] * 8, (rank, out)
            elif op == "gather":  # to rank 0 only: rank 1's output keeps its zeros
                assert out == ([1.0] * 8 + [2.0] * 8 if rank == 0 else [0.0] * 16), (rank, out)
            elif op == "scatter":  # rank 0's input rows, all 1s
                assert out == [1.0] * 8, (rank, out)
            elif op == "all_to_all":  # row p from rank p, filled with p + 1
                assert out == [1.0] * 8 + [2.0] * 8, (rank, out)
            else:  # reduce_scatter: each rank's 8-float slice of 1 + 2
                assert out == [3.0] * 8, (rank, out)
