#!/usr/bin/env bash
# Tracing-off cost (docs/traces.md): builds the extension of BASE (default: the commit
# before the trace hooks) and of HEAD with the same cmake flags into /tmp, packs each with
# its own Python package, and times bench/trace_overhead.py with each in ABBA order
# (python -S and PYTHONPATH pick the package; the editable install is bypassed), then
# flag runs (tracing off/on in the same processes). Prints the summary.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${1:-107adb5}
ROUNDS=${ROUNDS:-6}
PY=$PWD/.venv/bin/python
SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
WORK=$(mktemp -d /tmp/trace_overhead.XXXX)
for v in base head; do
  rev=$([ $v = base ] && echo "$BASE" || echo HEAD)
  mkdir -p "$WORK/$v-src" "$WORK/$v-pkg"
  git archive "$rev" | tar -x -C "$WORK/$v-src"
  .venv/bin/cmake -S "$WORK/$v-src" -B "$WORK/$v-build" -G Ninja -DCMAKE_MAKE_PROGRAM="$PWD/.venv/bin/ninja" \
    -DPython_EXECUTABLE="$PY" -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)" -DCMAKE_BUILD_TYPE=Release > /dev/null
  .venv/bin/ninja -C "$WORK/$v-build" > /dev/null
  cp -r "$WORK/$v-src/pycollect" "$WORK/$v-pkg/"
  cp "$WORK/$v-build"/_C*.so "$WORK/$v-pkg/pycollect/"
done
load() { cut -d' ' -f1 /proc/loadavg; }
for i in $(seq 1 "$ROUNDS"); do
  for v in base head head base; do
    echo "$v $(load) $(PYTHONPATH=$WORK/$v-pkg:$SITE "$PY" -S bench/trace_overhead.py plain 8 4 | tail -1)"
  done
done > "$WORK/plain.txt"
for i in 1 2 3; do
  echo "flag $(load) $(PYTHONPATH=$WORK/head-pkg:$SITE "$PY" -S bench/trace_overhead.py flag 6 4 | tail -1)"
done > "$WORK/flag.txt"
"$PY" bench/trace_overhead.py summarize "$WORK/plain.txt"
"$PY" bench/trace_overhead.py summarize "$WORK/flag.txt"
echo "raw lines: $WORK/plain.txt $WORK/flag.txt"
