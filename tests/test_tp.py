"""Tensor parallelism, tensor x data parallelism and hybrid sharding against one process
training the same GPT on the same data (losses and parameters within float32 tolerance),
and their misuse errors."""
from __future__ import annotations

import pytest
from rank_pool import paired_groups

STEPS, ROWS = 3, 4  # rows per data-parallel replica per step
_GRIDS: dict = {}


def _cfg(tied: bool):
    from pycollect.demo.gpt import GPTConfig

    return GPTConfig(vocab=32, seq=8, dim=16, layers=2, heads=2, tied=tied)


def _grid(inner: int):
    """(inner group, outer group), made once per worker."""
    from pycollect.mesh import grid_groups

    if inner not in _GRIDS:
        _GRIDS[inner] = grid_groups(inner)
    return _GRIDS[inner]


def _train(model, cfg, replicas: int, replica: int, wrap=lambda m: m):
    """Losses of STEPS SGD steps on this replica's rows of each step's global batch."""
    import torch

    from pycollect.demo.gpt import gpt_batch, lm_loss

    model = wrap(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)  # SGD: Adam would magnify last-bit differences
    losses = []
    for step in range(STEPS):
        tokens, targets = gpt_batch(cfg, ROWS * replicas, seed=step)
        rows = slice(replica * ROWS, (replica + 1) * ROWS)
        loss = lm_loss(model(tokens[rows]), targets[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def _reference(cfg, replicas: int):
    """(model after training, losses averaged over replicas) in one process, whole batch."""
    import torch

    from pycollect.demo.gpt import GPT

    torch.manual_seed(0)
    model = GPT(cfg)
    return model, _train(model, cfg, 1, 0, lambda m: m) if replicas == 1 else _train_whole(model, cfg, replicas)


def _train_whole(model, cfg, replicas):
    import torch

    from pycollect.demo.gpt import gpt_batch, lm_loss

    opt = torch.optim.SGD(model.parameters(), lr=0.5)  # SGD: Adam would magnify last-bit differences
    losses = []
    for step in range(STEPS):
        tokens, targets = gpt_batch(cfg, ROWS * replicas, seed=step)
        loss = lm_loss(model(tokens), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def _max_rel(a: dict, b: dict) -> float:
    assert set(a) == set(b), (sorted(a), sorted(b))
    return max(float((a[k] - b[k]).abs().max() / (b[k].abs().max() + 1e-12)) for k in a)


def case_tensor_parallel(tied: bool, tp_inner: int, dp: bool):
    """TP over `tp_inner` ranks (a sub-group of the pool, or the inner groups of a grid with
    DDP across the outer ones); returns (our losses, reference losses, largest relative
    parameter difference of this rank's slices)."""
    import torch

    from pycollect.ddp import DistributedDataParallel
    from pycollect.demo.gpt import GPT
    from pycollect.demo.tp_gpt import tensor_parallel_gpt
    import pycollect as pc

    cfg = _cfg(tied)
    if dp:
        tp_group, dp_group = _grid(tp_inner)
        replicas, replica = pc.get_world_size(dp_group), pc.get_rank(dp_group)
    else:
        pair = paired_groups(tp_inner)
        if pair is None:
            return None
        tp_group, dp_group, replicas, replica = pair[0], None, 1, 0
    torch.manual_seed(0)
    model = tensor_parallel_gpt(GPT(cfg), tp_group)
    wrap = (lambda m: DistributedDataParallel(m, process_group=dp_group)) if dp else (lambda m: m)
    ours = _train(model, cfg, replicas, replica, wrap)
    ref_model, ref_losses = _reference(cfg, replicas)
    expected = tensor_parallel_gpt(ref_model, tp_group).state_dict()
    # the loss each replica saw is the mean over its rows; the reference's is over all rows
    mean = torch.tensor(ours, dtype=torch.float64)
    if dp:
        pc.all_reduce(mean, op=pc.ReduceOp.AVG, group=dp_group)
    return mean.tolist(), ref_losses, _max_rel(model.state_dict(), expected)


@pytest.mark.parametrize("tied", [True, False])
def test_tensor_parallel_matches_one_process(pool3, tied):
    results = [r for r in pool3.run(case_tensor_parallel, tied, 2, False) if r is not None]
    assert len(results) == 2
    for ours, ref, diff in results:
        assert ours == pytest.approx(ref, rel=1e-5)
        assert diff < 1e-5, diff


def test_tensor_times_data_parallel_matches_one_process(pool4):
    for ours, ref, diff in pool4.run(case_tensor_parallel, False, 2, True):
        assert ours == pytest.approx(ref, rel=1e-5)
        assert diff < 1e-5, diff


def case_hybrid_sharding():
    import torch

    import pycollect as pc
    from pycollect.demo.gpt import GPT, Block
    from pycollect.fsdp import ModuleWrapPolicy, full_state_dict, fully_shard, get_state

    cfg = _cfg(True)
    shard, replicate = _grid(2)
    torch.manual_seed(0)
    model = fully_shard(GPT(cfg), group=shard, replicate_group=replicate, policy=ModuleWrapPolicy({Block}))
    ours = _train(model, cfg, pc.get_world_size(), pc.get_rank())
    mean = torch.tensor(ours, dtype=torch.float64)
    pc.all_reduce(mean, op=pc.ReduceOp.AVG)
    ref_model, ref_losses = _reference(cfg, pc.get_world_size())
    shard_numel = sum(u.shard.numel() for u in get_state(model).units)
    full = {k: v for k, v in full_state_dict(model, rank0_only=False).items()}
    ref = {k: v for k, v in ref_model.state_dict().items() if k in full}
    return mean.tolist(), ref_losses, _max_rel(full, ref), shard_numel, sum(p.numel() for p in ref_model.parameters())


def test_hybrid_sharding_2x2_matches_one_process(pool4):
    for ours, ref, diff, shard_numel, total in pool4.run(case_hybrid_sharding):
        assert ours == pytest.approx(ref, rel=1e-5)
        assert diff < 1e-5, diff
        assert shard_numel <= total // 2 + 64  # sharded over 2, not 4, and not replicated


def case_misuse():
    import torch.nn as nn

    import pycollect as pc
    from pycollect.demo.gpt import GPT, GPTConfig
    from pycollect.demo.tp_gpt import tensor_parallel_gpt
    from pycollect.mesh import grid_groups
    from pycollect.tp import ColumnParallelLinear, RowParallelLinear

    tp_group = _grid(2)[0]
    errors = {}
    for name, call in [
        ("columns", lambda: ColumnParallelLinear(8, 15, group=tp_group)),
        ("rows", lambda: RowParallelLinear.from_full(nn.Linear(9, 4), tp_group)),
        ("heads", lambda: tensor_parallel_gpt(GPT(GPTConfig(vocab=32, seq=8, dim=18, layers=1, heads=3)), tp_group)),
        ("grid_size", lambda: grid_groups(3)),
        ("grid_disagree", lambda: grid_groups(2 if pc.get_rank() else 4)),
    ]:
        try:
            call()
            errors[name] = "no error"
        except ValueError as e:
            errors[name] = str(e)
    return errors


def test_misuse_raises_on_every_rank(pool4):
    for errors in pool4.run(case_misuse):
        assert "out_features=15 is not divisible by the tensor-parallel degree 2" in errors["columns"]
        assert "in_features=9" in errors["rows"]
        assert "heads=3" in errors["heads"]
        assert "positive divisor of the world size 4" in errors["grid_size"]
        assert "disagree on the layout" in errors["grid_disagree"]
