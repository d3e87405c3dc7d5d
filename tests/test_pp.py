"""Pipeline parallelism (pycollect.pp) against one process training the same GPT.

Pure tests check the schedules (orders, simulated bubble, activation memory) and the
split. Pool cases run on the session's 3-rank pool: 2-stage pipelines on the sub-group
[0, 1] (rank 2 sits out) and 3-stage pipelines on the default group. Each trains an
untied GPT with GPipe and 1F1B from the same initialisation as a single-process model on
the same batches, and compares losses (every rank) and each stage's parameters.
"""
from __future__ import annotations

import pytest
from rank_pool import paired_groups

from pycollect.pp import schedules

REL_TOL = 1e-5   # fp32 after a few steps: micro-batch gradient sums vs one whole-batch backward
CFG = dict(vocab=32, seq=8, dim=16, layers=3, heads=2, tied=False)
BATCH, STEPS = 8, 3


def _group(size):
    """The pycollect group of a `size`-stage pipeline; False on a rank outside it."""
    pair = paired_groups(size)
    return False if pair is None else pair[0]


def _rel(a, b) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def _gpt(**over):
    import torch

    from pycollect.demo.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    return GPT(GPTConfig(**{**CFG, **over}))


# -- cases (run on every rank of the pool) -----------------------------------------
def case_vs_single(size, optimizer, micro_batches):
    import torch

    from pycollect.demo.gpt import gpt_batch, lm_loss
    from pycollect.pp import gpt_pieces, split_stages, train_steps

    group = _group(size)
    if group is False:
        return None
    batches = [gpt_batch(_gpt().cfg, BATCH, seed=s) for s in range(STEPS)]
    single = _gpt()
    opt = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[optimizer](single.parameters(), lr=1e-2)
    ref_losses = []
    for tokens, targets in batches:
        opt.zero_grad()
        loss = lm_loss(single(tokens), targets)
        loss.backward()
        opt.step()
        ref_losses.append(loss.item())
    out = {"ref_losses": ref_losses}
    ref_stage = split_stages(gpt_pieces(single), size)[pc_rank(group)]
    for schedule in ("gpipe", "1f1b"):
        model = _gpt()
        res = train_steps(gpt_pieces(model), batches, lm_loss, micro_batches, schedule, group, optimizer, lr=1e-2)
        stage = split_stages(gpt_pieces(model), size)[res["stage"]]
        params = [p.detach().clone() for p in stage.parameters()]
        out[schedule] = dict(losses=res["losses"], params=params, bubble=res["bubble"].as_dict(),
                             state_bytes=res["state_bytes"], table=res["bubble"].table(),
                             param_rel=max(_rel(a, b) for a, b in zip(params, ref_stage.parameters())))
    return out


def pc_rank(group):
    import pycollect as pc

    return pc.get_rank(group)


def case_misuse(kind):
    """Returns the error text on every member of the 2-stage group (None outside)."""
    from pycollect.demo.gpt import lm_loss
    from pycollect.pp import Pipeline, gpt_pieces, split_stages

    group = _group(2)
    if group is False:
        return None
    rank = pc_rank(group)
    try:
        if kind == "more_stages_than_layers":
            split_stages(gpt_pieces(_gpt(layers=1)), 4)
        elif kind == "tied":
            split_stages(gpt_pieces(_gpt(tied=True)), 2)
        elif kind == "group_size":
            Pipeline(split_stages(gpt_pieces(_gpt()), 3), lm_loss, 2, group=group)
        elif kind == "layout":  # rank 0 cuts 2+3 layers, rank 1 cuts 3+2
            Pipeline(split_stages(gpt_pieces(_gpt()), 2, [2 + rank, 3 - rank]), lm_loss, 2, group=group)
        elif kind == "micro_batches_disagree":
            Pipeline(split_stages(gpt_pieces(_gpt()), 2), lm_loss, 2 + rank, group=group)
        elif kind == "indivisible":
            from pycollect.demo.gpt import gpt_batch

            pipe = Pipeline(split_stages(gpt_pieces(_gpt()), 2), lm_loss, 4, group=group)
            pipe.step(*gpt_batch(_gpt().cfg, 6, seed=0))
        else:
            raise AssertionError(kind)
    except ValueError as e:
        return str(e)
    return "no error"


# -- pure tests ------------------------------------------------------------------------
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(1, 1), (2, 4), (3, 4), (4, 3), (4, 8)])
def test_schedule_orders(schedule, p, m):
    for s in range(p):
        order = schedules.schedule_order(schedule, p, m, s)
        assert sorted(order) == sorted([("F", j) for j in range(m)] + [("B", j) for j in range(m)])
        assert all(order.index(("F", j)) < order.index(("B", j)) for j in range(m))
        held = schedules.peak_in_flight(order)
        assert held == (m if schedule == "gpipe" else min(p - s, m))
    for f, b in ((1, 1), (1, 2)):  # uniform passes: every stage idles (p-1)/(m+p-1)
        slots = schedules.simulate(schedule, p, m, f, b)
        end = max(max(row) for row in slots) + 1
        assert end == (m + p - 1) * (f + b)
        for row in slots:
            assert 1 - len(row) / end == pytest.approx(schedules.textbook_bubble(p, m))


def test_timeline_matches_docstring():
    drawn = schedules.timeline("1f1b", 3, 4)
    assert drawn.splitlines()[0] == "stage 0 | F0 F1 F2 .  .  B0 F3 B1 .  B2 .  B3"
    assert drawn in schedules.__doc__.replace("\n    ", "\n")
    assert schedules.textbook_bubble(3, 4) == pytest.approx(2 / 6)
    with pytest.raises(ValueError, match="schedule='zb'"):
        schedules.schedule_order("zb", 2, 2, 0)


def test_split_balance_and_errors():
    from torch import nn

    from pycollect.pp import balance_by_params, gpt_pieces, split_stages

    layers = [nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 40), nn.Linear(40, 4)]
    assert balance_by_params(layers, 2) == [3, 1]
    assert [len(s) for s in split_stages(layers, 3, [1, 1, 2])] == [1, 1, 2]
    stages = split_stages(gpt_pieces(_gpt()), 3)
    assert [len(s) for s in stages] == [2, 1, 2]  # [embedding, block], [block], [block, final]
    import torch

    tokens = torch.randint(0, 32, (2, 8))
    assert torch.equal(nn.Sequential(*stages)(tokens), _gpt()(tokens))  # the pieces compute the model
    with pytest.raises(ValueError, match="balance"):
        split_stages(layers, 2, [2, 1])
    with pytest.raises(ValueError, match="share one parameter"):
        split_stages(gpt_pieces(_gpt(tied=True)), 2)
    assert len(split_stages(gpt_pieces(_gpt(tied=True)), 1)) == 1  # one stage may hold the tie


# -- pool tests ------------------------------------------------------------------------
@pytest.mark.parametrize("size,optimizer,m", [(2, "sgd", 4), (2, "adam", 2), (3, "adam", 4)])
def test_matches_single_process(pool3, size, optimizer, m):
    results = pool3.run(case_vs_single, size, optimizer, m)
    for rank, r in enumerate(results):
        if rank >= size:
            assert r is None
            continue
        for schedule in ("gpipe", "1f1b"):
            got = r[schedule]
            assert got["losses"] == pytest.approx(r["ref_losses"], rel=REL_TOL), (rank, schedule)
            assert got["param_rel"] < REL_TOL, (rank, schedule, got["param_rel"])
            b = got["bubble"]
            assert (b["stages"], b["micro_batches"], b["steps"]) == (size, m, 2)
            assert b["textbook"] == pytest.approx((size - 1) / (m + size - 1))
            assert all(0 <= x < 1 for x in b["measured"]) and all(w > c > 0 for c, w in zip(b["compute_s"], b["wall_s"]))
            want = [m] * size if schedule == "gpipe" else [min(size - s, m) for s in range(size)]
            assert list(b["peak_in_flight"]) == want
            assert got["state_bytes"] > 0
        # both schedules run the same micro-batches in the same order: the same numbers
        import torch

        assert r["gpipe"]["losses"] == r["1f1b"]["losses"]
        assert all(torch.equal(a, b) for a, b in zip(r["gpipe"]["params"], r["1f1b"]["params"]))
    assert results[0]["1f1b"]["bubble"] == results[size - 1]["1f1b"]["bubble"]  # one table on every rank


@pytest.mark.parametrize("kind,match", [
    ("more_stages_than_layers", "cannot split 3 layers into 4 stages"),
    ("tied", "share one parameter"),
    ("group_size", "3 stages on a group of 2 ranks"),
    ("layout", "disagree on the pipeline"),
    ("micro_batches_disagree", "micro_batches=2"),
    ("indivisible", "cannot be cut into 4 equal micro-batches"),
])
def test_misuse_raises_on_every_rank(pool3, kind, match):
    results = pool3.run(case_misuse, kind)
    assert results[2] is None
    for rank in (0, 1):
        assert match in results[rank], (rank, results[rank])
