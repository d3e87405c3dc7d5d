#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the whole test suite on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Two workers (pytest-xdist), a module to a worker at a time (its pools stay shared): the
# suite is mostly ranks starting and waiting, so two overlap well on two cores.
exec .venv/bin/python -m pytest -q -n 2 --dist loadscope "$@"
