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
    over shared memory once every link is made)."""
    from pycollect.options import Options

    r = pc.get_rank()
    g = None if tags is None else pc.new_group(timeout=30, pg_options=dataclasses.replace(Options.from_env(),
                                                                                          host_tag=tags[r]))
    t = pc.get_topology(g)
    import torch

    n = pc.get_world_size(g)  # links are made when first used: an all-to-all makes every one
    pc.all_to_all([torch.zeros(1) for _ in range(n)], [torch.ones(1) for _ in range(n)], group=g)
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


def case_auto_choice(layout):
    """On a group of `layout` (tags): from which sizes "auto" runs each op hierarchically, and
    the phases of an automatic 4 MiB all-reduce's trace."""
    import hierarchy_cases as hc
    import torch

    g = hc.tagged_group(layout, "auto")
    t = torch.ones(1 << 20)
    pc.take_trace(g)
    with pc.tracing(g):
        pc.all_reduce(t, group=g)
    phases = sorted({e.phase for e in pc.take_trace(g)})
    frm = dict(pc.api._group(g).hierarchical_from)
    pc.destroy_process_group(g)
    return frm, phases, float(t[0])


def test_auto_runs_the_hierarchy_across_hosts_only(pool4):
    for frm, phases, value in pool4.run(case_auto_choice, "aabb"):
        assert frm["all_reduce"] is not None and frm["all_reduce"] <= 4 << 20, frm
        # 4 MiB is one slice (pipelined from 8 MiB): the host's reduce-scatter, the rails'
        # ring all-reduce (its two halves), the host's all-gather, and no flat ring phase.
        assert {p for p in phases if "host" in p} == {"intra-host reduce-scatter", "inter-host reduce-scatter",
                                                      "inter-host all-gather", "intra-host all-gather"}, phases
        assert not {"reduce-scatter", "all-gather"} & set(phases), phases
        assert value == 4.0
    for frm, phases, value in pool4.run(case_auto_choice, "aaaa"):  # one host: as before
        assert set(frm.values()) == {None} and not any("host" in p for p in phases), (frm, phases)


def test_hierarchical_results_match_gloo(pool4):
    import hierarchy_cases as hc

    for layout in ("aabb", "aaab"):
        for r, diffs in enumerate(pool4.run(hc.case_against_gloo, layout)):
            assert max(diffs) < 1e-4, (layout, r, diffs)


def case_bad_algo():
    import torch

    out = []
    for call in (lambda: pc.reduce_scatter_tensor(torch.empty(1), torch.ones(4), algo="bruck"),
                 lambda: pc.broadcast(torch.ones(1), algo="tree")):
        try:
            call()
        except ValueError as e:
            out.append(str(e))
    return out


def test_hierarchy_has_clear_errors(pool4):
    for msgs in pool4.run(case_bad_algo):
        assert "'bruck' is not an algorithm of reduce_scatter" in msgs[0], msgs
        assert "'tree' is not an algorithm of broadcast: choose one of auto, ring, hierarchical" in msgs[1], msgs
    from pycollect import _C

    c = _C.Communicator(0, 2, _C.CommOptions())
    with pytest.raises(Exception, match="need the host of each of the 2 ranks, got 3"):
        c.set_topology([0, 0, 1], 1, 1, 1, 1)


def case_probe_inter_host_refused():
    """The links-between-hosts probe in a job that is not two ranks on two hosts."""
    from pycollect.costmodel.measure import probe_inter_host

    try:
        probe_inter_host(iters=1)
    except ValueError as e:
        return str(e)
    return None


def test_probe_inter_host_needs_two_ranks_on_two_hosts(pool4):
    """`model --fit --inter-host` run in the wrong job (here 4 ranks on one host) refuses on
    every rank, naming the step and what the job is, before it measures anything."""
    for msg in pool4.run(case_probe_inter_host_refused):
        assert msg is not None and "step 1 of 2" in msg and "two ranks on two hosts" in msg and "4 ranks" in msg, msg
