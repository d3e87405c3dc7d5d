"""Data parallelism on pycollect's engine, two ways side by side (as picotron does):

- bucketed.py: DistributedDataParallel, the one to use: bucketed asynchronous all-reduces
  launched from gradient hooks, overlapping backward, `no_sync()`, unused parameters.
- naive.py: NaiveDistributedDataParallel, the one to read: one all-reduce per parameter
  after backward.

    from pycollect.ddp import DistributedDataParallel
    model = DistributedDataParallel(model)     # rank 0's weights everywhere; backward averages .grad
"""
from .bucketed import FIRST_BUCKET_BYTES, DistributedDataParallel, assign_buckets, check_same_parameters
from .naive import NaiveDistributedDataParallel

__all__ = ["DistributedDataParallel", "NaiveDistributedDataParallel", "FIRST_BUCKET_BYTES", "assign_buckets",
           "check_same_parameters"]
