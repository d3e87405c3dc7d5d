#!/usr/bin/env bash
# What the trace hooks cost with tracing off (the target: < 1 % on a 64 MiB all-reduce;
# docs/traces.md quotes the figures).
#
# Builds this checkout's extension twice with the same flags: "hooks" (as shipped) and
# "nohooks" (-DPYCOLLECT_TRACE_HOOKS=OFF: every hook compiled away, trace/hooks.h), packs
# each with the Python package, and times bench/trace_overhead.py with each in ABBA
# order (python -S and PYTHONPATH pick the package, bypassing the editable install);
# then "flag" launches (tracing off and on in the same processes). Ends with the bound
# below the noise: ns per hook (bench/hook_cost.cc) x hooks per call (counted from the
# trace of the flag launches).
#
#   bash bench/trace_overhead.sh            # ROUNDS=6 ABBA rounds by default; ~5 min with the builds
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
ROUNDS=${ROUNDS:-6}
PY=$PWD/.venv/bin/python
SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
WORK=$PWD/build/trace_overhead
mkdir -p "$WORK"
for v in hooks nohooks; do
  flag=$([ $v = hooks ] && echo ON || echo OFF)
  echo "# building with PYCOLLECT_TRACE_HOOKS=$flag"
  .venv/bin/cmake -S . -B "$WORK/$v-build" -G Ninja -DCMAKE_MAKE_PROGRAM="$PWD/.venv/bin/ninja" \
    -DPython_EXECUTABLE="$PY" -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)" -DCMAKE_BUILD_TYPE=Release \
    -DPYCOLLECT_TRACE_HOOKS=$flag > /dev/null
  .venv/bin/ninja -C "$WORK/$v-build" > /dev/null
  rm -rf "$WORK/$v-pkg" && mkdir -p "$WORK/$v-pkg"
  cp -r pycollect "$WORK/$v-pkg/"
  cp "$WORK/$v-build"/_C*.so "$WORK/$v-pkg/pycollect/"
done
run() { PYTHONPATH=$WORK/$1-pkg:$SITE "$PY" -S bench/trace_overhead.py "${@:2}"; }
load() { cut -d' ' -f1 /proc/loadavg; }
[ "$(run nohooks hooks)" = False ] && [ "$(run hooks hooks)" = True ] || { echo "the builds are not what they say" >&2; exit 1; }
for i in $(seq 1 "$ROUNDS"); do
  for v in hooks nohooks nohooks hooks; do
    echo "$v $(load) $(run $v plain 8 4 | tail -1)"
  done
done > "$WORK/plain.txt"
for i in 1 2 3; do
  echo "flag $(load) $(run hooks flag 6 4 | tail -1)"
done > "$WORK/flag.txt"
"$PY" bench/trace_overhead.py summarize "$WORK/plain.txt"
"$PY" bench/trace_overhead.py summarize "$WORK/flag.txt"
g++ -O3 -std=c++17 -Icsrc bench/hook_cost.cc csrc/trace/recorder.cc -o "$WORK/hook_cost"
"$PY" bench/trace_overhead.py bound "$("$WORK/hook_cost")" "$WORK/flag.txt" "$WORK/plain.txt"
echo "raw lines: $WORK/plain.txt $WORK/flag.txt"
