"""Rank-side bodies of tests/test_fsdp.py (module-level so RankPool can pickle them).

Every function runs on each of the pool's 3 ranks. `world` = 2 runs on ranks 0 and 1
through a sub-group made once per pool (rank 2 still takes part in new_group and then
returns None). Models are tiny: the GPT has ~10k parameters, the MLP ~1.5k.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import pycollect as pc
from rank_pool import paired_groups
from pycollect.fsdp import (MixedPrecision, ModuleWrapPolicy, full_state_dict, fully_shard, get_state,
                            load_full_state_dict, load_sharded_state_dict, memory_stats, no_sync,
                            sharded_state_dict)
from pycollect.fsdp import collectives as C
from pycollect.demo.gpt import GPT, Block, GPTConfig, gpt_batch, lm_loss, mlp

STEPS = 4
LR = 1e-3
PER_RANK = 2
def groups(world):
    """(pycollect group, Gloo group, is this rank a member) for ranks [0, world); outside them,
    the pycollect group is NON_GROUP_MEMBER, as new_group returned it."""
    pair = paired_groups(world)
    return (pc.NON_GROUP_MEMBER, None, False) if pair is None else (*pair, True)


def cfg(kind):
    return GPTConfig(vocab=32, seq=8, dim=16, layers=3, heads=2, tied=(kind == "gpt_tied"))


def build(kind, seed=0):
    torch.manual_seed(seed)
    return mlp((7, 32, 16, 5)) if kind == "mlp" else GPT(cfg(kind))


def policy(kind):
    return ModuleWrapPolicy({nn.Linear} if kind == "mlp" else {Block})


def batch(kind, step, rows):
    """The global batch of `step` (rows = every rank's rows together)."""
    if kind == "mlp":
        g = torch.Generator().manual_seed(100 + step)
        return torch.randn(rows, 7, generator=g), torch.randn(rows, 5, generator=g)
    return gpt_batch(cfg(kind), rows, 100 + step)


def loss_of(kind, model, data):
    x, y = data
    return F.mse_loss(model(x), y) if kind == "mlp" else lm_loss(model(x), y)


def local(data, rank):
    return tuple(t[rank * PER_RANK:(rank + 1) * PER_RANK] for t in data)


def global_mean(loss, pg, world):
    t = loss.detach().float().reshape(1).clone()
    pc.all_reduce(t, group=pg)
    return t.item() / world


def train_reference(kind, world, steps=STEPS, start=0):
    model = build(kind)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    losses = []
    for s in range(start, start + steps):
        loss = loss_of(kind, model, batch(kind, s, world * PER_RANK))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def train(kind, model, opt, pg, world, steps=STEPS, start=0):
    rank, losses = pc.get_rank(pg), []
    for s in range(start, start + steps):
        loss = loss_of(kind, model, local(batch(kind, s, world * PER_RANK), rank))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(global_mean(loss, pg, world))
    return losses


def sharded(kind, pg, seed=0, **kwargs):
    model = fully_shard(build(kind, seed), group=pg, policy=policy(kind), **kwargs)
    return model, torch.optim.Adam(model.parameters(), lr=LR)


def max_diff(a: dict, b: dict) -> float:
    assert set(a) == set(b), (sorted(a), sorted(b))
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


# -- equivalence ---------------------------------------------------------------------------

def _train_ours(kind, world):
    """(model, its losses, the Gloo group) after FSDP training on ranks [0, world); None outside them."""
    pg, dg, member = groups(world)
    if not member:
        return None
    model, opt = sharded(kind, pg)
    return model, train(kind, model, opt, pg, world), dg


def case_train_vs_reference(kind, world):
    trained = _train_ours(kind, world)
    if trained is None:
        return None
    model, losses, _ = trained
    ref_losses, ref = train_reference(kind, world)
    padding = sum(u.layout.padding for u in get_state(model).units)
    return losses, ref_losses, max_diff(full_state_dict(model, rank0_only=False), ref.state_dict()), padding


def torch_fsdp2(kind, dg, mp_policy=None):
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from torch.distributed.fsdp import fully_shard as torch_fully_shard

    mesh = DeviceMesh.from_group(dg if dg is not None else dist.group.WORLD, "cpu")
    model = build(kind)
    kwargs = {"mesh": mesh, "mp_policy": mp_policy or MixedPrecisionPolicy()}
    for m in model.modules():
        if isinstance(m, nn.Linear if kind == "mlp" else Block):
            torch_fully_shard(m, **kwargs)
    torch_fully_shard(model, **kwargs)
    return model


def train_fsdp2(kind, model, dg, world):
    rank, losses = dist.get_rank(dg), []
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    for s in range(STEPS):
        loss = loss_of(kind, model, local(batch(kind, s, world * PER_RANK), rank))
        opt.zero_grad()
        loss.backward()
        opt.step()
        t = loss.detach().float().reshape(1).clone()
        dist.all_reduce(t, group=dg)
        losses.append(t.item() / world)
    params = {name: p.full_tensor().detach() for name, p in model.named_parameters()}  # collective
    return losses, params


def case_ours_vs_fsdp2(kind, world):
    trained = _train_ours(kind, world)
    if trained is None:
        return None
    model, ours, dg = trained
    theirs, their_params = train_fsdp2(kind, torch_fsdp2(kind, dg), dg, world)
    our_params = full_state_dict(model, rank0_only=False)
    common = sorted(set(our_params) & set(their_params))  # FSDP2 names a tied weight once
    diff = max((our_params[k] - their_params[k]).abs().max().item() for k in common)
    return ours, theirs, diff, len(common) >= len(their_params)


def _gathers(pg):
    return pc.get_counters(pg).get("all_gather", 0)


def case_reshard_modes():
    out = []
    for raf in (True, False):
        model, opt = sharded("gpt_untied", None, reshard_after_forward=raf)
        losses = train("gpt_untied", model, opt, None, 3, steps=2)
        get_state(model).tracker.reset_peaks()
        before = _gathers(None)
        losses += train("gpt_untied", model, opt, None, 3, steps=1, start=2)
        gathers = _gathers(None) - before
        out.append((losses, gathers, get_state(model).tracker.peak["forward"]))
    return out[0], out[1], len(get_state(model).units)


def case_mixed_precision(world):
    from torch.distributed.fsdp import MixedPrecisionPolicy

    pg, dg, member = groups(world)
    if not member:
        return None
    mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model, opt = sharded("gpt_untied", pg, mixed_precision=mp)
    ours = train("gpt_untied", model, opt, pg, world)
    fsdp2 = torch_fsdp2("gpt_untied", dg, MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                               reduce_dtype=torch.float32))
    stats = memory_stats(model, opt)
    return {
        "ours": ours,
        "fsdp2": train_fsdp2("gpt_untied", fsdp2, dg, world)[0],
        "fp32": train_reference("gpt_untied", world)[0],
        "shard_dtypes": {str(p.dtype) for p in model.parameters()},
        "grad_dtypes": {str(p.grad.dtype) for p in model.parameters()},
        "unsharded_bytes": sum(u["unsharded_bytes"] for u in stats["units"].values()),
        "padded_numel": sum(u.layout.padded_numel for u in get_state(model).units),
    }


def _reduce_scatters():
    return pc.get_counters().get("reduce_scatter", 0)


def case_no_sync():
    kind, world, rank = "gpt_untied", 3, pc.get_rank()
    model, _ = sharded(kind, None)
    micro = [batch(kind, s, world * PER_RANK) for s in (0, 1)]
    before = _reduce_scatters()
    with no_sync(model):
        loss_of(kind, model, local(micro[0], rank)).backward()
    inside = _reduce_scatters() - before
    loss_of(kind, model, local(micro[1], rank)).backward()
    after = _reduce_scatters() - before - inside
    ref = build(kind)
    (loss_of(kind, ref, micro[0]) + loss_of(kind, ref, micro[1])).backward()
    diff = 0.0
    for u in get_state(model).units:
        expect = C.shard_from_params([ref.get_parameter(f).grad for f in u.fqns], u.layout, rank)
        diff = max(diff, (u.shard.grad - expect).abs().max().item())
    return {"reduce_scatters_inside_no_sync": inside, "reduce_scatters_after": after,
            "units": len(get_state(model).units), "max_grad_diff": diff}


# -- state dicts -------------------------------------------------------------------------

def case_full_state_dict():
    kind, world, rank = "gpt_tied", 3, pc.get_rank()
    model, opt = sharded(kind, None)
    train(kind, model, opt, None, world, steps=2)
    _, ref = train_reference(kind, world, steps=2)
    sd = full_state_dict(model)
    out = {"empty_elsewhere": rank != 0 and sd == {}}
    if rank == 0:
        plain = build(kind, seed=5)
        plain.load_state_dict(sd, strict=True)
        out["keys_match"] = list(sd) == list(ref.state_dict())
        out["max_diff"] = max_diff(plain.state_dict(), ref.state_dict())
        out["tied_shared_after_load"] = torch.equal(sd["head.weight"], sd["wte.weight"])
    everywhere = full_state_dict(model, rank0_only=False)
    again, _ = sharded(kind, None, seed=7)
    load_full_state_dict(again, everywhere)
    out["reload_every_rank"] = max_diff(full_state_dict(again, rank0_only=False), everywhere)
    third, _ = sharded(kind, None, seed=8)
    load_full_state_dict(third, sd if rank == 0 else None, broadcast_from_rank0=True)
    out["reload_from_rank0"] = max_diff(full_state_dict(third, rank0_only=False), everywhere)
    return out


def case_sharded_round_trip(directory):
    kind, world, rank = "gpt_tied", 3, pc.get_rank()
    model, opt = sharded(kind, None)
    train(kind, model, opt, None, world, steps=2)
    path = os.path.join(directory, f"rank{rank}.pt")
    torch.save({"model": sharded_state_dict(model), "optim": opt.state_dict()}, path)
    continued = train(kind, model, opt, None, world, steps=3, start=2)
    fresh, fresh_opt = sharded(kind, None, seed=9)
    saved = torch.load(path)
    load_sharded_state_dict(fresh, saved["model"])
    fresh_opt.load_state_dict(saved["optim"])
    resumed = train(kind, fresh, fresh_opt, None, world, steps=3, start=2)
    return continued, resumed


# -- memory and order --------------------------------------------------------------------

def case_memory(world):
    pg, _, member = groups(world)
    if not member:
        return None
    kind = "gpt_untied"
    model, opt = sharded(kind, pg)
    train(kind, model, opt, pg, world, steps=1)
    state = get_state(model)
    state.tracker.reset_peaks()
    train(kind, model, opt, pg, world, steps=1, start=1)
    stats = memory_stats(model, opt)
    full_model = build(kind)
    n = sum(p.numel() for p in full_model.parameters())
    units = stats["units"]
    return {
        "full": {"params": 4 * n, "grads": 4 * n, "optim_tensors": 8 * n},
        "sharded": {k: stats[k] for k in ("params", "grads", "optim", "total")},
        "step_counter_bytes": sum(s["step"].numel() * s["step"].element_size() for s in opt.state.values()),
        "padding_bytes": 4 * sum(u["padding"] for u in units.values()),
        "peaks": stats["peak_unsharded_bytes"],
        "peak_units": stats["peak_units"],
        "root_bytes": units["<root>"]["unsharded_bytes"],
        "unit_bytes": {k: v["unsharded_bytes"] for k, v in units.items() if k != "<root>"},
        "unsharded_after_step": stats["unsharded_bytes_now"],
    }


def case_trace():
    kind, world = "gpt_untied", 3
    model, opt = sharded(kind, None)
    train(kind, model, opt, None, world, steps=1)
    trace = get_state(model).trace
    trace.clear()
    train(kind, model, opt, None, world, steps=1, start=1)

    def at(event, unit, nth=1):
        hits = [i for i, e in enumerate(trace) if e == (event, unit)]
        return hits[nth - 1] if len(hits) >= nth else 10 ** 9

    b = [f"blocks.{i}" for i in range(3)]
    return {
        "forward_prefetch": all(at("all_gather", b[i + 1]) < at("free", b[i]) for i in range(2)),
        "backward_prefetch": all(at("all_gather", b[i - 1], 2) < at("reduce_scatter", b[i]) for i in (2, 1)),
        "reduce_overlaps_next_backward": all(at("reduced", b[i]) > at("reduce_scatter", b[i - 1]) for i in (2, 1)),
        "trace": trace[:],
    }


# -- misuse ------------------------------------------------------------------------------

def _error(fn):
    try:
        fn()
    except (ValueError, TypeError, KeyError) as e:
        return str(e)
    return "no error"


def case_errors():
    rank = pc.get_rank()
    out = {}

    def shared():
        m = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
        m[1].weight = m[0].weight
        fully_shard(m, policy=ModuleWrapPolicy({nn.Linear}))
    out["shared"] = _error(shared)
    out["structure"] = _error(lambda: fully_shard(mlp((8, 12 if rank == 1 else 16, 4))))

    def differing():
        torch.manual_seed(rank)
        fully_shard(mlp((8, 16, 4)))
    out["values"] = _error(differing)
    torch.manual_seed(rank)
    synced = fully_shard(mlp((8, 16, 4)), sync_module_states=True)
    torch.manual_seed(0)
    out["synced_equal"] = max_diff(full_state_dict(synced, rank0_only=False), mlp((8, 16, 4)).state_dict()) == 0

    pg2, _, member = groups(2)
    three = fully_shard(build("mlp"), policy=policy("mlp"))
    saved = sharded_state_dict(three)
    out["world_mismatch"] = None
    if member:
        two = fully_shard(build("mlp"), group=pg2, policy=policy("mlp"))
        if rank == 0:
            out["world_mismatch"] = _error(lambda: load_sharded_state_dict(two, saved))
    else:
        out["non_member"] = _error(lambda: fully_shard(build("mlp"), group=pg2))

    def frozen():
        m = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
        m[0].weight.requires_grad_(False)
        fully_shard(m)
    out["frozen"] = _error(frozen)

    def int_param():
        m = nn.Linear(2, 2)
        m.register_parameter("count", nn.Parameter(torch.ones(3, dtype=torch.long), requires_grad=False))
        fully_shard(m)
    out["int_param"] = _error(int_param)
    return out
