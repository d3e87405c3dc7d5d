"""The staged (device) path without a GPU: the engine's host device plays the GPU
(copies on stream threads, completing later), so these tests drive the very pipeline
CUDA tensors use (csrc/comm/staging.cc): piece boundaries, uneven sizes, ordering under
slow copies, the caller's stream, an injected copy failure, and the errors raised
before anything is sent. Names contain "staging" or "device": pytest -k "device or
cuda or staging" selects them.
"""
from __future__ import annotations

import pytest
import torch

from rank_pool import RankPool
import staging_cases as sc

PER = sc.PIECE_BYTES // 4  # float32 elements per piece
# 1 element, piece-1, piece, piece+1, several pieces and a remainder, and 0.
COUNTS = [0, 1, PER - 1, PER, PER + 1, 5 * PER + 7]


@pytest.fixture(scope="module")
def staging_pool():
    with RankPool(2, timeout=240, env={"PYCOLLECT_STAGING_BYTES": str(sc.PIECE_BYTES)}) as pool:
        yield pool


@pytest.fixture(scope="module")
def staging_pool3():
    with RankPool(3, timeout=240, env={"PYCOLLECT_STAGING_BYTES": str(sc.PIECE_BYTES)}) as pool:
        yield pool


SAME_ON_EVERY_RANK = {"all_reduce", "broadcast", "all_gather_into_tensor", "all_gather", "all_reduce:halving_doubling",
                      "all_reduce:tree", "all_gather_into_tensor:bruck", "all_gather:bruck"}
KINDS = ["all_reduce", "broadcast", "reduce", "all_gather_into_tensor", "all_gather", "reduce_scatter_tensor",
         "reduce_scatter", "all_gather_into_tensor:bruck"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype,op", [(torch.float32, "SUM"), (torch.int32, "MAX"), (torch.float16, "SUM"),
                                      (torch.int64, "PRODUCT"), (torch.bfloat16, "MIN"), (torch.float64, "AVG")])
def test_staging_matches_plain_and_gloo(staging_pool, kind, dtype, op):
    if op == "AVG" and kind != "all_reduce":
        pytest.skip("AVG is checked on all_reduce (Gloo has no AVG to compare the others with)")
    results = staging_pool.run(sc.case_staging_matches, kind, dtype, op, COUNTS)
    if kind in SAME_ON_EVERY_RANK:
        digests = [r[0] for r in results]
        assert digests[0] == digests[1], "ranks hold different bytes"
    pieces = results[0][1]
    assert pieces > len(COUNTS), f"only {pieces} pieces for {len(COUNTS)} calls: the call was not cut"


@pytest.mark.parametrize("kind", ["all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast",
                                  "all_reduce:halving_doubling", "all_reduce:tree", "all_gather_into_tensor:bruck",
                                  "all_gather:bruck"])
def test_staging_three_ranks_uneven(staging_pool3, kind):
    results = staging_pool3.run(sc.case_staging_matches, kind, torch.float32, "SUM", [1, 2, PER // 3 + 1, 7 * PER + 5],
                                200)
    if kind in SAME_ON_EVERY_RANK:
        assert len({tuple(r[0]) for r in results}) == 1


def test_staging_slots_are_bounded(staging_pool):
    # 3 slots of at most (n + 1) x PER elements: reduce-scatter's are the largest.
    results = staging_pool.run(sc.case_staging_matches, "reduce_scatter_tensor", torch.float32, "SUM", [40 * PER])
    pinned = results[0][2]
    assert 0 < pinned <= 3 * 3 * sc.PIECE_BYTES, pinned


def test_staging_async_order_with_slow_copies(staging_pool):
    digests = staging_pool.run(sc.case_staging_async_order, 3 * PER + 5, 300)
    assert digests[0] == digests[1]


def test_staging_waits_for_the_callers_stream(staging_pool):
    assert staging_pool.run(sc.case_staging_waits_for_caller_stream, 2 * sc.PIECE_BYTES + 3) == [3, 3]


def test_staging_copy_failure_reaches_every_rank(staging_pool):
    # 20 pieces; rank 0's 7th copy fails (a device->host copy of a middle piece).
    results = staging_pool.run(sc.case_staging_copy_failure, 20 * PER, 7)
    (kind0, msg0, t0, failed0), (kind1, msg1, t1, failed1) = results
    assert kind0 == "DeviceError" and "copy #7 failed" in msg0 and "piece" in msg0, msg0
    assert kind1 != "no error" and failed1, (kind1, msg1)
    assert "copy #7 failed" in msg1 or "rank 0" in msg1, msg1
    assert t0 < 10 and t1 < 10, (t0, t1)


def test_staging_irregular_calls_through_host(staging_pool):
    results = staging_pool.run(sc.case_staging_irregular, 2 * PER + 1)
    assert all(r["pieces"] == 0 for r in results), "irregular calls are staged in Python, not cut into pieces"


def test_device_cuda_missing_is_a_clear_error(staging_pool):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    results = staging_pool.run(sc.case_staging_cuda_missing)
    for message, value, failed in results:
        assert "CUDA is not available" in message and "libcuda.so.1" in message, message
        assert value == 2.0 and not failed


def test_device_mixed_and_foreign_devices_refused(monkeypatch):
    from pycollect._buffers import Buffer
    from pycollect._device import device_call

    class G:
        host_device = False
        cuda_device = None

    cpu = Buffer(None, 0, 4, "float32", None)
    gpu0 = Buffer(None, 0, 4, "float32", 0)
    gpu1 = Buffer(None, 0, 4, "float32", 1)
    with pytest.raises(ValueError, match="CPU and CUDA tensors are mixed"):
        device_call(G(), [cpu, gpu0], "all_gather_into_tensor")
    assert device_call(G(), [cpu, cpu], "all_reduce") is None
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available at run time"):
            device_call(G(), [gpu0], "all_reduce")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    g = G()
    g.cuda_device = 0
    with pytest.raises(ValueError, match="cuda:1 but this group's CUDA device is cuda:0"):
        device_call(g, [gpu1], "all_reduce")
    with pytest.raises(ValueError, match="several CUDA devices"):
        device_call(G(), [gpu0, gpu1], "all_reduce")


def test_device_staging_bytes_option():
    from pycollect.options import Options

    assert Options.from_env({"PYCOLLECT_STAGING_BYTES": "1048576"}).staging_bytes == 1 << 20
    with pytest.raises(ValueError, match="PYCOLLECT_STAGING_BYTES"):
        Options.from_env({"PYCOLLECT_STAGING_BYTES": "0"})


def test_device_gpu_check_script_is_sound():
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run(["bash", "-n", os.path.join(root, "scripts", "gpu_check.sh")], check=True)


@pytest.mark.slow
def test_device_gpu_check_dry_run(tmp_path):
    """scripts/gpu_check.py's every step on CPU (host device), as the GPU machine runs them,
    with one step made to hang: it is stopped at its limit and reported, every other step
    still runs and passes, and the JSON (written after each step) holds every outcome."""
    import json
    import os
    import subprocess
    import sys
    import time

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, os.path.join(root, "scripts", "gpu_check.py"), "--dry-run", "--out",
                        str(tmp_path), "--hang", "max_connections", "--step-limit", "max_connections=3"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    took = time.monotonic() - t0
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    assert "FAIL max_connections" in p.stdout and "stopped after 3 s" in p.stdout, p.stdout[-3000:]
    steps = json.loads((tmp_path / "gpu_check.json").read_text())["steps"]
    assert {k: v["status"] for k, v in steps.items()} == {
        "smoke": "PASS", "correctness": "PASS", "torch_backend": "PASS", "training": "PASS",
        "max_connections": "FAIL", "nccl": "SKIP", "bench": "PASS"}, p.stdout[-3000:]
    assert (tmp_path / "gpu_check.txt").read_text().strip()
    assert took < 120, took


def test_device_bench_cuda_needs_cuda(capsys):
    from pycollect.cli import main

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["bench", "--device", "cuda"]) == 2
    assert "CUDA is not available on this machine" in capsys.readouterr().err
    assert main(["bench", "--device", "cuda", "--peer", "nccl"]) == 2


def test_device_driver_abi_matches_cuda_h():
    """The driver API as csrc/device/cuda_driver.h declares it (no CUDA header at build
    time) against NVIDIA's cuda.h, where a toolkit is installed: every entry point's
    shape (the _v2 symbols where cuda.h maps to them) and the constants."""
    import glob
    import os
    import shutil
    import subprocess

    headers = sorted(glob.glob("/usr/local/cuda*/include/cuda.h"))
    if not headers or shutil.which("g++") is None:
        pytest.skip("no CUDA toolkit's cuda.h (or no g++) on this machine")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-I", os.path.dirname(headers[-1]), "-I",
                        os.path.join(root, "csrc"), os.path.join(root, "tests", "cuda_abi", "check_driver_abi.cc")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]


def test_staging_ranks_that_cut_differently_mismatch(staging_pool):
    results = staging_pool.run(sc.case_staging_cut_mismatch, 5 * PER)
    assert any(kind == "MismatchError" for kind, _ in results), results
    assert all(kind != "no error" for kind, _ in results), results


def test_staging_abort_stops_a_call_waiting_on_copies(staging_pool):
    results = staging_pool.run(sc.case_staging_abort_while_copying)
    for kind, message, seconds in results:
        assert kind != "no error" and seconds < 6, (kind, message, seconds)
    assert "aborted while copying" in results[0][1], results[0]


# -- host-free wait() (as NCCL's): the caller's stream waits, the host does not -------------
def test_staging_wait_is_host_free(staging_pool):
    # 3 pieces, each copy 0.2 s: the call takes > 0.8 s, wait() returns long before.
    results = staging_pool.run(sc.case_staging_wait_is_host_free, 3 * PER, 200_000)
    for r in results:
        assert r["returned"] < 0.3 and r["returned"] < r["total"] / 3, r
        assert r["host_saw_old"], "the result was already in the tensor: the wait blocked the host"
        assert r["exact"], "work queued on the caller's stream after wait() did not see the result"
        assert r["async_returned"] < 0.3 and r["pending_after_wait"], r
        assert r["fill_after"], "the call's copies overwrote work queued after wait()"
        assert r["completed_after_sync"], r
    assert results[0]["digest"] == results[1]["digest"]


def test_staging_blocking_wait_when_asked(staging_pool):
    for r in staging_pool.run(sc.case_staging_blocking_wait, 3 * PER, 50_000):
        assert r == {"blocking_arg": True, "env": True}, r


@pytest.mark.parametrize("fail_copy", [7, 2])  # a middle copy; the last copy back (after the host finished)
def test_staging_host_free_wait_copy_failure(staging_pool, fail_copy):
    count = 20 * PER if fail_copy == 7 else PER  # one piece: copy #2 is its copy back
    results = staging_pool.run(sc.case_staging_host_free_copy_failure, count, fail_copy)
    for rank, r in enumerate(results):
        assert r["wait_returned"] < 5 and r["stream_went_on"] < 10, r
        assert r["next_call"][0] != "no error", r
        assert r["seconds"] < 15, r
    kind, message = results[0]["exception"]
    assert kind == "DeviceError" and f"copy #{fail_copy} failed" in message, results[0]
    # The group failed with it (also when the copy failed after the call ended on the host):
    # rank 0's next call is refused, naming the cause.
    kind, message = results[0]["next_call"]
    assert kind == "GroupFailedError" and f"copy #{fail_copy} failed" in message, results[0]
    assert results[0]["group_failed"], results[0]
    if fail_copy == 7:  # a failure on the wire side of the call: rank 1's call fails too
        assert results[1]["exception"] is not None, results[1]


def test_staging_dropped_work_keeps_buffers(staging_pool):
    for held, intact, released in staging_pool.run(sc.case_staging_dropped_work_keeps_buffers, 3 * PER, 100_000):
        assert held, "the group let go of the tensor while its copies were in flight"
        assert intact, "the call's late copies wrote into memory reused after the tensor was dropped"
        assert released, "the group kept the tensor after its copies were done"


@pytest.mark.parametrize("start", [None, 2**32 - 700])  # from 1; across the 32-bit wrap of the numbers
def test_staging_back_to_back_host_free_waits(staging_pool, start):
    # More calls than the 1024 flag words, mixing slot sizes (all-reduce and reduce-scatter).
    for bad, (first, last) in staging_pool.run(sc.case_staging_back_to_back_host_free, 1100, 3 * PER, start):
        assert bad == [], f"calls {bad[:10]} gave wrong results"
        if start is not None:
            assert first > start and last < 1100, (first, last)  # the numbers wrapped past 2^32


def test_device_torch_backend_wait_is_host_free(staging_pool):
    for r in staging_pool.run(sc.case_device_torch_backend_wait_is_host_free, 17_000, 1_000):
        for name in ("small", "large"):
            returned, total, exact = r[name]
            assert exact, (name, r)
        returned, total, _ = r["large"]
        assert returned < total / 3, r
        assert r["future"], r


def test_device_blocking_wait_option():
    from pycollect.options import Options

    assert Options.from_env({"PYCOLLECT_BLOCKING_WAIT": "1"}).blocking_wait is True
    assert Options.from_env({}).blocking_wait is False
    with pytest.raises(ValueError, match="PYCOLLECT_BLOCKING_WAIT"):
        Options.from_env({"PYCOLLECT_BLOCKING_WAIT": "yes"})


# -- the CUDA path's fixes (a careful reading against the driver API), through the host device
def test_device_list_all_gather_filled_when_wait_returns(staging_pool):
    for r in staging_pool.run(sc.case_device_list_all_gather_wait, 20_000):
        assert r == {"engine_host": True, "engine_stream": True, "backend_async_host": True,
                     "backend_async_stream": True, "backend_blocking_host": True,
                     "backend_blocking_stream": True, "ddp": "ok"}, r


def test_staging_larger_call_after_reduce_scatter_does_not_deadlock(staging_pool):
    for r in staging_pool.run(sc.case_staging_larger_call_after_reduce_scatter, 20_000):
        assert r["error"] is None and r["exact"], r
        assert r["seconds"] < 4, r  # the host device's model of a device sync gives up after 5 s
        assert r["pinned"] == 3 * sc.PIECE_BYTES, r  # every slot made once, at the largest size


def test_staging_sticky_device_error_names_the_call(staging_pool):
    (kind, message), (kind1, _) = staging_pool.run(sc.case_staging_sticky_error_names_the_call, 7)
    assert kind == "DeviceError", (kind, message)
    assert message.startswith("all_reduce (call #") and "copy #7 failed" in message, message
    assert kind1 != "no error"


def test_staging_falls_back_to_host_waits_without_flag_words(staging_pool):
    for r in staging_pool.run(sc.case_staging_without_flag_words, 20_000):
        assert r == {"exact": True, "warned": True}, r


def test_staging_destroys_its_streams(staging_pool):
    for made, destroyed in staging_pool.run(sc.case_staging_streams_destroyed):
        assert made == 2 and destroyed == 2, (made, destroyed)


def test_staging_stream_wait_refused_in_forked_child(staging_pool):
    for got in staging_pool.run(sc.case_staging_stream_wait_in_forked_child):
        assert got.startswith("GroupFailedError") and "is a fork of pid" in got, got


def test_device_blocking_wait_with_few_hardware_queues():
    from pycollect.options import Options

    assert Options.from_env({"CUDA_DEVICE_MAX_CONNECTIONS": "1"}).blocking_wait is True
    assert Options.from_env({"CUDA_DEVICE_MAX_CONNECTIONS": "2"}).blocking_wait is True
    assert Options.from_env({"CUDA_DEVICE_MAX_CONNECTIONS": "8"}).blocking_wait is False
    assert Options.from_env({"CUDA_DEVICE_MAX_CONNECTIONS": "x"}).blocking_wait is False
    # An explicit choice wins.
    assert Options.from_env({"CUDA_DEVICE_MAX_CONNECTIONS": "1", "PYCOLLECT_BLOCKING_WAIT": "0"}).blocking_wait is False
