"""A torch.distributed backend that moves nothing: what torch's own dispatch of a call costs.

    import null_backend; null_backend.register()        # once per process
    pg = dist.new_group(backend="null")                  # every rank, as any group
    dist.all_reduce(t, group=pg)                         # torch's checks and dispatch, then done

Each method returns at once a Work that is already settled (pycollect's TorchWork.settled,
the same object the "pycollect" backend returns for a call its engine finished on the
caller's thread), so a call on this group costs torch's Python and C++ around the backend
and nothing else. bench/p2p.py times the same calls on it beside "pycollect" and Gloo:
the part of a call through torch that no backend can remove.

Results are not computed (a receive leaves its tensor as it was); it is a measuring stick,
never registered outside the benchmarks.
"""
from __future__ import annotations

import torch.distributed as dist

from pycollect.torch_backend.work import TorchWork

NAME = "null"


def _done(method: str, result) -> TorchWork:
    return TorchWork.settled(method, list(result), None)


class NullProcessGroup(dist.ProcessGroup):
    """Every call torch dispatches to a backend, done as soon as it is issued."""

    _name = ""

    def getBackendName(self) -> str:  # noqa: N802 (torch's C++ names)
        return NAME

    def getGroupName(self) -> str:  # noqa: N802
        return self._name

    def setGroupName(self, name: str) -> None:  # noqa: N802
        self._name = name

    def allreduce(self, tensors, opts=None):
        return _done("allreduce", tensors)

    def broadcast(self, tensors, opts=None):
        return _done("broadcast", tensors)

    def reduce(self, tensors, opts=None):
        return _done("reduce", tensors)

    def barrier(self, opts=None):
        return _done("barrier", [])

    def all_gather_single(self, output, input, opts=None):
        return _done("all_gather_single", [output])

    def reduce_scatter_single(self, output, input, opts=None):
        return _done("reduce_scatter_single", [output])

    _allgather_base = all_gather_single  # torch's older names for the two
    _reduce_scatter_base = reduce_scatter_single

    def gather(self, output_tensors, input_tensors, opts=None):
        return _done("gather", [t for row in output_tensors for t in row])

    def scatter(self, output_tensors, input_tensors, opts=None):
        return _done("scatter", output_tensors)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return _done("alltoall_base", [output])

    all_to_all_single = alltoall_base

    def send(self, tensors, dstRank: int, tag: int = 0):  # noqa: N803
        return _done("send", tensors)

    def recv(self, tensors, srcRank: int, tag: int = 0):  # noqa: N803
        return TorchWork.settled("recv", list(tensors), None, lambda: srcRank)

    def recv_anysource(self, tensors, tag: int = 0):
        peer = 1 - self.rank()  # two ranks: the other one
        return TorchWork.settled("recv_anysource", list(tensors), None, lambda: peer)


def _create(options, backend_options=None) -> NullProcessGroup:
    return NullProcessGroup(options.group_rank, options.group_size)


def register() -> None:
    """Make "null" a torch.distributed backend for CPU tensors (once per process)."""
    if NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["cpu"])
