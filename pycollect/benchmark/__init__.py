"""nccl-tests-style benchmark of pycollect against a peer (Gloo) in the same run.

The worker side (runner.py) times pycollect and the peer on the same tensors in
the same processes, block by block, interleaved, so that a noisy machine slows
both alike; the parent (launch.py) prints the table as rows arrive, then writes
JSON and a PNG plot.
"""
