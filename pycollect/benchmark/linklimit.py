"""The reference lines: what the link carries, and what memory copies.

The link limit: ranks 0 and 1 each isend `nbytes` to the other and irecv the
other's, over pycollect's links (TCP, or shared memory under PYCOLLECT_TRANSPORT
auto/shm): raw streaming with no algorithm and no reduction, so it is what one link
carries in each direction at once here, and a ring's busbw can be read as a
fraction of it.

The memcpy limit (memcpy_bandwidth): one rank copying 64 MiB between two warm
buffers, bytes copied per second. A shared-memory link moves every byte with at
least one such copy, so on one host no transport's busbw goes far beyond it. (A measurement with Python sockets and threads
came out lower than the engine itself, limited by the GIL, so it would not be a
ceiling.) The median of `repeats` transfers, in GB/s per direction.
"""
from __future__ import annotations

import statistics
import time

import torch

from .. import api as pc


def memcpy_bandwidth(nbytes: int = 64 * 1024 * 1024, repeats: int = 7) -> float:
    """GB/s of a 64 MiB numpy copy between warm buffers (median of `repeats`)."""
    import numpy as np

    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.zeros_like(src)
    samples = []
    for _ in range(repeats + 1):  # the first copy faults the pages in
        t0 = time.perf_counter()
        np.copyto(dst, src)
        samples.append(nbytes / (time.perf_counter() - t0) / 1e9)
    return statistics.median(samples[1:])


def measure(rank: int, nbytes: int = 64 * 1024 * 1024, repeats: int = 5) -> float:
    """Call on every rank; ranks other than 0 and 1 return 0 at once."""
    if rank > 1:
        return 0.0
    peer = 1 - rank
    out = torch.zeros(nbytes // 4)
    inp = torch.empty_like(out)
    token = torch.zeros(1)
    samples = []
    for _ in range(repeats + 1):  # the first transfer warms up buffers and windows
        # both sides start together: a 4-byte ping-pong right before the transfer
        if rank == 0:
            pc.send(token, peer)
            pc.recv(token, peer)
        else:
            pc.recv(token, peer)
            pc.send(token, peer)
        t0 = time.perf_counter()
        s = pc.isend(out, peer)
        r = pc.irecv(inp, peer)
        s.wait()
        r.wait()
        samples.append(nbytes / (time.perf_counter() - t0) / 1e9)
    return statistics.median(samples[1:])
