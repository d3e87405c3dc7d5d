#!/usr/bin/env bash
# The GPU check, in one command, on a machine with an NVIDIA GPU:
#
#   bash scripts/gpu_check.sh            # OUT=/some/dir keeps gpu_check.json and the table
#
# 1. builds and installs pycollect with this machine's python3, offline and within 180 s (the torch backend compiles against torch's headers: on 16 cores about a minute)
#    (pip install --no-index --no-build-isolation --no-deps .: pybind11,
#    scikit-build-core, cmake, ninja and torch must already be installed);
# 2. runs scripts/gpu_check.py (plain Python, no pytest needed) from outside the source
#    tree, so the installed package is the one imported. Its steps (smoke, correctness,
#    torch_backend, training, max_connections, nccl, bench) each run in a process of
#    their own with a limit of 150 s and group timeouts of 45 s (the smoke all-reduce's:
#    10 s); a step that fails or hangs prints FAIL and the next one runs; the JSON is
#    written after every step. All steps together get 420 s, the whole script 620 s.
# Extra arguments go to gpu_check.py: --only STEPS, --limit S, --step-limit STEP=S,
# --budget S, --no-bench.
# On a machine without a GPU, `bash scripts/gpu_check.sh --dry-run` runs the same steps on
# CPU tensors staged through the engine's host device.
set -uo pipefail

PY=${PYTHON:-python3}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
START=$(date +%s)

echo "# gpu_check: $($PY --version 2>&1), $(command -v "$PY")"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

echo "# building and installing pycollect (offline)"
# pipefail: pip's status (124 when the timeout stopped it), not tail's
if ! (cd "$ROOT" && timeout 180 $PY -m pip install --no-index --no-build-isolation --no-deps -q . 2>&1 | tail -20); then
  echo "FAIL build: pip install --no-index --no-build-isolation --no-deps . failed or took over 180 s"
  exit 1
fi
if ! (cd /tmp && $PY -c "import pycollect._C") ; then
  echo "FAIL build: the installed pycollect has no engine (pycollect._C)"
  exit 1
fi
# The torch backend is built against this machine's torch (cmake/torch_backend.cmake).
if ! (cd /tmp && $PY -c "import torch; from pycollect.torch_backend import native; native.load(); print('torch backend built against torch', native.built_against())") ; then
  echo "FAIL build: the installed pycollect has no torch backend for this torch (pycollect._torch)"
  exit 1
fi
echo "PASS build in $(( $(date +%s) - START )) s"

cd /tmp || exit 1
timeout 440 $PY "$ROOT/scripts/gpu_check.py" "$@"
rc=$?
if [ $rc -eq 124 ]; then
  echo "FAIL gpu_check: stopped after 440 s"
fi
echo "# total $(( $(date +%s) - START )) s"
exit $rc
