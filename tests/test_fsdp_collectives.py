"""The stateless FSDP steps (pycollect/fsdp/collectives.py), without the wrapper.

Layout and shard arithmetic run in this process over world sizes 1..5 and element
counts including 0, 1 and primes. Gather and reduce-scatter run on 3 real ranks (and
on 2 of them through a sub-group) and are checked against the same data computed
locally and against torch.distributed (Gloo) on the same inputs.
"""
from __future__ import annotations

import pytest
import torch

from fsdp_models import groups

from pycollect.fsdp import collectives as C

SHAPES = [
    [(0,)],
    [(1,)],
    [(7,)],
    [(2, 3), (5,)],
    [(13,), (1,), (3, 1)],
    [(4, 4), (0,), (11,)],
]


def _params(shapes, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).to(dtype) for s in shapes]


@pytest.mark.parametrize("world", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("shapes", SHAPES)
def test_layout_and_shards_tile_the_flat_vector(shapes, world):
    layout = C.make_layout(shapes, world)
    params = _params(shapes)
    flat = torch.cat([p.reshape(-1) for p in params])
    assert layout.total_numel == flat.numel()
    assert layout.padded_numel % world == 0 and 0 <= layout.padding < world
    assert layout.shard_numel * world == layout.padded_numel
    shards = [C.shard_from_params(params, layout, r) for r in range(world)]
    assert all(s.numel() == layout.shard_numel for s in shards)
    joined = torch.cat(shards)
    assert torch.equal(joined[:flat.numel()], flat)
    assert torch.count_nonzero(joined[flat.numel():]) == 0  # padding is zeros
    for r in range(world):
        assert torch.equal(C.chunk_of(joined, layout, r), shards[r])


def test_worked_example_from_the_module_docstring():
    layout = C.make_layout([(6,), (4,)], 3)
    assert (layout.shard_numel, layout.padded_numel, layout.padding) == (4, 12, 2)
    p0, p1 = torch.arange(6.0), torch.arange(10.0, 14.0)
    assert C.shard_from_params([p0, p1], layout, 1).tolist() == [4.0, 5.0, 10.0, 11.0]
    assert C.shard_from_params([p0, p1], layout, 2).tolist() == [12.0, 13.0, 0.0, 0.0]


@pytest.mark.parametrize("world", [0, -1, 2.0])
def test_impossible_world_sizes_are_refused(world):
    with pytest.raises(ValueError, match="world size"):
        C.make_layout([(3,)], world)
    with pytest.raises(ValueError, match="rank 3 is outside"):
        C.shard_from_params([torch.ones(3)], C.make_layout([(3,)], 3), 3)


def test_unflatten_gives_shaped_views_and_one_gradient():
    shapes = [(2, 3), (5,), (1, 1)]
    layout = C.make_layout(shapes, 5)  # 12 elements -> 15, padding 3
    full = torch.arange(float(layout.padded_numel)).requires_grad_()
    views = C.unflatten(full, layout)
    assert [tuple(v.shape) for v in views] == shapes
    assert all(v.untyped_storage().data_ptr() == full.untyped_storage().data_ptr() for v in views)
    calls = []
    full.register_post_accumulate_grad_hook(lambda t: calls.append(t.grad.clone()))
    (views[0].sum() * 2 + views[0].sum() + views[2].sum()).backward()
    assert len(calls) == 1  # a single accumulation for the whole unit
    expect = torch.zeros(layout.padded_numel)
    expect[:6], expect[11] = 3.0, 1.0
    assert torch.equal(calls[0], expect)


def test_free_and_alloc_storage_keep_shape_and_views():
    layout = C.make_layout([(3, 2)], 2)
    full = C.alloc_unsharded(layout, torch.float32)
    assert full.untyped_storage().nbytes() == 0 and full.shape == (6,)
    assert C.alloc_storage(full) == 24 and C.alloc_storage(full) == 0
    full.copy_(torch.arange(6.0))
    view = C.unflatten(full, layout)[0]
    assert C.free_storage(full) == 24 and C.free_storage(full) == 0
    C.alloc_storage(full)
    full.copy_(torch.arange(6.0) * 10)
    assert view.tolist() == [[0.0, 10.0], [20.0, 30.0], [40.0, 50.0]]


def test_accumulate_into_sets_then_adds():
    p = torch.nn.Parameter(torch.zeros(3))
    C.accumulate_into(p, torch.ones(3, dtype=torch.bfloat16))
    assert p.grad.dtype == torch.float32 and p.grad.tolist() == [1.0, 1.0, 1.0]
    C.accumulate_into(p, torch.full((3,), 2.0))
    assert p.grad.tolist() == [3.0, 3.0, 3.0]


# -- on real ranks -------------------------------------------------------------------------



def case_gather(world, shapes, dtype_name):
    import torch.distributed as dist

    pg, dg, member = groups(world)
    if not member:
        return None
    dtype = getattr(torch, dtype_name)
    import pycollect as pc
    rank = pc.get_rank(pg)
    layout = C.make_layout(shapes, world)
    params = _params(shapes, seed=3)  # the same full parameters on every rank
    shard = C.shard_from_params(params, layout, rank)
    full = C.alloc_unsharded(layout, dtype)
    C.alloc_storage(full)
    C.all_gather_params(shard, full, pg, async_op=True).wait()
    expect = torch.zeros(layout.padded_numel, dtype=dtype)
    if params:
        expect[:layout.total_numel] = torch.cat([p.reshape(-1) for p in params]).to(dtype)
    gloo = torch.empty(layout.padded_numel, dtype=dtype)
    dist.all_gather_into_tensor(gloo, shard.to(dtype), group=dg)
    views = C.unflatten(full, layout)
    ok_views = all(torch.equal(v, p.to(dtype)) for v, p in zip(views, params))
    return torch.equal(full, expect), torch.equal(full, gloo), ok_views


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shapes", SHAPES)
def test_all_gather_params(pool3, world, shapes, dtype):
    for res in pool3.run(case_gather, world, shapes, dtype)[:world]:
        assert res == (True, True, True)


def case_reduce_scatter(world, numel, dtype_name):
    import torch.distributed as dist

    pg, dg, member = groups(world)
    if not member:
        return None
    import pycollect as pc
    rank = pc.get_rank(pg)
    dtype = getattr(torch, dtype_name)
    layout = C.make_layout([(numel,)], world)
    grads = [torch.randn(layout.padded_numel, generator=torch.Generator().manual_seed(10 + r)) for r in range(world)]
    mine = grads[rank].clone()
    work, shard = C.reduce_scatter_grads(mine, layout, dtype, pg, async_op=True)
    work.wait()
    expect = C.chunk_of(sum(g.to(dtype).double() / world for g in grads), layout, rank)
    gloo = torch.empty(layout.shard_numel, dtype=dtype)
    dist.reduce_scatter_tensor(gloo, grads[rank].to(dtype) / world, group=dg)
    tol = 1e-6 if dtype == torch.float32 else 2e-2
    return (shard.dtype == dtype, shard.numel() == layout.shard_numel,
            torch.allclose(shard.double(), expect, atol=tol, rtol=tol),
            torch.allclose(shard.double(), gloo.double(), atol=tol, rtol=tol))


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("numel", [0, 1, 2, 7, 31, 1000])
def test_reduce_scatter_grads(pool3, world, numel, dtype):
    for res in pool3.run(case_reduce_scatter, world, numel, dtype)[:world]:
        assert res == (True, True, True, True)


def case_size_mismatch():
    import pycollect as pc
    layout = C.make_layout([(10,)], pc.get_world_size())
    errors = []
    try:
        C.all_gather_params(torch.ones(4), torch.empty(5), None)
    except ValueError as e:
        errors.append(str(e))
    try:
        C.reduce_scatter_grads(torch.ones(5), layout, torch.float32, None)
    except ValueError as e:
        errors.append(str(e))
    return errors


def test_size_mismatches_raise_before_sending(pool3):
    for errors in pool3.run(case_size_mismatch):
        assert len(errors) == 2
        assert "expected 3 ranks x 4" in errors[0] and "expects 12" in errors[1]


