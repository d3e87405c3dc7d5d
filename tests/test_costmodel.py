"""The cost model (pycollect.costmodel): exact formulas on synthetic parameters, the fit,
the choice and its crossovers, the `pycollect model` command, the memory planner's use of
it, and the group's automatic-choice table (the same on every rank)."""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import pytest

from pycollect.costmodel import (ENGINE_ALGOS, FORMULAS, Params, auto_table, bus_bandwidth, choose, crossovers,
                                 engine_choice,
                                 parse_rate, parse_time, predict)
from pycollect.costmodel.fit import fit, samples_from_bench

# Round numbers so the hand computations below are exact.
P = Params(alpha=1e-6, beta=1e-9, gamma=2e-9, overhead=0.0, overlap=0.0)


def test_direct_by_hand():
    # alpha + (p-1) n beta + p n gamma: 1 us + 3*1000 ns + 4*2000 ns = 12 us
    assert predict("all_reduce", 1000, 4, "direct", P) == pytest.approx(12e-6)


def test_ring_unpipelined_by_hand():
    # n = 3000 at 3 ranks: chunks of 1000 B, one segment each: L = 1 + 1 = 2 us, R = 2 us.
    # reduce-scatter (p-1)(L+R) = 8 us, then p-1 all-gather hops 4 us, header 1 us: 13 us.
    assert predict("all_reduce", 3000, 3, "ring", P) == pytest.approx(13e-6)


def test_ring_pipelined_by_hand():
    # n = 8000 at 2 ranks, segments of 1000 B: chunk 4000 B, k = 4, L = 2 us, R = 2 us.
    # overlap 0: U = 4 us; RS = max(1*4*4, 1*4 + 3*4) = 16; then max(16 + 2, 4*(4 + 2)) = 24; + header 1 = 25 us.
    assert predict("all_reduce", 8000, 2, "ring", P, segment_bytes=1000) == pytest.approx(25e-6)
    # overlap 1: U = 2; RS = max(8, 4 + 6) = 10; max(10 + 2, 4*(2 + 2)) = 16; + 1 = 17 us.
    assert predict("all_reduce", 8000, 2, "ring", P.with_(overlap=1.0), segment_bytes=1000) == pytest.approx(17e-6)


def test_halving_doubling_and_tree_by_hand():
    # p = 6: p' = 4, r = 2, n = 4000: fold (1 + 4 + 8) + 2 log2(4) alpha (4) + 3/4 n (beta 3 + gamma 6 + beta 3)
    # + unfold (1 + 4) + header 1 = 13 + 4 + 12 + 5 + 1 = 35 us
    assert predict("all_reduce", 4000, 6, "halving_doubling", P) == pytest.approx(35e-6)
    # its messages go in segments, an alpha each: segments of 1000 B make the fold and unfold
    # 4 messages each, the halving/doubling rounds' 2000 and 1000 B 2 and 1: with the header
    # 1 + 4 + (2 + 1) * 2 + 4 = 15 alphas instead of 7, 43 us
    assert predict("all_reduce", 4000, 6, "halving_doubling", P, segment_bytes=1000) == pytest.approx(43e-6)
    # at 2 ranks it is the ring's exchange without the pipelining overlap: n = 8000 in 1000 B
    # segments, 4 each way: header 1 + 8 (1 + 1) + 4000 gamma (8) = 25 us, the ring's 25 at overlap 0
    assert predict("all_reduce", 8000, 2, "halving_doubling", P, segment_bytes=1000) == pytest.approx(25e-6)
    # p = 5: ceil(log2 5) = 3 rounds each way: 3 (1 + 4 + 8) + 3 (1 + 4) + header 1 = 55 us
    assert predict("all_reduce", 4000, 5, "tree", P) == pytest.approx(55e-6)
    # the tree pipelined: p = 2, n = 8000 in segments of 2000 B (k = 4): a segment up costs R = 1 + 2 + 4 us,
    # down B = 1 + 2 us; header 1 + first trip (7 + 3) + 3 more at max(7, 3): 32 us, against 35 unpipelined
    assert predict("all_reduce", 8000, 2, "tree", P, segment_bytes=2000) == pytest.approx(32e-6)
    assert predict("all_reduce", 8000, 2, "tree", P, segment_bytes=8000) == pytest.approx(35e-6)


def test_gather_scatter_broadcast_by_hand():
    # all-gather ring, N = 3000 at 3: 2 steps of one 1000 B segment (2 us) + header 1 us + the own
    # chunk's copy (1000 B at gamma, a memory pass, 2 us: overlap 0) = 7 us; with overlap 1 it hides: 5 us
    assert predict("all_gather", 3000, 3, "ring", P) == pytest.approx(7e-6)
    assert predict("all_gather", 3000, 3, "ring", P.with_(overlap=1.0)) == pytest.approx(5e-6)
    # bruck, N = 4000 at 4: header 1 + 2 alpha + 3/4 N beta (3) + the own block's copy N/4 gamma (2) = 8 us;
    # the copy runs beside round 0, so overlap 1 hides it: 6 us
    assert predict("all_gather", 4000, 4, "bruck", P) == pytest.approx(8e-6)
    assert predict("all_gather", 4000, 4, "bruck", P.with_(overlap=1.0)) == pytest.approx(6e-6)
    # round 0 goes in segments: of 500 B, its block is 2 messages (1 alpha more), round 1 one: 9 us
    assert predict("all_gather", 4000, 4, "bruck", P, segment_bytes=500) == pytest.approx(9e-6)
    # reduce-scatter ring = its all-reduce's first phase: 2 * (2 + 2) + header 1 = 9 us
    assert predict("reduce_scatter", 3000, 3, "ring", P) == pytest.approx(9e-6)
    # chain: 4 ranks, 3000 B in segments of 1000: (p - 2 + k) = 5 segment times of 2 us + header = 11 us
    assert predict("broadcast", 3000, 4, "chain", P, segment_bytes=1000) == pytest.approx(11e-6)


def test_arena_by_hand():
    """The shared arena's formulas (tuning/arena.py) read the arena's own set: alpha is a
    round of flags, beta a byte copied in or out of a slot, gamma a byte reduced."""
    A = Params(alpha=1e-6, beta=1e-9, gamma=2e-9, overhead=3e-6)
    links = P.with_(arena=A)
    # 2 ranks, 8 KiB (one phase): overhead 3 + a round 1 + copy in 8.192 + one reduction 16.384
    assert predict("all_reduce", 8192, 2, "shm", links) == pytest.approx((3 + 1 + 8.192 + 16.384) * 1e-6)
    # 4 ranks, 1 MiB (one pipelined round): (2p - 1)/p of it copied, (p - 1)/p reduced
    mib = 1 << 20
    assert predict("all_reduce", mib, 4, "shm", links) == pytest.approx(3e-6 + 1e-6 + 7 / 4 * mib * 1e-9
                                                                        + 3 / 4 * mib * 2e-9)
    # 3 MiB: three rounds of a slot, each with its round of flags
    assert predict("all_reduce", 3 * mib, 2, "shm", links) == pytest.approx(
        3e-6 + 3 * (1e-6 + 3 / 2 * mib * 1e-9 + 1 / 2 * mib * 2e-9))
    # all-gather of N = 3000 at 3: each part copied in (1000) and all out (3000)
    assert predict("all_gather", 3000, 3, "shm", links) == pytest.approx((3 + 1 + 4) * 1e-6)
    # reduce-scatter of N = 3000 at 3: the input copied in, a third of it reduced twice
    assert predict("reduce_scatter", 3000, 3, "shm", links) == pytest.approx((3 + 1 + 3 + 4) * 1e-6)
    # broadcast of 128 KiB: two rounds of 64 KiB, the last one's copy out behind the rest
    kib128 = 128 << 10
    assert predict("broadcast", kib128, 4, "shm", links) == pytest.approx(
        3e-6 + 2e-6 + (kib128 + kib128 / 2) * 1e-9)
    # one rank: the call's overhead alone; the links' formulas do not see the arena's set
    assert predict("all_reduce", 8192, 1, "shm", links) == pytest.approx(3e-6)
    assert predict("all_reduce", 8192, 2, "ring", links) == predict("all_reduce", 8192, 2, "ring", P)
    # without a set of its own, the built-in one (fitted on the development machine)
    assert P.arena_set() is not None and P.arena_set().arena is None
    assert Params.from_json(links.to_json()).arena.with_(source="") == A.with_(source="")
    with pytest.raises(ValueError, match="Params.arena"):
        Params(arena=links)


def test_fit_gives_the_arena_its_own_set():
    """Samples of the arena ("shm") fit a set of their own (Params.arena), apart from the
    links' samples, whose set comes out as it went in."""
    arena = Params(alpha=0.4e-6, beta=1 / 12e9, gamma=1 / 8e9, overhead=2e-6)
    true = Params(alpha=12e-6, beta=1 / 3e9, gamma=1 / 5e9, overhead=5e-6, arena=arena)
    samples = [(op, algo, float(n), p, predict(op, n, p, algo, true))
               for op, algos in (("all_reduce", ("ring", "shm")), ("all_gather", ("ring", "shm")),
                                 ("broadcast", ("chain", "shm")))
               for algo in algos for p in (2, 3, 4) for n in (8, 4096, 1 << 16, 1 << 20, 16 << 20)]
    got, err = fit(samples, cache_sizes=(None,), single_copy=(None,))
    assert err < 1e-6
    for name in ("alpha", "beta", "gamma", "overhead"):
        assert getattr(got.arena, name) == pytest.approx(getattr(arena, name), rel=1e-4), name
        assert getattr(got, name) == pytest.approx(getattr(true, name), rel=1e-4), name
    only, _ = fit([s for s in samples if s[1] == "shm"], cache_sizes=(None,), single_copy=(None,))
    assert only.arena.alpha == pytest.approx(arena.alpha, rel=1e-4) and only.alpha == Params().alpha


def test_shared_cores_stretch_costs():
    shared = P.with_(cores=2)
    assert predict("all_reduce", 1000, 4, "direct", shared) == pytest.approx(2 * 12e-6)
    # + wake per message once ranks outnumber cores: direct sends one message (its header's)
    assert predict("all_reduce", 1000, 4, "direct", shared.with_(wake=5e-6)) == pytest.approx(2 * 12e-6 + 5e-6)
    assert predict("all_reduce", 1000, 2, "direct", shared) == pytest.approx(predict("all_reduce", 1000, 2, "direct", P))


def test_wake_where_a_working_rank_shares_its_core():
    """A message costs `wake` more when its receiver shares a core with any rank of the
    call, working or only waiting; with a core per rank, never."""
    shared = P.with_(cores=2)  # 0 and 2 on core 0, 1 on core 1
    assert not shared.shares_core([1], 3) and shared.shares_core([2], 3) and shared.shares_core([0, 1], 3)
    assert not shared.shares_core([0, 1], 2) and not P.shares_core([0, 1, 2], 3)
    # chain, 3 ranks, one segment: header + 2 hops, each a message (1 us) + 1000 B (1 us).
    # Receivers 1 and 2 sit on different cores (nothing stretched), but rank 2 shares core 0
    # with the waiting root: the header's and the second hop's messages pay the wake (2 x 5 us);
    # the first hop's receiver, rank 1, has core 1 to itself.
    assert predict("broadcast", 1000, 3, "chain", shared) == pytest.approx(1e-6 + 2 * 2e-6)
    woken = shared.with_(wake=5e-6)
    assert predict("broadcast", 1000, 3, "chain", woken) == pytest.approx(1e-6 + 2 * 2e-6 + 2 * 5e-6)
    assert predict("broadcast", 1000, 2, "chain", woken) == pytest.approx(1e-6 + 2e-6)  # a core each


def test_only_the_working_ranks_share_a_core():
    shared = P.with_(cores=2)  # ranks pinned round-robin: 0 and 2 on core 0, 1 and 3 on core 1
    # chain, p = 4, 3000 B in 3 segments of 1000: header (receivers 1 and 3 on core 1) 2 us;
    # the first segment's 3 hops one receiver at a time, 2 us each; the other 2 segments one
    # segment time apart, in which core 1 receives twice: 2 x (2 + 2) us. 16 us.
    assert predict("broadcast", 3000, 4, "chain", shared, segment_bytes=1000) == pytest.approx(16e-6)
    # with a core per rank nothing is stretched: (p - 2 + k) = 5 segment times of 2 us + header
    assert predict("broadcast", 3000, 4, "chain", P, segment_bytes=1000) == pytest.approx(11e-6)
    # tree, p = 4, n = 1000: header (all 4 work: 2 per core) 2 us; distance 1: parents 0 and 2
    # reduce on one core (2 x (1 + 1 + 2) = 8 us), children 1 and 3 receive on one core
    # (2 x (1 + 1) = 4 us); distance 2: only rank 0 reduces (4 us), only rank 2 receives (2 us): 20 us
    assert predict("all_reduce", 1000, 4, "tree", shared) == pytest.approx(20e-6)
    # p = 3: the header 2 us, then every round has one working rank: 2 x (4 + 2) = 12 us: 14 us
    assert predict("all_reduce", 1000, 3, "tree", shared) == pytest.approx(14e-6)
    # halving-doubling, p = 3: fold (rank 1 receives) and unfold (rank 0) on one core each, the
    # survivors 1 and 2 on different cores: as on a core per rank, but for the header (2 us, not 1)
    assert (predict("all_reduce", 4000, 3, "halving_doubling", shared)
            == pytest.approx(predict("all_reduce", 4000, 3, "halving_doubling", P) + 1e-6))


def test_copies_within_a_core_are_faster():
    # halving-doubling, p = 4 on 2 cores, n = 4000: header 2 us (2 ranks per core); the round of
    # mask 2 pairs 0-2 and 1-3, each within a core; the round of mask 1 pairs across cores.
    # Per round, 2 receivers per core: alpha 2 us, gamma 4 ns/B, beta 1 ns/B per copy: 2 copies
    # (2 ns/B), or 2 / local_speedup within a core.
    # local_speedup 1: mask 2: (2 + 2000 x 6 ns) + (2 + 2000 x 2 ns) = 14 + 6; mask 1: (2 + 1000 x 6 ns)
    # + (2 + 1000 x 2 ns) = 8 + 4; total 2 + 20 + 12 = 34 us. local_speedup 2: mask 2 copies cost
    # 1 ns/B: (2 + 2000 x 5 ns) + (2 + 2000 x 1 ns) = 12 + 4: total 30 us.
    shared = P.with_(cores=2)
    assert predict("all_reduce", 4000, 4, "halving_doubling", shared) == pytest.approx(34e-6)
    assert predict("all_reduce", 4000, 4, "halving_doubling", shared.with_(local_speedup=2.0)) == pytest.approx(30e-6)
    # the ring's neighbours are on different cores: no change
    assert (predict("all_reduce", 4000, 4, "ring", shared.with_(local_speedup=2.0))
            == pytest.approx(predict("all_reduce", 4000, 4, "ring", shared)))
    # direct counts its p^2 pairs per core: on 2 cores at p = 4 each core receives 2 x 3 copies,
    # 2 of them within the core
    assert shared.with_(local_speedup=2.0).copies_all_pairs(4) == pytest.approx(2 * (1 / 2 + 2))


def test_reads_from_the_sender_cost_more_by_hand():
    # single_copy_alpha 5 us on messages of >= 1000 B, per copy the busiest core makes.
    reads = P.with_(single_copy_bytes=1000.0, single_copy_alpha=5e-6)
    # direct at 4, n = 1000: 12 us (test_direct_by_hand) + 3 reads = 27 us; n = 999: no read
    assert predict("all_reduce", 1000, 4, "direct", reads) == pytest.approx(27e-6)
    assert predict("all_reduce", 999, 4, "direct", reads) == pytest.approx(predict("all_reduce", 999, 4, "direct", P))
    # ring at 3, n = 3000: chunks of 1000 B, so each of the 4 moves (L) pays one read: 13 + 4 x 5 = 33 us;
    # at n = 2997 the chunks are 999 B and the header and moves cost as before
    assert predict("all_reduce", 3000, 3, "ring", reads) == pytest.approx(33e-6)
    assert predict("all_reduce", 2997, 3, "ring", reads) == pytest.approx(predict("all_reduce", 2997, 3, "ring", P))
    # Bruck at 4, N = 4000: round 0 sends one 1000 B block (a read), round 1 two (one 2000 B read): 8 + 10 us
    assert predict("all_gather", 4000, 4, "bruck", reads) == pytest.approx(18e-6)
    # on 2 cores, direct at 4: each core receives 2 x 3 copies, each a read: 6 x 5 us more than without
    shared = reads.with_(cores=2)
    assert (predict("all_reduce", 1000, 4, "direct", shared)
            == pytest.approx(predict("all_reduce", 1000, 4, "direct", shared.with_(single_copy_alpha=0.0)) + 30e-6))
    # where each rank has a core (2 ranks on 2 cores) the engine reads only from 1 MiB
    # (the ring carries the rest on both cores): 1000 B direct at 2 pays no read, 1 MiB one
    assert shared.single_copy_from(2) == 1 << 20 and shared.single_copy_from(3) == 1000.0
    assert reads.single_copy_from(2) == 1000.0  # cores unknown: as given
    for n, extra in ((1000, 0.0), (1 << 20, 5e-6)):
        assert (predict("all_reduce", n, 2, "direct", shared)
                == pytest.approx(predict("all_reduce", n, 2, "direct", shared.with_(single_copy_alpha=0.0)) + extra))
    with pytest.raises(ValueError, match="single_copy_bytes"):
        P.with_(single_copy_bytes=0)
    with pytest.raises(ValueError, match="single_copy_alpha"):
        P.with_(single_copy_alpha=-1e-6)


def test_busy_cores_share_dram():
    # direct, p = 2 on 2 cores: both ranks copy and reduce at once; with DRAM worth one core's
    # copies (mem_parallel 1) each runs at half speed: 1 us + (1 + 4 us) x 2 = 11 us
    both = P.with_(cores=2, mem_parallel=1.0)
    assert predict("all_reduce", 1000, 2, "direct", both) == pytest.approx(11e-6)
    assert predict("all_reduce", 1000, 2, "direct", P.with_(cores=2)) == pytest.approx(6e-6)
    # inside the caches nothing is shared: cache_bytes above the call, speedup 1
    assert predict("all_reduce", 1000, 2, "direct", both.with_(cache_bytes=1e6)) == pytest.approx(6e-6)
    with pytest.raises(ValueError, match="mem_parallel"):
        P.with_(mem_parallel=0.5)


def test_cache_term_by_hand():
    cached = P.with_(cache_bytes=1000.0, cache_speedup=2.0)
    # factor on beta and gamma: 1/2 up to 1000 B, 1 from 8000 B on, log-linear between (2/3 at 2000 B)
    assert [cached.per_byte(w) for w in (500, 1000, 2000, 4000, 8000, 1e9)] == pytest.approx(
        [0.5, 0.5, 2 / 3, 5 / 6, 1.0, 1.0])
    # direct at 1000 B / 4 ranks: 1 us + (3 us + 8 us) / 2 = 6.5 us; at 2000 B: 1 + (6 + 16) * 2/3 us
    assert predict("all_reduce", 1000, 4, "direct", cached) == pytest.approx(6.5e-6)
    assert predict("all_reduce", 2000, 4, "direct", cached) == pytest.approx(1e-6 + 22e-6 * 2 / 3)
    assert predict("all_reduce", 8000, 4, "direct", cached) == pytest.approx(predict("all_reduce", 8000, 4, "direct", P))
    # the ring all-reduce forwards a block of two segments per chunk while it is in cache: n = 16000
    # at 2 ranks in 250 B segments (k = 32), block 2 * 250 * 2 = 1000 B, so L = 1 + 0.125 us, but
    # the reductions work on the whole vector, R = 0.5 us: 32 (L + R + L) + header 1 = 89 us, not 97
    assert predict("all_reduce", 16000, 2, "ring", cached, segment_bytes=250) == pytest.approx(89e-6)
    assert predict("all_reduce", 16000, 2, "ring", P, segment_bytes=250) == pytest.approx(97e-6)
    # the working set of all-gather is the whole output: N = 3000 is between 1000 and 8000
    assert cached.per_byte(3000) < 1 and predict("all_gather", 3000, 3, "ring", cached) < 7e-6
    with pytest.raises(ValueError, match="cache_speedup"):
        P.with_(cache_bytes=1000.0, cache_speedup=0.5)
    with pytest.raises(ValueError, match="cache_bytes"):
        P.with_(cache_bytes=-1.0)


def test_busbw_uses_nccl_tests_factors():
    assert bus_bandwidth("all_reduce", 1e9, 4, 1.0) == pytest.approx(1.5e9)
    assert bus_bandwidth("all_gather", 1e9, 4, 1.0) == pytest.approx(0.75e9)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="knows no all_reduce algorithm 'bogus'"):
        predict("all_reduce", 8, 2, "bogus", P)
    with pytest.raises(ValueError, match="world_size"):
        predict("all_reduce", 8, 0, "ring", P)
    with pytest.raises(ValueError, match="alpha"):
        Params(alpha=-1.0)


def test_units():
    assert parse_time("5us") == pytest.approx(5e-6)
    assert parse_time("2.5ms") == pytest.approx(2.5e-3)
    assert parse_rate("400gbit") == pytest.approx(1 / 50e9)
    assert parse_rate("100Gbps") == pytest.approx(1 / 12.5e9)
    assert parse_rate("50GB/s") == pytest.approx(1 / 50e9)
    with pytest.raises(ValueError, match="bandwidth"):
        parse_rate("fast")


def _synthetic(true: Params):
    out = []
    for op, algos in (("all_reduce", ("ring", "direct")), ("all_gather", ("ring",)), ("broadcast", ("chain",))):
        for algo in algos:
            for p in (2, 3, 4):
                for n in (8, 65536, 1 << 20, 16 << 20, 64 << 20):
                    out.append((op, algo, float(n), p, predict(op, n, p, algo, true)))
    return out


@pytest.mark.parametrize("overlap", [0.0, 1.0])
def test_fit_recovers_synthetic_parameters(overlap):
    true = Params(alpha=12e-6, beta=1 / 3e9, gamma=1 / 5e9, overhead=25e-6, overlap=overlap, cores=2, wake=40e-6)
    got, err = fit(_synthetic(true), cores=2)
    assert err < 1e-6
    # 2 ranks have a core each, 3 and 4 share them: a set of parameters each, both the truth
    # (wake is a cost of shared cores only, so the 2-rank set has none to find)
    assert got.at(2) is got and got.at(3) is got.at(4) is got.crowded
    for params, names in ((got, ("alpha", "beta", "gamma", "overhead")),
                          (got.crowded, ("alpha", "beta", "gamma", "overhead", "wake"))):
        assert params.overlap == overlap
        for name in names:
            assert getattr(params, name) == pytest.approx(getattr(true, name), rel=1e-4), name


def test_fit_gives_crowded_ranks_their_own_parameters(tmp_path):
    # ranks with a core each move bytes at one speed; time-sliced ones at another
    own = Params(alpha=2e-6, beta=1 / 16e9, gamma=1 / 10e9, overhead=6e-6, cores=2)
    crowded = Params(alpha=1e-6, beta=1 / 8e9, gamma=1 / 8e9, overhead=25e-6, cores=2, wake=5e-6)
    true = own.with_(crowded=crowded)
    samples = _synthetic(true)
    assert all(s[4] == predict(s[0], s[2], 2, s[1], own) for s in samples if s[3] == 2)
    assert all(s[4] == predict(s[0], s[2], s[3], s[1], crowded) for s in samples if s[3] > 2)
    # The split is the point here, not the search over the other terms (test_fit_recovers_...
    # covers that): neither truth has a cache, shared DRAM or single-copy term, so those are
    # left out of the grid (3 combinations instead of 84, each fitted three times below).
    fit_split = functools.partial(fit, cache_sizes=(None,), mem_sharing=(False,), single_copy=(None,))
    got, err = fit_split(samples, cores=2)
    assert err < 1e-6
    for name in ("alpha", "beta", "gamma", "overhead"):
        assert getattr(got, name) == pytest.approx(getattr(own, name), rel=1e-4), name
        assert getattr(got.crowded, name) == pytest.approx(getattr(crowded, name), rel=1e-4), name
    assert got.crowded.wake == pytest.approx(5e-6, rel=1e-4)
    # one set for both fits them worse: the split is what explains them
    assert fit_split(samples, cores=2, crowded=False)[1] > 100 * err
    # where every sample is of one kind, one set
    assert fit_split([s for s in samples if s[3] > 2], cores=2)[0].crowded is None
    # saved and loaded whole; the description names both
    got.save(str(tmp_path / "m.json"))
    back = Params.load(str(tmp_path / "m.json"))
    assert back.crowded.with_(source="") == got.crowded.with_(source="")
    assert predict("all_reduce", 1 << 20, 4, "tree", back) == predict("all_reduce", 1 << 20, 4, "tree", got)
    assert "where ranks outnumber the cores: alpha 1.00 us, wake 5.0 us" in back.describe()
    # a NIC typed on top describes a cluster: no crowded set stays
    assert got.for_cluster(beta=1 / 50e9).crowded is None


def test_crowded_parameters_must_fit_their_cores():
    crowded = Params(cores=2)
    with pytest.raises(ValueError, match="crowded.*needs cores set"):
        Params(crowded=crowded)
    with pytest.raises(ValueError, match=r"the same \(4 here, 2 in crowded\)"):
        Params(cores=4, crowded=crowded)
    with pytest.raises(ValueError, match="without a crowded set of its own"):
        Params(cores=2, crowded=crowded.with_(crowded=crowded))


def test_fit_finds_a_cache_term():
    true = Params(alpha=12e-6, beta=1 / 3e9, gamma=1 / 5e9, overhead=0.0, overlap=0.0, cores=2,
                  cache_bytes=float(2 << 20), cache_speedup=1.6)
    samples = []
    for p in (2, 3, 4):
        for n in (65536, 256 << 10, 1 << 20, 4 << 20, 8 << 20, 16 << 20, 64 << 20):
            for op, algo in (("all_reduce", "ring"), ("all_reduce", "direct"), ("all_gather", "ring")):
                samples.append((op, algo, float(n), p, predict(op, n, p, algo, true)))
    got, err = fit(samples, cores=2)
    assert err < 1e-3
    assert got.cache_bytes == got.crowded.cache_bytes == true.cache_bytes
    # At 2 ranks these three algorithms keep both cores busy in every step, so the DRAM's
    # sharing and beta trade off there (any pair with the same product fits): the cache's
    # speedup is pinned down only where ranks outnumber the cores.
    assert got.crowded.cache_speedup == pytest.approx(1.6, rel=1e-3)
    # without the term the same points fit worse: the term is what explains them
    assert fit(samples, cores=2, cache_sizes=(None,))[1] > 10 * err


def test_fit_reads_bench_json_and_refuses_auto():
    """Each row's algorithm is the one the bench recorded as run (the arena's "shm" where
    "auto" took it; the engine's ring broadcast is the model's chain); a file without that
    record is taken with the --algo it names, and refused where "auto" ran."""
    data = {"meta": {"op": "all_gather", "world_size": 3, "env": {}},
            "rows": [{"size": 3000, "pycollect": {"time_us": 5.0, "algo": "shm"}},
                     {"size": 6000, "pycollect": {"time_us": 7.0, "algo": "ring"}}]}
    shm, ring = samples_from_bench(data)
    assert shm[:4] == ("all_gather", "shm", 3000.0, 3) and shm[4] == pytest.approx(5e-6)
    assert ring[:4] == ("all_gather", "ring", 6000.0, 3)
    data["meta"].update(op="broadcast")
    assert [s[1] for s in samples_from_bench(data)] == ["shm", "chain"]
    older = {"meta": {"op": "all_reduce", "world_size": 2, "algo": "direct"},
             "rows": [{"size": 8, "pycollect": {"time_us": 3.0}}]}
    assert samples_from_bench(older)[0][:2] == ("all_reduce", "direct")
    older["meta"].pop("algo")
    with pytest.raises(ValueError, match="automatic choice"):
        samples_from_bench(older)


def test_choose_picks_the_known_crossover():
    # direct vs ring at 2 ranks, P: direct = 1 + 1n ns + 4n ns = 1 us + 5n ns; ring (one segment,
    # chunk n/2): header 1 + (1 + n/2 + n) + (1 + n/2) = 3 us + 2n ns. Equal at n = 2000/3 B.
    assert choose("all_reduce", 600, 2, P, ["ring", "direct"]) == "direct"
    assert choose("all_reduce", 700, 2, P, ["ring", "direct"]) == "ring"
    # The automatic table keeps the earlier algorithm (ring) within AUTO_MARGIN (5 %):
    # 3 + 0.002n <= 1.05 (1 + 0.005n) us from n = 600 B on.
    assert auto_table("all_reduce", 2, P, ["ring", "direct"]) == [(599, "direct"), (2**64 - 1, "ring")]
    assert choose("all_reduce", 620, 2, P, ["ring", "direct"]) == "direct"  # exact choice: direct until 666
    assert choose("all_reduce", 620, 2, P, ["ring", "direct"], margin=0.05) == "ring"


def test_crossovers_in_world_size():
    nic = Params(alpha=5e-6, beta=1 / 50e9, gamma=1 / 100e9, overhead=0.0, overlap=1.0)
    algos = ["ring", "tree"]
    found = crossovers("all_reduce", 1 << 16, [2, 4, 8, 16, 32, 64, 128], nic, algos)
    assert found, "64 KiB over 5 us links: the tree's log p rounds must win once the ring's 2(p-1) alphas grow"
    p, before, after = found[0]
    assert (before, after) == ("ring", "tree")
    assert predict("all_reduce", 1 << 16, p, "tree", nic) < predict("all_reduce", 1 << 16, p, "ring", nic)


def _cli(*args, env=None):
    """`pycollect model ARGS` in this process (no interpreter to start): its exit code and
    what it printed, as subprocess.run would give them."""
    import contextlib
    import io
    import types

    from pycollect.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["model", *args])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return types.SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def test_cli_predict_table_crossover_and_plot(tmp_path):
    png = tmp_path / "p.png"
    r = _cli("--predict", "-o", "all_reduce", "-s", "64K", "-g", "2..128", "--alpha", "5us", "--beta", "400gbit",
             "--gamma", "100GB/s", "--overhead", "0us", "--overlap", "1", "--algos", "ring", "tree", "--plot", str(png))
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if not line.startswith("#")]
    assert [int(line.split()[0]) for line in lines[1:]] == [2, 4, 8, 16, 32, 64, 128]
    assert "crossover: ring -> tree" in r.stdout
    assert png.stat().st_size > 10_000


def test_cli_refuses_bad_input():
    r = _cli("--predict", "-g", "8..2")
    assert r.returncode == 2 and "world sizes" in r.stderr
    r = _cli("--predict", "--beta", "fast")
    assert r.returncode == 2 and "bandwidth" in r.stderr


def test_cli_fit_inter_host_refusals(tmp_path):
    """`model --fit --inter-host` refuses, naming what is wrong: no --out, the loopback
    model's own file, and a process that is not a rank of a torchrun job."""
    r = _cli("--fit", "--inter-host")
    assert r.returncode == 2 and "needs --out" in r.stderr, r.stderr
    from pycollect.costmodel import DEFAULT_PATH

    r = _cli("--fit", "--inter-host", "--out", DEFAULT_PATH)
    assert r.returncode == 2 and "loopback model" in r.stderr, r.stderr
    r = _cli("--fit", "--inter-host", "--out", str(tmp_path / "links.json"))
    assert r.returncode == 2 and "step 1 of 2" in r.stderr and "torchrun" in r.stderr, r.stderr
    assert not (tmp_path / "links.json").exists()


def test_cli_fit_from_json(tmp_path):
    true = Params(alpha=12e-6, beta=1 / 3e9, gamma=1 / 5e9, overhead=25e-6, overlap=0.0, cores=os.cpu_count())
    src = tmp_path / "samples.json"
    src.write_text(json.dumps({"samples": [list(s) + [512 * 1024] for s in _synthetic(true)]}))
    out = tmp_path / "model.json"
    r = _cli("--fit", "--from", str(src), "--out", str(out))
    assert r.returncode == 0, r.stderr
    got = Params.load(str(out))
    assert got.alpha == pytest.approx(true.alpha, rel=1e-3) and got.beta == pytest.approx(true.beta, rel=1e-3)


def test_planner_uses_the_model():
    from pycollect.memory import estimate_memory

    nic = Params(alpha=5e-6, beta=1 / 50e9, gamma=1 / 100e9, overhead=0.0, overlap=1.0)
    est = estimate_memory(7, 16, "ddp", comm_model=nic)
    local = 7e9 * 2  # 16-bit gradients, no tensor parallelism
    best = min(predict("all_reduce", local, 16, a, nic) for a in FORMULAS["all_reduce"])
    assert est.comm.time_s == pytest.approx(best)
    typed = estimate_memory(7, 16, "ddp", comm_model=nic, bus_bandwidth_gbs=10.0)
    assert typed.comm.time_s == pytest.approx(typed.comm.bytes_per_rank / 10e9)  # a typed bandwidth wins


def test_planner_cli_prints_model_time():
    r = subprocess.run([sys.executable, "-m", "pycollect", "memory", "--params", "7B", "--plan", "--alpha", "5us",
                        "--beta", "400gbit", "--gamma", "100GB/s"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "comm s/step" in r.stdout and "cost model" in r.stdout


def test_engine_candidates_are_known_to_the_model():
    for op, algos in ENGINE_ALGOS.items():
        assert set(algos) <= set(FORMULAS[op])


def test_import_is_light():
    code = "import sys, pycollect.costmodel; print('torch' in sys.modules, 'pycollect._C' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["False", "False"]


def case_auto_tables(model_path):
    """Rank 0 alone names a model file: every rank's new group must still get its table."""
    import pycollect as pc
    from pycollect import world

    if world.global_rank == 0 and model_path:
        os.environ["PYCOLLECT_MODEL"] = model_path
    try:
        g = pc.new_group()
    finally:
        os.environ.pop("PYCOLLECT_MODEL", None)
    import torch

    out = []
    for n in (1, 100, 5000, 1 << 20):  # around and past the table's crossover: every rank runs the same algorithm
        t = torch.ones(n)
        pc.all_reduce(t, group=g)
        out.append(float(t[0]))
    from pycollect.errors import InvalidArgumentError

    try:  # a connected group's tables are fixed: changing them now could split the ranks' choices
        g._comm.set_auto_tables([], [])
        late = None
    except InvalidArgumentError as e:
        late = str(e)
    return g.model.to_json(), g.auto, out, late


def test_group_auto_table_same_on_every_rank(pool3, tmp_path):
    params = Params(alpha=1e-6, beta=1e-9, gamma=2e-9, overhead=0.0)
    path = tmp_path / "m.json"
    params.save(str(path))
    results = pool3.run(case_auto_tables, str(path))
    models, tables, sums, late = zip(*results)
    assert len(set(models)) == 1 and Params.from_json(models[0]).alpha == 1e-6  # rank 0's file, everywhere
    assert all(t == tables[0] for t in tables)
    want = [(b, {"ring": 1, "direct": 2}[a]) for b, a in auto_table("all_reduce", 3, Params.from_json(models[0]))]
    assert [tuple(r) for r in tables[0]["allreduce_auto"]] == want
    assert all(s == [3.0] * 4 for s in sums)
    assert all(m and "before connect()" in m for m in late), late


@pytest.mark.slow
def test_cli_validate_quick_end_to_end(tmp_path):
    out = tmp_path / "v.json"
    r = _cli("--validate", "--quick", "--algos", "ring", "direct", "tree", "shm", "--json", str(out))
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.startswith(" ") and "all_reduce" in line]
    measured = {(row[1], row[3]) for row in rows if "FAILED:" not in row}
    assert measured >= {("ring", "64K"), ("ring", "1M"), ("direct", "64K"), ("direct", "1M"), ("shm", "64K"),
                        ("shm", "1M")}
    for row in rows:
        if "FAILED:" not in row:
            assert float(row[4]) > 0 and float(row[5]) > 0
    # tree: skipped with the engine's reason until the algorithm lands, then measured
    assert "skipped all_reduce tree: the engine refuses it" in r.stdout or ("tree", "64K") in measured
    assert "rows within 25 %" in r.stdout
    samples = json.loads(out.read_text())["samples"]
    assert len(samples) == len(measured) and all(s[4] > 0 for s in samples)


def test_validate_from_saved_samples(tmp_path):
    """Earlier samples checked against other parameters, no ranks started
    (costmodel.check.saved_rows / summarize; the CLI's --validate --from prints them).
    Samples made by the model itself are within 0 %; doubled times are 50 % off, every row."""
    from pycollect.costmodel.check import saved_rows, summarize

    params = tmp_path / "p.json"
    Params(alpha=3e-6, beta=1 / 6e9, gamma=1 / 12e9, cores=2, local_speedup=1.5).save(str(params))
    loaded = Params.load(str(params))
    samples = [[op, a, n, p, predict(op, n, p, a, loaded), 524288]
               for op, a in (("all_reduce", "ring"), ("all_reduce", "halving_doubling"), ("all_gather", "bruck"))
               for p in (2, 3, 4) for n in (65536, 4 << 20)]
    exact, doubled = tmp_path / "exact.json", tmp_path / "doubled.json"
    exact.write_text(json.dumps({"samples": samples}))
    doubled.write_text(json.dumps({"samples": [s[:4] + [2 * s[4], s[5]] for s in samples],
                                   "second_launch": [0.4, 0.1] + [None] * (len(samples) - 2)}))
    s = summarize(saved_rows([str(exact)], loaded))
    assert (s.within, s.total, s.launches_known) == (len(samples), len(samples), False)
    rows = saved_rows([str(doubled)], loaded)
    assert all(r.error == pytest.approx(-0.5) for r in rows)
    s = summarize(rows)
    assert s.within == 0 and s.launches_known
    # the saved launches: the first row's next-fastest launch was 40 % slower, counted as noisy
    assert [r.second_launch for r in rows[:2]] == [0.4, 0.1] and s.noisy == rows[:1] and s.noisy_beyond == 1
    with pytest.raises(ValueError, match="not a `pycollect model --validate --json` file"):
        saved_rows([str(params)], loaded)
    short = tmp_path / "short.json"
    short.write_text(json.dumps({"samples": samples, "second_launch": [0.1]}))
    with pytest.raises(ValueError, match=f"1 second_launch entries for {len(samples)} samples"):
        saved_rows([str(short)], loaded)
    # The CLI prints them, marks the noisy row (~) and refuses a bad file with exit code 2.
    r = _cli("--validate", "--from", str(doubled), "--params", str(params))
    assert f"# 0/{len(samples)} rows within 25 %" in r.stdout and r.stdout.count("-50.0%") == len(samples)
    assert "+40%" in r.stdout and r.stdout.count("  !  ~") == 1
    r = _cli("--validate", "--from", str(short), "--params", str(params))
    assert r.returncode == 2 and "second_launch entries" in r.stderr


def test_compare_two_measurements(tmp_path):
    """The first file read as a prediction of the second, point by point
    (costmodel.check.compare; the CLI's --compare prints it). Times 1.2x apart agree within
    25 %; 1.3x apart do not (the first is 30 % off), but a prediction could still be within
    25 % of both; 1.7x apart, none can. Points in one file only are left out and counted; a
    wrong number of files or no shared point is a clear error."""
    from pycollect.costmodel.check import compare

    base = [["all_reduce", a, n, p, 1e-4 * p * n / 65536, 524288]
            for a in ("ring", "tree") for p in (2, 3) for n in (65536, 1 << 20)]
    factor = [1.2, 1 / 1.2, 1.3, 1.7, 1.0, 1.0, 1.0, 1.0]
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_text(json.dumps({"samples": [s[:4] + [s[4] * f, s[5]] for s, f in zip(base, factor)]}))
    second.write_text(json.dumps({"samples": base + [["broadcast", "chain", 65536, 2, 1e-5, 524288]],
                                  "second_launch": [0.1] * (len(base) + 1)}))
    c = compare([str(first), str(second)])
    assert c.names == ("first.json", "second.json") and len(c.rows) == len(base) and c.only_one == 1
    assert [round(r.error, 3) for r in c.beyond] == [0.3, 0.7] and [round(r.error, 3) for r in c.apart] == [0.7]
    assert c.widest == pytest.approx(1.25 / 0.75)
    assert round(c.rows[1].error, 3) == -0.167
    with pytest.raises(ValueError, match="--compare needs --from with two files \\(given 1\\)"):
        compare([str(first)])
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"samples": [["all_gather", "ring", 65536, 4, 1e-4, 524288]]}))
    with pytest.raises(ValueError, match="share no \\(op, algorithm, ranks, size\\) point"):
        compare([str(first), str(other)])
    plot = tmp_path / "cmp.png"
    r = _cli("--compare", "--from", str(first), str(second), "--plot", str(plot))
    assert r.returncode == 0, r.stderr
    assert "# the two agree within 25 % at 6 of 8 points" in r.stdout and "30.0%  !" in r.stdout
    assert plot.stat().st_size > 10000


def test_choice_check_and_prediction_table():
    """The automatic choice against the fastest measured, point by point, and --predict's
    table with its crossover, as rows (costmodel.check)."""
    from pycollect.costmodel.check import choice_check, parse_world_sizes, prediction_table
    from pycollect.costmodel.measure import Row

    nic = Params(alpha=5e-6, beta=1 / 50e9, gamma=1 / 100e9, overhead=0.0, overlap=1.0)
    table = prediction_table("all_reduce", 64 << 10, parse_world_sizes("2..128"), ["ring", "tree"], nic)
    assert [t.world_size for t in table] == [2, 4, 8, 16, 32, 64, 128]
    assert [t.crossover for t in table if t.crossover] == [("ring", "tree")]
    assert all(t.best == ("ring", "tree")[t.times.index(min(t.times))] for t in table)
    with pytest.raises(ValueError, match="knows no all_reduce algorithm 'bruck'"):
        prediction_table("all_reduce", 1024, [2], ["bruck"], nic)
    n = 1 << 20
    pick = engine_choice("all_reduce", n, 4, nic, ["ring", "tree"])
    other = "tree" if pick == "ring" else "ring"
    rows = [Row("all_reduce", pick, 4, n, 1.2e-3, 1e-3), Row("all_reduce", other, 4, n, 1.0e-3, 1e-3),
            Row("all_reduce", "ring", 2, n, 1e-3, 1e-3)]  # one algorithm only there: not a point
    check = choice_check(rows, nic)
    assert len(check.points) == 1 and check.ok == 0
    assert (check.worst.pick, check.worst.fastest) == (pick, other) and check.worst.slower == pytest.approx(0.2)
    assert choice_check(rows[2:], nic) is None
    with pytest.raises(ValueError, match="world sizes"):
        parse_world_sizes("8..2")


def test_arena_check_sets_the_model_against_the_engines_rule():
    """Where the arena and the links were both measured: the model's pick among them all and
    the engine's rule (the arena for the all-reduce at every size, for the broadcast up to
    256 KiB at 2 ranks and 1 MiB on more), each against the fastest; the automatic choice's
    check leaves the arena out."""
    from pycollect.costmodel.check import arena_check, choice_check
    from pycollect.costmodel.measure import Row

    slow_arena = P.with_(arena=Params(alpha=1e-3, beta=1e-9, gamma=1e-9))  # the model: the links win
    mib = 1 << 20
    rows = [Row("all_reduce", "shm", 2, mib, 1.0e-3, 0), Row("all_reduce", "ring", 2, mib, 1.5e-3, 0),
            Row("broadcast", "shm", 2, mib, 1.0e-3, 0), Row("broadcast", "chain", 2, mib, 3.0e-3, 0),
            Row("broadcast", "shm", 3, mib, 1.0e-3, 0), Row("broadcast", "chain", 3, mib, 1.05e-3, 0),
            Row("all_gather", "ring", 2, mib, 1e-3, 0)]  # no arena there: not a point
    model, rule = arena_check(rows, slow_arena)
    assert [p.pick for p in model.points] == ["ring", "chain", "chain"]
    assert [p.pick for p in rule.points] == ["shm", "chain", "shm"]
    assert (model.ok, rule.ok) == (1, 2) and rule.worst.slower == pytest.approx(2.0)
    assert choice_check(rows, slow_arena) is None  # one link algorithm a point: nothing to choose
    assert arena_check(rows[6:], slow_arena) is None


def test_validate_spreads_launches_in_rounds(monkeypatch):
    """validate measures the whole grid once per round (a point's launches minutes apart,
    not back to back), keeps each point's fastest over the rounds, and reports a size that
    fails in any round as failed, with no row measured for it. No ranks start: the
    measurement is replaced by one whose speed drifts from launch to launch."""
    from pycollect.costmodel import measure

    calls, seen = [], []

    def fake(op, algos, p, sizes, **kw):
        calls.append((op, p, tuple(sizes)))
        launch = seen[-1][0]  # the round on_launch announced last
        if op == "all_gather" and p == 3 and launch == 1 and 1024 in sizes:
            raise RuntimeError("rank 2 died\nPeerLostError: gone")
        slow = (3.0, 1.0, 2.0)[launch]  # the middle launch of every point is the fastest
        return {a: [(n, slow * n * p * 1e-9, 2 * slow * n * p * 1e-9) for n in sizes] for a in algos}

    monkeypatch.setattr(measure, "measure_algos", fake)
    rows, failures = [], []
    cases = [("all_reduce", "ring"), ("all_reduce", "direct"), ("all_gather", "ring")]

    def on_row(row, failure):
        (failures if failure else rows).append((row, failure))

    out = measure.validate(P, cases, [2, 3], [1024, 4096], launches=3, on_row=on_row,
                           on_launch=lambda k, n, op, p: seen.append((k, op, p)))
    grid = [("all_reduce", 2), ("all_reduce", 3), ("all_gather", 2), ("all_gather", 3)]
    assert seen == [(k,) + g for k in range(3) for g in grid]  # rounds over the grid
    assert [r for r, _ in rows] == out
    assert {(r.op, r.algo, r.world_size, r.nbytes) for r in out} == {
        (op, a, p, n) for op, a in cases for p in (2, 3) for n in (1024, 4096)} - {("all_gather", "ring", 3, 1024)}
    for r in out:  # the fastest launch's figures, best and median; the next fastest was 2x slower
        assert r.measured_s == pytest.approx(r.nbytes * r.world_size * 1e-9)
        assert r.median_s == pytest.approx(2 * r.nbytes * r.world_size * 1e-9)
        assert r.second_launch == pytest.approx(1.0)
    assert [(f.op, f.world_size, f.nbytes, why) for f, why in failures] == [("all_gather", 3, 1024, "PeerLostError: gone")]
    assert calls[-1] == ("all_gather", 3, (4096,))  # the failed size is not measured again


def test_validate_plot_counts_each_panel(tmp_path):
    """--validate --plot: one panel per group size, its title counting the points within
    25 % (the CLI draws it for saved samples too); a PNG is written."""
    from pycollect.cli.model_plot import validate_plot
    from pycollect.costmodel.measure import Row

    rows = [Row("all_reduce", "ring", p, n, 1e-3, 1e-3 * f) for p, f in ((2, 1.1), (3, 1.3), (4, 0.5))
            for n in (65536, 1 << 20)] + [Row("all_gather", "bruck", 4, 65536, 1e-3, 0.8e-3)]
    png = tmp_path / "err.png"
    assert validate_plot(str(png), rows, "t") == {2: (2, 2), 3: (0, 2), 4: (1, 3)}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    params = tmp_path / "p.json"
    Params(alpha=3e-6, beta=1 / 6e9, gamma=1 / 12e9).save(str(params))
    saved = tmp_path / "s.json"
    saved.write_text(json.dumps({"samples": [["all_reduce", "ring", 65536, 2, 1e-4, 524288]]}))
    r = _cli("--validate", "--from", str(saved), "--params", str(params), "--plot", str(tmp_path / "cli.png"))
    assert r.returncode == 0, r.stderr
    assert f"# wrote {tmp_path / 'cli.png'}" in r.stdout and (tmp_path / "cli.png").stat().st_size > 0


@pytest.mark.slow
def test_cli_validate_on_rate_limited_hosts(tmp_path):
    """--netns-hosts: one rank per namespace host behind a 200 Mbit/s cable, so a 1 MiB
    ring all-reduce at 2 ranks moves 1 MiB each way at line rate: 42 ms less the tbf bucket
    (128 KiB), far above loopback's 0.2 ms; the JSON records the line rate."""
    from pycollect import netns

    if netns.unavailable():
        pytest.skip(f"network namespaces: {netns.unavailable()}")
    out = tmp_path / "v.json"
    r = _cli("--validate", "--quick", "--algos", "ring", "--netns-hosts", "--line-rate", "200mbit",
             "--beta", "200mbit", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "one rank per network-namespace host, 200mbit cables" in r.stdout
    rows = {row[3]: row for row in (line.split() for line in r.stdout.splitlines())
            if len(row) >= 7 and row[:2] == ["all_reduce", "ring"]}
    assert float(rows["1M"][4]) > 30_000, rows["1M"]  # 2 x 512 KiB at 25 MB/s, one way each step
    assert json.loads(out.read_text())["meta"]["line_rate"] == "200mbit"


def test_typed_values_drop_one_machines_terms():
    # a fit of this machine, then a NIC typed on top: nothing of the shared-memory terms stays
    fitted = P.with_(cores=2, wake=3e-6, cache_bytes=1e6, cache_speedup=2.0, mem_parallel=1.5, local_speedup=1.2,
                     single_copy_bytes=65536.0, single_copy_alpha=5e-6)
    nic = fitted.for_cluster(beta=1 / 50e9)
    plain = Params(alpha=P.alpha, beta=1 / 50e9, gamma=P.gamma, wake=3e-6)
    for op, algo in (("all_reduce", "ring"), ("all_reduce", "direct"), ("all_reduce", "tree"), ("all_gather", "bruck")):
        assert predict(op, 1 << 20, 4, algo, nic) == pytest.approx(predict(op, 1 << 20, 4, algo, plain))
    # the same beta without for_cluster keeps the machine's terms, and predicts otherwise
    kept = fitted.with_(beta=1 / 50e9)
    assert predict("all_reduce", 1 << 20, 4, "ring", kept) != pytest.approx(predict("all_reduce", 1 << 20, 4, "ring", plain))


def test_auto_table_keeps_engine_limits():
    # P puts the direct/ring crossover at 666 B; with direct capped at 500 B the table switches there
    assert auto_table("all_reduce", 2, P, ["ring", "direct"], limits={"direct": 500}) == [(500, "direct"),
                                                                                           (2**64 - 1, "ring")]
    slow_ring = Params(alpha=1e-3)  # the model alone would run direct far beyond 16 KiB
    assert auto_table("all_reduce", 4, slow_ring, ["ring", "direct"], limits={})[0][0] > 16 * 1024
    assert auto_table("all_reduce", 4, slow_ring, ["ring", "direct"])[0] == (16 * 1024, "direct")


def test_formation_tables_are_kept_on_disk_and_rebuilt_when_not_theirs(monkeypatch, tmp_path):
    """A group's tables (formation.auto_tables) come from the file named by their inputs'
    digest when it holds them; a missing, corrupt or foreign file is rebuilt, another size or
    model has a file of its own, and an unwritable directory costs only the keeping."""
    from pycollect import formation
    from pycollect.options import Options
    from pycollect.tuning import table_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    built = []
    real = formation.auto_table

    def counted(*args, **kwargs):
        built.append(args[:2])
        return real(*args, **kwargs)

    monkeypatch.setattr(formation, "auto_table", counted)
    options = Options()
    first = formation.auto_tables(P, 8, options)
    assert len(built) == len(ENGINE_ALGOS) and first["allreduce_auto"][-1][0] == 2**64 - 1
    files = list(table_cache.directory().glob("*.json"))
    assert len(files) == 1 and files[0].parent == tmp_path / "pycollect" / "auto-tables"
    assert formation.auto_tables(P, 8, options) == first and len(built) == len(ENGINE_ALGOS)  # kept
    formation.auto_tables(P, 9, options)
    formation.auto_tables(P.with_(alpha=2 * P.alpha), 8, options)
    assert len(list(table_cache.directory().glob("*.json"))) == 3 and len(built) == 3 * len(ENGINE_ALGOS)
    for text in ("{not json", json.dumps({"key": "another", "tables": {}})):
        files[0].write_text(text)
        del built[:]
        assert formation.auto_tables(P, 8, options) == first and len(built) == len(ENGINE_ALGOS)
    assert json.loads(files[0].read_text())["tables"]["allreduce_auto"] == [list(r) for r in first["allreduce_auto"]]
    (tmp_path / "a-file").write_text("")  # no directory can be made under it (root or not)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file" / "cache"))
    del built[:]
    assert formation.auto_tables(P, 8, options) == first and len(built) == len(ENGINE_ALGOS)


def test_engine_refuses_a_bad_automatic_choice_table():
    """The tables are checked where the engine takes them: rows in order, known codes,
    and only before the group connects."""
    from pycollect import _C
    from pycollect.errors import InvalidArgumentError

    comm = _C.Communicator(0, 1, _C.CommOptions())
    with pytest.raises(InvalidArgumentError, match="max_bytes must increase row by row, got 50 after 100"):
        comm.set_auto_tables([(100, 1), (50, 2)], [])
    with pytest.raises(InvalidArgumentError, match="unknown algorithm code 9"):
        comm.set_auto_tables([(100, 9)], [])
    comm.set_auto_tables([(100, 2), (2**64 - 1, 1)], [(2**64 - 1, 5)])  # accepted before connect


def test_validate_on_namespace_hosts_fits_the_links_first(monkeypatch, tmp_path):
    """--validate --netns-hosts with no parameters given probes the namespace links, fits
    them and validates against that fit, never the loopback model; a failed step ends the
    command (exit 2) naming it; parameters given skip the probe. No namespaces or ranks:
    the probe's measurement and the benchmark are replaced (the probe's samples come from
    a 1 Gbit/s link: ping-pong 2 (overhead + alpha + n beta), all-reduces by the formulas)."""
    from pycollect import netns
    from pycollect.costmodel import DEFAULT_SEGMENT_BYTES, measure

    link = Params(alpha=50e-6, beta=1 / 0.125e9, gamma=1 / 10e9, overhead=10e-6)
    good = ([("ping_pong", "-", float(n), 2, 2 * (link.overhead + link.alpha + n * link.beta))
             for n in (8, 1 << 20, 4 << 20)]
            + [("all_reduce", a, float(n), 2, predict("all_reduce", n, 2, a, link)) for a in ("ring", "direct")
               for n in (8, 65536)])
    probed, validated, samples = [], [], list(good)

    def probe(iters, line_rate=None):
        probed.append(line_rate)
        return [s + (DEFAULT_SEGMENT_BYTES,) for s in samples], [link.gamma]

    monkeypatch.setattr(netns, "unavailable", lambda: None)
    monkeypatch.setattr(measure, "_probe_samples", probe)
    monkeypatch.setattr(measure, "available", lambda ops: {})
    monkeypatch.setattr(measure, "validate", lambda params, *a, **kw: validated.append(params) or [])

    r = _cli("--validate", "--quick", "--netns-hosts", "--line-rate", "1gbit")
    assert r.returncode == 0, r.stderr
    assert probed == ["1gbit"] and validated[0].beta == pytest.approx(link.beta, rel=1e-3)
    assert validated[0].alpha == pytest.approx(link.alpha, rel=1e-2) and validated[0].cores is None
    assert "# fitted on the namespace links: alpha 50.00 us, beta 0.125 GB/s" in r.stdout

    # --out: the engine's model with these links between its hosts, which the group's auto reads
    monkeypatch.delenv("PYCOLLECT_MODEL", raising=False)
    out = tmp_path / "links.json"
    assert _cli("--validate", "--quick", "--netns-hosts", "--out", str(out)).returncode == 0
    saved = Params.load(str(out))
    assert saved.alpha == Params().alpha and saved.inter_host.beta == pytest.approx(link.beta, rel=1e-3)

    del samples[2:]  # too few to fit alpha, beta and overhead
    r = _cli("--validate", "--quick", "--netns-hosts")
    assert r.returncode == 2 and "step 2 of 2, the fit of the probe's samples, failed: 2 usable" in r.stderr
    assert len(validated) == 2, "a failed fit must not validate against other parameters"

    monkeypatch.setattr(netns, "unavailable", lambda: "needs root")
    r = _cli("--validate", "--quick", "--netns-hosts")
    assert r.returncode == 2 and "step 1 of 2, the probe on 2 namespace hosts with 1gbit cables, failed" in r.stderr
    assert "needs root" in r.stderr and len(validated) == 2

    probed.clear()
    r = _cli("--validate", "--quick", "--netns-hosts", "--beta", "1gbit")
    assert r.returncode == 0 and probed == [] and validated[-1].beta == pytest.approx(link.beta)


def test_two_level_model():
    """The hierarchy's cable traffic: on 1 Gbit/s links between hosts, 64 MiB all-reduce on
    2 x 2 is predicted near the flat ring's 1.5x / 2(h-1)/h; never on one host or one rank a
    host; interleaved ranks make the flat ring cross each cable more often."""
    from pycollect.tuning.hierarchy import crossings, flat, hierarchical_from, pipeline_slices, two_level

    p = Params(inter_host=Params(alpha=5e-6, beta=1 / 0.125e9, gamma=1 / 6e9, overlap=1.0))
    ratio = flat("all_reduce", 64 << 20, (2, 2), p) / two_level("all_reduce", 64 << 20, (2, 2), p)
    assert 1.3 < ratio < 1.55, ratio
    # Pipelined (16 slices at 64 MiB): the intra-host phases hide under the cable, so 2 x 4
    # takes between the cable's own time and the phases one after the other.
    assert pipeline_slices(64 << 20) == 16 and pipeline_slices(1 << 20) == 1
    cable = 64 * 2**20 / 0.125e9
    serial = two_level("all_reduce", 64 << 20, (4, 4), p, segment_bytes=64 << 20)  # one slice
    assert cable < two_level("all_reduce", 64 << 20, (4, 4), p) < min(serial, 1.1 * cable)
    assert hierarchical_from("all_reduce", (2, 2), p) is not None
    assert all(hierarchical_from(op, lay, p) is None for op in ("all_reduce", "broadcast") for lay in ((4,), (1, 1, 1)))
    assert crossings((2, 2)) == 1 and crossings((2, 2), [0, 1, 0, 1]) == 2 and crossings((4,)) == 0
    assert hierarchical_from("broadcast", (2, 2), p, [0, 1, 0, 1]) is not None
    assert Params.from_json(p.to_json()).inter_host.with_(source="") == p.inter_host.with_(source="")
    with pytest.raises(ValueError, match="layout must list each host's ranks"):
        two_level("all_reduce", 1, (2, 0), p)


# -- formation on paper (pycollect.costmodel.formation, `pycollect model --formation`) ---------

def _formation(scheme, worlds, **kw):
    from pycollect.costmodel.formation import StoreParams, formation_table
    return formation_table(worlds, StoreParams(**kw), [scheme])


def test_formation_lazy_ring_connections_are_constant_in_n():
    worlds = [256, 1024, 4096, 16384]
    lazy = _formation("pycollect lazy", worlds)
    eager = _formation("pycollect eager", worlds)
    assert {t.conns for t in lazy} == {2} and {t.conns_max for t in lazy} == {2}
    assert [t.conns for t in eager] == [n - 1 for n in worlds]
    assert len({round(t.connect_s, 12) for t in lazy}) == 1  # one link's time, whatever n
    assert all(e.connect_s > 100 * l.connect_s for e, l in zip(eager[1:], lazy[1:]))
    gloo = _formation("gloo", worlds)
    assert [t.conns for t in gloo] == [n - 1 for n in worlds]


def test_formation_store_requests_grow_linearly_and_bytes_quadratically():
    from pycollect.costmodel.formation import growth
    for scheme in ("pycollect lazy", "pycollect lazy batched"):
        rows = _formation(scheme, [512, 2048, 8192])
        assert growth(rows, "requests") == pytest.approx(1.0, abs=0.02), scheme
        # every rank reads the O(n) roster once: O(n^2) bytes through the one store
        assert growth(rows, "store_bytes") == pytest.approx(2.0, abs=0.05), scheme
    # Gloo's default: every rank reads all n keys, each O(n): n^2 requests, n^3 bytes
    gloo = _formation("gloo", [512, 2048, 8192])
    assert growth(gloo, "requests") == pytest.approx(2.0, abs=0.02)
    assert growth(gloo, "store_bytes") > 2.8
    nccl = _formation("nccl bootstrap", [512, 2048, 8192])
    assert growth(nccl, "requests") == pytest.approx(1.0, abs=0.02)
    assert {t.conns for t in nccl} == {4} and [t.conns_max for t in nccl] == [2 * n + 2 for n in (512, 2048, 8192)]


def test_formation_batching_cuts_round_trips():
    worlds = [256, 4096]
    plain, batched = _formation("pycollect lazy", worlds), _formation("pycollect lazy batched", worlds)
    for p, b in zip(plain, batched):
        assert p.round_trips >= 3 * (p.ranks - 1)  # rank 0: n-1 get, n-1 delete, n-1 answers
        assert b.round_trips < 20 and b.requests < p.requests and b.store_s < p.store_s
        assert b.store_bytes == p.store_bytes  # the same bytes, in fewer requests
    assert batched[0].round_trips == batched[1].round_trips  # constant in n
    # multi_get in batches of 128 keys: rank 0's round trips grow again, n/128
    small = _formation("pycollect lazy batched", [4096], batch=128)[0]
    assert small.round_trips > batched[1].round_trips + 2 * (4095 // 128) - 2


def test_formation_store_server_queues():
    # a slower store server thread: the server's serialized time grows with it, and with
    # enough ranks it, not the round trips, sets the store phases' time
    fast = _formation("pycollect lazy batched", [4096], service=1e-6)[0]
    slow = _formation("pycollect lazy batched", [4096], service=100e-6)[0]
    assert slow.server_s > fast.server_s + 4096 * 99e-6
    assert slow.store_s >= slow.server_s
    assert slow.round_trips == fast.round_trips


def test_formation_refuses_bad_input():
    from pycollect.costmodel.formation import StoreParams, formation_table
    with pytest.raises(ValueError, match="unknown formation schemes"):
        formation_table([8], StoreParams(), ["mpi"])
    with pytest.raises(ValueError, match="at least 2"):
        formation_table([1], StoreParams())


def test_cli_formation_table_and_plot(tmp_path):
    plot = tmp_path / "formation.png"
    r = _cli("--formation", "-g", "256..1024", "--store-rtt", "50us", "--store-bandwidth", "10gbit",
             "--schemes", "pycollect lazy", "gloo", "--plot", str(plot))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "round trip 50 us" in r.stdout and "1.25 GB/s" in r.stdout
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["ranks", "scheme"])
    rows = [line for line in lines[header + 1:] if not line.startswith("#")]
    assert len(rows) == 3 * 2 and {row.split()[0] for row in rows} == {"256", "512", "1024"}
    assert any(" gloo " in row for row in rows) and not any("nccl" in row for row in rows)
    assert plot.stat().st_size > 0 and f"# wrote {plot}" in r.stdout
    r = _cli("--formation", "--ranks-per-host", "0")
    assert r.returncode == 2 and "--ranks-per-host" in r.stderr


def test_compression_prices_bytes_and_codec_and_says_where_it_pays():
    from pycollect.costmodel import compressed_ring, pays, pays_from
    from pycollect.tuning.compressed import WIRE_RATIO, codec_time
    from pycollect.tuning.formulas import FORMULAS

    p = Params(alpha=5e-6, beta=1 / 1e9, gamma=1 / 10e9)
    s = 64 << 20
    for fmt in ("bf16", "int8"):  # the ring on fewer bytes, plus the codec's time
        want = FORMULAS["all_reduce"]["ring"](s * WIRE_RATIO[fmt], 4, p, 512 << 10) + codec_time(s, 4, p, fmt)
        assert compressed_ring(s, 4, p, fmt) == pytest.approx(want)
    assert WIRE_RATIO["int8"] == pytest.approx(0.25 + 1 / 256)
    # 1 Gbit/s between hosts (the namespace runs): both pay, int8 more; memory-speed links: neither
    net = Params(inter_host=Params(alpha=4.6e-6, beta=1 / 0.126e9, overlap=1.0))
    exact, bf16 = pays("all_reduce", s, (2, 2), net, "bf16")
    _, int8 = pays("all_reduce", s, (2, 2), net, "int8")
    assert int8 < bf16 < exact / 1.7
    assert pays_from((2, 2), net, "int8") is not None
    fast = Params(alpha=1e-6, beta=1 / 20e9, gamma=1 / 10e9)
    assert pays_from((4,), fast, "int8") is None
    with pytest.raises(ValueError, match="only all_reduce"):
        pays("all_gather", s, (2, 2), net, "int8")
