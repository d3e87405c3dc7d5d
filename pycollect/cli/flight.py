"""`pycollect flight DIR`: read the flight records every rank wrote when a group failed
(pycollect.flight) and say who is behind and where."""
from __future__ import annotations

import sys

from .. import flight


def register(subparsers) -> None:
    p = subparsers.add_parser("flight", help="read the flight records of a failed group: who is behind, and where",
                              description="Reads every rank's flight record in DIR (written when a call failed: "
                                          "PYCOLLECT_FLIGHT_DIR, or the directory the error names) and prints, per "
                                          "group, the call it is stuck at, what each rank was doing, and the "
                                          "culprit: a rank that never started the call or wrote no record.")
    p.add_argument("directory", metavar="DIR", help="the directory of flight records")
    p.set_defaults(func=run)


def run(args) -> int:
    try:
        lines = flight.report(args.directory)
    except ValueError as e:
        print(f"pycollect flight: {e}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0
