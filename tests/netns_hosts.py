"""Hosts for the multi-host tests: pycollect.netns namespaces on a switch (each cable
rate-limited with tc tbf), and rank pools with one rank per host.

    with hosts_or_skip(4, rate="1gbit") as hosts:     # skips, with the reason, if not buildable
        with host_pool(hosts, 3) as pool:             # ranks 0..2 on hosts 0..2, store on host 0
            pool.run(case_something)

Building needs root and iproute2 (`ip netns`, veth, bridge, `tc tbf`): pycollect.netns.
unavailable() says what is missing and the tests skip with that reason.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import pytest
from rank_pool import RankPool

from pycollect import netns


@contextlib.contextmanager
def hosts_or_skip(n: int, **kwargs) -> Iterator[netns.Hosts]:
    reason = netns.unavailable()
    if reason:
        pytest.skip(f"namespace hosts cannot be built here: {reason}")
    with netns.Hosts(n, **kwargs) as hosts:
        yield hosts


def host_pool(hosts: netns.Hosts, n: Optional[int] = None, **kwargs) -> RankPool:
    """A RankPool of `n` ranks (default: one per host), rank r on host r."""
    n = len(hosts.names) if n is None else n
    return RankPool(n, **hosts.placement(n), **kwargs)
