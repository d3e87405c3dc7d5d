"""``pycollect demo``: the main job's command line (the job itself is pycollect.demo.ddp_job).

    pycollect demo                          2 ranks, the MLP, 20 Adam steps
    pycollect demo --model cnn --steps 30   BatchNorm buffers broadcast before each forward
    pycollect demo --world-size 3 --model gpt-tiny
    pycollect demo --fsdp                   the FSDP demo instead (pycollect.demo.fsdp_job)
    pycollect demo --paradigm all           dp, tp, pp, fsdp and hsdp side by side (pycollect.demo.paradigms)
"""
from __future__ import annotations

import argparse
from typing import Any

from ..demo import MODELS, PARADIGMS

DEFAULT_STEPS = 20


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "demo", help="train on local ranks with pycollect DDP and compare with torch DDP over Gloo",
        description="Spawn local ranks on loopback, train a small model with pycollect's DDP, "
                    "train it again with torch DDP over Gloo, and compare parameters and step times.")
    parser.add_argument("--world-size", type=int, default=2, help="ranks to spawn (default: 2)")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                        help=f"training steps per run (default: {DEFAULT_STEPS}; 6 with --paradigm)")
    parser.add_argument("--model", choices=MODELS, default="mlp", help="model to train (default: mlp)")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate (default: 3e-3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before the ranks are killed")
    parser.add_argument("--fsdp", action="store_true", help="run the FSDP demo instead (pycollect.demo.fsdp_job)")
    parser.add_argument("--paradigm", choices=(*PARADIGMS, "all"), default=None,
                        help="train the same GPT with one paradigm, or all side by side (pycollect.demo.paradigms)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    if args.paradigm:
        from ..demo.paradigms import main as paradigms_main

        chosen = PARADIGMS if args.paradigm == "all" else (args.paradigm,)
        steps = args.steps if args.steps != DEFAULT_STEPS else 6
        return paradigms_main(chosen, world_size=args.world_size, steps=steps, timeout=max(args.timeout, 300.0))
    if args.fsdp:
        from ..demo.fsdp_job import main as fsdp_main

        return int(fsdp_main(world_size=args.world_size, steps=args.steps) or 0)
    from ..demo.ddp_job import main as ddp_main

    return ddp_main(world_size=args.world_size, steps=args.steps, model=args.model, lr=args.lr, seed=args.seed,
                    timeout=args.timeout)
