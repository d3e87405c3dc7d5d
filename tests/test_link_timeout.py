"""PYCOLLECT_LINK_TIMEOUT: every link socket has keepalive set from it, an idle group
outlives it, and a peer that is slow to read (its receive window stays closed for
longer than the timeout) is not taken for a dead one. A cut link itself needs a
network namespace (the multi-host tests); loopback always answers."""
import os
import socket
import time

import torch

import pycollect as pc
from rank_pool import RankPool

LINK_TIMEOUT = 2  # seconds: keepalive probes every max(1, 2 // 3) = 1 s, 3 of them


def case_link_socket_options():
    """(SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT) of each of this rank's link
    sockets in the default group, found among the process's descriptors by their ports."""
    from pycollect import world
    from pycollect.formation import published_address

    ports = [published_address(world.store, "g0", r)[1] for r in range(pc.get_world_size())]
    mine, peers = ports[pc.get_rank()], set(ports) - {ports[pc.get_rank()]}
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            s = socket.socket(fileno=os.dup(int(fd)))
        except OSError:
            continue
        with s:
            if s.type != socket.SOCK_STREAM or s.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            try:
                local, remote = s.getsockname()[1], s.getpeername()[1]
            except OSError:  # a listening socket
                continue
            if local == mine or remote in peers:
                found.append((s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                              s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                              s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                              s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT)))
    return found


def case_idle_then_all_reduce(idle_s: float):
    time.sleep(idle_s)
    t = torch.full((1000,), float(pc.get_rank() + 1))
    pc.all_reduce(t)
    return bool(torch.all(t == 3))


def case_slow_reader(delay_s: float):
    """Rank 0 sends 64 MiB at once; rank 1 posts the receive `delay_s` later, so rank 0's
    bytes fill rank 1's receive buffer and wait on a closed TCP window all that time."""
    t = torch.ones(16 * 1024 * 1024)
    if pc.get_rank() == 0:
        pc.send(t, dst=1)
        return True
    time.sleep(delay_s)
    t.zero_()
    pc.recv(t, src=0)
    return bool(torch.all(t == 1))


def test_link_timeout_sets_keepalive_and_spares_live_peers():
    with RankPool(2, init_gloo=False, env={"PYCOLLECT_LINK_TIMEOUT": str(LINK_TIMEOUT)}) as pool:
        for found in pool.run(case_link_socket_options):
            assert found == [(1, 1, 1, 3)], found
        assert pool.run(case_idle_then_all_reduce, 2.5 * LINK_TIMEOUT) == [True, True]
        assert pool.run(case_slow_reader, 2.5 * LINK_TIMEOUT, timeout=60) == [True, True]


def test_default_link_timeout_is_a_minute(pool3):
    # The ring's two links at least; the shared pool's earlier tests may have made more (a
    # pair's point-to-point messages have a link of their own): each is set alike.
    for found in pool3.run(case_link_socket_options):
        assert len(found) >= 2 and set(found) == {(1, 20, 20, 3)}, found
