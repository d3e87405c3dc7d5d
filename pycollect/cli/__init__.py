"""The `pycollect` command: one subcommand per area, each registered by its module.

    pycollect demo      the main job: a multi-rank run on this machine
    pycollect bench     nccl-tests-style benchmark against Gloo
    pycollect memory    memory and communication planner
    pycollect trace     one collective traced step by step: Perfetto JSON and a PNG timeline
    pycollect model     the cost model: fit, validate, what-if
    pycollect flight    the flight records of a failed group: who is behind, and where
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional

# Each module exposes register(subparsers), which adds its subcommand with
# set_defaults(func=run), run(args) -> exit code.
SUBCOMMANDS = ("pycollect.cli.demo", "pycollect.cli.bench", "pycollect.cli.memory", "pycollect.cli.trace",
               "pycollect.cli.model", "pycollect.cli.flight")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pycollect", description="pycollect: TCP collectives engine")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
