"""Rank-side bodies of the real-client tests in tests/test_torch_backend.py (module-level so
the session's RankPool can pickle them by reference).

Each case runs one torch client, unchanged, twice in the same rank processes: on the
"pycollect" torch group and on the Gloo group over the same ranks (test_torch_backend's
_pair: groups made once per worker, in the same order everywhere), from the same seeds
and inputs. It returns what the test compares ({"pycollect": ..., "gloo": ...}: bit for bit
on the 2-rank group, within float32 rounding on 3 ranks, where the engine adds a+b+c in
another order than Gloo) and the calls per kind that ran on the engine behind the
pycollect group meanwhile. Every case takes the group size (2 or 3; pipelining: 2) and
returns None on a rank outside the group.

Clients: DTensor tensor parallelism (parallelize_module), FSDP2 with a distributed
checkpoint (torch.distributed.checkpoint save/load), pipelining (Schedule1F1B), DDP with
comm hooks (PowerSGD, allreduce), ZeroRedundancyOptimizer under DDP, and Join with
uneven inputs. Models are tiny and runs are 2-4 steps.

A watchdog (faulthandler) dumps every thread's stack to the rank's stderr if a case runs
far longer than it should (WATCHDOG_S; REAL_CLIENT_WATCHDOG_S in the environment of pytest
sets it), so that a hang on the engine names the call and thread that wait.
"""
from __future__ import annotations

import faulthandler
import functools
import os
import shutil
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

# test_torch_backend imports this module at its end, after these names are defined
from test_torch_backend import _Net, _batch, _calls, _pair

BACKENDS = ("pycollect", "gloo")
WATCHDOG_S = float(os.environ.get("REAL_CLIENT_WATCHDOG_S", "60"))


def _watched(fn):
    """Dump all threads' stacks (stderr) if `fn` is still running after WATCHDOG_S."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        faulthandler.dump_traceback_later(WATCHDOG_S, exit=False, file=sys.stderr)
        try:
            return fn(*args, **kwargs)
        finally:
            faulthandler.cancel_dump_traceback_later()

    return run


def _pairs(size):
    """((backend, torch group) for pycollect then Gloo, the pycollect group), or None outside."""
    pair = _pair(size)
    if pair is None:
        return None
    return list(zip(BACKENDS, pair)), pair[0]


def _on_both(size, one):
    """one(group) on the pycollect group, then on the Gloo group over the same ranks:
    ({backend: its result}, the engine's calls made meanwhile), or None on a rank outside."""
    got = _pairs(size)
    if got is None:
        return None
    groups, pg = got
    before = _calls(pg)
    out = {name: one(group) for name, group in groups}
    return out, dict(_calls(pg) - before)


def _clone(tensors):
    return [t.detach().clone() for t in tensors]


def _full(t):
    """A DTensor's full value (a collective on its mesh), or the tensor itself."""
    t = t.detach()
    return t.full_tensor() if hasattr(t, "full_tensor") else t.clone()


# -- 1. DTensor tensor parallelism ------------------------------------------------------


class _MLP(nn.Module):
    def __init__(self, dim=8, hidden=12):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


@_watched
def case_tensor_parallel(size=2, steps=2):
    """parallelize_module(fc1: ColwiseParallel, fc2: RowwiseParallel) over
    DeviceMesh.from_group(group); forward + backward on a replicated input each step
    (no optimizer: the gradients accumulate). Returns per backend the outputs, the input's
    gradient and the full parameter gradients and parameters."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    def one(group):
        mesh = DeviceMesh.from_group(group, "cpu")
        torch.manual_seed(0)
        model = parallelize_module(_MLP(), mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
        outputs, input_grads = [], []
        for step in range(steps):
            gen = torch.Generator().manual_seed(step)  # the same input on every rank (replicated)
            x = torch.randn(5, 8, generator=gen).requires_grad_()
            y = model(x)
            (y.square().sum() * (step + 1)).backward()
            outputs.append(y.detach().clone())
            input_grads.append(x.grad.clone())
        return dict(outputs=outputs, input_grads=input_grads,
                    grads={k: _full(p.grad) for k, p in model.named_parameters()},
                    params={k: _full(p) for k, p in model.named_parameters()},
                    placements={k: str(p.placements) for k, p in model.named_parameters()})

    return _on_both(size, one)


# -- 2. FSDP2 with a distributed checkpoint ------------------------------------------------


def _sharded_net(mesh, seed):
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(seed)
    model = _Net()
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def _checkpoint_dir(backend: str, gloo) -> str:
    """A directory the group's ranks share: a fixed name under the temp directory, the
    backend, and a token the group's rank 0 draws per call (so that concurrent test sessions
    on one machine do not meet), handed to the others over the Gloo group `gloo`."""
    token = [os.urandom(6).hex() if gloo.rank() == 0 else None]
    dist.broadcast_object_list(token, group=gloo, group_src=0)
    return os.path.join(tempfile.gettempdir(), f"pycollect-real-client-dcp-{backend}-{token[0]}")


@_watched
def case_fsdp2_checkpoint(size=2):
    """fully_shard (per block + root) on DeviceMesh.from_group(group), one Adam step,
    dcp.save(process_group=group) of model and optimizer state, then a fresh sharded model
    (other seed) and optimizer loaded with dcp.load(process_group=group). Returns per
    backend the full parameters after the step, as loaded, the fresh model's before the
    load, the loss, and the optimizer state as saved and as loaded."""
    from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                         set_model_state_dict, set_optimizer_state_dict)
    from torch.distributed.device_mesh import DeviceMesh
    import torch.distributed.checkpoint as dcp

    got = _pairs(size)
    if got is None:
        return None
    groups, pg = got
    before, engine_dcp = _calls(pg), {}
    out = {}
    gloo = groups[1][1]
    for name, group in groups:
        path = _checkpoint_dir(name, gloo)
        mesh = DeviceMesh.from_group(group, "cpu")
        try:
            model = _sharded_net(mesh, seed=0)
            opt = torch.optim.Adam(model.parameters(), lr=1e-2)
            x, y = _batch(0, group.rank())
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            saved = {k: _full(v) for k, v in get_model_state_dict(model).items()}
            saved_opt = _full_optim(get_optimizer_state_dict(model, opt))
            mark = _calls(pg)
            dcp.save({"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)},
                     checkpoint_id=path, process_group=group)
            engine_save = _calls(pg) - mark
            fresh = _sharded_net(mesh, seed=1)
            fresh_opt = torch.optim.Adam(fresh.parameters(), lr=1e-2)
            fresh_opt.zero_grad()
            F.mse_loss(fresh(x), y).backward()  # optimizer state to load into
            fresh_opt.step()
            fresh_opt.zero_grad()
            differs = {k: _full(v) for k, v in get_model_state_dict(fresh).items()}
            state = {"model": get_model_state_dict(fresh), "optim": get_optimizer_state_dict(fresh, fresh_opt)}
            mark = _calls(pg)
            dcp.load(state, checkpoint_id=path, process_group=group)
            if name == "pycollect":
                engine_dcp = {"save": dict(engine_save), "load": dict(_calls(pg) - mark)}
            set_model_state_dict(fresh, state["model"])
            set_optimizer_state_dict(fresh, fresh_opt, state["optim"])
            loaded = {k: _full(v) for k, v in get_model_state_dict(fresh).items()}
            loaded_opt = _full_optim(get_optimizer_state_dict(fresh, fresh_opt))
            files = sorted(os.listdir(path))
            out[name] = dict(loss=loss.detach().clone(), saved=saved, loaded=loaded, differs=differs,
                             saved_opt=saved_opt, loaded_opt=loaded_opt, files=files)
        finally:
            dist.barrier(group=gloo)  # every rank is done with the directory
            if gloo.rank() == 0:
                shutil.rmtree(path, ignore_errors=True)
    return out, dict(_calls(pg) - before), engine_dcp


def _full_optim(state_dict):
    return {f"{param}.{k}": _full(v) for param, entry in state_dict["state"].items()
            for k, v in entry.items() if torch.is_tensor(v)}


# -- 3. pipelining ---------------------------------------------------------------------------


@_watched
def case_pipeline_1f1b(microbatches=4, steps=2):
    """Two stages on the 2-rank pair group (stage i on rank i), Schedule1F1B with
    `microbatches` micro-batches and an SGD step per schedule step. Returns per backend the
    losses (last stage), each step's gradients and the final parameters of this rank's
    stage; rank 2 returns None."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    def one(group):
        me = group.rank()
        torch.manual_seed(0)
        full = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))
        stage_mod = full[:2] if me == 0 else full[2:]
        stage = PipelineStage(stage_mod, me, 2, torch.device("cpu"), group=group)
        schedule = Schedule1F1B(stage, microbatches, loss_fn=F.mse_loss)
        opt = torch.optim.SGD(stage_mod.parameters(), lr=0.1)
        losses, grads = [], []
        for step in range(steps):
            gen = torch.Generator().manual_seed(10 + step)
            x, y = torch.randn(8, 8, generator=gen), torch.randn(8, 4, generator=gen)
            opt.zero_grad()
            if me == 0:
                schedule.step(x)
            else:
                step_losses = []
                schedule.step(target=y, losses=step_losses)
                losses.append([t.detach().clone() for t in step_losses])
            grads.append([p.grad.clone() for p in stage_mod.parameters()])
            opt.step()
        return dict(losses=losses, grads=grads, params=_clone(stage_mod.parameters()))

    return _on_both(2, one)


# -- 4. DDP comm hooks -----------------------------------------------------------------------


def _train_ddp(group, steps, hook=None, optimizer=None, batches=None, join=False, bucket_cap_mb=0.002):
    """DDP over `group` on _Net (by default in small buckets: several), SGD unless
    `optimizer` (a function of the parameters) is given; `hook(model)` registers a comm hook.
    Returns the model, the optimizer and each step's loss."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(_Net(), process_group=group, bucket_cap_mb=bucket_cap_mb)
    if hook is not None:
        hook(model)
    opt = optimizer(model.parameters()) if optimizer else torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    n = steps if batches is None else batches

    def loop():
        for step in range(n):
            x, y = _batch(step, group.rank())
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.detach().clone())

    if join:
        from torch.distributed.algorithms.join import Join

        with Join([model]):
            loop()
    else:
        loop()
    return model, opt, losses


@_watched
def case_ddp_comm_hooks(size=2, steps=4):
    """DDP with torch's PowerSGD hook (matrix approximation rank 1, compression from
    iteration 2, error feedback and warm start: its P and Q all-reduces are issued and
    waited on inside Future callbacks, the first in the callback of the all-reduce of the
    uncompressed tensors) and with the default allreduce hook. Returns per backend and hook the final parameters and
    losses and PowerSGD's state after training, and the engine calls per hook.

    PowerSGD runs on one DDP bucket (bucket_cap_mb=25 on this tiny model). With several,
    the hook itself races on a CPU backend: bucket k's callback issues its P all-reduce on
    whichever thread completed bucket k's first all-reduce, while the autograd thread
    issues bucket k+1's, so the ranks may issue them in different orders. Gloo then aborts
    the process ("Received data size doesn't match expected size. Is there a distributed
    collective mismatch"); pycollect raises "mismatched collectives" naming both calls."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD

    got = _pairs(size)
    if got is None:
        return None
    groups, pg = got
    out, engine = {name: {} for name, _ in groups}, {}
    for hook_name in ("powerSGD", "allreduce"):
        mark = _calls(pg)
        for name, group in groups:
            if hook_name == "powerSGD":
                state = powerSGD.PowerSGDState(process_group=group, matrix_approximation_rank=1,
                                               start_powerSGD_iter=2, min_compression_rate=1.5, random_seed=0)
                model, _, losses = _train_ddp(group, steps, bucket_cap_mb=25,
                                              hook=lambda m: m.register_comm_hook(state, powerSGD.powerSGD_hook))
                res = dict(iter=state.iter,
                           p=[state.p_memory_dict[k].clone() for k in sorted(state.p_memory_dict)],
                           q=[state.q_memory_dict[k].clone() for k in sorted(state.q_memory_dict)],
                           errors=[state.error_dict[k].clone() for k in sorted(state.error_dict)])
            else:
                model, _, losses = _train_ddp(
                    group, steps, hook=lambda m: m.register_comm_hook(group, default_hooks.allreduce_hook))
                res = {}
            out[name][hook_name] = dict(res, params=_clone(model.parameters()), losses=losses)
        engine[hook_name] = dict(_calls(pg) - mark)
    return out, engine


# -- 5. ZeroRedundancyOptimizer ------------------------------------------------------------


@_watched
def case_zero_redundancy(size=2, steps=3):
    """DDP + ZeroRedundancyOptimizer(Adam, process_group=group): each rank steps its shard
    and broadcasts it. Returns per backend the final parameters, losses, how many
    parameters each rank owns, and the optimizer state consolidated on rank 0."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    def one(group):
        def zero(params, group=group):
            return ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.Adam, process_group=group, lr=1e-2)

        model, opt, losses = _train_ddp(group, steps, optimizer=zero)
        opt.consolidate_state_dict(to=0)
        consolidated = None
        if group.rank() == 0:
            consolidated = {f"{i}.{k}": v.clone() for i, s in opt.state_dict()["state"].items()
                            for k, v in s.items() if torch.is_tensor(v)}
        owned = [sum(len(g["params"]) for g in groups_of_rank) for groups_of_rank in opt._partition_parameters()]
        return dict(params=_clone(model.parameters()), losses=losses, owned=owned, consolidated=consolidated)

    return _on_both(size, one)


# -- 6. Join ----------------------------------------------------------------------------------


@_watched
def case_join_uneven(size=2):
    """DDP inside `with Join([model])`, rank r training on r + 2 batches: ranks that run out
    shadow the others' all-reduces until all have joined. Returns per backend the final
    parameters and this rank's losses."""
    def one(group):
        model, _, losses = _train_ddp(group, None, batches=group.rank() + 2, join=True)
        return dict(params=_clone(model.parameters()), losses=losses)

    return _on_both(size, one)


