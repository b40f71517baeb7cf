"""The dask chunks the engine prefers for one array: one stored unit (shard, else chunk), or on
stores where each request is costly several whole units, so one task keeps many requests in
flight.

Pure: the caller says how many bytes one task may read (``settings.remote_task_bytes`` on a
store with ``costly_requests``, else 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def task_block(unit: Sequence[int], shape: Sequence[int], itemsize: int, task_bytes: int) -> tuple[int, ...]:
    """The shape of one task's block: whole stored units of shape ``unit``, as many as fit in
    ``task_bytes`` decoded bytes (at least one; ``task_bytes=0``: exactly one).

    The block grows from the last axis to the first, taking the whole extent of an axis before
    the next one, so each task reads a box of units that are neighbours in C order; an axis taken
    whole is its length (a multiple of the unit elsewhere), so every task boundary is a unit
    boundary: no unit is read by two tasks, and a writer of the same layout stays safe.
    """
    block = [int(u) for u in unit]
    nbytes = math.prod(block) * max(int(itemsize), 1)
    if task_bytes <= 0 or nbytes <= 0:
        return tuple(block)
    for axis in reversed(range(len(block))):
        units = -(-int(shape[axis]) // block[axis]) if block[axis] else 0
        if units <= 1:
            continue
        fit = task_bytes // nbytes
        if fit <= 1:
            break
        take = min(fit, units)
        block[axis] = int(shape[axis]) if take == units else block[axis] * take
        nbytes *= take
        if take < units:  # growing an earlier axis now would split the task into several boxes
            break
    return tuple(block)
