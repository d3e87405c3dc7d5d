"""Tests for pycollect.memory: the ZeRO paper's and DeepSpeed's numbers, the lesson's call,
activations (Korthikanti et al. 2022), communication volume, properties, CLI, errors.

Pure Python, no torch, no processes except one ``python -m`` smoke run.
"""

import argparse
import subprocess
import sys

import pytest

from pycollect.cli import memory as cli_memory
from pycollect import memory as mem
from pycollect.memory import (STAGES, ModelShape, communication_volume, deepspeed_zero2_estimate,
                              deepspeed_zero3_estimate, estimate_memory, gpus_needed,
                              memory_calculator, parse_params)

GB = 1e9

# -- the ZeRO paper (Rajbhandari et al. 2020, figure 1): Ψ = 7.5 B, N = 64, K = 12 -------


@pytest.mark.parametrize("stage, expected", [
    ("ddp", 120.0), ("zero1", 31.4), ("zero2", 16.6), ("zero3", 1.9)])
def test_zero_paper_example(stage, expected):
    r = memory_calculator(7.5, 64, stage)
    assert round(r["per_gpu_total_gb"], 1) == expected


def test_zero_paper_components_exact():
    psi, n = 7.5e9, 64
    exact = {"ddp": (2 * psi, 2 * psi, 12 * psi),
             "zero1": (2 * psi, 2 * psi, 12 * psi / n),
             "zero2": (2 * psi, 2 * psi / n, 12 * psi / n),
             "zero3": (2 * psi / n, 2 * psi / n, 12 * psi / n)}
    for stage, (w, g, o) in exact.items():
        r = memory_calculator(7.5, n, stage)
        assert r["weights_gb"] == pytest.approx(w / GB)
        assert r["gradients_gb"] == pytest.approx(g / GB)
        assert r["optimizer_gb"] == pytest.approx(o / GB)
        assert r["per_gpu_total_gb"] == pytest.approx((w + g + o) / GB)


# -- the lesson's call -------------------------------------------------------------------

LESSON_KEYS = {"params_billions", "weights_gb", "optimizer_gb", "gradients_gb", "activations_gb",
               "per_gpu_total_gb", "total_across_gpus_gb", "fits_on_80gb", "num_gpus", "sharding"}


def test_lesson_call_default_mixed_precision():
    r = memory_calculator(params_billions=70, num_gpus=8, sharding="fsdp")
    assert LESSON_KEYS <= r.keys()
    assert r["per_gpu_total_gb"] == pytest.approx(140.0)  # 16 bytes/param / 8
    assert r["weights_gb"] == pytest.approx(17.5)
    assert r["gradients_gb"] == pytest.approx(17.5)
    assert r["optimizer_gb"] == pytest.approx(105.0)
    assert r["activations_gb"] == 0.0
    assert r["total_across_gpus_gb"] == pytest.approx(1120.0)
    assert r["fits_on_80gb"] is False
    assert (r["num_gpus"], r["sharding"], r["params_billions"]) == (8, "fsdp", 70.0)
    assert r["bytes_per_param"] == 16


def test_lesson_call_without_master_weights_is_105():
    r = memory_calculator(params_billions=70, num_gpus=8, sharding="fsdp", master_weights=False)
    assert r["per_gpu_total_gb"] == pytest.approx(105.0)  # 12 bytes/param / 8
    assert r["optimizer_gb"] == pytest.approx(70.0)
    assert r["bytes_per_param"] == 12
    assert r["fits_on_80gb"] is False


# -- precisions, optimizers, stages --------------------------------------------------------

@pytest.mark.parametrize("precision, optimizer, master, per_param", [
    ("mixed", "adam", True, 16), ("mixed", "adamw", False, 12), ("bf16", "sgd_momentum", True, 12),
    ("mixed", "sgd", True, 8), ("mixed", "sgd", False, 4), ("fp32", "adam", True, 16),
    ("fp32", "adam", False, 16), ("fp32", "sgd_momentum", True, 12), ("fp32", "sgd", True, 8)])
def test_bytes_per_param(precision, optimizer, master, per_param):
    e = estimate_memory(1.0, 1, "ddp", precision=precision, optimizer=optimizer,
                        master_weights=master)
    assert e.per_gpu_bytes == pytest.approx(per_param * 1e9)


def test_fp32_weights_and_grads_are_four_bytes():
    e = estimate_memory(1.0, 4, "zero2", precision="fp32")
    assert e.weights_bytes == pytest.approx(4e9)
    assert e.gradients_bytes == pytest.approx(4e9 / 4)
    assert e.optimizer_bytes == pytest.approx(8e9 / 4)


@pytest.mark.parametrize("alias, stage", [
    ("none", "ddp"), ("DDP", "ddp"), ("ZeRO-1", "zero1"), ("zero_2", "zero2"),
    ("fsdp", "zero3"), ("full_shard", "zero3"), ("hsdp", "hybrid"), ("hybrid_shard", "hybrid")])
def test_stage_aliases(alias, stage):
    assert estimate_memory(1.0, 8, alias).stage == stage


def test_hybrid_shards_within_node_and_replicates_across():
    hybrid = estimate_memory(7.5, 64, "hybrid", gpus_per_node=8)
    zero3_node = estimate_memory(7.5, 8, "zero3")
    assert hybrid.shard_degree == 8
    assert hybrid.per_gpu_bytes == pytest.approx(zero3_node.per_gpu_bytes)  # 15 GB
    assert hybrid.per_gpu_gb == pytest.approx(15.0)
    # less than one node: zero3 over the GPUs present
    assert estimate_memory(7.5, 4, "hybrid").per_gpu_bytes == pytest.approx(
        estimate_memory(7.5, 4, "zero3").per_gpu_bytes)


def test_tensor_parallel_divides_model_states():
    assert estimate_memory(7.5, 8, "ddp", tensor_parallel=2).per_gpu_gb == pytest.approx(60.0)
    e = estimate_memory(7.5, 8, "zero3", tensor_parallel=2)
    assert e.shard_degree == 4
    assert e.per_gpu_gb == pytest.approx(120.0 / 8)


# -- activations (Korthikanti et al. 2022) ----------------------------------------------------

SHAPE = ModelShape(num_layers=3, hidden_size=1024, num_heads=16, seq_len=2048, micro_batch=2)


def _sbh(shape):
    return shape.seq_len * shape.micro_batch * shape.hidden_size


@pytest.mark.parametrize("recompute, t, sp, per_layer", [
    ("none", 1, False, lambda s, h, a, t: 34 + 5 * a * s / h),
    ("selective", 1, False, lambda s, h, a, t: 34),
    ("full", 1, False, lambda s, h, a, t: 2),
    ("none", 4, False, lambda s, h, a, t: 10 + 24 / t + 5 * a * s / (h * t)),
    ("none", 4, True, lambda s, h, a, t: (34 + 5 * a * s / h) / t),
    ("selective", 4, False, lambda s, h, a, t: 10 + 24 / t),
    ("selective", 4, True, lambda s, h, a, t: 34 / t),
    ("full", 4, True, lambda s, h, a, t: 2),
])
def test_activation_formulas(recompute, t, sp, per_layer):
    e = estimate_memory(1.0, 4, "zero3", model=SHAPE, recompute=recompute, tensor_parallel=t,
                        sequence_parallel=sp)
    factor = per_layer(SHAPE.seq_len, SHAPE.hidden_size, SHAPE.num_heads, t)
    assert e.activations_bytes == pytest.approx(SHAPE.num_layers * _sbh(SHAPE) * factor)


def test_activations_fp32_elements():
    e = estimate_memory(1.0, 1, "ddp", model=SHAPE, precision="fp32")
    s, h, a = SHAPE.seq_len, SHAPE.hidden_size, SHAPE.num_heads
    assert e.activations_bytes == pytest.approx(3 * _sbh(SHAPE) * (66 + 9 * a * s / h))


def test_calculator_takes_flat_shape():
    r = memory_calculator(1.0, 4, "zero3", num_layers=3, hidden_size=1024, num_heads=16,
                          seq_len=2048, micro_batch=2)
    s, h, a = 2048, 1024, 16
    assert r["activations_gb"] == pytest.approx(3 * _sbh(SHAPE) * (34 + 5 * a * s / h) / GB)
    assert r["per_gpu_total_gb"] == pytest.approx(
        r["weights_gb"] + r["gradients_gb"] + r["optimizer_gb"] + r["activations_gb"]
        + r["buffers_gb"])


# -- offload and FSDP buffers -------------------------------------------------------------

def test_offload_optimizer_moves_state_to_cpu():
    e = estimate_memory(7.5, 64, "zero2", offload_optimizer=True)
    assert e.optimizer_bytes == 0
    assert e.cpu_bytes == pytest.approx(12 * 7.5e9 / 64)
    assert e.per_gpu_bytes == pytest.approx(2 * 7.5e9 + 2 * 7.5e9 / 64)


def test_offload_params_leaves_only_buffers_on_gpu():
    e = estimate_memory(7.5, 64, "fsdp", offload_params=True, largest_unit_billions=0.5)
    assert e.weights_bytes == e.gradients_bytes == e.optimizer_bytes == 0
    assert e.cpu_bytes == pytest.approx(16 * 7.5e9 / 64)
    assert e.per_gpu_bytes == pytest.approx(e.buffers_bytes)


def test_fsdp_buffers_largest_unit_twice_with_prefetch():
    with_prefetch = estimate_memory(70, 64, "fsdp", largest_unit_billions=1.0)
    without = estimate_memory(70, 64, "fsdp", largest_unit_billions=1.0, prefetch=False)
    assert with_prefetch.buffers_bytes == pytest.approx(2 * 2 * 1e9)
    assert without.buffers_bytes == pytest.approx(2 * 1e9)
    assert estimate_memory(70, 64, "zero2", largest_unit_billions=1.0).buffers_bytes == 0
    # one transformer layer of the model by default: 12h² + 13h parameters
    e = estimate_memory(1.0, 8, "fsdp", model=SHAPE)
    assert e.buffers_bytes == pytest.approx(2 * 2 * (12 * 1024 ** 2 + 13 * 1024))


# -- DeepSpeed's estimators, against their formulas computed here independently ------------

def _ds2(p, n, nodes, off):
    g = n * nodes
    if off:
        return 2 * p, int(p * max(4 * g, 16) * 1.5)
    return 2 * p + 18 * p // g, int(p * 4 * n * 1.5)


def _ds3_gpu(p, big, g, off, offp):
    if off and offp:
        return 4 * big
    return 4 * big + (2 if off else 18) * p // g


CASES = [(7_500_000_000, 262_144_000, 8, 1), (70_000_000_000, 1_050_673_152, 8, 8),
         (1_300_000_000, 51_511_296, 1, 1), (175_000_000_000, 617_545_728, 4, 3)]


@pytest.mark.parametrize("p, big, n, nodes", CASES)
@pytest.mark.parametrize("off", [False, True])
def test_deepspeed_zero2(p, big, n, nodes, off):
    est = deepspeed_zero2_estimate(p, n, nodes, cpu_offload=off)
    assert (est.gpu_bytes, est.cpu_bytes) == _ds2(p, n, nodes, off)


@pytest.mark.parametrize("p, big, n, nodes", CASES)
@pytest.mark.parametrize("off, offp", [(False, False), (True, False), (True, True)])
def test_deepspeed_zero3_gpu(p, big, n, nodes, off, offp):
    est = deepspeed_zero3_estimate(p, big, n, nodes, cpu_offload=off, cpu_offload_params=offp)
    assert est.gpu_bytes == _ds3_gpu(p, big, n * nodes, off, offp)
    assert est.largest_layer_bytes == 4 * big


def test_deepspeed_zero3_cpu():
    p, big, n, nodes = 70_000_000_000, 1_000_000_000, 8, 4
    z3 = deepspeed_zero3_estimate
    assert z3(p, big, n, nodes).cpu_bytes == int(big * 4 * n * 1.5)
    assert z3(p, big, n, nodes, zero_init=False).cpu_bytes == int(p * 4 * n * 1.5)
    assert z3(p, big, n, nodes, cpu_offload=True).cpu_bytes == int(p * 16 / nodes * 1.5)
    assert z3(p, big, n, nodes, cpu_offload=True, cpu_offload_params=True).cpu_bytes == int(
        p * 18 / nodes * 1.5)
    assert z3(p, big, n, nodes, cpu_offload=True, zero_init=False).cpu_bytes == int(
        p * max(4 * n, 16 / nodes) * 1.5)


def test_deepspeed_zero2_known_value():
    # 7.5 B params on 64 GPUs: 15 GB of 16-bit params + 18 x 7.5e9 / 64 bytes
    assert deepspeed_zero2_estimate(7_500_000_000, 8, 8).gpu_bytes == 15_000_000_000 + 2_109_375_000


# -- gpus_needed --------------------------------------------------------------------------

def test_gpus_needed():
    assert gpus_needed(70, 80, "fsdp") == 14  # 16 x 70 / 14 = 80.0 exactly
    assert gpus_needed(70, 80, "fsdp", master_weights=False) == 11  # 12 x 70 / 11 = 76.4
    assert gpus_needed(70, 80, "ddp") is None
    assert gpus_needed(70, 80, "hybrid") is None  # one node of 8 is the most it shards over
    assert gpus_needed(7.5, 80, "zero1") == 2  # 30 + 90 / N <= 80
    assert gpus_needed(7.5, 80, "hybrid") == 2
    assert gpus_needed(1.0, 80, "ddp") == 1
    assert gpus_needed(70, 80, "zero3", tensor_parallel=4) == 16


@pytest.mark.parametrize("stage", ["zero1", "zero2", "zero3"])
def test_gpus_needed_is_the_fewest(stage):
    opts = dict(model=SHAPE, largest_unit_billions=0.2)
    n = gpus_needed(13, 60, stage, **opts)
    assert n is not None and n > 1
    assert estimate_memory(13, n, stage, gpu_memory_gb=60, **opts).fits
    assert not estimate_memory(13, n - 1, stage, gpu_memory_gb=60, **opts).fits


# -- properties ---------------------------------------------------------------------------

def test_zero3_memory_never_grows_with_more_gpus():
    prev = float("inf")
    for n in range(1, 130):
        e = estimate_memory(70, n, "zero3", model=SHAPE, largest_unit_billions=0.9)
        assert e.per_gpu_bytes <= prev
        prev = e.per_gpu_bytes


@pytest.mark.parametrize("params, n", [(0.35, 2), (7.5, 64), (70, 8), (175, 1024)])
def test_stages_are_ordered(params, n):
    totals = [estimate_memory(params, n, s).per_gpu_bytes
              for s in ("ddp", "zero1", "zero2", "zero3")]
    assert totals == sorted(totals, reverse=True)
    hybrid = estimate_memory(params, n, "hybrid").per_gpu_bytes
    assert totals[3] <= hybrid <= totals[0]


# -- communication volume ----------------------------------------------------------------

def test_comm_volume():
    psi, n = 7e9, 8
    ddp = communication_volume(7, n, "ddp")
    assert ddp.bytes_per_rank == pytest.approx(2 * psi * (n - 1) / n * 2)
    assert communication_volume(7, n, "zero2").bytes_per_rank == pytest.approx(ddp.bytes_per_rank)
    z3 = communication_volume(7, n, "fsdp", bus_bandwidth_gbs=100)
    assert z3.bytes_per_rank == pytest.approx(3 * psi * (n - 1) / n * 2)
    assert z3.time_s == pytest.approx(z3.bytes_per_rank / 100e9)
    assert ddp.time_s is None
    assert communication_volume(7, n, "ddp", precision="fp32").bytes_per_rank == pytest.approx(
        2 * ddp.bytes_per_rank)
    assert communication_volume(7, 1, "ddp").bytes_per_rank == 0


def test_comm_volume_hybrid():
    psi = 7e9
    c = communication_volume(7, 32, "hybrid", bus_bandwidth_gbs=200, inter_node_bandwidth_gbs=25)
    assert c.bytes_per_rank == pytest.approx(3 * psi * 2 * 7 / 8)
    assert c.inter_node_bytes_per_rank == pytest.approx(2 * (psi * 2 / 8) * 3 / 4)
    assert c.time_s == pytest.approx(c.bytes_per_rank / 200e9 + c.inter_node_bytes_per_rank / 25e9)


# -- parsing and errors ------------------------------------------------------------------

@pytest.mark.parametrize("text, billions", [
    ("70B", 70), ("7.5b", 7.5), ("350M", 0.35), ("1.2T", 1200), ("70", 70), ("125k", 125e-6),
    (13, 13)])
def test_parse_params(text, billions):
    assert parse_params(text) == pytest.approx(billions)


@pytest.mark.parametrize("text", ["abc", "-3B", "0", "70X", "", "B", "262144000"])
def test_parse_params_rejects(text):
    with pytest.raises(ValueError, match="param"):
        parse_params(text)


@pytest.mark.parametrize("kwargs, message", [
    (dict(params_billions=-1, num_gpus=8, sharding="fsdp"), "params_billions"),
    (dict(params_billions=0, num_gpus=8, sharding="fsdp"), "params_billions"),
    (dict(params_billions=float("nan"), num_gpus=8, sharding="fsdp"), "params_billions"),
    (dict(params_billions=70, num_gpus=0, sharding="fsdp"), "num_gpus"),
    (dict(params_billions=70, num_gpus=-8, sharding="fsdp"), "num_gpus"),
    (dict(params_billions=70, num_gpus=8.0, sharding="fsdp"), "num_gpus"),
    (dict(params_billions=70, num_gpus=True, sharding="fsdp"), "num_gpus"),
    (dict(params_billions=70, num_gpus=8, sharding="zero4"), "unknown sharding stage 'zero4'"),
    (dict(params_billions=70, num_gpus=8, sharding="fsdp", precision="fp8"), "precision"),
    (dict(params_billions=70, num_gpus=8, sharding="fsdp", optimizer="lion"), "optimizer"),
    (dict(params_billions=70, num_gpus=8, sharding="fsdp", recompute="some"), "recompute"),
    (dict(params_billions=70, num_gpus=8, sharding="fsdp", tensor_parallel=3), "tensor_parallel"),
    (dict(params_billions=70, num_gpus=12, sharding="hybrid"), "whole nodes"),
    (dict(params_billions=70, num_gpus=8, sharding="zero2", offload_params=True), "offload_params"),
    (dict(params_billions=70, num_gpus=8, sharding="fsdp", largest_unit_billions=80), "exceeds"),
    (dict(params_billions=70, num_gpus=8, sharding="fsdp", gpu_memory_gb=0), "gpu_memory_gb"),
    (dict(params_billions=70, num_gpus=8, sharding="fsdp", bus_bandwidth_gbs=-5), "bus_bandwidth"),
    (dict(params_billions=70, num_gpus=8, sharding="fsdp", num_layers=32), "together"),
    (dict(params_billions=70, num_gpus=8, sharding="fsdp", num_layers=32, hidden_size=4096,
          num_heads=30, seq_len=2048), "num_heads"),
    (dict(params_billions=70, num_gpus=8, sharding="fsdp", num_layers=0, hidden_size=4096,
          num_heads=32, seq_len=2048), "num_layers"),
])
def test_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        memory_calculator(**kwargs)


def test_other_errors():
    with pytest.raises(ValueError, match="num_gpus"):
        gpus_needed(70, 80, "fsdp", num_gpus=8)
    with pytest.raises(ValueError, match="total_params"):
        deepspeed_zero2_estimate(0)
    with pytest.raises(ValueError, match="num_nodes"):
        deepspeed_zero2_estimate(10, 1, 0)
    with pytest.raises(ValueError, match="largest_layer_params"):
        deepspeed_zero3_estimate(10, 11)
    with pytest.raises(ValueError, match="cpu_offload"):
        deepspeed_zero3_estimate(10, 1, cpu_offload_params=True)


# -- command line ------------------------------------------------------------------------

def _parse(argv):
    parser = argparse.ArgumentParser(prog="pycollect")
    cli_memory.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["memory", *argv])


def _run(argv, capsys):
    args = _parse(argv)
    rc = args.func(args)
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_breakdown(capsys):
    rc, out, err = _run(["--params", "70B", "--gpus", "8", "--sharding", "fsdp"], capsys)
    assert rc == 0 and err == ""
    assert "16 bytes/param" in out
    assert "140.00" in out and "105.00" in out and "17.50" in out
    assert "fits in 80 GB per GPU: no" in out


def test_cli_breakdown_lesson_accounting_with_shape_and_bandwidth(capsys):
    rc, out, _ = _run(["--params", "70B", "--gpus", "8", "--no-master-weights", "--layers", "80",
                       "--hidden", "8192", "--heads", "64", "--seq-len", "4096",
                       "--recompute", "full", "--bus-bandwidth", "100"], capsys)
    assert rc == 0
    assert "12 bytes/param" in out
    assert "activations" in out and "5.37" in out  # 2 x 4096 x 8192 x 80 bytes
    assert "communication time per step (s)" in out and "3.675" in out


def test_cli_compare(capsys):
    rc, out, _ = _run(["--params", "7.5B", "--gpus", "64", "--compare"], capsys)
    assert rc == 0
    header = next(line for line in out.splitlines() if line.split()[:1] == ["ddp"])
    assert header.split() == list(STAGES)
    total = next(line for line in out.splitlines() if line.startswith("total per GPU"))
    assert total.split()[3:] == ["120.00", "31.41", "16.64", "1.88", "15.00"]


def test_cli_plan(capsys):
    rc, out, _ = _run(["--params", "70B", "--plan", "--gpu-memory", "80"], capsys)
    assert rc == 0
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.split()
            and line.split()[0] in STAGES}
    assert rows["zero3"][:2] == ["14", "80.00"]
    assert rows["ddp"] == ["none", "fits"]


def test_cli_deepspeed(capsys):
    rc, out, _ = _run(["--params", "7.5B", "--gpus", "64", "--deepspeed",
                       "--largest-layer", "262.144M"], capsys)
    assert rc == 0
    z2 = deepspeed_zero2_estimate(7_500_000_000, 8, 8)
    assert f"{z2.gpu_gb:.2f}" in out
    assert "optimizer+params" in out


@pytest.mark.parametrize("argv, message", [
    (["--params", "-3", "--gpus", "8"], "positive"),
    (["--params", "70B", "--gpus", "0"], "--gpus must be at least 1"),
    (["--params", "70B"], "--gpus is required"),
    (["--params", "70B", "--gpus", "8", "--sharding", "zero9"], "unknown sharding stage"),
    (["--params", "lots", "--gpus", "8"], "cannot read a parameter count"),
    (["--params", "70B", "--gpus", "8", "--layers", "80"], "together"),
    (["--params", "70B", "--gpus", "12", "--deepspeed"], "whole number"),
])
def test_cli_errors(argv, message, capsys):
    rc, out, err = _run(argv, capsys)
    assert rc == 2 and out == ""
    assert err.startswith("pycollect memory: error:") and message in err
    assert err.count("\n") == 1


def test_cli_module_entry_point():
    proc = subprocess.run([sys.executable, "-m", "pycollect.cli.memory", "--params", "70B",
                           "--gpus", "8", "--sharding", "fsdp"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "140.00" in proc.stdout


def test_public_names():
    for name in mem.__all__:
        assert hasattr(mem, name)


def test_pipeline_parallel_divides_model_states_not_activations():
    shape = ModelShape(num_layers=32, hidden_size=4096, num_heads=32, seq_len=2048, micro_batch=1)
    one = estimate_memory(7, 8, "ddp", model=shape)
    two = estimate_memory(7, 8, "ddp", model=shape, pipeline_parallel=2)
    assert two.weights_bytes == one.weights_bytes / 2 and two.optimizer_bytes == one.optimizer_bytes / 2
    assert two.activations_bytes == one.activations_bytes
    both = estimate_memory(7, 8, "zero3", tensor_parallel=2, pipeline_parallel=2)
    assert both.shard_degree == 2 and both.pipeline_parallel == 2
    with pytest.raises(ValueError, match="tensor_parallel x pipeline_parallel=2 x 3"):
        estimate_memory(7, 8, "ddp", tensor_parallel=2, pipeline_parallel=3)
    assert gpus_needed(70, 80, "zero3", pipeline_parallel=4) % 4 == 0


def test_cli_pipeline_stages(capsys):
    rc, out, _ = _run(["--params", "7B", "--gpus", "8", "--sharding", "ddp", "--pp", "2", "--precision", "fp32"],
                      capsys)
    assert rc == 0
    assert "pipeline stages 2" in out and "56.00" in out
