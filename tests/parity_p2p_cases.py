"""Worker side of tests/test_parity_p2p.py: point-to-point programs that Gloo runs, each
run on a "gloo" group and on a "pycollect" group of the same ranks (issue 54).

    case_programs(size, names)   # {name: {"gloo": result, "pycollect": result}} on every rank

A program is a function of (group, rank) run by every rank of a group of `size` ranks (the
session pool's 3 ranks, or ranks 0 and 1): ranks 0 and 1 exchange messages in an order
that used to end a pycollect group (a receive posted before a collective, tags out of
order, a buffer larger than its message, receives from any source), while every rank
runs the collectives between them. Each returns what its rank received, as lists, and
which rank sent it; an error is returned as its text, so one backend's failure is a
result to compare, not a hang of the pool.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist
from test_torch_backend import _pair

BIG = 300_000  # floats: 1.2 MB, sent by rendezvous on pycollect (larger than the eager limit)


def _message(sender: int, k: int, n: int = 4) -> torch.Tensor:
    """The k-th message a rank sends: its values say who sent it and which it was."""
    return torch.arange(n, dtype=torch.float32) + 1000.0 * sender + 100.0 * k


def _sum(t: torch.Tensor) -> float:
    return float(t.double().sum())


def irecv_before_barrier(g, r):
    b = torch.zeros(4)
    if r == 0:
        w = dist.irecv(b, 1, group=g)
        dist.barrier(group=g)
        w.wait()
    elif r == 1:
        dist.barrier(group=g)
        dist.send(_message(1, 0), 0, group=g)
    else:
        dist.barrier(group=g)
    return b.tolist()


def irecv_before_all_reduce(g, r):
    b, t = torch.zeros(4), torch.full((3,), float(r + 1))
    if r == 0:
        w = dist.irecv(b, 1, group=g)
        dist.all_reduce(t, group=g)
        w.wait()
    elif r == 1:
        dist.all_reduce(t, group=g)
        dist.send(_message(1, 0), 0, group=g)
    else:
        dist.all_reduce(t, group=g)
    return b.tolist(), t.tolist()


def both_irecv_all_reduce_send(g, r):
    """Ranks 0 and 1 each post a receive, all-reduce, send to the other, then wait."""
    b, t = torch.zeros(BIG), torch.full((3,), float(r + 1))
    if r < 2:
        w = dist.irecv(b, 1 - r, group=g)
        dist.all_reduce(t, group=g)
        dist.send(_message(r, 0, BIG), 1 - r, group=g)
        w.wait()
    else:
        dist.all_reduce(t, group=g)
    return _sum(b), t.tolist()


def async_all_reduce_then_send(g, r):
    b, t = torch.zeros(4), torch.full((3,), float(r + 1))
    if r == 0:
        w = dist.all_reduce(t, group=g, async_op=True)
        dist.send(_message(0, 0), 1, group=g)
        w.wait()
    elif r == 1:
        dist.recv(b, 0, group=g)
        dist.all_reduce(t, group=g)
    else:
        dist.all_reduce(t, group=g)
    return b.tolist(), t.tolist()


def isend_then_all_reduce(g, r):
    b, t = torch.zeros(BIG), torch.full((3,), float(r + 1))
    if r == 0:
        w = dist.isend(_message(0, 0, BIG), 1, group=g)
        dist.all_reduce(t, group=g)
        w.wait()
    elif r == 1:
        dist.all_reduce(t, group=g)
        dist.recv(b, 0, group=g)
    else:
        dist.all_reduce(t, group=g)
    return _sum(b), t.tolist()


def collective_from_a_callback(g, r):
    """Rank 0 issues its second all-reduce from the first one's Future callback, then (a moment
    later, so that the callback has run) its main thread sends to rank 1; rank 1 receives
    between the two all-reduces."""
    b, t, u = torch.zeros(4), torch.full((3,), float(r + 1)), torch.full((2,), float(10 * r))
    if r == 0:
        issued = []
        fut = dist.all_reduce(t, group=g, async_op=True).get_future()
        chained = fut.then(lambda _f: issued.append(dist.all_reduce(u, group=g, async_op=True)))
        time.sleep(0.2)
        dist.send(_message(0, 0), 1, group=g)
        chained.wait()
        issued[0].wait()
    else:
        dist.all_reduce(t, group=g)
        if r == 1:
            dist.recv(b, 0, group=g)
        dist.all_reduce(u, group=g)
    return b.tolist(), t.tolist(), u.tolist()


def _tags_out_of_order(g, r, first_n, second_n):
    """Rank 1 sends tag 6 (`first_n` floats), then tag 5 (`second_n`); rank 0 receives tag 5 first."""
    b5, b6 = torch.zeros(second_n), torch.zeros(first_n)
    if r == 1:
        w6 = dist.isend(_message(1, 6, first_n), 0, group=g, tag=6)
        w5 = dist.isend(_message(1, 5, second_n), 0, group=g, tag=5)
        w6.wait()
        w5.wait()
    elif r == 0:
        dist.recv(b5, 1, group=g, tag=5)
        dist.recv(b6, 1, group=g, tag=6)
    return _sum(b5), _sum(b6)


def tags_out_of_order_small(g, r):
    return _tags_out_of_order(g, r, 3, 5)


def tags_out_of_order_large_first(g, r):
    return _tags_out_of_order(g, r, BIG, 5)


def tags_out_of_order_large_second(g, r):
    return _tags_out_of_order(g, r, 5, BIG)


def larger_buffer(g, r):
    """A message of 5 floats into a buffer of 8: its front is filled, the rest kept."""
    b = torch.full((8,), -1.0)
    if r == 1:
        dist.send(torch.arange(5, dtype=torch.float32), 0, group=g)
    elif r == 0:
        dist.recv(b, 1, group=g)
    return b.tolist()


def other_dtype(g, r):
    """float32 sent, int32 received: the bytes arrive as they are."""
    b = torch.zeros(4, dtype=torch.int32)
    if r == 1:
        dist.send(torch.tensor([1.0, -2.5, 3.25, 1e-3]), 0, group=g)
    elif r == 0:
        dist.recv(b, 1, group=g)
    return b.tolist()


def any_source_by_tag(g, r):
    """Rank 1 sends tag 3, then tag 7; rank 0 receives tag 7 from any source first."""
    b3, b7 = torch.zeros(4), torch.zeros(4)
    sources = []
    if r == 1:
        w3 = dist.isend(_message(1, 3), 0, group=g, tag=3)
        w7 = dist.isend(_message(1, 7), 0, group=g, tag=7)
        w3.wait()
        w7.wait()
    elif r == 0:
        sources.append(dist.recv(b7, None, group=g, tag=7))
        sources.append(dist.recv(b3, 1, group=g, tag=3))
    return sources, b3.tolist(), b7.tolist()


def any_source_then_collective(g, r):
    b, t = torch.zeros(4), torch.full((3,), float(r + 1))
    source = None
    if r == 0:
        w = dist.irecv(b, None, group=g, tag=1)
        dist.all_reduce(t, group=g)
        w.wait()
        source = w._source_rank()
    elif r == 1:
        dist.all_reduce(t, group=g)
        dist.send(_message(1, 1), 0, group=g, tag=1)
    else:
        dist.all_reduce(t, group=g)
    return source, b.tolist(), t.tolist()


def any_source_then_send(g, r):
    """Rank 0 posts a receive from any source, then sends to rank 1, which answers."""
    b, c = torch.zeros(4), torch.zeros(4)
    source = None
    if r == 0:
        w = dist.irecv(b, None, group=g)
        dist.send(_message(0, 0), 1, group=g)
        w.wait()
        source = w._source_rank()
    elif r == 1:
        dist.recv(c, 0, group=g)
        dist.send(c + 1, 0, group=g)
    return source, b.tolist(), c.tolist()


def any_source_from_everyone(g, r):
    """Every other rank sends rank 0 three messages with tag 4, rank 0 takes them from any
    source: each sender's arrive in the order sent. Returns (source, message) in the order
    received, per sender."""
    n = dist.get_world_size(g)
    if r != 0:
        works = [dist.isend(_message(r, k), 0, group=g, tag=4) for k in range(3)]
        for w in works:
            w.wait()
        return None
    per_sender: dict = {}
    for _ in range(3 * (n - 1)):
        b = torch.zeros(4)
        s = dist.recv(b, None, group=g, tag=4)
        per_sender.setdefault(s, []).append(b[0].item())
    return sorted(per_sender.items())


PROGRAMS = {f.__name__: f for f in (
    irecv_before_barrier, irecv_before_all_reduce, both_irecv_all_reduce_send, async_all_reduce_then_send,
    isend_then_all_reduce, collective_from_a_callback, tags_out_of_order_small, tags_out_of_order_large_first,
    tags_out_of_order_large_second, larger_buffer, other_dtype, any_source_by_tag, any_source_then_collective,
    any_source_then_send, any_source_from_everyone)}


# -- the same on pycollect's Python API ----------------------------------------------------
# Its async calls and isend/irecv take the C fast entries (api._fast_entries), not the torch
# backend: these programs take the module (torch.distributed or pycollect) with the group.


def _source(work):
    """Who sent what an irecv from any source received (torch's and the API's spellings)."""
    return work._source_rank() if hasattr(work, "_source_rank") else work.source_rank()


def api_async_waited_in_reverse(d, g, r):
    """Every rank issues an async all-reduce, broadcast, flat all-gather and barrier, then
    waits for them last first."""
    n = d.get_world_size(g)
    t, u, a = torch.full((3,), float(r + 1)), torch.full((2,), float(10 * r)), torch.zeros(2 * n)
    works = [d.all_reduce(t, group=g, async_op=True), d.broadcast(u, 1, group=g, async_op=True),
             d.all_gather_into_tensor(a, torch.full((2,), float(r)), group=g, async_op=True),
             d.barrier(group=g, async_op=True)]
    for w in reversed(works):
        w.wait()
    return t.tolist(), u.tolist(), a.tolist()


def api_isend_irecv_out_of_order(d, g, r):
    """Rank 1 isends tags 3 then 7; rank 0 irecvs tag 7 first, then tag 3 from any source,
    with an async all-reduce of every rank between, and waits for the all-reduce first."""
    b3, b7, t = torch.zeros(4), torch.zeros(4), torch.full((3,), float(r + 1))
    source = None
    if r == 0:
        w7 = d.irecv(b7, 1, group=g, tag=7)
        w3 = d.irecv(b3, None, group=g, tag=3)
        d.all_reduce(t, group=g, async_op=True).wait()
        w7.wait()
        w3.wait()
        source = _source(w3)
    elif r == 1:
        works = [d.isend(_message(1, 3), 0, group=g, tag=3), d.isend(_message(1, 7), 0, group=g, tag=7)]
        d.all_reduce(t, group=g, async_op=True).wait()
        for w in works:
            w.wait()
    else:
        d.all_reduce(t, group=g, async_op=True).wait()
    return source, b3.tolist(), b7.tolist(), t.tolist()


API_PROGRAMS = {f.__name__: f for f in (api_async_waited_in_reverse, api_isend_irecv_out_of_order)}


def _run_each(names, gloo_group, runs) -> dict:
    """{name: {backend: what the program returned, or its error's text}} for each program
    named, run on each of `runs` ((backend, run(name)) in turn), every run started together."""
    out = {}
    for name in names:
        out[name] = {}
        for backend, run in runs:
            dist.barrier(group=gloo_group)  # each program starts together, whatever the last one did
            try:
                out[name][backend] = run(name)
            except Exception as e:  # noqa: BLE001 - a failure is a result to compare
                out[name][backend] = f"{type(e).__name__}: {e}"
    return out


def case_api_programs(size: int, names):
    """Each named API program on Gloo (torch.distributed), then on pycollect's API, over
    ranks [0, size); None off the group."""
    import pycollect

    pair = _pair(size)
    api_group = pycollect.new_group(list(range(size)))  # every rank calls it, members or not
    if pair is None:
        return None
    gg = pair[1]
    rank = dist.get_rank(gg)
    out = _run_each(names, gg, (("gloo", lambda name: API_PROGRAMS[name](dist, gg, rank)),
                                ("api", lambda name: API_PROGRAMS[name](pycollect, api_group, rank))))
    # Every rank done before any leaves: a rank's links closing fails the others' group.
    dist.barrier(group=gg)
    pycollect.destroy_process_group(api_group)
    return out


def case_programs(size: int, names):
    """Each named program on Gloo, then on pycollect, over ranks [0, size); None off the group."""
    pair = _pair(size)
    if pair is None:
        return None
    pg, gg = pair
    return _run_each(names, gg, (("gloo", lambda name: PROGRAMS[name](gg, dist.get_rank(gg))),
                                 ("pycollect", lambda name: PROGRAMS[name](pg, dist.get_rank(pg)))))
