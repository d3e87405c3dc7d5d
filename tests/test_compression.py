"""all_reduce(compress="bf16" | "int8") (docs/compression.md): within the stated error
bound of the float64 sum, bit-identical on every rank, over shared memory and TCP, on
odd counts and int8 block boundaries; across (tagged) hosts only the inter-host level
compressed; every other dtype refused with its name. The cases: compression_cases.py."""
import numpy as np
import pytest
from compression_cases import (bound, case_compressed, case_compressed_hierarchy, case_ddp_hook, case_error_feedback,
                               case_mismatch, case_refusals, round_trip)


def _same(digests):
    got = [d for d in digests if d is not None]
    assert got and len(set(got)) == 1, f"results differ between ranks: {got}"


@pytest.mark.parametrize("ws", [1, 2, 3, 4])
def test_compressed_all_reduce_is_bounded_and_bit_identical(pool4_each, ws):
    _same(pool4_each.run(case_compressed, ws, ws))


@pytest.mark.parametrize("layout", ["aabb", "abab", "aaab"])
def test_compressed_hierarchy_compresses_between_hosts_only(pool4, layout):
    _same(pool4.run(case_compressed_hierarchy, layout))


def test_compress_refuses_what_it_cannot_do(pool4):
    for msgs in pool4.run(case_refusals):
        for dt, msg in zip(("int32", "int64", "int8", "uint8", "bool", "float64", "float16", "bfloat16"), msgs):
            assert "float32" in msg and dt in msg, msg
        assert "integers are never compressed" in msgs[0]
        assert "SUM or AVG" in msgs[8] and "MAX" in msgs[8], msgs[8]
        assert "tree" in msgs[9] and "ring or hierarchical" in msgs[9], msgs[9]
        assert "fp4" in msgs[10] and "'int8'" in msgs[10], msgs[10]


def test_ranks_that_disagree_on_compress_fail_clearly(pool4):
    msgs = pool4.run(case_mismatch)
    assert any("compress=int8" in m for m in msgs), msgs
    assert all(m != "no error" for m in msgs), msgs


@pytest.mark.parametrize("fmt", ["bf16", "int8"])
def test_one_encode_is_within_a_ring_of_one(fmt):
    rng = np.random.default_rng(5)
    for count in (1, 255, 256, 257, 100_003):
        x = (rng.standard_normal(count) * np.exp(rng.uniform(-8, 8, count))).astype(np.float32)
        err = np.abs(round_trip(x, fmt).astype(np.float64) - x)
        assert (err <= bound(x[None], fmt, 1)).all()
    z = round_trip(np.zeros(300, np.float32), fmt)
    assert not z.any()


def test_int8_block_with_inf_decodes_to_nan():
    x = np.ones(600, np.float32)
    x[300] = np.inf
    y = round_trip(x, "int8")
    assert np.isnan(y[256:512]).all() and (y[:256] == 1).all() and (y[512:] == 1).all()


@pytest.mark.parametrize("fmt", ["bf16", "int8"])
def test_ddp_hook_keeps_replicas_identical_and_close(pool3, fmt):
    results = pool3.run(case_ddp_hook, fmt)
    _same([d for d, _, _ in results])
    for _, dist, residuals in results:
        assert 0 < dist < 1e-2, dist  # compressed (not exact), and close to the exact run
        assert residuals >= 1, residuals


@pytest.mark.parametrize("fmt", ["bf16", "int8"])
def test_error_feedback_keeps_the_error_from_piling_up(pool3, fmt):
    """A constant gradient: without feedback every step drops the same rounding, so the
    average over the steps keeps it; with feedback each rank's own encode error is sent
    later, and the average's error shrinks (measured: to 0.57 of it at 3 ranks, 32 steps;
    the ring's re-encoding of partial sums is not fed back)."""
    for with_feedback, without in pool3.run(case_error_feedback, fmt):
        assert without > 0 and with_feedback < 0.75 * without, (with_feedback, without)


@pytest.mark.parametrize("fmt", ["bf16", "int8"])
def test_tiny_values_stay_finite_and_close(fmt):
    """Values near float32's smallest (int8: 127 / max overflows unless scaled): the result
    stays finite, within the bound (its subnormal slack included)."""
    rng = np.random.default_rng(8)
    for scale in (1e-30, 1e-37, 1e-39, 1e-41, 1e-44):
        x = (rng.standard_normal(600) * scale).astype(np.float32)
        y = round_trip(x, fmt)
        assert np.isfinite(y).all(), scale
        assert (np.abs(y.astype(np.float64) - x) <= bound(x[None], fmt, 1)).all(), scale
