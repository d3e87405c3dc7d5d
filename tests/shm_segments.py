"""The engine's shared-memory segments still named in /dev/shm, for the tests that check
none is left behind. A segment is named only from its creation until its peer has it
mapped, so while the suite runs in parallel another test's group forming shows one for a
moment: `left_behind` waits a while for such names to go before it reports them."""
from __future__ import annotations

import glob
import time


def named() -> set:
    """Every pycollect segment named now."""
    return set(glob.glob("/dev/shm/pycollect-*"))


def left_behind(before=frozenset(), settle_s: float = 10.0) -> list:
    """The segments named now (less `before`) that are still named after up to `settle_s`."""
    stuck = named() - set(before)
    deadline = time.monotonic() + settle_s
    while stuck and time.monotonic() < deadline:
        time.sleep(0.2)
        stuck &= named()
    return sorted(stuck)
