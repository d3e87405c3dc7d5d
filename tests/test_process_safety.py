"""A rank's process life around the engine: fork, Ctrl-C, read-only outputs, scratch memory.

Each case was a real failure before: a forked child hung in its atexit handler and its
shutdown of the inherited sockets killed the parent's group; a child that kept the
sockets open hid the parent's death from its peers until the group timeout; Ctrl-C only
got through when the peer arrived; a torch tensor on read-only memory as an output
crashed the process.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch
from rank_pool import RankPool

import pycollect as pc


@pytest.fixture(scope="module")
def pool2():
    with RankPool(2, init_gloo=False, timeout=60) as pool:
        yield pool


def _wait_child(pid: int, limit_s: float):
    """(exit code, seconds) of child `pid`, or (None, limit_s) if it is still running then (killed)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), time.monotonic() - t0
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None, limit_s


def case_fork_child_exits():
    """Rank 0 forks; the child finds the group unusable, runs its exit handlers (pycollect's
    atexit destroy among them) and exits; the parent's group must still work."""
    child = None
    if pc.get_rank() == 0:
        pid = os.fork()
        if pid == 0:  # the child: never returns into the pool's worker loop
            code = 3
            try:
                try:
                    pc.all_reduce(torch.ones(2))
                    code = 2  # the parent's group answered in the child
                except pc.GroupFailedError as e:
                    code = 0 if "fork" in str(e) and "init_process_group" in str(e) else 4
                import atexit

                atexit._run_exitfuncs()  # what sys.exit would run
            finally:
                os._exit(code)
        child = _wait_child(pid, 10.0)
    t = torch.ones(5)
    pc.all_reduce(t)
    return child, t.tolist()


def test_forked_child_exits_cleanly_and_leaves_the_parent_group_alone(pool2):
    (child, after0), (none, after1) = pool2.run(case_fork_child_exits)
    code, seconds = child
    assert code == 0, f"child exit code {code} (None: hung for {seconds:.0f} s)"
    assert seconds < 5
    assert none is None and after0 == after1 == [2.0] * 5


def case_interrupted_wait():
    """Rank 0 waits for rank 1, which arrives 4 s late; Ctrl-C reaches rank 0 after 0.3 s."""
    g = pc.new_group([0, 1], timeout=60)
    if pc.get_rank() == 1:
        time.sleep(4.0)
        t0 = time.monotonic()
        try:  # rank 0's share of the first call may already be on the wire: by the second, it is gone
            for _ in range(2):
                pc.all_reduce(torch.ones(3), group=g)
            return "no error", 0.0
        except pc.PyCollectError as e:
            return type(e).__name__, time.monotonic() - t0
    # Python's own Ctrl-C handler, whatever this process inherited: a shell starts background
    # jobs (`cmd &`, nohup) with SIGINT ignored, and Python then keeps ignoring it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    t0 = time.monotonic()
    timer.start()
    try:
        pc.all_reduce(torch.ones(3), group=g)
        interrupted = f"no interrupt (the call returned after {time.monotonic() - t0:.2f} s)"
    except KeyboardInterrupt:
        interrupted = time.monotonic() - t0
    finally:
        timer.cancel()  # a call that returned first must not be hit later, in code that expects no signal
        timer.join()
        if previous is not None:  # None: a handler installed outside Python, which Python cannot put back
            signal.signal(signal.SIGINT, previous)
    try:
        pc.all_reduce(torch.ones(3), group=g)
        later = "no error"
    except pc.GroupFailedError as e:
        later = str(e)
    pc.destroy_process_group(g)
    return interrupted, later


def test_ctrl_c_interrupts_a_wait_and_fails_the_group(pool2):
    (interrupted, later), (peer_error, peer_s) = pool2.run(case_interrupted_wait, timeout=60)
    assert isinstance(interrupted, float) and interrupted < 1.0, interrupted
    assert "KeyboardInterrupt" in later, later
    assert peer_error in ("PeerLostError", "GroupFailedError") and peer_s < 5.0, (peer_error, peer_s)


def case_read_only_output(path: str):
    import numpy as np

    mapped = np.memmap(path, dtype=np.float32, mode="r", shape=(16,))
    with pytest.warns(UserWarning):  # torch says so, and lets it through
        t = torch.from_numpy(mapped)
    errors = []
    for call in (lambda: pc.all_reduce(t), lambda: pc.broadcast(t, src=0)):
        try:
            call()
            errors.append("no error")
        except ValueError as e:
            errors.append(str(e))
    t2 = torch.ones(2)
    pc.all_reduce(t2)  # nothing was sent: the group is fine
    return errors, t2.tolist()


def test_read_only_tensor_output_is_refused_not_a_crash(pool2, tmp_path):
    path = tmp_path / "ro.bin"
    path.write_bytes(bytes(64))
    for errors, after in pool2.run(case_read_only_output, str(path)):
        assert all("read-only" in e for e in errors), errors
        assert after == [2.0, 2.0]


def case_scratch_released():
    g = pc.new_group([0, 1])
    t = torch.ones(2 << 20)  # 8 MiB through the direct algorithm: 16 MiB of scratch at 2 ranks
    pc.all_reduce(t, group=g, algo="direct")
    held = g.scratch_bytes()
    time.sleep(1.6)
    idle = g.scratch_bytes()
    pc.all_reduce(t, group=g, algo="direct")  # and it comes back when needed
    correct = bool((t == 4).all())
    pc.destroy_process_group(g)
    return held, idle, correct


def test_large_scratch_is_released_after_a_second_idle(pool2):
    for held, idle, correct in pool2.run(case_scratch_released):
        assert held >= 16 << 20 and idle == 0 and correct, (held, idle, correct)


def case_fork_then_wait():
    """Rank 1 forks a child that never touches pycollect (a DataLoader worker) and sleeps."""
    if pc.get_rank() == 1:
        pid = os.fork()
        if pid == 0:
            try:
                time.sleep(30)
            finally:
                os._exit(0)
        return pid
    return None


def case_all_reduce_until_failure():
    t0 = time.monotonic()
    try:
        while True:
            pc.all_reduce(torch.ones(1 << 16))
    except pc.PyCollectError as e:
        return type(e).__name__, str(e), time.monotonic() - t0


@pytest.mark.slow
def test_killed_rank_with_a_forked_child_is_noticed_at_once():
    with RankPool(2, init_gloo=False, timeout=60, op_timeout=60) as pool:
        child = pool.run(case_fork_then_wait)[1]
        try:
            pool.submit(case_all_reduce_until_failure)
            time.sleep(0.5)
            killed_at = time.monotonic()
            pool.kill(1)
            [(ok, result)] = pool.collect(ranks=[0], timeout=30)
            noticed = time.monotonic() - killed_at
        finally:
            os.kill(child, signal.SIGKILL)
        assert ok, result
        kind, message, _ = result
        assert kind == "PeerLostError" and "rank 1" in message, result
        assert noticed < 5.0, noticed


def case_scratch_kept_while_driving():
    """Back-to-back blocking calls run on the caller's thread (inline): the worker, idle
    meanwhile, must not give their scratch back under them after its idle second."""
    g = pc.new_group([0, 1])
    t = torch.ones(2 << 20)  # 16 MiB of direct scratch at 2 ranks, above the keep limit
    start, calls, going = time.perf_counter(), 0, torch.ones(1)
    while going.item() > 0:  # for 2.5 s, as both ranks agree (the last call is the same on both)
        t.fill_(1.0)
        pc.all_reduce(t, group=g, algo="direct")
        calls += 1
        going.fill_(float(time.perf_counter() - start < 2.5))
        pc.all_reduce(going, op=pc.ReduceOp.MIN, group=g)
    correct = bool((t == 2).all())
    pc.destroy_process_group(g)
    return calls, correct


def test_large_scratch_is_kept_while_calls_run_inline(pool2):
    for calls, correct in pool2.run(case_scratch_kept_while_driving, timeout=60):
        assert calls > 5 and correct, (calls, correct)


_FROM_ELSEWHERE = """
import sys
from pycollect.launch import run_ranks

def job(rank, world_size, emit):
    import pycollect
    return pycollect.__file__

if __name__ == "__main__":
    files = run_ranks(job, 2, ("pycollect",), timeout=60)
    import pycollect
    assert files == [pycollect.__file__] * 2, (files, pycollect.__file__)
    print("ranks imported", files[0])
"""


def test_ranks_import_what_their_parent_imported(tmp_path):
    """Launched from a directory that holds another pycollect tree (the repository root, with
    pycollect installed as a regular package), the ranks import the parent's pycollect, not
    that tree: the fork server they come from once preloaded the working directory's, and every
    rank died. The parent here imports a copy of the built package from a directory of its own
    (python -S: no editable-install finder to take the name first)."""
    import shutil
    import site
    import subprocess
    import sys

    installed = tmp_path / "installed"
    shutil.copytree(os.path.dirname(pc.__file__), installed / "pycollect",
                    ignore=shutil.ignore_patterns("__pycache__"))
    built = os.path.dirname(pc._C.__file__)  # the extensions and the engine library they load
    for name in os.listdir(built):
        if name.endswith(".so") or name == "torch_build.txt":
            shutil.copy(os.path.join(built, name), installed / "pycollect")
    here = tmp_path / "here"
    (here / "pycollect").mkdir(parents=True)
    (here / "pycollect" / "__init__.py").write_text("# a source tree without its built extension\n")
    script = tmp_path / "launch_elsewhere.py"
    script.write_text(_FROM_ELSEWHERE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(installed)] + site.getsitepackages()))
    done = subprocess.run([sys.executable, "-S", str(script)], cwd=here, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ranks imported {installed / 'pycollect' / '__init__.py'}" in done.stdout, done.stdout


def _preloaded(rank, world_size, emit):
    import sys

    return sorted(m for m in ("torch", "torch.distributed", "torch._dynamo", "pycollect") if m in sys.modules)


def test_ranks_start_with_what_a_training_rank_imports():
    """Ranks come from a fork server that imported torch, torch.distributed, torch._dynamo
    (which torch imports at an optimizer's first construction: 1.2-1.7 s of CPU a rank) and
    pycollect: a rank has them all before its job starts."""
    from pycollect.launch import run_ranks

    expected = ["pycollect", "torch", "torch._dynamo", "torch.distributed"]
    assert run_ranks(_preloaded, 2, ("pycollect",), timeout=60) == [expected] * 2
