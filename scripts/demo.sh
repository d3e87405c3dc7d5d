#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the main job: a multi-rank run on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/pycollect demo "$@"
