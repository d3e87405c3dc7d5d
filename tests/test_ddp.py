"""pycollect's DistributedDataParallel (and the naive wrapper) against torch DDP over Gloo.

The session's 3-rank pool (conftest.py) runs every case. 3-rank cases use the default
groups; 2-rank cases use pc.new_group([0, 1]) and the matching Gloo group, and rank 2 sits them out. Each
case trains the same models from the same (rank-dependent) initialisation on the same
data with pycollect DDP and torch DDP side by side, and also with one process on the
concatenated batch where that is well defined (no BatchNorm).
"""
from __future__ import annotations

import pytest
from rank_pool import paired_groups

REL_TOL = 1e-6  # fp32 parameters after several Adam steps, pycollect vs torch DDP


def _member(world):
    """(rank in group, pycollect group, gloo group), or None on a rank outside the group."""
    import pycollect as pc

    pair = paired_groups(world)
    return None if pair is None else (pc.get_rank(pair[0]), *pair)


# -- models and data -------------------------------------------------------------
def _model(kind, seed):
    import torch
    from torch import nn

    torch.manual_seed(seed)
    if kind == "plain":
        return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    if kind == "bn":  # no bias before BatchNorm: its exact gradient is 0, numerically noise
        return nn.Sequential(nn.Linear(6, 16, bias=False), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))
    if kind == "wide":
        return nn.Sequential(*[nn.Linear(32, 32) for _ in range(4)])
    if kind == "branchy":
        return _Branchy()
    raise ValueError(kind)


def _Branchy():
    from torch import nn

    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.trunk = nn.Linear(6, 8)
            self.extra = nn.Linear(8, 8)
            self.head = nn.Linear(8, 3)

        def forward(self, x, use_extra):
            h = self.trunk(x).tanh()
            if use_extra:
                h = self.extra(h).tanh()
            return self.head(h)

    return Branchy()


def _batch(step, world, rank, rows=4):
    """This rank's slice of a global batch of world*rows rows (and the whole batch)."""
    import torch

    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(world * rows, 6, generator=g)
    y = torch.randn(world * rows, 3, generator=g)
    return x[rank * rows:(rank + 1) * rows], y[rank * rows:(rank + 1) * rows], x, y


def _loss(kind, out, y):
    import torch.nn.functional as F

    return F.cross_entropy(out, y.argmax(1)) if kind == "bn" else F.mse_loss(out, y)


def _rel(a, b) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def _max_rel(ta, tb) -> float:
    return max((_rel(a.detach(), b.detach()) for a, b in zip(ta, tb)), default=0.0)


def _torch_ddp(model, gg, **kw):
    from torch.nn.parallel import DistributedDataParallel as TorchDDP

    return TorchDDP(model, process_group=gg, **kw)


# -- cases (run on every rank of the pool) -------------------------------------------
def case_vs_torch(world, kind, steps, bucket_cap_mb):
    import torch

    import pycollect as pc
    from pycollect.ddp import DistributedDataParallel

    m = _member(world)
    if m is None:
        return None
    rank, pg, gg = m
    ours = DistributedDataParallel(_model(kind, 100 + rank), pg, bucket_cap_mb=bucket_cap_mb)
    ref = _torch_ddp(_model(kind, 100 + rank), gg)
    single = _model(kind, 100)  # rank 0's initialisation, which both DDPs broadcast
    opts = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in (ours, ref, single)]
    before = pc.get_counters(pg).get("all_reduce", 0)
    grad_diff = 0.0
    for step in range(steps):
        x, y, full_x, full_y = _batch(step, world, rank)
        for model, opt in zip((ours, ref), opts):
            opt.zero_grad()
            _loss(kind, model(x), y).backward()
        grad_diff = max(grad_diff, _max_rel([p.grad for p in ours.parameters()], [p.grad for p in ref.parameters()]))
        for opt in opts[:2]:
            opt.step()
        opts[2].zero_grad()
        _loss(kind, single(full_x), full_y).backward()
        opts[2].step()
    return {
        "grad_vs_torch": grad_diff,
        "params_vs_torch": _max_rel(list(ours.module.parameters()), list(ref.module.parameters())),
        "buffers_vs_torch": _max_rel([b.float() for b in ours.module.buffers()],
                                     [b.float() for b in ref.module.buffers()]),
        "params_vs_single": _max_rel(list(ours.module.parameters()), list(single.parameters())),
        "all_reduces_per_step": (pc.get_counters(pg).get("all_reduce", 0) - before) / steps,
        "buckets": len(ours.bucket_sizes()),
        "param_sum": float(sum(p.sum() for p in ours.parameters())),
    }


def case_unused(world):
    """Step 0: everyone uses `extra`; step 1: nobody; step 2: only rank 0."""
    import torch

    from pycollect.ddp import DistributedDataParallel

    m = _member(world)
    if m is None:
        return None
    rank, pg, gg = m
    ours = DistributedDataParallel(_model("branchy", 7 + rank), pg, find_unused_parameters=True)
    ref = _torch_ddp(_model("branchy", 7 + rank), gg, find_unused_parameters=True)
    opts = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in (ours, ref)]
    report = []
    for step, users in enumerate(([0, 1, 2], [], [0])):
        x, y, _, _ = _batch(step, world, rank)
        for model, opt in zip((ours, ref), opts):
            opt.zero_grad()
            _loss("plain", model(x, rank in users), y).backward()
        report.append({
            "grad_is_none": [p.grad is None for p in ours.parameters()],
            "ref_grad_is_none": [p.grad is None for p in ref.parameters()],
            "grad_vs_torch": _max_rel([p.grad for p in ours.parameters() if p.grad is not None],
                                      [p.grad for p in ref.parameters() if p.grad is not None]),
        })
        for opt in opts:
            opt.step()
    report.append({"params_vs_torch": _max_rel(list(ours.parameters()), list(ref.parameters()))})
    return report


def case_unused_without_flag(world):
    """A parameter with no gradient, without find_unused_parameters: a clear error."""
    from pycollect.ddp import DistributedDataParallel

    m = _member(world)
    if m is None:
        return None
    rank, pg, _ = m
    ours = DistributedDataParallel(_model("branchy", 7), pg)
    x, y, _, _ = _batch(0, world, rank)
    try:
        _loss("plain", ours(x, False), y).backward()
    except RuntimeError as e:
        message = str(e)
    else:
        message = None
    _loss("plain", ours(x, True), y).backward()  # the wrapper still works afterwards
    return message, [p.grad is not None for p in ours.parameters()]


def case_no_sync(world, naive):
    """3 micro-batches, the first 2 under no_sync(): .grad equals one process on the whole batch."""
    import torch

    import pycollect as pc
    from pycollect.ddp import DistributedDataParallel
    from pycollect.ddp import NaiveDistributedDataParallel

    m = _member(world)
    if m is None:
        return None
    rank, pg, gg = m
    wrap = NaiveDistributedDataParallel if naive else DistributedDataParallel
    ours = wrap(_model("plain", 3 + rank), pg)
    ref = _torch_ddp(_model("plain", 3 + rank), gg)
    single = _model("plain", 3)
    micro = [_batch(10 + k, world, rank) for k in range(3)]
    calls_in_no_sync = 0
    for model in (ours, ref):
        for k, (x, y, _, _) in enumerate(micro):
            if k < 2:
                before = pc.get_counters(pg).get("all_reduce", 0)
                with model.no_sync():
                    (_loss("plain", model(x), y) / 3).backward()
                if model is ours:
                    calls_in_no_sync += pc.get_counters(pg).get("all_reduce", 0) - before
            else:
                (_loss("plain", model(x), y) / 3).backward()
    full_x = torch.cat([b[2] for b in micro])
    full_y = torch.cat([b[3] for b in micro])
    _loss("plain", single(full_x), full_y).backward()
    return {
        "calls_in_no_sync": calls_in_no_sync,
        "vs_single": _max_rel([p.grad for p in ours.parameters()], [p.grad for p in single.parameters()]),
        "vs_torch": _max_rel([p.grad for p in ours.parameters()], [p.grad for p in ref.parameters()]),
    }


def case_naive(world, use_torch_comm):
    """The naive wrapper, on pycollect or on torch.distributed, against torch DDP."""
    import torch
    import torch.distributed as dist

    from pycollect.ddp import NaiveDistributedDataParallel

    m = _member(world)
    if m is None:
        return None
    rank, pg, gg = m
    if use_torch_comm:
        ours = NaiveDistributedDataParallel(_model("plain", 5 + rank), gg, comm=dist)
    else:
        ours = NaiveDistributedDataParallel(_model("plain", 5 + rank), pg)
    ref = _torch_ddp(_model("plain", 5 + rank), gg)
    opts = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in (ours, ref)]
    for step in range(4):
        x, y, _, _ = _batch(step, world, rank)
        for model, opt in zip((ours, ref), opts):
            opt.zero_grad()
            _loss("plain", model(x), y).backward()
            opt.step()
    return _max_rel(list(ours.parameters()), list(ref.parameters()))


def case_mismatch(world):
    """Rank 1 wraps a model with a different shape: every rank raises, nobody hangs."""
    import torch
    import torch.distributed as dist
    from torch import nn

    import pycollect as pc
    from pycollect.ddp import DistributedDataParallel

    m = _member(world)
    if m is None:
        return None
    rank, pg, gg = m
    try:
        # a torch.distributed group: refused before any collective
        DistributedDataParallel(nn.Linear(2, 2), gg if gg is not None else dist.group.WORLD)
    except TypeError as e:
        wrong_group = str(e)
    model = nn.Sequential(nn.Linear(4, 6 if rank == 1 else 5))
    try:
        DistributedDataParallel(model, pg)
    except ValueError as e:
        message = str(e)
    else:
        message = None
    t = torch.ones(3)
    pc.all_reduce(t, group=pg)  # the group is still healthy
    return message, t.tolist(), wrong_group


def case_overlap(world):
    """Bucket layout, and: the first buckets are launched before backward reaches the first layer."""
    import torch

    from pycollect.ddp import FIRST_BUCKET_BYTES, DistributedDataParallel

    m = _member(world)
    if m is None:
        return None
    rank, pg, _ = m
    model = _model("wide", 1)  # 4 x Linear(32, 32): 4224 bytes per layer
    seen = {}
    first = next(model.parameters())  # its gradient comes last in backward
    # Registered before the wrapper's hook, so it runs just before the last bucket fills.

    def record(param):
        seen["launched"] = holder["ddp"]._next

    first.register_post_accumulate_grad_hook(record)
    holder = {"ddp": DistributedDataParallel(model, pg, bucket_cap_mb=4000 / 2**20)}
    ddp = holder["ddp"]
    x = torch.randn(8, 32)
    ddp(x).square().mean().backward()
    big = DistributedDataParallel(torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(6)]), pg)
    return {
        "buckets": ddp.bucket_parameter_names(),
        "launched_before_last_hook": seen["launched"],
        "big_sizes": big.bucket_sizes(),
        "first_cap": FIRST_BUCKET_BYTES,
    }


def case_mixed_dtypes(world):
    """float32 and float64 parameters go to separate buckets; results still match torch DDP."""
    import torch
    from torch import nn

    from pycollect.ddp import DistributedDataParallel

    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(6, 8)
            self.b = nn.Linear(8, 3).double()

        def forward(self, x):
            return self.b(self.a(x).tanh().double()).float()

    m = _member(world)
    if m is None:
        return None
    rank, pg, gg = m
    torch.manual_seed(rank)
    ours = DistributedDataParallel(Mixed(), pg, bucket_cap_mb=100 / 2**20)
    torch.manual_seed(rank)
    ref = _torch_ddp(Mixed(), gg)
    x, y, _, _ = _batch(0, world, rank)
    for model in (ours, ref):
        _loss("plain", model(x), y).backward()
    dtypes = [[ours.module.get_parameter(n).dtype for n in names] for names in ours.bucket_parameter_names()]
    return {
        "one_dtype_per_bucket": all(len(set(d)) == 1 for d in dtypes),
        "dtypes_seen": sorted({str(d[0]) for d in dtypes}),
        "vs_torch": _max_rel([p.grad for p in ours.parameters()], [p.grad for p in ref.parameters()]),
    }


# -- tests ---------------------------------------------------------------------
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("kind", ["plain", "bn"])
def test_matches_torch_ddp_and_single_process(pool3, world, kind):
    results = pool3.run(case_vs_torch, world, kind, 4, 25)
    members = results[:world]
    assert all(r is None for r in results[world:])
    for r in members:
        assert r["grad_vs_torch"] <= REL_TOL, r
        assert r["params_vs_torch"] <= REL_TOL, r
        assert r["buffers_vs_torch"] <= REL_TOL, r
        assert r["all_reduces_per_step"] == r["buckets"], r
        if kind == "plain":  # BatchNorm's statistics are per rank, so no single-process twin
            assert r["params_vs_single"] <= 1e-5, r
    assert len({r["param_sum"] for r in members}) == 1  # replicas identical, bit for bit


def test_many_small_buckets_match_torch_ddp(pool3):
    results = pool3.run(case_vs_torch, 3, "bn", 3, 60 / 2**20)  # 60-byte cap: one bucket per tensor or two
    for r in results:
        assert r["buckets"] == 4, r
        assert r["params_vs_torch"] <= REL_TOL and r["buffers_vs_torch"] <= REL_TOL, r


@pytest.mark.parametrize("world", [2, 3])
def test_unused_parameters_match_torch_ddp(pool3, world):
    for report in pool3.run(case_unused, world)[:world]:
        for step in report[:3]:
            assert step["grad_is_none"] == step["ref_grad_is_none"], report
            assert step["grad_vs_torch"] <= REL_TOL, report
        assert any(report[1]["grad_is_none"])  # step 1: nobody used `extra`, its .grad stays None
        assert report[3]["params_vs_torch"] <= REL_TOL, report


def test_unused_parameter_without_flag_raises_clearly(pool3):
    for message, has_grad in pool3.run(case_unused_without_flag, 2)[:2]:
        assert message is not None and "extra.weight" in message and "find_unused_parameters" in message
        assert all(has_grad)


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("naive", [False, True])
def test_no_sync_accumulation_equals_one_large_batch(pool3, world, naive):
    for r in pool3.run(case_no_sync, world, naive)[:world]:
        assert r["calls_in_no_sync"] == 0, r
        assert r["vs_single"] <= 1e-5, r
        assert r["vs_torch"] <= REL_TOL, r


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("use_torch_comm", [False, True])
def test_naive_wrapper_matches_torch_ddp(pool3, world, use_torch_comm):
    for diff in pool3.run(case_naive, world, use_torch_comm)[:world]:
        assert diff <= REL_TOL


@pytest.mark.parametrize("world", [2, 3])
def test_different_parameters_raise_on_every_rank(pool3, world):
    for message, after, wrong_group in pool3.run(case_mismatch, world)[:world]:
        assert "pycollect ProcessGroup" in wrong_group, wrong_group
        assert message is not None, "construction should have failed"
        assert "0.weight" in message and "(5, 4)" in message and "(6, 4)" in message, message
        assert after == [float(world)] * 3


def test_buckets_are_launched_during_backward(pool3):
    r = pool3.run(case_overlap, 2)[0]
    # reverse order, 4000-byte cap: [layer 3], [layer 2], [layer 1], [layer 0]
    assert r["buckets"] == [["3.bias", "3.weight"], ["2.bias", "2.weight"], ["1.bias", "1.weight"],
                            ["0.bias", "0.weight"]], r
    assert r["launched_before_last_hook"] == 3, r  # three all-reduces in flight before backward ends
    sizes = r["big_sizes"]  # 6 x (1 MiB + 2 KiB): first bucket closes at 1 MiB, the others at 25 MiB
    assert sizes == [(512 * 512 + 512) * 4, 5 * (512 * 512 + 512) * 4], sizes
    assert sizes[0] < r["first_cap"] + 4096
    assert sum(sizes) == 6 * (512 * 512 + 512) * 4


def test_mixed_dtypes_use_separate_buckets(pool3):
    for r in pool3.run(case_mixed_dtypes, 3):
        assert r["one_dtype_per_bucket"] and r["dtypes_seen"] == ["torch.float32", "torch.float64"], r
        assert r["vs_torch"] <= REL_TOL, r
