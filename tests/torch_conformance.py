"""torch's own distributed test suite, run against a backend: the class torch's
test/distributed/test_distributed_spawn.py builds (TestDistBackend +
DistributedTest._DistTestBase, every test spawning WORLD_SIZE processes), here for
CONFORMANCE_BACKEND = "pycollect" (default) or "gloo" (the reference).

    WORLD_SIZE=2 .venv/bin/python -m pytest -q tests/torch_conformance.py [-k ...]
    CONFORMANCE_BACKEND=gloo CONFORMANCE_START=fork WORLD_SIZE=3 ...

tests/test_torch_conformance.py runs it in a subprocess; docs/torch_conformance.md has
the measured tables. This module is imported by every spawned rank (the test class is
pickled by reference), so pycollect - and with it the "pycollect" backend - is
registered in every child before torch's suite is.

What is patched, and why (nothing else is):
1. The suite reads BACKEND from the environment when it is imported, and many tests
   are guarded by a literal BACKEND == "gloo" or require_backend_is_available({"gloo"})
   (timeouts, coalesced calls, batch_isend_irecv, get_future, monitored_barrier,
   object collectives, sparse all-reduce): it treats Gloo as *the* CPU backend. So the
   module is imported with BACKEND="gloo" - the class is built with exactly the tests
   torch selects for Gloo - and its BACKEND is then set to the backend under test,
   which init_process_group uses. For pycollect that value is a str that also equals
   "gloo", for the suite's few checks made while a test runs (e.g. the CPU branch of
   _test_accumulate_gradients_no_sync).
2. DistTestCases.backend_feature: "pycollect" joins "ddp" and "subgroup" (and
   "plugin", which is what it is), as "gloo" is in them.
3. dist.monitored_barrier refuses every backend but Gloo by name before it calls the
   group's monitored_barrier; for pycollect groups it is routed to
   pycollect.torch_backend.monitored_barrier (same arguments, same checks, the group's
   own monitored_barrier).
4. Waiting only (the harness, not the backend): every test meets in the suite's file
   barrier (Barrier.sync) before and after it, and the parent looks whether its ranks
   exited (MultiProcessTestCase._join_processes); both poll every 100 ms, which was most of
   a test's time (0.25-0.35 s; 285 tests a world size, 195 of them skipped inside the
   ranks after the first barrier). Here the barrier polls every 5 ms and the parent wakes
   when a rank exits; the protocol (barrier files under TEMP_DIR, exit codes, the per-test
   timeout) is torch's.
5. Skips known before start (the harness, not the backend): 120 of those 195 tests a world
   size are skipped by a decorator that only looks at the machine and the world size
   (`skip_if_lt_x_gpu`, `skip_if_no_gpu`, `skip_if_small_worldsize`, ...): each rank forms
   the group, meets, calls the test, exits with the skip's code, and the parent raises
   SkipTest with that code's message. Here the parent calls those same decorators' own
   wrappers first, with the test body replaced by a marker; a wrapper that exits with a
   skip code skips the test there, with the message the ranks' exit would give. Only the
   decorators named in _SKIP_WRAPPERS are called so (their bodies are checks and nothing
   else); a test they let through is started as before.
"""
from __future__ import annotations

import multiprocessing.connection
import os
import tempfile
import time
import types
import unittest

BACKEND_UNDER_TEST = os.environ.get("CONFORMANCE_BACKEND", "pycollect")
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("TEMP_DIR", tempfile.gettempdir())
os.environ["BACKEND"] = "gloo"  # patch 1: the class is built as for Gloo

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import pycollect  # noqa: E402,F401  (registers the "pycollect" backend)
import pycollect.torch_backend as tb  # noqa: E402
# What the backend imports at its first group, imported once here rather than in every
# forked rank of every test (~50 ms of CPU a rank; spawned ranks import it as users do).
import pycollect.torch_backend.native  # noqa: E402,F401
from torch.distributed.distributed_c10d import _rank_not_in_group  # noqa: E402
from torch.testing._internal import common_distributed as _cd  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402
from torch.testing._internal.distributed import distributed_test as _dt  # noqa: E402


class _CpuBackendName(str):
    """The backend's name, which also compares equal to "gloo" (see patch 1)."""

    def __eq__(self, other):
        return str.__eq__(self, other) or other == "gloo"

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = str.__hash__


if BACKEND_UNDER_TEST == "pycollect":
    tb.register()
    _dt.BACKEND = _CpuBackendName("pycollect")
    for feature in ("ddp", "subgroup", "plugin"):  # patch 2
        DistTestCases.backend_feature[feature].add("pycollect")
    _torch_monitored_barrier = dist.monitored_barrier

    def _monitored_barrier(group=None, timeout=None, wait_all_ranks=False):  # patch 3
        if not _rank_not_in_group(group) and dist.get_backend(group) == tb.BACKEND:
            return tb.monitored_barrier(group, timeout, wait_all_ranks)
        return _torch_monitored_barrier(group, timeout, wait_all_ranks)

    dist.monitored_barrier = _monitored_barrier
else:
    _dt.BACKEND = BACKEND_UNDER_TEST

torch.backends.cuda.matmul.allow_tf32 = False


def _barrier_sync(cls, wait_for=None, timeout=10):  # patch 4: the suite's file barrier
    """Barrier.sync's protocol (each rank writes its barrier count to a file named after
    its pid; all have arrived once `wait_for` files hold a count >= ours), polled every 5 ms."""
    wait_for = dist.get_world_size() if wait_for is None else wait_for
    cls.barrier_id += 1
    barrier_dir = os.path.join(os.environ["TEMP_DIR"], "barrier")
    with _dt._lock():
        with open(os.path.join(barrier_dir, str(os.getpid())), "w") as f:
            f.write(str(cls.barrier_id))
    deadline = time.time() + timeout
    while True:
        with _dt._lock():
            counts = []
            for name in os.listdir(barrier_dir):
                with open(os.path.join(barrier_dir, name)) as f:
                    counts.append(int(f.read()))
        if sum(c >= cls.barrier_id for c in counts) == wait_for:
            return
        if time.time() > deadline:
            raise RuntimeError("barrier timeout")
        time.sleep(0.005)


_dt.Barrier.sync = classmethod(_barrier_sync)


START = os.environ.get("CONFORMANCE_START", "spawn")

# patch 5: torch's decorators whose wrappers only check the machine and the world size,
# then exit with a TEST_SKIPS code or call the test (common_distributed.py).
_SKIP_WRAPPERS = {
    "skip_if_lt_x_gpu.<locals>.decorator.<locals>.wrapper",
    "nccl_skip_if_lt_x_gpu.<locals>.decorator.<locals>.wrapper",
    "require_n_gpus_for_nccl_backend.<locals>.decorator.<locals>.wrapper",
    "skip_if_no_gpu.<locals>.wrapper",
    "skip_if_small_worldsize.<locals>.wrapper",
    "skip_if_odd_worldsize.<locals>.wrapper",
}
_SKIP_MESSAGES = {skip.exit_code: skip.message for skip in _cd.TEST_SKIPS.values()}  # as the parent reads exits


class _WouldRun(Exception):
    """Raised by the marker that stands for the test body: the wrapper let the test through."""


def _would_run(*args, **kwargs):
    raise _WouldRun


def _skip_known_before_start(test) -> str | None:
    """The message of the skip one of test's _SKIP_WRAPPERS would make every rank exit
    with, found by calling that wrapper here with the test body replaced by a marker; None
    when none of them would skip (or one does anything but exit or call the body)."""
    fn = getattr(type(test), test._testMethodName)
    while fn is not None:
        code = getattr(fn, "__code__", None)
        if code is not None and code.co_qualname in _SKIP_WRAPPERS and fn.__closure__:
            cells = tuple(types.CellType(_would_run) if name == "func" else cell
                          for name, cell in zip(code.co_freevars, fn.__closure__))
            probe = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, cells)
            try:
                probe(test)
            except SystemExit as stop:
                return _SKIP_MESSAGES.get(stop.code)
            except _WouldRun:
                pass
            except Exception:
                return None
        fn = getattr(fn, "__wrapped__", None)
    return None


class TestDistBackendWithSpawn(_dt.TestDistBackend, _dt.DistributedTest._DistTestBase):
    """torch's class, started as torch starts it (spawn), or with CONFORMANCE_START=fork
    from this already-initialised process (MultiProcessTestCase._start_processes with a fork
    context, as torch's old test_distributed_fork.py did):
    the same tests, without importing torch and the suite again in every rank of every
    test - about 1 s a test instead of 15-40 s on a loaded 2-core machine."""

    def setUp(self):
        reason = _skip_known_before_start(self)  # patch 5
        if reason is not None:
            raise unittest.SkipTest(reason)
        super().setUp()
        if START == "fork":
            self._start_processes(torch.multiprocessing.get_context("fork").Process)
        else:
            self._spawn_processes()

    def _join_processes(self, fn) -> None:  # patch 4: wake when a rank exits
        """Wait for the ranks as torch's harness does (stop at the first that failed, kill
        them all past the test's timeout, then judge the exit codes), woken by each exit."""
        timeout, start = _cd.get_timeout(self.id()), time.time()
        try:
            while True:
                codes = [p.exitcode for p in self.processes]
                if self.TEST_ERROR_EXIT_CODE in codes:
                    for child in torch.multiprocessing.active_children():
                        child.terminate()
                    break
                if None not in codes:
                    break
                if time.time() - start > timeout:
                    self._get_timedout_process_traceback()
                    for p in self.processes:
                        p.terminate()
                    break
                multiprocessing.connection.wait([p.sentinel for p in self.processes if p.exitcode is None], 0.1)
            self._check_return_codes(fn, time.time() - start)
        finally:
            for pipe in self.pid_to_pipe.values():
                pipe.close()
