"""Rank pools shared by every test module of a session: starting a pool (spawning ranks,
importing torch, forming both default groups) is the slow part, so each size starts once.

    def test_something(pool3):               # 3 ranks, pycollect and Gloo default groups
        pool3.run(case_something, arg)

Modules whose cases would disturb a shared pool (a killed rank, other environment
variables, another address family) start their own RankPool.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest
from rank_pool import RankPool

# What the tests and their ranks write to the temporary directory (the flight records of
# the failures they provoke, benchmarks' scratch, pytest's own tmp_path) goes under one
# directory of this session, removed at exit: /tmp is left as the suite found it (xdist's
# workers, and every rank, inherit TMPDIR and nest their own below). SYSTEM_TMP: where the
# session's directory lives, for the test that checks it.
SYSTEM_TMP = tempfile.gettempdir()
SESSION_TMP = tempfile.mkdtemp(prefix="pycollect-tests-")
os.environ["TMPDIR"] = SESSION_TMP
tempfile.tempdir = None
atexit.register(shutil.rmtree, SESSION_TMP, True)


@pytest.fixture(scope="session")
def pool3():
    with RankPool(3, timeout=240) as pool:
        yield pool


@pytest.fixture(scope="session")
def pool4():
    """PYCOLLECT_TRANSPORT left at auto: every link of these ranks is shared memory."""
    with RankPool(4, timeout=240) as pool:
        yield pool


@pytest.fixture(scope="session")
def pool4_tcp():
    """The same over TCP links (PYCOLLECT_TRANSPORT=tcp), for the suites that cover both."""
    with RankPool(4, timeout=240, env={"PYCOLLECT_TRANSPORT": "tcp"}) as pool:
        yield pool


@pytest.fixture(params=["shm", "tcp"])
def pool4_each(request):
    """pool4 (shared memory) and pool4_tcp in turn, checking that the links are what they say."""
    pool = request.getfixturevalue("pool4" if request.param == "shm" else "pool4_tcp")
    kinds = pool.run(_link_kinds)
    assert all(set(k.values()) == {request.param} for k in kinds), kinds
    return pool


def _link_kinds():
    import pycollect as pc

    return pc.get_transport_info()


# The order modules are handed to workers in (scripts/test.sh runs three, a module to a
# worker: --dist loadscope). First the modules that spend long waiting on subprocesses of
# their own, longest first (torch's suite in three runs, torchrun restarts, gpu_check's
# steps), then the few-test ones that wait on timeouts (the fault matrix, the namespace
# hosts), so that one worker waits on each while the others go through the rest, instead
# of all waiting at the end; then the others, most tests first.
LONG_FIRST = ("test_torch_conformance.py", "test_restarts.py", "test_staging.py", "test_deadlines.py",
              "test_netns_hosts.py")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long test (deselect with -m 'not slow' while iterating)")
    # pytest-xdist reorders loadscope's modules by test count unless told not to, which
    # put the few-test long modules above last of all (the suite's tail was torch's suite).
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    count: dict = {}
    for item in items:
        count[item.path.name] = count.get(item.path.name, 0) + 1

    def rank(item):
        name = item.path.name
        return (LONG_FIRST.index(name), 0) if name in LONG_FIRST else (len(LONG_FIRST), -count[name])

    items.sort(key=rank)  # stable: the order within each module is kept


@pytest.fixture(scope="session")
def netns_hosts4():
    """4 namespace hosts on a switch, 1 Gbit/s cables (tests/netns_hosts.py); skips when not buildable."""
    from netns_hosts import hosts_or_skip

    with hosts_or_skip(4, rate="1gbit") as hosts:
        yield hosts
