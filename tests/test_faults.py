"""Faults that need fresh processes: a rank killed mid-collective, strangers on a
rank's port during rendezvous, IPv6 loopback and interface selection."""
import socket
import struct
import threading
import time

import pytest
import torch
import shm_segments
import shrink_cases
from fault_cases import case_all_reduce_until_failure, case_host_and_sum

import pycollect as pc
from rank_pool import RankPool, next_group_address

# -- worker functions ------------------------------------------------------------------


def _closed_by_peer(sock) -> bool:
    """True if the peer closed (EOF) or reset (it closed with our bytes unread)."""
    try:
        return sock.recv(64) == b""
    except ConnectionResetError:
        return True


def case_strangers_during_rendezvous():
    """Rank 0 points three strangers at rank 1's port before the real connection."""
    r = pc.get_rank()
    outcome = {}
    if r == 0:
        ready = threading.Event()

        def strangers():
            addr = next_group_address(1)
            garbage = socket.create_connection(addr, timeout=15)
            garbage.sendall(b"GET / HTTP/1.0\r\n\r\n" + b"x" * 64)
            wrong_token = socket.create_connection(addr, timeout=15)
            wrong_token.sendall(struct.pack("<IIQiiII", 0x4C4F4350, 2, 12345, 0, 1, 0, 0))
            silent = socket.create_connection(addr, timeout=15)
            ready.set()
            outcome["garbage_closed"] = _closed_by_peer(garbage)
            outcome["wrong_token_closed"] = _closed_by_peer(wrong_token)
            outcome["silent_closed"] = _closed_by_peer(silent)

        th = threading.Thread(target=strangers)
        th.start()
        ready.wait(15)
    g = pc.new_group([0, 1])
    t = torch.ones(1000)
    pc.all_reduce(t, group=g)
    outcome["sum_ok"] = bool(torch.all(t == 2))
    pc.destroy_process_group(g)
    if r == 0:
        th.join(20)
    return outcome


# -- tests -----------------------------------------------------------------------------


def case_link_kinds():
    return set(pc.get_transport_info().values())


@pytest.mark.slow
@pytest.mark.parametrize("transport, algo, compress", [("shm", "auto", None), ("tcp", "auto", None),
                                                       ("shm", "tree", None), ("shm", "shm", None),
                                                       ("shm", "parts", None), ("tcp", "ring", "int8")])
def test_killed_rank_fails_every_other_rank_fast(transport, algo, compress):
    """The tree case: rank 3 talks only to its parent 2, and rank 2 to 0 and 3, so rank 1's
    loss reaches them through the ranks that saw it. The shm case: the ranks wait on flags in
    the shared arena, not on links; those with a link to rank 1 see its loss there, rank 3
    (none) when they mark the arena failed; parts: the same in the arena's gather, scatter
    and all-to-all, where the non-roots of the first two wait for the root alone. The compressed ring waits on its
    links between encodes and decodes."""
    with RankPool(4, init_gloo=False, timeout=60, env={"PYCOLLECT_TRANSPORT": transport}) as pool:
        assert pool.run(case_link_kinds) == [{transport}] * 4
        # 64 MiB a call; the parts' calls 4 MiB a part (a rank holds one per peer, twice)
        pool.submit(case_all_reduce_until_failure, (1 << 20) if algo == "parts" else 16 * 1024 * 1024, algo, compress)
        time.sleep(1.5)
        killed_at = time.time()
        pool.kill(1)
        results = pool.collect(ranks=[0, 2, 3], timeout=30)
    for r, (ok, value) in zip([0, 2, 3], results):
        assert ok, f"rank {r}: {value}"
        (name, msg, failed_at), later, calls = value
        assert name == "PeerLostError", f"rank {r}: {name}: {msg}"
        assert "rank 1" in msg or "[1]" in msg, f"rank {r} does not name the lost rank: {msg}"
        assert failed_at - killed_at < 5.0, f"rank {r} took {failed_at - killed_at:.2f} s"
        assert later == "GroupFailedError", f"rank {r}: {later}"
    # Segments lose their names once both ends have them mapped: a SIGKILL leaves none.
    assert shm_segments.left_behind() == []


@pytest.mark.slow
def test_survivors_shrink_and_go_on_after_a_rank_is_killed():
    """4 ranks all-reduce on a "pycollect" torch group; rank 3 is SIGKILLed mid-call. Every
    survivor's call fails naming it; each then shrinks that group (dist.shrink_group,
    SHRINK_ABORT) and pycollect's own default group (pc.shrink_group), renumbered 0..2, and on
    the shrunk groups an all-reduce, an all-gather and a reduce-scatter match numpy and a DDP
    step matches a fresh Gloo group of the survivors to the bit."""
    with RankPool(4, timeout=60) as pool:
        assert pool.run(shrink_cases.case_torch_group) == [4] * 4
        pool.submit(shrink_cases.case_torch_all_reduce_until_lost)
        time.sleep(1.0)
        killed_at = time.time()
        pool.kill(3)
        lost = pool.collect(ranks=[0, 1, 2], timeout=30)
        # Each names the rank it lost its link to: rank 3, or a survivor that failed first.
        for r, (ok, (name, msg, at)) in zip([0, 1, 2], lost):
            assert ok and "rank " in msg and at - killed_at < 5.0, (r, name, msg, at - killed_at)
        assert any("rank 3" in msg for _, (_, msg, _) in lost), lost
        results = pool.run_raw(shrink_cases.case_shrink_and_go_on, 3, ranks=[0, 1, 2], timeout=60)
    for r, (ok, out) in zip([0, 1, 2], results):
        assert ok, f"rank {r}: {out}"
        assert out["torch_rank_size"] == (r, 3) and out["api_rank_size"] == (r, 3), (r, out)
        assert out["all_reduce"] and out["all_gather"] and out["reduce_scatter"], (r, out)
        assert out["ddp_bitwise"] and out["ddp_moved"], (r, out)
        assert out["api_all_reduce"] == [6.0] * 5, (r, out)
        assert out["torch_shrink_s"] < 2.0 and out["api_shrink_s"] < 2.0, (r, out)


def test_ipv6_loopback():
    with RankPool(2, init_gloo=False, master_addr="::1") as pool:
        for host, ok in pool.run(case_host_and_sum):
            assert host == "::1"
            assert ok


def test_interface_by_name_and_strangers_refused():
    with RankPool(2, init_gloo=False, env={"PYCOLLECT_SOCKET_IFNAME": "lo"}) as pool:
        for host, ok in pool.run(case_host_and_sum):
            assert host == "127.0.0.1"
            assert ok
        r0, r1 = pool.run(case_strangers_during_rendezvous, timeout=60)
        assert r0 == {"garbage_closed": True, "wrong_token_closed": True, "silent_closed": True,
                      "sum_ok": True}
        assert r1 == {"sum_ok": True}


def test_unknown_interface_is_a_clear_error(monkeypatch):
    from pycollect.rendezvous import listen_address

    monkeypatch.setenv("PYCOLLECT_SOCKET_IFNAME", "nosuchif0")
    with pytest.raises(ValueError, match="nosuchif0.*interfaces: .*lo"):
        listen_address("127.0.0.1")


def test_listen_address_needs_no_lookup_for_an_ip_address():
    """MASTER_ADDR written as an IP address is routed without socket.getaddrinfo, whose IDNA
    codec import cost every rank 3 ms of CPU while forming (16 ranks on 2 cores: a third of
    the formation); a name is still looked up."""
    import subprocess
    import sys

    code = ("import sys; from pycollect.rendezvous import listen_address as la; "
            "print(la('127.0.0.1'), la('::1'), 'encodings.idna' in sys.modules, la('localhost'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["127.0.0.1", "::1", "False", "127.0.0.1"], out.stdout + out.stderr
