#!/usr/bin/env bash
# The framework tier (docs/frameworks.md): DeepSpeed, Accelerate, Ray Train and Lightning on
# the "pycollect" backend, each against Gloo (tests/test_frameworks.py), and torchft's own
# tests on pycollect's torchft group beside its Gloo one (tests/test_torchft.py). Not part of
# scripts/test.sh: the installs take minutes. Sets up like scripts/setup.sh, installs the
# frameworks into .venv (torch and numpy pinned to what is installed: never replaced),
# builds DeepSpeed's CPU ops once (cached in ~/.cache/torch_extensions or
# $TORCH_EXTENSIONS_DIR), then runs the tests. A framework that cannot be installed is
# reported here and its test skipped with the reason. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=.venv/bin/python
start=$SECONDS

# torch and numpy exactly as installed: the frameworks may ask for others, pip must refuse.
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
"$PY" -m pip freeze | grep -iE '^(torch|numpy)==' > "$constraints"
echo "test_frameworks: pinned $(tr '\n' ' ' < "$constraints")"

FRAMEWORKS=(deepspeed accelerate "ray[train]" lightning torchft==0.2.0 parameterized)
# About 2.5 min the first time; 2 s once they are there.
if ! "$PY" -m pip install -q -c "$constraints" "${FRAMEWORKS[@]}"; then
  # One at a time, so that one that cannot be installed costs only its own test.
  for f in "${FRAMEWORKS[@]}"; do
    "$PY" -m pip install -q -c "$constraints" "$f" ||
      echo "test_frameworks: NOT INSTALLED: $f (pip's error above); its test is skipped"
  done
fi
"$PY" -m pip freeze | grep -iE '^(torch|numpy|deepspeed|accelerate|ray|lightning|torchft)==' | tr '\n' ' '
echo
echo "test_frameworks: installs $((SECONDS - start)) s"

# DeepSpeed compiles cpu_adam and the CPU accelerator's shm comm op on first use (about
# 2 min each on 2 cores); build them here, once, so that no test waits on a compile.
if "$PY" -m pip show -q deepspeed >/dev/null 2>&1; then
  t=$SECONDS
  DS_ACCELERATOR=cpu "$PY" -c "
from deepspeed.accelerator import get_accelerator
for op in ('CPUAdamBuilder', 'ShareMemCommBuilder'):
    get_accelerator().create_op_builder(op).load(verbose=False)
" || echo "test_frameworks: DeepSpeed's ops did not build (error above; the DeepSpeed tests will fail)"
  echo "test_frameworks: DeepSpeed ops $((SECONDS - t)) s"
fi

t=$SECONDS
rc=0
TEST_FRAMEWORKS=1 "$PY" -m pytest -q -rs tests/test_frameworks.py tests/test_torchft.py "$@" || rc=$?
echo "test_frameworks: tests $((SECONDS - t)) s, total $((SECONDS - start)) s (setup.sh not counted)"
exit $rc
