"""DeepSpeed's own model-state memory estimators, reproduced formula for formula.

DeepSpeed ships ``estimate_zero2_model_states_mem_needs`` (in
``deepspeed/runtime/zero/stage_1_and_2.py``) and ``estimate_zero3_model_states_mem_needs``
(in ``deepspeed/runtime/zero/stage3.py``).  Their accounting differs from the ZeRO paper:
18 bytes per parameter are sharded (16-bit grads 2, fp32 grads 4, fp32 params 4, Adam
moments 8) and, under ZeRO-3, 4 bytes per parameter of the largest layer are kept whole
on every GPU.  A CPU buffer factor (1.5 by default) pads the host figures.

With P total parameters, L the largest layer's parameters, G = nodes x GPUs per node,
n = GPUs per node, f = additional_buffer_factor:

    ZeRO-2                      GPU bytes               CPU bytes
      no offload                2P + int(18P/G)         4·P·n·f
      optimizer offload         2P                      P·max(4G, 16)·f

    ZeRO-3                      GPU bytes               CPU bytes (zero_init / not)
      no offload                4L + int(18P/G)         4·L·n·f        / 4·P·n·f
      optimizer offload         4L + int(2P/G)          P·16/nodes·f   / P·max(4n, 16/nodes)·f
      optimizer + params        4L                      P·18/nodes·f   / P·max(4n, 18/nodes)·f

Both results are truncated to whole bytes the way DeepSpeed truncates them.  Unlike
DeepSpeed, whose functions default to ``cpu_offload=True``, these default to no offload.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeepSpeedEstimate:
    """Bytes per GPU and per node's CPU, as DeepSpeed's estimator reports them."""

    gpu_bytes: int
    cpu_bytes: int
    largest_layer_bytes: int = 0  # ZeRO-3 only: 4 bytes x largest layer's parameters

    @property
    def gpu_gb(self) -> float:
        return self.gpu_bytes / 1e9

    @property
    def cpu_gb(self) -> float:
        return self.cpu_bytes / 1e9


def _check_counts(total_params: int, num_gpus_per_node: int, num_nodes: int,
                  additional_buffer_factor: float) -> None:
    if isinstance(total_params, bool) or not isinstance(total_params, int) or total_params < 1:
        raise ValueError(f"total_params must be a positive integer count, got {total_params!r}")
    for name, value in (("num_gpus_per_node", num_gpus_per_node), ("num_nodes", num_nodes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not additional_buffer_factor > 0:
        raise ValueError(f"additional_buffer_factor must be > 0, got {additional_buffer_factor!r}")


def deepspeed_zero2_estimate(total_params: int, num_gpus_per_node: int = 1, num_nodes: int = 1,
                             cpu_offload: bool = False,
                             additional_buffer_factor: float = 1.5) -> DeepSpeedEstimate:
    """DeepSpeed's ``estimate_zero2_model_states_mem_needs`` (see the module table)."""
    _check_counts(total_params, num_gpus_per_node, num_nodes, additional_buffer_factor)
    gpus = num_nodes * num_gpus_per_node
    p, f = total_params, additional_buffer_factor
    if cpu_offload:
        gpu = 2 * p  # only the 16-bit parameters stay on the GPU
        cpu = p * max(4 * gpus, 16) * f
    else:
        gpu = 2 * p + int(18 * p / gpus)
        cpu = p * 4 * num_gpus_per_node * f  # fp32 load of the model, once per GPU
    return DeepSpeedEstimate(gpu_bytes=int(gpu), cpu_bytes=int(cpu))


def deepspeed_zero3_estimate(total_params: int, largest_layer_params: int,
                             num_gpus_per_node: int = 1, num_nodes: int = 1,
                             cpu_offload: bool = False, cpu_offload_params: bool = False,
                             zero_init: bool = True,
                             additional_buffer_factor: float = 1.5) -> DeepSpeedEstimate:
    """DeepSpeed's ``estimate_zero3_model_states_mem_needs`` (see the module table).

    As in DeepSpeed, ``cpu_offload_params`` only counts together with ``cpu_offload``
    (the optimizer offload); here asking for it alone is an error rather than ignored.
    """
    _check_counts(total_params, num_gpus_per_node, num_nodes, additional_buffer_factor)
    if (isinstance(largest_layer_params, bool) or not isinstance(largest_layer_params, int)
            or not 0 <= largest_layer_params <= total_params):
        raise ValueError(f"largest_layer_params must be an integer in [0, total_params], "
                         f"got {largest_layer_params!r}")
    if cpu_offload_params and not cpu_offload:
        raise ValueError("cpu_offload_params needs cpu_offload (DeepSpeed offloads parameters "
                         "only together with the optimizer)")
    gpus = num_nodes * num_gpus_per_node
    per_node = 1 / num_nodes  # DeepSpeed's gpus_factor: each node's share of the states
    p, n, f = total_params, num_gpus_per_node, additional_buffer_factor
    largest = 4 * largest_layer_params  # one gathered layer, kept whole
    if cpu_offload and cpu_offload_params:
        gpu = largest
        cpu = p * 18 * per_node * f if zero_init else p * max(4 * n, 18 * per_node) * f
    elif cpu_offload:
        gpu = largest + int(2 * p / gpus)  # the 16-bit parameter shard stays
        cpu = p * 16 * per_node * f if zero_init else p * max(4 * n, 16 * per_node) * f
    else:
        gpu = largest + int(18 * p / gpus)
        cpu = largest_layer_params * 4 * n * f if zero_init else p * 4 * n * f
    return DeepSpeedEstimate(gpu_bytes=int(gpu), cpu_bytes=int(cpu),
                             largest_layer_bytes=largest)
