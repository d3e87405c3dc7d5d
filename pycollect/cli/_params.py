"""The cost-model parameter flags that `pycollect model` and `pycollect memory` share:
argparse only; what they mean is pycollect.costmodel.check.params_with."""
from __future__ import annotations

from ..costmodel import Params
from ..costmodel.check import params_with


def add_param_arguments(p, file_flags=("--params", "--model-params")) -> None:
    """--params FILE and --alpha/--beta/--gamma/--overhead overrides (also `pycollect memory`,
    where --params is the model's size and the file is --model-params)."""
    g = p.add_argument_group("model parameters (default: PYCOLLECT_MODEL, else ~/.cache/pycollect/model.json, "
                             "else built-in)")
    g.add_argument(*file_flags, dest="params_file", default=None, metavar="JSON",
                   help="parameters written by `pycollect model --fit`")
    g.add_argument("--alpha", default=None, help="latency per message, e.g. 5us")
    g.add_argument("--beta", default=None, help="link bandwidth, e.g. 400gbit or 50GB/s")
    g.add_argument("--gamma", default=None, help="reduction bandwidth, e.g. 100GB/s")
    g.add_argument("--overhead", default=None, help="fixed cost per call, e.g. 20us")
    g.add_argument("--overlap", type=float, default=None,
                   help="1: transfers and reductions overlap (a NIC moves the bytes), 0: one CPU does both")


def params_from_args(args) -> Params:
    """The parameters the flags of add_param_arguments name (costmodel.check.params_with)."""
    return params_with(args.params_file, args.alpha, args.beta, args.gamma, args.overhead, args.overlap)


def params_given(args) -> bool:
    """Whether any flag of add_param_arguments was given (a file or a value)."""
    return any(v is not None for v in (args.params_file, args.alpha, args.beta, args.gamma, args.overhead,
                                        args.overlap))
