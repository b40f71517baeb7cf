"""Which read results the buffer pool recycles (``_slabs``): 1 MiB up to 64 MiB, or up to a
quarter of the pool's limit when that is larger (a whole array read again in a loop)."""

from __future__ import annotations

import sys
import time

import numpy as np

import zarr3_backend as z3
from zarr3_backend import _slabs
from zarr3_backend.stores import MemoryStore

_MiB = 2**20


def _array(shape):
    a = z3.create_array(MemoryStore(), shape=shape, dtype="u1", chunks=(shape[0] // 4, shape[1]))
    a[...] = np.arange(np.prod(shape), dtype="u8").reshape(shape).astype("u1")
    return a


def _wait_until_free(pool, seconds=5.0):
    """Until no pooled buffer is referred to from outside the pool: a decode thread of the read
    can still hold the result it filled for a moment after the read returned (the executor
    drops its work item after waking the caller), and a buffer in use is not handed out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with pool._lock:
            busy = [raw for ring in pool._by_size.values() for raw, _ in ring if sys.getrefcount(raw) > 3]
        if not busy:
            return
        del busy
        time.sleep(0.01)


def test_a_large_whole_array_result_is_recycled_when_a_quarter_of_the_pool_holds_it(monkeypatch):
    monkeypatch.setattr(_slabs, "POOL", _slabs.BufferPool(400 * _MiB))
    a = _array((96, _MiB))  # a 96 MiB result: over 64 MiB, within a quarter of 400 MiB
    first = a[...]
    address = first.ctypes.data
    assert first.base is not None and _slabs.POOL.pooled_bytes >= 96 * _MiB
    del first
    _wait_until_free(_slabs.POOL)
    again = a[...]  # the first result's memory, handed out again (no fresh pages to fault in)
    assert again.ctypes.data == address
    np.testing.assert_array_equal(again, a[...])


def test_results_beyond_a_quarter_of_the_pool_and_64_mib_are_plain_allocations(monkeypatch):
    monkeypatch.setattr(_slabs, "POOL", _slabs.BufferPool(300 * _MiB))
    big = _slabs.empty((80 * _MiB,), np.dtype("u1"))  # 80 MiB > max(64 MiB, 75 MiB)
    assert big.base is None and _slabs.POOL.pooled_bytes == 0
    chunk = _slabs.empty((64 * _MiB,), np.dtype("u1"))  # up to 64 MiB: pooled whatever the quarter
    assert chunk.base is not None and _slabs.POOL.pooled_bytes > 0
    monkeypatch.setattr(_slabs, "POOL", _slabs.BufferPool(64 * _MiB))  # dask workers' limit
    assert _slabs.empty((16 * _MiB,), np.dtype("u1")).base is not None


def test_a_full_pool_forgets_free_buffers_of_other_sizes_for_the_size_asked_now():
    """One-off large results do not fill the pool for good: when a new size does not fit, free
    buffers (largest sizes first) are forgotten; buffers still referred to are kept."""
    pool = _slabs.BufferPool(cap_bytes=1064 + 4160 + 2112)  # full after the three below
    held = pool.take(1000)
    gone = [pool.take(4096), pool.take(2048)]
    del gone  # both free now
    assert pool.pooled_bytes == 1064 + 4160 + 2112
    new = pool.take(3000)  # does not fit: the free 4096 buffer goes (largest first), the 2048 stays
    assert new.base is not None and sorted(pool._by_size) == [1000, 2048, 3000]
    assert pool.pooled_bytes == 1064 + 2112 + 3064
    held[...] = 7  # still valid and still pooled
    assert held.base is pool._by_size[1000][0][0]
