"""Whatever point-to-point program runs on Gloo runs on pycollect (issue 54), in the
session's 3-rank pool: each program of tests/parity_p2p_cases.py runs on a "gloo" group
and on a "pycollect" group of the same ranks (all three, and ranks 0 and 1), and every
rank must end with the same results on both, which must also be the ones the program
means (computed here, not taken from either backend).

The programs are the ones that used to end a pycollect group while Gloo ran them: a
receive posted before a barrier or an all-reduce, a send issued while an asynchronous
all-reduce waits for the peer, a collective issued from a Future's callback while the
main thread sends, tags received out of the order sent (small messages and large ones,
which pycollect sends by rendezvous), a receive buffer larger than its message or of
another dtype, and receives from any source by tag, before a collective, before a send
the peer answers, and from every other rank at once.
"""
from __future__ import annotations

import struct

import pytest
import parity_p2p_cases as pc_cases
from parity_p2p_cases import API_PROGRAMS, BIG, PROGRAMS

WORLD = 3


def _message_sum(sender: int, k: int, n: int) -> float:
    return float(sum(range(n))) + n * (1000.0 * sender + 100.0 * k)


def _message(sender: int, k: int, n: int = 4) -> list:
    return [i + 1000.0 * sender + 100.0 * k for i in range(n)]


def _expected(name: str, rank: int, size: int):
    """What rank `rank` of a group of `size` must return from program `name`."""
    reduced = [float(sum(range(1, size + 1)))] * 3
    zeros = [0.0] * 4
    if name == "irecv_before_barrier":
        return _message(1, 0) if rank == 0 else zeros
    if name in ("irecv_before_all_reduce", "async_all_reduce_then_send"):
        got = {"irecv_before_all_reduce": 0, "async_all_reduce_then_send": 1}[name]
        sender = 1 - got
        return (_message(sender, 0) if rank == got else zeros), reduced
    if name == "both_irecv_all_reduce_send":
        return (_message_sum(1 - rank, 0, BIG) if rank < 2 else 0.0), reduced
    if name == "isend_then_all_reduce":
        return (_message_sum(0, 0, BIG) if rank == 1 else 0.0), reduced
    if name == "collective_from_a_callback":
        return (_message(0, 0) if rank == 1 else zeros), reduced, [float(10 * sum(range(size)))] * 2
    if name.startswith("tags_out_of_order"):
        first_n, second_n = {"small": (3, 5), "large_first": (BIG, 5), "large_second": (5, BIG)}[
            name[len("tags_out_of_order_"):]]
        return (_message_sum(1, 5, second_n), _message_sum(1, 6, first_n)) if rank == 0 else (0.0, 0.0)
    if name == "larger_buffer":
        return [0.0, 1.0, 2.0, 3.0, 4.0, -1.0, -1.0, -1.0] if rank == 0 else [-1.0] * 8
    if name == "other_dtype":
        as_int = list(struct.unpack("<4i", struct.pack("<4f", 1.0, -2.5, 3.25, 1e-3)))
        return as_int if rank == 0 else [0] * 4
    if name == "any_source_by_tag":
        return ([1, 1], _message(1, 3), _message(1, 7)) if rank == 0 else ([], zeros, zeros)
    if name == "any_source_then_collective":
        return (1, _message(1, 1), reduced) if rank == 0 else (None, zeros, reduced)
    if name == "any_source_then_send":
        answer = [v + 1 for v in _message(0, 0)]
        if rank == 0:
            return 1, answer, zeros
        return None, zeros, (_message(0, 0) if rank == 1 else zeros)
    if name == "any_source_from_everyone":
        if rank != 0:
            return None
        return [(s, [1000.0 * s + 100.0 * k for k in range(3)]) for s in range(1, size)]
    raise KeyError(name)


def _as_plain(x):
    """Tuples and lists alike (results cross process boundaries as either)."""
    if isinstance(x, (list, tuple)):
        return [_as_plain(v) for v in x]
    return x


def _compare(results, size: int, names, expected, backends) -> None:
    """Every rank of [0, size) ended each program with `expected(name, rank, size)` on each
    backend; the others had no part (None)."""
    problems = []
    for rank, per_program in enumerate(results):
        if rank >= size:
            assert per_program is None
            continue
        for name in names:
            want = _as_plain(expected(name, rank, size))
            for backend in backends:
                got = per_program[name][backend]
                if _as_plain(got) != want:
                    problems.append(f"{name}, rank {rank}, {backend}: {got!r}, expected {want!r}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("size", [WORLD, 2])
def test_point_to_point_programs_run_as_on_gloo(pool3, size):
    names = list(PROGRAMS) if size >= 3 else [n for n in PROGRAMS if n != "any_source_from_everyone"]
    _compare(pool3.run(pc_cases.case_programs, size, names), size, names, _expected, ("gloo", "pycollect"))


def _expected_api(name: str, rank: int, size: int):
    """What rank `rank` of a group of `size` must return from API program `name`."""
    reduced = [float(sum(range(1, size + 1)))] * 3
    if name == "api_async_waited_in_reverse":
        return reduced, [10.0] * 2, [float(k // 2) for k in range(2 * size)]
    if name == "api_isend_irecv_out_of_order":
        if rank == 0:
            return 1, _message(1, 3), _message(1, 7), reduced
        return None, [0.0] * 4, [0.0] * 4, reduced
    raise KeyError(name)


@pytest.mark.parametrize("size", [WORLD, 2])
def test_api_async_programs_run_as_on_gloo(pool3, size):
    """pycollect's own API, whose async calls, isends and irecvs take the C fast entries:
    the same programs on Gloo and on it end with the same results, the ones meant."""
    names = list(API_PROGRAMS)
    _compare(pool3.run(pc_cases.case_api_programs, size, names), size, names, _expected_api, ("gloo", "api"))
