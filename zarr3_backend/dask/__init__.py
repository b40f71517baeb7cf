"""The dask layer: graph builders that read and write zarr3_backend Arrays one storage unit per task.

``from_array(a, chunks="shards")`` gives one read task per shard (per chunk when unsharded);
``store(darr, a)`` one write task per target shard, after proving no two tasks share one.
"""

from .alignment import (
    aligned_sizes,
    check_alignment,
    check_deferred_edges,
    check_region_edges,
    prove_disjoint,
    split_sizes,
)
from .progress import compute_with_progress
from .read import BlockReader, from_array, resolve_chunks
from .tree import CountTree
from .write import DONE_PREFIX, WRITE_PREFIX, WriteDelayed, plan_chunks, store

__all__ = [
    "DONE_PREFIX",
    "WRITE_PREFIX",
    "BlockReader",
    "CountTree",
    "WriteDelayed",
    "aligned_sizes",
    "check_alignment",
    "check_deferred_edges",
    "check_region_edges",
    "compute_with_progress",
    "from_array",
    "plan_chunks",
    "prove_disjoint",
    "resolve_chunks",
    "split_sizes",
    "store",
]
