#!/usr/bin/env bash
# What the trace hooks cost when tracing is off (issue 14: < 1 % on a 64 MiB all-reduce).
#
# Builds pycollect twice, the same way, into two throw-away environments under
# build/trace_overhead/: "hooks" (the normal build) and "nohooks" (-DPYCOLLECT_TRACE_HOOKS=OFF:
# every hook compiled away, trace/hooks.h). Each environment reads torch from .venv through
# a .pth line, and neither sees the editable install. Then scripts/trace_overhead.py runs
# the benchmark in alternating rounds (hooks, nohooks, hooks with tracing on, in a rotating
# order) and prints the medians and ratios.
#
#   bash scripts/trace_overhead.sh [rounds] [size]     # default 9 rounds, 64M; ~10 min with the builds
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
PY=.venv/bin/python
ROOT=build/trace_overhead
SITE_MAIN=$($PY -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
for variant in hooks nohooks; do
  flag=ON; [ "$variant" = nohooks ] && flag=OFF
  env_dir=$ROOT/$variant
  # venv's python is the base interpreter; its site-packages gets the build and a .pth to .venv's
  # (a .pth line adds a path, and .pth files inside it are not run: the editable finder stays out).
  [ -x "$env_dir/bin/python" ] || "$($PY -c 'import sys; print(sys._base_executable)')" -m venv --without-pip "$env_dir"
  site=$("$env_dir/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "$SITE_MAIN" > "$site/_main_venv.pth"
  echo "# building pycollect with PYCOLLECT_TRACE_HOOKS=$flag into $env_dir"
  $PY -m pip install -q --no-build-isolation --no-deps --upgrade --target "$site" \
    -C cmake.define.PYCOLLECT_TRACE_HOOKS=$flag -C build-dir="$ROOT/build-$variant" .
done
$PY scripts/trace_overhead.py --hooks "$ROOT/hooks/bin/python" --nohooks "$ROOT/nohooks/bin/python" \
  --rounds "${1:-9}" --size "${2:-64M}"
