"""Every collective x dtype x op x world size (1-4) x count (0, 1, 13, ~2 MiB), and each
forced algorithm of the calls that have a choice,
against a numpy reference and torch.distributed Gloo in the same processes, with
all ranks bit-identical, once over shared-memory links and once over TCP links (the
session's 4-rank pools, conftest.py: pool4_each). World sizes 1-3 run in sub-groups
made with pycollect.new_group and dist.new_group.
"""
import pytest

import collective_cases as cc

pytestmark = pytest.mark.slow  # the full dtype x op x size matrix: minutes, not seconds

WORLD = 4


def _links(request) -> str:
    """The pool a test runs on: "shm" or "tcp" links (conftest.py: pool4_each)."""
    return request.node.callspec.params["pool4_each"]


@pytest.mark.parametrize("ws", [1, 2, 3, 4])
@pytest.mark.parametrize("kind", ["all_reduce", "all_gather_into_tensor", "all_gather",
                                  "reduce_scatter_tensor", "reduce_scatter", "broadcast"])
def test_collective_matches_reference_and_gloo(pool4_each, request, kind, ws):
    """The automatic choice. Over shared-memory links the calls it puts in the arena at every
    size run the arena's counts, and the flight record shows that the arena ran them."""
    arena = _links(request) == "shm" and kind in cc.ARENA_AT_EVERY_SIZE
    counts = (cc.SHM_COUNTS if arena else
              cc.COUNTS if kind in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor") else [0, 1, 13])
    results = pool4_each.run(cc.case_collective, kind, ws, 1, counts)
    cc.check_members(results, kind, ws)
    if arena and ws > 1:
        assert all(res["algos"] == ["shm"] for res in results if res is not None), results[0]["algos"]


# (pool, kind, algo): every forced algorithm over both kinds of links, but for the arena's
# calls that "auto" already runs there (above).
FORCED = [(links, kind, algo) for links in ("shm", "tcp") for kind, algos in cc.ALGOS.items() for algo in algos
          if not (links == "shm" and algo == "shm" and kind in cc.ARENA_AT_EVERY_SIZE)]


@pytest.mark.parametrize("ws", [2, 3, 4])
@pytest.mark.parametrize("pool4_each, kind, algo", FORCED, indirect=["pool4_each"])
def test_algorithm_matches_reference_and_gloo(pool4_each, request, kind, algo, ws):
    """Each algorithm forced with algo= (the link ones, and the shared-memory ones that
    "auto" picks on one host) through the same matrix as "auto": every dtype x op, counts
    0, 1, fewer than the ranks, uneven and several segments or rounds; 3 ranks fold one rank
    away in the log-step algorithms; every rank's result the same to the bit. (A group of
    one rank runs no algorithm: the automatic choice's test has it.) The arena forced over
    TCP links runs the same code as over shared-memory ones: there it leaves the rounds past
    its slot (BIG) to the shared-memory pool's runs."""
    counts = cc.algo_counts(algo)
    if algo == "shm" and _links(request) == "tcp":
        counts = [count for count in counts if count != cc.BIG]
    results = pool4_each.run(cc.case_collective, kind, ws, 1, counts, algo=algo)
    cc.check_members(results, kind, ws)
    if ws > 1:
        assert all(res["algos"] == [algo] for res in results if res is not None), results[0]["algos"]


@pytest.mark.parametrize("ws", [1, 2, 3, 4])
@pytest.mark.parametrize("kind, algo", [("all_reduce_coalesced", a) for a in ("ring", "direct", "halving_doubling", "tree")]
                         + [("all_gather_coalesced", a) for a in ("ring", "bruck")])
def test_coalesced_runs_each_algorithm(pool4, kind, algo, ws):
    results = [res for res in pool4.run(cc.case_new_collective, kind, ws, 3, algo=algo)
               if res is not None]
    assert len(results) == ws and results[0]["cases"] > 0
    if ws > 1:
        assert results[0]["gloo_compared"] > 0
    assert all(res["digests"] == results[0]["digests"] for res in results[1:]), "ranks differ"


@pytest.mark.parametrize("ws", [2, 3, 4])
def test_parts_in_the_arena_and_over_links(pool4, ws):
    """gather, scatter and all-to-all with parts on both sides of the arena's limit and on
    it, of sizes that differ by rank, through the fast path and the general one, against
    the parts themselves and Gloo."""
    results = [res for res in pool4.run(cc.case_parts, ws, timeout=120) if res is not None]
    assert results == [2 * (2 * 2 + 1) + 2] * ws


@pytest.mark.parametrize("ws", [2, 3, 4])
def test_automatic_broadcast_takes_the_arena_up_to_its_limit(pool4, ws):
    """On one host "auto" broadcasts through the arena up to 256 KiB at 2 ranks and 1 MiB on
    more (csrc Communicator::sharedFits), over the links above; the cost model's copy of the
    rule (tuning/arena.py, which `model --validate` sets against the model) says the same."""
    from pycollect.tuning import arena

    sizes = [256 << 10, (256 << 10) + 1, 1 << 20, (1 << 20) + 1]
    limit = (1 << 20) if ws > 2 else 256 << 10
    want = ["shm" if size <= limit else "ring" for size in sizes]
    results = [res for res in pool4.run(cc.case_broadcast_algos, ws, sizes) if res is not None]
    assert results == [want] * ws
    assert ["shm" if arena.rule_takes_arena("broadcast", size, ws) else "ring" for size in sizes] == want


@pytest.mark.parametrize("ws", [1, 2, 3, 4])
def test_all_to_all_single_matches_gloo(pool4_each, ws):
    results = [res for res in pool4_each.run(cc.case_all_to_all, ws) if res is not None]
    assert len(results) == ws and results[0] == 8


@pytest.mark.parametrize("ws", [1, 2, 3, 4])
@pytest.mark.parametrize("kind", cc.NEW_KINDS)
def test_new_collective_matches_reference_and_gloo(pool4, kind, ws):
    """reduce, gather, scatter (uneven sizes), list all-to-all, the coalesced calls and
    recv from any source, against numpy and Gloo; all ranks bit-identical where every
    rank holds the result."""
    results = pool4.run(cc.case_new_collective, kind, ws, 2)
    members = [res for res in results if res is not None]
    assert len(members) == ws
    assert members[0]["cases"] > 0
    if ws > 1 and kind != "recv_any":
        assert sum(m["gloo_compared"] for m in members) > 0
    for case_index, (what, d0) in enumerate(members[0]["digests"]):
        for r, res in enumerate(members[1:], start=1):
            assert res["digests"][case_index] == (what, d0), f"{what}: rank {r} differs from rank 0"


@pytest.mark.parametrize("kind", ["all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast"])
def test_int16_and_bool_match_reference_and_gloo(pool4, kind):
    """torch's int16 and bool tensors, which Gloo takes too: bool's SUM and MAX are a
    logical OR, PRODUCT and MIN an AND; AVG is refused as for every integer dtype."""
    import torch

    counts = [0, 1, 13, cc.BIG]
    results = pool4.run(cc.case_collective, kind, 3, 4, counts, [torch.int16, torch.bool])
    cc.check_members(results, kind, 3)
    if kind in ("all_reduce", "reduce_scatter_tensor"):
        assert results[0]["gloo_compared"] > 0, "Gloo took none of the int16 / bool calls"
