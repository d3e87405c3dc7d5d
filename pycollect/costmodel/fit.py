"""Fitting the parameters to measured times by least squares on the formulas.

A sample is (op, algo, nbytes, world_size, seconds[, segment_bytes]). Every formula is
a sum of maxima of terms linear in (alpha, beta, gamma, overhead), so around any
parameters its slopes are exact: the fit minimises the squared log of predicted /
measured (each sample weighs as much as any other, 8 B or 64 MiB, too slow or too fast)
by Gauss-Newton steps, recomputing which terms are the maxima after each, keeping every
parameter >= 0.
`overlap` is not differentiable in that sense: the fit tries 0, 1/2 and 1 and keeps
the one with the smallest error; likewise `cache_bytes` (None, or 512 KiB to 16 MiB in
octaves: where the caches stop helping), with `cache_speedup` fitted (>= 1) for each.
`local_speedup` is fitted (>= 1) where `cores` is given, which is not fitted.
`single_copy_bytes` is tried as None and 64 KiB (shared memory's threshold), with
`single_copy_alpha` fitted (>= 0) for the latter.
Where `cores` is given and the samples have calls with at most that many ranks and
calls with more, each regime gets a set of its own, fitted on its own samples: the
first is the result, the second its `crowded` (Params.at). Samples of the shared arena
(algo "shm", tuning/arena.py) fit a set of their own, the result's `arena`, by the same
rules (neither overlap nor single_copy_bytes is a term of its formulas).

    fit(samples, cores=2) -> (Params, rms relative error)
    samples_from_bench(json_dict) -> samples (the shape `pycollect bench --json` writes)
"""
from __future__ import annotations

import math
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ..tuning.arena import ALGO as ARENA_ALGO
from ..tuning.arena import ARENA_FORMULAS
from ..tuning.choice import predict
from ..tuning.formulas import DEFAULT_SEGMENT_BYTES, model_name
from ..tuning.params import SHM_SINGLE_COPY_BYTES, Params

FITTED = ("alpha", "beta", "gamma", "overhead", "wake", "cache_speedup", "mem_parallel", "local_speedup",
          "single_copy_alpha")
LOWER = {"cache_speedup": 1.0, "mem_parallel": 1.0, "local_speedup": 1.0}  # every other one is >= 0
# cache_bytes tried by default: none, and the octaves where L2 / L3 sizes lie
CACHE_SIZES: Tuple[Optional[float], ...] = (None,) + tuple(float(1 << k) for k in range(19, 25))
Sample = Tuple[str, str, float, int, float, int]  # op, algo, nbytes, world_size, seconds, segment bytes
# A call's one-way ping-pong half: what `probe` measures with send/recv (op "ping_pong").
_PING = "ping_pong"
# The arena's samples while its own set is fitted: timed with the candidate set itself
# (predict would take the arena set of the parameters it is given: Params.arena_set).
_OWN_SET = "shm, own set"


def _time(s: Sample, params: Params) -> float:
    op, algo, nbytes, p, _, seg = s
    if algo == _OWN_SET:  # the arena's own fit: `params` is the candidate arena set
        return ARENA_FORMULAS[op](float(nbytes), p, params.at(p), seg)
    if op == _PING:  # one round trip of nbytes between two ranks: two messages, two calls each way
        params = params.at(2)
        return 2 * (params.overhead + params.message(2) + params.read_cost(nbytes, 2) + nbytes * params.beta
                    * params.stretch(2) * params.per_byte(nbytes, params.cores_busy([1])))  # one rank copies at a time
    return predict(op, nbytes, p, algo, params, seg)


def _errors(samples: Sequence[Sample], params: Params) -> List[float]:
    return [_time(s, params) / s[4] - 1 for s in samples]


def rms(samples: Sequence[Sample], params: Params) -> float:
    """Root mean square of the relative errors predicted / measured - 1."""
    e = _errors(samples, params)
    return (sum(x * x for x in e) / len(e)) ** 0.5 if e else 0.0


def _log_cost(samples: Sequence[Sample], params: Params) -> float:
    return sum(math.log(max(_time(s, params), 1e-30) / s[4]) ** 2 for s in samples)


def _solve(samples: Sequence[Sample], params: Params, fixed: Dict[str, float], rounds: int = 60) -> Params:
    """Gauss-Newton on log(predicted / measured): a sample 3x too slow weighs as much as one
    3x too fast (on a loaded machine the outliers are slow ones)."""
    import numpy as np

    free = [f for f in FITTED if f not in fixed and not (f in ("wake", "local_speedup") and params.cores is None)
            and not (f == "cache_speedup" and params.cache_bytes is None)
            and not (f == "mem_parallel" and params.mem_parallel is None)
            and not (f == "single_copy_alpha" and params.single_copy_bytes is None)]
    params = params.with_(**fixed)
    y = np.array([s[4] for s in samples])
    cost = _log_cost(samples, params)
    for _ in range(rounds):
        base = np.array([_time(s, params) for s in samples])
        cols = []
        for name in free:  # the slope of each sample in this parameter (exact: piecewise linear)
            h = max(getattr(params, name), 1e-12) * 1e-4
            bumped = params.with_(**{name: getattr(params, name) + h})
            cols.append((np.array([_time(s, bumped) for s in samples]) - base) / h)
        A = np.stack(cols, axis=1) / base[:, None]
        r = np.log(base / y)
        x0 = np.array([getattr(params, n) for n in free])
        lower = np.array([LOWER.get(n, 0.0) for n in free])
        # Active set: a parameter at its bound whose step would cross it stays there, and the
        # step of the others is solved again without it (clipping it afterwards instead can
        # leave a direction that improves nothing, and the fit would stop where it started).
        moving = np.ones(len(free), dtype=bool)
        while True:
            step = np.zeros(len(free))
            step[moving], *_ = np.linalg.lstsq(A[:, moving], -r, rcond=None)
            stuck = moving & (x0 <= lower) & (step < 0)
            if not stuck.any():
                break
            moving &= ~stuck
        t, improved = 1.0, False
        while t > 1e-4:  # backtracking, projected onto the parameters' ranges
            x = np.maximum(x0 + t * step, lower)
            trial = params.with_(**{n: float(v) for n, v in zip(free, x)})
            c = _log_cost(samples, trial)
            if c < cost:
                params, improved = trial, cost - c > 1e-12 * max(cost, 1e-30)
                cost = c
                break
            t /= 2
        if not improved:
            break
    return params


def fit(samples: Iterable[Sample], cores: Optional[int] = None, fixed: Optional[Dict[str, float]] = None,
        start: Optional[Params] = None, overlaps: Sequence[float] = (0.0, 0.5, 1.0),
        cache_sizes: Sequence[Optional[float]] = CACHE_SIZES,
        mem_sharing: Sequence[bool] = (False, True),
        single_copy: Sequence[Optional[float]] = (None, float(SHM_SINGLE_COPY_BYTES)),
        crowded: bool = True) -> Tuple[Params, float]:
    """The parameters that best explain `samples` (least squared log error) and their rms
    relative error. `cache_sizes`: the cache_bytes to try ((None,): no cache term);
    `mem_sharing`: fit without and with mem_parallel (only where cores is given: the
    cores' sharing of DRAM is a term of one machine); `single_copy`: the
    single_copy_bytes to try ((None,): every message costs alpha). `crowded`: with cores
    given, fit the calls whose ranks outnumber them apart (where there are calls of both
    kinds)."""
    samples = [tuple(s) if len(s) == 6 else tuple(s) + (DEFAULT_SEGMENT_BYTES,) for s in samples]
    if not samples:
        raise ValueError("fit: no samples (run `pycollect bench --json` or the probe first)")
    bad = [s for s in samples if not s[4] > 0]
    if bad:
        raise ValueError(f"fit: measured times must be > 0, got {bad[0]}")
    terms = dict(cores=cores, fixed=fixed, overlaps=overlaps, cache_sizes=cache_sizes, mem_sharing=mem_sharing,
                 single_copy=single_copy)
    links = [s for s in samples if s[1] != ARENA_ALGO]
    arena = [s for s in samples if s[1] == ARENA_ALGO]
    # The arena's samples fit its own set (Params.arena): neither overlap nor reads from a
    # sender's memory are terms of its formulas.
    params = _fit_regimes(links, start, crowded, terms) if links else (start or Params())
    if arena:
        own = [(s[0], _OWN_SET) + tuple(s[2:]) for s in arena]
        start_arena = params.arena_set().with_(crowded=None, source="fit")
        params = params.with_(arena=_fit_regimes(own, start_arena, crowded,
                                                 dict(terms, overlaps=(0.0,), single_copy=(None,))))
    return params, rms(samples, params)


def _fit_regimes(samples: Sequence[Sample], start: Optional[Params], crowded: bool, terms: dict) -> Params:
    """One set of parameters for `samples`, with a crowded set of its own where cores is
    given and they have calls of both kinds (fit)."""
    cores = terms["cores"]
    if crowded and cores is not None:
        own = [s for s in samples if s[3] <= cores]
        more = [s for s in samples if s[3] > cores]
        if own and more:
            return _fit_one(own, start=start, **terms).with_(crowded=_fit_one(more, start=start, **terms))
    return _fit_one(samples, start=start, **terms)


def _fit_one(samples: Sequence[Sample], cores, fixed, start, overlaps, cache_sizes, mem_sharing,
             single_copy) -> Params:
    """fit() of one set of parameters: each combination of the terms tried, solved by _solve."""
    best = None
    shares = [m for m in mem_sharing if cores is not None or not m]
    grid = ((o, c, m, r) for o in overlaps for c in cache_sizes for m in shares for r in single_copy)
    for ov, cache, share, reads in grid:
        p0 = (start or Params()).with_(overlap=ov, cores=cores, crowded=None, cache_bytes=cache,
                                       cache_speedup=1.5 if cache else 1.0,
                                       mem_parallel=1.5 if share else None, single_copy_bytes=reads,
                                       single_copy_alpha=2e-6 if reads else 0.0, source="fit")
        p = _solve(samples, p0, dict(fixed or {}))
        cost = _log_cost(samples, p)
        if best is None or cost < best[1] * (1 - 1e-9):  # a tie keeps the simpler (earlier) model
            best = (p, cost)
    return best[0]


def samples_from_bench(data: dict) -> List[Sample]:
    """Samples from one `pycollect bench --json` file: {meta, rows} (or the {samples} of
    `pycollect model --validate --json`). Each row's algorithm is the one the engine ran
    (the bench records it: "shm" where the shared arena ran); a file without that record
    (an older bench) names it with --algo, or is refused where the automatic choice ran."""
    meta, rows = data.get("meta", {}), data.get("rows", [])
    if "samples" in data:  # `pycollect model --validate --json`
        return [tuple(s) for s in data["samples"]]
    if meta.get("latency"):
        raise ValueError("a `bench --latency` file: fit from a `pycollect bench` run (or use the probe)")
    op, p = meta.get("op"), meta.get("world_size")
    if not op or not p:
        raise ValueError("not a `pycollect bench --json` file: meta.op and meta.world_size are missing")
    env = meta.get("env") or {}
    seg = int(env.get("PYCOLLECT_SEGMENT_BYTES") or DEFAULT_SEGMENT_BYTES)
    asked = (meta.get("algo") or env.get("PYCOLLECT_ALGO") or "auto").lower()
    out = []
    for r in rows:
        algo = r["pycollect"].get("algo") or asked
        if algo == "auto":
            raise ValueError(f"this {op} run used the automatic choice and does not record what ran (an older "
                             f"bench): rerun the benchmark, or with --algo")
        out.append((op, model_name(op, algo), float(r["size"]), int(p), r["pycollect"]["time_us"] * 1e-6, seg))
    return out
