"""A group's topology (pycollect.topology): which ranks share a host, learned when the group
forms by the test the shared-memory upgrade makes, so it agrees with the links the group
got: shared memory exactly between ranks of one host. Namespace hosts: test_netns_hosts.py."""
import dataclasses

import pytest

import pycollect as pc
from pycollect.topology import Topology


def case_topology(tags):
    """Groups over every rank with PYCOLLECT_HOST_TAG = tags[rank] (None: the environment's):
    (str of its topology, its hosts, host/local rank/local size here, the peers it reaches
    over shared memory)."""
    from pycollect.options import Options

    r = pc.get_rank()
    g = None if tags is None else pc.new_group(timeout=30, pg_options=dataclasses.replace(Options.from_env(),
                                                                                          host_tag=tags[r]))
    t = pc.get_topology(g)
    shm = sorted(p for p, kind in pc.get_transport_info(g).items() if kind == "shm")
    out = (str(t), t.hosts, t.host, t.local_rank, t.local_size, shm)
    if g is not None:
        pc.destroy_process_group(g)
    return out


@pytest.mark.parametrize("tags, hosts", [
    (None, ((0, 1, 2, 3),)),
    (("a", "a", "b", "b"), ((0, 1), (2, 3))),
    (("a", "a", "a", "b"), ((0, 1, 2), (3,))),
    (("b", "a", "b", "a"), ((0, 2), (1, 3))),
], ids=["one host", "2+2", "3+1", "interleaved"])
def test_topology_matches_the_shared_memory_links(pool4, tags, hosts):
    for r, (text, got, host, local_rank, local_size, shm) in enumerate(pool4.run(case_topology, tags)):
        assert got == hosts, (r, text)
        mine = next(h for h in hosts if r in h)
        assert (host, local_rank, local_size) == (hosts.index(mine), mine.index(r), len(mine))
        assert shm == [p for p in mine if p != r], f"rank {r}: shared memory to {shm}, host {mine}"


def test_topology_reads_well():
    t = Topology.from_identities(["x", "x", "y", "x", ""], [0, 1, 2, 3, 4], 2)
    assert t.hosts == ((0, 1, 3), (2,), (4,)) and t.num_hosts == 3 and not t.uniform
    assert (t.host, t.local_rank, t.local_size, t.host_of(3)) == (1, 0, 1, 0)
    assert str(t) == "3 hosts of 3+1+1 ranks: [0, 1, 3] [2] [4]"
    assert str(Topology.from_identities(["h"] * 2 + ["k"] * 2, [4, 5, 6, 7], 5)) == "2 hosts x 2 ranks: [4, 5] [6, 7]"
    with pytest.raises(ValueError, match="rank 9 is not in this group"):
        t.host_of(9)
