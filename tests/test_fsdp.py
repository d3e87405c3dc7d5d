"""FSDP on pycollect, end to end on 3 real ranks (2-rank cases use a sub-group).

References, computed in every rank from the same seeds: one process training on the
concatenated batch (losses and final parameters), and torch FSDP2
(torch.distributed.fsdp.fully_shard on Gloo) on the same model and data (losses).
"""
from __future__ import annotations

import pytest
import torch.nn as nn

import fsdp_models as M

W_CASES = [2, 3]




def _member_results(results, world):
    """The results of the ranks in the `world`-rank group (rank 2 sits out 2-rank cases)."""
    return results[:world]


# -- equivalence with one process and with torch FSDP2 -----------------------------------

@pytest.mark.parametrize("world", W_CASES)
@pytest.mark.parametrize("kind", ["gpt_tied", "gpt_untied", "mlp"])
def test_matches_single_process_training(pool3, kind, world):
    for res in _member_results(pool3.run(M.case_train_vs_reference, kind, world), world):
        losses, ref_losses, max_param_diff, padding = res
        assert len(losses) == M.STEPS
        assert max(abs(a - b) for a, b in zip(losses, ref_losses)) < 1e-5, (losses, ref_losses)
        assert max_param_diff < 1e-5
        if world == 3:
            assert padding > 0  # the 3-rank case really exercises padded shards


@pytest.mark.parametrize("world", W_CASES)
@pytest.mark.parametrize("kind", ["gpt_tied", "mlp"])
def test_matches_torch_fsdp2(pool3, kind, world):
    for ours, theirs, param_diff, all_compared in _member_results(pool3.run(M.case_ours_vs_fsdp2, kind, world),
                                                                  world):
        assert max(abs(a - b) for a, b in zip(ours, theirs)) < 1e-5, (ours, theirs)
        assert all_compared and param_diff < 1e-5


def test_reshard_after_forward_false_keeps_params_until_backward(pool3):
    for res in pool3.run(M.case_reshard_modes):
        (loss_t, gathers_t, peak_t), (loss_f, gathers_f, peak_f), units = res
        assert max(abs(a - b) for a, b in zip(loss_t, loss_f)) < 1e-6
        assert gathers_t == 2 * units - 1  # forward: every unit; backward: all but the root again
        assert gathers_f == units  # only the forward gathers
        assert peak_f > peak_t


@pytest.mark.parametrize("world", W_CASES)
def test_mixed_precision_bf16(pool3, world):
    for res in _member_results(pool3.run(M.case_mixed_precision, world), world):
        assert res["shard_dtypes"] == {"torch.float32"} and res["grad_dtypes"] == {"torch.float32"}
        assert res["unsharded_bytes"] == 2 * res["padded_numel"]  # gathered in bf16
        assert max(abs(a - b) for a, b in zip(res["ours"], res["fsdp2"])) < 1e-3, res  # both compute in bf16
        assert max(abs(a - b) for a, b in zip(res["ours"], res["fp32"])) < 1e-2, res


def test_no_sync_accumulates_without_communication(pool3):
    for res in pool3.run(M.case_no_sync):
        assert res["reduce_scatters_inside_no_sync"] == 0
        assert res["reduce_scatters_after"] == res["units"]
        assert res["max_grad_diff"] < 1e-6


# -- state dicts ------------------------------------------------------------------------

def test_full_state_dict_loads_into_unwrapped_model(pool3):
    results = pool3.run(M.case_full_state_dict)
    assert results[0]["keys_match"] and results[0]["max_diff"] < 1e-5
    assert results[0]["tied_shared_after_load"]
    assert all(r["empty_elsewhere"] for r in results[1:])
    for r in results:
        assert r["reload_every_rank"] == 0.0 and r["reload_from_rank0"] == 0.0


def test_sharded_state_dict_round_trip_resumes_identically(pool3, tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("fsdp_ckpt"))
    for continued, resumed in pool3.run(M.case_sharded_round_trip, directory):
        assert continued == resumed  # bit-identical losses after save -> load


# -- memory -------------------------------------------------------------------------------

@pytest.mark.parametrize("world", W_CASES)
def test_memory_is_divided_by_world_size(pool3, world):
    results = _member_results(pool3.run(M.case_memory, world), world)
    r0 = results[0]
    print(f"\n[world {world}] full model state {r0['full']}, rank 0 holds {r0['sharded']} (padding "
          f"{r0['padding_bytes']} B); unsharded peaks {r0['peaks']} with units {r0['peak_units']}; "
          f"root {r0['root_bytes']} B, other units {r0['unit_bytes']}")
    for res in results:
        full, sharded, pad_bytes = res["full"], res["sharded"], res["padding_bytes"]
        for kind in ("params", "grads"):
            assert full[kind] / world <= sharded[kind] <= full[kind] / world + pad_bytes
        # Adam: exp_avg + exp_avg_sq per element, plus one step counter per tensor
        tensor_state = sharded["optim"] - res["step_counter_bytes"]
        assert full["optim_tensors"] / world <= tensor_state <= full["optim_tensors"] / world + 2 * pad_bytes
        root, others = res["root_bytes"], sorted(res["unit_bytes"].values(), reverse=True)
        bound = root + sum(others[:2])
        assert res["peaks"]["forward"] <= bound and res["peaks"]["backward"] <= bound
        assert len([u for u in res["peak_units"]["forward"] if u != "<root>"]) <= 2
        assert res["unsharded_after_step"] == 0


def test_prefetch_and_overlap_order(pool3):
    for trace_checks in pool3.run(M.case_trace):
        assert trace_checks["forward_prefetch"], trace_checks
        assert trace_checks["backward_prefetch"], trace_checks
        assert trace_checks["reduce_overlaps_next_backward"], trace_checks


# -- misuse -------------------------------------------------------------------------------

def test_clear_errors(pool3):
    results = pool3.run(M.case_errors)
    for rank, errs in enumerate(results):
        assert "shared across units" in errs["shared"] and "'0.weight'" in errs["shared"]
        assert "differs between ranks" in errs["structure"] and "rank 1" in errs["structure"]
        assert "initial values differ" in errs["values"] and "sync_module_states" in errs["values"]
        assert errs["synced_equal"]
        assert "rank 0 of 3 ranks" in errs["world_mismatch"] if rank == 0 else errs["world_mismatch"] is None
        assert "frozen" in errs["frozen"] and "not floating" in errs["int_param"]
    assert "not a member" in results[2]["non_member"]


def test_wrap_policies_choose_units():
    from pycollect.fsdp.wrap_policy import ModuleWrapPolicy, SizeWrapPolicy, plan_units
    from pycollect.demo.gpt import GPT, Block, GPTConfig

    model = GPT(GPTConfig(vocab=16, seq=4, dim=8, layers=3, heads=2, tied=True))
    by_class = plan_units(model, ModuleWrapPolicy({Block}))
    assert [p.name for p in by_class] == ["", "blocks.0", "blocks.1", "blocks.2"]
    root_names = [h[2] for r in by_class[0].params for h in r.holders]
    assert "wte.weight" in root_names and "head.weight" in root_names  # tied, one ref, two names
    assert len(by_class[0].params) == len(root_names) - 1
    block = sum(p.numel() for p in model.blocks[0].parameters())
    by_size = plan_units(model, SizeWrapPolicy(block))
    assert [p.name for p in by_size] == ["", "blocks.0", "blocks.1", "blocks.2"]
    # one block is too small; the ModuleList holding all three is not
    assert [p.name for p in plan_units(model, SizeWrapPolicy(block + 1))] == ["", "blocks"]
    total = sum(p.numel() for p in model.parameters())
    assert [p.name for p in plan_units(model, SizeWrapPolicy(total))] == [""]  # the root is never a candidate
    mlp = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    assert [p.name for p in plan_units(mlp, ModuleWrapPolicy({nn.Linear}))] == ["", "0", "1"]
    assert plan_units(mlp, ModuleWrapPolicy({nn.Linear}))[0].params == []


@pytest.mark.slow
def test_demo_main_runs(capsys):
    from pycollect.demo import fsdp_job

    assert fsdp_job.main(world_size=2, steps=2) == 0
    out = capsys.readouterr().out
    assert "FSDP" in out and "DDP" in out and "peak RSS" in out
