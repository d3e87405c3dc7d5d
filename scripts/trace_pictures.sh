#!/usr/bin/env bash
# Regenerates the timeline pictures of the docs (docs/img/trace_<op>_<algo>.png, and the
# matching Perfetto JSON under traces/): for each op of `pycollect trace`, one picture per
# algorithm of pc.Algo that the op accepts and the engine has (the others are reported
# and skipped), or one with "auto" for an op that offers no choice. Run it after adding
# an algorithm:   bash scripts/trace_pictures.sh [OUT_DIR]      (default docs/img)
# One setting for all, so the pictures compare: 32 MiB, 4 ranks, 1 MiB segments, the
# default links (shared memory on one host).
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${1:-docs/img}
LOG=$(mktemp)
ALGOS=$("$PY" -c "import pycollect as pc; print(' '.join(a.name.lower() for a in pc.Algo if a is not pc.Algo.AUTO))")
picture() {  # op algo -> 0 if drawn
  if "$PY" -m pycollect trace -o "$1" -s 32M -g 4 --algo "$2" --segment-bytes 1M --dpi 70 \
      --out traces --name "trace_$1_$2" > "$LOG" 2>&1; then
    mv "traces/trace_$1_$2.png" "$OUT/" && echo "$OUT/trace_$1_$2.png  (traces/trace_$1_$2.json)"
    return 0
  fi
  grep -q "takes no algorithm choice" "$LOG" ||  # an op without the choice: not worth a line
    echo "skipped $1 --algo $2: $(grep -E 'Error|pycollect trace:' "$LOG" | tail -1)"
  return 1
}
mkdir -p "$OUT" traces
for op in all_reduce all_gather reduce_scatter broadcast; do
  drawn=0
  for algo in $ALGOS; do
    picture "$op" "$algo" && drawn=1
  done
  [ "$drawn" = 1 ] || picture "$op" auto
done
rm -f "$LOG"
