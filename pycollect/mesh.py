"""Two-dimensional layouts of the ranks: the groups that hybrid sharding (shard x
replicate) and tensor x data parallelism need, built once with new_group.

    inner, outer = grid_groups(2)     # 4 ranks: inner {0,1} {2,3}, outer {0,2} {1,3}

With W = outer_size x inner ranks, the inner groups are consecutive blocks (rank r is in
block r // inner) and the outer groups join the ranks with the same place in their
block (r % inner). Consecutive ranks usually share a host, so the inner dimension is
the one for the chattiest traffic (tensor parallelism, FSDP's gathers).
"""
from __future__ import annotations

from typing import Tuple

from . import api
from ._sync import first_difference
from .group import NON_GROUP_MEMBER, ProcessGroup


def grid_groups(inner: int) -> Tuple[ProcessGroup, ProcessGroup]:
    """(this rank's inner group, its outer group) over the default group. Every rank must
    call it with the same `inner`; ranks that disagree all get a ValueError, nobody hangs."""
    world = api.get_world_size()
    if not isinstance(inner, int) or inner < 1 or world % inner:
        raise ValueError(f"grid_groups: inner size {inner!r} must be a positive divisor of the world size {world}")
    problem = first_difference([f"inner size {inner}"], None, noun="layout")
    if problem:
        raise ValueError(f"grid_groups: the ranks disagree on the layout: {problem}")
    blocks = [list(range(b * inner, (b + 1) * inner)) for b in range(world // inner)]
    places = [list(range(p, world, inner)) for p in range(inner)]
    mine = []
    for members in blocks + places:  # every rank creates every group, in the same order
        g = api.new_group(members)
        if g is not NON_GROUP_MEMBER:
            mine.append(g)
    return mine[0], mine[1]
