"""The 16-bit conversions used by the float16/bfloat16 reduction kernels round
exactly like numpy (float16) and torch (bfloat16): nearest-even, subnormals,
overflow to inf, NaN stays NaN."""
import numpy as np
import torch

from pycollect import _C


def _values():
    rng = np.random.default_rng(0)
    edge = [0.0, -0.0, 1.0, -1.0, 65504.0, 65519.99, 65520.0, 1e6, -1e6, 6.1e-5, 6.0e-8, 5.96e-8, 2.98e-8,
            2.99e-8, 1e-10, np.inf, -np.inf, 3.0e38, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, 1.0 + 2.0**-8]
    wide = rng.standard_normal(5000) * np.exp(rng.uniform(-30, 15, 5000))
    return np.concatenate([np.array(edge), wide]).astype(np.float32)


def test_float16_rounding_matches_numpy():
    for x in _values():
        got = _C.half_round_trip(float(x))
        with np.errstate(over="ignore"):  # values beyond float16's range are meant to become inf
            want = float(np.float32(np.float16(x)))
        assert got == want or (np.isnan(got) and np.isnan(want)), (x, got, want)
    assert np.isnan(_C.half_round_trip(float("nan")))


def test_bfloat16_rounding_matches_torch():
    vals = _values()
    want = torch.from_numpy(vals).to(torch.bfloat16).to(torch.float32).numpy()
    for x, w in zip(vals, want):
        got = _C.bfloat16_round_trip(float(x))
        assert got == w, (x, got, w)
    assert np.isnan(_C.bfloat16_round_trip(float("nan")))
