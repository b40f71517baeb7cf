"""The per-Array shard-index cache: one ranged request per repeated inner-chunk read on object
stores; own writes invalidate; reopening and stale-index detection see other writers."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import zarr3_backend as z3
from zarr3_backend.core.shard_index_cache import ShardIndexCache
from zarr3_backend.core.shard_view import ShardView


class RemoteLikeStore(z3.MemoryStore):
    """A memory store that behaves like an object store: counts ranged requests, caches indexes."""

    costly_requests = True

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.ranged = 0
        self.whole = 0  # values read whole

    def get_partial_values(self, key_ranges):
        self.ranged += len(key_ranges)
        return super().get_partial_values(key_ranges)

    def get_many(self, keys):
        self.whole += len(keys)
        return super().get_many(keys)


def make(store, **kw):
    a = z3.create_array(store, "x", shape=(16, 16), dtype="i4", chunks=(4, 4), shards=(8, 8), **kw)
    data = np.arange(256, dtype="i4").reshape(16, 16)
    a[...] = data
    return a, data


def _external_rewrite(store, data):
    """Rewrite the array as another process would: through another store object on the data."""
    b = z3.open_array(z3.MemoryStore(store._data), "x", mode="r+")
    b[...] = data


@pytest.mark.parametrize("round_trip", [0, 1 << 20], ids=["index-first", "whole-shard"])
def test_second_read_of_a_shard_costs_one_request(round_trip):
    store = RemoteLikeStore()
    a, data = make(store)
    store.ranged = store.whole = 0
    with z3.settings.using(round_trip_bytes=round_trip):
        assert a[0, 0] == data[0, 0]
    # the index, then the inner chunk; or the whole shard
    assert (store.ranged, store.whole) == ((2, 0) if round_trip == 0 else (0, 1))
    store.ranged = store.whole = 0
    assert a[5, 6] == data[5, 6]  # another inner chunk of the same shard: its index is cached
    assert (store.ranged, store.whole) == (1, 0)


def test_own_writes_invalidate():
    store = RemoteLikeStore()
    a, data = make(store)
    a[0, 0]  # caches the index of shard (0, 0)
    a[0:4, 0:4] = 0  # inner chunk (0, 0) becomes fill: the shard layout changes
    a[4, 4] = -5
    data[0:4, 0:4] = 0
    data[4, 4] = -5
    np.testing.assert_array_equal([[a[i, j] for j in range(8)] for i in range(8)], data[:8, :8])


def test_stores_without_the_flag_do_not_cache():
    a, _ = make(z3.MemoryStore())
    a[0, 0]
    assert a._pipeline.index_cache is None


def test_reopening_sees_shards_rewritten_elsewhere():
    store = RemoteLikeStore()
    a, data = make(store)
    a[0, 0]
    new = data * 1000 + 7
    new[0:4, 0:4] = 0  # an inner chunk that is now empty: offsets move
    _external_rewrite(store, new)
    again = z3.open_array(store, "x")
    np.testing.assert_array_equal(again[0:8, 0:8], new[0:8, 0:8])
    a.invalidate_cache()
    np.testing.assert_array_equal(a.oindex[[0, 5], [1, 6]], new[np.ix_([0, 5], [1, 6])])


def test_stale_cached_index_is_detected_and_reread():
    store = RemoteLikeStore()
    zstd = [{"name": "zstd", "configuration": {"level": 1, "checksum": True}}]
    a = z3.create_array(
        store, "x", shape=(16, 16), dtype="f8", chunks=(4, 4), shards=(8, 8), compressors=zstd
    )
    a[...] = np.random.default_rng(0).random((16, 16))
    a[1, 1]  # caches the index
    stale = a._pipeline.index_cache.get("x/c/0/0").copy()
    new = np.zeros((16, 16))
    new[5, 6] = 42.0  # compresses to other sizes: the shard's offsets move
    _external_rewrite(store, new)
    codec, spec = a._pipeline.chain.array_bytes, a._pipeline.chain.specs[-1]
    fresh = ShardView(
        codec.layout(spec), lambda ranges: [z3.MemoryStore.get(store, "x/c/0/0", r) for r in ranges]
    ).read_index()
    assert not np.array_equal(stale, fresh)
    assert a[5, 6] == 42.0  # the stale index fails its checks, then is re-read
    np.testing.assert_array_equal(a._pipeline.index_cache.get("x/c/0/0"), fresh)


def test_index_fetched_before_a_write_is_not_cached_after_it():
    cache = ShardIndexCache()
    generation = cache.generation  # a reader starts fetching
    cache.invalidate(["k"])  # a write happens meanwhile
    cache.put("k", np.zeros((2, 2), "u8"), generation)
    assert cache.get("k") is None
    cache.put("k", np.zeros((2, 2), "u8"), cache.generation)
    assert cache.get("k") is not None


def test_lru_is_bounded_in_bytes_and_pickles_empty():
    cache = ShardIndexCache(max_bytes=3 * 64)
    for i in range(10):
        cache.put(f"k{i}", np.zeros((4, 2), "u8"), cache.generation)  # 64 bytes each
    assert len(cache) == 3
    assert cache.get("k0") is None and cache.get("k9") is not None
    copy = pickle.loads(pickle.dumps(cache))
    assert len(copy) == 0 and copy.max_bytes == cache.max_bytes
    cache.invalidate()
    assert len(cache) == 0
