#!/usr/bin/env bash
# Creates .venv (if missing) with torch (CPU build), the build tools and the test
# tools, then builds and installs pycollect into it (editable). Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
# torch 2.13.0 CPU: on these machines pip takes it from local disk (no multi-GB CUDA download).
.venv/bin/python -m pip install -q "torch==2.13.0" numpy pytest pytest-xdist matplotlib expecttest \
  "scikit-build-core>=0.10" "pybind11>=2.12" cmake ninja
.venv/bin/python -m pip install -q --no-build-isolation -e . 
# Byte-compile our own sources once: an editable install leaves them as .py, and where
# PYTHONDONTWRITEBYTECODE is set (as on these machines) every process that imports them -
# each rank, each torchrun worker, each CLI run of the test suite - compiled them again.
.venv/bin/python -m compileall -q pycollect tests bench scripts >/dev/null
.venv/bin/python -c "import pycollect, pycollect._C; print('pycollect', pycollect.__version__, 'ready')"
