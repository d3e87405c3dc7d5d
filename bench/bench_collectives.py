"""nccl-tests-style collective benchmark against Gloo; same flags as `pycollect bench`.

    python bench/bench_collectives.py -b 8 -e 64M -f 2 -o all_reduce -g 2
"""
import sys

from pycollect.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
