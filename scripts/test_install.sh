#!/usr/bin/env bash
# The install tier: the user's path from a copy of this tree (tests/test_install.py): a new
# virtual environment with torch, a plain `pip install .` (isolated: no torch backend built),
# then a 2-rank DDP step under torchrun, the backend compiled on first use. A few minutes of
# CPU, so not part of scripts/test.sh; .ci/run runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
TEST_INSTALL=1 exec .venv/bin/python -m pytest -q tests/test_install.py "$@"
