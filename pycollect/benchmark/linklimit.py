"""The link limit: TCP bandwidth between two ranks sending both ways at once.

Measured with plain sockets (one sender and one receiver thread per rank, the
copy loops are in the kernel and the GIL is released), independently of
pycollect's transport, so busbw can be read as a fraction of what TCP gives.
"""
from __future__ import annotations

import socket
import threading
import time


def measure(rank: int, store, nbytes: int = 64 * 1024 * 1024, repeats: int = 3) -> float:
    """Per-direction GB/s between ranks 0 and 1 (call on both; others return 0)."""
    if rank > 1:
        return 0.0
    if rank == 0:
        srv = socket.create_server(("127.0.0.1", 0))
        store.set("linklimit/port", str(srv.getsockname()[1]))
        conn, _ = srv.accept()
        srv.close()
    else:
        port = int(store.get("linklimit/port"))
        conn = socket.create_connection(("127.0.0.1", port))
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = bytearray(nbytes)
    inb = bytearray(nbytes)
    view = memoryview(inb)

    def receive():
        got = 0
        while got < nbytes:
            n = conn.recv_into(view[got:], nbytes - got)
            if n == 0:
                raise ConnectionError("link-limit peer closed")
            got += n

    best = []
    for _ in range(repeats):
        conn.sendall(b"s")  # a tiny handshake so both start together
        if conn.recv(1) != b"s":
            raise ConnectionError("link-limit handshake failed")
        t0 = time.perf_counter()
        th = threading.Thread(target=receive)
        th.start()
        conn.sendall(out)
        th.join()
        best.append(nbytes / (time.perf_counter() - t0) / 1e9)
    conn.close()
    best.sort()
    return best[len(best) // 2]
