"""Activation memory of a transformer, after Korthikanti et al. 2022.

"Reducing Activation Recomputation in Large Transformer Models" (arXiv:2205.05198),
section 4 and table 2, counts the bytes one transformer layer keeps for its backward
pass, for sequence length s, micro-batch b, hidden size h, a attention heads and
tensor-parallel degree t, with 16-bit activations and 1-byte dropout masks:

    no parallelism                  s·b·h·(34 + 5·a·s/h)
    tensor parallel                 s·b·h·(10 + 24/t + 5·a·s/(h·t))
    tensor + sequence parallel      s·b·h·(34 + 5·a·s/h) / t
    selective recomputation         s·b·h·(10 + 24/t), or 34·s·b·h/t with sequence parallel
    full recomputation              2·s·b·h  (only each layer's input is kept)

Where the 34 and the 5 come from, per layer, with e bytes per activation element:
attention keeps (5e + 1)·sbh (its input, Q, K, V, the projection input, a dropout mask)
and (2e + 1)·a·s²·b (softmax output, its dropout mask, the dropped-out scores); the MLP
keeps (9e + 1)·sbh (its input, the 4h-wide GELU input and output, a dropout mask); the two
layer norms 2e·sbh.  That is (16e + 2)·sbh + (2e + 1)·a·s²·b: with e = 2 exactly the
paper's 34 and 5.  Of the 16e + 2, the 4e + 2 held by layer norms, the block inputs
and the two dropout masks stay whole under tensor parallelism (the paper's 10) and the
12e are split (the paper's 24).  This module evaluates the same terms for any e, so
fp32 training (e = 4) gets s·b·h·(66 + 9·a·s/h) instead of a guess.

Not counted: the embedding and the output layer / loss (section 4.3 of the paper),
pipeline-parallel in-flight micro-batches, and framework workspace.
"""

from __future__ import annotations

from dataclasses import dataclass

RECOMPUTE_MODES: tuple[str, ...] = ("none", "selective", "full")


@dataclass(frozen=True)
class ModelShape:
    """The shape of a decoder-only transformer, for activation and buffer estimates.

    ``micro_batch`` is the number of sequences one GPU processes at once.
    """

    num_layers: int
    hidden_size: int
    num_heads: int
    seq_len: int
    micro_batch: int = 1

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "num_heads", "seq_len", "micro_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size={self.hidden_size} is not a multiple of "
                             f"num_heads={self.num_heads}")

    @property
    def layer_params(self) -> int:
        """Parameters of one transformer layer: 12h² weights + 13h biases and norms."""
        h = self.hidden_size
        return 12 * h * h + 13 * h


def layer_activation_bytes(shape: ModelShape, recompute: str = "none",
                           tensor_parallel: int = 1, sequence_parallel: bool = False,
                           element_bytes: int = 2) -> float:
    """Bytes one transformer layer keeps for backward, on one GPU (see module doc)."""
    if recompute not in RECOMPUTE_MODES:
        raise ValueError(f"unknown recompute mode {recompute!r}; choose one of: "
                         f"{', '.join(RECOMPUTE_MODES)}")
    if sequence_parallel and tensor_parallel == 1:
        # Sequence parallelism splits along the tensor-parallel group; with t = 1 it is a no-op.
        sequence_parallel = False
    s, b, h, a = shape.seq_len, shape.micro_batch, shape.hidden_size, shape.num_heads
    t, e = tensor_parallel, element_bytes
    sbh = s * b * h
    if recompute == "full":
        return e * sbh  # the paper's 2·s·b·h: each layer's 16-bit input
    whole = 4 * e + 2  # layer norms, block inputs and dropout masks (the paper's 10)
    split = 12 * e  # attention and MLP internals split by tensor parallelism (24)
    scores = 0.0 if recompute == "selective" else (2 * e + 1) * a * s / h  # 5·a·s/h
    if sequence_parallel:
        return sbh * (whole + split + scores) / t
    return sbh * (whole + split / t + scores / t)


def activation_bytes(shape: ModelShape, recompute: str = "none", tensor_parallel: int = 1,
                     sequence_parallel: bool = False, element_bytes: int = 2) -> float:
    """Bytes all ``shape.num_layers`` layers keep for backward, on one GPU."""
    return shape.num_layers * layer_activation_bytes(
        shape, recompute, tensor_parallel, sequence_parallel, element_bytes)
