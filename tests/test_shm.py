"""The shared-memory transport: which links it carries (pc.get_transport_info), a group
that mixes shared-memory and TCP links, the ring path for data that is never read
straight from the sender's memory, PYCOLLECT_TRANSPORT=shm where it cannot be had,
and no segment left behind in /dev/shm. The collective suite runs on both transports
(test_collectives.py); a rank killed mid-collective on shm links is in test_faults.py."""
import os
import signal
import time

import pytest
import torch

import pycollect as pc
import shm_segments
from rank_pool import RankPool


# -- worker functions ------------------------------------------------------------------


def case_segments_while_connected():
    """Links of the default group once every one is made (an all-to-all needs them all), and
    whether any segment still has a name while they run."""
    t = torch.ones(1 << 20)
    pc.all_reduce(t)
    w = pc.get_world_size()
    pc.all_to_all([torch.zeros(1) for _ in range(w)], [torch.ones(1) for _ in range(w)])
    return pc.get_transport_info(), shm_segments.left_behind(), bool(torch.all(t == pc.get_world_size()))


def case_mixed_group(env: dict):
    """A group over all ranks where ranks 0-1 and 2-3 claim different hosts
    (PYCOLLECT_HOST_TAG): shared memory inside each pair, TCP across. Runs every
    collective with large and small counts and checks the results exactly."""
    r, w = pc.get_rank(), pc.get_world_size()
    saved = dict(os.environ)
    os.environ.update(env)
    os.environ["PYCOLLECT_HOST_TAG"] = "host-a" if r < 2 else "host-b"
    try:
        g = pc.new_group(list(range(w)))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    bad = []
    for n in [1, 13, 4099, 1_000_003]:
        base = torch.arange(n, dtype=torch.int64)
        t = base * (r + 1)
        pc.all_reduce(t, group=g)
        if not torch.equal(t, base * (w * (w + 1) // 2)):
            bad.append(("all_reduce", n))
        out = torch.empty(n * w, dtype=torch.int64)
        pc.all_gather_into_tensor(out, base + r, group=g)
        if not torch.equal(out, torch.cat([base + q for q in range(w)])):
            bad.append(("all_gather", n))
        mine = torch.empty(n, dtype=torch.int64)
        pc.reduce_scatter_tensor(mine, torch.arange(n * w, dtype=torch.int64), group=g)
        if not torch.equal(mine, torch.arange(n * r, n * (r + 1), dtype=torch.int64) * w):
            bad.append(("reduce_scatter", n))
        b = base + 7 if r == 3 else torch.zeros(n, dtype=torch.int64)
        pc.broadcast(b, src=3, group=g)
        if not torch.equal(b, base + 7):
            bad.append(("broadcast", n))
    info = pc.get_transport_info(g)
    pc.destroy_process_group(g)
    return info, bad


def case_last_message_then_leave(flag: str):
    """Rank 1 sends twice and destroys the group at once; the test stops rank 0 while it
    waits for the second message, so on waking it finds the bytes and the closed socket
    together. It must get the bytes (as TCP delivers data before the FIN), not a
    PeerLostError."""
    import time

    g = pc.new_group([0, 1])
    r = pc.get_rank()
    if r == 1:
        pc.send(torch.full((100,), 1.0), dst=0, group=g)
        while not os.path.exists(flag):  # the test has stopped rank 0
            time.sleep(0.01)
        pc.send(torch.full((100,), 2.0), dst=0, group=g)
        pc.destroy_process_group(g)
    if r == 0:
        first, second = torch.zeros(100), torch.zeros(100)
        pc.recv(first, src=1, group=g)
        pc.recv(second, src=1, group=g)
        pc.destroy_process_group(g)
        return bool(torch.all(first == 1)) and bool(torch.all(second == 2))
    return True


def case_links_made_when_used(links: str):
    """A fresh group over the pool's 4 ranks, with PYCOLLECT_LINKS=`links`: the links made
    after formation, after a send between ranks that are not ring neighbours (0 and 2), and
    after an all-to-all (every link, most dialed by both ends at once); and whether the
    results were right."""
    r, w = pc.get_rank(), pc.get_world_size()
    saved = dict(os.environ)
    os.environ["PYCOLLECT_LINKS"] = links
    try:
        g = pc.new_group(list(range(w)))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    def in_step():  # every rank has looked before any makes more links: a ring call ends on
        pc.all_reduce(torch.zeros(1), group=g, algo="ring")  # no rank before all entered it

    formed = sorted(pc.get_transport_info(g))
    in_step()
    t = torch.full((1000,), float(r))
    if r == 0:
        pc.send(t, dst=2, group=g)
    elif r == 2:
        pc.recv(t, src=0, group=g)
    sent = sorted(pc.get_transport_info(g))
    in_step()
    ok = r != 2 or bool(torch.all(t == 0))
    outs = [torch.zeros(3) for _ in range(w)]
    pc.all_to_all(outs, [torch.full((3,), float(r * w + q)) for q in range(w)], group=g)
    ok = ok and all(torch.equal(o, torch.full((3,), float(q * w + r))) for q, o in enumerate(outs))
    kinds = pc.get_transport_info(g)
    pc.destroy_process_group(g)
    return formed, sent, kinds, ok


def case_link_to_a_departed_peer():
    """Rank 2 leaves a fresh group right after its first (ring) call; then rank 0, which has no
    link to rank 2 yet, sends to it: the send must fail within seconds, naming rank 2."""
    r = pc.get_rank()
    g = pc.new_group([0, 1, 2, 3])
    pc.all_reduce(torch.ones(1), group=g, algo="ring")  # only ring neighbours' links
    if r == 2:
        pc.destroy_process_group(g)
    pc.barrier()  # the pool's own group: rank 2 has left g
    error, took = None, 0.0
    if r == 0:
        t0 = time.monotonic()
        try:
            pc.send(torch.ones(4), dst=2, group=g)
        except Exception as e:  # noqa: BLE001 - the test checks the type and text
            error = f"{type(e).__name__}: {e}"
        took = time.monotonic() - t0
    pc.barrier()
    if r != 2:
        pc.destroy_process_group(g)
    return error, took


def case_new_group_error():
    r = pc.get_rank()
    saved = dict(os.environ)
    os.environ["PYCOLLECT_HOST_TAG"] = f"host-{r}"
    try:
        pc.new_group([0, 1])
        return "no error"
    except Exception as e:  # noqa: BLE001 - the test checks the type and text
        return f"{type(e).__name__}: {e}"
    finally:
        os.environ.clear()
        os.environ.update(saved)


# -- tests -----------------------------------------------------------------------------


def test_default_links_are_shared_memory_and_unnamed(pool4):
    for r, (info, leftover, ok) in enumerate(pool4.run(case_segments_while_connected)):
        assert info == {p: "shm" for p in range(4) if p != r}
        assert leftover == [], f"segments still named while the group runs: {leftover}"
        assert ok


@pytest.mark.parametrize("env", [{"PYCOLLECT_SHM_SINGLE_COPY_BYTES": "65536"}, {"PYCOLLECT_SEGMENT_BYTES": "16384"}],
                         ids=["single-copy", "ring-only"])
def test_mixed_group_shares_memory_within_a_host_and_tcp_across(pool4, env):
    """single-copy: every segment of 64 KiB or more is read from the sender's memory;
    ring-only: 16 KiB segments stay below the threshold, so every byte goes through the
    rings (the path of a kernel that refuses process_vm_readv)."""
    results = pool4.run(case_mixed_group, env)
    for r, (info, bad) in enumerate(results):
        same = {0: 1, 1: 0, 2: 3, 3: 2}[r]
        assert info == {p: "shm" if p == same else "tcp" for p in range(4) if p != r}
        assert bad == [], f"rank {r}: wrong results {bad}"
    assert shm_segments.left_behind() == []


def test_a_peer_that_sends_and_leaves_is_not_lost(pool4, tmp_path):
    flag = str(tmp_path / "rank0-stopped")
    pool4.submit(case_last_message_then_leave, flag)
    time.sleep(2.0)  # rank 0 has its first message and sleeps waiting for the second
    rank0 = pool4.procs[0].pid
    os.kill(rank0, signal.SIGSTOP)
    try:
        open(flag, "w").close()
        assert pool4.collect(ranks=[1, 2, 3], timeout=60) == [(True, True)] * 3
        time.sleep(0.2)  # rank 1's socket is closed now, its last bytes in the ring
    finally:
        os.kill(rank0, signal.SIGCONT)
    assert pool4.collect(ranks=[0], timeout=60) == [(True, True)]


@pytest.mark.parametrize("links", ["used", "all"])
def test_links_are_made_when_first_used(pool4, links):
    results = pool4.run(case_links_made_when_used, links)
    for r, (formed, sent, kinds, ok) in enumerate(results):
        ring = sorted({(r + 1) % 4, (r + 3) % 4})
        everyone = [p for p in range(4) if p != r]
        assert formed == (ring if links == "used" else everyone), (r, formed)
        extra = {0: [2], 2: [0]}.get(r, []) if links == "used" else []
        assert sent == sorted(set(formed) | set(extra)), (r, sent)
        assert kinds == {p: "shm" for p in everyone} and ok, (r, kinds, ok)


def test_a_link_to_a_departed_peer_fails_clearly(pool4):
    error, took = pool4.run(case_link_to_a_departed_peer)[0]
    assert error is not None and "rank 2" in error and "refused" in error, error
    assert took < 5.0, f"the send took {took:.1f} s to fail: {error}"


def test_forced_shm_across_hosts_is_a_clear_error_on_both_ranks():
    with RankPool(2, init_gloo=False, env={"PYCOLLECT_TRANSPORT": "shm"}, timeout=60) as pool:
        for outcome in pool.run(case_new_group_error, timeout=60):
            assert "InvalidArgument" in outcome and "cannot share memory" in outcome, outcome


def test_transport_option_is_checked():
    from pycollect.options import Options

    assert Options.from_env({"PYCOLLECT_TRANSPORT": "SHM"}).transport == "shm"
    assert Options.from_env({}).transport is None
    with pytest.raises(ValueError, match="PYCOLLECT_TRANSPORT='udp' must be one of auto, tcp, shm"):
        Options.from_env({"PYCOLLECT_TRANSPORT": "udp"})


def test_a_rank_bound_to_one_core_counts_its_peers_as_on_cores_of_their_own(monkeypatch):
    """A process allowed a single core was bound to it by its launcher (mpirun --bind-to
    core, launch.pin_to_core): where the machine has a core for every rank, the ranks fit
    (spinning and the 1 MiB single-copy threshold), else not; several cores allowed are
    counted as before."""
    from pycollect.options import default_spin_us, ranks_fit_cores

    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert ranks_fit_cores(2) and ranks_fit_cores(4) and not ranks_fit_cores(5)
    assert default_spin_us(4) > 0 and default_spin_us(5) == 0
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert ranks_fit_cores(2) and not ranks_fit_cores(3)


def test_single_copy_threshold_follows_the_cores(monkeypatch):
    """Shared memory reads messages from the sender's memory from 1 MiB where this host's
    ranks each have a core, from 64 KiB where they outnumber the cores; the variable
    overrides both and must be > 0."""
    import datetime

    from pycollect.group import _comm_options
    from pycollect.options import Options, default_single_copy_bytes

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert default_single_copy_bytes(4) == 1 << 20 and default_single_copy_bytes(5) == 64 << 10
    td = datetime.timedelta(seconds=5)
    assert _comm_options(td, Options(), 4).shm_single_copy_bytes == 1 << 20
    assert _comm_options(td, Options(), 8).shm_single_copy_bytes == 64 << 10
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # 8 ranks, 2 on this host
    assert _comm_options(td, Options(), 8).shm_single_copy_bytes == 1 << 20
    chosen = Options.from_env({"PYCOLLECT_SHM_SINGLE_COPY_BYTES": "4096"})
    assert _comm_options(td, chosen, 8).shm_single_copy_bytes == 4096
    with pytest.raises(ValueError, match="PYCOLLECT_SHM_SINGLE_COPY_BYTES='0' must be >= 1"):
        Options.from_env({"PYCOLLECT_SHM_SINGLE_COPY_BYTES": "0"})
