"""pycollect._sync, the cross-rank helpers DDP, FSDP and the demo share, tested directly on
the session's 3-rank pool, through pycollect and through torch.distributed (Gloo)."""
from __future__ import annotations

import pytest
from rank_pool import paired_groups


def _tensors(rank: int):
    """Mixed dtypes, a non-contiguous view, an empty tensor; different on every rank."""
    import torch

    g = torch.Generator().manual_seed(100 + rank)
    base = torch.randn(6, 4, generator=g)
    return [torch.randn(5, generator=g), base.t(), torch.randint(0, 9, (7,), generator=g),
            torch.empty(0), torch.randn(3, 3, generator=g).double(), torch.randn(300, generator=g)]


def case_broadcast(backend: str, size: int, bucket_bytes: int):
    import torch

    import pycollect as pc
    from pycollect import _sync

    pair = paired_groups(size)
    if pair is None:
        return None
    group = pair[0] if backend == "pycollect" else pair[1]
    comm = _sync.collectives(backend)
    _sync.BROADCAST_BUCKET_BYTES = bucket_bytes
    mine = _tensors(pc.get_rank())
    _sync.broadcast_from_root(mine, group, comm)
    root = _tensors(0)
    return [bool(torch.equal(a, b)) and a.dtype == b.dtype for a, b in zip(mine, root)]


@pytest.mark.parametrize("bucket_bytes", [16, 1 << 20])
@pytest.mark.parametrize("backend", ["pycollect", "gloo"])
@pytest.mark.parametrize("size", [2, 3])
def test_broadcast_from_root_gives_the_root_values_everywhere(pool3, backend, size, bucket_bytes):
    results = [r for r in pool3.run(case_broadcast, backend, size, bucket_bytes) if r is not None]
    assert len(results) == size
    assert all(all(r) for r in results), results


def case_difference(size: int):
    import torch.distributed as dist

    import pycollect as pc
    from pycollect import _sync

    pair = paired_groups(size)
    if pair is None:
        return None
    pg, gg = pair
    r = pc.get_rank(pg)
    same = _sync.first_difference(["a", "bb", ""], pg)
    longer = _sync.first_difference(["a", "bb"] + (["extra"] if r == size - 1 else []), pg, noun="parameter")
    other = _sync.first_difference(["x", f"rank-dependent {r}"], gg, dist)
    roots = (_sync.group_root(pg), _sync.group_root(gg, dist), _sync.group_root(None))
    return same, longer, other, roots


@pytest.mark.parametrize("size", [2, 3])
def test_first_difference_names_rank_and_line_on_every_rank(pool3, size):
    results = [r for r in pool3.run(case_difference, size) if r is not None]
    assert len(results) == size and all(r == results[0] for r in results)
    same, longer, other, roots = results[0]
    assert same is None
    last = size - 1
    assert longer == (f"parameter #2 differs across ranks: rank 0 has '(nothing)', rank {last} has 'extra' "
                      f"(rank 0 lists 2, rank {last} lists 3)")
    assert other.startswith("line #1 differs across ranks: rank 0 has 'rank-dependent 0', rank 1 has")
    assert roots == (0, 0, 0)


def case_average(size: int):
    import torch

    import pycollect as pc
    from pycollect import _sync

    pair = paired_groups(size)
    if pair is None:
        return None
    r = pc.get_rank(pair[0])
    a, b = torch.zeros(3, requires_grad=True), torch.zeros(2, requires_grad=True)
    a.grad = torch.full((3,), float(r + 1))
    if r == 0:
        b.grad = torch.full((2,), 6.0)  # the other ranks take part with zeros
    _sync.average_gradients([a, b], size, pair[0])
    return a.grad.tolist(), b.grad.tolist()


@pytest.mark.parametrize("size", [2, 3])
def test_average_gradients_with_missing_grads(pool3, size):
    results = [r for r in pool3.run(case_average, size) if r is not None]
    mean = sum(range(1, size + 1)) / size
    assert results == [([mean] * 3, [6.0 / size] * 2)] * size


def test_collectives_switch_refuses_unknown_backends():
    from pycollect import _sync

    with pytest.raises(ValueError, match="'nccl'"):
        _sync.collectives("nccl")
