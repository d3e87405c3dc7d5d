"""Every collective x dtype x op x world size (1-4) x count (0, 1, 13, ~2 MiB),
against a numpy reference and torch.distributed Gloo in the same processes, with
all ranks bit-identical, once over shared-memory links and once over TCP links (the
session's 4-rank pools, conftest.py: pool4_each). World sizes 1-3 run in sub-groups
made with pycollect.new_group and dist.new_group.
"""
import pytest

import collective_cases as cc

pytestmark = pytest.mark.slow  # the full dtype x op x size matrix: minutes, not seconds

WORLD = 4




@pytest.mark.parametrize("ws", [1, 2, 3, 4])
@pytest.mark.parametrize("kind", ["all_reduce", "all_gather_into_tensor", "all_gather",
                                  "reduce_scatter_tensor", "reduce_scatter", "broadcast"])
def test_collective_matches_reference_and_gloo(pool4_each, kind, ws):
    counts = cc.COUNTS if kind in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor") else [0, 1, 13]
    results = pool4_each.run(cc.case_collective, kind, ws, 1, counts)
    members = [res for res in results if res is not None]
    assert len(members) == ws
    assert members[0]["cases"] > 0
    if kind != "all_reduce" or ws > 1:
        # Gloo must have been compared on most cases (it lacks a few dtypes/ops)
        assert members[0]["gloo_compared"] > 0 or kind == "broadcast"
    if kind.startswith("reduce_scatter"):
        return  # each rank holds a different chunk; checked against the reference
    for case_index, (what, d0) in enumerate(members[0]["digests"]):
        for r, res in enumerate(members[1:], start=1):
            assert res["digests"][case_index] == (what, d0), f"{what}: rank {r} differs from rank 0"


@pytest.mark.parametrize("ws", [1, 2, 3, 4])
def test_all_to_all_single_matches_gloo(pool4_each, ws):
    results = [res for res in pool4_each.run(cc.case_all_to_all, ws) if res is not None]
    assert len(results) == ws and results[0] == 8
