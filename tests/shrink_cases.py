"""Worker side of the shrink and split tests (tests/test_faults.py, tests/test_api.py,
tests/test_torch_backend.py): a group that lost a rank shrinks to its survivors, through
torch (dist.shrink_group on a "pycollect" group) and through pycollect's own API
(pc.shrink_group), and the survivors go on computing; a group splits into children
(ProcessGroup.split_group) and a DeviceMesh's dimensions run on "pycollect", beside Gloo.

    case_torch_group()                  # every rank: a "pycollect" torch group over all ranks
    case_torch_all_reduce_until_lost()  # all-reduces on it until a rank is lost
    case_shrink_and_go_on(lost)         # the survivors: shrink both groups, check what follows
    case_split_and_mesh()               # 4 ranks: split 2 x 2 and a (2, 2) mesh, both backends
"""
from __future__ import annotations

import datetime
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import SHRINK_ABORT

import pycollect as pc

_GROUP: dict = {}


def case_torch_group() -> int:
    """A "pycollect" torch group over every rank (short timeout: nothing waits long)."""
    import pycollect.torch_backend as tb

    tb.register()
    _GROUP["pg"] = dist.new_group(backend="pycollect", timeout=datetime.timedelta(seconds=20))
    t = torch.ones(4)
    dist.all_reduce(t, group=_GROUP["pg"])
    return int(t[0])


def case_torch_all_reduce_until_lost(count: int = 1 << 20):
    """All-reduces on the torch group until one fails: (error class, message, wall time)."""
    t = torch.ones(count)
    while True:
        try:
            dist.all_reduce(t, group=_GROUP["pg"])
        except Exception as e:  # noqa: BLE001 - torch's DistBackendError, whatever it wraps
            return type(e).__name__, str(e), time.time()


def _values(rank: int, n: int, salt: int) -> np.ndarray:
    return np.random.default_rng(1000 * salt + rank).standard_normal(n).astype(np.float32)


def _tiny_model():
    """Two linear layers with weights in quarters: with the inputs below every gradient is an
    exact multiple of 3 in float32, so DDP's division by 3 ranks and the sum over them are
    exact whatever order a backend adds in, and "the same to the bit" is a fair test."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 2))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randint(-4, 5, p.shape, generator=gen).float() / 4)
    return model


def _ddp_step(group, rank: int) -> list:
    """One DDP step of the same model on this rank's data (a batch of 3 rows, integers times 3),
    over `group`: the parameters after it."""
    model = torch.nn.parallel.DistributedDataParallel(_tiny_model(), process_group=group)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    x = 3 * torch.randint(-3, 4, (3, 8), generator=torch.Generator().manual_seed(rank)).float()
    model(x).sum().backward()
    opt.step()
    return [p.detach().clone() for p in model.parameters()]


def case_shrink_and_go_on(lost: int):
    """A survivor after rank `lost` died: shrinks the torch group (SHRINK_ABORT) and the engine's
    default group, then checks on each an all-reduce, an all-gather and a reduce-scatter
    against numpy, and a DDP step on the torch one against a fresh Gloo group of the
    survivors. Returns what it found and how long each shrink took."""
    out = {}
    t0 = time.perf_counter()
    pg = dist.shrink_group([lost], group=_GROUP["pg"], shrink_flags=SHRINK_ABORT)
    out["torch_shrink_s"] = time.perf_counter() - t0
    rank, n = dist.get_rank(pg), dist.get_world_size(pg)
    out["torch_rank_size"] = (rank, n)
    survivors = [r for r in range(n + 1) if r != lost]
    gloo = dist.new_group(survivors, backend="gloo", use_local_synchronization=True)
    count = 1000 + 7
    mine = _values(rank, count, 1)
    everyone = [_values(r, count, 1) for r in range(n)]
    t = torch.from_numpy(mine.copy())
    dist.all_reduce(t, group=pg)
    out["all_reduce"] = bool(np.allclose(t.numpy(), np.sum(everyone, axis=0), rtol=1e-5, atol=1e-5))
    gathered = torch.empty(n * count)
    dist.all_gather_into_tensor(gathered, torch.from_numpy(mine.copy()), group=pg)
    out["all_gather"] = bool(np.array_equal(gathered.numpy(), np.concatenate(everyone)))
    shard = torch.empty(count)
    full = [_values(r, n * count, 2) for r in range(n)]
    dist.reduce_scatter_tensor(shard, torch.from_numpy(full[rank].copy()), group=pg)
    want = np.sum(full, axis=0)[rank * count:(rank + 1) * count]
    out["reduce_scatter"] = bool(np.allclose(shard.numpy(), want, rtol=1e-5, atol=1e-5))
    ours, theirs = _ddp_step(pg, rank), _ddp_step(gloo, rank)
    out["ddp_bitwise"] = all(torch.equal(a, b) for a, b in zip(ours, theirs))
    out["ddp_moved"] = not all(torch.equal(a, b) for a, b in zip(ours, _tiny_model().parameters()))
    dist.destroy_process_group(gloo)
    # pycollect's own API: the default group, which lost the same rank.
    t0 = time.perf_counter()
    g = pc.shrink_group([lost])
    out["api_shrink_s"] = time.perf_counter() - t0
    out["api_rank_size"] = (pc.get_rank(), pc.get_world_size())
    x = np.full(5, float(pc.get_rank() + 1), dtype=np.float64)
    pc.all_reduce(x, group=g)
    out["api_all_reduce"] = x.tolist()
    return out


def case_shrink_disagreement(kind: str):
    """A fresh group over the pool's 4 ranks (2 s timeout), which rank 3 leaves. "disagree":
    ranks 0 and 1 exclude [3], rank 2 excludes [1, 3]; "missing": ranks 0 and 1 exclude [3],
    rank 2 never shrinks. Returns, on a rank that shrinks, (error class, message, seconds)."""
    g = pc.new_group(list(range(4)), timeout=2)
    excluded = {0: [3], 1: [3], 2: [1, 3] if kind == "disagree" else None}.get(pc.get_rank())
    try:
        if excluded is None:
            return None
        t0 = time.perf_counter()
        try:
            pc.shrink_group(excluded, group=g)
            return "shrunk", "", time.perf_counter() - t0
        except pc.PyCollectError as e:
            return type(e).__name__, str(e), time.perf_counter() - t0
    finally:
        pc.destroy_process_group(g)


def case_split_and_mesh():
    """On 4 ranks, for "gloo" and "pycollect" alike: the group of all ranks split into {0, 1}
    and {2, 3} (ProcessGroup.split_group: dist.split_group refuses a process without an
    accelerator for every backend), and a (2, 2) DeviceMesh whose dimensions' groups run on the
    backend; an all-reduce on each, and a DTensor sum over the mesh. Returns, per backend,
    what this rank got."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    import pycollect.torch_backend as tb

    tb.register()
    r = dist.get_rank()
    # Gloo's side is a group on the CPU only: splitting the default group (Gloo for "cpu" and
    # "cuda" alike) makes torch split the one Gloo backend twice over the same store keys, and
    # the second mesh then connects to the first's stale addresses and often hangs (torch 2.13; pycollect caches the
    # child per store and name, so its default-style group splits cleanly).
    whole = {"gloo": dist.new_group(backend="cpu:gloo"),
             "pycollect": dist.new_group(backend="pycollect", timeout=datetime.timedelta(seconds=20))}
    out = {}
    for backend, pg in whole.items():
        mine = [0, 1] if r < 2 else [2, 3]
        child = pg.split_group(mine, timeout=datetime.timedelta(seconds=20), group_name=f"{backend}-half{mine[0]}")
        t = torch.full((3,), float(r + 1))
        child.allreduce([t]).wait()
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"),
                                backend_override={"dp": backend, "tp": backend})
        sums = {}
        for dim in ("dp", "tp"):
            x = torch.full((2,), float(r + 1))
            dist.all_reduce(x, group=mesh.get_group(dim))
            sums[dim] = x.tolist()
        full = torch.arange(16, dtype=torch.float32).reshape(4, 4)
        total = distribute_tensor(full, mesh, [Shard(0), Shard(1)]).sum().full_tensor()
        out[backend] = {"split": (child.size(), child.rank(), t.tolist()), "mesh": sums, "dtensor_sum": total.item(),
                        "mesh_backend": dist.get_backend(mesh.get_group("dp"))}
    return out
