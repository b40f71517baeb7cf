"""Which read results the buffer pool recycles (``_slabs``): 1 MiB up to 64 MiB, or up to a
quarter of the pool's limit when that is larger (a whole array read again in a loop)."""

from __future__ import annotations

import numpy as np

import zarr3_backend as z3
from zarr3_backend import _slabs
from zarr3_backend.stores import MemoryStore

_MiB = 2**20


def _array(shape):
    a = z3.create_array(MemoryStore(), shape=shape, dtype="u1", chunks=(shape[0] // 4, shape[1]))
    a[...] = np.arange(np.prod(shape), dtype="u8").reshape(shape).astype("u1")
    return a


def test_a_large_whole_array_result_is_recycled_when_a_quarter_of_the_pool_holds_it(monkeypatch):
    monkeypatch.setattr(_slabs, "POOL", _slabs.BufferPool(400 * _MiB))
    a = _array((96, _MiB))  # a 96 MiB result: over 64 MiB, within a quarter of 400 MiB
    first = a[...]
    address = first.ctypes.data
    assert first.base is not None and _slabs.POOL.pooled_bytes >= 96 * _MiB
    del first
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
