"""pycollect.demo (the lesson's API) and `pycollect demo` (the main job).

run_distributed_demo spawns its own ranks, so it is called directly, once per
backend; both runs use the same seed, so their numbers must agree with each other.
"""
from __future__ import annotations

import math
import sys
import types

import pytest
import torch

from pycollect import demo
from pycollect.launch import run_ranks

EXAMPLE = dict(world_size=2, in_dim=16, hidden=12, out_dim=3, batch_size=4, num_steps=3, seed=11)
KEYS = {"world_size", "backend", "param_sum_per_rank", "param_sum_spread", "losses",
        "grad_norm_after_all_reduce", "manual_all_reduce_max_diff_vs_single_process",
        "fsdp_round_trip_all_ranks_ok"}


@pytest.fixture(scope="module")
def results():
    return {b: demo.run_distributed_demo(backend=b, **EXAMPLE) for b in ("pycollect", "gloo")}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["pycollect", "gloo"])
def test_issue_example(results, backend):
    r = results[backend]
    assert KEYS <= set(r)
    assert r["world_size"] == 2 and r["backend"] == backend
    assert r["fsdp_round_trip_all_ranks_ok"] is True
    assert sorted(r["param_sum_per_rank"]) == [0, 1]
    assert r["param_sum_spread"] <= 1e-9
    assert r["manual_all_reduce_max_diff_vs_single_process"] <= 1e-6
    assert r["grad_norm_after_all_reduce"] > 0
    assert len(r["losses"]) == 2 and all(math.isfinite(x) for x in r["losses"])
    assert len(r["loss_per_step"]) == EXAMPLE["num_steps"]


@pytest.mark.slow
def test_both_transports_give_the_same_run(results):
    a, b = results["pycollect"], results["gloo"]
    assert a["param_sum_per_rank"][0] == pytest.approx(b["param_sum_per_rank"][0], rel=1e-6)
    assert a["loss_per_step"] == pytest.approx(b["loss_per_step"], rel=1e-6)
    assert a["grad_norm_after_all_reduce"] == pytest.approx(b["grad_norm_after_all_reduce"], rel=1e-6)


def test_default_backend_is_pycollect(monkeypatch):
    """Called without a backend, the demo's ranks form their groups on pycollect and run its
    job there (the launcher is stood in for: what it is asked to start is what counts)."""
    from pycollect.demo import lesson

    launched = []

    def launch(job, world_size, backends, timeout, job_args):
        launched.append((backends, job_args[0]))
        rank = {"param_sum": 1.0, "losses": [0.5], "grad_norm_after_all_reduce": 1.0,
                "max_diff_vs_single_process": 0.0, "fsdp_round_trip_ok": True}
        return [rank] * world_size

    monkeypatch.setattr(lesson, "run_ranks", launch)
    r = demo.run_distributed_demo(world_size=2, num_steps=1)
    assert launched == [(("pycollect",), "pycollect")] and r["backend"] == "pycollect"
    with pytest.raises(ValueError, match="backend"):
        demo.run_distributed_demo(backend="nccl")


@pytest.mark.parametrize("rows, world", [(10, 3), (7, 4), (3, 5), (0, 2), (8, 2)])
def test_shard_for_rank_covers_every_row_once(rows, world):
    x = torch.arange(rows * 2).reshape(rows, 2)
    shards = [demo.shard_for_rank(x, r, world) for r in range(world)]
    sizes = [s.shape[0] for s in shards]
    assert max(sizes) - min(sizes) <= 1
    assert torch.equal(torch.cat(shards), x)
    with pytest.raises(ValueError, match="rank 5"):
        demo.shard_for_rank(x, 5, 5)


def test_fsdp_round_trip_on_one_rank_needs_no_group():
    model = demo.make_model(5, 7, 3)  # 35 + 7 + 21 + 3 elements: none a multiple of 2 or 4
    assert demo.fsdp_round_trip_sketch(model, 1, 0) is True


def _failing_job(rank, world_size, emit):
    emit("hello", rank)
    if rank == 1:
        raise ValueError("rank one is broken on purpose")
    import pycollect as pc

    pc.barrier()  # rank 0 would wait here forever: the parent must kill it
    return rank


def test_a_failing_rank_is_reported_and_nobody_hangs():
    events = []
    with pytest.raises(RuntimeError, match="rank 1 of 2 failed(.|\n)*broken on purpose"):
        run_ranks(_failing_job, 2, ("pycollect",), timeout=60, on_event=lambda r, e: events.append(r))


@pytest.mark.slow
def test_cli_demo_trains_and_compares(capsys):
    from pycollect.cli import main

    assert main(["demo", "--steps", "3"]) == 0
    out = capsys.readouterr().out
    assert out.count("pycollect DDP   [") == 3 and out.count("torch DDP/Gloo  [") == 3
    assert "step   3/3" in out and "median step time" in out
    assert "largest parameter difference between the runs: 0 " in out  # 2 ranks: bit-identical
    assert "replicas identical on all ranks: yes" in out


def test_cli_demo_fsdp_is_forwarded(monkeypatch):
    from pycollect.cli import main

    calls = []
    fake = types.ModuleType("pycollect.demo.fsdp_job")
    fake.main = lambda world_size, steps: calls.append((world_size, steps)) or 0
    monkeypatch.setitem(sys.modules, "pycollect.demo.fsdp_job", fake)
    assert main(["demo", "--fsdp", "--world-size", "3", "--steps", "4"]) == 0
    assert calls == [(3, 4)]
