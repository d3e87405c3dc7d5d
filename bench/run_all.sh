#!/usr/bin/env bash
# The results table of docs/benchmark.md: every ring collective at 2 and 4 ranks,
# 8 B to 256 MiB, pycollect and Gloo in the same run; then the markdown summary.
set -euo pipefail
cd "$(dirname "$0")/.."
PC=.venv/bin/pycollect
mkdir -p bench/results
for g in 2 4; do
  $PC bench -o all_reduce -g "$g" -b 8 -e 256M -f 2 -n 5 -r 5 -w 2 --json "bench/results/all_reduce_g$g.json"
  for op in all_gather reduce_scatter; do
    $PC bench -o "$op" -g "$g" -b 1K -e 256M -f 4 -n 5 -r 5 -w 2 --json "bench/results/${op}_g$g.json"
  done
done
.venv/bin/python bench/summarize.py bench/results/*_g[24].json
