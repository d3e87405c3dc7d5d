"""Shrinking a group: after a rank was lost (or on request), its survivors carry on as a
group of their own, instead of restarting the job.

    excluded = checked_exclusion([3], group.size, group.rank)   # ValueError / RuntimeError
    agree(store, keys, group.rank, group.size, excluded, timeout)  # every survivor, same view
    ... then the survivors form the new group (group.py: ProcessGroup.shrunk)

The survivors meet once in the store the group formed in, under that formation's own keys
(formation.py): each writes whom it excludes, then reads every other survivor's view. A
survivor with another view is a MismatchError naming both views, on every survivor that
reads it; one that never writes within the timeout is a CollectiveTimeoutError naming it
(an excluded rank that is alive and calls shrink is refused before it writes: only the
survivors meet). Then they form the new group as new_group forms one, under a name made
from the group's and the excluded ranks, so that survivors that disagree never meet there.

Why a new formation and not the links that stand: a group that lost a rank aborts every one
of its links (the loss crosses the group in milliseconds: docs/transport.md), and a link
that survived would hold a call's bytes half-sent, in a stream with no marks to resume at.
Forming costs tens of milliseconds at 8 ranks (docs/formation.md): the agreement's store
round trip, the address exchange, and the ring's two links, the rest made when first used.
The store must outlive the lost rank: torchrun's agent store does; a store hosted by the
lost rank itself (init_method="tcp://" with rank 0 lost) takes every later formation with it.
"""
from __future__ import annotations

import json
import time
from typing import List, Sequence

from .errors import CollectiveTimeoutError, MismatchError

POLL_S = 0.002  # how often a survivor looks for the others' views


def checked_exclusion(excluded: Sequence[int], size: int, rank: int) -> List[int]:
    """`excluded` (ranks of a group of `size`), sorted; refused as torch's shrink_group
    refuses it: empty, out of range, repeated, everyone, or this very rank."""
    ranks = [int(r) for r in excluded]
    if not ranks:
        raise ValueError("shrink: name at least one rank to exclude")
    bad = [r for r in ranks if not 0 <= r < size]
    if bad:
        raise ValueError(f"shrink: rank(s) {bad} are outside the group [0, {size})")
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"shrink: ranks to exclude {ranks} repeat a rank")
    if len(ranks) >= size:
        raise ValueError(f"shrink: excluding {sorted(ranks)} would leave no rank of the {size}")
    if rank in ranks:
        raise RuntimeError(f"shrink: rank {rank} is among the ranks to exclude {sorted(ranks)}; only the "
                           "survivors call shrink (an excluded rank leaves the group)")
    return sorted(ranks)


def shrunk_name(name: str, excluded: Sequence[int]) -> str:
    """The new group's name: survivors that exclude the same ranks agree on it."""
    return f"{name}-x{'.'.join(str(r) for r in excluded)}"


def agree(store, keys: str, rank: int, size: int, excluded: Sequence[int], timeout_s: float) -> None:
    """Every survivor of a group of `size` (this one is `rank`) excludes the same ranks, or this
    raises naming who differs or who never came, within `timeout_s`."""
    mine = list(excluded)
    store.set(f"{keys}/shrink/{rank}", json.dumps(mine))
    waiting = [r for r in range(size) if r != rank and r not in mine]
    deadline = time.monotonic() + timeout_s
    while waiting:
        for r in list(waiting):
            key = f"{keys}/shrink/{r}"
            if not store.check([key]):  # never a blocking get: the client may be shared
                continue
            theirs = json.loads(store.get(key).decode())
            if theirs != mine:
                raise MismatchError(f"shrink: the survivors disagree about whom to exclude: rank {rank} excludes "
                                    f"{mine}, rank {r} excludes {theirs}")
            waiting.remove(r)
        if waiting and time.monotonic() > deadline:
            raise CollectiveTimeoutError(f"shrink: rank(s) {waiting} did not join the shrink (excluding {mine}) "
                                         f"within {timeout_s:g} s: lost too, or they exclude others")
        if waiting:
            time.sleep(POLL_S)
