#!/usr/bin/env bash
# The GPU check of issue 12, in one command, on a machine with an NVIDIA GPU:
#
#   bash scripts/gpu_check.sh            # OUT=/some/dir to keep the table and JSON
#
# 1. builds and installs pycollect with this machine's python3, offline
#    (pip install --no-build-isolation --no-deps .: pybind11, scikit-build-core, cmake,
#    ninja and torch must already be installed; nothing is downloaded);
# 2. runs scripts/gpu_check.py (plain Python, no pytest needed) from outside the source
#    tree, so the installed package is the one imported: CUDA correctness (2 ranks on
#    cuda:0, every call x dtypes x ops against a CPU reference and Gloo, bit-identical
#    across ranks, stream order), one DDP and one FSDP step against torch DDP/Gloo, and
#    the benchmark 1 MiB - 256 MiB against Gloo and pycollect's CPU-tensor busbw;
# 3. prints PASS/FAIL lines and one table; with $OUT set, writes gpu_check.txt and
#    gpu_check.json there. Stops after 470 s (the check is meant to take under 8 minutes).
# On a machine without a GPU, `bash scripts/gpu_check.sh --dry-run` runs the same steps on
# CPU tensors staged through the engine's host device.
set -uo pipefail

PY=${PYTHON:-python3}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
START=$(date +%s)

echo "# gpu_check: $($PY --version 2>&1), $(command -v "$PY")"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

echo "# building and installing pycollect (offline)"
if ! (cd "$ROOT" && $PY -m pip install --no-build-isolation --no-deps -q . 2>&1 | tail -20); then
  echo "FAIL build: pip install --no-build-isolation --no-deps . failed"
  exit 1
fi
if ! (cd /tmp && $PY -c "import pycollect._C") ; then
  echo "FAIL build: the installed pycollect has no engine (pycollect._C)"
  exit 1
fi
echo "PASS build in $(( $(date +%s) - START )) s"

cd /tmp || exit 1
timeout 470 $PY "$ROOT/scripts/gpu_check.py" "$@"
rc=$?
if [ $rc -eq 124 ]; then
  echo "FAIL gpu_check: stopped after 470 s"
fi
echo "# total $(( $(date +%s) - START )) s"
exit $rc
