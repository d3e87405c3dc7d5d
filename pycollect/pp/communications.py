"""The traffic between neighbouring pipeline stages, on the engine's point-to-point calls.

    links = StageLinks(group, ranks, stage)     # ranks: the group's global ranks, in stage order
    links.send_forward(y, announce)             # stage s -> s+1: an activation
    x = links.recv_forward(announce)            # stage s <- s-1
    links.send_backward(x.grad)                 # stage s -> s-1: the gradient of its activation
    g = links.recv_backward(y)                  # stage s <- s+1, shaped like our y
    links.flush()                               # wait for every send posted

Each direction of each link carries one kind of message in order, so no tags are needed:
forward, stage s sends only activations (each step's first preceded by a header when
asked) to s+1; backward, s+1 sends only gradients to s. Sends are posted with pc.isend
and complete in the background, which is what lets 1F1B's steady state send its
activation forward and then wait for a gradient without either neighbour blocking.
Receives block (the API's fast call, on the caller's thread); `wait_s` adds up the time
spent blocked in them and in flush, the part of a step that is bubble (or wire).

The header: a receiver must size its buffer before the data arrives. The sender
announces (ndim, dtype code, dims...) in a HEADER_SLOTS int64 tensor whenever the
caller says the shape may have changed (the pipeline does so when the micro-batch's
shape changes, which every stage knows because every stage is given the batch). The
gradient going back has the shape of the activation that came forward, so it needs none.
"""
from __future__ import annotations

import time
from typing import List, Optional, Sequence, Tuple

import torch

from .. import api
from ..types import DTYPE_CODES, torch_dtype_name

HEADER_SLOTS = 8  # ndim, dtype code, then up to 6 dimensions
_DTYPE_OF_CODE = {code: getattr(torch, name) for name, code in DTYPE_CODES.items()}


def encode_header(t: torch.Tensor) -> torch.Tensor:
    name = torch_dtype_name(t.dtype)
    if name not in DTYPE_CODES:
        raise TypeError(f"pipeline activations of dtype {name} cannot travel; use one of {sorted(DTYPE_CODES)}")
    if t.dim() > HEADER_SLOTS - 2:
        raise ValueError(f"pipeline activations have at most {HEADER_SLOTS - 2} dimensions, got shape "
                         f"{tuple(t.shape)}")
    header = torch.zeros(HEADER_SLOTS, dtype=torch.int64)
    header[0], header[1] = t.dim(), DTYPE_CODES[name]
    header[2:2 + t.dim()] = torch.tensor(t.shape, dtype=torch.int64)
    return header


def decode_header(header: torch.Tensor) -> Tuple[Tuple[int, ...], torch.dtype]:
    ndim, code = int(header[0]), int(header[1])
    return tuple(int(d) for d in header[2:2 + ndim]), _DTYPE_OF_CODE[code]


class StageLinks:
    """One stage's two links: to the previous stage (None on the first) and the next
    (None on the last)."""

    def __init__(self, group, ranks: Sequence[int], stage: int):
        self.group = group
        self.prev: Optional[int] = ranks[stage - 1] if stage > 0 else None
        self.next: Optional[int] = ranks[stage + 1] if stage < len(ranks) - 1 else None
        self.wait_s = 0.0
        self.headers_sent = 0
        self._incoming: Optional[Tuple[Tuple[int, ...], torch.dtype]] = None
        self._sends: List[Tuple[object, torch.Tensor]] = []  # (work, tensor kept alive until done)

    def send_forward(self, y: torch.Tensor, announce: bool) -> None:
        y = y.detach().contiguous()
        if announce:
            self._post(encode_header(y), self.next)
            self.headers_sent += 1
        self._post(y, self.next)

    def recv_forward(self, announce: bool) -> torch.Tensor:
        if announce:
            header = torch.empty(HEADER_SLOTS, dtype=torch.int64)
            self._recv(header, self.prev)
            self._incoming = decode_header(header)
        if self._incoming is None:
            raise RuntimeError("recv_forward before any header: the first receive must announce")
        shape, dtype = self._incoming
        x = torch.empty(shape, dtype=dtype)
        self._recv(x, self.prev)
        return x

    def send_backward(self, grad: torch.Tensor) -> None:
        self._post(grad.detach().contiguous(), self.prev)

    def recv_backward(self, like: torch.Tensor) -> torch.Tensor:
        grad = torch.empty(like.shape, dtype=like.dtype)
        self._recv(grad, self.next)
        return grad

    def flush(self) -> None:
        """Wait for every send posted so far (their buffers may then be reused or freed)."""
        sends, self._sends = self._sends, []
        for work, _ in sends:
            self._wait(work)

    def _post(self, t: torch.Tensor, dst: int) -> None:
        self._sends.append((api.isend(t, dst=dst, group=self.group), t))

    def _wait(self, work) -> None:
        start = time.perf_counter()
        work.wait()
        self.wait_s += time.perf_counter() - start

    def _recv(self, t: torch.Tensor, src: int) -> None:
        """A blocking receive (the API's fast call: on this thread, no hand-off to the
        engine's), its time counted as waiting."""
        start = time.perf_counter()
        api.recv(t, src=src, group=self.group)
        self.wait_s += time.perf_counter() - start
