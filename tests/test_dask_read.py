"""from_array: one read task per block, one batched store call per task, cheap graphs."""

from __future__ import annotations

import math
import time

import dask
import numpy as np
import pytest

import zarr3_backend as z3
from zarr3_backend.dask import from_array
from zarr3_backend.errors import ShapeError
from zarr3_backend.stores import MemoryStore


class CountingStore(MemoryStore):
    """A MemoryStore that records every read call and the keys it asked for."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    def get(self, key, byte_range=None):
        self.calls.append(("get", (key,)))
        return super().get(key, byte_range)

    def get_many(self, keys):
        self.calls.append(("get_many", tuple(keys)))
        return [MemoryStore.get(self, k) for k in keys]

    def get_partial_values(self, key_ranges):
        self.calls.append(("get_partial_values", tuple(k for k, _ in key_ranges)))
        return [MemoryStore.get(self, k, r) for k, r in key_ranges]

    def exists(self, key):
        self.calls.append(("exists", (key,)))
        return super().exists(key)

    def list(self):
        self.calls.append(("list", ()))
        return super().list()


def make_array(store, shape=(10, 12), chunks=(2, 3), shards=(4, 6), dtype="float32"):
    a = z3.create_array(
        store,
        "v",
        shape=shape,
        dtype=dtype,
        chunks=chunks,
        shards=shards,
        dimension_names=("y", "x")[: len(shape)],
    )
    data = np.arange(math.prod(shape), dtype=dtype).reshape(shape)
    a[...] = data
    return a, data


@pytest.mark.parametrize("shards", [(4, 6), None])
def test_shards_gives_one_block_per_stored_object(shards):
    a, data = make_array(MemoryStore(), shards=shards)
    d = from_array(a, chunks="shards")
    unit = a.storage_chunks
    assert unit == (shards or a.chunks)
    for sizes, n, u in zip(d.chunks, a.shape, unit, strict=True):
        assert sizes == (u,) * (n // u) + ((n % u,) if n % u else ())
    assert d.numblocks == tuple(math.ceil(n / u) for n, u in zip(a.shape, unit, strict=True))
    np.testing.assert_array_equal(d.compute(), data)


def test_chunks_gives_one_block_per_inner_chunk_and_explicit_chunks_work():
    a, data = make_array(MemoryStore())
    inner = from_array(a, chunks="chunks")
    assert inner.numblocks == (5, 4)
    np.testing.assert_array_equal(inner.compute(), data)
    explicit = from_array(a, chunks={0: 5, 1: -1})
    assert explicit.chunks == ((5, 5), (12,))
    np.testing.assert_array_equal(explicit.compute(), data)
    auto = from_array(a, chunks="auto")
    assert all(c % u == 0 for c, u in zip(auto.chunksize, a.storage_chunks, strict=True) if c < a.shape[0])
    np.testing.assert_array_equal(auto.compute(), data)


def test_each_task_reads_its_block_with_one_batched_call():
    store = CountingStore()
    a, data = make_array(store, shards=None)
    store.calls.clear()
    d = from_array(a, chunks=(4, 6))  # 3 x 2 blocks, each covering 2 x 2 chunks (edge: 1 x 2)
    assert store.calls == []  # building the graph touches no key
    np.testing.assert_array_equal(d.compute(scheduler="sync"), data)
    assert [c[0] for c in store.calls] == ["get_many"] * 6
    assert sorted(len(keys) for _, keys in store.calls) == [2, 2, 4, 4, 4, 4]


def test_slicing_reads_only_the_blocks_it_needs():
    store = CountingStore()
    a, data = make_array(store, shards=None)
    store.calls.clear()
    d = from_array(a, chunks="chunks")
    np.testing.assert_array_equal(d[1:3, 2:5].compute(scheduler="sync"), data[1:3, 2:5])
    keys = {k for _, ks in store.calls for k in ks}
    assert keys == {"v/c/0/0", "v/c/0/1", "v/c/1/0", "v/c/1/1"}
    # strided and integer selections fused into the read still come back right
    np.testing.assert_array_equal(d[3, ::5].compute(), data[3, ::5])


def test_a_million_chunk_graph_builds_from_metadata_alone():
    store = CountingStore()
    a = z3.create_array(store, "big", shape=(1000, 1000), dtype="uint8", chunks=(1, 1))
    store.calls.clear()
    t0 = time.perf_counter()
    d = from_array(a, chunks="shards")
    elapsed = time.perf_counter() - t0
    print(f"from_array graph build for {d.npartitions} chunks: {elapsed * 1e3:.1f} ms")
    assert d.npartitions == 10**6
    assert store.calls == []
    assert len(d.dask.layers) <= 2  # one Blockwise layer (plus the array-like), not 10^6 entries
    np.testing.assert_array_equal(d[:2, :3].compute(), np.zeros((2, 3), "uint8"))  # never written: fill
    assert len({k for _, ks in store.calls for k in ks}) == 6


def test_every_call_gets_fresh_keys_unless_a_name_is_given():
    """Keys say nothing of the data, so a cluster holding an earlier read's results must never
    be asked for them again: every call is new; ``name=`` opts in to deterministic keys."""
    store = MemoryStore()
    a, data = make_array(store)
    again = z3.open_array(store, "v")
    first, second = from_array(a), from_array(again)
    assert first.name != second.name
    assert not set(first.__dask_keys__()[0]) & set(second.__dask_keys__()[0])
    assert from_array(a, name="v-read").name == from_array(again, name="v-read").name == "v-read"
    np.testing.assert_array_equal(from_array(a, name="v-read").compute(), data)


def test_zero_dimensional_and_empty_arrays():
    store = MemoryStore()
    s = z3.create_array(store, "s", shape=(), dtype="int32", fill_value=7)
    assert from_array(s).compute() == 7
    e = z3.create_array(store, "e", shape=(0, 4), dtype="float64", chunks=(2, 2))
    assert from_array(e).compute().shape == (0, 4)


def test_invalid_chunks_raise_a_shape_error_naming_the_array():
    a, _ = make_array(MemoryStore())
    with pytest.raises(ShapeError, match="'v'"):
        from_array(a, chunks=(3, 3, 3))


def test_threaded_scheduler_reads_concurrently_without_a_lock():
    a, data = make_array(MemoryStore(), shape=(40, 36))
    with dask.config.set(scheduler="threads", num_workers=4):
        np.testing.assert_array_equal(from_array(a).sum().compute(), data.sum())
