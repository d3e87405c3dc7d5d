"""Validation of user buffers (torch CPU and CUDA tensors, numpy arrays).

Everything here runs before anything is sent: a wrong dtype, a non-contiguous
tensor, a read-only output or a size mismatch raises a clear exception and the
group is untouched. A CUDA tensor's Buffer names its device (`device`); which
path it takes (staging through pinned memory) is decided in _device.py.
"""
from __future__ import annotations

import sys
from typing import Any, Optional, Sequence

import numpy as np

from . import _C
from ._torch_build import prebuilt
from .types import DTYPE_CODES, SUPPORTED_DTYPES, is_torch_tensor


class Buffer:
    """A validated contiguous buffer: its address, element count and dtype (a plain class
    with slots: built on every call, where a frozen dataclass costs half a microsecond)."""

    __slots__ = ("obj", "address", "numel", "dtype", "device", "code")

    def __init__(self, obj: Any, address: int, numel: int, dtype: str, device: Optional[int] = None):
        self.obj = obj  # the tensor / array (kept alive while the engine uses it)
        self.address = address
        self.numel = numel
        self.dtype = dtype
        self.device = device  # CUDA device index; None: host memory
        self.code = DTYPE_CODES[dtype]

    def __repr__(self) -> str:
        where = "cpu" if self.device is None else f"cuda:{self.device}"
        return f"Buffer({self.dtype} x {self.numel} at {self.address:#x} on {where})"


def as_buffer(x, what: str, writable: bool = False) -> Buffer:
    """Validate `x` (a torch CPU or CUDA tensor, or a numpy array) and return its Buffer.

    `what` names the argument in error messages, e.g. "all_reduce(tensor)".
    """
    torch_kinds = _TORCH or _torch_kinds()
    if torch_kinds and isinstance(x, torch_kinds[0]):
        # The common case costs a few attribute reads (a small call's whole budget is
        # microseconds); the slower questions are asked only when one of them fails (a
        # quantized dtype has no name here, so it is refused with the others).
        name = _TORCH_NAMES.get(x.dtype) if x.is_cpu and x.layout is torch_kinds[1] else None
        if name is None:
            if x.is_cuda:
                return _cuda_buffer(x, what)
            _refuse_torch(x, what)
        if not x.is_contiguous():
            raise ValueError(f"{what}: tensor is not contiguous (shape {tuple(x.shape)}, stride {x.stride()}); call .contiguous()")
        # Memory torch allocated itself is writable; only foreign memory (from_numpy,
        # frombuffer: non-resizable storage) may be a read-only mapping.
        if writable and not x.untyped_storage().resizable() and not _C.is_writable(x.data_ptr(), x.numel() * x.element_size()):
            raise ValueError(f"{what}: tensor's memory is read-only (e.g. a read-only memmap) but is written "
                             "by this call")
        address = x.data_ptr()
        if address % x.element_size():
            _refuse_misaligned(what, "tensor", address, x.element_size(), ".clone()")
        return Buffer(x, address, x.numel(), name)
    if isinstance(x, np.ndarray):
        span = _C.array_span(x, writable)  # (address, numel, code): the plain case, in one crossing
        if span is not None:
            return Buffer(x, span[0], span[1], _DTYPE_NAMES[span[2]])
        # Not plain: asked again here, where each refusal has its message (register_buffers.cc).
        name = x.dtype.name
        if name not in DTYPE_CODES:
            raise TypeError(f"{what}: dtype {x.dtype} is not supported; use one of {', '.join(SUPPORTED_DTYPES)}")
        if not x.flags.c_contiguous:
            raise ValueError(f"{what}: array is not C-contiguous (shape {x.shape}, strides {x.strides}); use np.ascontiguousarray")
        if writable and not x.flags.writeable:
            raise ValueError(f"{what}: array is read-only but is written by this call")
        if not x.flags.aligned:
            _refuse_misaligned(what, "array", x.ctypes.data, x.itemsize, ".copy()")
        return Buffer(x, x.ctypes.data, x.size, name)
    raise TypeError(f"{what}: expected a torch.Tensor or numpy.ndarray, got {type(x).__name__}")


def _refuse_misaligned(what: str, kind: str, address: int, itemsize: int, fix: str) -> None:
    """Data not aligned to its element size (numpy and torch.frombuffer allow an odd offset):
    the reduction kernels read and write whole elements in place, so it is refused before
    anything is sent; an aligned copy (`fix`) is what to pass instead."""
    raise ValueError(f"{what}: {kind}'s data at {address:#x} is not aligned to its {itemsize}-byte elements "
                     f"(an odd offset into a buffer); pass an aligned copy ({fix})")


def _cuda_buffer(x, what: str) -> Buffer:
    """A CUDA tensor's Buffer (device memory: no read-only check applies)."""
    name = _TORCH_NAMES.get(x.dtype) if x.layout is _strided() else None
    if name is None:
        _refuse_torch(x, what)
    if not x.is_contiguous():
        raise ValueError(f"{what}: tensor is not contiguous (shape {tuple(x.shape)}, stride {x.stride()}); call .contiguous()")
    return Buffer(x, x.data_ptr(), x.numel(), name, x.device.index)


_TORCH_NAMES: dict = {}  # torch.dtype -> our dtype name, filled on first use
_DTYPE_NAMES = {code: name for name, code in DTYPE_CODES.items()}  # the engine's dtype code -> name


_TORCH: list = []  # [torch.Tensor, torch.strided] once torch is imported


def _torch_kinds() -> list:
    """_TORCH, filled (with _TORCH_NAMES) once the process has imported torch; empty before:
    nothing can be a tensor then, and pycollect never imports torch to ask."""
    torch = sys.modules.get("torch")
    if torch is not None and not _TORCH:
        for name in DTYPE_CODES:
            _TORCH_NAMES[getattr(torch, name)] = name
        _TORCH.extend((torch.Tensor, torch.strided))
        # The API's fast calls read a CPU tensor's buffer in C++ from here on (host_span.h):
        # its fields, through pycollect._torch where it was built for this torch, else its attributes.
        _C.know_torch(torch.Tensor, torch.strided, {t: DTYPE_CODES[name] for t, name in _TORCH_NAMES.items()})
        try:
            native = prebuilt(torch)
        except ImportError:  # its attributes serve; the backend, when used, says what is wrong
            native = None
        if native is not None:
            _C.know_tensor_reader(native.tensor_reader)
    return _TORCH


def _strided():
    return (_TORCH or _torch_kinds())[1]


def _refuse_torch(x, what: str) -> None:
    """The error for a torch tensor the fast path did not accept."""
    if x.device.type not in ("cpu", "cuda"):
        raise NotImplementedError(
            f"{what}: tensor is on {x.device}; pycollect moves CPU and CUDA tensors only: call .cpu() first"
        )
    if x.is_sparse or x.layout is not _strided() or getattr(x, "is_quantized", False):
        raise TypeError(f"{what}: sparse and quantized tensors are not supported")
    raise TypeError(f"{what}: dtype {x.dtype} is not supported; use one of {', '.join(SUPPORTED_DTYPES)}")


def check_same_dtype(a: Buffer, b: Buffer, what: str) -> None:
    if a.dtype != b.dtype:
        raise TypeError(f"{what}: dtypes differ ({a.dtype} vs {b.dtype})")


def check_numel(buf: Buffer, expected: int, what: str) -> None:
    if buf.numel != expected:
        raise ValueError(f"{what}: has {buf.numel} elements, expected {expected}")


def check_list(items: Sequence, size: int, what: str) -> None:
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"{what}: expected a list of {size} tensors, got {type(items).__name__}")
    if len(items) != size:
        raise ValueError(f"{what}: list has {len(items)} entries, the group has {size} ranks")


def empty_like_flat(x, numel: int):
    """A new contiguous 1-D buffer of the same library and dtype as `x`."""
    if is_torch_tensor(x):
        import torch

        return torch.empty(numel, dtype=x.dtype, device=x.device)
    return np.empty(numel, dtype=x.dtype)


def concat_flat(items):
    if is_torch_tensor(items[0]):
        import torch

        return torch.cat([t.reshape(-1) for t in items])
    return np.concatenate([np.asarray(a).reshape(-1) for a in items])


def copy_into(dst, src) -> None:
    """dst[...] = src for same-library, same-numel buffers (src is 1-D). On CUDA the copy is
    finished before this returns (it may run on another thread than the caller's stream)."""
    if is_torch_tensor(dst):
        dst.copy_(src.view(dst.shape))
        if dst.is_cuda:
            import torch

            torch.cuda.current_stream(dst.device).synchronize()
    else:
        np.copyto(dst, src.reshape(dst.shape))
