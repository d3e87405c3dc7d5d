"""Model-state accounting for :mod:`pycollect.memory`: stages, precisions, optimizers.

The ZeRO paper (Rajbhandari et al., 2020, section 3.1) counts the *model states* of
mixed-precision Adam as 2Ψ bytes of 16-bit parameters, 2Ψ bytes of 16-bit gradients and
KΨ bytes of optimizer state, K = 12 (fp32 master copy, momentum and variance, 4 bytes
each).  The stages decide which of the three is divided over the N data-parallel ranks:

    stage    params   grads    optimizer    per rank (mixed Adam)
    ddp      2Ψ       2Ψ       12Ψ          16Ψ
    zero1    2Ψ       2Ψ       12Ψ/N        4Ψ + 12Ψ/N
    zero2    2Ψ       2Ψ/N     12Ψ/N        2Ψ + 14Ψ/N
    zero3    2Ψ/N     2Ψ/N     12Ψ/N        16Ψ/N
    hybrid   as zero3, with N the GPUs of one node; replicated across nodes

Everything here is pure arithmetic on plain numbers; no torch, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

# Canonical stage names, ordered from least to most sharded.
STAGES: tuple[str, ...] = ("ddp", "zero1", "zero2", "zero3", "hybrid")

# Every spelling a user may pass, mapped to its canonical stage.  "fsdp" is FSDP's
# FULL_SHARD (= ZeRO-3), "shard_grad_op" its ZeRO-2-like mode, "hsdp"/"hybrid_shard"
# its HYBRID_SHARD (shard inside a node, replicate across nodes).
_STAGE_ALIASES: dict[str, str] = {
    "none": "ddp",
    "ddp": "ddp",
    "no_shard": "ddp",
    "zero0": "ddp",
    "zero1": "zero1",
    "zero2": "zero2",
    "shard_grad_op": "zero2",
    "zero3": "zero3",
    "fsdp": "zero3",
    "full_shard": "zero3",
    "hybrid": "hybrid",
    "hsdp": "hybrid",
    "hybrid_shard": "hybrid",
}

# Stages that shard the 16-bit parameters (and so gather them, one unit at a time).
PARAM_SHARDED_STAGES = frozenset({"zero3", "hybrid"})
_GRAD_SHARDED_STAGES = frozenset({"zero2", "zero3", "hybrid"})
_OPTIM_SHARDED_STAGES = frozenset({"zero1", "zero2", "zero3", "hybrid"})

# precision -> canonical name.  "mixed" is 16-bit compute (fp16 or bf16) with fp32
# optimizer state; "fp32" is plain single-precision training.
_PRECISION_ALIASES: dict[str, str] = {
    "mixed": "mixed",
    "amp": "mixed",
    "fp16": "mixed",
    "bf16": "mixed",
    "fp32": "fp32",
    "float32": "fp32",
}

# optimizer -> number of fp32 state tensors it keeps per parameter.
_OPTIMIZER_STATES: dict[str, int] = {
    "adam": 2,  # exp_avg, exp_avg_sq
    "adamw": 2,
    "sgd_momentum": 1,  # momentum_buffer
    "sgd": 0,  # torch.optim.SGD with momentum=0 keeps no state
}


def canonical_stage(sharding: str) -> str:
    """Map a user's stage name ("fsdp", "ZeRO-3", "none", ...) to one of :data:`STAGES`."""
    if not isinstance(sharding, str):
        raise ValueError(f"sharding must be a string, got {sharding!r}")
    key = sharding.strip().lower().replace("-", "").replace(" ", "")
    key = {"zero_1": "zero1", "zero_2": "zero2", "zero_3": "zero3"}.get(key, key)
    return _lookup(_STAGE_ALIASES, key, "sharding stage", sharding)


def canonical_precision(precision: str) -> str:
    return _lookup(_PRECISION_ALIASES, str(precision).strip().lower(), "precision", precision)


def optimizer_state_count(optimizer: str) -> int:
    return _lookup(_OPTIMIZER_STATES, str(optimizer).strip().lower(), "optimizer", optimizer)


def _lookup(table: dict, key: str, what: str, given):
    """table[key], or a ValueError naming `what`, the value `given` and the choices."""
    try:
        return table[key]
    except KeyError:
        raise ValueError(f"unknown {what} {given!r}; choose one of: {', '.join(sorted(table))}") from None


@dataclass(frozen=True)
class BytesPerParam:
    """Bytes of each model state per parameter, before any sharding."""

    params: int
    grads: int
    optimizer: int  # K in the ZeRO paper

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer


def bytes_per_param(precision: str, optimizer: str, master_weights: bool) -> BytesPerParam:
    """Bytes per parameter of each model state.

    mixed precision: 2 (16-bit params) + 2 (16-bit grads) + K, K = 4 per fp32 optimizer
    state, plus 4 for the fp32 master copy when ``master_weights`` (Adam: K = 12, 16 in
    all; without the master copy K = 8, 12 in all).  fp32: 4 + 4 + 4 per state; the
    parameters are their own master copy, so ``master_weights`` changes nothing.
    """
    states = optimizer_state_count(optimizer)
    if canonical_precision(precision) == "fp32":
        return BytesPerParam(params=4, grads=4, optimizer=4 * states)
    master = 4 if master_weights else 0
    return BytesPerParam(params=2, grads=2, optimizer=master + 4 * states)


def element_bytes(precision: str) -> int:
    """Bytes of one activation / communicated gradient element: 2 for mixed, 4 for fp32."""
    return 4 if canonical_precision(precision) == "fp32" else 2


@dataclass(frozen=True)
class Layout:
    """How the GPUs are split: tensor-parallel degree and the ZeRO sharding group.

    ``shard_degree`` is the number of ranks a sharded state is divided over (1 for DDP);
    ``dp_degree`` the data-parallel ranks in all; ``replicas`` how many copies of each
    shard exist (dp_degree / shard_degree; > 1 only under DDP-like or hybrid stages).
    """

    num_gpus: int
    tensor_parallel: int
    dp_degree: int
    shard_degree: int
    pipeline_parallel: int = 1

    @property
    def replicas(self) -> int:
        return self.dp_degree // self.shard_degree

    @property
    def model_parallel(self) -> int:
        """GPUs one copy of the model is cut over: tensor x pipeline degree."""
        return self.tensor_parallel * self.pipeline_parallel


def layout(stage: str, num_gpus: int, tensor_parallel: int, gpus_per_node: int,
           pipeline_parallel: int = 1) -> Layout:
    """Split ``num_gpus`` into tensor x pipeline model-parallel groups and a ZeRO sharding group."""
    mp = tensor_parallel * pipeline_parallel
    if num_gpus % mp:
        raise ValueError(f"num_gpus={num_gpus} is not a multiple of tensor_parallel x pipeline_parallel="
                         f"{tensor_parallel} x {pipeline_parallel}")
    dp = num_gpus // mp
    if stage == "ddp":
        return Layout(num_gpus, tensor_parallel, dp, 1, pipeline_parallel)
    if stage != "hybrid":
        return Layout(num_gpus, tensor_parallel, dp, dp, pipeline_parallel)
    # Hybrid: shard over the GPUs of one node, replicate across nodes.
    node = min(gpus_per_node, num_gpus)
    if num_gpus % node:
        raise ValueError(f"hybrid sharding needs whole nodes: num_gpus={num_gpus} is not a "
                         f"multiple of gpus_per_node={gpus_per_node}")
    if node % mp:
        raise ValueError(f"hybrid sharding: the {node} GPUs of a node are not a multiple of "
                         f"tensor_parallel x pipeline_parallel={mp}")
    return Layout(num_gpus, tensor_parallel, dp, node // mp, pipeline_parallel)


@dataclass(frozen=True)
class StateBytes:
    """Per-GPU bytes of each model state, on the GPU and offloaded to CPU."""

    weights: float
    gradients: float
    optimizer: float
    cpu: float  # what offload moved to host memory, per GPU


def model_state_bytes(params: float, stage: str, per_param: BytesPerParam, lay: Layout,
                      offload_optimizer: bool, offload_params: bool) -> StateBytes:
    """Per-GPU bytes of params, grads and optimizer state for ``params`` parameters.

    Tensor and pipeline parallelism give each GPU ``params / (tp x pp)`` of the model; the
    stage then divides each state over ``shard_degree`` ranks or not.  Offloading moves
    the optimizer state (``offload_optimizer``), or the parameter and gradient shards too
    (``offload_params``, zero3/hybrid only, as FSDP's CPUOffload does) to host memory.
    """
    local = params / lay.model_parallel
    d = lay.shard_degree
    weights = per_param.params * local / (d if stage in PARAM_SHARDED_STAGES else 1)
    grads = per_param.grads * local / (d if stage in _GRAD_SHARDED_STAGES else 1)
    optim = per_param.optimizer * local / (d if stage in _OPTIM_SHARDED_STAGES else 1)
    cpu = 0.0
    if offload_optimizer or offload_params:
        cpu += optim
        optim = 0.0
    if offload_params:
        cpu += weights + grads
        weights = grads = 0.0
    return StateBytes(weights, grads, optim, cpu)
