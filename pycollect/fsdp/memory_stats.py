"""Memory accounting for sharded training.

UnshardedTracker counts the bytes of gathered (unsharded) parameters alive at each
moment, with the peak per phase (forward, backward) and which units made it up.
model_state_bytes() sums what a rank holds in parameters, gradients and optimizer
state. peak_rss_bytes() / reset_peak_rss() read and reset the process's resident-set
high-water mark (Linux /proc), so a benchmark can measure the steps and not the setup.
"""
from __future__ import annotations

import os
import resource
from typing import Dict, Iterable, Optional

import torch


class UnshardedTracker:
    """Bytes of unsharded parameter buffers alive now, and their peaks per phase."""

    def __init__(self):
        self.alive: Dict[str, int] = {}  # unit name -> bytes
        self.phase = "idle"
        self.peak: Dict[str, int] = {}
        self.peak_units: Dict[str, tuple] = {}

    @property
    def current(self) -> int:
        return sum(self.alive.values())

    def set_phase(self, phase: str) -> None:
        self.phase = phase

    def allocated(self, unit: str, nbytes: int) -> None:
        if nbytes:
            self.alive[unit] = self.alive.get(unit, 0) + nbytes
            now = self.current
            if now > self.peak.get(self.phase, -1):
                self.peak[self.phase] = now
                self.peak_units[self.phase] = tuple(sorted(self.alive))

    def freed(self, unit: str, nbytes: int) -> None:
        if nbytes:
            left = self.alive.get(unit, 0) - nbytes
            if left:
                self.alive[unit] = left
            else:
                self.alive.pop(unit, None)

    def reset_peaks(self) -> None:
        self.peak.clear()
        self.peak_units.clear()

    def report(self) -> dict:
        return {"unsharded_bytes_now": self.current,
                "peak_unsharded_bytes": dict(self.peak),
                "peak_units": {k: list(v) for k, v in self.peak_units.items()}}


def _nbytes(tensors: Iterable[Optional[torch.Tensor]]) -> int:
    seen, total = set(), 0
    for t in tensors:
        if isinstance(t, torch.Tensor) and id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def model_state_bytes(module: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer] = None) -> dict:
    """Bytes this rank holds in parameters, their gradients and the optimizer's state.

    For a sharded module the parameters are the flat local shards. Optimizer state
    counts every tensor in optimizer.state (Adam: exp_avg, exp_avg_sq and a 1-element
    step counter per parameter tensor).
    """
    params = list(module.parameters())
    state = 0
    if optimizer is not None:
        state = _nbytes(v for s in optimizer.state.values() for v in s.values())
    out = {"params": _nbytes(params), "grads": _nbytes(p.grad for p in params), "optim": state}
    out["total"] = out["params"] + out["grads"] + out["optim"]
    return out


def peak_rss_bytes() -> int:
    """The resident-set high-water mark of this process (VmHWM; ru_maxrss as fallback)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def current_rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def reset_peak_rss() -> bool:
    """Reset the high-water mark to the current RSS (Linux >= 4.0); False if unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
